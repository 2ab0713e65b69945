-- Acquire, step 2: ONE upsert that takes the lease when it is free or its holder's session has
-- expired, adding one to the token. Parameters: ? lease name, ? observed holder ('' when free or
-- absent), ? session id, ? observed holder, ? observed holder.
-- The SELECT reads this session and the observed holder's session row LOCK IN SHARE MODE (a current,
-- locking read that MySQL 8 and MariaDB both honour here), so the takeover is serialised with that
-- session's renewal: it produces a row only when this session is alive and the holder's session is
-- gone or expired. The UPDATE then takes the row only if it is still free or still held by that
-- (dead) holder. The token assignment comes FIRST: MySQL evaluates the SET list left to right with
-- updated values, and both conditions must see the old session_id. LAST_INSERT_ID(token + 1) hands
-- the new token back in the OK packet. Affected rows: 1 = inserted (token 1), 2 = taken over,
-- 0 = not taken.
INSERT INTO simba_lease (name, session_id, token)
SELECT ?, me.session_id, 1
FROM simba_session me
LEFT JOIN simba_session h ON h.session_id = ?
WHERE me.session_id = ?
  AND me.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
  AND (h.session_id IS NULL OR h.expires_at <= CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED))
LOCK IN SHARE MODE
ON DUPLICATE KEY UPDATE
    token      = IF(simba_lease.session_id = '' OR simba_lease.session_id = ?,
                    LAST_INSERT_ID(simba_lease.token + 1), simba_lease.token),
    session_id = IF(simba_lease.session_id = '' OR simba_lease.session_id = ?,
                    VALUES(session_id), simba_lease.session_id)
