-- Fence check, step 2: the row as step 1 left it. A locking read sees the latest version even
-- under REPEATABLE READ (the transaction already holds the row's lock). ? resource.
select token from simba_fence where resource = ? for update
