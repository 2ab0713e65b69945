-- Whether a session is alive. ? session id.
SELECT COUNT(*)
FROM simba_session
WHERE session_id = ?
  AND expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
