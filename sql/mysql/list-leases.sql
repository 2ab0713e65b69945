-- Listing (simba status), held leases: the leases named from ? (inclusive) to ? (exclusive) that
-- a live session holds, with that holder's session id, token, remaining ms and metadata (live as
-- in holder.sql), in name order. Parameters: from, to, the scan budget (twice), the most rows to
-- return (the caller asks for one more than it lists, to know whether there are more). Bounded on
-- the server: the scan reads the primary key's range in its order (no sort) and stops at its
-- budget's row (free leases and leases of expired holders count: lease rows are never deleted);
-- each holder is looked up by its session's primary key. The last column is the row's place in the
-- scan; the budget's row is returned even when no live session holds it (its holder columns NULL):
-- a row numbered with the budget says the scan stopped there, and held leases after it are not
-- listed.
SELECT scan.name,
       scan.session_id,
       scan.token,
       s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
       s.metadata,
       scan.nth
FROM (SELECT l.name, l.session_id, l.token, ROW_NUMBER() OVER (ORDER BY l.name) AS nth
      FROM (SELECT name, session_id, token
            FROM simba_lease
            WHERE name >= ?
              AND name < ?
            ORDER BY name
            LIMIT ?) l) scan
LEFT JOIN simba_session s
       ON s.session_id = scan.session_id
      AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
WHERE s.session_id IS NOT NULL
   OR scan.nth = ?
ORDER BY scan.name
LIMIT ?
