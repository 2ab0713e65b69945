-- Keep-alive in ONE statement (one round trip): renews the session, or deletes it when it has
-- expired, and returns what it owns. $1 session id, $2 lease duration (ms).
-- Returns one row per owned lease (name, token) with the session's remaining time (ms) — or one
-- row with null name/token when it owns none — and no row when the session is expired or unknown
-- (it and its memberships are then deleted; lease rows stay).
--
-- The session row is locked FIRST and the clock read AFTER the lock (clock_timestamp(), not
-- statement_timestamp()). A takeover holds the holder's session row FOR SHARE and decides by its
-- own statement time, so a takeover that committed before this statement got the lock also
-- started before this clock reading: the session is then seen expired here and nothing is
-- reported owned. A takeover that comes later waits for this statement and sees the renewal.
-- That is why the lease rows can come from this statement's snapshot (taken before the lock).
with locked as materialized (
    select expires_at
    from simba_session
    where session_id = $1
    for no key update
),
clock as materialized (
    select expires_at, (extract(epoch from clock_timestamp()) * 1000)::bigint as now_ms
    from locked
),
renewed as (
    update simba_session s
    set expires_at = c.now_ms + $2::bigint
    from clock c
    where s.session_id = $1
      and c.expires_at > c.now_ms
    returning s.expires_at - c.now_ms as remaining_ms
),
dead as (
    delete from simba_session s
    using clock c
    where s.session_id = $1
      and c.expires_at <= c.now_ms
),
unjoined as (
    delete from simba_member
    where session_id = $1
      and not exists (select 1 from renewed)
)
select r.remaining_ms, l.name::text, l.token
from renewed r
left join simba_lease l on l.session_id = $1
