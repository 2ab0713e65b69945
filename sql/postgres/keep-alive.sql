-- One UPDATE renews the session and with it every lease and membership it holds.
-- $1 session id, $2 lease duration (ms). Returns the remaining time (ms), or no row when expired/unknown.
update simba_session
set expires_at = (extract(epoch from statement_timestamp()) * 1000)::bigint + $2::bigint
where session_id = $1
  and expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
returning expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint
