-- Purge, step 3 (SKIP LOCKED servers): exactly the sessions step 1 locked (lease rows and tokens
-- stay). ? their ids as a JSON array of strings. STRAIGHT_JOIN: the list drives primary-key
-- lookups; a scan of simba_session (the optimizer's choice on small tables) would wait for the
-- rows step 1 skipped (seen on MariaDB 10.11).
DELETE s
FROM JSON_TABLE(?, '$[*]' COLUMNS (id CHAR(32) CHARACTER SET ascii COLLATE ascii_bin PATH '$')) AS j
STRAIGHT_JOIN simba_session s ON s.session_id = j.id
