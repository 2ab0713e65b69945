-- Listing (simba status), sessions: the live sessions (live as in session-alive.sql) with their
-- remaining ms and metadata, by session id, at most $1 rows (the caller asks for one more than it
-- lists, to know whether there are more). Bounded on the server: the scan reads the primary key in
-- its order and stops at its $2nd row (expired sessions not purged yet count), or earlier once $1
-- live ones are found. The last column is the row's place in the scan; the scan's $2nd row is
-- returned even when it has expired (remaining ms 0 or less): a row numbered $2 says the scan
-- stopped at its budget, and live sessions after it are not listed.
select scan.session_id::text,
       scan.remaining,
       scan.metadata::text,
       scan.nth
from (select s.session_id,
             s.expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint as remaining,
             s.metadata,
             row_number() over (order by s.session_id)                                as nth
      from (select session_id, expires_at, metadata
            from simba_session
            order by session_id
            limit $2::bigint) s) scan
where scan.remaining > 0
   or scan.nth = $2::bigint
order by scan.session_id
limit $1::bigint
