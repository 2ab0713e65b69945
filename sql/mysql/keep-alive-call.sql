-- The keep-alive in one round trip: the stored procedure of init-simba-mysql.sql renews the
-- session (or deletes it when expired) and returns what it owns.
-- ? session id, ? lease duration (ms).
-- One result set: (remaining ms, lease name, token) per owned lease, one row with NULL name/token
-- when the session owns none, no row when it is expired or unknown.
CALL simba_keep_alive_v1(?, ?)
