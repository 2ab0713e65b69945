-- Fallback keep-alive, step 1 (only while the procedure simba_keep_alive_v2 of
-- init-simba-mysql.sql is missing or not executable; see keep-alive-call.sql): one UPDATE renews
-- the session and with it every lease and membership it holds.
-- ? lease duration (ms), ? session id.
UPDATE simba_session
SET expires_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?
WHERE session_id = ?
  AND expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
