#!lua flags=allow-cross-slot-keys
-- simba (Cluster): renewal follow-up for one or more slots of one node. Extends this session's live
-- leases and memberships up to this node's now + the session's remaining duration carried by the
-- client (never beyond), and releases abandoned terms.
-- The keys of the first slot are KEYS (they route the call); the keys of the other slots, which
-- this node served when the client grouped them, are passed in ARGV (the flag above lets one
-- script touch keys of several slots of its node). A slot whose keys this node does not serve
-- (any more) is not touched past its first non-local key: its entry is the error text (so is a slot
-- that failed for any other reason), and the client renews that slot alone. A call for one slot
-- fails as a whole with the server's error instead.
-- ARGV[1] session id, ARGV[2] remaining duration in ms, ARGV[3] number of slots, then per slot
-- nl, nr, ng (leases to renew, terms to release, groups), the nr tokens of the terms to release,
-- and (for every slot but the first) its nl + nr lease keys and ng group keys.
-- KEYS: the first slot's nl lease keys to renew, nr lease keys to release, ng group keys.
-- Returns one entry per slot: {{token or '' per renewed lease}, {1/0 per released lease},
-- {1/0 per group}}, or the error text of a slot that could not be renewed here (a lease of this
-- session without a token, which only corrupt data has, yields nil: the client reports an error).
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local sid = ARGV[1]
local cap = now + tonumber(ARGV[2])
-- The text redis.call would make of the number (%.17g), made once rather than per lease.
local cap_text = string.format('%.17g', cap)

local function renew(keys, k0, nl, nr, ng, tokens, t0)
  local leases, released, groups = {}, {}, {}
  for i = 1, nl do
    local key = keys[k0 + i]
    local h = redis.call('HMGET', key, 'session', 'token', 'expires')
    local expires = tonumber(h[3] or 0)
    if h[1] == sid and expires > now then
      if expires < cap then
        redis.call('HSET', key, 'expires', cap_text)
      end
      leases[i] = h[2] or false
    else
      leases[i] = ''
    end
  end
  for j = 1, nr do
    local key = keys[k0 + nl + j]
    local h = redis.call('HMGET', key, 'session', 'token')
    if h[1] == sid and h[2] == tokens[t0 + j] then
      redis.call('HSET', key, 'session', '')
      redis.call('SPUBLISH', key, 'released')
      released[j] = 1
    else
      released[j] = 0
    end
  end
  for k = 1, ng do
    local key = keys[k0 + nl + nr + k]
    local score = redis.call('ZSCORE', key, sid)
    if score and tonumber(score) > now then
      if tonumber(score) < cap then
        redis.call('ZADD', key, cap, sid)
      end
      groups[k] = 1
    else
      if score then
        redis.call('ZREM', key, sid)
      end
      groups[k] = 0
    end
  end
  return {leases, released, groups}
end

local out = {}
local a = 4
local n = tonumber(ARGV[3])
for s = 1, n do
  local nl, nr, ng = tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  local t0 = a + 2 -- the tokens are ARGV[t0 + 1 .. t0 + nr]
  a = t0 + nr + 1
  local keys, k0 = KEYS, 0
  if s > 1 then
    keys, k0 = ARGV, a - 1
    a = a + nl + nr + ng
  end
  if n == 1 then
    -- One slot: its errors are the call's, in the server's own words.
    out[s] = renew(keys, k0, nl, nr, ng, ARGV, t0)
  else
    local ok, r = pcall(renew, keys, k0, nl, nr, ng, ARGV, t0)
    if ok then
      out[s] = r
    else
      out[s] = type(r) == 'table' and tostring(r.err) or tostring(r)
    end
  end
end
return out
