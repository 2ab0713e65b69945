-- The database clock as UTC epoch milliseconds (time-zone independent).
SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
