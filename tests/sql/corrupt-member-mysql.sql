INSERT INTO simba_member (group_name, session_id) VALUES (?, ?)
