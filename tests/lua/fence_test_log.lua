-- Body of a fenced test script (after simba::fence's prelude): append "attempt:token" to the log
-- list KEYS[1] and set KEYS[2] to the attempt. ARGV[1] attempt, ARGV[2] token.
redis.call('RPUSH', KEYS[1], ARGV[1] .. ':' .. ARGV[2])
redis.call('SET', KEYS[2], ARGV[1])
return redis.call('LLEN', KEYS[1])
