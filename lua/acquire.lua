-- simba: acquire a lease (standalone only: also reads the holder's session key).
-- A term is alive while the lease hash names its session, that session's key exists, and the
-- hash's `expires` (written only by clients before the session-judged renewal) has not passed.
-- New terms set `expires` to 2^53 - 1 so those older clients judge them the same way.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:terms, KEYS[3] simba:lease:{name}
-- ARGV[1] session id, ARGV[2] lease name
-- Returns {-1} when the session is gone, {0} when another live session holds the lease,
-- else {1, token, remaining_ms, new_term (1 or 0), lease duration in ms, gen}: gen is the index's
-- generation when this call changed the index (by exactly this one entry), else 0 — so a client
-- that holds the listing of gen - 1 can follow the change instead of listing the index again.
local sid = ARGV[1]
local pttl = redis.call('PTTL', KEYS[1])
if pttl <= 0 then
  return {-1}
end
local d = tonumber(redis.call('HGET', KEYS[1], 'duration') or pttl)
local h = redis.call('HMGET', KEYS[3], 'session', 'token', 'expires')
local live = false
if h[1] and h[1] ~= '' then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  live = (not h[3] or tonumber(h[3]) > now)
    and (h[1] == sid or redis.call('EXISTS', 'simba:session:{' .. h[1] .. '}') == 1)
end
local token, new, gen = h[2], 0, 0
if live and h[1] ~= sid then
  return {0}
end
if not live then
  redis.call('HINCRBY', KEYS[3], 'token', 1)
  -- Read back as a string: a Lua number would print large tokens inexactly.
  token = redis.call('HGET', KEYS[3], 'token')
  redis.call('HSET', KEYS[3], 'session', sid, 'expires', 9007199254740991)
  new = 1
end
-- The index names the term; every change of the index bumps the session's `gen`, so renewals
-- list the index again (and only then). PEXPIRE is a write too: a following WAIT covers the
-- term even when this call (a repeated acquire on another connection) changed nothing else.
-- A new term is never in the index yet; an indexed term already has the index's TTL (set when it
-- was indexed, extended by every keep-alive), so only a change of the index sets it.
if new == 1 or redis.call('HGET', KEYS[2], ARGV[2]) ~= token then
  redis.call('HSET', KEYS[2], ARGV[2], token)
  gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
  redis.call('PEXPIRE', KEYS[2], pttl + d)
end
return {1, token, pttl, new, d, gen}
