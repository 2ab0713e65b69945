//! The backend's own connection pool (r2d2) and the bounded call loop shared by both dialects.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use log::{debug, info, warn};
use parking_lot::Mutex;

use super::SqlOptions;
#[cfg(feature = "mysql")]
use crate::error::ErrorKind;
use crate::error::{Error, Result};

/// How a failed attempt ends.
pub(crate) enum Fail {
    /// Safe to run the whole call again at once (deadlock, serialisation failure, a connection
    /// that turned out to be broken before anything was applied or for an idempotent call).
    Retry(Error),
    /// Report to the caller.
    Stop(Error),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        Fail::Stop(e)
    }
}

/// Why a new connection could not be opened, in the server's words, as the dialect classified it.
pub(crate) struct ConnectFailure {
    /// The server refused for a reason retrying cannot fix (wrong password, unknown database or
    /// user, TLS required): calls fail at once instead of waiting out the query timeout.
    pub(crate) permanent: bool,
    /// What happened and, for a permanent failure, what to do (no password in it).
    pub(crate) text: String,
}

/// What the pool's connection attempts have found, shared by the connection manager (which
/// records every failed and successful connect, on r2d2's worker threads) and the call loop.
#[derive(Default)]
pub(crate) struct ConnectHealth {
    state: Mutex<HealthState>,
}

#[derive(Default)]
struct HealthState {
    /// The latest connect failed permanently: its text (cleared by a success or a transient failure).
    permanent: Option<String>,
    /// The text of the latest failure, for the error of a call that ran out of time.
    last: Option<String>,
    /// The failure last logged at `warn` level: one warning per cause, not per retry.
    warned: Option<String>,
}

impl ConnectHealth {
    /// A connect failed: remember it, and warn unless this cause was the last one warned about.
    pub(crate) fn failed(&self, kind: &str, failure: ConnectFailure) {
        let mut st = self.state.lock();
        let first = st.warned.as_deref() != Some(failure.text.as_str());
        st.permanent = failure.permanent.then(|| failure.text.clone());
        st.last = Some(failure.text.clone());
        if first {
            st.warned = Some(failure.text.clone());
        }
        drop(st);
        if first {
            warn!("simba {kind}: cannot open a database connection: {}", failure.text);
        } else {
            debug!("simba {kind}: cannot open a database connection (still): {}", failure.text);
        }
    }

    /// A connect succeeded: forget the failures (and say so if one was warned about).
    pub(crate) fn succeeded(&self, kind: &str) {
        let mut st = self.state.lock();
        let was = st.warned.take();
        st.permanent = None;
        st.last = None;
        drop(st);
        if was.is_some() {
            info!("simba {kind}: database connections open again");
        }
    }

    fn permanent(&self) -> Option<String> {
        self.state.lock().permanent.clone()
    }

    fn last(&self) -> Option<String> {
        self.state.lock().last.clone()
    }
}

