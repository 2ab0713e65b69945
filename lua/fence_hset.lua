-- simba::fence body after fence_prelude.lua: HSET KEYS[1] field value [field value ...] (ARGV).
-- Returns the number of fields added.
return redis.call('HSET', KEYS[1], unpack(ARGV))
