-- simba (Cluster): release leases and leave groups of one session, all keys in one slot (used by
-- release, leave, close and an acquire that returned too late). Tokens stay.
-- KEYS: nl lease keys, then group keys.
-- ARGV[1] session id, ARGV[2] nl, ARGV[3 .. 2+nl] for each lease the token of the term to release,
-- or '0' for any term of this session.
-- Notifies with SPUBLISH on each key's own (sharded) channel: the key's slot is this node's, so
-- the message never crosses the cluster bus (docs/backends/redis.md, Notifications).
-- Returns {leases released, groups left}.
local sid = ARGV[1]
local nl = tonumber(ARGV[2])
local released, left = 0, 0
for i = 1, nl do
  local h = redis.call('HMGET', KEYS[i], 'session', 'token')
  if h[1] == sid and (ARGV[2 + i] == '0' or h[2] == ARGV[2 + i]) then
    redis.call('HSET', KEYS[i], 'session', '')
    redis.call('SPUBLISH', KEYS[i], 'released')
    released = released + 1
  end
end
for k = nl + 1, #KEYS do
  if redis.call('ZREM', KEYS[k], sid) == 1 then
    redis.call('SPUBLISH', KEYS[k], 'left')
    left = left + 1
  end
end
return {released, left}
