//! The renewal thread, and the one place where the engine's steps are carried out: events
//! forwarded, commands (keep-alives, stray releases, undos, re-joins, stray leaves) performed.

use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::sync::{self, select, Receiver};

use super::calls::{log_kv, Logs};
use super::{pool, SessionInner, Wake};
use crate::backend::{KeepAlive, Notification};
use crate::engine::{Command, KeepAliveResult};
use crate::listener::Told;
use crate::observe::{self, Measure};
use crate::state::SessionEvent;
use crate::state::SessionState;

impl SessionInner {
    /// Forwards a transition's events, under the engine lock so they stay in order: each is sent
    /// to the session's subscribers as it is and becomes a log record (written after the lock is
    /// released); a loss revokes the election leading that term, the session's end ends its
    /// campaigns and memberships.
    pub(super) fn forward(&self, events: Vec<SessionEvent>, logs: &mut Logs) {
        use log::Level::{Debug, Info, Warn};
        let id = &self.id;
        for ev in events {
            // The event goes out first (non-blocking, in order); then what it means here.
            self.emit(&ev);
            match ev {
                SessionEvent::LeaseLost { name, token, reason } => {
                    logs.push_kv(
                        Warn,
                        format!("session {id}: lease '{name}' (token {token}) lost: {reason}"),
                        vec![
                            ("session", id.to_string()),
                            ("lease", name.to_string()),
                            ("token", token.to_string()),
                            ("reason", reason.to_string()),
                        ],
                    );
                    logs.measure(Measure::Lost { backend: self.backend.kind(), kind: observe::kind_of(&name), reason });
                    if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                        slot.election.revoked(token, reason, logs);
                        slot.next_attempt = sync::now();
                    }
                }
                SessionEvent::Expired => {
                    logs.push_kv(Warn, format!("session {id} expired"), vec![("session", id.to_string())]);
                    self.end(SessionState::Expired, logs);
                }
                SessionEvent::RenewalFailed { .. } => {}
                SessionEvent::MembershipLost { group } => {
                    logs.push(
                        Warn,
                        format!("session {id}: membership of '{group}' is missing on the backend; re-joining"),
                    );
                }
                SessionEvent::MembershipRestored { group } => {
                    logs.push(Info, format!("session {id}: membership of '{group}' restored"));
                }
                SessionEvent::Closed => {
                    logs.push(Debug, format!("session {id} closing"));
                    self.end(SessionState::Closed, logs);
                }
            }
        }
    }

    /// Performs a transition's commands, with no internal lock held: each is one backend call (on
    /// a worker), whose end is reported back with the matching engine transition.
    pub(super) fn perform(self: &Arc<Self>, commands: Vec<Command>) {
        for c in commands {
            match c {
                Command::SendKeepAlive { sent } => self.dispatch_keep_alive(sent),
                Command::ReleaseStray { name, token } => {
                    log::info!(
                        "session {}: releasing '{name}' (token {token}), owned on the backend but not held",
                        self.id
                    );
                    self.dispatch_release(name, token, None);
                }
                Command::Undo { name, token } => self.dispatch_release(name, token, None),
                Command::CloseSession => {
                    // Best effort: free everything on the backend now rather than at its expiry.
                    let backend = self.backend.clone();
                    let id = self.id.clone();
                    pool::spawn(move || {
                        if let Err(err) = backend.close_session(&id) {
                            log::debug!("session {id}: close after expiry failed: {err}");
                        }
                    });
                }
                Command::Rejoin { group } => self.dispatch_rejoin(group),
                Command::LeaveStray { group } => {
                    log::info!("session {}: leaving '{group}', listed on the backend but not held", self.id);
                    self.spawn_leave(group);
                }
            }
        }
    }

    fn dispatch_keep_alive(self: &Arc<Self>, sent: Instant) {
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let id = self.id.clone();
        let lease = self.timing.lease_duration;
        pool::spawn(move || {
            let (result, failure) = match backend.keep_alive(&id, lease) {
                Ok(r) => (KeepAliveResult::Reply(r), None),
                Err(err) if err.is_session_expired() => (KeepAliveResult::Reply(KeepAlive::Expired), None),
                Err(err) => (KeepAliveResult::Failed, Some(crate::error::display_chain(&err))),
            };
            let Some(inner) = weak.upgrade() else { return };
            // Decided under the lock, logged after it.
            let (new_cause, recovered) = inner.renewals.lock().returned(sent, sync::now(), &result, failure);
            match (&new_cause, &result) {
                (Some(cause), _) => {
                    let margin = inner.remaining().map_or_else(|| "none".to_string(), |m| format!("{m:?}"));
                    log_kv(
                        log::Level::Warn,
                        &format!("session {id}: keep-alive failed (retried; repeats at debug): {cause}"),
                        &[("session", id.to_string()), ("error", cause.clone()), ("margin", margin)],
                    );
                }
                (None, KeepAliveResult::Failed) => log::debug!("session {id}: keep-alive failed again, same cause"),
                _ if recovered => log::info!("session {id}: keep-alive succeeded again"),
                _ => {}
            }
            let renewed = matches!(result, KeepAliveResult::Reply(KeepAlive::Alive { .. }));
            match &result {
                KeepAliveResult::Reply(KeepAlive::Expired) => observe::renewal_failed(inner.backend.kind(), "expired"),
                KeepAliveResult::Failed => observe::renewal_failed(inner.backend.kind(), "error"),
                KeepAliveResult::Reply(_) => {}
            }
            let drift = inner.timing.drift;
            let (renewal, observed) = inner.apply(|e| {
                let now = sync::now();
                let step = e.on_keep_alive(sent, now, result);
                let mut renewal = None;
                if renewed && e.is_alive(now) {
                    let (latency, margin) =
                        (now.saturating_duration_since(sent), e.deadline().saturating_duration_since(now));
                    inner.tell(Told::Renewed { latency, margin });
                    renewal = Some((latency, margin));
                }
                ((renewal, e.observed_drift()), step)
            });
            if let Some((latency, margin)) = renewal {
                observe::renewed(inner.backend.kind(), latency, margin, observed.map(|d| d.estimate));
            }
            let exceeded = observed.filter(|d| d.exceeds(drift));
            if renewed && inner.renewals.lock().drift_exceeded(exceeded.is_some()) {
                match exceeded {
                    Some(d) => log_kv(
                        log::Level::Warn,
                        &format!(
                            "session {id}: the client's clock runs slower against the backend's than the drift \
                             setting allows: observed drift {:.4} ± {:.4} over {:?}, setting {drift} (raise the \
                             setting or fix the clock: a local deadline may come after the backend's expiry)",
                            d.estimate, d.uncertainty, d.window
                        ),
                        &[("session", id.to_string()), ("drift", format!("{:.6}", d.estimate))],
                    ),
                    None => log::info!("session {id}: the observed clock drift is within the drift setting again"),
                }
            }
            inner.poke();
        });
    }
}

