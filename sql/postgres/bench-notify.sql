-- Benchmark only: the raw notification baseline, one autocommit statement announcing $1 on the
-- bench's own channel (what release.sql adds to a release).
select pg_notify('simba_bench_notify', $1::text)
