-- simba: open a session (standalone and Cluster; one slot: the session's).
-- KEYS[1] simba:session:{sid}
-- ARGV[1] lease duration in ms, ARGV[2] metadata
-- Returns the session's remaining time in ms.
if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.error_reply('ERR simba: session id collision')
end
redis.call('HSET', KEYS[1], 'metadata', ARGV[2], 'duration', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
