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
use crate::options::DEFAULT_QUERY_TIMEOUT;
use crate::types::{validate_metadata, Name, SessionId, Token};

pub(crate) mod config;
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

/// Default time between two background purges of expired sessions.
pub const DEFAULT_PURGE_INTERVAL: Duration = Duration::from_secs(60);
/// Default number of connections in the backend's own pool.
pub const DEFAULT_POOL_SIZE: u32 = 4;
/// Default longest life of a pooled connection (it is replaced after that).
pub const DEFAULT_CONNECTION_LIFETIME: Duration = Duration::from_secs(1800);
/// Most sessions one purge run deletes.
pub const PURGE_BATCH: usize = 1000;

/// Longest lease duration the SQL backend accepts (one year).
const MAX_LEASE: Duration = Duration::from_secs(365 * 24 * 3600);

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

/// Settings of a [`SqlBackend`]. Build with [`SqlOptions::builder`]; [`Default`] gives the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlOptions {
    query_timeout: Duration,
    connect_timeout: Option<Duration>,
    purge_interval: Duration,
    auto_purge: bool,
    pool_size: u32,
    connection_lifetime: Duration,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            connect_timeout: None,
            purge_interval: DEFAULT_PURGE_INTERVAL,
            auto_purge: true,
            pool_size: DEFAULT_POOL_SIZE,
            connection_lifetime: DEFAULT_CONNECTION_LIFETIME,
        }
    }
}

impl SqlOptions {
    /// A builder starting from the defaults.
    pub fn builder() -> SqlOptionsBuilder {
        SqlOptionsBuilder::default()
    }

    /// Server-side timeout of every statement and bound of every connection checkout
    /// (default [`DEFAULT_QUERY_TIMEOUT`], 5 s), and the bound of every whole call
    /// ([`LeaseBackend::call_bound`]). Set it to the sessions' renew interval.
    pub fn query_timeout(&self) -> Duration {
        self.query_timeout
    }

    /// TCP connect (and PostgreSQL startup) timeout of new connections (default: the query timeout).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout.unwrap_or(self.query_timeout)
    }

    /// Least time between two background purges (default 60 s).
    pub fn purge_interval(&self) -> Duration {
        self.purge_interval
    }

    /// Whether `open_session`/`keep_alive` start background purges (default `true`).
    pub fn auto_purge(&self) -> bool {
        self.auto_purge
    }

    /// Connections in the backend's own pool (default 4).
    pub fn pool_size(&self) -> u32 {
        self.pool_size
    }

    /// Longest life of a pooled connection (default 30 min; [`Duration::MAX`]: forever).
    pub fn connection_lifetime(&self) -> Duration {
        self.connection_lifetime
    }
}

/// Builder of [`SqlOptions`].
#[derive(Debug, Clone, Default)]
pub struct SqlOptionsBuilder {
    query_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    purge_interval: Option<Duration>,
    auto_purge: Option<bool>,
    pool_size: Option<u32>,
    connection_lifetime: Option<Duration>,
}

