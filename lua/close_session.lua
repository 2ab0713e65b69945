-- simba: close a session (standalone only). Deletes the session first, then releases its leases
-- and memberships, then deletes the indexes: a repeated close after a failure finishes the work.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:terms, KEYS[3] simba:session:{sid}:groups,
-- KEYS[4] simba:session:{sid}:leases (the lease index of clients before the session-judged renewal:
-- a set of names; read so that closing such a session by id releases its leases too)
-- ARGV[1] session id
-- Returns 1.
local sid = ARGV[1]
redis.call('DEL', KEYS[1])
local function release(name)
  local lease = 'simba:lease:{' .. name .. '}'
  if redis.call('HGET', lease, 'session') == sid then
    redis.call('HSET', lease, 'session', '')
    redis.call('PUBLISH', lease, 'released')
  end
end
for _, name in ipairs(redis.call('HKEYS', KEYS[2])) do
  release(name)
end
if redis.call('TYPE', KEYS[4]).ok == 'set' then
  for _, name in ipairs(redis.call('SMEMBERS', KEYS[4])) do
    release(name)
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local key = 'simba:group:{' .. group .. '}'
  if redis.call('ZREM', key, sid) == 1 then
    redis.call('PUBLISH', key, 'left')
  end
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
return 1
