-- Listing (simba status), sessions: the live sessions (live as in session-alive.sql) with their
-- remaining ms and metadata, by session id, at most ? rows (the caller asks for one more than it
-- lists, to know whether there are more).
SELECT s.session_id,
       s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED),
       s.metadata
FROM simba_session s
WHERE s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
ORDER BY s.session_id
LIMIT ?
