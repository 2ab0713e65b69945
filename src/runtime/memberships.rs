//! Memberships: joins, leaves (waited for or on a worker) and re-joins of lost groups.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::calls::{bounded_call, CallEnd};
use super::{pool, MembershipSink, SessionInner};
use crate::backend::LeaseBackend;
use crate::engine::{later, Step};
use crate::error::{Error, ErrorKind, Result};
use crate::sync;
use crate::types::Name;

impl SessionInner {
    pub(crate) fn attach_membership<M: MembershipSink + 'static>(self: &Arc<Self>, m: &Arc<M>) -> Result<()> {
        let m: Arc<dyn MembershipSink> = m.clone();
        let group = m.group().clone();
        let deadline = later(sync::now(), self.timing.query_timeout);
        {
            let mut e = self.engine.lock();
            // A leave of the group still in flight could land after this join and undo it
            // (simulation finding 3): wait for it (one that lands even later is caught by the
            // keep-alives' group reports and re-joined).
            while e.leaving(&group) {
                if self.cond.wait_until(&mut e, deadline).timed_out() && e.leaving(&group) {
                    return Err(Error::unavailable(format!(
                        "session {}: a leave of '{group}' is still in flight (its backend call has not returned); \
                         retry the join",
                        self.id
                    )));
                }
            }
            if let Some(err) = self.dead_error(&e, sync::now()) {
                return Err(err);
            }
            let mut ms = self.memberships.lock();
            if ms.contains_key(&group) {
                return Err(Error::new(
                    ErrorKind::AlreadyHeld,
                    format!("session {} is already a member of '{group}'", self.id),
                ));
            }
            ms.insert(group.clone(), m.clone());
            e.begin_join(&group);
        }
        // Whichever comes first under the engine lock decides: the call's return (joined, if its
        // caller still waits) or the caller giving up (then a late success is a stray, left by a
        // later keep-alive).
        let gave_up = Arc::new(AtomicBool::new(false));
        let (g, session, late) = (group.clone(), Arc::downgrade(self), gave_up.clone());
        let end = CallEnd::new(move |r: Option<&Result<()>>| {
            if let Some(s) = session.upgrade() {
                s.apply(|e| {
                    let now = sync::now();
                    e.end_join(&g, now);
                    let ok = r.is_some_and(Result::is_ok);
                    let out = if ok && !late.load(Ordering::SeqCst) { e.joined(&g, now) } else { Step::none() };
                    ((), out)
                });
            }
        });
        let (id, g) = (self.id.clone(), group.clone());
        let call = move |b: &dyn LeaseBackend| {
            let r = b.join(&id, &g);
            end.finish(&r);
            r
        };
        // One bound for the whole join: the wait for a leave above and the call share it.
        let budget = deadline.saturating_duration_since(sync::now());
        match bounded_call(&self.backend, budget, call) {
            Ok(()) => {
                m.attach(Arc::downgrade(self), self.id.clone());
                log::debug!("session {}: joined '{}'", self.id, group);
                Ok(())
            }
            Err(err) => {
                self.apply(|e| {
                    gave_up.store(true, Ordering::SeqCst);
                    self.memberships.lock().remove(&group);
                    e.join_abandoned(&group, sync::now());
                    ((), Step::none())
                });
                Err(err)
            }
        }
    }

    pub(crate) fn leave(self: &Arc<Self>, group: &Name, wait: bool) -> Result<()> {
        {
            // Count the leave (under the engine lock) as the membership disappears from the map,
            // so a join that no longer finds the membership always finds the leave.
            let mut e = self.engine.lock();
            if self.memberships.lock().remove(group).is_none() || !e.begin_leave(group) {
                return Ok(());
            }
        }
        if wait {
            bounded_call(&self.backend, self.timing.query_timeout, self.leave_call(group))
        } else {
            self.spawn_leave(group.clone());
            Ok(())
        }
    }

    /// The backend call of a leave the engine counted in flight (`begin_leave`): it ends the
    /// leave only when the backend call returned, wherever it runs and even after its caller
    /// stopped waiting.
    fn leave_call(self: &Arc<Self>, group: &Name) -> impl FnOnce(&dyn LeaseBackend) -> Result<()> + Send + 'static {
        let (g, session) = (group.clone(), Arc::downgrade(self));
        let end = CallEnd::new(move |_: Option<&Result<()>>| {
            if let Some(s) = session.upgrade() {
                s.apply(|e| (e.end_leave(&g, sync::now()), Step::none()));
            }
        });
        let (id, g) = (self.id.clone(), group.clone());
        move |b: &dyn LeaseBackend| {
            let r = b.leave(&id, &g);
            end.finish(&r);
            r
        }
    }

    /// A leave nobody waits for (a dropped membership, a stray), on a worker.
    pub(super) fn spawn_leave(self: &Arc<Self>, group: Name) {
        let call = self.leave_call(&group);
        let (backend, id) = (self.backend.clone(), self.id.clone());
        pool::spawn(move || {
            if let Err(err) = call(&*backend) {
                log::debug!("session {id}: leave '{group}' failed: {err}");
            }
        });
    }

    /// True while the session is alive and holds `group` without a known loss.
    pub(crate) fn is_joined(&self, group: &Name) -> bool {
        let e = self.engine.lock();
        let active = || e.state() == crate::state::SessionState::Active; // broken rule: the deadline ignored
        let live = || self.dead_error(&e, sync::now()).is_none();
        let alive = sync::pick_with(sync::Bug::MemberIgnoresDeadline, active, live);
        alive && e.is_joined(group)
    }

    /// Joins `group` again after the backend lost it (the engine counted the join in flight).
    pub(super) fn dispatch_rejoin(self: &Arc<Self>, group: Name) {
        let (weak, g) = (Arc::downgrade(self), group.clone());
        let end = CallEnd::new(move |r: Option<&Result<()>>| {
            if let Some(inner) = weak.upgrade() {
                inner.apply(|e| ((), e.end_rejoin(&g, sync::now(), r.is_some_and(Result::is_ok))));
            }
        });
        let backend = self.backend.clone();
        let id = self.id.clone();
        pool::spawn(move || {
            let r = backend.join(&id, &group);
            if let Err(err) = &r {
                log::warn!("session {id}: re-join of '{group}' failed (retried at the next renewal): {err}");
            }
            end.finish(&r);
        });
    }

    /// Leaves `membership`'s group on this session if it is the membership held here.
    pub(crate) fn detach_membership<M: MembershipSink + 'static>(self: &Arc<Self>, membership: &Arc<M>) {
        let group = membership.group();
        let ours = self
            .memberships
            .lock()
            .get(group)
            .is_some_and(|m| std::ptr::addr_eq(Arc::as_ptr(m), Arc::as_ptr(membership)));
        if ours {
            let _ = self.leave(group, false);
        }
    }
}
