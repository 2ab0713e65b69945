//! Campaigns: an election's attempts on workers, driven by the renewal thread; resign.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::calls::min_opt;
use super::{pool, SessionInner};
use crate::backend::{Acquire, Notification, Topic};
use crate::election::ElectionShared;
use crate::engine::{later, CampaignConflict};
use crate::error::{Error, ErrorKind, Result};
use crate::sync;
use crate::types::Name;

#[derive(Debug)]
pub(super) struct CampaignSlot {
    pub(super) election: Arc<ElectionShared>,
    pub(super) next_attempt: Instant,
    pub(super) in_flight: Option<Instant>,
    /// A release was pushed while an attempt was in flight: retry at once after it.
    pub(super) woken: bool,
}

impl SessionInner {
    pub(crate) fn attach_campaign(self: &Arc<Self>, election: &Arc<ElectionShared>) -> Result<()> {
        let name = election.name().clone();
        {
            let mut e = self.engine.lock();
            let now = sync::now();
            if let Some(err) = self.dead_error(&e, now) {
                return Err(err);
            }
            let mut c = self.campaigns.lock();
            if let Err(conflict) = e.start_campaign(&name, now) {
                let why = match conflict {
                    CampaignConflict::Held => "already holds",
                    CampaignConflict::Campaigning => "already campaigns for",
                    CampaignConflict::Acquiring => "has a lock in flight for",
                };
                return Err(Error::new(ErrorKind::AlreadyHeld, format!("session {} {why} '{name}'", self.id)));
            }
            election.attach(Arc::downgrade(self), self.id.clone());
            c.insert(
                name,
                CampaignSlot { election: election.clone(), next_attempt: sync::now(), in_flight: None, woken: false },
            );
        }
        self.poke();
        Ok(())
    }

    /// Stops campaigning for `name` and releases it if held; waits up to the query timeout. One
    /// engine transition ends the campaign, revokes the election and gives up its term, so no
    /// other handle can adopt that term in between (finding 1 of issue #14).
    pub(crate) fn resign(self: &Arc<Self>, name: &Name, wait: bool) -> Result<()> {
        self.stop_campaign(name, None, wait)
    }

    /// Ends the campaign for `name` (only `election`'s, when given) in one engine transition:
    /// the slot goes, the election is revoked, and the term it led or the session holds for
    /// `name` is released.
    fn stop_campaign(self: &Arc<Self>, name: &Name, election: Option<&Arc<ElectionShared>>, wait: bool) -> Result<()> {
        let (token, slot) = self.apply_logged(|e, logs| {
            let mut c = self.campaigns.lock();
            let ours = c.get(name).is_some_and(|slot| election.is_none_or(|el| Arc::ptr_eq(&slot.election, el)));
            let Some(slot) = ours.then(|| c.remove(name)).flatten() else { return ((None, None), Vec::new()) };
            drop(c);
            let leading = slot.election.resigned(logs);
            ((e.stop_campaign(name, leading), Some(slot)), Vec::new())
        });
        if let (Some(t), true) = (token, sync::reintroduced(sync::Bug::ResignSplit)) {
            // Old (finding 1): the release counted in a second transition.
            self.apply(|e| {
                e.begin_release(name, t);
                ((), Vec::new())
            });
        }
        // Dropped with no lock held (the election's last reference may own the backend).
        drop(slot);
        match token {
            Some(t) => {
                log::debug!("session {}: resigned '{}', releasing token {}", self.id, name, t);
                self.perform_release(name, t, wait)
            }
            None => Ok(()),
        }
    }

    pub(super) fn run_campaigns(self: &Arc<Self>, now: Instant) -> Option<Instant> {
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        {
            let mut c = self.campaigns.lock();
            for (name, slot) in c.iter_mut() {
                if let Some(sent) = slot.in_flight {
                    if now >= later(sent, self.timing.query_timeout) {
                        // Abandon a hung attempt; its late reply is still adopted or undone.
                        slot.in_flight = None;
                    } else {
                        next = min_opt(next, later(sent, self.timing.query_timeout));
                        continue;
                    }
                }
                if slot.election.is_leading() {
                    continue;
                }
                if now >= slot.next_attempt {
                    slot.in_flight = Some(now);
                    due.push((name.clone(), slot.election.clone()));
                } else {
                    next = min_opt(next, slot.next_attempt);
                }
            }
        }
        for (name, election) in due {
            self.dispatch_campaign_attempt(name, election);
        }
        next
    }

    fn dispatch_campaign_attempt(self: &Arc<Self>, name: Name, election: Arc<ElectionShared>) {
        let epoch = {
            let mut e = self.engine.lock();
            if self.dead_error(&e, sync::now()).is_some() || e.releasing(&name) {
                drop(e);
                if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                    slot.in_flight = None;
                    slot.next_attempt = later(sync::now(), Duration::from_millis(10));
                }
                return;
            }
            e.begin_acquire(&name)
        };
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let notify = self.notify_tx.clone();
        let id = self.id.clone();
        let push = backend.capabilities().push_release;
        pool::spawn(move || {
            if push {
                if let Err(err) = backend.watch(&Topic::Lease(name.clone()), &notify) {
                    log::debug!("session {id}: cannot watch '{name}', polling: {err}");
                }
            }
            let sent = sync::now();
            let reply = backend.acquire(&id, &name);
            let busy = matches!(reply, Ok(Acquire::Busy));
            if busy && push {
                // Watch again: a one-shot watch may have fired for the instant the lease was free.
                let _ = backend.watch(&Topic::Lease(name.clone()), &notify);
            }
            let observed = if busy { backend.holder(&name).ok().flatten() } else { None };
            let Some(inner) = weak.upgrade() else { return };
            let failed = match inner.finish_acquire(&name, sent, epoch, reply, Some(&election)) {
                Ok(Some(_)) => None,
                Ok(None) => {
                    if let Some(h) = observed {
                        election.observe(h);
                    }
                    None
                }
                Err(err) => {
                    log::debug!("session {id}: campaign attempt for '{name}' failed: {err}");
                    Some(err)
                }
            };
            election.attempt_done(failed.as_ref());
            if let Some(slot) = inner.campaigns.lock().get_mut(&name) {
                slot.in_flight = None;
                slot.next_attempt =
                    if std::mem::take(&mut slot.woken) { sync::now() } else { later(sync::now(), inner.retry_delay()) };
            }
            inner.poke();
        });
    }

    pub(super) fn on_notification(self: &Arc<Self>, n: Notification) {
        if let Notification::Released(name) = n {
            if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                if slot.in_flight.is_some() {
                    slot.woken = true;
                } else {
                    slot.next_attempt = sync::now();
                }
            }
        }
    }

    // ----- coordinator hooks (runtime-edges): undo a durable re-attach that raced the
    // application's resign or leave. Each acts only on this very election or membership, never
    // on another handle of the same name. -----

    /// Stops `election`'s campaign on this session if it is the one campaigning here, and
    /// releases its term if this session holds one (its resign went to the previous session):
    /// the same one transition as [`resign`](Self::resign).
    pub(crate) fn detach_campaign(self: &Arc<Self>, election: &Arc<ElectionShared>) {
        let _ = self.stop_campaign(election.name(), Some(election), false);
    }
}
