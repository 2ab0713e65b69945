-- Semaphore limit step 1: stores the limit when the semaphore has none (a duplicate key keeps the
-- stored row unchanged: the no-op assignment). ? semaphore name, ? permits. Step 2 is
-- semaphore-limit-read.sql: a stored limit never changes, so the read after this statement returns
-- the row that won, this one or a concurrent first insert.
INSERT INTO simba_semaphore (name, permits)
VALUES (?, ?)
ON DUPLICATE KEY UPDATE permits = permits
