//! Pushed release notifications: the real `MemoryBackend::watch` registrations, their one-shot
//! notifications carried through the simulated network, and the candidates' reaction to them
//! (`Session::lock` → `lock_until`, and campaign attempts), as `runtime/` does it.
//!
//! Each client registers its watches with one channel (the real code uses one per `lock` call and
//! one per session for campaigns; a notification only matters to the name's waiting candidate, so
//! one channel behaves the same). After every backend call the simulator drains the channels and
//! sends each notification to its client like a reply: delayed, lost at the reply-loss rate, cut
//! by a partition. A lost notification leaves the candidate to its periodic retry
//! (`renew_interval / 2` plus jitter).

use rand::Rng;

use super::{AfterWatch, Ev, Event, Res, Trigger, World};
use crate::backend::{LeaseBackend, Notification, Topic};
use crate::types::{Name, Token};

impl World {
    /// Registers client `c`'s one-shot watch of `name` on the memory backend.
    pub(super) fn mem_watch(&mut self, c: usize, b: u64, name: Name) -> Res {
        let Some(m) = &self.mem else { return Res::Failed };
        let Some((tx, _)) = &self.clients[c].notify else { return Res::Failed };
        m.clock.set(b);
        match m.backend.watch(&Topic::Lease(name), tx) {
            Ok(_) => Res::Done,
            Err(_) => Res::Failed,
        }
    }

    /// Sends every notification the backend pushed during the last call on its way to its client.
    pub(super) fn drain_notifications(&mut self) {
        for c in 0..self.clients.len() {
            let Some((_, rx)) = &self.clients[c].notify else { continue };
            // The backend sends a call's notifications in its own (hash) order: sort them so a
            // seed replays exactly.
            let mut got: Vec<usize> = rx
                .try_iter()
                .filter_map(|n| match n {
                    Notification::Released(name) => self.names.iter().position(|x| *x == name),
                    Notification::MembersChanged(_) => None,
                })
                .collect();
            got.sort_unstable();
            for k in got {
                self.freed_at[k].get_or_insert(self.now);
                self.stats.notifications += 1;
                let lost = self.net.loss_rep > 0.0 && self.rng.random_bool(self.net.loss_rep);
                if lost || self.net.cut(c, 0, self.now) {
                    self.stats.notifications_lost += 1;
                    continue;
                }
                let t = self.now + self.delay();
                self.push(t, Ev::Notify { c, name: k });
            }
        }
    }

    /// The backend granted `name` with `token` to an attempt started by `trigger`: counts a new term.
    pub(super) fn count_grant(&mut self, trigger: Trigger, name: &Name, token: Token) {
        let Some(k) = self.names.iter().position(|x| x == name) else { return };
        if token.get() <= self.last_grant[k] {
            return;
        }
        self.last_grant[k] = token.get();
        let wait = self.freed_at[k].take().map(|f| self.now - f);
        match trigger {
            Trigger::First => self.stats.handoffs_first += 1,
            Trigger::Push => {
                self.stats.handoffs_push += 1;
                self.stats.handoff_wait_push_ns += wait.unwrap_or(0);
            }
            Trigger::Retry => {
                self.stats.handoffs_retry += 1;
                self.stats.handoff_wait_retry_ns += wait.unwrap_or(0);
            }
        }
    }

    /// A notification of name `k` reached client `c` (`select!` on the lock call's channel, or
    /// `SessionInner::on_notification` for a campaign).
    pub(super) fn notified(&mut self, c: usize, k: usize) {
        self.record(Event::Notified { client: c as u8, name: self.names[k].clone() });
        if self.is_election(k) {
            self.campaign_notified(c);
            return;
        }
        if self.clients[c].current.is_none() {
            return;
        }
        let w = &mut self.clients[c].wants[k];
        if w.hold_until.is_some() || (w.first && !w.watched && w.acquiring.is_none()) {
            // Not inside a `lock` call for this name: nobody listens.
            return;
        }
        if w.acquiring.is_some() {
            // It waits in the channel: the wait after this attempt returns at once.
            w.notified = true;
        } else {
            w.next_try = self.now;
            w.push_woken = true;
        }
    }

    /// A watch registration returned (or its caller stopped waiting for it).
    pub(super) fn watched(&mut self, c: usize, si: Option<usize>, k: usize, then: AfterWatch, id: u64) {
        match then {
            AfterWatch::Acquire | AfterWatch::Wait => {
                if self.clients[c].wants[k].acquiring != Some(id) {
                    return;
                }
                self.clients[c].wants[k].acquiring = None;
                match then {
                    // The first attempt goes now (`first` and `watched` are set).
                    AfterWatch::Acquire => self.clients[c].wants[k].next_try = self.now,
                    _ => self.wait_retry(c, k),
                }
            }
            AfterWatch::CampaignAcquire { epoch, trigger } => {
                if let Some(si) = si {
                    self.campaign_send_acquire(c, si, k, epoch, trigger);
                }
            }
            AfterWatch::CampaignHolder => {
                if let Some(si) = si {
                    self.campaign_holder_read(c, si, k);
                }
            }
        }
    }
}
