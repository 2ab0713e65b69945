-- Someone else's session row whose id is not hex, alive for an hour. $1 session id.
INSERT INTO simba_session (session_id, expires_at, metadata)
VALUES ($1, (extract(epoch from statement_timestamp()) * 1000)::bigint + 3600000, 'intruder')
