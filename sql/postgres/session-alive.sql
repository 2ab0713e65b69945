-- Whether a session is alive. $1 session id.
select count(*)::bigint
from simba_session
where session_id = $1
  and expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
