-- The acquire in one round trip: the stored procedure simba_acquire_v2 of init-simba-mysql.sql takes
-- a free or new lease with one upsert, and otherwise runs the read of acquire-observe.sql and, when
-- the lease looks takeable, the upsert of acquire.sql.
-- ? session id, ? lease name.
-- One row: (remaining ms of this session, NULL when it is not alive; token, NULL when busy).
CALL simba_acquire_v2(?, ?)
