//! The MySQL 8 / MariaDB 10.11 dialect: the blocking `mysql` client in an r2d2 pool.
//!
//! Every connection runs in UTC (`SET time_zone = '+00:00'`), has TCP connect/read/write timeouts,
//! `innodb_lock_wait_timeout` and a server-side statement limit (MariaDB `max_statement_time`;
//! MySQL 8 `max_execution_time`, which covers SELECTs only), a little below the query timeout. A
//! connection that saw an I/O error, a read timeout or any other client-side failure is never used
//! again: after such an error a `Conn` can be out of step with the server and return the previous
//! statement's reply.
//!
//! Every call is bounded by the query timeout from its start (the backend's `call_bound`, so the
//! session engine runs user calls on the caller's thread): the pool checkout waits at most what is
//! left, and the [watchdog](super::watchdog) shuts down the socket of a connection whose call is
//! still running at the deadline (see [`MyDriver::run`]).
//!
//! Rows are read as [`mysql::Row`] and converted column by column (`get_opt`), never with typed
//! helpers that panic on an unexpected type.
//!
//! The keep-alive is one `CALL` of the schema's stored procedure (`simba_keep_alive_v4`, created by
//! `init-simba-mysql.sql`), which returns the owned leases, the session's groups and the time it
//! found left (the observed clock drift): one round trip; the fallback does not tell that time. While the procedure is missing (a schema created by an older version and not re-applied,
//! which may hold only the older `simba_keep_alive_v3`, `_v2` or `_v1`) or not executable by this user, it
//! falls back to the statements it replaced (one transaction, five round trips, same reply) and
//! tries the procedure again every [`ROUTINE_RETRY`] or after [`init_schema`](Driver::init_schema).
//! Both paths lock the session row first and judge expiry with a `NOW(3)` read by a later
//! statement, after the lock is granted: a renewal that waited for a takeover never revives a
//! session that expired meanwhile (MySQL 8 fixes `NOW()` at statement start).
//!
//! The acquire ([`acquire`]) takes a free or new lease with one plain upsert, whose OK packet
//! carries the token and which reads no time left (the term lasts as long as the session); any
//! other case goes on with the schema's `simba_acquire_v2` (or its statements).
//!
//! Connections use TLS as [`MysqlConfig`] says ([`MysqlSslMode`], MySQL's `ssl-mode`), through
//! the driver's rustls; `PREFERRED` falls back to plain TCP when the server offers no TLS. A TLS
//! handshake that fails is a permanent connect failure (calls fail at once, with rustls' words
//! and what to change). `check` reports the server's view of the session's TLS (`Ssl_version`,
//! `Ssl_cipher`) and what the client verified.

mod acquire;
mod config;
mod conn;
mod tls;

pub use config::{MysqlConfig, MysqlSslMode, MysqlTls};

use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, warn};
use mysql::prelude::Queryable;
use mysql::{Opts, OptsBuilder, Row, TxOpts};
use parking_lot::Mutex;

use super::pool::{ConnectHealth, Fail, SqlPool};
use super::queries::mysql as q;
use super::{add_keep_alive_row, Driver, ListBounds, RawAcquire, RawHolder, RawKeepAlive, RawListing, SqlOptions};
use crate::backend::{CheckItem, CheckStatus};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId};

use conn::{code, col, fail, MyConn, MyManager, KIND};

/// How long the keep-alive or the acquire uses its separate-statement fallback after finding its
/// procedure missing or not executable, before trying the procedure again.
pub(crate) const ROUTINE_RETRY: Duration = Duration::from_secs(60);

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
            debug!("simba {KIND}: the procedure {} is back (without it, {})", self.name, self.fallback);
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
    /// Every call's bound (see [`MyDriver::run`]).
    query_timeout: Duration,
    tls: MysqlTls,
    /// The server is on this host (loopback): plain TCP never crosses a network.
    loopback: bool,
    registry: Arc<Mutex<Vec<u64>>>,
    keep_alive_routine: Routine,
    acquire_routine: Routine,
    /// The names just seen busy, whose acquire skips the free-lease upsert.
    contended: acquire::Contended,
}

