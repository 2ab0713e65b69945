-- Purge, step 2b (in the purge's transaction): announces the leases the purged sessions still name
-- as holder on the channel simba_release (payload: the lease name). They have been free since their
-- holder expired; the notification wakes waiters that would otherwise find out at their next poll.
-- Sent only if the purge commits. $1 session ids.
select pg_notify('simba_release', name::text)
from simba_lease
where session_id = any($1)
