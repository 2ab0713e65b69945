-- Every connection runs with autocommit on, whatever the server's default (`autocommit=0` in the
-- server configuration, or an init_connect that turns it off, would leave each statement's
-- transaction, and its row locks, open on the pooled connection). The backend's multi-statement
-- work uses explicit transactions.
SET autocommit = 1
