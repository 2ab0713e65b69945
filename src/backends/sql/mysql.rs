//! The MySQL 8 / MariaDB 10.11 dialect: the blocking `mysql` client in an r2d2 pool.
//!
//! Every connection runs in UTC (`SET time_zone = '+00:00'`), has TCP connect/read/write timeouts,
//! `innodb_lock_wait_timeout` and a server-side statement limit (MariaDB `max_statement_time`;
//! MySQL 8 `max_execution_time`, which covers SELECTs only). A connection that saw an I/O error,
//! a read timeout or any other client-side failure is never used again: after such an error a
//! `Conn` can be out of step with the server and return the previous statement's reply.
//!
//! Rows are read as [`mysql::Row`] and converted column by column (`get_opt`), never with typed
//! helpers that panic on an unexpected type.
//!
//! The keep-alive is one `CALL` of the schema's stored procedure (`simba_keep_alive_v3`, created by
//! `init-simba-mysql.sql`), which returns the owned leases and the session's groups: one round
//! trip. While the procedure is missing (a schema created by an older version and not re-applied,
//! which may hold only the older `simba_keep_alive_v2` or `_v1`) or not executable by this user, it
//! falls back to the statements it replaced (one transaction, five round trips, same reply) and
//! tries the procedure again every [`ROUTINE_RETRY`] or after [`init_schema`](Driver::init_schema).
//! Both paths lock the session row first and judge expiry with a `NOW(3)` read by a later
//! statement, after the lock is granted: a renewal that waited for a takeover never revives a
//! session that expired meanwhile (MySQL 8 fixes `NOW()` at statement start).

use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, warn};
use mysql::prelude::Queryable;
use mysql::{Opts, OptsBuilder, Params, Row, TxOpts};
use parking_lot::Mutex;

use super::pool::{ConnectFailure, ConnectHealth, Fail, SqlPool};
use super::queries::mysql as q;
use super::{add_keep_alive_row, redact_url, Driver, RawAcquire, RawHolder, RawKeepAlive, SqlOptions};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId};

const KIND: &str = "mysql";

/// MySQL/MariaDB error codes we act on.
mod code {
    pub const LOCK_WAIT_TIMEOUT: u16 = 1205;
    pub const DEADLOCK: u16 = 1213;
    pub const NO_SUCH_TABLE: u16 = 1146;
    pub const QUERY_INTERRUPTED: u16 = 1317;
    pub const MARIADB_STATEMENT_TIMEOUT: u16 = 1969;
    pub const MYSQL_QUERY_TIMEOUT: u16 = 3024;
    pub const READ_ONLY: u16 = 1290;
    pub const READ_ONLY_TRANSACTION: u16 = 1792;
    pub const TOO_MANY_CONNECTIONS: u16 = 1040;
    pub const SERVER_SHUTDOWN: u16 = 1053;
    /// ER_NET_READ_ERROR .. ER_NET_WRITE_INTERRUPTED.
    pub const NET_ERRORS: std::ops::RangeInclusive<u16> = 1158..=1161;
    pub const CONNECTION_KILLED: u16 = 1927;
    pub const SERVER_GONE: u16 = 2006;
    pub const SERVER_LOST: u16 = 2013;
    pub const CLIENT_INTERACTION_TIMEOUT: u16 = 4031;
    /// ER_DBACCESS_DENIED_ERROR, ER_TABLEACCESS_DENIED_ERROR, ER_SPECIFIC_ACCESS_DENIED_ERROR.
    pub const ACCESS_DENIED: [u16; 3] = [1044, 1142, 1227];
    /// ER_PARSE_ERROR (MySQL before 8.0.29 has no `CREATE PROCEDURE IF NOT EXISTS`).
    pub const PARSE_ERROR: u16 = 1064;
    /// ER_SP_DOES_NOT_EXIST: the keep-alive procedure is missing.
    pub const SP_DOES_NOT_EXIST: u16 = 1305;
    /// ER_PROCACCESS_DENIED_ERROR: no EXECUTE privilege on the procedure.
    pub const PROC_ACCESS_DENIED: u16 = 1370;
    /// ER_ACCESS_DENIED_ERROR: wrong password or unknown user (the server does not say which);
    /// ER_ACCESS_DENIED_NO_PASSWORD_ERROR (1698): the same when no password was sent.
    pub const LOGIN_DENIED: [u16; 2] = [1045, 1698];
    /// ER_DBACCESS_DENIED_ERROR: the user may not use the database.
    pub const DB_ACCESS_DENIED: u16 = 1044;
    /// ER_BAD_DB_ERROR: unknown database.
    pub const UNKNOWN_DATABASE: u16 = 1049;
    /// ER_HOST_IS_BLOCKED: too many failed connects from this host.
    pub const HOST_BLOCKED: u16 = 1129;
    /// ER_HOST_NOT_PRIVILEGED: this host may not connect.
    pub const HOST_NOT_PRIVILEGED: u16 = 1130;
    /// ER_NOT_SUPPORTED_AUTH_MODE: the account's authentication plugin is not supported by the client.
    pub const AUTH_MODE: u16 = 1251;
    /// ER_MUST_CHANGE_PASSWORD_LOGIN and ER_MUST_CHANGE_PASSWORD: the password has expired.
    pub const PASSWORD_EXPIRED: [u16; 2] = [1862, 1820];
    /// ER_ACCOUNT_HAS_BEEN_LOCKED (MySQL 3118, MariaDB 4151).
    pub const ACCOUNT_LOCKED: [u16; 2] = [3118, 4151];
    /// ER_SECURE_TRANSPORT_REQUIRED (MySQL 3159, MariaDB 4036? see `connect_failure`).
    pub const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
}

