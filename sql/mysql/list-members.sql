-- Listing (simba status), groups: the live members (live as in members.sql) of the groups named
-- from ? (inclusive) to ? (exclusive), as (group name, session id, metadata, scanned) rows by group
-- name and session id. Parameters: from, to, the scan budget, the most members of a group, the
-- most groups (the caller asks for one more of each than it lists, to know whether there are
-- more). Bounded on the server: the scan reads the primary key's range in its order and stops at
-- its budget's membership (those of expired sessions count); each member's session is looked up by
-- its primary key (STRAIGHT_JOIN: the join order as written), and the window functions (MySQL 8,
-- MariaDB 10.2+) number the live ones. "scanned" (the same on every row) is how many memberships
-- the scan read: the budget says it stopped there, and groups after that are not listed. With no
-- live member the one row is (NULL, NULL, NULL, scanned).
WITH scan AS (SELECT group_name, session_id
              FROM simba_member
              WHERE group_name >= ?
                AND group_name < ?
              ORDER BY group_name, session_id
              LIMIT ?)
SELECT live.group_name,
       live.session_id,
       live.metadata,
       scanned.n
FROM (SELECT COUNT(*) AS n FROM scan) scanned
LEFT JOIN (SELECT STRAIGHT_JOIN
                  scan.group_name,
                  scan.session_id,
                  s.metadata,
                  ROW_NUMBER() OVER (PARTITION BY scan.group_name ORDER BY scan.session_id) AS nth,
                  DENSE_RANK() OVER (ORDER BY scan.group_name)                              AS group_nth
           FROM scan
           JOIN simba_session s ON s.session_id = scan.session_id
           WHERE s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)) live
       ON live.nth <= ?
      AND live.group_nth <= ?
ORDER BY live.group_name, live.session_id
