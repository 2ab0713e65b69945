-- Whether the keep-alive procedure of init-simba-mysql.sql exists in the current database
-- (and this user can see it). 1 or 0.
SELECT COUNT(*)
FROM information_schema.routines
WHERE routine_schema = DATABASE()
  AND routine_type = 'PROCEDURE'
  AND routine_name = 'simba_keep_alive_v1'
