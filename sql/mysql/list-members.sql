-- Listing (simba status), groups: the live members (live as in members.sql) of the groups named
-- from ? (inclusive) to ? (exclusive), as (group name, session id, metadata, scanned) rows by group
-- name and session id. Parameters: from, to, the scan budget, the most members of a group, the
-- most groups (the caller asks for one more of each than it lists, to know whether there are more).
-- Bounded on the server: the scan (STRAIGHT_JOIN: the join order as written) reads the primary
-- key's range in its order, each member's session looked up by its primary key, and stops at its
-- budget's live membership (the memberships of expired sessions, deleted by the purge, are
-- skipped); the window functions (MySQL 8, MariaDB 10.2+) number those rows only. "scanned" (the
-- same on every row) is how many live memberships the scan took: the budget says it stopped there,
-- and groups after that are not listed.
SELECT live.group_name,
       live.session_id,
       live.metadata,
       live.scanned
FROM (SELECT scan.group_name,
             scan.session_id,
             scan.metadata,
             ROW_NUMBER() OVER (PARTITION BY scan.group_name ORDER BY scan.session_id) AS nth,
             DENSE_RANK() OVER (ORDER BY scan.group_name)                              AS group_nth,
             COUNT(*) OVER ()                                                          AS scanned
      FROM (SELECT STRAIGHT_JOIN m.group_name, m.session_id, s.metadata
            FROM simba_member m
            JOIN simba_session s ON s.session_id = m.session_id
            WHERE m.group_name >= ?
              AND m.group_name < ?
              AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
            ORDER BY m.group_name, m.session_id
            LIMIT ?) scan) live
WHERE live.nth <= ?
  AND live.group_nth <= ?
ORDER BY live.group_name, live.session_id
