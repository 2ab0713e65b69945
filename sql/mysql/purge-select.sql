-- Purge, step 1 (in a transaction): lock up to ? expired sessions, oldest first, along
-- idx_session_expires. Returns their expiry times; the largest is the cutoff for steps 2 and 3.
SELECT session_id, expires_at
FROM simba_session
WHERE expires_at < CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
ORDER BY expires_at, session_id
LIMIT ?
FOR UPDATE
