-- Benchmark baseline only (benches/simba.rs): the table of the raw "minimal lock" that the
-- uncontended acquire+release benchmark compares the library with. Not part of the simba schema.
create table if not exists simba_bench_lock (
    name       varchar(128) collate "C" primary key,
    owner      char(32)     not null default '',
    token      bigint       not null default 0,
    expires_at bigint       not null default 0
)
