-- simba: renew a session and everything it holds in one script (standalone only: it touches the
-- lease and group keys named by the session's indexes).
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases, KEYS[3] simba:session:{sid}:groups
-- ARGV[1] session id, ARGV[2] lease duration in ms,
-- ARGV[3..] pairs (name, token) of terms the client abandoned: released here, never reported.
-- Returns {-1} when the session is gone, else {remaining_ms, {name1, token1, name2, token2, ...},
-- {group1, group2, ...}}: the leases the session still owns with their tokens, and the groups it is
-- still a member of (score present and unexpired; the others leave the index and are not listed).
-- A lease of this session without a token (only corrupt data has one) yields nil: the client
-- reports an error.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local d = tonumber(ARGV[2])
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {-1}
end
redis.call('PEXPIRE', KEYS[1], d)
local expires = now + d
for i = 3, #ARGV - 1, 2 do
  local lease = 'simba:lease:{' .. ARGV[i] .. '}'
  local h = redis.call('HMGET', lease, 'session', 'token')
  if h[1] == sid and h[2] == ARGV[i + 1] then
    redis.call('HSET', lease, 'session', '')
    redis.call('PUBLISH', lease, 'released')
  end
  redis.call('SREM', KEYS[2], ARGV[i])
end
local owned, groups = {}, {}
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local lease = 'simba:lease:{' .. name .. '}'
  local h = redis.call('HMGET', lease, 'session', 'token', 'expires')
  if h[1] == sid and tonumber(h[3] or 0) > now then
    redis.call('HSET', lease, 'expires', expires)
    owned[#owned + 1] = name
    owned[#owned + 1] = h[2] or false
  else
    redis.call('SREM', KEYS[2], name)
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local key = 'simba:group:{' .. group .. '}'
  local score = redis.call('ZSCORE', key, sid)
  if score and tonumber(score) > now then
    redis.call('ZADD', key, expires, sid)
    groups[#groups + 1] = group
  else
    if score then
      redis.call('ZREM', key, sid)
    end
    redis.call('SREM', KEYS[3], group)
  end
end
redis.call('PEXPIRE', KEYS[2], 2 * d)
redis.call('PEXPIRE', KEYS[3], 2 * d)
return {d, owned, groups}
