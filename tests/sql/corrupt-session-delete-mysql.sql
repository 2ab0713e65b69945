-- Removes the planted session row again (a corrupt live session would break every later listing
-- of the shared database's sessions). ? session id.
DELETE FROM simba_session WHERE session_id = ?
