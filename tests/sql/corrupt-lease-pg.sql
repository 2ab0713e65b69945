-- Someone else's corrupt lease row: a negative token. $1 lease name.
INSERT INTO simba_lease (name, session_id, token) VALUES ($1, '', -7)
