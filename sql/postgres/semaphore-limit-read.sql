-- The stored limit of a semaphore, if any (stores nothing). $1 semaphore name.
select permits
from simba_semaphore
where name = $1::varchar
