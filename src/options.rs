//! Session timing options.

use std::time::Duration;

use std::sync::Arc;

use crate::error::{Error, Result};
use crate::listener::{Listener, SessionListener};
use crate::types::validate_metadata;

/// Default time the backend keeps a session without renewal.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Default time between keep-alives.
pub const DEFAULT_RENEW_INTERVAL: Duration = Duration::from_secs(5);
/// Default allowed clock-rate difference between client and backend.
pub const DEFAULT_DRIFT: f64 = 0.01;
/// Default per-call timeout of backends constructed without configuration (= the default renew interval).
pub const DEFAULT_QUERY_TIMEOUT: Duration = DEFAULT_RENEW_INTERVAL;

/// Default time between a waiter's attempts on a backend that does not push releases (see
/// [`SessionOptionsBuilder::poll_interval`]).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(500);

/// The shortest wait between a waiter's attempts, whatever the timings (a tiny renew interval
/// must not make waiters spin).
const MIN_RETRY_INTERVAL: Duration = Duration::from_millis(1);

/// Default most worker threads running backend calls at once, process-wide (see
/// [`SessionOptionsBuilder::worker_threads`]).
pub const DEFAULT_WORKER_THREADS: usize = 64;
/// Largest accepted [`SessionOptionsBuilder::worker_threads`].
pub const MAX_WORKER_THREADS: usize = 4096;

/// How a session is renewed. Build with [`SessionOptions::builder`]; every value is validated by
/// [`SessionOptionsBuilder::build`].
///
/// Two options are equal when every value is, and they hold the same [listener](SessionOptionsBuilder::listener)
/// (the same `Arc`) or none; `Debug` shows whether there is one.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionOptions {
    lease_duration: Duration,
    renew_interval: Duration,
    drift: f64,
    query_timeout: Duration,
    metadata: String,
    worker_threads: usize,
    poll_interval: Duration,
    listener: Option<Listener>,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_interval: DEFAULT_RENEW_INTERVAL,
            drift: DEFAULT_DRIFT,
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            metadata: String::new(),
            worker_threads: DEFAULT_WORKER_THREADS,
            poll_interval: DEFAULT_POLL_INTERVAL,
            listener: None,
        }
    }
}

impl SessionOptions {
    /// A builder starting from the defaults (15 s lease, 5 s renewal, drift 0.01, query timeout =
    /// renew interval, empty metadata).
    pub fn builder() -> SessionOptionsBuilder {
        SessionOptionsBuilder::default()
    }

    /// How long the backend keeps the session without renewal.
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }
    /// Time between keep-alives.
    pub fn renew_interval(&self) -> Duration {
        self.renew_interval
    }
    /// Allowed clock-rate difference between client and backend (0.01 = 1 %).
    pub fn drift(&self) -> f64 {
        self.drift
    }
    /// Every backend call is abandoned after this.
    pub fn query_timeout(&self) -> Duration {
        self.query_timeout
    }
    /// The session metadata (visible to others through `holder`/`members`).
    pub fn metadata(&self) -> &str {
        &self.metadata
    }
    /// The most worker threads the process's pool may run for backend calls (see
    /// [`SessionOptionsBuilder::worker_threads`]).
    pub fn worker_threads(&self) -> usize {
        self.worker_threads
    }
    /// How often a waiter (`lock`, a semaphore's `acquire`, a campaign) tries again on a backend
    /// that does not push releases (see [`SessionOptionsBuilder::poll_interval`]).
    pub fn poll_interval(&self) -> Duration {
        self.poll_interval
    }
    /// Base time between campaign/lock attempts on backends that do not push releases:
    /// [`poll_interval`](SessionOptions::poll_interval), at most `renew_interval / 2` (random
    /// jitter of up to half of it is added to each wait), and never under 1 ms. Backends that
    /// push releases wait for the push, and retry every `renew_interval / 2` in case one is lost.
    pub fn retry_interval(&self) -> Duration {
        self.poll_interval.min(self.renew_interval / 2).max(MIN_RETRY_INTERVAL)
    }
    /// Base time between attempts on backends that push releases (in case a push is lost):
    /// `renew_interval / 2`, never under 1 ms.
    pub(crate) fn push_retry_interval(&self) -> Duration {
        (self.renew_interval / 2).max(MIN_RETRY_INTERVAL)
    }
    /// The listener told what happens to sessions opened with these options, if any.
    pub fn listener(&self) -> Option<Arc<dyn SessionListener>> {
        self.listener.as_ref().map(|l| l.0.clone())
    }
    /// Returns a copy with other metadata.
    ///
    /// # Errors
    /// `InvalidConfig` when `metadata` is over 1024 bytes.
    pub fn with_metadata(&self, metadata: impl Into<String>) -> Result<SessionOptions> {
        let metadata = metadata.into();
        validate_metadata(&metadata)?;
        Ok(SessionOptions { metadata, ..self.clone() })
    }
}

