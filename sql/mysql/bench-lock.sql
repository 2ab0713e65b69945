-- Benchmark baseline only: take the raw lock in ONE upsert when it is free or expired. MySQL
-- evaluates the SET list left to right with updated values: the token and the owner are decided on
-- the old row, the expiry follows the new owner. The token comes back through LAST_INSERT_ID(expr)
-- in the OK packet, so no second round trip is needed.
-- Affected rows: 1 inserted, 2 taken, 0 busy. ? name, ? owner, ? ttl (ms).
insert into simba_bench_lock (name, owner, token, expires_at)
values (?, ?, last_insert_id(1), cast(unix_timestamp(now(3)) * 1000 as signed) + ?)
on duplicate key update
    token      = if(owner = '' or expires_at <= cast(unix_timestamp(now(3)) * 1000 as signed),
                    last_insert_id(token + 1), token),
    owner      = if(owner = '' or expires_at <= cast(unix_timestamp(now(3)) * 1000 as signed),
                    values(owner), owner),
    expires_at = if(owner = values(owner), values(expires_at), expires_at)
