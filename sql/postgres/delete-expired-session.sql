-- A keep-alive that finds its session expired deletes it and its memberships (lease rows stay).
-- $1 session id.
with expired as (
    delete from simba_session
    where session_id = $1
      and expires_at <= (extract(epoch from statement_timestamp()) * 1000)::bigint
)
delete from simba_member
where session_id = $1
