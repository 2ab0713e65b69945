//! Campaigns: an election's attempts on workers, driven by the renewal thread; resign.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::calls::min_opt;
use super::wait::{register_attempt, Moment, Rule};
use super::{pool, CampaignSink, SessionInner};
use crate::backend::{Acquire, Notification};
use crate::engine::{later, CampaignConflict, CampaignId, NotSent, Step};
use crate::error::{Error, ErrorKind, Result};
use crate::sync;
use crate::types::Name;

#[derive(Debug)]
pub(super) struct CampaignSlot {
    pub(super) election: Arc<dyn CampaignSink>,
    /// The engine's id of this campaign: its attempts carry it.
    pub(super) campaign: CampaignId,
    pub(super) next_attempt: Instant,
    pub(super) in_flight: Option<Instant>,
    /// A release was pushed while an attempt was in flight: retry at once after it.
    pub(super) woken: bool,
}

impl SessionInner {
    pub(crate) fn attach_campaign<E: CampaignSink + 'static>(self: &Arc<Self>, election: &Arc<E>) -> Result<()> {
        let election: Arc<dyn CampaignSink> = election.clone();
        let name = election.name().clone();
        let deadline = later(sync::now(), self.timing.query_timeout);
        {
            let mut e = self.engine.lock();
            let campaign = loop {
                let now = sync::now();
                if let Some(err) = self.dead_error(&e, now) {
                    return Err(err);
                }
                let why = match e.start_campaign(&name, now) {
                    Ok(campaign) => break campaign,
                    // An acquire of the name is in flight (a lock, or the last attempt of a
                    // campaign just resigned): its outcome decides, so wait for it (finding 9 of
                    // issue #36: it was refused as "a lock in flight").
                    Err(CampaignConflict::Acquiring) => {
                        if self.cond.wait_until(&mut e, deadline).timed_out() {
                            return Err(Error::unavailable(format!(
                                "session {}: an acquire of '{name}' is still in flight (its backend call has not \
                                 returned within the query timeout); retry the campaign",
                                self.id
                            )));
                        }
                        continue;
                    }
                    Err(CampaignConflict::Held) => "already holds",
                    Err(CampaignConflict::Campaigning) => "already campaigns for",
                };
                return Err(Error::new(ErrorKind::AlreadyHeld, format!("session {} {why} '{name}'", self.id)));
            };
            let mut c = self.campaigns.lock();
            election.attach(Arc::downgrade(self), self.id.clone());
            c.insert(
                name,
                CampaignSlot { election, campaign, next_attempt: sync::now(), in_flight: None, woken: false },
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

    /// The old rule (finding 1 of issue #14, `Bug::ResignSplit`): a resign's release counted in a
    /// second transition.
    fn count_release_apart(self: &Arc<Self>, name: &Name, token: Option<crate::types::Token>) {
        let Some(t) = token else { return };
        self.apply(|e| {
            e.begin_release(name, t);
            ((), Step::none())
        });
    }

    /// Ends the campaign for `name` (only `election`'s, when given) in one engine transition:
    /// the slot goes, the election is revoked, and the term it led or the session holds for
    /// `name` is released.
    fn stop_campaign(
        self: &Arc<Self>,
        name: &Name,
        election: Option<&Arc<dyn CampaignSink>>,
        wait: bool,
    ) -> Result<()> {
        let (token, slot) = self.apply_logged(|e, logs| {
            let mut c = self.campaigns.lock();
            let ours = c.get(name).is_some_and(|slot| election.is_none_or(|el| Arc::ptr_eq(&slot.election, el)));
            let Some(slot) = ours.then(|| c.remove(name)).flatten() else { return ((None, None), Step::none()) };
            drop(c);
            let leading = slot.election.resigned(logs);
            ((e.stop_campaign(name, slot.campaign, leading), Some(slot)), Step::none())
        });
        sync::old_only(sync::Bug::ResignSplit, || self.count_release_apart(name, token));
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
                    due.push((name.clone(), slot.election.clone(), slot.campaign));
                } else {
                    next = min_opt(next, slot.next_attempt);
                }
            }
        }
        for (name, election, campaign) in due {
            self.dispatch_campaign_attempt(name, election, campaign);
        }
        next
    }

    /// Runs one attempt of `campaign` on a worker. The attempt asks the engine whether to send
    /// only when it really is about to (it may start late, queued behind stalled calls): a
    /// campaign resigned, dropped or replaced meanwhile sends nothing.
    fn dispatch_campaign_attempt(self: &Arc<Self>, name: Name, election: Arc<dyn CampaignSink>, campaign: CampaignId) {
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let notify = self.notify_tx.clone();
        let id = self.id.clone();
        // The one registration rule (`wait.rs`): before the attempt where the registration does
        // not look at the lease, after an attempt that missed where it does; a pushed release
        // reaches the renewal thread, which schedules the next attempt at once.
        let rule = Rule::of(&*backend);
        pool::spawn(move || {
            register_attempt(rule, Moment::BeforeAttempt, &*backend, &id, &name, &notify);
            // No strong reference across the backend call: the session may be dropped meanwhile.
            let Some(begun) = weak.upgrade().map(|inner| inner.begin_attempt(&name, campaign)) else { return };
            let Some(epoch) = begun else { return };
            let sent = sync::now();
            let reply = backend.acquire(&id, &name);
            let busy = matches!(reply, Ok(Acquire::Busy));
            if busy {
                register_attempt(rule, Moment::AfterMiss, &*backend, &id, &name, &notify);
            }
            let observed = if busy { backend.holder(&name).ok().flatten() } else { None };
            let Some(inner) = weak.upgrade() else { return };
            let failed = match inner.finish_acquire(&name, sent, epoch, reply, Some((&*election, campaign))) {
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
            inner.attempt_over(&name, campaign, |slot| {
                if std::mem::take(&mut slot.woken) {
                    sync::now()
                } else {
                    later(sync::now(), inner.retry_delay())
                }
            });
        });
    }

    /// The engine's verdict on sending an attempt of `campaign` now: the release epoch, or
    /// `None` when nothing is to be sent (the campaign's slot is then told when to try again).
    fn begin_attempt(self: &Arc<Self>, name: &Name, campaign: CampaignId) -> Option<u64> {
        let begun = self.engine.lock().begin_attempt(name, campaign, sync::now());
        match begun {
            Ok(epoch) => Some(epoch),
            // A release of the name is in flight (shortly again), or the session or the campaign
            // is over (its slot is gone, or soon will be).
            Err(NotSent::Releasing | NotSent::Ended | NotSent::CampaignOver | NotSent::Held) => {
                self.attempt_over(name, campaign, |_| later(sync::now(), Duration::from_millis(10)));
                None
            }
        }
    }

    /// An attempt of `campaign` is over: its slot (if the campaign still goes on, and not a later
    /// one of the same name) schedules the next one at `next`'s answer.
    fn attempt_over(
        self: &Arc<Self>,
        name: &Name,
        campaign: CampaignId,
        next: impl FnOnce(&mut CampaignSlot) -> Instant,
    ) {
        if let Some(slot) = self.campaigns.lock().get_mut(name).filter(|s| s.campaign == campaign) {
            slot.in_flight = None;
            slot.next_attempt = next(slot);
        }
        self.poke();
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
    pub(crate) fn detach_campaign<E: CampaignSink + 'static>(self: &Arc<Self>, election: &Arc<E>) {
        let election: Arc<dyn CampaignSink> = election.clone();
        let _ = self.stop_campaign(election.name(), Some(&election), false);
    }
}
