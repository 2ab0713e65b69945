-- Removes a session from a group (idempotent). $1 session id, $2 group name.
delete from simba_member
where group_name = $2::varchar
  and session_id = $1
