//! The SQL text of the backend: every statement is a file under `sql/<dialect>/`, embedded here once.
//!
//! Nothing else in the crate contains SQL. The init scripts are the ones users run by hand
//! (`init-simba-postgresql.sql`, `init-simba-mysql.sql`); the other files are single statements run
//! as prepared statements with bound parameters (each file's header comment explains it).
//! (`bench-*.sql` files beside them belong to the benchmarks, not to the library.)

/// Statements of the PostgreSQL 14+ dialect (`sql/postgres/`).
// Both dialects are compiled with either SQL feature (the init scripts are shown for both), so
// with one feature the other's statements are unused; some are used by tests only (the seam).
#[allow(dead_code)]
pub mod postgres {
    /// `acquire.sql`: Acquire: one upsert taking a free, own or expired-holder lease (token + 1 for a new term).
    pub const ACQUIRE: &str = include_str!("../../../sql/postgres/acquire.sql");
    /// `backend-pid.sql`: The server process id serving this connection.
    pub const BACKEND_PID: &str = include_str!("../../../sql/postgres/backend-pid.sql");
    /// `close-session.sql`: Close: deletes the session, releases its leases (tokens kept), removes its
    /// memberships, and announces each freed lease on the release channel.
    pub const CLOSE_SESSION: &str = include_str!("../../../sql/postgres/close-session.sql");
    /// `holder.sql`: The live holder of a lease with its token, remaining time and metadata.
    pub const HOLDER: &str = include_str!("../../../sql/postgres/holder.sql");
    /// `init-lock.sql`: Advisory lock serialising concurrent schema initialisations.
    pub const INIT_LOCK: &str = include_str!("../../../sql/postgres/init-lock.sql");
    /// `init-simba-postgresql.sql`: The PostgreSQL schema script users run once (idempotent).
    pub const INIT_SIMBA_POSTGRESQL: &str = include_str!("../../../sql/postgres/init-simba-postgresql.sql");
    /// `join.sql`: Adds a live session to a group (idempotent).
    pub const JOIN: &str = include_str!("../../../sql/postgres/join.sql");
    /// `keep-alive.sql`: The keep-alive in one statement: renews the session (or deletes it when
    /// expired) and returns the leases it owns and the groups it is a member of.
    pub const KEEP_ALIVE: &str = include_str!("../../../sql/postgres/keep-alive.sql");
    /// `leave.sql`: Removes a session from a group (idempotent).
    pub const LEAVE: &str = include_str!("../../../sql/postgres/leave.sql");
    /// `list-leases.sql`: Listing: the held leases of a name range with their live holders, within
    /// a scan budget (the scan's last row says when it stopped there).
    pub const LIST_LEASES: &str = include_str!("../../../sql/postgres/list-leases.sql");
    /// `list-members.sql`: Listing: the live members of the groups of a name range, groups and
    /// members per group capped, within a scan budget (with how many memberships it read).
    pub const LIST_MEMBERS: &str = include_str!("../../../sql/postgres/list-members.sql");
    /// `list-sessions.sql`: Listing: the live sessions with their remaining time, by id, capped,
    /// within a scan budget (the scan's last row says when it stopped there).
    pub const LIST_SESSIONS: &str = include_str!("../../../sql/postgres/list-sessions.sql");
    /// `listen.sql`: The notification connection subscribes to the channel of released leases.
    pub const LISTEN: &str = include_str!("../../../sql/postgres/listen.sql");
    /// `members.sql`: Live members of a group, ordered by session id.
    pub const MEMBERS: &str = include_str!("../../../sql/postgres/members.sql");
    /// `now.sql`: The database clock as UTC epoch milliseconds.
    pub const NOW: &str = include_str!("../../../sql/postgres/now.sql");
    /// `open-session.sql`: Inserts a new session expiring one lease duration from the database's now.
    pub const OPEN_SESSION: &str = include_str!("../../../sql/postgres/open-session.sql");
    /// `purge-members.sql`: Purge step 2: deletes the memberships of the batch.
    pub const PURGE_MEMBERS: &str = include_str!("../../../sql/postgres/purge-members.sql");
    /// `purge-notify.sql`: Purge step 2b: announces the leases the purged sessions still name as holder.
    pub const PURGE_NOTIFY: &str = include_str!("../../../sql/postgres/purge-notify.sql");
    /// `purge-select.sql`: Purge step 1: locks a batch of expired sessions, oldest first.
    pub const PURGE_SELECT: &str = include_str!("../../../sql/postgres/purge-select.sql");
    /// `purge-sessions.sql`: Purge step 3: deletes the sessions of the batch (lease rows stay).
    pub const PURGE_SESSIONS: &str = include_str!("../../../sql/postgres/purge-sessions.sql");
    /// `release.sql`: Frees a lease held by the session, keeping its token, and announces it on the
    /// release channel.
    pub const RELEASE: &str = include_str!("../../../sql/postgres/release.sql");
    /// `schema-check.sql`: Counts the Simba tables present.
    pub const SCHEMA_CHECK: &str = include_str!("../../../sql/postgres/schema-check.sql");
    /// `semaphore-limit.sql`: Stores a semaphore's limit if it has none; returns the stored limit (one upsert).
    pub const SEMAPHORE_LIMIT: &str = include_str!("../../../sql/postgres/semaphore-limit.sql");
    /// `semaphore-limit-read.sql`: The stored limit of a semaphore, if any.
    pub const SEMAPHORE_LIMIT_READ: &str = include_str!("../../../sql/postgres/semaphore-limit-read.sql");
    /// `semaphore-table-check.sql`: Whether the semaphore table exists (1 or 0).
    pub const SEMAPHORE_TABLE_CHECK: &str = include_str!("../../../sql/postgres/semaphore-table-check.sql");
    /// `server-version.sql`: The server version string.
    pub const SERVER_VERSION: &str = include_str!("../../../sql/postgres/server-version.sql");
    /// `session-alive.sql`: Whether a session is alive.
    pub const SESSION_ALIVE: &str = include_str!("../../../sql/postgres/session-alive.sql");
}

