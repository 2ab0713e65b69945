-- Purge, step 1 on servers with SKIP LOCKED (MySQL 8, MariaDB 10.6+; detected at connect), in a
-- READ COMMITTED transaction: picks up to ? expired sessions, oldest first along
-- idx_session_expires, with a plain read (the derived table: no lock, no wait), then locks exactly
-- those rows by primary key, skipping rows another transaction holds (a keep-alive judging its own
-- expiry, a takeover reading a holder's row, a join) and rows renewed since the pick: the purge
-- never waits for them, and they never wait for the purge beyond its own short transaction.
-- Returns their ids for steps 2 and 3. A locking range scan of idx_session_expires instead also
-- locks the first entry past the range, the live session that expires next, until the purge
-- commits (seen on MariaDB 10.11): that session's keep-alive (its UPDATE moves the entry) waited
-- for a purge that waited (tests: backends::sql::purge_tests, a hung run).
SELECT s.session_id
FROM (SELECT session_id
      FROM simba_session
      WHERE expires_at < CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
      ORDER BY expires_at, session_id
      LIMIT ?) AS e
STRAIGHT_JOIN simba_session s FORCE INDEX (PRIMARY) ON s.session_id = e.session_id
WHERE s.expires_at < CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
FOR UPDATE SKIP LOCKED
