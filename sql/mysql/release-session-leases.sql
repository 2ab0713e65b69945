-- Close, step 2: release every lease of the session; tokens stay. ? session id.
UPDATE simba_lease
SET session_id = ''
WHERE session_id = ?
