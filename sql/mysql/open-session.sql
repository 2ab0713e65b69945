-- ? session id, ? lease duration (ms), ? metadata.
INSERT INTO simba_session (session_id, expires_at, metadata)
VALUES (?, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + ?, ?)
