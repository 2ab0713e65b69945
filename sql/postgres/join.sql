-- Adds a live session to a group (idempotent). The session row is read FOR SHARE so a concurrent
-- purge cannot delete the session between the check and the insert.
-- $1 session id, $2 group name. Returns 1 when the session is alive, 0 otherwise.
with me as materialized (
    select session_id
    from simba_session
    where session_id = $1
      and expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
    for share
),
joined as (
    insert into simba_member (group_name, session_id)
    select $2::varchar, me.session_id from me
    on conflict do nothing
)
select count(*)::bigint from me
