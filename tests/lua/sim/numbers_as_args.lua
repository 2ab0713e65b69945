-- Numbers passed to redis.call become their Lua text (%.14g).
-- KEYS[1..3] fresh keys
redis.call('SET', KEYS[1], 1750000000123)
redis.call('SET', KEYS[2], 0.1 + 0.2)
redis.call('SET', KEYS[3], 2 ^ 70)
local r = {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2]), redis.call('GET', KEYS[3])}
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return r
