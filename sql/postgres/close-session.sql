-- Deletes the session, releases its leases (tokens kept) and removes its memberships, atomically.
-- Idempotent. $1 session id. In the same statement, so only a committed close notifies: every
-- lease it frees is announced on the channel simba_release (payload: the lease name), every group
-- it leaves on the channel simba_members (payload: the group name).
with closed as (
    delete from simba_session where session_id = $1
),
released as (
    update simba_lease set session_id = '' where session_id = $1
    returning name
),
unjoined as (
    delete from simba_member where session_id = $1
    returning group_name
),
announced as (
    select 'simba_release' as channel, name::text as payload from released
    union all
    select 'simba_members', group_name::text from unjoined
)
select pg_notify(channel, payload)
from announced
