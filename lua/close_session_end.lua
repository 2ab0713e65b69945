-- simba (Cluster): close, last call, on the session's slot: deletes the indexes.
-- KEYS[1] simba:session:{sid}:leases, KEYS[2] simba:session:{sid}:groups
-- Returns 1.
redis.call('DEL', KEYS[1], KEYS[2])
return 1
