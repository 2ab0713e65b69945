-- Benchmark baseline only: free the raw lock if the owner holds it (one update; the token stays).
-- ? name, ? owner.
update simba_bench_lock
set owner = ''
where name = ?
  and owner = ?
