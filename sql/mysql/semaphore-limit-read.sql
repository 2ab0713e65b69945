-- The stored limit of a semaphore, if any (stores nothing). ? semaphore name.
SELECT permits
FROM simba_semaphore
WHERE name = ?
