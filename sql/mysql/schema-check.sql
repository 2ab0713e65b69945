-- How many of the three Simba tables exist in the current database.
SELECT COUNT(*)
FROM information_schema.tables
WHERE table_schema = DATABASE()
  AND table_name IN ('simba_session', 'simba_lease', 'simba_member')
