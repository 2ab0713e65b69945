-- Deletes the session, releases its leases (tokens kept) and removes its memberships, atomically.
-- Idempotent. $1 session id.
with closed as (
    delete from simba_session where session_id = $1
),
released as (
    update simba_lease set session_id = '' where session_id = $1
)
delete from simba_member
where session_id = $1
