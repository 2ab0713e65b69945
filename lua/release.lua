-- simba: release a lease (standalone only). The token stays.
-- KEYS[1] simba:session:{sid}:leases, KEYS[2] simba:lease:{name}
-- ARGV[1] session id, ARGV[2] lease name, ARGV[3] token of the term to release, or '0' for any
-- Returns 1 when this session's term was released, else 0.
redis.call('SREM', KEYS[1], ARGV[2])
local h = redis.call('HMGET', KEYS[2], 'session', 'token')
if h[1] == ARGV[1] and (ARGV[3] == '0' or h[2] == ARGV[3]) then
  redis.call('HSET', KEYS[2], 'session', '')
  redis.call('PUBLISH', KEYS[2], 'released')
  return 1
end
return 0