/// r2d2's own error callback: the manager has already logged the failure (once per cause).
#[derive(Debug)]
struct LogErrors(&'static str);

impl<E: fmt::Display> r2d2::HandleError<E> for LogErrors {
    fn handle_error(&self, error: E) {
        debug!("simba {}: connection attempt failed: {error}", self.0);
    }
}

/// The threads that open connections and reap idle ones for one pool (r2d2's default count, 3).
/// They end as soon as the pool is dropped: r2d2's default pool keeps them until its next reaper
/// run, up to 30 s later, so a process that makes many backends ran out of threads.
fn maintenance_threads() -> std::sync::Arc<scheduled_thread_pool::ScheduledThreadPool> {
    use scheduled_thread_pool::{OnPoolDropBehavior, ScheduledThreadPool};
    std::sync::Arc::new(
        ScheduledThreadPool::builder()
            .num_threads(3)
            .thread_name_pattern("simba-sql-pool-{}")
            .on_drop_behavior(OnPoolDropBehavior::DiscardPendingScheduled)
            .build(),
    )
}

/// A small pool whose every checkout is bounded by the query timeout.
pub(crate) struct SqlPool<M: r2d2::ManageConnection> {
    pool: r2d2::Pool<M>,
    timeout: Duration,
    kind: &'static str,
    health: Arc<ConnectHealth>,
}

/// Attempts per call (first try + retries), all within one query timeout.
const MAX_ATTEMPTS: u32 = 3;

/// A call waiting for a connection looks at what the connection attempts found this often, so
/// that a permanent failure ends it at once.
const CHECKOUT_SLICE: Duration = Duration::from_millis(20);

impl<M: r2d2::ManageConnection> SqlPool<M>
where
    M::Error: fmt::Display,
{
    /// A pool of at most `options.pool_size()` connections, opened on demand, never tested on
    /// checkout (a broken connection fails its call, is dropped and the call is retried).
    /// `health` is what `manager` records its connection attempts in.
    pub(crate) fn new(manager: M, health: Arc<ConnectHealth>, options: &SqlOptions, kind: &'static str) -> SqlPool<M> {
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size())
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(options.query_timeout())
            .idle_timeout(Some(Duration::from_secs(300)))
            .max_lifetime(Some(options.connection_lifetime()).filter(|d| *d != Duration::MAX))
            .error_handler(Box::new(LogErrors(kind)))
            .thread_pool(maintenance_threads())
            .build_unchecked(manager);
        SqlPool { pool, timeout: options.query_timeout(), kind, health }
    }

    /// A pooled connection within `deadline`. Fails at once, in the server's words, when the
    /// latest connection attempt failed permanently (nothing to wait for); otherwise waits for a
    /// connection until the deadline (the pool keeps retrying network failures meanwhile).
    fn checkout(&self, what: &str, deadline: Instant) -> Result<r2d2::PooledConnection<M>> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.pool.get_timeout(left.min(CHECKOUT_SLICE).max(Duration::from_millis(1))) {
                Ok(conn) => return Ok(conn),
                Err(e) => {
                    if let Some(text) = self.health.permanent() {
                        return Err(Error::backend(format!("{}: {what}: cannot connect: {text}", self.kind)));
                    }
                    if Instant::now() >= deadline {
                        let msg = format!(
                            "{}: {what}: no database connection within the query timeout ({:?})",
                            self.kind, self.timeout
                        );
                        return Err(match self.health.last() {
                            Some(last) => Error::unavailable(format!("{msg}: {last}")),
                            None => Error::unavailable(msg).with_source(e),
                        });
                    }
                }
            }
        }
    }

    /// Runs `f` on a pooled connection, retrying [`Fail::Retry`] failures while the query timeout
    /// allows. The checkout waits at most what is left of the query timeout. (Only MySQL runs
    /// without a deadline of its own; PostgreSQL's calls use `run_until`.)
    #[cfg_attr(not(feature = "mysql"), allow(dead_code))]
    pub(crate) fn run<T>(&self, what: &str, f: impl FnMut(&mut M::Connection) -> Result<T, Fail>) -> Result<T> {
        self.run_until(what, Instant::now() + self.timeout, f)
    }

    /// [`run`](Self::run) within `deadline`: no checkout waits past it and no retry starts after it.
    pub(crate) fn run_until<T>(
        &self,
        what: &str,
        deadline: Instant,
        mut f: impl FnMut(&mut M::Connection) -> Result<T, Fail>,
    ) -> Result<T> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut conn = self.checkout(what, deadline)?;
            match f(&mut conn) {
                Ok(v) => return Ok(v),
                Err(Fail::Stop(e)) => return Err(e),
                Err(Fail::Retry(e)) => {
                    drop(conn);
                    let backoff = Duration::from_millis(rand::random_range(1..=10));
                    if attempt >= MAX_ATTEMPTS || Instant::now() + backoff >= deadline {
                        return Err(e);
                    }
                    debug!("simba {}: {what}: attempt {attempt} failed, retrying: {e}", self.kind);
                    std::thread::sleep(backoff);
                }
            }
        }
    }
}

/// A pooled connection whose socket the [`Watchdog`](super::watchdog::Watchdog) may shut down.
#[cfg(feature = "mysql")]
pub(crate) trait Watched {
    /// The connection's socket.
    fn socket(&self) -> std::os::fd::RawFd;
    /// The connection must not be used again (the watchdog shut its socket down).
    fn set_broken(&mut self);
}

#[cfg(feature = "mysql")]
impl<M: r2d2::ManageConnection> SqlPool<M>
where
    M::Error: fmt::Display,
    M::Connection: Watched,
{
    /// [`run_until`](Self::run_until), with every attempt watched: the watchdog shuts the
    /// connection's socket down at `deadline`, so the call returns by then (plus scheduling)
    /// even when the server stops answering in the middle of a statement. A call the watchdog
    /// ended fails with `Timeout` (its outcome is unknown, like any reply that never came).
    pub(crate) fn run_watched<T>(
        &self,
        what: &str,
        deadline: Instant,
        mut f: impl FnMut(&mut M::Connection) -> Result<T, Fail>,
    ) -> Result<T> {
        let timeout = self.timeout;
        let kind = self.kind;
        self.run_until(what, deadline, |conn| {
            let armed = super::watchdog::Watchdog::get().arm(conn.socket(), deadline);
            let r = f(conn);
            if !armed.disarm() {
                return r;
            }
            conn.set_broken();
            match r {
                // The whole reply was read before the socket was shut down.
                Ok(v) => Ok(v),
                Err(Fail::Retry(e) | Fail::Stop(e)) => Err(Fail::Stop(
                    Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "{kind}: {what}: no reply within the query timeout ({}); the connection was closed",
                            humantime::format_duration(timeout)
                        ),
                    )
                    .with_source(e),
                )),
            }
        })
    }
}
