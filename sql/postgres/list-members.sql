-- Listing (simba status), groups: the live members (live as in members.sql) of the groups named
-- from $1 (inclusive) to $2 (exclusive), as (group name, session id, metadata, scanned) rows by
-- group name and session id: at most $3 groups and at most $3 members of each (the caller asks
-- for one more of each than it lists, to know whether there are more). Bounded on the server: the
-- scan reads the primary key's range in its order and stops at the $4th live membership (the
-- memberships of expired sessions, deleted by the purge, are skipped); the window functions number
-- those rows only. "scanned" (the same on every row) is how many live memberships the scan took:
-- $4 says it stopped at its budget, and groups after that are not listed.
select live.group_name::text,
       live.session_id::text,
       live.metadata::text,
       live.scanned
from (select scan.group_name,
             scan.session_id,
             scan.metadata,
             row_number() over (partition by scan.group_name order by scan.session_id) as nth,
             dense_rank() over (order by scan.group_name)                             as group_nth,
             count(*) over ()                                                         as scanned
      from (select m.group_name, m.session_id, s.metadata
            from simba_member m
            join simba_session s on s.session_id = m.session_id
            where m.group_name >= $1::varchar
              and m.group_name < $2::varchar
              and s.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
            order by m.group_name, m.session_id
            limit $4::bigint) scan) live
where live.nth <= $3::bigint
  and live.group_nth <= $3::bigint
order by live.group_name, live.session_id
