//! The MySQL backend's connections: the r2d2 manager that opens them (TLS as configured, with
//! `PREFERRED`'s fallback, and the session settings the statements depend on), the pooled
//! connection with its statement helpers, and the classification of driver and connect errors.

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;

use log::debug;
use mysql::prelude::Queryable;
use mysql::{Opts, Params, Row};
use parking_lot::Mutex;

use super::super::pool::{ConnectFailure, ConnectHealth, Fail, Watched};
use super::super::queries::mysql as q;
use super::tls;
use super::MysqlTls;
use crate::error::Error;

pub(super) const KIND: &str = "mysql";

/// MySQL/MariaDB error codes we act on.
pub(super) mod code {
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
    /// ER_SECURE_TRANSPORT_REQUIRED (MySQL 3159; MariaDB 10.11 answers a plain connection to a
    /// `require_secure_transport=ON` server with [`LOGIN_DENIED`] instead).
    pub const SECURE_TRANSPORT_REQUIRED: u16 = 3159;
}

/// One pooled connection.
pub(crate) struct MyConn {
    pub(super) conn: mysql::Conn,
    pub(super) broken: bool,
    pub(super) mariadb: bool,
    /// The server has `SKIP LOCKED` and `JSON_TABLE` (MySQL 8, MariaDB 10.6+).
    pub(super) skip_locked: bool,
    id: u64,
    registry: Arc<Mutex<Vec<u64>>>,
}

impl Drop for MyConn {
    fn drop(&mut self) {
        if self.broken {
            // The driver's own drop still writes (statement closes, `COM_QUIT`): to a server that
            // stopped reading, a write could block for the write timeout. Shut down, each fails at once.
            let _ = nix::sys::socket::shutdown(self.conn.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        }
        let mut ids = self.registry.lock();
        if let Some(i) = ids.iter().position(|p| *p == self.id) {
            ids.swap_remove(i);
        }
    }
}

/// Classifies a driver error. Anything but an error reply from the server marks the connection
/// broken (it is dropped, never returned to the pool).
pub(super) fn fail(conn_broken: &mut bool, e: mysql::Error, what: &str) -> Fail {
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

impl Watched for MyConn {
    fn socket(&self) -> RawFd {
        self.conn.as_raw_fd()
    }

    fn set_broken(&mut self) {
        self.broken = true;
    }
}

impl MyConn {
    pub(super) fn rows(&mut self, sql: &'static str, params: impl Into<Params>, what: &str) -> Result<Vec<Row>, Fail> {
        self.conn.exec::<Row, _, _>(sql, params).map_err(|e| fail(&mut self.broken, e, what))
    }

    /// Executes a statement that may return several result sets (a `CALL`: the procedure's
    /// `SELECT`, then the `CALL`'s own status). Reads every set to the end and returns all their
    /// rows, or the first error anywhere in the reply — never left behind in a trailing set, where
    /// the driver's helpers would drop it silently and leave the connection out of step.
    pub(super) fn call_rows(&mut self, sql: &'static str, params: impl Into<Params>) -> Result<Vec<Row>, mysql::Error> {
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
    pub(super) fn exec(
        &mut self,
        sql: &'static str,
        params: impl Into<Params>,
        what: &str,
    ) -> Result<(u64, u64), Fail> {
        match self.conn.exec_drop(sql, params) {
            Ok(()) => Ok((self.conn.affected_rows(), self.conn.last_insert_id())),
            Err(e) => Err(fail(&mut self.broken, e, what)),
        }
    }
}

/// Column `idx` of `row` as `T` (use `Option<T>` for nullable columns).
pub(super) fn col<T: mysql::prelude::FromValue>(row: &Row, idx: usize, what: &str) -> Result<T, Fail> {
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
pub(super) fn connect_failure(
    e: &mysql::Error,
    user: &str,
    database: &str,
    tls: &MysqlTls,
    encrypted: bool,
) -> ConnectFailure {
    if let Some(hint) = tls::handshake_hint(e, tls) {
        return ConnectFailure {
            permanent: true,
            text: format!(
                "{}: {}: {hint}",
                if tls::server_has_no_tls(e) { "no TLS" } else { "the TLS handshake failed" },
                crate::error::display_chain(e)
            ),
        };
    }
    let mysql::Error::MySqlError(se) = e else {
        return ConnectFailure { permanent: false, text: crate::error::display_chain(e) };
    };
    let todo = match se.code {
        c if code::LOGIN_DENIED.contains(&c) => format!(
            "check the user name \"{user}\" and the password (the server answers the same for an unknown user, a \
             wrong password and an account that requires TLS){}",
            tls::login_hint(tls, encrypted)
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
    /// The driver options, TLS included.
    pub(super) opts: Opts,
    /// `PREFERRED`: the same without TLS, for a server that offers none.
    pub(super) plain_opts: Option<Opts>,
    pub(super) tls: MysqlTls,
    pub(super) health: Arc<ConnectHealth>,
    pub(super) lock_wait_secs: u64,
    pub(super) statement_secs: f64,
    pub(super) execution_ms: u64,
    pub(super) registry: Arc<Mutex<Vec<u64>>>,
}

/// What a server version string (`SELECT VERSION()`) tells: (MariaDB, has `SKIP LOCKED` and
/// `JSON_TABLE`). MySQL has both from 8.0 (8.0.1 and 8.0.4, both before the first GA release,
/// 8.0.11), MariaDB from 10.6.
pub(super) fn server_flavour(version: &str) -> (bool, bool) {
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
        let encrypted = self.opts.get_ssl_opts().is_some();
        if encrypted {
            tls::ensure_provider();
        }
        let attempt = match (mysql::Conn::new(self.opts.clone()), &self.plain_opts) {
            (Err(e), Some(plain)) if tls::server_has_no_tls(&e) => {
                debug!("simba {KIND}: the server offers no TLS: ssl-mode=PREFERRED connects without it");
                mysql::Conn::new(plain.clone()).map_err(|e| (e, false))
            }
            (r, _) => r.map_err(|e| (e, encrypted)),
        };
        let mut conn = match attempt {
            Ok(c) => c,
            Err((e, encrypted)) => {
                let user = self.opts.get_user().unwrap_or_default();
                let database = self.opts.get_db_name().unwrap_or_default();
                self.health.failed(KIND, connect_failure(&e, user, database, &self.tls, encrypted));
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
