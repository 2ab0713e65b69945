-- A membership of that session. $1 group, $2 session id.
INSERT INTO simba_member (group_name, session_id) VALUES ($1, $2)
