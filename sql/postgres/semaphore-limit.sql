-- Semaphore limit: stores the limit when the semaphore has none and returns the stored one, in one
-- atomic statement. DO UPDATE (a no-op assignment) rather than DO NOTHING: it returns the row that
-- won a concurrent first insert too, which a separate read in the same statement's snapshot would
-- not see. $1 semaphore name, $2 permits. One row: the stored limit.
insert into simba_semaphore (name, permits)
values ($1::varchar, $2::bigint)
on conflict (name) do update set permits = simba_semaphore.permits
returning permits
