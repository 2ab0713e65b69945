-- Frees the lease if this session holds it in the term of the given token; the token stays (a late
-- release can never free a newer term). $1 session id, $2 lease name, $3 token.
-- A freed lease is announced on the channel simba_release (payload: the lease name) in the same
-- statement, so the notification is sent only when the release commits (see listen.sql).
with released as (
    update simba_lease
    set session_id = ''
    where name = $2::varchar
      and session_id = $1
      and token = $3::bigint
    returning name
)
select pg_notify('simba_release', name::text)
from released
