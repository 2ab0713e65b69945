-- Listing (simba status), sessions: the live sessions (live as in session-alive.sql) with their
-- remaining ms and metadata, by session id, at most $1 rows (the caller asks for one more than it
-- lists, to know whether there are more).
select s.session_id::text,
       s.expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint,
       s.metadata::text
from simba_session s
where s.expires_at > (extract(epoch from statement_timestamp()) * 1000)::bigint
order by s.session_id
limit $1::bigint
