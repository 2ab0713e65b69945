-- Fallback keep-alive, step 2 (without the procedure of keep-alive-call.sql), after the renewal
-- (a separate statement, so it sees every takeover that committed before it):
-- the session's remaining time (ms) and every lease it owns; no row when the session is not alive.
-- ? session id.
SELECT s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), l.name, l.token
FROM simba_session s
LEFT JOIN simba_lease l ON l.session_id = s.session_id
WHERE s.session_id = ?
  AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