impl MyDriver {
    /// A driver for `config`, with the settings the backend depends on forced on top of the
    /// driver options (see [`SqlBackend::mysql_config`](super::SqlBackend::mysql_config)).
    pub(crate) fn new(config: &MysqlConfig, options: &SqlOptions) -> Result<MyDriver> {
        let qt = options.query_timeout();
        // Every call of the backend ends by its deadline, the query timeout from its start: the
        // checkout waits at most that long, and the watchdog shuts down the socket of a statement
        // still running then (`run`). The socket timeouts bound each read and write of the
        // connects and session settings on the pool's threads, where no watchdog runs; set to the
        // query timeout, they override whatever a caller's own `Opts` said. No silent switch to a
        // Unix socket (it would skip TLS), and affected-row counts as the statements expect (no
        // CLIENT_FOUND_ROWS).
        let capabilities =
            config.opts().get_additional_capabilities() & !mysql::consts::CapabilityFlags::CLIENT_FOUND_ROWS;
        let opts: Opts = OptsBuilder::from_opts(config.opts().clone())
            .prefer_socket(false)
            .tcp_connect_timeout(Some(options.connect_timeout()))
            .read_timeout(Some(qt))
            .write_timeout(Some(qt))
            .stmt_cache_size(64)
            .additional_capabilities(capabilities)
            .into();
        let plain_opts = (config.ssl_mode() == MysqlSslMode::Preferred && !config.own_ssl_opts())
            .then(|| OptsBuilder::from_opts(opts.clone()).ssl_opts(None).into());
        let registry = Arc::new(Mutex::new(Vec::new()));
        let health = Arc::new(ConnectHealth::default());
        let server_limit = super::server_limit(qt);
        let manager = MyManager {
            opts,
            plain_opts,
            tls: config.tls().clone(),
            health: health.clone(),
            lock_wait_secs: server_limit.as_secs().max(1),
            statement_secs: server_limit.as_secs_f64().max(0.001),
            execution_ms: u64::try_from(server_limit.as_millis()).unwrap_or(u64::MAX).max(1),
            registry: registry.clone(),
        };
        Ok(MyDriver {
            pool: SqlPool::new(manager, health, options, KIND),
            query_timeout: qt,
            tls: config.tls().clone(),
            loopback: config.opts().addr_is_loopback(),
            registry,
            keep_alive_routine: Routine::new(
                q::KEEP_ALIVE_PROCEDURE,
                "keep-alives take five round trips instead of one",
            ),
            acquire_routine: Routine::new(
                q::ACQUIRE_PROCEDURE,
                "acquires of a lease an expired session holds take one more round trip",
            ),
            contended: acquire::Contended::default(),
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

    /// Runs `f` on a pooled connection within the query timeout from now: the checkout, every
    /// statement and every retry end by then (the watchdog closes a connection still busy at the
    /// deadline). This is the bound [`Driver::call_bound`] declares.
    fn run<T>(&self, what: &str, f: impl FnMut(&mut MyConn) -> Result<T, Fail>) -> Result<T> {
        self.pool.run_watched(what, Instant::now() + self.query_timeout, f)
    }

    fn one_i64(&self, sql: &'static str, what: &str) -> Result<i64> {
        self.run(what, |c| {
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
        self.run(&what, |c| {
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
        self.run(&what, |c| {
            if self.keep_alive_routine.usable() {
                match c.call_rows(q::KEEP_ALIVE_CALL, (id.as_str(), lease_ms)) {
                    Ok(rows) => {
                        self.keep_alive_routine.answered();
                        let mut alive = keep_alive_reply(&rows, &what)?;
                        if let (Some(alive), Some(first)) = (alive.as_mut(), rows.first()) {
                            alive.before_ms = Some(col(first, 4, &what)?);
                        }
                        return Ok(alive);
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
        self.run(&what, |c| {
            c.exec(q::DELETE_SESSION, (id.as_str(),), &what)?;
            c.exec(q::RELEASE_SESSION_LEASES, (id.as_str(),), &what)?;
            c.exec(q::DELETE_SESSION_MEMBERS, (id.as_str(),), &what)?;
            Ok(())
        })
    }

    fn acquire(&self, id: &SessionId, name: &Name) -> Result<RawAcquire> {
        self.acquire_lease(id, name)
    }

    fn release(&self, id: &SessionId, name: &Name, token: i64) -> Result<()> {
        let what = format!("release '{name}' (token {token}) by session {id}");
        self.run(&what, |c| c.exec(q::RELEASE, (name.as_str(), id.as_str(), token), &what).map(|_| ()))
    }

    fn holder(&self, name: &Name) -> Result<Option<RawHolder>> {
        let what = format!("holder of '{name}'");
        self.run(&what, |c| {
            let rows = c.rows(q::HOLDER, (name.as_str(),), &what)?;
            match rows.first() {
                None => Ok(None),
                Some(r) => Ok(Some((col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?))),
            }
        })
    }

    fn join(&self, id: &SessionId, group: &Name) -> Result<bool> {
        let what = format!("join '{group}' by session {id}");
        self.run(&what, |c| {
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
        self.run(&what, |c| c.exec(q::LEAVE, (group.as_str(), id.as_str()), &what).map(|_| ()))
    }

    fn members(&self, group: &Name) -> Result<Vec<(String, String)>> {
        let what = format!("members of '{group}'");
        self.run(&what, |c| {
            let rows = c.rows(q::MEMBERS, (group.as_str(),), &what)?;
            rows.iter().map(|r| Ok((col(r, 0, &what)?, col(r, 1, &what)?))).collect()
        })
    }

    fn list(&self, b: &ListBounds) -> Result<RawListing> {
        let what = b.what();
        // Three statements, three round trips on one connection (autocommit: each its own
        // snapshot and clock); a retry after a lost connection starts the listing again.
        let (from, to) = (b.from.as_str(), b.to.as_str());
        self.run(&what, |c| {
            let mut out = RawListing::default();
            for r in &c.rows(q::LIST_LEASES, (from, to, b.scan, b.scan, b.take), &what)? {
                let row =
                    (col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?, col(r, 4, &what)?);
                out.add_lease(b, (row.0, row.1, row.2, row.3, row.4, col(r, 5, &what)?));
            }
            for r in &c.rows(q::LIST_MEMBERS, (from, to, b.scan, b.take, b.take), &what)? {
                out.add_member(b, (col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?));
            }
            for r in &c.rows(q::LIST_SESSIONS, (b.scan, b.scan, b.take), &what)? {
                out.add_session(b, (col(r, 0, &what)?, col(r, 1, &what)?, col(r, 2, &what)?, col(r, 3, &what)?));
            }
            Ok(out)
        })
    }

    fn purge(&self, limit: usize) -> Result<usize> {
        let what = "purge expired sessions";
        let limit = u64::try_from(limit).unwrap_or(u64::MAX);
        self.run(what, |c| {
            let r = if c.skip_locked { purge_skip_locked(&mut c.conn, limit) } else { purge_range(&mut c.conn, limit) };
            r.map_err(|e| fail(&mut c.broken, e, what))
        })
    }

    fn now_ms(&self) -> Result<i64> {
        self.one_i64(q::NOW, "read the database clock")
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<i64>) -> Result<Option<i64>> {
        let what = format!("limit of semaphore '{name}' (table simba_semaphore)");
        self.run(&what, |c| {
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
        self.run(what, |c| {
            let rows = c.rows(q::SERVER_VERSION, (), what)?;
            match rows.first() {
                Some(r) => col(r, 0, what),
                None => Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row")))),
            }
        })
    }

    fn missing_routine(&self) -> Result<Option<&'static str>> {
        let what = "check the stored procedures";
        let present: Vec<String> = self.run(what, |c| {
            let rows = c.rows(q::ROUTINE_CHECK, (), what)?;
            rows.iter().map(|r| col(r, 0, what)).collect()
        })?;
        Ok([q::KEEP_ALIVE_PROCEDURE, q::ACQUIRE_PROCEDURE].into_iter().find(|p| !present.iter().any(|n| n == p)))
    }

    fn extra_checks(&self) -> Vec<CheckItem> {
        let what = "read the connection's TLS status";
        let status = self.run(what, |c| {
            let rows: Vec<Row> = c.conn.query(q::TLS_STATUS).map_err(|e| fail(&mut c.broken, e, what))?;
            let (mut version, mut cipher) = (String::new(), String::new());
            for r in &rows {
                let (name, value): (String, String) = (col(r, 0, what)?, col(r, 1, what)?);
                match name.as_str() {
                    "Ssl_version" => version = value,
                    "Ssl_cipher" => cipher = value,
                    _ => {}
                }
            }
            Ok((version, cipher))
        });
        let item = |status, detail| CheckItem { name: "tls".to_string(), status, detail };
        vec![match status {
            Ok((version, cipher)) => {
                let (encrypted, verified, detail) = tls::describe(&self.tls, &version, &cipher);
                match (encrypted, verified) {
                    (true, true) => item(CheckStatus::Ok, detail),
                    (true, false) => item(CheckStatus::Warn, detail),
                    (false, _) if self.loopback => item(CheckStatus::Ok, format!("{detail}; a loopback address")),
                    (false, _) => item(
                        CheckStatus::Warn,
                        format!(
                            "{detail}; passwords and data cross the network in clear: use ssl-mode=VERIFY_IDENTITY"
                        ),
                    ),
                }
            }
            Err(e) => item(CheckStatus::Warn, crate::error::display_chain(&e)),
        }]
    }

    fn call_bound(&self) -> Option<Duration> {
        // Without its watchdog a call is bounded only per socket read and write: no promise.
        super::watchdog::Watchdog::get().running().then_some(self.query_timeout)
    }

    fn release_until(&self, id: &SessionId, name: &Name, token: i64, deadline: Instant) -> Result<()> {
        let what = format!("release '{name}' (token {token}) by session {id}");
        self.pool.run_watched(&what, deadline, |c| {
            c.exec(q::RELEASE, (name.as_str(), id.as_str(), token), &what).map(|_| ())
        })
    }

    fn connection_ids(&self) -> Vec<u64> {
        let mut ids = self.registry.lock().clone();
        ids.sort_unstable();
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::conn::server_flavour;
    use super::*;

    #[test]
    fn init_script_splits_into_four_tables_and_the_procedures() {
        let s = script_statements(q::INIT_SIMBA_MYSQL);
        assert_eq!(s.len(), 6, "{s:?}");
        // The semaphore table came later: it is created after the procedures.
        assert!(s[5].starts_with("create table if not exists simba_semaphore") && s[5].ends_with(')'), "{}", s[5]);
        assert!(creates_routine(&s[4]) && s[4].contains(q::ACQUIRE_PROCEDURE) && s[4].ends_with("end"), "{}", s[4]);
        assert!(s[..3].iter().all(|s| s.starts_with("create table if not exists simba_")), "{s:?}");
        assert!(s[..3].iter().all(|s| s.ends_with(')')), "{s:?}");
        assert!(creates_routine(&s[3]) && !creates_routine(&s[0]), "{}", s[3]);
        assert!(s[3].contains(q::KEEP_ALIVE_PROCEDURE) && s[3].ends_with("end"), "{}", s[3]);
        assert!(!s[3].contains("simba_keep_alive_v1("), "the old procedure is not recreated: {}", s[3]);
        assert!(!s[3].contains("simba_keep_alive_v2("), "the old procedure is not recreated: {}", s[3]);
        assert!(!s[3].contains("simba_keep_alive_v3("), "the old procedure is not recreated: {}", s[3]);
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
