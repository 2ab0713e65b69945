-- Frees the lease if this session holds it; the token stays. ? lease name, ? session id.
UPDATE simba_lease
SET session_id = ''
WHERE name = ?
  AND session_id = ?
