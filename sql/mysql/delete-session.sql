-- Close, step 1: delete the session. ? session id.
DELETE FROM simba_session
WHERE session_id = ?
