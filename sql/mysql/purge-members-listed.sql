-- Purge, step 2 (SKIP LOCKED servers): the memberships of exactly the sessions step 1 locked.
-- ? their ids as a JSON array of strings (JSON_TABLE: MySQL 8, MariaDB 10.6+, the same servers
-- that have SKIP LOCKED). STRAIGHT_JOIN makes the list drive the join, so only those sessions'
-- rows are touched (idx_member_session): on small tables the optimizer would otherwise scan
-- simba_member and wait for rows another transaction holds (seen on MariaDB 10.11).
DELETE m
FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) AS j
STRAIGHT_JOIN simba_member m ON m.session_id = j.id
