-- Acquire, step 1 (plain read): is this session alive, who holds the lease, is that holder alive?
-- ? lease name, ? session id.
-- No row: this session is not alive. Otherwise: remaining ms of this session, the lease's session id
-- and token (NULL when the lease never existed), and 1 when another live session holds it.
SELECT me.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
       l.session_id,
       l.token,
       h.session_id IS NOT NULL
FROM simba_session me
LEFT JOIN simba_lease l ON l.name = ?
LEFT JOIN simba_session h
       ON h.session_id = l.session_id
      AND h.session_id <> me.session_id
      AND h.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
WHERE me.session_id = ?
  AND me.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