impl SqlOptionsBuilder {
    /// Server-side timeout of every statement and bound of every connection checkout (default 5 s;
    /// 1 ms to 1 h), and the bound of every whole call, statements and retries included. Use the sessions' renew interval: a renewal slower than that counts as failed.
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = Some(d);
        self
    }

    /// TCP connect timeout of new connections (default: the query timeout; 1 ms to 1 h).
    #[must_use]
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// Least time between two background purges of expired sessions (default 60 s; at most 1 day).
    #[must_use]
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.purge_interval = Some(d);
        self
    }

    /// Whether `open_session`/`keep_alive` start background purges (default `true`). Without them,
    /// call [`LeaseBackend::purge_expired`] yourself (e.g. `simba purge` from cron).
    #[must_use]
    pub fn auto_purge(mut self, on: bool) -> Self {
        self.auto_purge = Some(on);
        self
    }

    /// Connections in the backend's own pool (default 4; 1 to 256). Connections are opened on
    /// demand; a caller waits at most the query timeout for a free one.
    #[must_use]
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = Some(n);
        self
    }

    /// Longest life of a pooled connection: it is closed and replaced (on demand) after that,
    /// e.g. to follow a server's rotated certificate or a changed DNS name (default 30 min; at
    /// least 1 s; [`Duration::MAX`] keeps connections forever). PostgreSQL closes a connection this
    /// old when the call using it ends; idle ones are closed by the pool's reaper, every 30 s.
    #[must_use]
    pub fn connection_lifetime(mut self, d: Duration) -> Self {
        self.connection_lifetime = Some(d);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule it breaks.
    pub fn build(self) -> Result<SqlOptions> {
        let hour = Duration::from_secs(3600);
        let query_timeout = self.query_timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
        if query_timeout < Duration::from_millis(1) || query_timeout > hour {
            return Err(Error::config(format!("query_timeout {query_timeout:?} must be between 1ms and 1h")));
        }
        if let Some(c) = self.connect_timeout {
            if c < Duration::from_millis(1) || c > hour {
                return Err(Error::config(format!("connect_timeout {c:?} must be between 1ms and 1h")));
            }
        }
        let purge_interval = self.purge_interval.unwrap_or(DEFAULT_PURGE_INTERVAL);
        if purge_interval > Duration::from_secs(24 * 3600) {
            return Err(Error::config(format!("purge_interval {purge_interval:?} must be at most 24h")));
        }
        let pool_size = self.pool_size.unwrap_or(DEFAULT_POOL_SIZE);
        if !(1..=256).contains(&pool_size) {
            return Err(Error::config(format!("pool_size {pool_size} must be between 1 and 256")));
        }
        let connection_lifetime = self.connection_lifetime.unwrap_or(DEFAULT_CONNECTION_LIFETIME);
        if connection_lifetime < Duration::from_secs(1) {
            return Err(Error::config(format!(
                "connection_lifetime {connection_lifetime:?} must be at least 1s (Duration::MAX: forever)"
            )));
        }
        Ok(SqlOptions {
            query_timeout,
            connect_timeout: self.connect_timeout,
            purge_interval,
            auto_purge: self.auto_purge.unwrap_or(true),
            pool_size,
            connection_lifetime,
        })
    }
}

/// The server-side limit of a statement (PostgreSQL `statement_timeout`; MariaDB
/// `max_statement_time`, MySQL 8 `max_execution_time`, and `innodb_lock_wait_timeout` in whole
/// seconds, at least 1) for a query timeout `qt`: a little less than `qt` (a quarter of it, at most
/// 250 ms, less), so that a statement waiting for a lock ends with the server's own error before
/// the call's deadline, `qt` from the call's start, ends it on the client.
pub(crate) fn server_limit(qt: Duration) -> Duration {
    qt - (qt / 4).min(Duration::from_millis(250))
}

/// What a dialect's acquire reports, before conversion.
#[derive(Debug)]
pub(crate) enum RawAcquire {
    /// Held with `token`; `remaining_ms` is the session's time left, `None` when the acquire did
    /// not read it (the term lasts as long as the session: [`TermRemaining::WithSession`]).
    Acquired {
        token: i64,
        remaining_ms: Option<i64>,
    },
    Busy,
    Expired,
}

/// A holder row: session id, token, remaining ms, metadata.
pub(crate) type RawHolder = (String, i64, i64, String);

/// What a live session's keep-alive read, before conversion.
#[derive(Debug, Default)]
pub(crate) struct RawAlive {
    /// The session's remaining time (ms).
    pub(crate) remaining_ms: i64,
    /// The owned `(lease name, token)` rows.
    pub(crate) owned: Vec<(String, i64)>,
    /// The group names of the session's membership rows.
    pub(crate) groups: Vec<String>,
}

/// A keep-alive reply: `None` when expired.
pub(crate) type RawKeepAlive = Option<RawAlive>;

/// One row of a keep-alive result set — `(remaining ms, lease name, token, group name)`, the same
/// shape on both dialects: a lease row has a name and a token, a membership row a group name, and
/// a session owning nothing still yields one row of NULLs (for its remaining time) — added to
/// `alive` (the first row also sets the remaining time).
pub(crate) fn add_keep_alive_row(
    alive: &mut Option<RawAlive>,
    remaining_ms: i64,
    lease: Option<String>,
    token: Option<i64>,
    group: Option<String>,
) {
    let alive = alive.get_or_insert_with(|| RawAlive { remaining_ms, ..RawAlive::default() });
    if let (Some(name), Some(token)) = (lease, token) {
        alive.owned.push((name, token));
    }
    if let Some(group) = group {
        alive.groups.push(group);
    }
}

