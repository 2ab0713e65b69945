-- simba::fence body after fence_prelude.lua: SET KEYS[1] ARGV[1].
return redis.call('SET', KEYS[1], ARGV[1])
