-- Purge, step 2: memberships of every session expired at or before the cutoff (?), which covers the
-- locked sessions; a dead session can never join again.
DELETE FROM simba_member
WHERE session_id IN (SELECT session_id FROM simba_session WHERE expires_at <= ?)
