-- Purge, step 3: the locked sessions themselves (lease rows and tokens stay). $1 session ids.
delete from simba_session
where session_id = any($1)
