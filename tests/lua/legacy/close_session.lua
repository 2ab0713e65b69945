-- simba: close a session (standalone only). Deletes the session first, then releases its leases
-- and memberships, then deletes the indexes: a repeated close after a failure finishes the work.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:leases, KEYS[3] simba:session:{sid}:groups
-- ARGV[1] session id
-- Returns 1.
local sid = ARGV[1]
redis.call('DEL', KEYS[1])
for _, name in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local lease = 'simba:lease:{' .. name .. '}'
  if redis.call('HGET', lease, 'session') == sid then
    redis.call('HSET', lease, 'session', '')
    redis.call('PUBLISH', lease, 'released')
  end
end
for _, group in ipairs(redis.call('SMEMBERS', KEYS[3])) do
  local key = 'simba:group:{' .. group .. '}'
  if redis.call('ZREM', key, sid) == 1 then
    redis.call('PUBLISH', key, 'left')
  end
end
redis.call('DEL', KEYS[2], KEYS[3])
return 1
