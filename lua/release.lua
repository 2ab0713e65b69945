-- simba: release a term of a lease (standalone only). The token stays.
-- KEYS[1] simba:session:{sid}:leases, KEYS[2] simba:lease:{name}
-- ARGV[1] session id, ARGV[2] lease name, ARGV[3] token of the term to release, or '0' for any
-- Returns 1 when this session's term was released, else 0. Another term of this session (a release
-- that arrives late) stays, and stays indexed.
local h = redis.call('HMGET', KEYS[2], 'session', 'token')
if h[1] == ARGV[1] then
  if ARGV[3] ~= '0' and h[2] ~= ARGV[3] then
    return 0
  end
  redis.call('HSET', KEYS[2], 'session', '')
  redis.call('SREM', KEYS[1], ARGV[2])
  redis.call('PUBLISH', KEYS[2], 'released')
  return 1
end
redis.call('SREM', KEYS[1], ARGV[2])
return 0
