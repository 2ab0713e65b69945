-- Purge, step 1 (in a transaction): lock up to $1 expired sessions, oldest first, along
-- idx_session_expires. Rows locked by a concurrent join/acquire/purge are left for the next run.
select session_id::text
from simba_session
where expires_at < (extract(epoch from statement_timestamp()) * 1000)::bigint
order by expires_at
limit $1::bigint
for update skip locked
