//! The pool's connections: `tokio-postgres` driven on a current-thread tokio runtime of each
//! connection's own, every request bounded by the deadline of the call it belongs to.
//!
//! The blocking `postgres` client does exactly this internally (a current-thread runtime per
//! `Client`), without a timeout: a server that stops answering blocks the caller until it answers
//! again. Here each request runs in `block_on(timeout_at(deadline, …))`: the runtime drives the
//! connection task (spawned on it at connect) and the request together, and gives up at the
//! deadline. A connection whose request timed out may be in the middle of the protocol (a reply
//! half read, a request half sent): it is marked broken and dropped, never reused; dropping its
//! runtime drops the connection task and closes the socket. Between calls nothing polls the
//! connection (the server's asynchronous messages wait in the socket until the next call, as with
//! the blocking client).

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::debug;
use parking_lot::Mutex;
use postgres::types::ToSql;
use postgres::{Row, Statement};

use super::super::pool::{ConnectFailure, Fail};
use super::connect::{AsyncConnectError, AsyncConnected, ConnectError};
use super::{connect_failure, fail, q, tls, PgManager, Transport, KIND};
use crate::error::{Error, ErrorKind};

/// Runs `fut` on `rt` until `deadline`; `None` when the deadline came first.
fn block<T>(
    rt: &tokio::runtime::Runtime,
    deadline: Instant,
    fut: impl Future<Output = Result<T, postgres::Error>>,
) -> Option<Result<T, postgres::Error>> {
    // The timer is made inside the runtime (it needs its time driver).
    rt.block_on(async { tokio::time::timeout_at(tokio::time::Instant::from_std(deadline), fut).await }).ok()
}

/// One pooled connection.
pub(crate) struct PgPooled {
    rt: tokio::runtime::Runtime,
    client: tokio_postgres::Client,
    statements: HashMap<usize, Statement>,
    pub(super) broken: bool,
    pub(super) pid: u64,
    pub(super) transport: Transport,
    /// When it was opened (for the connection lifetime).
    born: Instant,
    /// The deadline of the call using the connection (set by `PgDriver::run` before each attempt).
    pub(super) deadline: Instant,
    /// The query timeout, for messages.
    timeout: Duration,
    registry: Arc<Mutex<Vec<u64>>>,
}

impl Drop for PgPooled {
    fn drop(&mut self) {
        let mut ids = self.registry.lock();
        if let Some(i) = ids.iter().position(|p| *p == self.pid) {
            ids.swap_remove(i);
        }
    }
}

impl PgPooled {
    /// The call ran out of time: the connection may be mid-protocol, never use it again.
    fn late(&mut self, what: &str) -> Fail {
        self.broken = true;
        Fail::Stop(Error::new(
            ErrorKind::Timeout,
            format!(
                "{KIND}: {what}: no reply within the query timeout ({}); the connection was closed",
                humantime::format_duration(self.timeout)
            ),
        ))
    }

    pub(super) fn statement(&mut self, sql: &'static str, what: &str) -> Result<Statement, Fail> {
        let key = sql.as_ptr() as usize;
        if let Some(s) = self.statements.get(&key) {
            return Ok(s.clone());
        }
        let r = block(&self.rt, self.deadline, self.client.prepare(sql));
        let s = match r {
            Some(Ok(s)) => s,
            Some(Err(e)) => return Err(fail(&mut self.broken, e, what)),
            None => return Err(self.late(what)),
        };
        self.statements.insert(key, s.clone());
        Ok(s)
    }

