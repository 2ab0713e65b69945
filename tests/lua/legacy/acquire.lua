-- simba: acquire a lease (standalone only: also reads the holder's session key).
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases, KEYS[3] simba:lease:{name}
-- ARGV[1] session id, ARGV[2] lease name
-- Returns {-1} when the session is gone, {0} when another live session holds the lease,
-- else {1, token, remaining_ms, new_term (1 or 0), lease duration in ms}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return {-1}
end
local d = tonumber(redis.call('HGET', KEYS[1], 'duration') or pttl)
local expires = now + pttl
local h = redis.call('HMGET', KEYS[3], 'session', 'token', 'expires')
local current = tonumber(h[3] or 0)
if h[1] == sid and current > now then
  -- Same term. The write also makes a following WAIT cover the term on any connection.
  redis.call('HSET', KEYS[3], 'expires', math.max(current, expires))
  redis.call('SADD', KEYS[2], ARGV[2])
  redis.call('PEXPIRE', KEYS[2], pttl + d)
  return {1, tonumber(h[2]), pttl, 0, d}
end
if h[1] and h[1] ~= '' and current > now and redis.call('EXISTS', 'simba:session:{' .. h[1] .. '}') == 1 then
  return {0}
end
local token = redis.call('HINCRBY', KEYS[3], 'token', 1)
redis.call('HSET', KEYS[3], 'session', sid, 'expires', expires)
redis.call('SADD', KEYS[2], ARGV[2])
redis.call('PEXPIRE', KEYS[2], pttl + d)
return {1, token, pttl, 1, d}
