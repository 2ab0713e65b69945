//! The PostgreSQL dialect: the blocking `postgres` client in an r2d2 pool with a per-connection
//! prepared-statement cache.
//!
//! Its settings are its own: [`config`] parses the URL (or libpq `key=value` string) with libpq's
//! TLS parameters into the driver's `Config` and a [`PostgresTls`]; `tls` is the rustls connector
//! and its libpq-style verifiers; [`PgConnector::connect`] (in `connect`) opens every connection —
//! the pool's and any dedicated one — with that one TLS setup.
//!
//! Timeouts: `statement_timeout` (a little below the query timeout) and
//! `idle_in_transaction_session_timeout` are set per connection through the `options` startup
//! parameter, `connect_timeout` and TCP keepalives / `tcp_user_timeout` on the socket. The pool's
//! connections are `tokio-postgres` ones ([`pooled`]) whose every request is bounded by its call's
//! deadline, the query timeout from the call's start: the backend declares that as its
//! `call_bound`, and user calls run on the caller's thread. The notification connection
//! (`postgres_listen.rs`) stays on the blocking `postgres` client (a thread of its own).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use log::debug;
use parking_lot::Mutex;
use postgres::error::SqlState;
use postgres::{Client, Config, Row};

use super::pool::{ConnectFailure, ConnectHealth, Fail, SqlPool};
use super::queries::postgres as q;
use super::{add_keep_alive_row, Driver, ListBounds, RawAcquire, RawHolder, RawKeepAlive, RawListing, SqlOptions};
use crate::backend::{CheckItem, CheckStatus, Notification, Topic};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId};

pub(crate) mod config;
mod connect;
mod pooled;
mod tls;

use pooled::{PgPoolManager, PgPooled};

pub use config::{PostgresTls, RootCerts, SslMode};
pub(crate) use connect::{ConnectError, Connected, PgConnector, Transport};

const KIND: &str = "postgres";

#[path = "postgres_listen.rs"]
mod listen;

/// A blocking connection (the notification connection's).
pub(crate) struct PgConn {
    pub(super) client: Client,
    pub(super) pid: u64,
    registry: Arc<Mutex<Vec<u64>>>,
}

impl Drop for PgConn {
    fn drop(&mut self) {
        let mut ids = self.registry.lock();
        if let Some(i) = ids.iter().position(|p| *p == self.pid) {
            ids.swap_remove(i);
        }
    }
}

/// Classifies a driver error: transient ones are `Unavailable`, connection-level ones also mark the
/// connection broken (it is then dropped instead of returned to the pool).
fn fail(conn_broken: &mut bool, e: postgres::Error, what: &str) -> Fail {
    let msg = |m: &str| format!("{KIND}: {what}: {m}");
    if e.is_closed() {
        *conn_broken = true;
        return Fail::Retry(Error::unavailable(msg("connection closed")).with_source(e));
    }
    let Some(code) = e.code() else {
        // I/O, protocol or conversion failure: never trust this connection again.
        *conn_broken = true;
        return Fail::Retry(Error::unavailable(msg("connection failed")).with_source(e));
    };
    let code = code.clone();
    // The server's words (message, SQLSTATE, detail, hint) as the source: the driver's own
    // Display of a server error is only "db error".
    let words = ServerWords(e.as_db_error().map_or_else(|| e.to_string(), server_words));
    if code == SqlState::T_R_DEADLOCK_DETECTED || code == SqlState::T_R_SERIALIZATION_FAILURE {
        Fail::Retry(Error::unavailable(msg("transaction conflict")).with_source(words))
    } else if code == SqlState::QUERY_CANCELED || code == SqlState::LOCK_NOT_AVAILABLE {
        Fail::Stop(
            Error::unavailable(msg("statement timed out (statement_timeout, just under the query timeout)"))
                .with_source(words),
        )
    } else if code == SqlState::UNDEFINED_TABLE {
        Fail::Stop(
            Error::backend(msg(
                "the Simba tables are missing: run `simba schema apply`, SqlBackend::init_schema() or \
                 sql/postgres/init-simba-postgresql.sql once",
            ))
            .with_source(words),
        )
    } else if code.code().starts_with("08")
        || code.code().starts_with("57P")
        || code == SqlState::TOO_MANY_CONNECTIONS
        || code == SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT
    {
        *conn_broken = true;
        Fail::Retry(Error::unavailable(msg("connection lost")).with_source(words))
    } else if code == SqlState::READ_ONLY_SQL_TRANSACTION {
        Fail::Stop(Error::unavailable(msg("the server is read-only (a standby?)")).with_source(words))
    } else {
        Fail::Stop(Error::backend(msg("statement failed")).with_source(words))
    }
}

