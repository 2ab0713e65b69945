-- What a just-renewed session still owns (a separate statement, so it sees every takeover that
-- committed before the renewal). $1 session id.
select name::text, token
from simba_lease
where session_id = $1
