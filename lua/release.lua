-- simba: release a term of a lease (standalone only). The token stays.
-- KEYS[1] simba:session:{sid}, KEYS[2] simba:session:{sid}:terms, KEYS[3] simba:lease:{name}
-- ARGV[1] session id, ARGV[2] lease name, ARGV[3] token of the term to release, or '0' for any
-- Returns {released, gen}: released 1 when this session's term was released, else 0; gen the
-- index's generation when this call removed the name from the index (that one change), else 0.
-- Another term of this session (a release that arrives late) stays, and stays indexed.
local h = redis.call('HMGET', KEYS[3], 'session', 'token')
local released = 0
if h[1] == ARGV[1] then
  if ARGV[3] ~= '0' and h[2] ~= ARGV[3] then
    return {0, 0}
  end
  redis.call('HSET', KEYS[3], 'session', '')
  redis.call('PUBLISH', KEYS[3], 'released')
  released = 1
end
-- Only a live session's index changes `gen` (HINCRBY on a missing key would create it).
local gen = 0
if redis.call('HDEL', KEYS[2], ARGV[2]) == 1 and redis.call('EXISTS', KEYS[1]) == 1 then
  gen = redis.call('HINCRBY', KEYS[1], 'gen', 1)
end
return {released, gen}
