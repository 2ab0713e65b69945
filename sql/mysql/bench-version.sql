-- Benchmark only: the server version, for the report.
select version()
