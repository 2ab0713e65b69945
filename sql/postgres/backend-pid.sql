-- The server process serving this connection.
select pg_backend_pid()::bigint
