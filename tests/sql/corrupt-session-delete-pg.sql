-- Removes the planted session row again (a corrupt live session would break every later listing
-- of the shared database's sessions). $1 session id.
DELETE FROM simba_session WHERE session_id = $1
