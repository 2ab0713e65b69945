//! Elections, driven the way `runtime/` (`attach_campaign`, `run_campaigns`,
//! `dispatch_campaign_attempt`, `on_notification`, `resign`) and `election.rs` drive them: `lease-0`
//! is the election; candidates campaign for it on their renewal thread, everyone reads `leader()`.
//!
//! A campaign attempt runs on a worker that nobody abandons: with push it first registers a watch,
//! then acquires (`sent` taken just before), on a busy reply watches again and reads `holder`, and
//! only then feeds the reply to the engine, however late (`finish_acquire` judges it by its send
//! instant; a lock attempt would undo a late reply instead). The renewal thread stops waiting for
//! an attempt after the query timeout and may start another while the first is still out.

use rand::Rng;

use super::{Adoption, AfterWatch, Event, Kind, Res, Token, Trigger, World, MS};
use crate::backend::LeaseBackend;
use crate::sim::{BrokenRule, Model};
use crate::types::Name;

/// A campaign slot (`CampaignSlot` plus the `ElectionShared` state the driver needs).
#[derive(Debug, Clone)]
pub(crate) struct Camp {
    /// The session campaigning.
    si: usize,
    next_attempt: u64,
    /// Dispatch instant of the attempt the renewal thread still waits for (client clock).
    in_flight: Option<std::time::Instant>,
    /// A notification arrived while an attempt was in flight: go again at once after it.
    woken: bool,
    /// The next attempt was started by a notification.
    push_woken: bool,
    /// The next attempt is the campaign's first, or follows a loss.
    first: bool,
    /// `ElectionShared::leading`.
    leading: Option<Token>,
    /// When the application resigns.
    resign_at: u64,
}

impl World {
    /// Whether lease name `k` is the election (and so not part of the lock workload).
    pub(super) fn is_election(&self, k: usize) -> bool {
        k == 0 && self.sc.elections && self.sc.model == Model::Memory
    }

    pub(super) fn init_elections(&mut self, c: usize) {
        if !self.is_election(0) {
            return;
        }
        self.clients[c].leader_next = self.rng.random_range(0..self.lease / 2);
        self.clients[c].camp_next = self.rng.random_range(0..self.lease / 2);
    }

    /// `Election::leader()`, bounded, from every client (candidate or not).
    pub(super) fn leader_reads(&mut self, c: usize) {
        if !self.is_election(0) {
            return;
        }
        let cl = &self.clients[c];
        if cl.leader_reading.is_none() && self.now >= cl.leader_next {
            let id = self.start_call(c, None, None, Kind::Holder { name: 0, campaign: false });
            self.clients[c].leader_reading = Some(id);
        }
    }

    /// The backend evaluates a `holder` read of `name` for client `c`.
    pub(super) fn mem_holder(&mut self, c: usize, b: u64, name: Name) -> Res {
        let Some(m) = &self.mem else { return Res::Failed };
        m.clock.set(b);
        let holder = match m.backend.holder(&name) {
            Ok(h) => h,
            Err(_) => return Res::Failed,
        };
        let holder = holder.map(|h| {
            let label = m.labels.get(&h.session).copied().unwrap_or(u32::MAX);
            (label, h.token, super::ns(h.remaining))
        });
        self.stats.leader_reads += 1;
        self.record(Event::HolderRead { node: 0, b, client: c as u8, name, holder });
        Res::Done
    }

    /// Starts, resigns and drives client `c`'s campaign on its current session `si`.
    pub(super) fn campaign_workload(&mut self, c: usize, si: usize) {
        if !self.clients[c].candidate || !self.is_election(0) {
            return;
        }
        match &self.clients[c].camp {
            Some(cp) if cp.si != si => {
                // The election of an ended session: the application drops it (resigns).
                self.resign(c, false);
                return;
            }
            Some(cp) if self.now >= cp.resign_at => {
                let wait = self.rng.random_bool(0.5);
                self.resign(c, wait);
                return;
            }
            Some(_) => {}
            None => {
                if self.now < self.clients[c].camp_next {
                    return;
                }
                // attach_campaign: the session must be alive, and the engine starts the campaign
                // (refused while the session holds the name or a lock of it is in flight).
                let now = self.inst(c);
                let e = &mut self.clients[c].sessions[si].engine;
                let started = if e.is_alive(now) { e.start_campaign(&self.names[0], now).ok() } else { None };
                let Some(campaign) = started else {
                    self.clients[c].camp_next = self.now + self.lease / 4;
                    return;
                };
                self.clients[c].campaign = Some(campaign);
                let resign_at = self.now + self.rng.random_range(self.lease * 2..self.lease * 10);
                self.clients[c].camp = Some(Camp {
                    si,
                    next_attempt: self.now,
                    in_flight: None,
                    woken: false,
                    push_woken: false,
                    first: true,
                    leading: None,
                    resign_at,
                });
            }
        }
        self.run_campaign(c, si);
    }

