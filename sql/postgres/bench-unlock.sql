-- Benchmark baseline only: free the raw lock if $2 owns it (one update; the token stays).
-- $1 name, $2 owner.
update simba_bench_lock
set owner = ''
where name = $1::varchar
  and owner = $2::varchar