/// The per-dialect statements. Every method is one bounded call (checkout + statements + retries).
pub(crate) trait Driver: Send + Sync + 'static {
    fn init_schema(&self) -> Result<()>;
    fn open_session(&self, id: &SessionId, lease_ms: i64, metadata: &str) -> Result<()>;
    /// `None` when the session is expired or unknown (and then deleted).
    fn keep_alive(&self, id: &SessionId, lease_ms: i64) -> Result<RawKeepAlive>;
    fn close_session(&self, id: &SessionId) -> Result<()>;
    fn acquire(&self, id: &SessionId, name: &Name) -> Result<RawAcquire>;
    fn release(&self, id: &SessionId, name: &Name, token: i64) -> Result<()>;
    fn holder(&self, name: &Name) -> Result<Option<RawHolder>>;
    /// `false` when the session is not alive.
    fn join(&self, id: &SessionId, group: &Name) -> Result<bool>;
    fn leave(&self, id: &SessionId, group: &Name) -> Result<()>;
    fn members(&self, group: &Name) -> Result<Vec<(String, String)>>;
    fn purge(&self, limit: usize) -> Result<usize>;
    fn now_ms(&self) -> Result<i64>;
    fn schema_tables(&self) -> Result<i64>;
    /// The stored limit of semaphore `name`, storing `permits` first when given and none is stored.
    fn semaphore_limit(&self, name: &Name, permits: Option<i64>) -> Result<Option<i64>>;
    /// Whether the semaphore table (added after the first release) exists.
    fn semaphore_table(&self) -> Result<bool>;
    /// The name of a stored routine of the schema that is missing (MySQL: the keep-alive
    /// procedure; its absence costs a round trip per keep-alive, nothing else).
    fn missing_routine(&self) -> Result<Option<&'static str>> {
        Ok(None)
    }
    fn server_version(&self) -> Result<String>;
    fn connection_ids(&self) -> Vec<u64>;
    /// Whether the dialect pushes releases (PostgreSQL: `LISTEN`/`NOTIFY`).
    fn push_release(&self) -> bool {
        false
    }
    /// A one-shot interest in the release of `name` (see [`LeaseBackend::watch`]); `false` when
    /// the dialect cannot push it now (the caller polls).
    fn watch_release(&self, name: &Name, notify: &Sender<Notification>) -> Result<bool> {
        let _ = (name, notify);
        Ok(false)
    }
    /// The server-side id of the notification connection while it is open.
    fn notification_connection_id(&self) -> Option<u64> {
        None
    }
    /// The dialect's own `check` items (the `tls` item: whether a connection is encrypted and the
    /// server certificate verified), after `reachable`.
    fn extra_checks(&self) -> Vec<CheckItem> {
        Vec::new()
    }
    /// How long any one call of this driver can take (see [`LeaseBackend::call_bound`]); `None`
    /// when a call may block indefinitely.
    fn call_bound(&self) -> Option<Duration> {
        None
    }
    /// [`release`](Driver::release) within `deadline` (the dialects that bound their calls end it
    /// by then; the others ignore it).
    fn release_until(&self, id: &SessionId, name: &Name, token: i64, deadline: Instant) -> Result<()> {
        let _ = deadline;
        self.release(id, name, token)
    }
}

/// The SQL [`LeaseBackend`] (PostgreSQL or MySQL/MariaDB). Cheap to clone; clones share the pool.
///
/// Construction does no I/O: connections are opened on demand (at most
/// [`pool_size`](SqlOptions::pool_size)). Use [`init_schema`](SqlBackend::init_schema) or the init
/// script to create the tables, and [`check`](LeaseBackend::check) to verify the setup.
#[derive(Clone)]
pub struct SqlBackend {
    inner: Arc<Inner>,
}

struct Inner {
    dialect: Dialect,
    url: String,
    options: SqlOptions,
    driver: Box<dyn Driver>,
    purge_last: Mutex<Option<Instant>>,
    purging: AtomicBool,
    leases: Mutex<HashMap<SessionId, Duration>>,
}

impl fmt::Debug for SqlBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlBackend")
            .field("dialect", &self.inner.dialect)
            .field("url", &self.inner.url)
            .field("options", &self.inner.options)
            .finish()
    }
}

