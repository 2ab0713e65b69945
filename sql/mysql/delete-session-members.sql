-- Close (step 3) and expired keep-alive: remove the session's memberships. ? session id.
DELETE FROM simba_member
WHERE session_id = ?
