//! simba's measurements through the [`metrics`](https://docs.rs/metrics/0.24) facade (feature
//! `metrics`; the application installs the recorder/exporter). Without the feature every function
//! here is empty and inlined away: nothing is compiled in.
//!
//! A recorder is application code, so no measurement is recorded under an internal lock: what is
//! decided under one is queued with the deferred log records ([`Measure`] in
//! `runtime::calls::Logs`) and recorded after every lock is released.
//!
//! The names, units and labels (docs/observability.md has the same table):
//!
//! | name | type | unit | labels |
//! |---|---|---|---|
//! | `simba_renewal_latency_seconds` | histogram | seconds | `backend` |
//! | `simba_renewal_margin_seconds` | histogram | seconds | `backend` |
//! | `simba_observed_drift` | histogram | ratio | `backend` |
//! | `simba_renewal_failures_total` | counter | | `backend`, `kind` = `error` / `timeout` / `expired` |
//! | `simba_acquired_total` | counter | | `backend`, `kind` = `lease` / `permit` / `partition` |
//! | `simba_acquire_wait_seconds` | histogram | seconds | `backend` (blocking waits that won) |
//! | `simba_released_total` | counter | | `backend`, `kind` |
//! | `simba_lost_total` | counter | | `backend`, `kind`, `reason` = `not_owned` / `deadline` / `session_expired` / `session_closed` |
//! | `simba_held` | gauge | terms | `backend`, `kind` |
//! | `simba_wakeups_total` | counter | | `backend`, `how` = `pushed` / `polled` |
//! | `simba_spi_call_seconds` | histogram | seconds | `backend`, `call` |
//! | `simba_spi_errors_total` | counter | | `backend`, `call`, `kind` (the `ErrorKind`) |
//! | `simba_pool_busy_workers` | gauge | threads | |
//! | `simba_coordinator_replacements_total` | counter | | `backend` |
//!
//! Lease names are never labels: their number is unbounded. Every label value comes from a fixed
//! set (the backend kinds, the SPI call names, the kinds and reasons above), so the series per
//! process are bounded.

use std::time::Duration;

use crate::error::ErrorKind;
use crate::state::LossReason;
use crate::types::{Name, PARTITION_NAME_PREFIX, RESERVED_NAME_PREFIX};

/// A measurement decided under a lock, recorded after it. (Without the feature it is built and
/// dropped: its fields are read only by the recording.)
#[derive(Debug, Clone)]
#[cfg_attr(not(feature = "metrics"), allow(dead_code))]
pub(crate) enum Measure {
    Acquired { backend: &'static str, kind: &'static str },
    Lost { backend: &'static str, kind: &'static str, reason: LossReason },
}

/// The `kind` label of the lease `name`.
pub(crate) fn kind_of(name: &Name) -> &'static str {
    let n = name.as_str();
    if n.starts_with(RESERVED_NAME_PREFIX) {
        "permit"
    } else if n.starts_with(PARTITION_NAME_PREFIX) {
        "partition"
    } else {
        "lease"
    }
}

#[cfg(feature = "metrics")]
fn reason_label(reason: LossReason) -> &'static str {
    match reason {
        LossReason::NotOwned => "not_owned",
        LossReason::Deadline => "deadline",
        LossReason::SessionExpired => "session_expired",
        LossReason::SessionClosed => "session_closed",
    }
}

#[cfg(feature = "metrics")]
fn error_label(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidName => "invalid_name",
        ErrorKind::InvalidConfig => "invalid_config",
        ErrorKind::SessionExpired => "session_expired",
        ErrorKind::Closed => "closed",
        ErrorKind::LeaseLost => "lease_lost",
        ErrorKind::NotLeader => "not_leader",
        ErrorKind::Timeout => "timeout",
        ErrorKind::Unavailable => "unavailable",
        ErrorKind::Backend => "backend",
        ErrorKind::Unsupported => "unsupported",
        ErrorKind::AlreadyHeld => "already_held",
        ErrorKind::Cancelled => "cancelled",
    }
}

