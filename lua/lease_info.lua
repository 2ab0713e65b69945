-- simba (Cluster): the live term of a lease, on the lease's slot.
-- KEYS[1] simba:lease:{name}
-- Returns {} when free or expired here, else {session id, token, remaining_ms by this node's clock}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local h = redis.call('HMGET', KEYS[1], 'session', 'token', 'expires')
local expires = tonumber(h[3] or 0)
if not h[1] or h[1] == '' or expires <= now then
  return {}
end
return {h[1], h[2], expires - now}
