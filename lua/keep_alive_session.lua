-- simba (Cluster): renewal, first call, on the session's slot. Renews the session and its indexes,
-- drops index entries the client found lost, and returns what the follow-up calls must renew. The
-- lease index is listed only when its generation (`gen` in the session hash, bumped by every
-- change of the index) differs from the one the client names: otherwise the client's last
-- listing is still the index (at 10,000 leases the listing is most of this call's cost).
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases, KEYS[3] simba:session:{sid}:groups
-- ARGV[1] lease duration in ms, ARGV[2] the gen of the client's last listing ('' for none),
-- ARGV[3] number n of lease names to drop, ARGV[4] number m of group names to drop, ARGV[5]
-- number a of lease names to index again, then those n, m and a names, then the group names to
-- index again. (A name is indexed again when the client acquired or joined it while a renewal
-- dropped it: the acquire's or join's own SADD may have come first.)
-- Returns {-1} when the session is gone, else {remaining_ms, gen, {lease names} or false (nil:
-- unchanged since the client's listing), {group names}, before_ms} (before_ms: the session's PTTL
-- when the script found it, before renewing).
local d = tonumber(ARGV[1])
-- PTTL, not EXISTS, as every other session check: in the millisecond of its expiry the key still
-- exists but its PTTL is 0, which acquire, join and session_info already take as gone.
local before = redis.call('PTTL', KEYS[1])
if before <= 0 then
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], d)
local n, m, a = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local changed = 0
for i = 6, 5 + n do
  changed = changed + redis.call('SREM', KEYS[2], ARGV[i])
end
for i = 6 + n, 5 + n + m do
  redis.call('SREM', KEYS[3], ARGV[i])
end
for i = 6 + n + m, 5 + n + m + a do
  changed = changed + redis.call('SADD', KEYS[2], ARGV[i])
end
for i = 6 + n + m + a, #ARGV do
  redis.call('SADD', KEYS[3], ARGV[i])
end
if changed > 0 then
  redis.call('HINCRBY', KEYS[1], 'gen', 1)
end
redis.call('PEXPIRE', KEYS[2], 2 * d)
redis.call('PEXPIRE', KEYS[3], 2 * d)
local gen = redis.call('HGET', KEYS[1], 'gen') or '0'
local leases = false
if gen ~= ARGV[2] then
  leases = redis.call('SMEMBERS', KEYS[2])
end
return {d, gen, leases, redis.call('SMEMBERS', KEYS[3]), before}
