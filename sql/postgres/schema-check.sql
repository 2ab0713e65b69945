-- Which of the three Simba tables are visible on the search path.
select count(*)::bigint
from (values ('simba_session'), ('simba_lease'), ('simba_member')) as t(name)
where to_regclass(t.name) is not null