/// How long the keep-alive or the acquire uses its separate-statement fallback after finding its
/// procedure missing or not executable, before trying the procedure again.
pub(crate) const ROUTINE_RETRY: Duration = Duration::from_secs(60);

/// One pooled connection.
pub(crate) struct MyConn {
    conn: mysql::Conn,
    broken: bool,
    mariadb: bool,
    /// The server has `SKIP LOCKED` and `JSON_TABLE` (MySQL 8, MariaDB 10.6+).
    skip_locked: bool,
    id: u64,
    registry: Arc<Mutex<Vec<u64>>>,
}

impl Drop for MyConn {
    fn drop(&mut self) {
        let mut ids = self.registry.lock();
        if let Some(i) = ids.iter().position(|p| *p == self.id) {
            ids.swap_remove(i);
        }
    }
}

/// Classifies a driver error. Anything but an error reply from the server marks the connection
/// broken (it is dropped, never returned to the pool).
fn fail(conn_broken: &mut bool, e: mysql::Error, what: &str) -> Fail {
    let msg = |m: &str| format!("{KIND}: {what}: {m}");
    match &e {
        mysql::Error::MySqlError(se) => match se.code {
            code::DEADLOCK => Fail::Retry(Error::unavailable(msg("deadlock")).with_source(e)),
            code::LOCK_WAIT_TIMEOUT
            | code::QUERY_INTERRUPTED
            | code::MARIADB_STATEMENT_TIMEOUT
            | code::MYSQL_QUERY_TIMEOUT => {
                Fail::Stop(Error::unavailable(msg("statement timed out (query timeout)")).with_source(e))
            }
            code::NO_SUCH_TABLE => Fail::Stop(
                Error::backend(msg(
                    "the Simba tables are missing: run `simba schema apply`, SqlBackend::init_schema() or \
                     sql/mysql/init-simba-mysql.sql once",
                ))
                .with_source(e),
            ),
            code::READ_ONLY | code::READ_ONLY_TRANSACTION => {
                Fail::Stop(Error::unavailable(msg("the server is read-only (a replica?)")).with_source(e))
            }
            code::TOO_MANY_CONNECTIONS
            | code::SERVER_SHUTDOWN
            | code::CONNECTION_KILLED
            | code::SERVER_GONE
            | code::SERVER_LOST
            | code::CLIENT_INTERACTION_TIMEOUT => {
                *conn_broken = true;
                Fail::Retry(Error::unavailable(msg("connection closed by the server")).with_source(e))
            }
            c if code::NET_ERRORS.contains(&c) => {
                *conn_broken = true;
                Fail::Retry(Error::unavailable(msg("network error")).with_source(e))
            }
            _ => Fail::Stop(Error::backend(msg("statement failed")).with_source(e)),
        },
        mysql::Error::FromValueError(_) | mysql::Error::FromRowError(_) => {
            Fail::Stop(Error::backend(msg("unexpected value")).with_source(e))
        }
        _ => {
            *conn_broken = true;
            Fail::Retry(Error::unavailable(msg("connection failed")).with_source(e))
        }
    }
}

impl MyConn {
    fn rows(&mut self, sql: &'static str, params: impl Into<Params>, what: &str) -> Result<Vec<Row>, Fail> {
        self.conn.exec::<Row, _, _>(sql, params).map_err(|e| fail(&mut self.broken, e, what))
    }

    /// Executes a statement that may return several result sets (a `CALL`: the procedure's
    /// `SELECT`, then the `CALL`'s own status). Reads every set to the end and returns all their
    /// rows, or the first error anywhere in the reply — never left behind in a trailing set, where
    /// the driver's helpers would drop it silently and leave the connection out of step.
    fn call_rows(&mut self, sql: &'static str, params: impl Into<Params>) -> Result<Vec<Row>, mysql::Error> {
        let mut reply = self.conn.exec_iter(sql, params)?;
        let mut rows = Vec::new();
        while let Some(set) = reply.iter() {
            for row in set {
                rows.push(row?);
            }
        }
        Ok(rows)
    }

    /// Runs a statement without a result set; returns (affected rows, last insert id).
    fn exec(&mut self, sql: &'static str, params: impl Into<Params>, what: &str) -> Result<(u64, u64), Fail> {
        match self.conn.exec_drop(sql, params) {
            Ok(()) => Ok((self.conn.affected_rows(), self.conn.last_insert_id())),
            Err(e) => Err(fail(&mut self.broken, e, what)),
        }
    }
}

