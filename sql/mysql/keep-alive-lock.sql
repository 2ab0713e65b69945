-- Fallback keep-alive, step 1 (only while the procedure simba_keep_alive_v4 of
-- init-simba-mysql.sql is missing or not executable; see keep-alive-call.sql), the first statement
-- of its transaction: lock the session row (waiting for a takeover that holds it in share mode), so
-- that the renewal that follows judges expiry with a NOW(3) read after the lock was granted.
-- ? session id. One row: 1 when the session row exists (alive or not), 0 when it does not.
SELECT COUNT(*)
FROM simba_session
WHERE session_id = ?
FOR UPDATE
