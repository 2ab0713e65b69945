-- simba (Cluster): entries of a group whose expiry is in the future by this node's clock (pruning
-- the others). The client then keeps those whose session is alive.
-- KEYS[1] simba:group:{group}
-- Returns {session ids}.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
return redis.call('ZRANGE', KEYS[1], 0, -1)
