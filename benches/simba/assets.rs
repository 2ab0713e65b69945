//! The SQL and Lua the benchmark runs itself (raw baselines, server counters, cleanup), each file
//! included once. The library's own statements are not repeated here.

/// Redis: compare-and-delete release of the raw `SET NX PX` lock.
#[cfg(feature = "redis")]
pub const REDIS_UNLOCK: &str = include_str!("../../lua/bench-unlock.lua");

/// Redis: PUBLISH from inside a script (the notification baseline).
#[cfg(feature = "redis")]
pub const REDIS_PUBLISH: &str = include_str!("../../lua/bench-publish.lua");

/// Redis Cluster: SPUBLISH from inside a script (the sharded notification baseline).
#[cfg(feature = "redis")]
pub const REDIS_SPUBLISH: &str = include_str!("../../lua/bench-spublish.lua");

/// PostgreSQL statements.
#[cfg(feature = "postgres")]
pub mod postgres {
    /// Creates the raw lock's table.
    pub const INIT: &str = include_str!("../../sql/postgres/bench-init.sql");
    /// Takes the raw lock (one upsert).
    pub const LOCK: &str = include_str!("../../sql/postgres/bench-lock.sql");
    /// Frees the raw lock (one update).
    pub const UNLOCK: &str = include_str!("../../sql/postgres/bench-unlock.sql");
    /// Transactions of the current database so far.
    pub const COMMITS: &str = include_str!("../../sql/postgres/bench-commits.sql");
    /// Deletes a run's lease rows.
    pub const CLEANUP: &str = include_str!("../../sql/postgres/bench-cleanup.sql");
    /// The server version string.
    pub const VERSION: &str = include_str!("../../sql/postgres/bench-version.sql");
    /// The raw notification: `pg_notify` on the bench's channel.
    pub const NOTIFY: &str = include_str!("../../sql/postgres/bench-notify.sql");
    /// The raw notification's listener subscribes.
    pub const LISTEN: &str = include_str!("../../sql/postgres/bench-listen.sql");
}

/// MySQL/MariaDB statements.
#[cfg(feature = "mysql")]
pub mod mysql {
    /// Creates the raw lock's table.
    pub const INIT: &str = include_str!("../../sql/mysql/bench-init.sql");
    /// Takes the raw lock (one upsert).
    pub const LOCK: &str = include_str!("../../sql/mysql/bench-lock.sql");
    /// Frees the raw lock (one update).
    pub const UNLOCK: &str = include_str!("../../sql/mysql/bench-unlock.sql");
    /// The server's `Questions` counter.
    pub const QUESTIONS: &str = include_str!("../../sql/mysql/bench-questions.sql");
    /// Deletes a run's lease rows.
    pub const CLEANUP: &str = include_str!("../../sql/mysql/bench-cleanup.sql");
    /// The server version string.
    pub const VERSION: &str = include_str!("../../sql/mysql/bench-version.sql");
}
