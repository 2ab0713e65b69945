-- simba: the limit of a semaphore (standalone and Cluster: one key, so one slot and atomic).
-- KEYS[1] simba:semaphore:{name}
-- ARGV[1] the limit to store when none is stored, or '' to store nothing.
-- Returns the stored limit as stored (the client parses and checks it), or false (nil) when none
-- is stored. The key has no TTL: a limit is kept forever, like lease tokens.
local stored = redis.call('GET', KEYS[1])
if stored then
  return stored
end
if ARGV[1] == '' then
  return false
end
redis.call('SET', KEYS[1], ARGV[1])
return ARGV[1]
