-- simba (Cluster): close, first call, on the session's slot. Deletes the session first and returns
-- its indexes; the client then releases leases and memberships slot by slot and finally calls
-- close_session_end. A repeated close after a failure finds the indexes again and finishes.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases, KEYS[3] simba:session:{sid}:groups
-- Returns {{lease names}, {group names}}.
redis.call('DEL', KEYS[1])
return {redis.call('SMEMBERS', KEYS[2]), redis.call('SMEMBERS', KEYS[3])}
