-- simba (Cluster): acquire, first call, on the session's slot. Checks the session is alive and
-- indexes the name first, so a renewal running meanwhile covers the term. A name new to the index
-- bumps the index's generation (`gen` in the session hash), so the next renewal lists it again.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases
-- ARGV[1] lease name
-- Returns {-1} when the session is gone, else {remaining_ms, lease duration in ms}.
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return {-1}
end
local d = tonumber(redis.call('HGET', KEYS[1], 'duration') or pttl)
-- The index expires one lease duration after the session: every call that creates it or renews
-- the session sets its TTL so, so a name already in it needs no PEXPIRE.
if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
  redis.call('HINCRBY', KEYS[1], 'gen', 1)
  redis.call('PEXPIRE', KEYS[2], pttl + d)
end
return {pttl, d}
