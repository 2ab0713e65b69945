-- simba (Cluster): renewal follow-up, one call per other slot involved (all KEYS in one slot).
-- Extends this session's live leases and memberships up to this node's now + the session's
-- remaining duration carried by the client (never beyond), and releases abandoned terms.
-- KEYS: nl lease keys to renew, then nr lease keys to release, then group keys.
-- ARGV[1] session id, ARGV[2] remaining duration in ms, ARGV[3] nl, ARGV[4] nr,
-- ARGV[5 .. 4+nr] the tokens of the terms to release.
-- Returns {{token or '' per renewed lease}, {1/0 per released lease}, {1/0 per group}} (a lease of
-- this session without a token, which only corrupt data has, yields nil: the client reports an error).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local cap = now + tonumber(ARGV[2])
local nl = tonumber(ARGV[3])
local nr = tonumber(ARGV[4])
local leases, released, groups = {}, {}, {}
for i = 1, nl do
  local h = redis.call('HMGET', KEYS[i], 'session', 'token', 'expires')
  local expires = tonumber(h[3] or 0)
  if h[1] == sid and expires > now then
    if expires < cap then
      redis.call('HSET', KEYS[i], 'expires', cap)
    end
    leases[i] = h[2] or false
  else
    leases[i] = ''
  end
end
for j = 1, nr do
  local key = KEYS[nl + j]
  local h = redis.call('HMGET', key, 'session', 'token')
  if h[1] == sid and h[2] == ARGV[4 + j] then
    redis.call('HSET', key, 'session', '')
    redis.call('PUBLISH', key, 'released')
    released[j] = 1
  else
    released[j] = 0
  end
end
for k = nl + nr + 1, #KEYS do
  local score = redis.call('ZSCORE', KEYS[k], sid)
  if score and tonumber(score) > now then
    if tonumber(score) < cap then
      redis.call('ZADD', KEYS[k], cap, sid)
    end
    groups[#groups + 1] = 1
  else
    if score then
      redis.call('ZREM', KEYS[k], sid)
    end
    groups[#groups + 1] = 0
  end
end
return {leases, released, groups}