impl Measure {
    /// Records it (no internal lock held).
    #[inline(always)]
    pub(crate) fn record(self) {
        #[cfg(feature = "metrics")]
        match self {
            Measure::Acquired { backend, kind } => {
                metrics::counter!("simba_acquired_total", "backend" => backend, "kind" => kind).increment(1);
                metrics::gauge!("simba_held", "backend" => backend, "kind" => kind).increment(1.0);
            }
            Measure::Lost { backend, kind, reason } => {
                let reason = reason_label(reason);
                metrics::counter!("simba_lost_total", "backend" => backend, "kind" => kind, "reason" => reason)
                    .increment(1);
                metrics::gauge!("simba_held", "backend" => backend, "kind" => kind).decrement(1.0);
            }
        }
        #[cfg(not(feature = "metrics"))]
        let _ = self;
    }
}

/// A keep-alive renewed the session: its latency, the margin it leaves, and the observed clock
/// drift's estimate after it (once the backend's replies gave one, see `engine::drift`).
#[inline(always)]
pub(crate) fn renewed(backend: &'static str, latency: Duration, margin: Duration, drift: Option<f64>) {
    #[cfg(feature = "metrics")]
    {
        metrics::histogram!("simba_renewal_latency_seconds", "backend" => backend).record(latency.as_secs_f64());
        metrics::histogram!("simba_renewal_margin_seconds", "backend" => backend).record(margin.as_secs_f64());
        if let Some(drift) = drift {
            metrics::histogram!("simba_observed_drift", "backend" => backend).record(drift);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, latency, margin, drift);
}

/// A keep-alive failed: `kind` is `error` (it returned an error), `expired` (the backend said
/// the session is gone) or `timeout` (abandoned at the query timeout).
#[inline(always)]
pub(crate) fn renewal_failed(backend: &'static str, kind: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("simba_renewal_failures_total", "backend" => backend, "kind" => kind).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, kind);
}

/// The session released its term of a lease of `kind`.
#[inline(always)]
pub(crate) fn released(backend: &'static str, kind: &'static str) {
    #[cfg(feature = "metrics")]
    {
        metrics::counter!("simba_released_total", "backend" => backend, "kind" => kind).increment(1);
        metrics::gauge!("simba_held", "backend" => backend, "kind" => kind).decrement(1.0);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, kind);
}

/// A blocking wait won after `waited`.
#[inline(always)]
pub(crate) fn waited(backend: &'static str, waited: Duration) {
    #[cfg(feature = "metrics")]
    metrics::histogram!("simba_acquire_wait_seconds", "backend" => backend).record(waited.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, waited);
}

/// A blocking waiter woke for its next attempt: by a pushed release, or at its retry delay.
#[inline(always)]
pub(crate) fn wakeup(backend: &'static str, pushed: bool) {
    #[cfg(feature = "metrics")]
    {
        let how = if pushed { "pushed" } else { "polled" };
        metrics::counter!("simba_wakeups_total", "backend" => backend, "how" => how).increment(1);
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, pushed);
}

/// An SPI call returned after `took`, with the kind of its error if it failed.
#[inline(always)]
pub(crate) fn spi_call(backend: &'static str, call: &'static str, took: Duration, error: Option<ErrorKind>) {
    #[cfg(feature = "metrics")]
    {
        metrics::histogram!("simba_spi_call_seconds", "backend" => backend, "call" => call).record(took.as_secs_f64());
        if let Some(kind) = error {
            let kind = error_label(kind);
            metrics::counter!("simba_spi_errors_total", "backend" => backend, "call" => call, "kind" => kind)
                .increment(1);
        }
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (backend, call, took, error);
}

/// A pool worker starts (`+1`) or ends (`-1`) a job.
#[inline(always)]
pub(crate) fn pool_busy(delta: f64) {
    #[cfg(feature = "metrics")]
    metrics::gauge!("simba_pool_busy_workers").increment(delta);
    #[cfg(not(feature = "metrics"))]
    let _ = delta;
}

/// A coordinator replaced its session.
#[inline(always)]
pub(crate) fn replaced(backend: &'static str) {
    #[cfg(feature = "metrics")]
    metrics::counter!("simba_coordinator_replacements_total", "backend" => backend).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = backend;
}
