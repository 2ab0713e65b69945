//! The keep-alive judgement and the session's life: the schedule (`poll`, `next_wakeup`), what a
//! keep-alive reply means for the deadline, the leases and the strays, expiry and close.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::leases::LeaseEntry;
use super::step::{Command, Step};
use super::timing::{deadline_basis, judged_by, later};
use super::Engine;
use crate::backend::KeepAlive;
use crate::state::{LossReason, SessionEvent, SessionState};
use crate::sync::{self, Bug};
use crate::types::{Name, Token};

/// Result of a keep-alive, as fed to [`Engine::on_keep_alive`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepAliveResult {
    /// The backend's reply.
    Reply(KeepAlive),
    /// The call failed or was abandoned; outcome unknown.
    Failed,
}

impl Engine {
    /// The application closes the session: every lease is given up.
    pub fn close(&mut self) -> Step {
        let mut step = Step::none();
        if self.state != SessionState::Active {
            return step;
        }
        self.state = SessionState::Closed;
        self.lose_all(LossReason::SessionClosed, &mut step);
        step.event(SessionEvent::Closed);
        step
    }

    fn lose_all(&mut self, reason: LossReason, step: &mut Step) {
        let mut lost: Vec<(Name, LeaseEntry)> = self.leases.drain().collect();
        lost.sort_by(|a, b| a.0.cmp(&b.0));
        for (name, l) in lost {
            step.event(SessionEvent::LeaseLost { name, token: l.token, reason });
        }
    }

    fn expire(&mut self) -> Step {
        let mut step = Step::none();
        if self.state != SessionState::Active {
            return step;
        }
        self.state = SessionState::Expired;
        self.lose_all(LossReason::SessionExpired, &mut step);
        step.event(SessionEvent::Expired);
        step.command(Command::CloseSession);
        step
    }

    /// Advances time to `now`: expires the session at its deadline, drops leases past their own
    /// deadline, abandons an overdue keep-alive and starts the next one when due.
    pub fn poll(&mut self, now: Instant) -> Step {
        let mut step = Step::none();
        if self.state != SessionState::Active {
            return step;
        }
        if now >= self.deadline {
            return self.expire();
        }
        let mut overdue: Vec<Name> =
            self.leases.iter().filter(|(_, l)| now >= l.deadline).map(|(n, _)| n.clone()).collect();
        overdue.sort();
        for name in overdue {
            if let Some(l) = self.leases.remove(&name) {
                // The backend may still count the term ours: never adopt it into a new handle.
                self.give_up(&name, l.token);
                step.event(SessionEvent::LeaseLost { name, token: l.token, reason: LossReason::Deadline });
            }
        }
        if let Some(sent) = self.ka_in_flight {
            if now >= later(sent, self.timing.query_timeout) {
                self.ka_in_flight = None;
                self.drift.restart();
                self.keep_alive_failed(now, &mut step);
            }
        }
        if self.ka_in_flight.is_none() && now >= self.next_keep_alive {
            self.ka_in_flight = Some(now);
            step.command(Command::SendKeepAlive { sent: now });
        }
        step
    }

    /// Forgets given-up terms a keep-alive sent after every operation on their name ended no
    /// longer reports (gone on the backend: no reply can carry them again), and marks the rest
    /// settled once nothing is in flight on their name. Keeps the map bounded by the names with
    /// recent activity.
    fn forget_settled_releases(
        &mut self,
        sent: Instant,
        now: Instant,
        owned: &HashMap<&Name, Token>,
        unknown: &HashSet<&Name>,
    ) {
        let pending = &self.pending;
        self.released.retain(|name, r| {
            if pending.contains_key(name) || unknown.contains(name) {
                // In flight, or not checked by this reply (its term may still be live where it
                // could not be checked): not settled by it (finding 2 of issue #36).
                r.settled = None;
                return true;
            }
            match r.settled {
                Some(at) if judged_by(at, sent) => owned.get(name).is_some_and(|t| *t <= r.token),
                Some(_) => true,
                None => {
                    r.settled = Some(now);
                    true
                }
            }
        });
    }

    /// Remembers, for each name with an operation in flight that is not held with the listed
    /// token, the deadline this reply gave the listed term (see `listed_while_acquiring`).
    fn note_listed_while_acquiring(&mut self, owned: &HashMap<&Name, Token>, deadline: Instant, now: Instant) {
        if self.pending.is_empty() {
            return;
        }
        for (name, token) in owned {
            if !self.pending.contains_key(*name) || self.leases.get(*name).is_some_and(|l| l.token == *token) {
                continue;
            }
            if now >= deadline {
                continue;
            }
            let e = self.listed_while_acquiring.entry((*name).clone()).or_insert((*token, deadline));
            if e.0 == *token {
                e.1 = e.1.max(deadline);
            } else if e.0 < *token {
                *e = (*token, deadline);
            }
        }
    }

    /// When the engine next needs a [`poll`](Engine::poll), at the latest.
    pub fn next_wakeup(&self) -> Option<Instant> {
        if self.state != SessionState::Active {
            return None;
        }
        let mut t = self.deadline;
        if let Some(sent) = self.ka_in_flight {
            t = t.min(later(sent, self.timing.query_timeout));
        } else {
            t = t.min(self.next_keep_alive);
        }
        for l in self.leases.values() {
            t = t.min(l.deadline);
        }
        Some(t)
    }

