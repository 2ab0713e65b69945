-- The notification connection's statements (run once per connection, as one batch): subscribe to
-- the releases announced by release.sql, close-session.sql and purge-notify.sql (channel
-- simba_release, payload the lease name) and to the membership changes announced by join.sql,
-- leave.sql, close-session.sql and purge-members.sql (channel simba_members, payload the group
-- name): one channel per kind for every name. A channel is an identifier, not a value: it cannot
-- be a bound parameter.
listen simba_release;
listen simba_members;
