-- Members of a group whose sessions are alive, by session id. ? group name.
SELECT m.session_id, s.metadata
FROM simba_member m
JOIN simba_session s ON s.session_id = m.session_id
WHERE m.group_name = ?
  AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
ORDER BY m.session_id
