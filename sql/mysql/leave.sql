-- Removes a session from a group (idempotent). ? group name, ? session id.
DELETE FROM simba_member
WHERE group_name = ?
  AND session_id = ?
