-- Whether the keep-alive procedure of init-simba-mysql.sql that this version calls
-- (simba_keep_alive_v3; an older simba_keep_alive_v2 or v1 left by a previous version does not count)
-- exists in the current database and this user can see it (information_schema lists a routine
-- only to users with a privilege on it, e.g. EXECUTE). 1 or 0.
SELECT COUNT(*)
FROM information_schema.routines
WHERE routine_schema = DATABASE()
  AND routine_type = 'PROCEDURE'
  AND routine_name = 'simba_keep_alive_v3'
