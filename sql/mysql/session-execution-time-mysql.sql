-- MySQL 8: read-only SELECTs are aborted after ? milliseconds (writes are bounded by the lock wait timeout).
SET SESSION max_execution_time = ?
