-- A command on a key of another type fails the script (redis.call raises).
-- KEYS[1] a fresh key
redis.call('SET', KEYS[1], 'v')
local ok = redis.pcall('HGET', KEYS[1], 'f')
redis.call('DEL', KEYS[1])
return {ok.err ~= nil, type(ok.err)}
