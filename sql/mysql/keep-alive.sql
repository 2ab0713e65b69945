-- Fallback keep-alive, step 2 (only while the procedure simba_keep_alive_v4 of
-- init-simba-mysql.sql is missing or not executable; see keep-alive-call.sql), in the transaction
-- that keep-alive-lock.sql began: one UPDATE renews the session and with it every lease and
-- membership it holds. The row is already locked, so this statement's NOW(3) is read after the
-- lock was granted: a session that expired while the lock was awaited is not renewed.
-- ? lease duration (ms), ? session id.
UPDATE simba_session
SET expires_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?
WHERE session_id = ?
  AND expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
