-- Listing (simba status), held leases: the leases named from $1 (inclusive) to $2 (exclusive)
-- that a live session holds, with that holder's session id, token, remaining ms and metadata
-- (live as in holder.sql), in name order, at most $3 rows (the caller asks for one more than it
-- lists, to know whether there are more). Bounded on the server: the scan reads the primary key's
-- range in its order and stops at its $4th row (free leases and leases of expired holders count:
-- lease rows are never deleted), or earlier once $3 live holders are found; each holder is looked
-- up by its session's primary key. The last column is the row's place in the scan; the scan's
-- $4th row is returned even when no live session holds it (its holder columns NULL): a row
-- numbered $4 says the scan stopped at its budget, and held leases after it are not listed.
select scan.name::text,
       scan.session_id::text,
       scan.token,
       s.expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint,
       s.metadata::text,
       scan.nth
from (select l.name, l.session_id, l.token, row_number() over (order by l.name) as nth
      from (select name, session_id, token
            from simba_lease
            where name >= $1::varchar
              and name < $2::varchar
            order by name
            limit $4::bigint) l) scan
left join simba_session s
       on s.session_id = scan.session_id
      and s.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
where s.session_id is not null
   or scan.nth = $4::bigint
order by scan.name
limit $3::bigint