    /// `run_campaigns` for the one election.
    fn run_campaign(&mut self, c: usize, si: usize) {
        let now = self.inst(c);
        let qt = self.timing.query_timeout;
        let Some(cp) = self.clients[c].camp.as_mut().filter(|cp| cp.si == si) else { return };
        if let Some(sent) = cp.in_flight {
            if now >= sent + qt {
                // Abandon a hung attempt; its late reply is still adopted or undone.
                cp.in_flight = None;
            } else {
                return;
            }
        }
        if cp.leading.is_some() || self.now < cp.next_attempt {
            return;
        }
        cp.in_flight = Some(now);
        self.dispatch_campaign_attempt(c, si);
    }

    fn dispatch_campaign_attempt(&mut self, c: usize, si: usize) {
        let now = self.inst(c);
        let name = self.names[0].clone();
        let e = &mut self.clients[c].sessions[si].engine;
        if !e.is_alive(now) || e.releasing(&name) {
            if let Some(cp) = self.clients[c].camp.as_mut() {
                cp.in_flight = None;
                cp.next_attempt = self.now + 10 * MS;
            }
            return;
        }
        let epoch = e.begin_acquire(&name);
        let Some(cp) = self.clients[c].camp.as_mut() else { return };
        let trigger = if cp.first {
            Trigger::First
        } else if cp.push_woken {
            Trigger::Push
        } else {
            Trigger::Retry
        };
        cp.first = false;
        cp.push_woken = false;
        let target = self.clients[c].sessions[si].target.clone();
        if self.clients[c].notify.is_some() {
            let then = AfterWatch::CampaignAcquire { epoch, trigger };
            self.start_call(c, Some(si), Some(target), Kind::Watch { name: 0, then });
        } else {
            self.campaign_send_acquire(c, si, 0, epoch, trigger);
        }
    }

    /// The attempt's acquire (after its watch, with push), `sent` taken now.
    pub(super) fn campaign_send_acquire(&mut self, c: usize, si: usize, k: usize, epoch: u64, trigger: Trigger) {
        let sent = self.inst(c);
        let target = self.clients[c].sessions[si].target.clone();
        let kind = Kind::Acquire { name: k, sent, epoch, trigger, campaign: true };
        self.start_call(c, Some(si), Some(target), kind);
    }

    /// After a busy acquire: the `holder` read (`election.observe`).
    pub(super) fn campaign_holder_read(&mut self, c: usize, si: usize, k: usize) {
        let target = self.clients[c].sessions[si].target.clone();
        self.start_call(c, Some(si), Some(target), Kind::Holder { name: k, campaign: true });
    }

    /// The attempt's acquire returned (or its worker's call failed).
    pub(super) fn campaign_acquired(
        &mut self,
        c: usize,
        si: usize,
        k: usize,
        sent: std::time::Instant,
        epoch: u64,
        res: Res,
    ) {
        if let Res::Busy = res {
            if self.clients[c].notify.is_some() {
                // Watch again: a one-shot watch may have fired for the instant the lease was free.
                let target = self.clients[c].sessions[si].target.clone();
                let kind = Kind::Watch { name: k, then: AfterWatch::CampaignHolder };
                self.start_call(c, Some(si), Some(target), kind);
            } else {
                self.campaign_holder_read(c, si, k);
            }
            return;
        }
        // finish_acquire, as runtime/ does it.
        let now = self.inst(c);
        let name = self.names[k].clone();
        let label = self.clients[c].sessions[si].label;
        let mut adopted = None;
        let mut undo = None;
        // An attempt follows its campaign's start.
        let Some(campaign) = self.clients[c].campaign else { return };
        {
            let e = &mut self.clients[c].sessions[si].engine;
            if let Res::Acquired { token, remaining } = res {
                let sent = if self.sc.broken_rule == Some(BrokenRule::DeadlineFromReplyInstant) { now } else { sent };
                // An attempt is adopted (elected) only while its campaign goes on in the engine.
                match e.on_campaign_acquired(&name, campaign, token, sent, remaining, now, epoch) {
                    Adoption::Adopted => adopted = Some(token),
                    // The fix of finding 4: a reply confirming the held term is kept (`+oldUndo`: released).
                    Adoption::Kept if !self.sc.old_undo => {}
                    Adoption::Kept | Adoption::Undo | Adoption::GivenUp => {
                        e.begin_release(&name, token);
                        undo = Some(token);
                    }
                    Adoption::SessionEnded => {}
                }
            }
            e.end_acquire(&name);
        }
        if let Some(token) = undo {
            self.release_call(c, si, k, token);
        }
        if let Some(token) = adopted {
            self.stats.adoptions += 1;
            self.record(Event::Adopted { client: c as u8, sess: label, name: name.clone(), token });
            let wanted = self.clients[c].camp.as_ref().is_some_and(|cp| cp.si == si);
            if wanted {
                let cp = self.clients[c].camp.as_mut().filter(|cp| cp.leading != Some(token));
                if let Some(cp) = cp {
                    cp.leading = Some(token);
                    self.stats.elected += 1;
                    self.record(Event::Elected { client: c as u8, sess: label, name, token });
                }
            } else {
                // Resigned meanwhile: release_lease(name, token, false).
                self.release(c, si, k, token);
            }
        }
        self.campaign_attempt_over(c, si);
    }

