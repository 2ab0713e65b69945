-- Benchmark baseline only (benches/simba): SPUBLISH from inside a script, as simba's Cluster release
-- does (release_slot.lua). KEYS[1] the shard channel (its hash slot picks the node; the script runs
-- there), ARGV[1] message. Returns the receivers.
return redis.call('SPUBLISH', KEYS[1], ARGV[1])
