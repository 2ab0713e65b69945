-- simba: live members of a group (standalone only: also reads the members' session keys).
-- Prunes entries whose expiry passed or whose session is gone.
-- KEYS[1] simba:group:{group}
-- Returns {session id 1, metadata 1, session id 2, metadata 2, ...}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local reply = {}
for _, sid in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local session = 'simba:session:{' .. sid .. '}'
  if redis.call('EXISTS', session) == 1 then
    reply[#reply + 1] = sid
    reply[#reply + 1] = redis.call('HGET', session, 'metadata') or ''
  else
    redis.call('ZREM', KEYS[1], sid)
  end
end
return reply
