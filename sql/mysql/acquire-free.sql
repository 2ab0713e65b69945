-- Acquire of a free or new lease: ONE upsert, the whole call when it takes the row. This session's
-- row is read LOCK IN SHARE MODE and must be alive (rule 2, judged in the same statement); the
-- lease row is taken only while its session_id is '' (free), or inserted with token 1 (new). The
-- token assignment comes FIRST (MySQL evaluates the SET list left to right with updated values, and
-- both conditions must see the old session_id); LAST_INSERT_ID(token + 1) hands the new token back
-- in the OK packet. Affected rows: 1 = inserted (token 1), 2 = taken (token = LAST_INSERT_ID),
-- 0 = not taken (held, by this session or another, live or expired; or this session is not alive):
-- the caller then runs the full acquire (simba_acquire_v2, or its statements). The same upsert as
-- the first statement of simba_acquire_v2 (init-simba-mysql.sql); sent on its own it returns no
-- result set and no time left: the term lasts as long as the session, whose own renewals time it.
-- ? lease name, ? session id.
INSERT INTO simba_lease (name, session_id, token)
SELECT ?, me.session_id, 1
FROM simba_session me
WHERE me.session_id = ?
  AND me.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
    token      = IF(simba_lease.session_id = '', LAST_INSERT_ID(simba_lease.token + 1), simba_lease.token),
    session_id = IF(simba_lease.session_id = '', VALUES(session_id), simba_lease.session_id)