/// Column `idx` of `row` as `T` (use `Option<T>` for nullable columns).
fn col<T: mysql::prelude::FromValue>(row: &Row, idx: usize, what: &str) -> Result<T, Fail> {
    match row.get_opt::<T, usize>(idx) {
        Some(Ok(v)) => Ok(v),
        Some(Err(e)) => {
            Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: unexpected value in column {idx}")).with_source(e)))
        }
        None => Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: missing column {idx}")))),
    }
}

/// Classifies a failed connect: the server's refusals that retrying cannot fix are permanent
/// (with what to do, in the server's words: error number, SQLSTATE and message); network
/// failures, a server shutting down and "too many connections" are retried within the query
/// timeout.
fn connect_failure(e: &mysql::Error, user: &str, database: &str) -> ConnectFailure {
    let mysql::Error::MySqlError(se) = e else {
        return ConnectFailure { permanent: false, text: crate::error::display_chain(e) };
    };
    let todo = match se.code {
        c if code::LOGIN_DENIED.contains(&c) => format!(
            "check the user name \"{user}\" and the password in the URL (the server answers the same for an \
             unknown user, a wrong password and an account that requires TLS)"
        ),
        code::DB_ACCESS_DENIED => format!("grant user \"{user}\" access to database \"{database}\""),
        code::UNKNOWN_DATABASE => format!("create the database \"{database}\" or fix the database name in the URL"),
        code::HOST_BLOCKED => "unblock this host on the server (FLUSH HOSTS)".to_string(),
        code::HOST_NOT_PRIVILEGED => format!("create user \"{user}\" for this client's host"),
        code::AUTH_MODE => "use an authentication plugin the client supports (mysql_native_password, \
                            caching_sha2_password) for this account"
            .to_string(),
        c if code::PASSWORD_EXPIRED.contains(&c) => format!("set a new password for user \"{user}\""),
        c if code::ACCOUNT_LOCKED.contains(&c) => {
            format!("unlock the account \"{user}\" (ALTER USER … ACCOUNT UNLOCK)")
        }
        code::SECURE_TRANSPORT_REQUIRED => "the server requires TLS (require_secure_transport); connect with TLS \
                                            (ssl-mode in the URL) or allow plain connections"
            .to_string(),
        _ => return ConnectFailure { permanent: false, text: format!("the server refused the connection: {se}") },
    };
    ConnectFailure { permanent: true, text: format!("the server refused the connection: {se}: {todo}") }
}

pub(crate) struct MyManager {
    opts: Opts,
    health: Arc<ConnectHealth>,
    lock_wait_secs: u64,
    statement_secs: f64,
    execution_ms: u64,
    registry: Arc<Mutex<Vec<u64>>>,
}

/// What a server version string (`SELECT VERSION()`) tells: (MariaDB, has `SKIP LOCKED` and
/// `JSON_TABLE`). MySQL has both from 8.0 (8.0.1 and 8.0.4, both before the first GA release,
/// 8.0.11), MariaDB from 10.6.
fn server_flavour(version: &str) -> (bool, bool) {
    let mariadb = version.contains("MariaDB");
    // MariaDB's handshake shows "5.5.5-" before its real version (not `VERSION()`, but be safe).
    let version = if mariadb { version.strip_prefix("5.5.5-").unwrap_or(version) } else { version };
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).filter(|p| !p.is_empty()).map(|p| p.parse::<u32>());
    let (major, minor) = match (parts.next(), parts.next()) {
        (Some(Ok(major)), Some(Ok(minor))) => (major, minor),
        _ => return (mariadb, false),
    };
    let skip_locked = if mariadb { (major, minor) >= (10, 6) } else { major >= 8 };
    (mariadb, skip_locked)
}

impl MyManager {
    /// Session settings of a new connection: autocommit on, UTC, lock wait and statement
    /// timeouts. Returns what the server is (MariaDB, has `SKIP LOCKED`).
    fn prepare(&self, conn: &mut mysql::Conn) -> Result<(bool, bool), mysql::Error> {
        conn.query_drop(q::SESSION_AUTOCOMMIT)?;
        conn.query_drop(q::SESSION_TIME_ZONE)?;
        conn.exec_drop(q::SESSION_LOCK_WAIT_TIMEOUT, (self.lock_wait_secs,))?;
        let rows: Vec<Row> = conn.exec(q::SERVER_VERSION, ())?;
        let version: String =
            rows.first().and_then(|r| r.get_opt::<String, usize>(0)).and_then(|v| v.ok()).unwrap_or_default();
        let (mariadb, skip_locked) = server_flavour(&version);
        if mariadb {
            conn.exec_drop(q::SESSION_STATEMENT_TIME_MARIADB, (self.statement_secs,))?;
        } else {
            conn.exec_drop(q::SESSION_EXECUTION_TIME_MYSQL, (self.execution_ms,))?;
        }
        Ok((mariadb, skip_locked))
    }
}

