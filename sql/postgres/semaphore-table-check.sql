-- Whether the semaphore table (added after the first release) is visible on the search path: 1 or 0.
select count(*)::bigint
from (values ('simba_semaphore')) as t(name)
where to_regclass(t.name) is not null
