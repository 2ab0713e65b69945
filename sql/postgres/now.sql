-- The database clock as UTC epoch milliseconds (time-zone independent).
select (extract(epoch from statement_timestamp()) * 1000)::bigint