impl SqlBackend {
    /// A PostgreSQL backend for `url` (`postgres://user:password@host:port/db?sslmode=…`, or a
    /// libpq-style `key=value` string), with libpq's TLS parameters `sslmode`
    /// (`disable`/`prefer`/`require`/`verify-ca`/`verify-full`, default `prefer`), `sslrootcert`
    /// (a PEM file, or `system`), `sslcert`/`sslkey` (a client identity) and `sslsni` — see
    /// [`PostgresTls`] and `docs/configuration.md`. No network I/O happens here; the TLS files are
    /// read here.
    ///
    /// # Errors
    /// `InvalidConfig` when the URL cannot be parsed, a TLS parameter is malformed or not
    /// supported, or a TLS file cannot be read.
    #[cfg(feature = "postgres")]
    pub fn postgres(url: &str, options: SqlOptions) -> Result<SqlBackend> {
        SqlBackend::postgres_with_tls(url, &PostgresTls::default(), options)
    }

    /// As [`postgres`](SqlBackend::postgres), with TLS settings given in code joined with the
    /// URL's (a setting made in both with different values is an error).
    ///
    /// # Errors
    /// As [`postgres`](SqlBackend::postgres); `InvalidConfig` for a setting made twice.
    #[cfg(feature = "postgres")]
    pub fn postgres_with_tls(url: &str, tls: &PostgresTls, options: SqlOptions) -> Result<SqlBackend> {
        let driver = postgres::PgDriver::new(url, tls, &options)?;
        Ok(SqlBackend::with_driver(Dialect::Postgres, url, options, Box::new(driver)))
    }

    /// A PostgreSQL backend for the application's own driver configuration: hosts, user,
    /// password, database, `options`, timeouts and keepalives as the application set them up,
    /// with `tls` (whose `sslmode` replaces the configuration's). The backend still owns its pool
    /// (`options.pool_size()` connections, at most [`SqlOptions::connection_lifetime`] each) and
    /// adds its statement timeout to the configuration's `options`; unset connect timeouts take
    /// the backend's. No network I/O happens here; the TLS files are read here.
    ///
    /// # Errors
    /// `InvalidConfig` for a TLS setting that breaks a rule or a TLS file that cannot be read.
    #[cfg(feature = "postgres")]
    pub fn postgres_from_config(
        config: ::postgres::Config,
        tls: &PostgresTls,
        options: SqlOptions,
    ) -> Result<SqlBackend> {
        let driver = postgres::PgDriver::from_config(config, tls, &options)?;
        let shown = driver.shown().to_string();
        Ok(SqlBackend::with_driver(Dialect::Postgres, &shown, options, Box::new(driver)))
    }

    /// A MySQL 8 / MariaDB 10.11 backend for `url`
    /// (`mysql://user:password@host:port/db?ssl-mode=VERIFY_IDENTITY&ssl-ca=/path/ca.pem`; `mariadb://`
    /// is accepted as a synonym; the `ssl-*` parameters are described at [`MysqlConfig`]). No
    /// network I/O happens here (TLS files are read to check them).
    ///
    /// # Errors
    /// `InvalidConfig` when the URL cannot be parsed or its TLS settings are unusable.
    #[cfg(feature = "mysql")]
    pub fn mysql(url: &str, options: SqlOptions) -> Result<SqlBackend> {
        let config = MysqlConfig::from_url(url)?;
        let driver = mysql::MyDriver::new(&config, &options)?;
        Ok(SqlBackend::with_driver(Dialect::Mysql, url, options, Box::new(driver)))
    }

    /// A MySQL/MariaDB backend from the application's own driver options (`mysql::Opts` or
    /// `mysql::OptsBuilder` of the `mysql` crate, version 28): host, credentials, database and its
    /// `SslOpts` are used as given (see [`MysqlConfig::from_opts`]). Same as
    /// [`mysql_config`](SqlBackend::mysql_config)`(MysqlConfig::from_opts(opts), options)`.
    ///
    /// # Errors
    /// As [`mysql_config`](SqlBackend::mysql_config).
    #[cfg(feature = "mysql")]
    pub fn mysql_opts(opts: impl Into<::mysql::Opts>, options: SqlOptions) -> Result<SqlBackend> {
        SqlBackend::mysql_config(MysqlConfig::from_opts(opts), options)
    }

