-- Benchmark only: deletes the lease rows a benchmark run created (its names all start with a
-- random run prefix; ? is that prefix followed by '%'). Applications never delete lease rows.
delete from simba_lease where name like ?