    fn keep_alive_failed(&mut self, now: Instant, step: &mut Step) {
        self.failures += 1;
        self.next_keep_alive = later(now, self.timing.retry_backoff(self.failures - 1));
        step.event(SessionEvent::RenewalFailed { failures: self.failures });
    }

    /// A keep-alive sent at `sent` completed at `now` with `result`. Late replies (after the call
    /// was abandoned) are still applied: they are judged by their send instant.
    pub fn on_keep_alive(&mut self, sent: Instant, now: Instant, result: KeepAliveResult) -> Step {
        let current = self.ka_in_flight == Some(sent);
        if current {
            self.ka_in_flight = None;
        }
        let mut step = Step::none();
        if self.state != SessionState::Active {
            return step;
        }
        match result {
            KeepAliveResult::Failed => {
                if current {
                    // It may have renewed the session all the same: the drift window starts over.
                    self.drift.restart();
                    self.keep_alive_failed(now, &mut step);
                }
                step
            }
            KeepAliveResult::Reply(KeepAlive::Expired) => self.expire(),
            KeepAliveResult::Reply(KeepAlive::Alive { remaining, owned, groups, unknown, remaining_before }) => {
                let revived = || self.deadline.max(self.timing.deadline(sent, remaining)); // old: the reply's deadline
                let expiry = sync::pick_with(Bug::LateAliveRevives, revived, || self.deadline);
                if now >= expiry {
                    // Expiry is terminal: the session already counts as expired (token() failed,
                    // lock() said so); a late success never revives it (finding 2 of issue #14).
                    return self.expire();
                }
                let deadline = self.timing.deadline(deadline_basis(sent, now), remaining);
                if current {
                    self.failures = 0;
                    self.next_keep_alive = later(sent, self.timing.renew_interval);
                    self.drift.renewed(sent, now, remaining, remaining_before);
                } else {
                    // A late reply: its renewal ran at an unknown point of a call that was
                    // abandoned, so it pairs with nothing.
                    self.drift.restart();
                }
                self.deadline = self.deadline.max(deadline);
                let owned: HashMap<&Name, Token> = owned.iter().map(|(n, t)| (n, *t)).collect();
                self.note_listed_while_acquiring(&owned, deadline, now);
                // Unknown is not lost: a name this reply could not check is neither judged nor
                // extended by it (the term keeps its deadline) — finding 2 of issue #36.
                let unknown: HashSet<&Name> = unknown.iter().collect();
                // Judged: only terms established strictly before the send ([`judged_by`]).
                let judged: Vec<Name> = self
                    .leases
                    .iter()
                    .filter(|(n, l)| judged_by(l.established, sent) && !unknown.contains(n))
                    .map(|(n, _)| n.clone())
                    .collect();
                let mut lost = Vec::new();
                for name in judged {
                    let Some(entry) = self.leases.get_mut(&name) else { continue };
                    if now >= entry.deadline {
                        // Its own deadline passed: lost, whatever the reply says.
                        lost.push((name, LossReason::Deadline));
                        continue;
                    }
                    match owned.get(&name) {
                        Some(t) if *t == entry.token => entry.deadline = entry.deadline.max(deadline),
                        _ => lost.push((name, LossReason::NotOwned)),
                    }
                }
                // A term established after the send is not judged by this reply (the reply may
                // predate it). One it lists is what the session owns after this renewal, and one
                // that lasts with its session (`TermRemaining::WithSession`) lives as long as the
                // session this reply renewed: either is extended like the others. (Otherwise a
                // term adopted with the session's deadline while this keep-alive was in flight
                // would keep the deadline of the keep-alive before: finding 3 of issue #36.)
                for (name, entry) in
                    self.leases.iter_mut().filter(|(n, l)| !judged_by(l.established, sent) && !unknown.contains(n))
                {
                    let with_session = sync::pick(Bug::WithSessionKeepsOldDeadline, false, entry.with_session);
                    let renewed = with_session || owned.get(name) == Some(&entry.token);
                    if renewed && now < entry.deadline {
                        entry.deadline = entry.deadline.max(deadline);
                    }
                }
                lost.sort_by(|a, b| a.0.cmp(&b.0));
                for (name, reason) in lost {
                    if let Some(l) = self.leases.remove(&name) {
                        self.give_up(&name, l.token);
                        step.event(SessionEvent::LeaseLost { name, token: l.token, reason });
                    }
                }
                self.forget_settled_releases(sent, now, &owned, &unknown);
                let mut strays: Vec<(Name, Token)> = owned
                    .iter()
                    .filter(|(n, _)| !self.leases.contains_key(**n) && !self.pending.contains_key(**n))
                    .map(|(n, t)| ((*n).clone(), *t))
                    .collect();
                strays.sort();
                for (name, token) in strays {
                    // Counted in flight here, in the transition that decided it.
                    self.begin_release(&name, token);
                    step.command(Command::ReleaseStray { name, token });
                }
                sync::fixed_only(Bug::GroupReportsIgnored, || step.append(self.groups.on_report(sent, now, &groups)));
                step
            }
        }
    }
}
