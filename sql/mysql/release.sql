-- Frees the lease if this session holds it in the term of the given token; the token stays (a late
-- release can never free a newer term). ? lease name, ? session id, ? token.
UPDATE simba_lease
SET session_id = ''
WHERE name = ?
  AND session_id = ?
  AND token = ?
