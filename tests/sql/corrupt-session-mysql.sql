INSERT INTO simba_session (session_id, expires_at, metadata)
VALUES (?, CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) + 3600000, 'intruder')
