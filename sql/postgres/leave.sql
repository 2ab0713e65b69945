-- Removes a session from a group (idempotent). $1 session id, $2 group name.
-- A removed member row is announced on the channel simba_members (payload: the group name) in the
-- same statement, so only a committed leave of a member notifies (see listen.sql).
with unjoined as (
    delete from simba_member
    where group_name = $2::varchar
      and session_id = $1
    returning group_name
)
select pg_notify('simba_members', group_name::text)
from unjoined
