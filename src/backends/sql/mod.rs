//! The SQL backend: PostgreSQL 14+ (feature `postgres`) and MySQL 8 / MariaDB 10.11 (feature `mysql`).
//!
//! Four tables (see `sql/<dialect>/init-simba-*.sql` and [`init_sql`]): `simba_session` (one row per
//! session, `expires_at` in database time), `simba_lease` (one row per lease name ever acquired, never
//! deleted, so tokens never reset), `simba_member` (group memberships) and `simba_semaphore` (the
//! limit of every semaphore ever used; its permits are `simba_lease` rows of its slot names). A lease belongs to its
//! `session_id` only while that session's `expires_at` is in the future, so one `UPDATE` of the
//! session row renews every lease and membership of the session.
//!
//! - Acquire is one upsert that takes the row when it is free or its holder's session has expired
//!   and adds one to the token; the holder's session row is read with a shared lock, which
//!   serialises a takeover with that session's renewal.
//! - Every time comparison uses the database clock (UTC epoch milliseconds, time-zone independent);
//!   remaining times come back as durations, capped at the lease duration.
//! - Each backend owns a small connection pool (default 4 connections) that the application cannot
//!   exhaust; every statement is bounded by the query timeout on the server, and the connection
//!   checkout by the same timeout.
//! - PostgreSQL pushes releases: release, close and purge `pg_notify` in the statement (or
//!   transaction) that frees a lease, and one listener connection per backend wakes the waiters
//!   (the poll stays as the fallback). MySQL/MariaDB waiters poll.
//! - Expired sessions left by crashed processes are purged in the background after
//!   `open_session`/`keep_alive`, at most once per purge interval and 1000 sessions per run.
//!
//! See `docs/backends/sql.md` for the operations notes (durability, replication, clocks, pool sizing).
//!
//! ```no_run
//! # fn main() -> simba::Result<()> {
//! use simba::backends::sql::{SqlBackend, SqlOptions};
//! let backend = SqlBackend::postgres("postgres://simba@db.example/app", SqlOptions::default())?;
//! backend.init_schema()?; // or run sql/postgres/init-simba-postgresql.sql once
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use log::{debug, info, warn};
use parking_lot::Mutex;

use crossbeam_channel::Sender;

use crate::backend::{
    Acquire, Capabilities, CheckItem, CheckStatus, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant,
    TermRemaining, Topic,
};
use crate::error::{display_chain, Error, ErrorKind, Result};
use crate::types::{validate_metadata, Name, SessionId, Token};

mod backend;
mod check;
pub(crate) mod config;
mod driver;
mod listing;
#[cfg(feature = "mysql")]
mod mysql;
#[cfg(feature = "mysql")]
pub use mysql::{MysqlConfig, MysqlSslMode, MysqlTls};
mod pool;
#[cfg(feature = "postgres")]
mod postgres;
pub(crate) mod queries;
#[cfg(feature = "mysql")]
mod watchdog;

#[cfg(feature = "postgres")]
pub use postgres::{PostgresTls, RootCerts, SslMode};

pub use backend::SqlBackend;
pub use config::{SqlOptions, SqlOptionsBuilder};
pub(crate) use driver::{add_keep_alive_row, server_limit, Driver, RawAcquire, RawAlive, RawHolder, RawKeepAlive};
pub(crate) use listing::{ListBounds, RawListing};

/// Default time between two background purges of expired sessions.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of connections in the backend's own pool.
pub const DEFAULT_POOL_SIZE: u32 = 4;
/// Default longest life of a pooled connection (it is replaced after that).
pub const DEFAULT_CONNECTION_LIFETIME: Duration = Duration::from_secs(1800);
/// Most sessions one purge run deletes.
pub const PURGE_BATCH: usize = 1000;

/// Longest lease duration the SQL backend accepts (one year).
pub(crate) const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

/// The SQL dialect of a [`SqlBackend`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// PostgreSQL 14 or later (feature `postgres`).
    Postgres,
    /// MySQL 8 or MariaDB 10.11 (feature `mysql`).
    Mysql,
}

