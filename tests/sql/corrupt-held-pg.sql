-- A lease row held by that session. $1 lease name, $2 session id.
INSERT INTO simba_lease (name, session_id, token) VALUES ($1, $2, 3)
