-- simba (Cluster): remove names from one of a session's indexes (session's slot).
-- KEYS[1] simba:session:{sid}:leases or simba:session:{sid}:groups
-- ARGV names to remove
-- Returns how many were removed.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('SREM', KEYS[1], ARGV[i])
end
return n
