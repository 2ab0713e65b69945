-- The live holder of a lease. $1 lease name.
select l.session_id::text,
       l.token,
       s.expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint,
       s.metadata::text
from simba_lease l
join simba_session s on s.session_id = l.session_id
where l.name = $1::varchar
  and s.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
