//! The renewal thread, and carrying out the engine's outputs (events, keep-alives, strays).

use std::sync::{Arc, Weak};
use std::time::Instant;

use crate::sync::{self, select, MutexGuard, Receiver};

use super::calls::Logs;
use super::{pool, SessionInner, Wake};
use crate::backend::{KeepAlive, Notification};
use crate::engine::{Engine, KeepAliveResult, Output};
use crate::session::SessionEvent;
use crate::state::SessionState;

impl SessionInner {
    pub(super) fn handle_outputs(
        self: &Arc<Self>,
        e: &mut MutexGuard<'_, Engine>,
        outputs: Vec<Output>,
        logs: &mut Logs,
    ) -> Vec<Output> {
        use log::Level::{Debug, Info, Warn};
        let id = &self.id;
        let mut actions = Vec::new();
        for o in outputs {
            match o {
                Output::SendKeepAlive { .. } => actions.push(o),
                Output::LeaseLost { name, token, reason } => {
                    logs.push(Warn, format!("session {id}: lease '{name}' (token {token}) lost: {reason}"));
                    self.emit(SessionEvent::LeaseLost { name: name.clone(), token, reason });
                    if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                        slot.election.revoked(token, reason, logs);
                        slot.next_attempt = sync::now();
                    }
                }
                Output::Expired => {
                    logs.push(Warn, format!("session {id} expired"));
                    self.emit(SessionEvent::Expired);
                    self.end(SessionState::Expired, logs);
                    actions.push(Output::Expired);
                }
                Output::ReleaseStray { name, token } => {
                    logs.push(
                        Info,
                        format!("session {id}: releasing '{name}' (token {token}), owned on the backend but not held"),
                    );
                    e.begin_release(&name, token);
                    actions.push(Output::ReleaseStray { name, token });
                }
                Output::RenewalFailed { failures } => {
                    self.emit(SessionEvent::RenewalFailed { failures });
                }
                Output::MembershipLost { group } => {
                    logs.push(
                        Warn,
                        format!("session {id}: membership of '{group}' is missing on the backend; re-joining"),
                    );
                    self.emit(SessionEvent::MembershipLost { group });
                }
                Output::MembershipRestored { group } => {
                    logs.push(Info, format!("session {id}: membership of '{group}' restored"));
                    self.emit(SessionEvent::MembershipRestored { group });
                }
                Output::Rejoin { .. } => actions.push(o),
                Output::LeaveStray { ref group } => {
                    logs.push(Info, format!("session {id}: leaving '{group}', listed on the backend but not held"));
                    actions.push(o);
                }
                Output::Closed => {
                    logs.push(Debug, format!("session {id} closing"));
                    self.emit(SessionEvent::Closed);
                    self.end(SessionState::Closed, logs);
                }
            }
        }
        actions
    }

    pub(super) fn run_actions(self: &Arc<Self>, actions: Vec<Output>) {
        for a in actions {
            match a {
                Output::SendKeepAlive { sent } => self.dispatch_keep_alive(sent),
                Output::ReleaseStray { name, token } => self.dispatch_release(name, token, None),
                Output::Expired => {
                    // Best effort: free everything on the backend now rather than at its expiry.
                    let backend = self.backend.clone();
                    let id = self.id.clone();
                    pool::spawn(move || {
                        if let Err(err) = backend.close_session(&id) {
                            log::debug!("session {id}: close after expiry failed: {err}");
                        }
                    });
                }
                Output::Rejoin { group } => self.dispatch_rejoin(group),
                Output::LeaveStray { group } => self.spawn_leave(group),
                Output::LeaseLost { .. }
                | Output::RenewalFailed { .. }
                | Output::Closed
                | Output::MembershipLost { .. }
                | Output::MembershipRestored { .. } => {}
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
            let (new_cause, recovered) = {
                let mut failing = inner.failing.lock();
                match failure {
                    Some(cause) if failing.as_deref() == Some(cause.as_str()) => (None, false),
                    Some(cause) => {
                        *failing = Some(cause.clone());
                        (Some(cause), false)
                    }
                    None => (None, failing.take().is_some()),
                }
            };
            match (&new_cause, &result) {
                (Some(cause), _) => log::warn!("session {id}: keep-alive failed (retried; repeats at debug): {cause}"),
                (None, KeepAliveResult::Failed) => log::debug!("session {id}: keep-alive failed again, same cause"),
                _ if recovered => log::info!("session {id}: keep-alive succeeded again"),
                _ => {}
            }
            inner.apply(|e| ((), e.on_keep_alive(sent, sync::now(), result)));
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
        let next = inner.apply(|e| {
            let out = e.poll(now);
            (e.next_wakeup(), out)
        });
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
