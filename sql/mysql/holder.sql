-- The live holder of a lease. ? lease name.
SELECT l.session_id,
       l.token,
       s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
       s.metadata
FROM simba_lease l
JOIN simba_session s ON s.session_id = l.session_id
WHERE l.name = ?
  AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
