-- Members of a group whose sessions are alive, by session id. $1 group name.
select m.session_id::text, s.metadata::text
from simba_member m
join simba_session s on s.session_id = m.session_id
where m.group_name = $1::varchar
  and s.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
order by m.session_id
