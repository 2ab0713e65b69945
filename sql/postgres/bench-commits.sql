-- Benchmark only: transactions committed or rolled back in this database so far (each autocommit
-- statement is one). The statistics collector flushes other backends' counts with a delay of up to
-- about a second, so only differences over long windows are meaningful.
select (xact_commit + xact_rollback)::bigint
from pg_stat_database
where datname = current_database()
