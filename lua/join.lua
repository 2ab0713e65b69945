-- simba: join a group (standalone only).
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:groups, KEYS[3] simba:group:{group}
-- ARGV[1] session id, ARGV[2] group name
-- Returns -1 when the session is gone, else the session's remaining time in ms.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return -1
end
local d = tonumber(redis.call('HGET', KEYS[1], 'duration') or pttl)
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', now)
local added = redis.call('ZADD', KEYS[3], now + pttl, ARGV[1])
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], pttl + d)
if added == 1 then
  redis.call('PUBLISH', KEYS[3], 'joined')
end
return pttl
