-- simba (Cluster): renewal, first call, on the session's slot. Renews the session and its indexes,
-- drops index entries the client found lost, and returns what the follow-up calls must renew.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases, KEYS[3] simba:session:{sid}:groups
-- ARGV[1] lease duration in ms, ARGV[2] number n of lease names to drop, ARGV[3 .. 2+n] those lease
-- names, ARGV[3+n ..] group names to drop.
-- Returns {-1} when the session is gone, else {remaining_ms, {lease names}, {group names}}.
local d = tonumber(ARGV[1])
-- PTTL, not EXISTS, as every other session check: in the millisecond of its expiry the key still
-- exists but its PTTL is 0, which acquire, join and session_info already take as gone.
if redis.call('PTTL', KEYS[1]) <= 0 then
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], d)
local n = tonumber(ARGV[2])
for i = 3, 2 + n do
  redis.call('SREM', KEYS[2], ARGV[i])
end
for i = 3 + n, #ARGV do
  redis.call('SREM', KEYS[3], ARGV[i])
end
redis.call('PEXPIRE', KEYS[2], 2 * d)
redis.call('PEXPIRE', KEYS[3], 2 * d)
return {d, redis.call('SMEMBERS', KEYS[2]), redis.call('SMEMBERS', KEYS[3])}
