-- Adds a live session to a group. The session row is read LOCK IN SHARE MODE so a concurrent purge
-- cannot delete the session between the check and the insert. ? group name, ? session id.
-- Affected rows: 1 = joined, 0 = already a member or the session is not alive (see session-alive.sql).
INSERT INTO simba_member (group_name, session_id)
SELECT ?, s.session_id
FROM simba_session s
WHERE s.session_id = ?
  AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE session_id = simba_member.session_id
