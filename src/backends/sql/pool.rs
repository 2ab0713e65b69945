//! The backend's own connection pool (r2d2) and the bounded call loop shared by both dialects.

use std::fmt;
use std::time::{Duration, Instant};

use log::{debug, warn};

use super::SqlOptions;
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

/// Logs connection failures instead of r2d2's default `error!` with no context.
#[derive(Debug)]
struct LogErrors(&'static str);

impl<E: fmt::Display> r2d2::HandleError<E> for LogErrors {
    fn handle_error(&self, error: E) {
        warn!("simba {}: cannot open a database connection: {error}", self.0);
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
}

/// Attempts per call (first try + retries), all within one query timeout.
const MAX_ATTEMPTS: u32 = 3;

impl<M: r2d2::ManageConnection> SqlPool<M>
where
    M::Error: fmt::Display,
{
    /// A pool of at most `options.pool_size()` connections, opened on demand, never tested on
    /// checkout (a broken connection fails its call, is dropped and the call is retried).
    pub(crate) fn new(manager: M, options: &SqlOptions, kind: &'static str) -> SqlPool<M> {
        let pool = r2d2::Pool::builder()
            .max_size(options.pool_size())
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(options.query_timeout())
            .idle_timeout(Some(Duration::from_secs(300)))
            .max_lifetime(Some(Duration::from_secs(1800)))
            .error_handler(Box::new(LogErrors(kind)))
            .thread_pool(maintenance_threads())
            .build_unchecked(manager);
        SqlPool { pool, timeout: options.query_timeout(), kind }
    }

    /// Runs `f` on a pooled connection, retrying [`Fail::Retry`] failures while the query timeout
    /// allows. The checkout waits at most what is left of the query timeout.
    pub(crate) fn run<T>(&self, what: &str, mut f: impl FnMut(&mut M::Connection) -> Result<T, Fail>) -> Result<T> {
        let deadline = Instant::now() + self.timeout;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let wait = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let mut conn = self.pool.get_timeout(wait).map_err(|e| {
                Error::unavailable(format!(
                    "{}: {what}: no database connection within the query timeout ({:?})",
                    self.kind, self.timeout
                ))
                .with_source(e)
            })?;
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