    /// A MySQL/MariaDB backend for `config`. The backend owns its pool (`options`: size,
    /// connection lifetime, timeouts) and forces, on top of the driver options, what its
    /// statements depend on: TCP connect/read/write timeouts from the query and connect timeouts,
    /// TCP even for a loopback host (`prefer_socket` off, so TLS applies), no `CLIENT_FOUND_ROWS`,
    /// a statement cache of 64; and on every new connection `autocommit=1`, `time_zone='+00:00'`,
    /// `innodb_lock_wait_timeout` and the statement time limit (MariaDB `max_statement_time`,
    /// MySQL `max_execution_time`) from the query timeout. The driver's own pool options are not
    /// used. No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when the driver options cannot be used.
    #[cfg(feature = "mysql")]
    pub fn mysql_config(config: MysqlConfig, options: SqlOptions) -> Result<SqlBackend> {
        let driver = mysql::MyDriver::new(&config, &options)?;
        Ok(SqlBackend::with_driver(Dialect::Mysql, &config.display_url(), options, Box::new(driver)))
    }

    /// A backend for `url`, choosing the dialect by scheme (see [`Dialect::from_url`]).
    ///
    /// # Errors
    /// `InvalidConfig` for an unknown scheme or a bad URL; `Unsupported` naming the Cargo feature
    /// when the dialect was not compiled in.
    pub fn from_url(url: &str, options: SqlOptions) -> Result<SqlBackend> {
        match Dialect::from_url(url)? {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => SqlBackend::postgres(url, options),
            #[cfg(feature = "mysql")]
            Dialect::Mysql => SqlBackend::mysql(url, options),
            #[allow(unreachable_patterns)]
            other => Err(Error::new(
                ErrorKind::Unsupported,
                format!("the {other} backend is not compiled in: enable the Cargo feature \"{}\"", other.name()),
            )),
        }
    }

