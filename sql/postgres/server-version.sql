-- The server version.
select current_setting('server_version')
