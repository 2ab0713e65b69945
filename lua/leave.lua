-- simba: leave a group (standalone only).
-- KEYS[1] simba:session:{sid}:groups, KEYS[2] simba:group:{group}
-- ARGV[1] session id, ARGV[2] group name
-- Returns 1 when the session was a member, else 0.
redis.call('SREM', KEYS[1], ARGV[2])
if redis.call('ZREM', KEYS[2], ARGV[1]) == 1 then
  redis.call('PUBLISH', KEYS[2], 'left')
  return 1
end
return 0
