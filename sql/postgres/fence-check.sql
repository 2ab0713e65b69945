-- Fence check: ONE upsert that records the token when it is >= the largest seen. The conflicting
-- row is locked until the caller's transaction ends, even when the WHERE refuses the update, so
-- fenced writers of one resource are serialised in token order.
-- $1 resource, $2 token. Returns one row (the token) when accepted, no row when stale.
insert into simba_fence (resource, token)
values ($1, $2)
on conflict (resource) do update set token = excluded.token
where simba_fence.token <= excluded.token
returning token
