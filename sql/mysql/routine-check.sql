-- Which of the procedures of init-simba-mysql.sql that this version calls (simba_keep_alive_v4,
-- simba_acquire_v2; an older simba_keep_alive_v3, v2 or v1, or simba_acquire_v1, left by a previous
-- version does not count)
-- exist in the current database and this user can see (information_schema lists a routine only
-- to users with a privilege on it, e.g. EXECUTE). One row per procedure found: its name.
SELECT routine_name
FROM information_schema.routines
WHERE routine_schema = DATABASE()
  AND routine_type = 'PROCEDURE'
  AND routine_name IN ('simba_keep_alive_v4', 'simba_acquire_v2')
ORDER BY routine_name