    /// A busy attempt's `holder` read returned: the attempt is over.
    pub(super) fn campaign_attempt_done(&mut self, c: usize, si: usize, k: usize) {
        let name = self.names[k].clone();
        self.clients[c].sessions[si].engine.end_acquire(&name);
        self.campaign_attempt_over(c, si);
    }

    fn campaign_attempt_over(&mut self, c: usize, si: usize) {
        let d = self.retry_delay(c);
        let now = self.now;
        if let Some(cp) = self.clients[c].camp.as_mut().filter(|cp| cp.si == si) {
            cp.in_flight = None;
            if std::mem::take(&mut cp.woken) {
                cp.next_attempt = now;
                cp.push_woken = true;
            } else {
                cp.next_attempt = now + d;
            }
        }
    }

    /// `on_notification` for the election.
    pub(super) fn campaign_notified(&mut self, c: usize) {
        let now = self.now;
        let current = self.clients[c].current;
        let Some(cp) = self.clients[c].camp.as_mut() else { return };
        if current != Some(cp.si) {
            return;
        }
        if cp.in_flight.is_some() {
            cp.woken = true;
        } else {
            cp.next_attempt = now;
            cp.push_woken = true;
        }
    }

    /// A lease loss of name `k` (term `token`) on session `si`: the campaign is revoked and retries
    /// at once.
    pub(super) fn campaign_lost(&mut self, c: usize, si: usize, k: usize, token: Token) {
        if !self.is_election(k) {
            return;
        }
        let now = self.now;
        if let Some(cp) = self.clients[c].camp.as_mut().filter(|cp| cp.si == si) {
            if cp.leading == Some(token) {
                cp.leading = None;
            }
            cp.next_attempt = now;
            cp.first = true;
        }
    }

    pub(super) fn campaign_session_ended(&mut self, c: usize, si: usize) {
        if let Some(cp) = self.clients[c].camp.as_mut().filter(|cp| cp.si == si) {
            cp.leading = None;
        }
    }

    /// `Election::resign` (or dropping it): stop contending; release the term if leading, or any
    /// term adopted but not yet reported elected.
    fn resign(&mut self, c: usize, _wait: bool) {
        let Some(cp) = self.clients[c].camp.take() else { return };
        let si = cp.si;
        let name = self.names[0].clone();
        let label = self.clients[c].sessions[si].label;
        self.record(Event::Resigned { client: c as u8, sess: label, name: name.clone() });
        // One engine transition ends the campaign and gives up its term (held, or the one the
        // election led); the backend call is the same whether the caller waits or not.
        let Some(campaign) = self.clients[c].campaign else { return };
        let e = &mut self.clients[c].sessions[si].engine;
        if let Some(token) = e.stop_campaign(&name, campaign, cp.leading) {
            self.release_call(c, si, 0, token);
        }
        let d = self.rng.random_range(0..self.lease);
        self.clients[c].camp_next = self.now + d;
    }

    /// When client `c` next needs a step for its reads, memberships and campaign.
    pub(super) fn extra_wake(&self, c: usize) -> u64 {
        let cl = &self.clients[c];
        let mut next = u64::MAX;
        next = next.min(self.reads_wake(c));
        if self.is_election(0) && cl.leader_reading.is_none() {
            next = next.min(cl.leader_next);
        }
        let Some(si) = cl.current else { return next };
        next = next.min(self.groups_wake(c, si));
        if !cl.candidate || !self.is_election(0) {
            return next;
        }
        match &cl.camp {
            None => next.min(cl.camp_next),
            Some(cp) if cp.si != si => self.now,
            Some(cp) => {
                next = next.min(cp.resign_at);
                if let Some(sent) = cp.in_flight {
                    next = next.min(cl.clock.real_at_instant(self.base, sent + self.timing.query_timeout));
                } else if cp.leading.is_none() {
                    next = next.min(cp.next_attempt);
                }
                next
            }
        }
    }
}
