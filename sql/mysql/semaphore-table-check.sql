-- Whether the semaphore table (added after the first release) exists in the current database: 1 or 0.
SELECT COUNT(*)
FROM information_schema.tables
WHERE table_schema = DATABASE()
  AND table_name = 'simba_semaphore'
