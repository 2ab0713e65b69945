-- Listing (simba status), groups: the live members (live as in members.sql) of the groups named
-- from $1 (inclusive) to $2 (exclusive), as (group name, session id, metadata, scanned) rows by
-- group name and session id: at most $3 groups and at most $3 members of each (the caller asks
-- for one more of each than it lists, to know whether there are more). Bounded on the server: the
-- scan reads the primary key's range in its order and stops at its $4th membership (those of
-- expired sessions count); each member's session is looked up by its primary key, and the window
-- functions number the live ones. "scanned" (the same on every row) is how many memberships the
-- scan read: $4 says it stopped there, and groups after that are not listed. With no live member
-- the one row is (NULL, NULL, NULL, scanned).
with scan as (select group_name, session_id
              from simba_member
              where group_name >= $1::varchar
                and group_name < $2::varchar
              order by group_name, session_id
              limit $4::bigint)
select live.group_name::text,
       live.session_id::text,
       live.metadata::text,
       scanned.n
from (select count(*) as n from scan) scanned
left join (select scan.group_name,
                  scan.session_id,
                  s.metadata,
                  row_number() over (partition by scan.group_name order by scan.session_id) as nth,
                  dense_rank() over (order by scan.group_name)                             as group_nth
           from scan
           join simba_session s on s.session_id = scan.session_id
           where s.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint) live
       on live.nth <= $3::bigint
      and live.group_nth <= $3::bigint
order by live.group_name, live.session_id
