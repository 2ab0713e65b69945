-- Row-lock waits end after ? seconds (MySQL and MariaDB).
SET SESSION innodb_lock_wait_timeout = ?