impl Dialect {
    /// `"postgres"` or `"mysql"`: the backend kind and the Cargo feature name.
    pub fn name(self) -> &'static str {
        match self {
            Dialect::Postgres => "postgres",
            Dialect::Mysql => "mysql",
        }
    }

    /// The schema script users run once (idempotent: `create table if not exists`).
    pub fn init_sql(self) -> &'static str {
        match self {
            Dialect::Postgres => queries::postgres::INIT_SIMBA_POSTGRESQL,
            Dialect::Mysql => queries::mysql::INIT_SIMBA_MYSQL,
        }
    }

    /// The file name of [`init_sql`](Dialect::init_sql) under `sql/<dialect>/`.
    pub fn init_script_name(self) -> &'static str {
        match self {
            Dialect::Postgres => "init-simba-postgresql.sql",
            Dialect::Mysql => "init-simba-mysql.sql",
        }
    }

    /// The dialect of a URL, by scheme: `postgres://`/`postgresql://` or `mysql://`/`mariadb://`.
    ///
    /// # Errors
    /// `InvalidConfig` for any other scheme.
    pub fn from_url(url: &str) -> Result<Dialect> {
        let scheme = url.split_once("://").map(|(s, _)| s.to_ascii_lowercase()).unwrap_or_default();
        match scheme.as_str() {
            "postgres" | "postgresql" => Ok(Dialect::Postgres),
            "mysql" | "mariadb" => Ok(Dialect::Mysql),
            _ => Err(Error::config(format!(
                "unsupported SQL URL {}: expected postgres://, postgresql://, mysql:// or mariadb://",
                redact_url(url)
            ))),
        }
    }
}

impl fmt::Display for Dialect {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The init SQL script of `dialect` (what `simba schema print` shows).
pub fn init_sql(dialect: Dialect) -> &'static str {
    dialect.init_sql()
}

pub(crate) use crate::settings::redact::redact_url;

#[cfg(test)]
mod tests {
    use super::backend::limit_from_db;
    use super::*;
    use crate::options::DEFAULT_QUERY_TIMEOUT;

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact_url("postgres://u:secret@h:5432/db"), "postgres://u:***@h:5432/db");
        assert_eq!(redact_url("mysql://root@127.0.0.1:3306/test"), "mysql://root@127.0.0.1:3306/test");
        assert!(!redact_url("postgres://h/db?password=secret&x=1").contains("secret"));
        assert_eq!(redact_url("host=h user=u password=secret"), "host=h user=u password=***");
        assert!(!redact_url("mysql://u:se%20cret@[bad").contains("cret"));
    }

    #[test]
    fn semaphore_limits_from_the_database() {
        let n = Name::new("s").unwrap();
        assert_eq!(limit_from_db(Dialect::Postgres, &n, 3).unwrap(), 3);
        for bad in [0, -1, i64::MAX, i64::from(u32::MAX) + 1] {
            let e = limit_from_db(Dialect::Mysql, &n, bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Backend);
            assert!(e.to_string().contains(&format!("corrupt limit {bad} of semaphore 's'")), "{e}");
        }
        assert!(init_sql(Dialect::Postgres).contains("create table if not exists simba_semaphore"));
        assert!(init_sql(Dialect::Mysql).contains("create table if not exists simba_semaphore"));
    }

    #[test]
    fn server_limits_end_before_the_call_deadline() {
        let ms = Duration::from_millis;
        assert_eq!(server_limit(ms(300)), ms(225));
        assert_eq!(server_limit(ms(1000)), ms(750));
        assert_eq!(server_limit(Duration::from_secs(5)), ms(4750));
        assert_eq!(server_limit(ms(1)), Duration::from_micros(750));
    }

    #[test]
    fn dialects_and_options() {
        assert_eq!(Dialect::from_url("postgresql://h/db").unwrap(), Dialect::Postgres);
        assert_eq!(Dialect::from_url("MariaDB://h/db").unwrap(), Dialect::Mysql);
        let e = Dialect::from_url("redis://u:pw@h").unwrap_err();
        assert!(e.to_string().contains("unsupported SQL URL") && !e.to_string().contains("pw"), "{e}");
        assert!(init_sql(Dialect::Postgres).contains("create table if not exists simba_lease"));
        assert!(init_sql(Dialect::Mysql).contains("ascii_bin"));
        let o = SqlOptions::default();
        assert_eq!(o.query_timeout(), DEFAULT_QUERY_TIMEOUT);
        assert_eq!(o.purge_interval(), Duration::from_secs(60));
        assert_eq!(o.connect_timeout(), DEFAULT_QUERY_TIMEOUT);
        assert!(SqlOptions::builder().pool_size(0).build().is_err());
        assert!(SqlOptions::builder().query_timeout(Duration::ZERO).build().is_err());
        let o = SqlOptions::builder().query_timeout(Duration::from_secs(1)).pool_size(2).build().unwrap();
        assert_eq!((o.query_timeout(), o.pool_size()), (Duration::from_secs(1), 2));
        assert_eq!(SqlOptions::default().connection_lifetime(), DEFAULT_CONNECTION_LIFETIME);
        let e = SqlOptions::builder().connection_lifetime(Duration::from_millis(999)).build().unwrap_err();
        assert!(e.to_string().contains("connection_lifetime"), "{e}");
        let o = SqlOptions::builder().connection_lifetime(Duration::MAX).build().unwrap();
        assert_eq!(o.connection_lifetime(), Duration::MAX);
    }
}

#[cfg(test)]
mod prop_tests;

#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod purge_tests;

#[cfg(all(test, any(feature = "postgres", feature = "mysql")))]
mod listing_tests;