    pub(super) fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        what: &str,
    ) -> Result<Vec<Row>, Fail> {
        let st = self.statement(sql, what)?;
        let r = block(&self.rt, self.deadline, self.client.query(&st, params));
        self.settle(r, what)
    }

    pub(super) fn execute(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
        what: &str,
    ) -> Result<u64, Fail> {
        let st = self.statement(sql, what)?;
        let r = block(&self.rt, self.deadline, self.client.execute(&st, params));
        self.settle(r, what)
    }

    fn settle<T>(&mut self, r: Option<Result<T, postgres::Error>>, what: &str) -> Result<T, Fail> {
        match r {
            Some(Ok(v)) => Ok(v),
            Some(Err(e)) => Err(fail(&mut self.broken, e, what)),
            None => Err(self.late(what)),
        }
    }

    /// Runs the statements of `script` in one transaction (simple query protocol).
    pub(super) fn batch_in_transaction(&mut self, scripts: &[&'static str], what: &str) -> Result<(), Fail> {
        let PgPooled { rt, client, deadline, .. } = self;
        let r = block(rt, *deadline, async {
            let tx = client.transaction().await?;
            for s in scripts {
                tx.batch_execute(s).await?;
            }
            tx.commit().await
        });
        self.settle(r, what)
    }

    /// The purge's transaction: `select` the expired sessions (up to `limit`), then delete their
    /// memberships, notify their leases' waiters and delete them. `Ok(Err(..))`: a session id that
    /// is not text.
    pub(super) fn purge(
        &mut self,
        [select, members, notify, sessions]: [Statement; 4],
        limit: i64,
        what: &str,
    ) -> Result<Result<usize, Error>, Fail> {
        let PgPooled { rt, client, deadline, .. } = self;
        let r = block(rt, *deadline, async {
            let tx = client.transaction().await?;
            let rows = tx.query(&select, &[&limit]).await?;
            let mut ids = Vec::with_capacity(rows.len());
            for r in &rows {
                match r.try_get::<_, String>(0) {
                    Ok(s) => ids.push(s),
                    Err(e) => {
                        return Ok(Err(Error::backend(format!("{KIND}: {what}: unexpected session id")).with_source(e)))
                    }
                }
            }
            if ids.is_empty() {
                tx.commit().await?;
                return Ok(Ok(0));
            }
            tx.execute(&members, &[&ids]).await?;
            tx.execute(&notify, &[&ids]).await?;
            let n = tx.execute(&sessions, &[&ids]).await?;
            tx.commit().await?;
            Ok(Ok(usize::try_from(n).unwrap_or(usize::MAX)))
        });
        self.settle(r, what)
    }
}

/// Opens the pool's connections with the backend's connector (the notification connection's
/// manager, [`PgManager`], opens blocking ones with the same connector).
pub(crate) struct PgPoolManager {
    pub(super) base: PgManager,
    pub(super) query_timeout: Duration,
    pub(super) connect_timeout: Duration,
}

impl r2d2::ManageConnection for PgPoolManager {
    type Connection = PgPooled;
    type Error = AsyncConnectError;

    fn connect(&self) -> Result<PgPooled, AsyncConnectError> {
        let base = &self.base;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(AsyncConnectError::Runtime)?;
        let deadline = Instant::now() + self.connect_timeout;
        let AsyncConnected { client, transport } = match base.connector.connect_async(&rt, self.connect_timeout) {
            Ok(c) => c,
            Err(e) => {
                let failure = match &e {
                    AsyncConnectError::Failed(e) => connect_failure(e, &base.connector),
                    other => ConnectFailure { permanent: false, text: other.to_string() },
                };
                base.health.failed(KIND, failure);
                return Err(e);
            }
        };
        base.health.succeeded(KIND);
        let plain = |error| AsyncConnectError::Failed(ConnectError { error, handshake: tls::Handshake::NotStarted });
        let row = match block(&rt, deadline, client.query_one(q::BACKEND_PID, &[])) {
            Some(r) => r.map_err(plain)?,
            None => return Err(AsyncConnectError::TimedOut),
        };
        let pid: i64 = row.try_get(0).map_err(plain)?;
        let pid = u64::try_from(pid).unwrap_or(0);
        base.registry.lock().push(pid);
        debug!("simba {KIND}: new connection (server pid {pid}, {transport:?})");
        Ok(PgPooled {
            rt,
            client,
            statements: HashMap::new(),
            broken: false,
            pid,
            transport,
            born: Instant::now(),
            deadline: Instant::now(),
            timeout: self.query_timeout,
            registry: base.registry.clone(),
        })
    }

    fn is_valid(&self, conn: &mut PgPooled) -> Result<(), AsyncConnectError> {
        let plain = |error| AsyncConnectError::Failed(ConnectError { error, handshake: tls::Handshake::NotStarted });
        match block(&conn.rt, Instant::now() + self.query_timeout, conn.client.simple_query("")) {
            Some(r) => r.map(|_| ()).map_err(plain),
            None => {
                conn.broken = true;
                Err(AsyncConnectError::TimedOut)
            }
        }
    }

    fn has_broken(&self, conn: &mut PgPooled) -> bool {
        conn.broken || conn.client.is_closed() || conn.born.elapsed() >= self.base.lifetime
    }
}
