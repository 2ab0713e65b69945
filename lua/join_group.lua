-- simba (Cluster): join, second call, on the group's slot. Grants a full lease duration by this
-- node's own clock.
-- KEYS[1] simba:group:{group}
-- ARGV[1] session id, ARGV[2] lease duration in ms
-- Notifies with SPUBLISH on the group key's own (sharded) channel, local to this node.
-- Returns 1.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local expires = now + tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
  redis.call('SPUBLISH', KEYS[1], 'joined')
elseif tonumber(score) < expires then
  redis.call('ZADD', KEYS[1], expires, ARGV[1])
end
return 1
