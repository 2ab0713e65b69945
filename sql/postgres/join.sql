-- Adds a live session to a group (idempotent). The session row is read FOR SHARE so a concurrent
-- purge cannot delete the session between the check and the insert.
-- $1 session id, $2 group name. Returns 1 when the session is alive, 0 otherwise (and, second
-- column, how many member rows it added: 0 or 1).
-- A new member row is announced on the channel simba_members (payload: the group name) in the
-- same statement, so only a committed join that changed the group notifies (see listen.sql).
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
    returning group_name
),
notified as (
    select pg_notify('simba_members', group_name::text)
    from joined
)
select (select count(*) from me)::bigint, (select count(*) from notified)::bigint