impl r2d2::ManageConnection for MyManager {
    type Connection = MyConn;
    type Error = mysql::Error;

    fn connect(&self) -> Result<MyConn, mysql::Error> {
        let mut conn = match mysql::Conn::new(self.opts.clone()) {
            Ok(c) => c,
            Err(e) => {
                let user = self.opts.get_user().unwrap_or_default();
                let database = self.opts.get_db_name().unwrap_or_default();
                self.health.failed(KIND, connect_failure(&e, user, database));
                return Err(e);
            }
        };
        self.health.succeeded(KIND);
        let (mariadb, skip_locked) = self.prepare(&mut conn)?;
        let id = u64::from(conn.connection_id());
        self.registry.lock().push(id);
        debug!("simba {KIND}: new connection (server connection id {id})");
        Ok(MyConn { conn, broken: false, mariadb, skip_locked, id, registry: self.registry.clone() })
    }

    fn is_valid(&self, conn: &mut MyConn) -> Result<(), mysql::Error> {
        conn.conn.ping()
    }

    fn has_broken(&self, conn: &mut MyConn) -> bool {
        conn.broken
    }
}

/// A stored procedure that saves round trips, and whether it is usable: when a call last found
/// it missing or not executable (`None`: call it). The caller falls back to the statements it
/// replaces meanwhile and tries again every [`ROUTINE_RETRY`] or after `init_schema`.
struct Routine {
    name: &'static str,
    /// What the fallback costs, for the warning ("keep-alives take five round trips instead of one").
    fallback: &'static str,
    missing: Mutex<Option<Instant>>,
}

impl Routine {
    fn new(name: &'static str, fallback: &'static str) -> Routine {
        Routine { name, fallback, missing: Mutex::new(None) }
    }

    /// Whether to call the procedure (not known missing, or time to try again).
    fn usable(&self) -> bool {
        self.missing.lock().is_none_or(|since| since.elapsed() >= ROUTINE_RETRY)
    }

    /// The procedure answered: say so once if it had been missing.
    fn answered(&self) {
        if self.missing.lock().take().is_some() {
            debug!("simba {KIND}: the procedure {} is back: {} take one round trip again", self.name, self.fallback);
        }
    }

    /// The procedure could not be called: fall back for a while, and say so (once per outage).
    fn unavailable(&self, e: &mysql::MySqlError) {
        let first = self.missing.lock().replace(Instant::now()).is_none();
        let msg = format!(
            "{KIND}: the procedure {} is missing or not executable ({e}): {}; run `simba schema apply` or \
             SqlBackend::init_schema() (needs the CREATE ROUTINE privilege; callers need EXECUTE)",
            self.name, self.fallback
        );
        if first {
            warn!("simba {msg}");
        } else {
            debug!("simba {msg}");
        }
    }

    /// Whether `e` says the procedure is missing or this user may not execute it.
    fn is_unavailable(e: &mysql::Error) -> Option<&mysql::MySqlError> {
        match e {
            mysql::Error::MySqlError(se)
                if se.code == code::SP_DOES_NOT_EXIST || se.code == code::PROC_ACCESS_DENIED =>
            {
                Some(se)
            }
            _ => None,
        }
    }
}

pub(crate) struct MyDriver {
    pool: SqlPool<MyManager>,
    registry: Arc<Mutex<Vec<u64>>>,
    keep_alive_routine: Routine,
    acquire_routine: Routine,
}

impl MyDriver {
    pub(crate) fn new(url: &str, options: &SqlOptions) -> Result<MyDriver> {
        let url_for_driver = match url.split_once("://") {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") => format!("mysql://{rest}"),
            _ => url.to_string(),
        };
        let parsed = Opts::from_url(&url_for_driver)
            .map_err(|e| Error::config(format!("invalid MySQL URL {}", redact_url(url))).with_source(e))?;
        let qt = options.query_timeout();
        // The server gives up first (statement / lock wait limits); the socket read timeout is
        // the last resort for a server that stopped answering.
        let opts: Opts = OptsBuilder::from_opts(parsed)
            .prefer_socket(false)
            .tcp_connect_timeout(Some(options.connect_timeout()))
            .read_timeout(Some(qt + Duration::from_millis(500)))
            .write_timeout(Some(qt))
            .stmt_cache_size(64)
            .into();
        let registry = Arc::new(Mutex::new(Vec::new()));
        let health = Arc::new(ConnectHealth::default());
        let manager = MyManager {
            opts,
            health: health.clone(),
            lock_wait_secs: qt.as_secs_f64().ceil().max(1.0) as u64,
            statement_secs: qt.as_secs_f64().max(0.001),
            execution_ms: u64::try_from(qt.as_millis()).unwrap_or(u64::MAX).max(1),
            registry: registry.clone(),
        };
        Ok(MyDriver {
            pool: SqlPool::new(manager, health, options, KIND),
            registry,
            keep_alive_routine: Routine::new(
                q::KEEP_ALIVE_PROCEDURE,
                "keep-alives take five round trips instead of one",
            ),
            acquire_routine: Routine::new(q::ACQUIRE_PROCEDURE, "acquires take two round trips instead of one"),
        })
    }

