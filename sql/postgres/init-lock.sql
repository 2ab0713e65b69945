-- Serialises concurrent schema initialisations (create table if not exists is not race-free on PostgreSQL).
select pg_advisory_xact_lock(7365626100000001)
