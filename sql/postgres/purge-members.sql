-- Purge, step 2: the memberships of the locked sessions. $1 session ids.
-- Each group they leave is announced on the channel simba_members (payload: the group name); the
-- sessions have not counted as members since they expired, so this only wakes group watchers that
-- would otherwise find out at their next re-read. Sent only if the purge commits (PostgreSQL
-- delivers one notification per distinct channel and payload of a transaction).
with unjoined as (
    delete from simba_member
    where session_id = any($1)
    returning group_name
)
select pg_notify('simba_members', group_name::text)
from unjoined
