//! Bounded backend calls for a user's thread (inline when the backend bounds them itself, else on
//! a pool worker), the deferred log records, and small timing helpers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{pool, SessionInner};
use crate::backend::LeaseBackend;
use crate::error::{Error, ErrorKind, Result};
use crate::observe::Measure;
use crate::sync;

/// The engine transition that ends a backend call the engine counted in flight (a join, a leave,
/// a re-join, a release), run exactly once: by [`finish`](CallEnd::finish) with the call's result
/// when the call returned, or with `None` when it never ran — a job refused by an exhausted pool
/// or a pool that cannot start a thread is dropped unrun, and the end runs as it is dropped. A
/// call counted in flight that nothing ends stays counted for good: a join's group is then never
/// judged by the keep-alives again, a leave's group can never be joined again (simulation
/// finding, seed 592 of the Cluster election sweep).
pub(crate) struct CallEnd<R> {
    end: Option<EndFn<R>>,
}

/// What a [`CallEnd`] runs: with the call's result, or `None` when it never ran.
type EndFn<R> = Box<dyn FnOnce(Option<&R>) + Send>;

impl<R> CallEnd<R> {
    pub(crate) fn new(end: impl FnOnce(Option<&R>) + Send + 'static) -> CallEnd<R> {
        CallEnd { end: Some(Box::new(end)) }
    }

    /// Ends the call with its result.
    pub(crate) fn finish(mut self, result: &R) {
        if let Some(end) = self.end.take() {
            end(Some(result));
        }
    }
}

impl<R> Drop for CallEnd<R> {
    fn drop(&mut self) {
        if let Some(end) = self.end.take() {
            end(None);
        }
    }
}

/// Log records and measurements decided under an internal lock, written and recorded once every
/// lock is released (the application's logger and metrics recorder may call back into the
/// session: they must never run under a lock).
#[derive(Default)]
#[must_use = "write the records once the locks are released"]
pub(crate) struct Logs {
    records: Vec<(log::Level, String, Fields)>,
    measures: Vec<Measure>,
}

/// A record's key-value fields (`log`'s structured form): `session`, `lease`, `token`, …
pub(crate) type Fields = Vec<(&'static str, String)>;

/// Writes one record with its key-value fields (with no internal lock held).
pub(crate) fn log_kv(level: log::Level, message: &str, fields: &[(&'static str, String)]) {
    if level > log::max_level() {
        return;
    }
    let kvs: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (*k, v.as_str())).collect();
    // A slice (not the Vec): `log` implements `Source` for `Vec` only with its `std` feature.
    let source: &[(&str, &str)] = &kvs;
    let logger = log::logger();
    logger.log(
        &log::Record::builder()
            .level(level)
            .target(module_path!())
            .module_path_static(Some(module_path!()))
            .key_values(&source)
            .args(format_args!("{message}"))
            .build(),
    );
}

impl Logs {
    pub(crate) fn push(&mut self, level: log::Level, message: String) {
        self.records.push((level, message, Vec::new()));
    }

    /// A record with key-value fields.
    pub(crate) fn push_kv(&mut self, level: log::Level, message: String, fields: Fields) {
        self.records.push((level, message, fields));
    }

    /// Queues a measurement (recorded by [`write`](Logs::write)).
    pub(crate) fn measure(&mut self, m: Measure) {
        self.measures.push(m);
    }

    /// Writes the records and records the measurements; call it with no internal lock held.
    pub(crate) fn write(self) {
        for (level, message, fields) in self.records {
            if fields.is_empty() {
                log::log!(level, "{message}");
            } else {
                log_kv(level, &message, &fields);
            }
        }
        for m in self.measures {
            m.record();
        }
    }
}

impl SessionInner {
    /// Runs a backend call for the user's thread, bounded by the query timeout (see [`bounded_call`]).
    pub(crate) fn bounded<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn LeaseBackend) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        bounded_call(&self.backend, self.timing.query_timeout, f)
    }

    /// The time before a campaign's next attempt: the retry delay of a waiter registered for
    /// the release where the backend pushes releases ([`pause`](SessionInner::pause)).
    pub(crate) fn retry_delay(&self) -> Duration {
        self.pause(self.backend.capabilities().push_release)
    }
}

/// Time the engine may spend between a caller's entry (where its deadline was set) and the backend
/// call, without that costing the call its inline run: a bound equal to the query timeout still
/// counts as fitting a `try_lock`'s query timeout.
const INLINE_GRACE: Duration = Duration::from_millis(10);

/// True when a call may run on the caller's thread: the backend bounds its calls itself
/// (`call_bound`), within `budget`, the time the caller may wait.
pub(super) fn inline(call_bound: Option<Duration>, budget: Duration) -> bool {
    call_bound.is_some_and(|bound| bound <= budget + INLINE_GRACE)
}

/// Runs `f` and waits up to `timeout`: on this thread when the backend bounds its calls within
/// `timeout` itself (its result is returned even if it overran), otherwise on a worker that is
/// abandoned at `timeout`.
pub(crate) fn bounded_call<T: Send + 'static>(
    backend: &Arc<dyn LeaseBackend>,
    timeout: Duration,
    f: impl FnOnce(&dyn LeaseBackend) -> Result<T> + Send + 'static,
) -> Result<T> {
    if inline(backend.call_bound(), timeout) {
        return f(&**backend);
    }
    let b = backend.clone();
    let kind = backend.kind();
    match pool::call_until(sync::now() + timeout, move || f(&*b), |_| {}) {
        Some(r) => r,
        None => Err(Error::new(
            ErrorKind::Timeout,
            format!("{kind} did not answer within {}", humantime::format_duration(timeout)),
        )),
    }
}

pub(super) fn min_opt(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

pub(crate) fn jitter(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    Duration::from_nanos(sync::random_below(max.as_nanos().min(u64::MAX as u128) as u64))
}
