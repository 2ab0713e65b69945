-- simba (Cluster): acquire, second call, on the lease's slot. Grants a full lease duration by this
-- node's own clock.
-- KEYS[1] simba:lease:{name}
-- ARGV[1] session id, ARGV[2] lease duration in ms
-- Returns {0} when another session's term is live here, else {1, token, new_term (1 or 0)}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local expires = now + tonumber(ARGV[2])
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires')
local current = tonumber(h[3] or 0)
if h[1] == sid and current > now then
  if current < expires then
    redis.call('HSET', KEYS[1], 'expires', expires)
  end
  return {1, tonumber(h[2]), 0}
end
if h[1] and h[1] ~= '' and current > now then
  return {0}
end
local token = redis.call('HINCRBY', KEYS[1], 'token', 1)
redis.call('HSET', KEYS[1], 'session', sid, 'expires', expires)
return {1, token, 1}