    fn with_driver(dialect: Dialect, url: &str, options: SqlOptions, driver: Box<dyn Driver>) -> SqlBackend {
        SqlBackend {
            inner: Arc::new(Inner {
                dialect,
                url: redact_url(url),
                options,
                driver,
                purge_last: Mutex::new(None),
                purging: AtomicBool::new(false),
                leases: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.inner.dialect
    }

    /// The options.
    pub fn options(&self) -> &SqlOptions {
        &self.inner.options
    }

    /// The URL with any password replaced by `***`.
    pub fn redacted_url(&self) -> &str {
        &self.inner.url
    }

    /// Creates the four tables and their indexes if they do not exist (runs the dialect's init
    /// script; safe to run any number of times, also concurrently).
    ///
    /// # Errors
    /// `Unavailable` when the database cannot be reached; `Backend` when the script fails (e.g. no
    /// privilege to create tables).
    pub fn init_schema(&self) -> Result<()> {
        self.inner.driver.init_schema()?;
        info!("simba {}: schema ready ({})", self.inner.dialect, self.inner.dialect.init_script_name());
        Ok(())
    }

    /// The database clock now, as milliseconds since the Unix epoch (UTC).
    ///
    /// # Errors
    /// `Unavailable`/`Backend` when the query fails.
    pub fn database_now_ms(&self) -> Result<i64> {
        self.inner.driver.now_ms()
    }

    /// Server-side ids of the pool's open connections: PostgreSQL backend process ids
    /// (`pg_backend_pid()`), MySQL/MariaDB connection ids (`CONNECTION_ID()`). Meant for fault
    /// tests (pausing or killing a connection's server process) and diagnostics.
    pub fn connection_ids(&self) -> Vec<u64> {
        self.inner.driver.connection_ids()
    }

    /// Server-side id of the connection that listens for release notifications (PostgreSQL:
    /// its backend process id), while it is open; `None` before the first watch, while it
    /// reconnects, and on MySQL/MariaDB (which polls). Not one of [`connection_ids`](Self::connection_ids).
    /// Meant for fault tests and diagnostics.
    pub fn notification_connection_id(&self) -> Option<u64> {
        self.inner.driver.notification_connection_id()
    }

    fn lease_ms(&self, lease_duration: Duration) -> Result<i64> {
        if lease_duration < Duration::from_millis(1) || lease_duration > MAX_LEASE {
            return Err(Error::config(format!("lease duration {lease_duration:?} must be between 1ms and 365 days")));
        }
        i64::try_from(lease_duration.as_millis())
            .map_err(|_| Error::config(format!("lease duration {lease_duration:?} is too long")))
    }

    /// Remaining `ms` as a duration, capped at the session's lease duration when this process knows it.
    fn remaining(&self, session: Option<&SessionId>, ms: i64) -> Duration {
        let d = Duration::from_millis(u64::try_from(ms).unwrap_or(0));
        match session.and_then(|s| self.inner.leases.lock().get(s).copied()) {
            Some(lease) => d.min(lease),
            None => d,
        }
    }

    /// Starts a background purge when one is due (at most once per purge interval, one at a time).
    fn maybe_purge(&self) {
        let inner = &self.inner;
        if !inner.options.auto_purge {
            return;
        }
        {
            let mut last = inner.purge_last.lock();
            if last.is_some_and(|t| t.elapsed() < inner.options.purge_interval) {
                return;
            }
            if inner.purging.swap(true, Ordering::AcqRel) {
                return;
            }
            *last = Some(Instant::now());
        }
        // The run owns the flag from here: the guard clears it however the run ends (a panic of
        // the driver included, or the closure dropped unrun when the thread cannot start). The
        // run itself is one bounded call (the query timeout), so a hung statement ends too.
        let run = PurgeRun(self.clone());
        let spawned = std::thread::Builder::new().name("simba-sql-purge".into()).spawn(move || {
            let me = &run.0;
            match me.inner.driver.purge(PURGE_BATCH) {
                Ok(0) => {}
                Ok(n) => info!("simba {}: purged {n} expired sessions", me.inner.dialect),
                Err(e) => warn!("simba {}: purge of expired sessions failed: {}", me.inner.dialect, display_chain(&e)),
            }
        });
        if let Err(e) = spawned {
            warn!("simba {}: cannot start the purge thread: {e}", inner.dialect);
        }
    }

    fn parse_session(&self, s: &str) -> Result<SessionId> {
        SessionId::parse(s.trim_end()).map_err(|e| {
            Error::backend(format!("{}: corrupt session id in the database", self.inner.dialect)).with_source(e)
        })
    }
}

/// One background purge run: clears [`Inner::purging`] when dropped, so that a run that panicked
/// (or never started) does not stop every later one.
struct PurgeRun(SqlBackend);

impl Drop for PurgeRun {
    fn drop(&mut self) {
        let inner = &self.0.inner;
        if std::thread::panicking() {
            warn!("simba {}: a purge of expired sessions panicked; the next one runs as usual", inner.dialect);
        }
        inner.purging.store(false, Ordering::Release);
    }
}

impl LeaseBackend for SqlBackend {
    fn kind(&self) -> &'static str {
        self.inner.dialect.name()
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        let lease_ms = self.lease_ms(lease_duration)?;
        validate_metadata(metadata)?;
        let id = SessionId::random();
        self.inner.driver.open_session(&id, lease_ms, metadata)?;
        self.inner.leases.lock().insert(id.clone(), lease_duration);
        debug!("simba {}: session {id} opened (lease {lease_duration:?})", self.inner.dialect);
        self.maybe_purge();
        Ok(SessionGrant { id, remaining: lease_duration })
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        let lease_ms = self.lease_ms(lease_duration)?;
        let reply = self.inner.driver.keep_alive(session, lease_ms)?;
        let Some(RawAlive { remaining_ms, owned: rows, groups: group_rows }) = reply else {
            self.inner.leases.lock().remove(session);
            debug!("simba {}: session {session} expired; deleted", self.inner.dialect);
            return Ok(KeepAlive::Expired);
        };
        self.inner.leases.lock().insert(session.clone(), lease_duration);
        let mut owned = Vec::with_capacity(rows.len());
        for (name, token) in rows {
            // A row someone else corrupted must not fail the renewal of every other lease and
            // membership: leave it out (the engine never reports it owned) and say so.
            let Ok(name) = Name::new(&name) else {
                warn!(
                    "simba {}: session {session} owns a lease with a corrupt name {name:?}; ignored",
                    self.inner.dialect
                );
                continue;
            };
            match Token::from_backend(token, &format!("lease '{name}'")) {
                Ok(token) => owned.push((name, token)),
                Err(e) => warn!("simba {}: session {session}: {e}; ignored", self.inner.dialect),
            }
        }
        owned.sort();
        let mut groups = Vec::with_capacity(group_rows.len());
        for group in group_rows {
            // A membership row whose group name is no valid name (someone else wrote it) is no
            // group the client can hold: leaving it out never reports a membership lost.
            match Name::new(&group) {
                Ok(group) => groups.push(group),
                Err(_) => warn!(
                    "simba {}: session {session} is a member of a group with a corrupt name {group:?}; ignored",
                    self.inner.dialect
                ),
            }
        }
        groups.sort();
        groups.dedup();
        let remaining = Duration::from_millis(u64::try_from(remaining_ms).unwrap_or(0)).min(lease_duration);
        self.maybe_purge();
        Ok(KeepAlive::Alive { remaining, owned, groups, unknown: Vec::new() })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.inner.driver.close_session(session)?;
        self.inner.leases.lock().remove(session);
        debug!("simba {}: session {session} closed", self.inner.dialect);
        Ok(())
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        // The cleanup release below shares the acquire's query timeout (`call_bound`).
        let deadline = Instant::now() + self.inner.options.query_timeout;
        match self.inner.driver.acquire(session, name)? {
            RawAcquire::Expired => {
                debug!("simba {}: acquire '{name}' by session {session}: session expired", self.inner.dialect);
                Err(Error::session_expired(session))
            }
            RawAcquire::Busy => Ok(Acquire::Busy),
            RawAcquire::Acquired { token: raw, remaining_ms } => {
                let token = match Token::from_backend(raw, &format!("lease '{name}'")) {
                    Ok(t) => t,
                    Err(e) => {
                        // Someone wrote a corrupt token: do not keep a term nobody can use.
                        warn!("simba {}: lease '{name}' has a corrupt token {raw}; releasing it", self.inner.dialect);
                        if let Err(re) = self.inner.driver.release_until(session, name, raw, deadline) {
                            warn!("simba {}: releasing corrupt lease '{name}' failed: {re}", self.inner.dialect);
                        }
                        return Err(e);
                    }
                };
                debug!("simba {}: session {session} holds '{name}' with token {token}", self.inner.dialect);
                let remaining = match remaining_ms {
                    Some(ms) => TermRemaining::Known(self.remaining(Some(session), ms)),
                    None => TermRemaining::WithSession,
                };
                Ok(Acquire::Acquired { token, remaining })
            }
        }
    }

    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        let token = i64::try_from(token.get())
            .map_err(|_| Error::config(format!("token {token} of lease '{name}' is out of range for SQL")))?;
        self.inner.driver.release(session, name, token)
    }

    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        let Some((sid, token, remaining_ms, metadata)) = self.inner.driver.holder(name)? else {
            return Ok(None);
        };
        let session = self.parse_session(&sid)?;
        let token = Token::from_backend(token, &format!("lease '{name}'"))?;
        let remaining = self.remaining(Some(&session), remaining_ms);
        Ok(Some(Holder { session, token, remaining, metadata }))
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        if self.inner.driver.join(session, group)? {
            Ok(())
        } else {
            debug!("simba {}: join '{group}' by session {session}: session expired", self.inner.dialect);
            Err(Error::session_expired(session))
        }
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.inner.driver.leave(session, group)
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        let rows = self.inner.driver.members(group)?;
        let mut out = Vec::with_capacity(rows.len());
        for (sid, metadata) in rows {
            out.push(Member { session: self.parse_session(&sid)?, metadata });
        }
        out.sort();
        Ok(out)
    }

