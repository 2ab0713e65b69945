-- Redis's reply -> Lua rules: a nil bulk is false, a status is {ok=...}, an array's nil is false,
-- integers are numbers; pcall returns an error as {err=...}.
-- KEYS[1] a fresh key
local missing = redis.call('GET', KEYS[1])
local status = redis.call('SET', KEYS[1], 'v')
local kind = redis.call('TYPE', KEYS[1])
local hm = redis.call('HMGET', KEYS[1] .. ':h', 'a', 'b')
local err = redis.pcall('HGET', KEYS[1], 'f')
local n = redis.call('EXISTS', KEYS[1])
local del = redis.call('DEL', KEYS[1])
return {type(missing), tostring(missing), type(status), status.ok, kind.ok, #hm, type(hm[1]), type(err),
  type(err.err), type(n), n, del}
