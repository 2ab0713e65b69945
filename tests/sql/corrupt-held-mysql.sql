INSERT INTO simba_lease (name, session_id, token) VALUES (?, ?, 3)
