//! [`SqlBackend`]: the SPI over a dialect's [`Driver`], the background purge, and the
//! conversions of raw rows into SPI replies.

use super::driver::{Driver, RawAcquire};
use super::*;
use crate::backend::{ListRequest, Listing};

///
/// Construction does no I/O: connections are opened on demand (at most
/// [`pool_size`](SqlOptions::pool_size)). Use [`init_schema`](SqlBackend::init_schema) or the init
/// script to create the tables, and [`check`](LeaseBackend::check) to verify the setup.
#[derive(Clone)]
pub struct SqlBackend {
    pub(super) inner: Arc<Inner>,
}

pub(super) struct Inner {
    pub(super) dialect: Dialect,
    pub(super) url: String,
    pub(super) options: SqlOptions,
    pub(super) driver: Box<dyn Driver>,
    pub(super) purge_last: Mutex<Option<Instant>>,
    pub(super) purging: AtomicBool,
    pub(super) leases: Mutex<HashMap<SessionId, Duration>>,
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

    /// A PostgreSQL backend for the URL `url`, already parsed (by [`crate::Config`]) into `parsed`.
    #[cfg(feature = "postgres")]
    pub(crate) fn postgres_parsed(url: &str, parsed: postgres::PgUrl, options: SqlOptions) -> Result<SqlBackend> {
        let driver = postgres::PgDriver::from_parsed(parsed, &options, redact_url(url))?;
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
        SqlBackend::mysql_parsed(url, &MysqlConfig::from_url(url)?, options)
    }

    /// A MySQL backend for the URL `url`, already parsed into `config` (by [`mysql`](SqlBackend::mysql)
    /// or [`crate::Config`]).
    #[cfg(feature = "mysql")]
    pub(crate) fn mysql_parsed(url: &str, config: &MysqlConfig, options: SqlOptions) -> Result<SqlBackend> {
        let driver = mysql::MyDriver::new(config, &options)?;
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

    pub(super) fn with_driver(dialect: Dialect, url: &str, options: SqlOptions, driver: Box<dyn Driver>) -> SqlBackend {
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
    pub(super) fn remaining(&self, session: Option<&SessionId>, ms: i64) -> Duration {
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

    pub(super) fn parse_session(&self, s: &str) -> Result<SessionId> {
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
        let Some(RawAlive { remaining_ms, owned: rows, groups: group_rows, before_ms }) = reply else {
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
        // Negative: the statement found it expired (then it is not renewed and no row comes back).
        let remaining_before = before_ms.and_then(|ms| u64::try_from(ms).ok()).map(Duration::from_millis);
        Ok(KeepAlive::Alive { remaining, owned, groups, unknown: Vec::new(), remaining_before })
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

    /// Three `SELECT`s on one pooled connection, one after the other: three round trips (three
    /// more the first time a connection prepares them), within the query timeout like every call
    /// (the server's statement limit just under it). Each reads its table's primary key in key
    /// order — leases and groups from the prefix to its upper bound (`name >= prefix and name <
    /// upper`, never `LIKE`: `_` is a name character) — and returns at most `limit + 1` rows of its
    /// section (`limit + 1` groups of at most `limit + 1` members), so the client never holds more:
    /// - held leases (`list-leases.sql`): `simba_lease` rows, each holder's session looked up by
    ///   its primary key; stops at the `limit + 1`-th live holder;
    /// - groups (`list-members.sql`): `simba_member` rows, the live ones numbered by window
    ///   functions to cap the groups and each group's members;
    /// - sessions (`list-sessions.sql`): `simba_session` rows; stops at the `limit + 1`-th live one.
    ///
    /// Every scan also stops after 10,001 rows (the largest `limit + 1`), whatever they are: free
    /// leases (lease rows are never deleted), leases and memberships of expired sessions, expired
    /// sessions not purged yet. So with a million rows under the prefix, live or not, a statement
    /// reads at most 10,001 index entries and rows (measured with a million rows: 25 to 75 ms on
    /// PostgreSQL 15, 40 to 230 ms on MariaDB 10.11; a whole million-row range took 2.5 to 4 s);
    /// when a scan stopped there, the section says `truncated` and what follows it is not listed
    /// (narrow the prefix). The statements run as separate autocommit statements, not in one
    /// transaction: the SPI promises no snapshot across sections, and a read-only transaction
    /// would add two round trips and hold a snapshot open (PostgreSQL's xmin horizon, InnoDB's
    /// purge) on a busy server for nothing the caller could rely on. Liveness is judged as by
    /// `holder` and `members`, by each statement's own database clock (`expires_at` > now in ms),
    /// which also gives the time left. A corrupt row (a name, session id or token someone else
    /// wrote) fails the listing with a `Backend` error naming it; a server error carries the
    /// server's words.
    fn list(&self, request: &ListRequest) -> Result<Listing> {
        self.list_within(request, &ListBounds::new(request))
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
            push_membership: self.inner.driver.push_membership(),
            watch_checks_lease: false,
            list: true,
        }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        self.inner.driver.watch(topic, notify)
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
        self.check_items()
    }
}

/// A stored semaphore limit read back as a `u32` (1 or more; the caller checks the upper bound).
pub(super) fn limit_from_db(dialect: Dialect, name: &Name, v: i64) -> Result<u32> {
    u32::try_from(v).ok().filter(|&p| p > 0).ok_or_else(|| {
        Error::backend(format!("{dialect}: corrupt limit {v} of semaphore '{name}' in simba_semaphore: limits are > 0"))
    })
}
