-- The server version string ('...-MariaDB...' on MariaDB).
SELECT VERSION()