/// Statements of the MySQL 8 and MariaDB 10.11 dialect (`sql/mysql/`).
#[allow(dead_code)] // as `postgres` above
pub mod mysql {
    /// `acquire-observe.sql`: Acquire step 1: is this session alive, who holds the lease, is that holder alive.
    pub const ACQUIRE_OBSERVE: &str = include_str!("../../../sql/mysql/acquire-observe.sql");
    /// `acquire.sql`: Acquire: one upsert taking a free, own or expired-holder lease (token + 1 for a new term).
    pub const ACQUIRE: &str = include_str!("../../../sql/mysql/acquire.sql");
    /// `acquire-free.sql`: Acquire of a free or new lease in one upsert (no result set, no time
    /// left: the term lasts as long as the session); 0 affected rows sends the full acquire.
    pub const ACQUIRE_FREE: &str = include_str!("../../../sql/mysql/acquire-free.sql");
    /// `acquire-call.sql`: The acquire in one round trip: calls the schema's procedure
    /// [`ACQUIRE_PROCEDURE`], which takes a free or new lease with one upsert and otherwise runs
    /// [`ACQUIRE_OBSERVE`] and then [`ACQUIRE`] on the server.
    pub const ACQUIRE_CALL: &str = include_str!("../../../sql/mysql/acquire-call.sql");
    /// The name of the stored procedure [`ACQUIRE_CALL`] calls, created by [`INIT_SIMBA_MYSQL`] and
    /// looked up by [`ROUTINE_CHECK`] (not SQL text: the name, for messages).
    pub const ACQUIRE_PROCEDURE: &str = "simba_acquire_v2";
    /// `delete-expired-session.sql`: Fallback keep-alive on an expired session: deletes the session row.
    pub const DELETE_EXPIRED_SESSION: &str = include_str!("../../../sql/mysql/delete-expired-session.sql");
    /// `delete-session-members.sql`: Close step 3 and fallback expired keep-alive: deletes the session's memberships.
    pub const DELETE_SESSION_MEMBERS: &str = include_str!("../../../sql/mysql/delete-session-members.sql");
    /// `delete-session.sql`: Close step 1: deletes the session row.
    pub const DELETE_SESSION: &str = include_str!("../../../sql/mysql/delete-session.sql");
    /// `holder.sql`: The live holder of a lease with its token, remaining time and metadata.
    pub const HOLDER: &str = include_str!("../../../sql/mysql/holder.sql");
    /// `init-simba-mysql.sql`: The MySQL/MariaDB schema script users run once (idempotent): four
    /// tables and the keep-alive procedure (`delimiter` lines for the `mysql` client).
    pub const INIT_SIMBA_MYSQL: &str = include_str!("../../../sql/mysql/init-simba-mysql.sql");
    /// `join.sql`: Adds a live session to a group (idempotent).
    pub const JOIN: &str = include_str!("../../../sql/mysql/join.sql");
    /// `keep-alive-call.sql`: The keep-alive in one round trip: calls the schema's procedure
    /// [`KEEP_ALIVE_PROCEDURE`], which renews the session (or deletes it when expired) and returns
    /// the leases it owns and the groups it is a member of.
    pub const KEEP_ALIVE_CALL: &str = include_str!("../../../sql/mysql/keep-alive-call.sql");
    /// The name of the stored procedure [`KEEP_ALIVE_CALL`] calls, created by
    /// [`INIT_SIMBA_MYSQL`] and looked up by [`ROUTINE_CHECK`] (not SQL text: the name, for messages).
    pub const KEEP_ALIVE_PROCEDURE: &str = "simba_keep_alive_v4";
    /// `keep-alive-lock.sql`: Fallback keep-alive step 1 (no procedure): locks the session row
    /// first, so that the renewal judges expiry with a clock read after the lock.
    pub const KEEP_ALIVE_LOCK: &str = include_str!("../../../sql/mysql/keep-alive-lock.sql");
    /// `keep-alive-read.sql`: Fallback keep-alive step 3: the session's remaining time, the leases
    /// it owns and the groups it is a member of.
    pub const KEEP_ALIVE_READ: &str = include_str!("../../../sql/mysql/keep-alive-read.sql");
    /// `keep-alive.sql`: Fallback keep-alive step 2 (no procedure): the UPDATE that renews a locked session.
    pub const KEEP_ALIVE: &str = include_str!("../../../sql/mysql/keep-alive.sql");
    /// `leave.sql`: Removes a session from a group (idempotent).
    pub const LEAVE: &str = include_str!("../../../sql/mysql/leave.sql");
    /// `list-leases.sql`: Listing: the held leases of a name range with their live holders, within
    /// a scan budget (the scan's last row says when it stopped there).
    pub const LIST_LEASES: &str = include_str!("../../../sql/mysql/list-leases.sql");
    /// `list-members.sql`: Listing: the live members of the groups of a name range, groups and
    /// members per group capped, within a scan budget (with how many memberships it read).
    pub const LIST_MEMBERS: &str = include_str!("../../../sql/mysql/list-members.sql");
    /// `list-sessions.sql`: Listing: the live sessions with their remaining time, by id, capped,
    /// within a scan budget (the scan's last row says when it stopped there).
    pub const LIST_SESSIONS: &str = include_str!("../../../sql/mysql/list-sessions.sql");
    /// `members.sql`: Live members of a group, ordered by session id.
    pub const MEMBERS: &str = include_str!("../../../sql/mysql/members.sql");
    /// `now.sql`: The database clock as UTC epoch milliseconds.
    pub const NOW: &str = include_str!("../../../sql/mysql/now.sql");
    /// `open-session.sql`: Inserts a new session expiring one lease duration from the database's now.
    pub const OPEN_SESSION: &str = include_str!("../../../sql/mysql/open-session.sql");
    /// `purge-members.sql`: Purge step 2: deletes the memberships of the batch.
    pub const PURGE_MEMBERS: &str = include_str!("../../../sql/mysql/purge-members.sql");
    /// `purge-members-listed.sql`: Purge step 2 (SKIP LOCKED servers): deletes the memberships of
    /// the listed sessions (a JSON array).
    pub const PURGE_MEMBERS_LISTED: &str = include_str!("../../../sql/mysql/purge-members-listed.sql");
    /// `purge-select.sql`: Purge step 1: locks a batch of expired sessions, oldest first.
    pub const PURGE_SELECT: &str = include_str!("../../../sql/mysql/purge-select.sql");
    /// `purge-select-skip-locked.sql`: Purge step 1 (SKIP LOCKED servers): locks a batch of
    /// expired sessions, oldest first, skipping rows others hold.
    pub const PURGE_SELECT_SKIP_LOCKED: &str = include_str!("../../../sql/mysql/purge-select-skip-locked.sql");
    /// `purge-sessions.sql`: Purge step 3: deletes the sessions of the batch (lease rows stay).
    pub const PURGE_SESSIONS: &str = include_str!("../../../sql/mysql/purge-sessions.sql");
    /// `purge-sessions-listed.sql`: Purge step 3 (SKIP LOCKED servers): deletes the listed sessions.
    pub const PURGE_SESSIONS_LISTED: &str = include_str!("../../../sql/mysql/purge-sessions-listed.sql");
    /// `release-session-leases.sql`: Close step 2: releases every lease of the session, keeping tokens.
    pub const RELEASE_SESSION_LEASES: &str = include_str!("../../../sql/mysql/release-session-leases.sql");
    /// `release.sql`: Frees a lease held by the session, keeping its token.
    pub const RELEASE: &str = include_str!("../../../sql/mysql/release.sql");
    /// `routine-check.sql`: Which of the procedures [`KEEP_ALIVE_PROCEDURE`] and [`ACQUIRE_PROCEDURE`]
    /// exist (their names, one row each).
    pub const ROUTINE_CHECK: &str = include_str!("../../../sql/mysql/routine-check.sql");
    /// `schema-check.sql`: Counts the Simba tables present.
    pub const SCHEMA_CHECK: &str = include_str!("../../../sql/mysql/schema-check.sql");
    /// `semaphore-limit.sql`: Semaphore limit step 1: stores the limit if the semaphore has none.
    pub const SEMAPHORE_LIMIT: &str = include_str!("../../../sql/mysql/semaphore-limit.sql");
    /// `semaphore-limit-read.sql`: Semaphore limit step 2 (and the read-only form): the stored limit, if any.
    pub const SEMAPHORE_LIMIT_READ: &str = include_str!("../../../sql/mysql/semaphore-limit-read.sql");
    /// `semaphore-table-check.sql`: Whether the semaphore table exists (1 or 0).
    pub const SEMAPHORE_TABLE_CHECK: &str = include_str!("../../../sql/mysql/semaphore-table-check.sql");
    /// `server-version.sql`: The server version string.
    pub const SERVER_VERSION: &str = include_str!("../../../sql/mysql/server-version.sql");
    /// `session-alive.sql`: Whether a session is alive.
    pub const SESSION_ALIVE: &str = include_str!("../../../sql/mysql/session-alive.sql");
    /// `session-autocommit.sql`: Per-connection setting: autocommit on, whatever the server default.
    pub const SESSION_AUTOCOMMIT: &str = include_str!("../../../sql/mysql/session-autocommit.sql");
    /// `session-execution-time-mysql.sql`: Per-connection setting (MySQL 8): SELECT timeout (milliseconds).
    pub const SESSION_EXECUTION_TIME_MYSQL: &str = include_str!("../../../sql/mysql/session-execution-time-mysql.sql");
    /// `session-lock-wait-timeout.sql`: Per-connection setting: row-lock wait timeout (seconds).
    pub const SESSION_LOCK_WAIT_TIMEOUT: &str = include_str!("../../../sql/mysql/session-lock-wait-timeout.sql");
    /// `session-statement-time-mariadb.sql`: Per-connection setting (MariaDB): statement timeout (seconds).
    pub const SESSION_STATEMENT_TIME_MARIADB: &str =
        include_str!("../../../sql/mysql/session-statement-time-mariadb.sql");
    /// `session-time-zone.sql`: Per-connection setting: UTC session time zone.
    pub const SESSION_TIME_ZONE: &str = include_str!("../../../sql/mysql/session-time-zone.sql");
    /// `tls-status.sql`: The TLS protocol and cipher of this connection, as the server sees it.
    pub const TLS_STATUS: &str = include_str!("../../../sql/mysql/tls-status.sql");
}
