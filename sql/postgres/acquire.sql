-- Acquire: ONE upsert. Takes the lease when it is free, held by this session (same term, same
-- token) or held by a session that has expired (new term: token + 1). The holder's session row is
-- read FOR SHARE, so a takeover is serialised with that session's renewal.
-- $1 session id, $2 lease name.
-- Returns one row: (remaining ms of this session or null when it is not alive, token or null when busy).
with me as materialized (
    select session_id,
           expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint as remaining_ms
    from simba_session
    where session_id = $1
      and expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
),
seen as materialized (
    select session_id from simba_lease where name = $2::varchar
),
holder as materialized (
    select s.session_id, s.expires_at
    from simba_session s
    where s.session_id = (select session_id from seen)
    for share of s
),
taken as (
    insert into simba_lease as l (name, session_id, token)
    select $2::varchar, me.session_id, 1 from me
    on conflict (name) do update
    set token      = case when l.session_id = excluded.session_id then l.token else l.token + 1 end,
        session_id = excluded.session_id
    where l.session_id = excluded.session_id
       or l.session_id = ''
       or (l.session_id = (select session_id from seen)
           and not exists (select 1
                           from holder h
                           where h.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint))
    returning l.token
)
select (select remaining_ms from me), (select token from taken)
