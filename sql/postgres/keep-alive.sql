-- Keep-alive in ONE statement (one round trip): renews the session, or deletes it when it has
-- expired, and returns what it owns and the groups it is a member of. $1 session id, $2 lease
-- duration (ms).
-- Returns (remaining ms, lease name, token, group name, before ms) rows, every row with the
-- session's remaining time and the time it had left when this statement found it (before ms, by
-- the same clock reading: how far the database's clock advanced since the previous renewal): one per owned lease (group name null) — or one row with null name/token/group
-- when it owns none — plus one per membership (lease name and token null). No row at all when the
-- session is expired or unknown (it and its memberships are then deleted; lease rows stay).
--
-- The session row is locked FIRST and the clock read AFTER the lock (clock_timestamp(), not
-- statement_timestamp()). A takeover holds the holder's session row FOR SHARE and decides by its
-- own statement time, so a takeover that committed before this statement got the lock also
-- started before this clock reading: the session is then seen expired here and nothing is
-- reported owned. A takeover that comes later waits for this statement and sees the renewal.
-- That is why the lease rows can come from this statement's snapshot (taken before the lock).
-- The membership rows come from that snapshot too: a join or leave whose reply the client had
-- before it sent this keep-alive committed before the snapshot and is seen. A join that commits
-- while this statement waits for the session row (a join holds it FOR SHARE until it commits) is
-- not listed: its reply came after this keep-alive was sent, so the caller does not count on it.
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
    returning s.expires_at - c.now_ms as remaining_ms, c.expires_at - c.now_ms as before_ms
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
select r.remaining_ms, l.name::text, l.token, null::text as group_name, r.before_ms
from renewed r
left join simba_lease l on l.session_id = $1
union all
select r.remaining_ms, null::text, null::bigint, m.group_name::text, r.before_ms
from renewed r
join simba_member m on m.session_id = $1