    /// The keep-alive as the separate statements the procedure replaces, in one transaction: lock
    /// the session row, renew it with a clock read after the lock, read what it owns (and delete
    /// it when it has expired), commit. Five round trips (seven when the session has expired).
    fn keep_alive_statements(c: &mut MyConn, id: &SessionId, lease_ms: i64, what: &str) -> Result<RawKeepAlive, Fail> {
        let r = (|| -> Result<Vec<Row>, mysql::Error> {
            let mut tx = c.conn.start_transaction(TxOpts::default())?;
            tx.exec::<Row, _, _>(q::KEEP_ALIVE_LOCK, (id.as_str(),))?;
            tx.exec_drop(q::KEEP_ALIVE, (lease_ms, id.as_str()))?;
            let rows: Vec<Row> = tx.exec(q::KEEP_ALIVE_READ, (id.as_str(), id.as_str()))?;
            if rows.is_empty() {
                tx.exec_drop(q::DELETE_EXPIRED_SESSION, (id.as_str(),))?;
                tx.exec_drop(q::DELETE_SESSION_MEMBERS, (id.as_str(),))?;
            }
            tx.commit()?;
            Ok(rows)
        })();
        let rows = r.map_err(|e| fail(&mut c.broken, e, what))?;
        if rows.is_empty() {
            return Ok(None);
        }
        keep_alive_reply(&rows, what)
    }

    /// The acquire as the two statements the procedure replaces: a plain read, then (when the
    /// lease looks takeable) the upsert; an upsert that did not take the row is classified by one
    /// more read.
    fn acquire_statements(c: &mut MyConn, id: &SessionId, name: &Name, what: &str) -> Result<RawAcquire, Fail> {
        for round in 0..2 {
            let rows = c.rows(q::ACQUIRE_OBSERVE, (name.as_str(), id.as_str()), what)?;
            let Some(row) = rows.first() else {
                return Ok(RawAcquire::Expired);
            };
            let remaining_ms: i64 = col(row, 0, what)?;
            let holder: Option<String> = col(row, 1, what)?;
            let token: Option<i64> = col(row, 2, what)?;
            let holder_alive: i64 = col(row, 3, what)?;
            if holder.as_deref() == Some(id.as_str()) {
                if let Some(token) = token {
                    return Ok(RawAcquire::Acquired { token, remaining_ms });
                }
            }
            if holder_alive != 0 || round == 1 {
                return Ok(RawAcquire::Busy);
            }
            let observed = holder.unwrap_or_default();
            let (affected, last_id) = c.exec(
                q::ACQUIRE,
                (name.as_str(), observed.as_str(), id.as_str(), observed.as_str(), observed.as_str()),
                what,
            )?;
            match (affected, i64::try_from(last_id)) {
                (1, _) => return Ok(RawAcquire::Acquired { token: 1, remaining_ms }),
                (2, Ok(token)) if token > 0 => return Ok(RawAcquire::Acquired { token, remaining_ms }),
                _ => {}
            }
        }
        Ok(RawAcquire::Busy)
    }

    fn one_i64(&self, sql: &'static str, what: &str) -> Result<i64> {
        self.pool.run(what, |c| {
            let rows = c.rows(sql, (), what)?;
            match rows.first() {
                Some(r) => col(r, 0, what),
                None => Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row")))),
            }
        })
    }
}

