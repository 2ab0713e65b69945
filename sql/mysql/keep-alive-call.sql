-- The keep-alive in one round trip: the stored procedure of init-simba-mysql.sql renews the
-- session (or deletes it when expired), judging expiry with database time read after the session
-- row's lock is granted, and returns what it owns and the groups it is a member of.
-- ? session id, ? lease duration (ms).
-- One result set of (remaining ms, lease name, token, group name, before ms) rows, like
-- keep-alive-read.sql and the time found left (before ms):
-- one per owned lease (group name NULL) — one row with NULL name/token/group when the session
-- owns none — plus one per membership (lease name and token NULL); no row when it is expired or
-- unknown.
CALL simba_keep_alive_v4(?, ?)
