-- MariaDB: every statement (reads and writes) is aborted after ? seconds.
SET SESSION max_statement_time = ?