/// One purge batch on a server with `SKIP LOCKED` (READ COMMITTED: no gap locks): locks the
/// oldest expired sessions nobody else holds and deletes exactly those, with their memberships.
/// It never waits for a row another transaction holds.
fn purge_skip_locked(conn: &mut mysql::Conn, limit: u64) -> Result<usize, mysql::Error> {
    let opts = TxOpts::default().set_isolation_level(Some(mysql::IsolationLevel::ReadCommitted));
    let mut tx = conn.start_transaction(opts)?;
    let rows: Vec<Row> = tx.exec(q::PURGE_SELECT_SKIP_LOCKED, (limit,))?;
    let ids: Vec<String> = rows.iter().filter_map(|r| r.get_opt::<String, usize>(0).and_then(|v| v.ok())).collect();
    if ids.is_empty() {
        tx.commit()?;
        return Ok(0);
    }
    let list = json_strings(&ids);
    tx.exec_drop(q::PURGE_MEMBERS_LISTED, (list.as_str(),))?;
    tx.exec_drop(q::PURGE_SESSIONS_LISTED, (list.as_str(),))?;
    let n = tx.affected_rows();
    tx.commit()?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// One purge batch on an older server (no `SKIP LOCKED`): locks the oldest expired sessions and
/// deletes everything expired up to the newest of them (waits for rows others hold).
fn purge_range(conn: &mut mysql::Conn, limit: u64) -> Result<usize, mysql::Error> {
    let mut tx = conn.start_transaction(TxOpts::default())?;
    let rows: Vec<Row> = tx.exec(q::PURGE_SELECT, (limit,))?;
    let cutoff = rows.iter().filter_map(|r| r.get_opt::<i64, usize>(1).and_then(|v| v.ok())).max();
    let Some(cutoff) = cutoff else {
        tx.commit()?;
        return Ok(0);
    };
    tx.exec_drop(q::PURGE_MEMBERS, (cutoff,))?;
    tx.exec_drop(q::PURGE_SESSIONS, (cutoff, limit))?;
    let n = tx.affected_rows();
    tx.commit()?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// `values` as a JSON array of strings (a bound parameter of `JSON_TABLE`, never SQL text).
fn json_strings(values: &[String]) -> String {
    let mut out = String::from("[");
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for ch in v.chars() {
            match ch {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    out.push(']');
    out
}

/// A keep-alive result set — `(remaining ms, lease name, token, group name)` per owned lease and
/// per membership, one row of NULLs when there is neither, no row when the session is not alive —
/// as the raw reply. A value of the wrong type (or a name that is not UTF-8) is a `Backend` error.
fn keep_alive_reply(rows: &[Row], what: &str) -> Result<RawKeepAlive, Fail> {
    let mut alive = None;
    for r in rows {
        add_keep_alive_row(&mut alive, col(r, 0, what)?, col(r, 1, what)?, col(r, 2, what)?, col(r, 3, what)?);
    }
    Ok(alive)
}

/// The statements of an init script, as the `mysql` client reads it: comment lines dropped, a
/// statement ends at a line ending with the current delimiter (`;` unless a `delimiter` line
/// changed it, as around the procedure, whose body contains `;`).
fn script_statements(script: &str) -> Vec<String> {
    let mut statements = Vec::new();
    let mut delimiter = ";".to_string();
    let mut current = String::new();
    for line in script.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with("--") {
            continue;
        }
        if let Some(d) = trimmed.get(..10).filter(|p| p.eq_ignore_ascii_case("delimiter ")).and(trimmed.get(10..)) {
            delimiter = d.trim().to_string();
            continue;
        }
        current.push_str(line);
        current.push('\n');
        if trimmed.ends_with(delimiter.as_str()) {
            let end = current.trim_end().len() - delimiter.len();
            let statement = current[..end].trim();
            if !statement.is_empty() {
                statements.push(statement.to_string());
            }
            current.clear();
        }
    }
    let rest = current.trim();
    if !rest.is_empty() {
        statements.push(rest.to_string());
    }
    statements
}

/// Whether `statement` creates a stored routine (optional: the backend falls back without it).
fn creates_routine(statement: &str) -> bool {
    statement.get(..16).is_some_and(|p| p.eq_ignore_ascii_case("create procedure"))
}

impl Driver for MyDriver {
    fn init_schema(&self) -> Result<()> {
        let what = "init schema";
        let statements = script_statements(q::INIT_SIMBA_MYSQL);
        let routine_created = self.pool.run(what, |c| {
            let mut routine_created = true;
            for s in &statements {
                match c.conn.query_drop(s) {
                    Ok(()) => {}
                    // The procedures only save round trips: a server or a user that cannot create
                    // them keeps the separate statements instead of failing here.
                    Err(mysql::Error::MySqlError(e))
                        if creates_routine(s)
                            && (code::ACCESS_DENIED.contains(&e.code)
                                || (e.code == code::PARSE_ERROR && !c.mariadb)) =>
                    {
                        let routine =
                            [&self.keep_alive_routine, &self.acquire_routine].into_iter().find(|r| s.contains(r.name));
                        warn!(
                            "simba {KIND}: cannot create the procedure {} ({e}; MySQL needs 8.0.29 or later and the \
                             CREATE ROUTINE privilege): {}",
                            routine.map_or("?", |r| r.name),
                            routine.map_or("more round trips", |r| r.fallback)
                        );
                        routine_created = false;
                    }
                    Err(e) => return Err(fail(&mut c.broken, e, what)),
                }
            }
            Ok(routine_created)
        })?;
        if routine_created {
            *self.keep_alive_routine.missing.lock() = None;
            *self.acquire_routine.missing.lock() = None;
        }
        Ok(())
    }

    fn open_session(&self, id: &SessionId, lease_ms: i64, metadata: &str) -> Result<()> {
        let what = format!("open session {id}");
        let mut attempt = 0;
        self.pool.run(&what, |c| {
            attempt += 1;
            if attempt > 1 {
                // A retry after a lost reply: the first insert may have committed.
                let rows = c.rows(q::SESSION_ALIVE, (id.as_str(),), &what)?;
                if rows.first().map(|r| col::<i64>(r, 0, &what)).transpose()?.unwrap_or(0) > 0 {
                    return Ok(());
                }
            }
            c.exec(q::OPEN_SESSION, (id.as_str(), lease_ms, metadata), &what).map(|_| ())
        })
    }

    fn keep_alive(&self, id: &SessionId, lease_ms: i64) -> Result<RawKeepAlive> {
        let what = format!("keep-alive of session {id}");
        self.pool.run(&what, |c| {
            if self.keep_alive_routine.usable() {
                match c.call_rows(q::KEEP_ALIVE_CALL, (id.as_str(), lease_ms)) {
                    Ok(rows) => {
                        self.keep_alive_routine.answered();
                        return keep_alive_reply(&rows, &what);
                    }
                    Err(e) => match Routine::is_unavailable(&e) {
                        Some(se) => self.keep_alive_routine.unavailable(se),
                        None => return Err(fail(&mut c.broken, e, &what)),
                    },
                }
            }
            MyDriver::keep_alive_statements(c, id, lease_ms, &what)
        })
    }

    fn close_session(&self, id: &SessionId) -> Result<()> {
        let what = format!("close session {id}");
        self.pool.run(&what, |c| {
            c.exec(q::DELETE_SESSION, (id.as_str(),), &what)?;
            c.exec(q::RELEASE_SESSION_LEASES, (id.as_str(),), &what)?;
            c.exec(q::DELETE_SESSION_MEMBERS, (id.as_str(),), &what)?;
            Ok(())
        })
    }

    fn acquire(&self, id: &SessionId, name: &Name) -> Result<RawAcquire> {
        let what = format!("acquire '{name}' for session {id}");
        self.pool.run(&what, |c| {
            if self.acquire_routine.usable() {
                match c.call_rows(q::ACQUIRE_CALL, (id.as_str(), name.as_str())) {
                    Ok(rows) => {
                        self.acquire_routine.answered();
                        let Some(row) = rows.first() else {
                            return Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row"))));
                        };
                        let remaining_ms: Option<i64> = col(row, 0, &what)?;
                        let token: Option<i64> = col(row, 1, &what)?;
                        return Ok(match (remaining_ms, token) {
                            (None, _) => RawAcquire::Expired,
                            (Some(_), None) => RawAcquire::Busy,
                            (Some(remaining_ms), Some(token)) => RawAcquire::Acquired { token, remaining_ms },
                        });
                    }
                    Err(e) => match Routine::is_unavailable(&e) {
                        Some(se) => self.acquire_routine.unavailable(se),
                        None => return Err(fail(&mut c.broken, e, &what)),
                    },
                }
            }
            MyDriver::acquire_statements(c, id, name, &what)
        })
    }

    fn release(&self, id: &SessionId, name: &Name, token: i64) -> Result<()> {
        let what = format!("release '{name}' (token {token}) by session {id}");
        self.pool.run(&what, |c| c.exec(q::RELEASE, (name.as_str(), id.as_str(), token), &what).map(|_| ()))
    }

    fn holder(&self, name: &Name) -> Result<Option<RawHolder>> {
        let what = format!("holder of '{name}'");
        self.pool.run(&what, |c| {
            let rows = c.rows(q::HOLDER, (name.as_str(),), &what)?;
            match rows.first() {
                None => Ok(None),
                Some(r) => Ok(Some((col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?))),
            }
        })
    }

    fn join(&self, id: &SessionId, group: &Name) -> Result<bool> {
        let what = format!("join '{group}' by session {id}");
        self.pool.run(&what, |c| {
            let (affected, _) = c.exec(q::JOIN, (group.as_str(), id.as_str()), &what)?;
            if affected > 0 {
                return Ok(true);
            }
            // Already a member, or the session is not alive.
            let rows = c.rows(q::SESSION_ALIVE, (id.as_str(),), &what)?;
            let alive: i64 = match rows.first() {
                Some(r) => col(r, 0, &what)?,
                None => 0,
            };
            Ok(alive > 0)
        })
    }

    fn leave(&self, id: &SessionId, group: &Name) -> Result<()> {
        let what = format!("leave '{group}' by session {id}");
        self.pool.run(&what, |c| c.exec(q::LEAVE, (group.as_str(), id.as_str()), &what).map(|_| ()))
    }

    fn members(&self, group: &Name) -> Result<Vec<(String, String)>> {
        let what = format!("members of '{group}'");
        self.pool.run(&what, |c| {
            let rows = c.rows(q::MEMBERS, (group.as_str(),), &what)?;
            rows.iter().map(|r| Ok((col(r, 0, &what)?, col(r, 1, &what)?))).collect()
        })
    }

    fn purge(&self, limit: usize) -> Result<usize> {
        let what = "purge expired sessions";
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        self.pool.run(what, |c| {
            let r = if c.skip_locked { purge_skip_locked(&mut c.conn, limit) } else { purge_range(&mut c.conn, limit) };
            r.map_err(|e| fail(&mut c.broken, e, what))
        })
    }

    fn now_ms(&self) -> Result<i64> {
        self.one_i64(q::NOW, "read the database clock")
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<i64>) -> Result<Option<i64>> {
        let what = format!("limit of semaphore '{name}' (table simba_semaphore)");
        self.pool.run(&what, |c| {
            if let Some(p) = permits {
                c.exec(q::SEMAPHORE_LIMIT, (name.as_str(), p), &what)?;
            }
            let rows = c.rows(q::SEMAPHORE_LIMIT_READ, (name.as_str(),), &what)?;
            rows.first().map(|r| col(r, 0, &what)).transpose()
        })
    }

    fn semaphore_table(&self) -> Result<bool> {
        Ok(self.one_i64(q::SEMAPHORE_TABLE_CHECK, "check the semaphore table")? > 0)
    }

    fn schema_tables(&self) -> Result<i64> {
        self.one_i64(q::SCHEMA_CHECK, "check the schema")
    }

    fn server_version(&self) -> Result<String> {
        let what = "read the server version";
        self.pool.run(what, |c| {
            let rows = c.rows(q::SERVER_VERSION, (), what)?;
            match rows.first() {
                Some(r) => col(r, 0, what),
                None => Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row")))),
            }
        })
    }

    fn missing_routine(&self) -> Result<Option<&'static str>> {
        let what = "check the stored procedures";
        let present: Vec<String> = self.pool.run(what, |c| {
            let rows = c.rows(q::ROUTINE_CHECK, (), what)?;
            rows.iter().map(|r| col(r, 0, what)).collect()
        })?;
        Ok([q::KEEP_ALIVE_PROCEDURE, q::ACQUIRE_PROCEDURE].into_iter().find(|p| !present.iter().any(|n| n == p)))
    }

    fn connection_ids(&self) -> Vec<u64> {
        let mut ids = self.registry.lock().clone();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_script_splits_into_three_tables_and_the_procedures() {
        let s = script_statements(q::INIT_SIMBA_MYSQL);
        assert_eq!(s.len(), 5, "{s:?}");
        assert!(creates_routine(&s[4]) && s[4].contains(q::ACQUIRE_PROCEDURE) && s[4].ends_with("end"), "{}", s[4]);
        assert!(s[..3].iter().all(|s| s.starts_with("create table if not exists simba_")), "{s:?}");
        assert!(s[..3].iter().all(|s| s.ends_with(')')), "{s:?}");
        assert!(creates_routine(&s[3]) && !creates_routine(&s[0]), "{}", s[3]);
        assert!(s[3].contains(q::KEEP_ALIVE_PROCEDURE) && s[3].ends_with("end"), "{}", s[3]);
        assert!(!s[3].contains("simba_keep_alive_v1("), "the old procedure is not recreated: {}", s[3]);
        assert!(!s[3].contains("simba_keep_alive_v2("), "the old procedure is not recreated: {}", s[3]);
        assert!(s[3].matches(';').count() >= 4, "the body keeps its statements: {}", s[3]);
        assert!(!s.iter().any(|s| s.to_ascii_lowercase().contains("delimiter")), "{s:?}");
    }

    /// The procedures the keep-alive and the acquire call are the ones the init script creates
    /// and `check` looks for.
    #[test]
    fn one_procedure_name_everywhere() {
        let sql = |s: &str| s.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n");
        for (procedure, call) in
            [(q::KEEP_ALIVE_PROCEDURE, q::KEEP_ALIVE_CALL), (q::ACQUIRE_PROCEDURE, q::ACQUIRE_CALL)]
        {
            assert_eq!(sql(call).trim(), format!("CALL {procedure}(?, ?)"));
            assert!(sql(q::ROUTINE_CHECK).contains(&format!("'{procedure}'")));
            let create = format!("create procedure if not exists {procedure}(");
            assert!(sql(q::INIT_SIMBA_MYSQL).contains(&create));
        }
    }

    #[test]
    fn server_flavours() {
        assert_eq!(server_flavour("10.11.19-MariaDB-0+deb12u1"), (true, true));
        assert_eq!(server_flavour("10.6.0-MariaDB"), (true, true));
        assert_eq!(server_flavour("10.5.23-MariaDB-log"), (true, false));
        assert_eq!(server_flavour("5.5.5-10.11.6-MariaDB"), (true, true));
        assert_eq!(server_flavour("8.0.36"), (false, true));
        assert_eq!(server_flavour("8.4.0-commercial"), (false, true));
        assert_eq!(server_flavour("5.7.44-log"), (false, false));
        assert_eq!(server_flavour(""), (false, false));
    }

    #[test]
    fn json_lists_escape_every_value() {
        assert_eq!(json_strings(&[]), "[]");
        assert_eq!(json_strings(&["ab".into(), "c\"d\\e\u{1}".into()]), r#"["ab","c\"d\\e\u0001"]"#);
    }

    #[test]
    fn script_splitting_follows_delimiter_lines() {
        let script =
            "-- c\nselect 1;\nDELIMITER $$\ncreate procedure p() begin\n  select 2;\nend$$\ndelimiter ;\nselect 3\n";
        assert_eq!(
            script_statements(script),
            vec!["select 1".to_string(), "create procedure p() begin\n  select 2;\nend".into(), "select 3".into()]
        );
    }
}
