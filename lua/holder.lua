-- simba: the live holder of a lease (standalone only: also reads the holder's session key).
-- A term is alive while the hash names its session, that session's key exists, and `expires`
-- (a bound only clients before the session-judged renewal wrote) has not passed; it ends with
-- the session, so its remaining time is the session's PTTL.
-- KEYS[1] simba:lease:{name}
-- Returns {} when free, else {session id, token, remaining_ms, metadata}.
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires')
if not h[1] or h[1] == '' then
  return {}
end
local session = 'simba:session:{' .. h[1] .. '}'
local remaining = redis.call('PTTL', session)
if remaining <= 0 then
  return {}
end
if h[3] then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  remaining = math.min(remaining, tonumber(h[3]) - now)
  if remaining <= 0 then
    return {}
  end
end
return {h[1], h[2], remaining, redis.call('HGET', session, 'metadata') or ''}
