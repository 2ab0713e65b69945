-- Benchmark baseline only (benches/simba.rs): the raw Redis lock's release, a compare-and-delete.
-- KEYS[1] lock key, ARGV[1] the owner value written by `SET key value NX PX ttl`.
-- Returns 1 when the key was ours and is deleted, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
    return redis.call('DEL', KEYS[1])
end
return 0