pub(super) fn renewal_thread(
    weak: Weak<SessionInner>,
    wake: Receiver<Wake>,
    notify: crossbeam_channel::Receiver<Notification>,
) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let now = sync::now();
        let (next, abandoned) = inner.apply(|e| {
            let out = e.poll(now);
            // A failure the timer decides is a keep-alive abandoned at the query timeout.
            let abandoned = out.events.iter().any(|ev| matches!(ev, SessionEvent::RenewalFailed { .. }));
            ((e.next_wakeup(), abandoned), out)
        });
        if abandoned {
            inner.renewals.lock().abandoned(inner.timing.query_timeout);
            observe::renewal_failed(inner.backend.kind(), "timeout");
        }
        let Some(mut next) = next else {
            log::debug!("session {}: renewal thread stops ({})", inner.id, inner.state());
            return;
        };
        if let Some(c) = inner.run_campaigns(now) {
            next = next.min(c);
        }
        drop(inner);
        let timeout = next.saturating_duration_since(sync::now());
        select! {
            recv(wake) -> m => if m.is_err() { return },
            recv(notify) -> n => {
                if let (Ok(n), Some(inner)) = (n, weak.upgrade()) {
                    inner.on_notification(n);
                    while let Ok(n) = notify.try_recv() {
                        inner.on_notification(n);
                    }
                }
            },
            default(timeout) => {}
        }
    }
}
