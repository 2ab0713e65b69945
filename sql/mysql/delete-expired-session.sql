-- Fallback keep-alive (without the procedure of keep-alive-call.sql): a keep-alive that finds its
-- session expired deletes it (lease rows stay), in the transaction holding the row lock. ? session id.
DELETE FROM simba_session
WHERE session_id = ?
  AND expires_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
