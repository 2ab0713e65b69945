-- Benchmark only: the raw notification baseline's listener subscribes to the bench's channel.
listen simba_bench_notify
