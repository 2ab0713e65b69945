-- simba: the live holder of a lease (standalone only: also reads the holder's session key).
-- KEYS[1] simba:lease:{name}
-- Returns {} when free, else {session id, token, remaining_ms, metadata}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires')
local expires = tonumber(h[3] or 0)
if not h[1] or h[1] == '' or expires <= now then
  return {}
end
local session = 'simba:session:{' .. h[1] .. '}'
local pttl = redis.call('PTTL', session)
if pttl <= 0 then
  return {}
end
return {h[1], h[2], math.min(pttl, expires - now), redis.call('HGET', session, 'metadata') or ''}
