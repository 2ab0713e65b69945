-- Listing (simba status), sessions: the live sessions (live as in session-alive.sql) with their
-- remaining ms and metadata, by session id. Parameters: the scan budget (twice), the most rows to
-- return (the caller asks for one more than it lists, to know whether there are more). Bounded on
-- the server: the scan reads the primary key in its order (no sort) and stops at its budget's row
-- (expired sessions not purged yet count). The last column is the row's place in the scan; the
-- budget's row is returned even when it has expired (remaining ms 0 or less): a row numbered with
-- the budget says the scan stopped there, and live sessions after it are not listed.
SELECT scan.session_id,
       scan.remaining,
       scan.metadata,
       scan.nth
FROM (SELECT s.session_id,
             s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) AS remaining,
             s.metadata,
             ROW_NUMBER() OVER (ORDER BY s.session_id)                     AS nth
      FROM (SELECT session_id, expires_at, metadata
            FROM simba_session
            ORDER BY session_id
            LIMIT ?) s) scan
WHERE scan.remaining > 0
   OR scan.nth = ?
ORDER BY scan.session_id
LIMIT ?
