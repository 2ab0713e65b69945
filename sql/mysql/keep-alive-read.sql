-- Fallback keep-alive, step 3 (without the procedure of keep-alive-call.sql), after the renewal,
-- in its transaction (the first consistent read of that transaction, taken after the session row's
-- lock was granted, so it sees every takeover, join and leave that committed before the renewal):
-- the session's remaining time (ms) with every lease it owns and every group it is a member of,
-- as (remaining ms, lease name, token, group name) rows: one per owned lease (group name NULL) —
-- one row with NULL name/token/group when it owns none — plus one per membership (lease name and
-- token NULL); no row when the session is not alive. Both parts read the same snapshot and clock.
-- ? session id, ? the same session id.
SELECT s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), l.name, l.token, NULL
FROM simba_session s
LEFT JOIN simba_lease l ON l.session_id = s.session_id
WHERE s.session_id = ?
  AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
UNION ALL
SELECT s.expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED), NULL, NULL, m.group_name
FROM simba_session s
JOIN simba_member m ON m.session_id = s.session_id
WHERE s.session_id = ?
  AND s.expires_at > CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)
