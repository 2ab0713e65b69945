-- Frees the lease if this session holds it; the token stays. $1 session id, $2 lease name.
update simba_lease
set session_id = ''
where name = $2::varchar
  and session_id = $1