/// A server error in the server's own words (see [`server_words`]).
#[derive(Debug)]
struct ServerWords(String);

impl std::fmt::Display for ServerWords {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ServerWords {}

/// Reads column `idx`; a type mismatch is a `Backend` error (the schema is not ours).
fn col<'a, T: postgres::types::FromSql<'a>>(row: &'a Row, idx: usize, what: &str) -> Result<T, Fail> {
    row.try_get(idx).map_err(|e| {
        Fail::Stop(Error::backend(format!("{KIND}: {what}: unexpected value in column {idx}")).with_source(e))
    })
}

pub(crate) struct PgManager {
    connector: PgConnector,
    registry: Arc<Mutex<Vec<u64>>>,
    health: Arc<ConnectHealth>,
    /// [`SqlOptions::connection_lifetime`]: a connection this old is closed when it is returned
    /// (the pool's reaper, which runs every 30 s, closes idle ones).
    lifetime: Duration,
}

/// The server's own words for an error it sent: message, SQLSTATE, and its detail and hint.
fn server_words(db: &postgres::error::DbError) -> String {
    let mut out = format!("{} (SQLSTATE {})", db.message(), db.code().code());
    if let Some(detail) = db.detail() {
        out.push_str(&format!("; {detail}"));
    }
    if let Some(hint) = db.hint() {
        out.push_str(&format!("; hint: {hint}"));
    }
    out
}

/// Classifies a failed connect: the server's refusals that retrying cannot fix are permanent
/// (with what to do), and so is a TLS handshake that failed in the TLS layer (a certificate that
/// does not verify, a server that does not speak TLS); anything else — refused or reset TCP,
/// timeouts, a server starting up or shutting down, too many connections — is retried within the
/// query timeout.
fn connect_failure(e: &ConnectError, connector: &PgConnector) -> ConnectFailure {
    let config = connector.config();
    let user = config.get_user().unwrap_or_default();
    let database = config.get_dbname().unwrap_or(user);
    let mode = connector.tls().settings.mode();
    if let tls::Handshake::Failed { rustls, text } = &e.handshake {
        let host = first_host(config);
        let roots = connector.tls().roots_shown();
        return match tls::handshake_hint(rustls.as_ref(), &host, &roots) {
            Some(hint) => ConnectFailure {
                permanent: true,
                text: format!("TLS handshake with {host} failed (sslmode={mode}): {text}: {hint}"),
            },
            None => ConnectFailure { permanent: false, text: format!("TLS handshake with {host} failed: {text}") },
        };
    }
    let e = &e.error;
    let Some(db) = e.as_db_error() else {
        // The driver's words when sslmode asks for TLS and the server answers the TLS request "no".
        if crate::error::display_chain(e).contains("server does not support TLS") {
            return ConnectFailure {
                permanent: true,
                text: format!(
                    "{}: sslmode={mode} needs TLS, which the server at {} does not offer (ssl = off): turn ssl on in                      postgresql.conf, or use sslmode=prefer or disable on a trusted network",
                    crate::error::display_chain(e),
                    first_host(config)
                ),
            };
        }
        // The driver's refusals of the server's authentication ("server did not use channel
        // binding" under channel_binding=require, an unsupported mechanism): retrying cannot help.
        if e.to_string().starts_with("authentication error") {
            return ConnectFailure {
                permanent: true,
                text: format!(
                    "{}: check channel_binding and the server's password_encryption / pg_hba.conf method",
                    crate::error::display_chain(e)
                ),
            };
        }
        // The driver's own configuration errors ("invalid configuration: password missing" when
        // the server asks for a password the URL lacks) have no public kind: read its words.
        if e.to_string().starts_with("invalid configuration") {
            return ConnectFailure {
                permanent: true,
                text: format!(
                    "{}: the server asks user \"{user}\" for a password: put it in the URL",
                    crate::error::display_chain(e)
                ),
            };
        }
        return ConnectFailure { permanent: false, text: crate::error::display_chain(e) };
    };
    let words = server_words(db);
    let code = db.code();
    let todo = if *code == SqlState::INVALID_PASSWORD {
        format!("check the password of user \"{user}\" in the URL")
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION && db.message().contains("no encryption") {
        format!(
            "the server accepts this login only over TLS (pg_hba.conf hostssl), and this connection is not encrypted \
             (sslmode={mode}): use sslmode=verify-full with sslrootcert=/path/ca.pem (or at least sslmode=require)"
        )
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION && db.message().contains("certificate") {
        format!(
            "the server requires a valid TLS client certificate for user \"{user}\" (pg_hba.conf clientcert or cert \
             authentication): give sslcert=/path/client.pem&sslkey=/path/client.key, signed by a CA the server's \
             ssl_ca_file trusts, whose common name is the user name"
        )
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION && db.message().contains("does not exist") {
        format!("create the role \"{user}\" (with LOGIN) or fix the user name in the URL")
    } else if *code == SqlState::INVALID_AUTHORIZATION_SPECIFICATION {
        "check pg_hba.conf and the user name in the URL".to_string()
    } else if *code == SqlState::INVALID_CATALOG_NAME {
        format!("create the database \"{database}\" or fix the database name in the URL")
    } else if *code == SqlState::INSUFFICIENT_PRIVILEGE {
        format!("grant CONNECT on database \"{database}\" to \"{user}\"")
    } else {
        return ConnectFailure { permanent: false, text: format!("the server refused the connection: {words}") };
    };
    ConnectFailure { permanent: true, text: format!("the server refused the connection: {words}: {todo}") }
}

/// The first host of `config` as written (a name, an address or a socket directory).
fn first_host(config: &Config) -> String {
    match config.get_hosts().first() {
        Some(postgres::config::Host::Tcp(h)) => h.clone(),
        Some(postgres::config::Host::Unix(p)) => p.display().to_string(),
        None => "localhost".to_string(),
    }
}

/// `postgres://user@host:port,…/db` for a configuration given in code (no password: it is not
/// kept), for messages and `simba check`.
fn describe(config: &Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, h)| {
            let host = match h {
                postgres::config::Host::Tcp(h) if h.contains(':') => format!("[{h}]"),
                postgres::config::Host::Tcp(h) => h.clone(),
                postgres::config::Host::Unix(p) => p.display().to_string(),
            };
            match ports.get(i).or(ports.first()) {
                Some(p) => format!("{host}:{p}"),
                None => host,
            }
        })
        .collect();
    let user = config.get_user().map(|u| format!("{u}@")).unwrap_or_default();
    format!("postgres://{user}{}/{}", hosts.join(","), config.get_dbname().unwrap_or_default())
}

impl r2d2::ManageConnection for PgManager {
    type Connection = PgConn;
    type Error = ConnectError;

    fn connect(&self) -> Result<PgConn, ConnectError> {
        let Connected { mut client, transport } = match self.connector.connect() {
            Ok(c) => c,
            Err(e) => {
                self.health.failed(KIND, connect_failure(&e, &self.connector));
                return Err(e);
            }
        };
        self.health.succeeded(KIND);
        let plain = |error| ConnectError { error, handshake: tls::Handshake::NotStarted };
        let row = client.query_one(q::BACKEND_PID, &[]).map_err(plain)?;
        let pid: i64 = row.try_get(0).map_err(plain)?;
        let pid = u64::try_from(pid).unwrap_or(0);
        self.registry.lock().push(pid);
        debug!("simba {KIND}: new connection (server pid {pid}, {transport:?})");
        Ok(PgConn { client, pid, registry: self.registry.clone() })
    }

    fn is_valid(&self, conn: &mut PgConn) -> Result<(), ConnectError> {
        conn.client.check_connection().map_err(|error| ConnectError { error, handshake: tls::Handshake::NotStarted })
    }

    fn has_broken(&self, conn: &mut PgConn) -> bool {
        conn.client.is_closed()
    }
}

pub(crate) struct PgDriver {
    pool: SqlPool<PgPoolManager>,
    /// Every call's bound (see [`PgDriver::run`]).
    query_timeout: Duration,
    registry: Arc<Mutex<Vec<u64>>>,
    listener: listen::Listener,
    connector: PgConnector,
    /// How the backend is shown: the redacted URL, or [`describe`] of a configuration.
    shown: String,
}

/// A PostgreSQL URL parsed once (for [`crate::Config`]): the driver configuration and the URL's
/// TLS settings, its TLS files read and checked; [`PgDriver::from_parsed`] builds on it.
pub(crate) struct PgUrl {
    /// Never changed once parsed (only cloned), so a panic cannot leave it half-updated; the
    /// driver's `Config` is not `RefUnwindSafe` only for its notice callback, which a URL never sets.
    config: std::panic::AssertUnwindSafe<Config>,
    tls: PostgresTls,
}

impl Clone for PgUrl {
    fn clone(&self) -> PgUrl {
        PgUrl { config: std::panic::AssertUnwindSafe(self.config.0.clone()), tls: self.tls.clone() }
    }
}

impl PgUrl {
    /// Parses `url` and reads its TLS files, as [`PgDriver::new`] does, without building a pool.
    pub(crate) fn parse(url: &str) -> Result<PgUrl> {
        let (config, tls) = config::parse(url)?;
        tls::TlsSetup::load(&tls).map_err(|e| Error::config(format!("{}: {e}", super::redact_url(url))))?;
        Ok(PgUrl { config: std::panic::AssertUnwindSafe(config), tls })
    }
}

impl PgDriver {
    /// A driver for a URL or libpq `key=value` string (with libpq's TLS parameters), joined with
    /// the TLS settings given in code (`tls`; one set in both with different values is an error).
    pub(crate) fn new(url: &str, tls: &PostgresTls, options: &SqlOptions) -> Result<PgDriver> {
        let (config, from_url) = config::parse(url)?;
        let settings = from_url.merge(tls)?;
        PgDriver::with_config(config, &settings, options, super::redact_url(url))
    }

    /// A driver for the URL `url` parsed by [`PgUrl::parse`] (`shown`: the URL redacted), as
    /// [`new`](PgDriver::new) with no TLS settings in code.
    pub(crate) fn from_parsed(url: PgUrl, options: &SqlOptions, shown: String) -> Result<PgDriver> {
        let settings = url.tls.merge(&PostgresTls::default())?;
        PgDriver::with_config(url.config.0, &settings, options, shown)
    }

    /// A driver for the application's own driver configuration and TLS settings. The
    /// configuration's `sslmode` is replaced by `tls`'s.
    pub(crate) fn from_config(config: Config, tls: &PostgresTls, options: &SqlOptions) -> Result<PgDriver> {
        let shown = describe(&config);
        PgDriver::with_config(config, tls, options, shown)
    }

    fn with_config(mut config: Config, tls: &PostgresTls, options: &SqlOptions, shown: String) -> Result<PgDriver> {
        let setup = tls::TlsSetup::load(tls).map_err(|e| Error::config(format!("{shown}: {e}")))?;
        let qt_ms = super::server_limit(options.query_timeout()).as_millis().max(1);
        let idle_tx_ms = qt_ms.saturating_mul(4).max(1000);
        let mut opts = config.get_options().map(str::to_string).unwrap_or_default();
        if !opts.is_empty() {
            opts.push(' ');
        }
        opts.push_str(&format!("-c statement_timeout={qt_ms} -c idle_in_transaction_session_timeout={idle_tx_ms}"));
        config.options(&opts);
        if config.get_connect_timeout().is_none() {
            config.connect_timeout(options.connect_timeout());
        }
        if config.get_tcp_user_timeout().is_none() {
            config.tcp_user_timeout(options.query_timeout() + Duration::from_secs(1));
        }
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        if config.get_application_name().is_none() {
            config.application_name("simba");
        }
        let connector = PgConnector::new(config, setup);
        let registry = Arc::new(Mutex::new(Vec::new()));
        let health = Arc::new(ConnectHealth::default());
        // The notification connection: the pool's connector (same TLS setup, timeouts and startup
        // options) with its own pid registry (it is not a pool connection) and the pool's connect
        // health (one warning per cause for both).
        let listen_manager = PgManager {
            connector: connector.clone(),
            registry: Arc::new(Mutex::new(Vec::new())),
            health: health.clone(),
            lifetime: options.connection_lifetime(),
        };
        let listener = listen::Listener::new(listen_manager, options.connect_timeout(), options.query_timeout());
        let manager = PgPoolManager {
            base: PgManager {
                connector: connector.clone(),
                registry: registry.clone(),
                health: health.clone(),
                lifetime: options.connection_lifetime(),
            },
            query_timeout: options.query_timeout(),
            connect_timeout: options.connect_timeout(),
        };
        Ok(PgDriver {
            pool: SqlPool::new(manager, health, options, KIND),
            query_timeout: options.query_timeout(),
            registry,
            listener,
            connector,
            shown,
        })
    }

    /// Runs `f` on a pooled connection within the query timeout from now: the checkout waits at
    /// most that long, every request of every attempt gives up at the deadline (the connection is
    /// then dropped), and no retry starts after it. This is the bound [`Driver::call_bound`]
    /// declares.
    fn run<T>(&self, what: &str, f: impl FnMut(&mut PgPooled) -> Result<T, Fail>) -> Result<T> {
        self.run_until(what, Instant::now() + self.query_timeout, f)
    }

    fn run_until<T>(
        &self,
        what: &str,
        deadline: Instant,
        mut f: impl FnMut(&mut PgPooled) -> Result<T, Fail>,
    ) -> Result<T> {
        self.pool.run_until(what, deadline, |c| {
            c.deadline = deadline;
            f(c)
        })
    }

    /// How this backend is shown (the redacted URL, or the configuration without its password).
    pub(crate) fn shown(&self) -> &str {
        &self.shown
    }
}

/// The `tls` item of `simba check` for a connection protected by `transport`.
fn tls_item(transport: &Transport, connector: &PgConnector) -> CheckItem {
    let tls = connector.tls();
    let host = first_host(connector.config());
    let identity = match tls.settings.client_identity_files() {
        Some((cert, _)) => format!("client certificate {} presented", cert.display()),
        None => "no client certificate".to_string(),
    };
    let item = |status, detail: String| CheckItem { name: "tls".to_string(), status, detail };
    match transport {
        Transport::Tls { protocol, cipher, verification } => {
            let roots = tls.roots_shown();
            let (status, verified) = match verification {
                config::Verification::Full => {
                    (CheckStatus::Ok, format!("server certificate and host name \"{host}\" verified against {roots}"))
                }
                config::Verification::Chain => (
                    CheckStatus::Ok,
                    format!(
                        "server certificate chain verified against {roots}; the host name is not checked \
                         (sslmode={}: use verify-full to check it)",
                        tls.settings.mode()
                    ),
                ),
                _ => (
                    if is_loopback(&host) { CheckStatus::Ok } else { CheckStatus::Warn },
                    format!(
                        "the server certificate is NOT verified (sslmode={} without sslrootcert): anyone between \
                         here and the server can pose as it; use sslmode=verify-full with sslrootcert=/path/ca.pem",
                        tls.settings.mode()
                    ),
                ),
            };
            item(status, format!("encrypted ({protocol}, {cipher}, rustls); {verified}; {identity}"))
        }
        Transport::Plain => {
            let why = match tls.settings.mode() {
                SslMode::Disable => "sslmode=disable".to_string(),
                m => format!("sslmode={m}: the server declined TLS or its handshake failed"),
            };
            if is_loopback(&host) {
                item(CheckStatus::Ok, format!("not encrypted ({why}); {host} is a loopback address or Unix socket"))
            } else {
                item(
                    CheckStatus::Warn,
                    format!(
                        "not encrypted ({why}): passwords and data cross the network in clear; use \
                         sslmode=verify-full with sslrootcert=/path/ca.pem"
                    ),
                )
            }
        }
    }
}

fn is_loopback(host: &str) -> bool {
    host == "localhost" || host.starts_with('/') || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

impl Driver for PgDriver {
    fn init_schema(&self) -> Result<()> {
        let what = "init schema";
        // Setup, not a lease call: the lock wait and the two scripts may each take up to the
        // statement timeout.
        let deadline = Instant::now() + self.query_timeout * 3;
        self.run_until(what, deadline, |c| c.batch_in_transaction(&[q::INIT_LOCK, q::INIT_SIMBA_POSTGRESQL], what))
    }

    fn open_session(&self, id: &SessionId, lease_ms: i64, metadata: &str) -> Result<()> {
        if metadata.contains('\0') {
            return Err(Error::config("session metadata must not contain NUL characters on PostgreSQL"));
        }
        let what = format!("open session {id}");
        let mut attempt = 0;
        self.run(&what, |c| {
            attempt += 1;
            if attempt > 1 {
                // A retry after a lost reply: the first insert may have committed.
                let rows = c.query(q::SESSION_ALIVE, &[&id.as_str()], &what)?;
                if rows.first().map(|r| col::<i64>(r, 0, &what)).transpose()?.unwrap_or(0) > 0 {
                    return Ok(());
                }
            }
            c.execute(q::OPEN_SESSION, &[&id.as_str(), &lease_ms, &metadata], &what).map(|_| ())
        })
    }

    fn keep_alive(&self, id: &SessionId, lease_ms: i64) -> Result<RawKeepAlive> {
        let what = format!("keep-alive of session {id}");
        self.run(&what, |c| {
            // One statement, one round trip: renews (or deletes the expired session) and lists the
            // owned leases and the memberships, one row each; no row at all when the session is
            // expired or unknown.
            let rows = c.query(q::KEEP_ALIVE, &[&id.as_str(), &lease_ms], &what)?;
            let mut alive = None;
            for r in &rows {
                add_keep_alive_row(
                    &mut alive,
                    col(r, 0, &what)?,
                    col(r, 1, &what)?,
                    col(r, 2, &what)?,
                    col(r, 3, &what)?,
                );
            }
            if let (Some(alive), Some(first)) = (alive.as_mut(), rows.first()) {
                alive.before_ms = Some(col(first, 4, &what)?);
            }
            Ok(alive)
        })
    }

    fn close_session(&self, id: &SessionId) -> Result<()> {
        let what = format!("close session {id}");
        self.run(&what, |c| c.execute(q::CLOSE_SESSION, &[&id.as_str()], &what).map(|_| ()))
    }

    fn acquire(&self, id: &SessionId, name: &Name) -> Result<RawAcquire> {
        let what = format!("acquire '{name}' for session {id}");
        self.run(&what, |c| {
            let rows = c.query(q::ACQUIRE, &[&id.as_str(), &name.as_str()], &what)?;
            let Some(row) = rows.first() else {
                return Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row"))));
            };
            let remaining: Option<i64> = col(row, 0, &what)?;
            let token: Option<i64> = col(row, 1, &what)?;
            Ok(match (remaining, token) {
                (None, _) => RawAcquire::Expired,
                (Some(_), None) => RawAcquire::Busy,
                (Some(remaining_ms), Some(token)) => RawAcquire::Acquired { token, remaining_ms: Some(remaining_ms) },
            })
        })
    }

    fn release(&self, id: &SessionId, name: &Name, token: i64) -> Result<()> {
        let what = format!("release '{name}' (token {token}) by session {id}");
        self.run(&what, |c| c.execute(q::RELEASE, &[&id.as_str(), &name.as_str(), &token], &what).map(|_| ()))
    }

    fn holder(&self, name: &Name) -> Result<Option<RawHolder>> {
        let what = format!("holder of '{name}'");
        self.run(&what, |c| {
            let rows = c.query(q::HOLDER, &[&name.as_str()], &what)?;
            match rows.first() {
                None => Ok(None),
                Some(r) => Ok(Some((col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?))),
            }
        })
    }

    fn join(&self, id: &SessionId, group: &Name) -> Result<bool> {
        let what = format!("join '{group}' by session {id}");
        self.run(&what, |c| {
            let rows = c.query(q::JOIN, &[&id.as_str(), &group.as_str()], &what)?;
            let alive: i64 = match rows.first() {
                Some(r) => col(r, 0, &what)?,
                None => 0,
            };
            Ok(alive > 0)
        })
    }

    fn leave(&self, id: &SessionId, group: &Name) -> Result<()> {
        let what = format!("leave '{group}' by session {id}");
        self.run(&what, |c| c.execute(q::LEAVE, &[&id.as_str(), &group.as_str()], &what).map(|_| ()))
    }

    fn members(&self, group: &Name) -> Result<Vec<(String, String)>> {
        let what = format!("members of '{group}'");
        self.run(&what, |c| {
            let rows = c.query(q::MEMBERS, &[&group.as_str()], &what)?;
            rows.iter().map(|r| Ok((col(r, 0, &what)?, col(r, 1, &what)?))).collect()
        })
    }

    fn list(&self, b: &ListBounds) -> Result<RawListing> {
        let what = b.what();
        // Three statements, three round trips on one connection (autocommit: each its own
        // snapshot and clock); a retry after a lost connection starts the listing again.
        self.run(&what, |c| {
            let mut out = RawListing::default();
            for r in &c.query(q::LIST_LEASES, &[&b.from, &b.to, &b.take, &b.scan], &what)? {
                let row =
                    (col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?, col(r, 4, &what)?);
                out.add_lease(b, (row.0, row.1, row.2, row.3, row.4, col(r, 5, &what)?));
            }
            for r in &c.query(q::LIST_MEMBERS, &[&b.from, &b.to, &b.take, &b.scan], &what)? {
                out.add_member(b, (col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?));
            }
            for r in &c.query(q::LIST_SESSIONS, &[&b.take, &b.scan], &what)? {
                out.add_session(b, (col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?));
            }
            Ok(out)
        })
    }

    fn purge(&self, limit: usize) -> Result<usize> {
        let what = "purge expired sessions";
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run(what, |c| {
            let select = c.statement(q::PURGE_SELECT, what)?;
            let members = c.statement(q::PURGE_MEMBERS, what)?;
            let notify = c.statement(q::PURGE_NOTIFY, what)?;
            let sessions = c.statement(q::PURGE_SESSIONS, what)?;
            c.purge([select, members, notify, sessions], limit, what)?.map_err(Fail::Stop)
        })
    }

    fn now_ms(&self) -> Result<i64> {
        let what = "read the database clock";
        self.run(what, |c| {
            let rows = c.query(q::NOW, &[], what)?;
            match rows.first() {
                Some(r) => col(r, 0, what),
                None => Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row")))),
            }
        })
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<i64>) -> Result<Option<i64>> {
        let what = format!("limit of semaphore '{name}' (table simba_semaphore)");
        self.run(&what, |c| {
            let rows = match permits {
                Some(p) => c.query(q::SEMAPHORE_LIMIT, &[&name.as_str(), &p], &what)?,
                None => c.query(q::SEMAPHORE_LIMIT_READ, &[&name.as_str()], &what)?,
            };
            rows.first().map(|r| col(r, 0, &what)).transpose()
        })
    }

    fn semaphore_table(&self) -> Result<bool> {
        let what = "check the semaphore table";
        self.run(what, |c| {
            let rows = c.query(q::SEMAPHORE_TABLE_CHECK, &[], what)?;
            Ok(rows.first().map(|r| col::<i64>(r, 0, what)).transpose()?.unwrap_or(0) > 0)
        })
    }

    fn schema_tables(&self) -> Result<i64> {
        let what = "check the schema";
        self.run(what, |c| {
            let rows = c.query(q::SCHEMA_CHECK, &[], what)?;
            match rows.first() {
                Some(r) => col(r, 0, what),
                None => Ok(0),
            }
        })
    }

    fn server_version(&self) -> Result<String> {
        let what = "read the server version";
        self.run(what, |c| {
            let version = c.query(q::SERVER_VERSION, &[], what)?;
            let Some(version) = version.first() else {
                return Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row"))));
            };
            col(version, 0, what)
        })
    }

    fn extra_checks(&self) -> Vec<CheckItem> {
        let transport = self.run("check the connection's TLS", |c| Ok(c.transport.clone()));
        vec![
            match transport {
                Ok(t) => tls_item(&t, &self.connector),
                Err(e) => CheckItem {
                    name: "tls".to_string(),
                    status: CheckStatus::Fail,
                    detail: crate::error::display_chain(&e),
                },
            },
            self.listener.check_item(),
        ]
    }

    fn call_bound(&self) -> Option<Duration> {
        Some(self.query_timeout)
    }

    fn release_until(&self, id: &SessionId, name: &Name, token: i64, deadline: Instant) -> Result<()> {
        let what = format!("release '{name}' (token {token}) by session {id}");
        self.run_until(&what, deadline, |c| {
            c.execute(q::RELEASE, &[&id.as_str(), &name.as_str(), &token], &what).map(|_| ())
        })
    }

    fn connection_ids(&self) -> Vec<u64> {
        let mut ids = self.registry.lock().clone();
        ids.sort_unstable();
        ids
    }

    fn push_release(&self) -> bool {
        true
    }

    fn push_membership(&self) -> bool {
        true
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        self.listener.watch(topic, notify)
    }

    fn notification_connection_id(&self) -> Option<u64> {
        self.listener.connection_id()
    }
}
