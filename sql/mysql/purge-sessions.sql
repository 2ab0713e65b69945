-- Purge, step 3: the locked sessions themselves (same order and limit as step 1, so the same rows;
-- lease rows and tokens stay). ? cutoff, ? limit.
DELETE FROM simba_session
WHERE expires_at <= ?
ORDER BY expires_at, session_id
LIMIT ?
