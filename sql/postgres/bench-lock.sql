-- Benchmark baseline only: take the raw lock in ONE upsert when it is free or expired (token + 1).
-- $1 name, $2 owner (32 chars), $3 ttl (ms). Returns the new token, or no row when busy.
insert into simba_bench_lock as l (name, owner, token, expires_at)
values ($1::varchar, $2::varchar, 1, (extract(epoch from statement_timestamp()) * 1000)::bigint + $3::bigint)
on conflict (name) do update
set token      = l.token + 1,
    owner      = excluded.owner,
    expires_at = excluded.expires_at
where l.owner = ''
   or l.expires_at <= (extract(epoch from statement_timestamp()) * 1000)::bigint
returning l.token
