-- Purge, step 1 on servers with SKIP LOCKED (MySQL 8, MariaDB 10.6+; detected at connect), in a
-- READ COMMITTED transaction: lock up to ? expired sessions, oldest first, along
-- idx_session_expires, skipping rows another transaction holds (a keep-alive judging its own
-- expiry, a takeover reading a holder's row, a join): the purge never waits for them, and they
-- never wait for the purge beyond its own short transaction. Returns their ids for steps 2 and 3.
SELECT session_id
FROM simba_session
WHERE expires_at < CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
ORDER BY expires_at, session_id
LIMIT ?
FOR UPDATE SKIP LOCKED