    fn call_bound(&self) -> Option<Duration> {
        // Every call runs against one deadline, the query timeout from its start: MySQL/MariaDB
        // through the watchdog (`MyDriver::run`), PostgreSQL through a timeout on every request
        // of its tokio-postgres connections (`PgDriver::run`).
        self.inner.driver.call_bound()
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            push_release: self.inner.driver.push_release(),
            push_membership: false,
            watch_checks_lease: false,
        }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        match topic {
            Topic::Lease(name) => self.inner.driver.watch_release(name, notify),
            Topic::Group(_) => Ok(false),
        }
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        let stored = self.inner.driver.semaphore_limit(name, permits.map(i64::from))?;
        stored.map(|v| limit_from_db(self.inner.dialect, name, v)).transpose()
    }

    fn purge_expired(&self) -> Result<usize> {
        let n = self.inner.driver.purge(PURGE_BATCH)?;
        if n > 0 {
            info!("simba {}: purged {n} expired sessions", self.inner.dialect);
        }
        Ok(n)
    }

    fn check(&self) -> Vec<CheckItem> {
        let d = self.inner.dialect;
        let item = |name: &str, status, detail: String| CheckItem { name: name.to_string(), status, detail };
        let mut items = Vec::new();
        match self.inner.driver.server_version() {
            Ok(v) => {
                items.push(item("reachable", CheckStatus::Ok, format!("{d} server {v} at {}", self.inner.url)));
                items.extend(self.inner.driver.extra_checks());
            }
            Err(e) => {
                items.push(item("reachable", CheckStatus::Fail, format!("{}: {}", self.inner.url, display_chain(&e))));
                return items;
            }
        }
        match self.inner.driver.schema_tables() {
            Ok(3) => match self.inner.driver.missing_routine() {
                Ok(None) => items.push(item(
                    "schema",
                    CheckStatus::Ok,
                    match d {
                        Dialect::Postgres => "simba_session, simba_lease and simba_member exist".into(),
                        Dialect::Mysql => format!(
                            "simba_session, simba_lease, simba_member and the procedures {} and {} exist",
                            queries::mysql::KEEP_ALIVE_PROCEDURE,
                            queries::mysql::ACQUIRE_PROCEDURE
                        ),
                    },
                )),
                Ok(Some(routine)) => items.push(item(
                    "schema",
                    CheckStatus::Warn,
                    format!(
                        "the tables exist, but the procedure {routine} is missing (or this user may not execute \
                         it): keep-alives (five round trips instead of one) or acquires (two instead of one) use \
                         separate statements; run `simba schema apply` or sql/{}/{} again (needs CREATE ROUTINE; \
                         the application user needs EXECUTE)",
                        d.name(),
                        d.init_script_name()
                    ),
                )),
                Err(e) => items.push(item("schema", CheckStatus::Warn, display_chain(&e))),
            },
            Ok(n) => items.push(item(
                "schema",
                CheckStatus::Fail,
                format!(
                    "{n} of the 3 tables exist: run `simba schema apply` or sql/{}/{} once",
                    d.name(),
                    d.init_script_name()
                ),
            )),
            Err(e) => items.push(item("schema", CheckStatus::Fail, display_chain(&e))),
        }
        match self.inner.driver.semaphore_table() {
            Ok(true) => items.push(item("semaphores", CheckStatus::Ok, "simba_semaphore exists".into())),
            Ok(false) => items.push(item(
                "semaphores",
                CheckStatus::Warn,
                format!(
                    "simba_semaphore is missing (a schema from before semaphores): leases, elections and groups \
                     work, Session::semaphore fails; run `simba schema apply` or sql/{}/{} again (it only adds \
                     the table)",
                    d.name(),
                    d.init_script_name()
                ),
            )),
            Err(e) => items.push(item("semaphores", CheckStatus::Warn, display_chain(&e))),
        }
        let sent = Instant::now();
        let local_before = SystemTime::now();
        match self.inner.driver.now_ms() {
            Ok(db_ms) => {
                let rtt = sent.elapsed();
                let local_ms = local_before
                    .checked_add(rtt / 2)
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    .unwrap_or(0);
                let offset = db_ms.saturating_sub(local_ms);
                let rtt_ms = i64::try_from(rtt.as_millis()).unwrap_or(i64::MAX);
                let (status, note) = if offset.unsigned_abs() <= 1000 + rtt_ms.unsigned_abs() {
                    (CheckStatus::Ok, "")
                } else {
                    (CheckStatus::Warn, "; hosts usually run NTP, check both clocks")
                };
                items.push(item(
                    "clock",
                    status,
                    format!(
                        "database clock is {offset} ms {} this host (round trip {rtt_ms} ms); informational: leases \
                         are measured by the database clock only{note}",
                        if offset >= 0 { "ahead of" } else { "behind" }
                    ),
                ));
            }
            Err(e) => items.push(item("clock", CheckStatus::Fail, display_chain(&e))),
        }
        items.push(item(
            "pool",
            CheckStatus::Ok,
            format!(
                "{} connections, query timeout {:?}, purge every {:?}{}",
                self.inner.options.pool_size,
                self.inner.options.query_timeout,
                self.inner.options.purge_interval,
                if self.inner.options.auto_purge { "" } else { " (auto purge off)" }
            ),
        ));
        items
    }
}

/// A stored semaphore limit read back as a `u32` (1 or more; the caller checks the upper bound).
fn limit_from_db(dialect: Dialect, name: &Name, v: i64) -> Result<u32> {
    u32::try_from(v).ok().filter(|&p| p > 0).ok_or_else(|| {
        Error::backend(format!("{dialect}: corrupt limit {v} of semaphore '{name}' in simba_semaphore: limits are > 0"))
    })
}

pub(crate) use crate::config::redact_url;

#[cfg(test)]
mod tests {
    use super::*;

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
