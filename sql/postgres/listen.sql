-- The notification connection's only statement: subscribe to the releases announced by
-- release.sql, close-session.sql and purge-notify.sql (one channel for every lease; the payload is
-- the lease name). A channel is an identifier, not a value: it cannot be a bound parameter.
listen simba_release
