-- Purge, step 2: the memberships of the locked sessions. $1 session ids.
delete from simba_member
where session_id = any($1)
