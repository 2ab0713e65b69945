-- Benchmark baseline only (benches/simba): PUBLISH from inside a script, as simba's release does.
-- KEYS[1] channel (its hash slot picks the Cluster node), ARGV[1] message. Returns the receivers.
return redis.call('PUBLISH', KEYS[1], ARGV[1])
