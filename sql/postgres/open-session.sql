-- $1 session id, $2 lease duration (ms), $3 metadata.
insert into simba_session (session_id, expires_at, metadata)
values ($1, (extract(epoch from statement_timestamp()) * 1000)::bigint + $2::bigint, $3::varchar)
