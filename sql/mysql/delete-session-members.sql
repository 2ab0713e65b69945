-- Close (step 3) and the fallback keep-alive of an expired session: remove the session's memberships.
-- ? session id.
DELETE FROM simba_member
WHERE session_id = ?
