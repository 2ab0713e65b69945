//! The session's snapshot ([`Session::status`](crate::Session::status)): the engine's view read
//! under its one lock, plus what the runtime keeps beside it — the last keep-alive that returned
//! ([`Renewals`]) and the blocking waits going on ([`Waiting`]). No I/O.

use std::sync::Arc;
use std::time::Instant;

use super::SessionInner;
use crate::backend::KeepAlive;
use crate::engine::KeepAliveResult;
use crate::status::{HeldLease, LeaseKind, Renewal, RenewalOutcome, SessionStatus};
use crate::sync;
use crate::types::Name;

/// The last keep-alive that returned, and the cause of the failures while they fail.
#[derive(Debug, Default)]
pub(crate) struct Renewals {
    /// (sent, returned, outcome) of the last keep-alive that returned.
    last: Option<(Instant, Instant, RenewalOutcome)>,
    /// Why keep-alives fail, while they fail.
    failing: Option<String>,
    /// Whether the observed clock drift exceeded the setting at the last renewal (warned once).
    drift_exceeded: bool,
}

impl Renewals {
    /// Records whether the observed drift exceeds the setting now; returns whether that changed.
    pub(super) fn drift_exceeded(&mut self, now: bool) -> bool {
        std::mem::replace(&mut self.drift_exceeded, now) != now
    }

    /// Records a keep-alive sent at `sent` that returned at `now` with `result` (`failure`: why it
    /// failed). Returns a cause to warn about (a new one: its repeats go to debug) and whether
    /// keep-alives succeed again after failing.
    pub(super) fn returned(
        &mut self,
        sent: Instant,
        now: Instant,
        result: &KeepAliveResult,
        failure: Option<String>,
    ) -> (Option<String>, bool) {
        let outcome = match result {
            KeepAliveResult::Reply(KeepAlive::Expired) => RenewalOutcome::Expired,
            KeepAliveResult::Reply(_) => RenewalOutcome::Renewed,
            KeepAliveResult::Failed => RenewalOutcome::Failed,
        };
        self.last = Some((sent, now, outcome));
        match failure {
            Some(cause) if self.failing.as_deref() == Some(cause.as_str()) => (None, false),
            Some(cause) => {
                self.failing = Some(cause.clone());
                (Some(cause), false)
            }
            None => (None, self.failing.take().is_some()),
        }
    }
}

/// Why renewals fail when none returned an error: they were abandoned at the query timeout.
fn abandoned_message(query_timeout: std::time::Duration) -> String {
    format!("keep-alives did not answer within the query timeout ({})", humantime::format_duration(query_timeout))
}

impl Renewals {
    /// The keep-alive in flight was abandoned at the query timeout: the failures' cause now.
    pub(super) fn abandoned(&mut self, query_timeout: std::time::Duration) {
        self.failing = Some(abandoned_message(query_timeout));
    }

    /// Why keep-alives fail, while they fail.
    pub(super) fn failing(&self) -> Option<String> {
        self.failing.clone()
    }
}

/// A blocking wait for `name` going on; counted in the session's waiters until dropped.
pub(super) struct Waiting<'a> {
    session: &'a SessionInner,
    name: Name,
}

impl<'a> Waiting<'a> {
    pub(super) fn new(session: &'a SessionInner, name: Name) -> Waiting<'a> {
        *session.waiters.lock().entry(name.clone()).or_insert(0) += 1;
        Waiting { session, name }
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        let mut waiters = self.session.waiters.lock();
        if let Some(n) = waiters.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                waiters.remove(&self.name);
            }
        }
    }
}

impl SessionInner {
    /// The session's snapshot (every lease as [`LeaseKind::Lease`]: the handle layer names the
    /// permits and partitions).
    pub(crate) fn status(self: &Arc<Self>) -> SessionStatus {
        let now = sync::now();
        let (state, margin, in_flight, failures, observed_drift, mut leases, mut campaigns, mut memberships) = {
            let e = self.engine.lock();
            let in_flight = e.keep_alive_in_flight().map(|sent| now.saturating_duration_since(sent));
            let margin = e.is_alive(now).then(|| e.deadline().saturating_duration_since(now));
            let leases: Vec<HeldLease> = e
                .held()
                .map(|(name, token)| HeldLease {
                    name: name.clone(),
                    kind: LeaseKind::Lease,
                    token,
                    remaining: e.remaining(name, now),
                })
                .collect();
            let campaigns: Vec<Name> = e.campaigning().cloned().collect();
            let memberships: Vec<Name> = e.memberships().cloned().collect();
            (e.state(), margin, in_flight, e.failures(), e.observed_drift(), leases, campaigns, memberships)
        };
        leases.sort_by(|a, b| a.name.cmp(&b.name));
        campaigns.sort();
        memberships.sort();
        let (last_renewal, last_error) = {
            let r = self.renewals.lock();
            let last = r.last.map(|(sent, returned, outcome)| Renewal {
                ago: now.saturating_duration_since(returned),
                latency: returned.saturating_duration_since(sent),
                outcome,
            });
            // Failures without a returned error are keep-alives abandoned at the query timeout.
            let error =
                r.failing.clone().or_else(|| (failures > 0).then(|| abandoned_message(self.timing.query_timeout)));
            (last, error)
        };
        let mut waiters: Vec<(Name, u32)> = self.waiters.lock().iter().map(|(n, c)| (n.clone(), *c)).collect();
        waiters.sort();
        SessionStatus {
            session: self.id.clone(),
            backend: self.backend.kind(),
            state,
            margin,
            lease_duration: self.timing.lease_duration,
            renew_interval: self.timing.renew_interval,
            drift: self.timing.drift,
            observed_drift,
            last_renewal,
            renewal_in_flight: in_flight,
            consecutive_failures: failures,
            last_error,
            leases,
            campaigns,
            memberships,
            waiters,
        }
    }
}
