-- simba (Cluster): remove names from one of a session's indexes (session's slot).
-- KEYS[1] simba:session:{sid}:leases or simba:session:{sid}:groups; for the lease index also
-- KEYS[2] simba:session:{sid}, whose `gen` is bumped when a name left (renewals list it again)
-- while the session lives.
-- ARGV names to remove
-- Returns how many were removed.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('SREM', KEYS[1], ARGV[i])
end
-- Only while the session lives: HINCRBY on a key that expired would create it again, without an
-- expiry (a session hash that never goes away).
if n > 0 and KEYS[2] and redis.call('PTTL', KEYS[2]) > 0 then
  redis.call('HINCRBY', KEYS[2], 'gen', 1)
end
return n
