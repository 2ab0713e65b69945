-- Deletes the session, releases its leases (tokens kept) and removes its memberships, atomically.
-- Idempotent. $1 session id. Every lease it frees is announced on the channel simba_release
-- (payload: the lease name) in the same statement, so only a committed close notifies.
with closed as (
    delete from simba_session where session_id = $1
),
released as (
    update simba_lease set session_id = '' where session_id = $1
    returning name
),
unjoined as (
    delete from simba_member where session_id = $1
)
select pg_notify('simba_release', name::text)
from released