/// Builder of [`SessionOptions`].
#[derive(Debug, Clone, Default)]
pub struct SessionOptionsBuilder {
    lease_duration: Option<Duration>,
    renew_interval: Option<Duration>,
    drift: Option<f64>,
    query_timeout: Option<Duration>,
    metadata: Option<String>,
    worker_threads: Option<usize>,
    poll_interval: Option<Duration>,
    listener: Option<Listener>,
}

impl SessionOptionsBuilder {
    /// How long the backend keeps the session without renewal (default 15 s; at least 100 ms).
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.lease_duration = Some(d);
        self
    }
    /// Time between keep-alives (default 5 s, or lease_duration / 3 when only the lease duration is
    /// set); must be at most lease_duration / 2.
    #[must_use]
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.renew_interval = Some(d);
        self
    }
    /// Allowed clock-rate difference, in [0, 0.5) (default 0.01).
    #[must_use]
    pub fn drift(mut self, drift: f64) -> Self {
        self.drift = Some(drift);
        self
    }
    /// Per-call timeout (default = renew interval); must be > 0 and at most the lease duration.
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = Some(d);
        self
    }
    /// Session metadata, UTF-8 of at most 1024 bytes (default empty).
    #[must_use]
    pub fn metadata(mut self, m: impl Into<String>) -> Self {
        self.metadata = Some(m.into());
        self
    }

    /// The most worker threads running backend calls at once (default 64; 1 to 4096).
    ///
    /// Backend calls that may not run on the caller's thread (keep-alives, campaign attempts,
    /// and every call of a backend that does not bound its own calls, see
    /// [`LeaseBackend::call_bound`](crate::backend::LeaseBackend::call_bound)) run on a pool of worker
    /// threads shared by the whole process; a call that hangs parks its worker until it returns.
    /// The pool runs at most the largest `worker_threads` of the sessions opened so far. When
    /// every worker is busy, a call somebody waits for (`try_lock`, `join`, `members`, opening a
    /// session, ...) fails at once with `Unavailable`, and calls nobody waits for (keep-alives,
    /// background releases) queue; loss detection is not affected (leases and the session still
    /// expire at the local deadline).
    #[must_use]
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.worker_threads = Some(n);
        self
    }

    /// How often a waiter tries again on a backend that does not push releases (default 500 ms;
    /// must be > 0; at most `renew_interval / 2` is used, so `Duration::MAX` means every
    /// `renew_interval / 2`).
    ///
    /// A waiter is a `lock`/`lock_timeout`/`lock_deadline`, a semaphore's `acquire`, or a
    /// campaign that does not lead. On a backend that pushes releases (memory, Redis, ZooKeeper,
    /// PostgreSQL with `LISTEN`) waiters wake at the push and this does not apply. Elsewhere
    /// (MySQL) a freed lease is taken within about one poll interval, and each waiter costs the
    /// server one acquire per interval (two per second at the default). It is also how often a
    /// [`watch_members`](crate::Session::watch_members) stream re-reads the member list, on every
    /// backend (a pushed change re-reads at once; the poll sees a crashed member, whose expiry
    /// nothing pushes on most backends).
    #[must_use]
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.poll_interval = Some(d);
        self
    }

    /// A listener told what happens to every session opened with these options — renewals with
    /// their latency and margin, failures, acquisitions, releases, losses, every event — on a
    /// thread of the session's own, through a bounded queue, off every internal lock (see
    /// [`crate::listener`]). A slow or blocked listener never delays the session.
    #[must_use]
    pub fn listener(mut self, listener: Arc<dyn SessionListener>) -> Self {
        self.listener = Some(Listener(listener));
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule it breaks.
    pub fn build(self) -> Result<SessionOptions> {
        let lease = self.lease_duration.unwrap_or(DEFAULT_LEASE_DURATION);
        if lease < Duration::from_millis(100) {
            return Err(Error::config(format!("lease_duration {lease:?} is too short: at least 100ms")));
        }
        if lease > Duration::from_secs(24 * 3600) {
            return Err(Error::config(format!("lease_duration {lease:?} is too long: at most 24h")));
        }
        let renew = match (self.renew_interval, self.lease_duration) {
            (Some(r), _) => r,
            (None, Some(l)) => (l / 3).min(DEFAULT_RENEW_INTERVAL),
            (None, None) => DEFAULT_RENEW_INTERVAL,
        };
        if renew.is_zero() || renew > lease / 2 {
            return Err(Error::config(format!(
                "renew_interval {renew:?} must be > 0 and at most lease_duration / 2 ({:?})",
                lease / 2
            )));
        }
        let drift = self.drift.unwrap_or(DEFAULT_DRIFT);
        if !(0.0..0.5).contains(&drift) || drift.is_nan() {
            return Err(Error::config(format!("drift {drift} must be in [0, 0.5)")));
        }
        let query_timeout = self.query_timeout.unwrap_or(renew);
        if query_timeout.is_zero() || query_timeout > lease {
            return Err(Error::config(format!(
                "query_timeout {query_timeout:?} must be > 0 and at most lease_duration ({lease:?})"
            )));
        }
        let metadata = self.metadata.unwrap_or_default();
        validate_metadata(&metadata)?;
        let worker_threads = self.worker_threads.unwrap_or(DEFAULT_WORKER_THREADS);
        if !(1..=MAX_WORKER_THREADS).contains(&worker_threads) {
            return Err(Error::config(format!("worker_threads {worker_threads} must be in 1..={MAX_WORKER_THREADS}")));
        }
        let poll_interval = self.poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL);
        if poll_interval.is_zero() {
            return Err(Error::config(
                "poll_interval 0ns must be > 0 (Duration::MAX: poll every renew_interval / 2)".to_string(),
            ));
        }
        Ok(SessionOptions {
            lease_duration: lease,
            renew_interval: renew,
            drift,
            query_timeout,
            metadata,
            worker_threads,
            poll_interval,
            listener: self.listener,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_rules() {
        let o = SessionOptions::builder().build().unwrap();
        assert_eq!(o.lease_duration(), Duration::from_secs(15));
        assert_eq!(o.renew_interval(), Duration::from_secs(5));
        assert_eq!(o.query_timeout(), Duration::from_secs(5));
        let o = SessionOptions::builder().lease_duration(Duration::from_secs(1)).build().unwrap();
        assert_eq!(o.renew_interval(), Duration::from_secs(1) / 3);
        let e = SessionOptions::builder()
            .lease_duration(Duration::from_secs(1))
            .renew_interval(Duration::from_millis(600))
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("lease_duration / 2"), "{e}");
        assert!(SessionOptions::builder().drift(0.7).build().is_err());
        assert!(SessionOptions::builder().drift(f64::NAN).build().is_err());
        assert!(SessionOptions::builder().metadata("x".repeat(2000)).build().is_err());
        assert!(SessionOptions::builder().lease_duration(Duration::from_millis(1)).build().is_err());
        assert_eq!(o.poll_interval(), DEFAULT_POLL_INTERVAL);
        assert_eq!(o.retry_interval(), Duration::from_secs(1) / 6, "at most renew_interval / 2");
        let o = SessionOptions::builder().poll_interval(Duration::MAX).build().unwrap();
        assert_eq!(o.retry_interval(), Duration::from_millis(2500));
        let e = SessionOptions::builder().poll_interval(Duration::ZERO).build().unwrap_err();
        assert!(e.to_string().contains("poll_interval 0ns must be > 0"), "{e}");
    }
}
