-- simba (Cluster): remove names from one of a session's indexes (session's slot).
-- KEYS[1] simba:session:{sid}:leases or simba:session:{sid}:groups; for the lease index also
-- KEYS[2] simba:session:{sid}, whose `gen` is bumped when a name left (renewals list it again).
-- ARGV names to remove
-- Returns how many were removed.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('SREM', KEYS[1], ARGV[i])
end
if n > 0 and KEYS[2] then
  redis.call('HINCRBY', KEYS[2], 'gen', 1)
end
return n
