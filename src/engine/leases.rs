//! Leases and terms: acquires and releases in flight, the release epochs, the terms given up,
//! and the adoption verdict on an acquire reply.

use std::time::Instant;

use super::step::{Command, Step};
use super::Engine;
use crate::backend::TermRemaining;
use crate::state::SessionState;
use crate::sync::{self, Bug};
use crate::types::{Name, Token};

/// A held term.
#[derive(Debug, Clone)]
pub(super) struct LeaseEntry {
    pub(super) token: Token,
    pub(super) deadline: Instant,
    /// Reply instant of the acquire that established the term: only keep-alives sent after it may
    /// judge the lease.
    pub(super) established: Instant,
    /// The term lasts as long as its session on the backend ([`TermRemaining::WithSession`]): every
    /// keep-alive reply that renews the session renews it, also one that predates it.
    pub(super) with_session: bool,
}

/// What became of an acquire reply (see [`Engine::on_acquired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adoption {
    /// The term is held: `token()` succeeds until the lease's local deadline.
    Adopted,
    /// Not adopted: release the term on the backend (it may be ours there).
    Undo,
    /// Not adopted, but the reply confirms the very term the session already holds (e.g. an
    /// older campaign attempt answering after a newer one won): keep it, release nothing.
    Kept,
    /// Not adopted: the session is no longer alive (the backend frees the term with it).
    SessionEnded,
    /// Not adopted: a term this session gave up (released, or lost) — a release of it may still
    /// land. Release it (again) on the backend, like [`Undo`](Adoption::Undo); the name is not
    /// held by anyone else, only not free yet.
    GivenUp,
}

/// A term this session gave up and must never adopt again while a release of it may land.
#[derive(Debug, Clone, Copy)]
pub(super) struct Released {
    pub(super) token: Token,
    /// Set (to a keep-alive reply's instant) once no operation on the name was in flight; a
    /// keep-alive *sent* after it that does not report the term proves the term gone on the
    /// backend, and the entry is forgotten.
    pub(super) settled: Option<Instant>,
}

/// Why an acquire is not sent (see [`Engine::begin_lock`] and [`Engine::begin_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotSent {
    /// The session is no longer alive.
    Ended,
    /// The session holds the name or campaigns for it (a lock only).
    Held,
    /// A release of the name is in flight: an acquire's reply could confirm the very term the
    /// release is about to free. Wait for the release to end, then ask again.
    Releasing,
    /// The campaign the attempt belongs to is over (resigned, dropped or replaced by a new
    /// campaign of the name): its attempt must not ask for the name any more.
    CampaignOver,
}

/// One campaign of a name on this session (see [`Engine::start_campaign`]): a resigned campaign
/// and a later one of the same name have different ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CampaignId(pub(super) u64);

/// An acquire in flight, as the engine judges its answer (see [`Engine::acquire_answered`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AcquireCall {
    /// When the call was sent (after [`Engine::begin_acquire`]).
    pub sent: Instant,
    /// The release epoch [`Engine::begin_acquire`] returned.
    pub epoch: u64,
    /// The campaign whose attempt this is (adopted only while that campaign goes on), or `None`
    /// for a lock.
    pub campaign: Option<CampaignId>,
}

impl Engine {
    /// A lock of `name` wants to send an acquire at `now`: counted in flight (the release epoch to
    /// judge its reply by is returned, as by [`begin_acquire`](Engine::begin_acquire)) unless the
    /// session is no longer alive, already holds or campaigns for the name, or a release of it is
    /// in flight.
    pub fn begin_lock(&mut self, name: &Name, now: Instant) -> std::result::Result<u64, NotSent> {
        if !self.is_alive(now) {
            return Err(NotSent::Ended);
        }
        if self.token(name, now).is_some() || self.is_campaigning(name) {
            return Err(NotSent::Held);
        }
        if self.releasing(name) {
            return Err(NotSent::Releasing);
        }
        Ok(self.begin_acquire(name))
    }

    /// Records that an acquire of `name` is being sent; returns the release epoch to pass to
    /// [`on_acquired`](Engine::on_acquired).
    pub fn begin_acquire(&mut self, name: &Name) -> u64 {
        *self.pending.entry(name.clone()).or_insert(0) += 1;
        self.releases.get(name).map_or(0, |r| r.0)
    }

    /// Records that an acquire of `name` finished (its result was adopted, dropped or undone).
    pub fn end_acquire(&mut self, name: &Name) {
        self.end_op(name);
    }

    /// Records that a release of the term `token` of `name` is being sent. Any acquire in flight
    /// will not be adopted, and no reply carrying this token (or an older one) ever will be: the
    /// release may land on the backend at any later time.
    ///
    /// A held entry of that term (or an older one) is dropped: a term being released is not held,
    /// whichever handle adopted it (finding 1 of issue #14).
    pub fn begin_release(&mut self, name: &Name, token: Token) {
        self.give_up(name, token);
        let held = sync::pick(Bug::ResignSplit, false, self.leases.get(name).is_some_and(|l| l.token <= token));
        if held {
            self.leases.remove(name);
        }
        *self.pending.entry(name.clone()).or_insert(0) += 1;
        let r = self.releases.entry(name.clone()).or_insert((0, 0));
        r.0 += 1;
        r.1 += 1;
    }

    /// Records that a release of `name` finished (or its worker gave up).
    pub fn end_release(&mut self, name: &Name) {
        self.end_op(name);
        if let Some(r) = self.releases.get_mut(name) {
            r.1 = r.1.saturating_sub(1);
            if r.1 == 0 && !self.pending.contains_key(name) {
                // Keep the epoch only while something may still compare against it.
                self.releases.remove(name);
            }
        }
    }

    /// Like [`end_release`](Engine::end_release), for a release of the term `token` that the
    /// backend answered successfully: that term is gone there, so no later reply can carry it,
    /// and the name stops being remembered in the released terms (which would otherwise grow with
    /// every distinct name) unless a newer term's release or another operation on it is in flight.
    pub fn end_confirmed_release(&mut self, name: &Name, token: Token) {
        self.end_release(name);
        if self.pending(name) == 0 && self.released.get(name).is_some_and(|r| r.token == token) {
            self.released.remove(name);
        }
    }

    /// Remembers that `token` of `name` was given up: never adopted again.
    pub(super) fn give_up(&mut self, name: &Name, token: Token) {
        let r = self.released.entry(name.clone()).or_insert(Released { token, settled: None });
        r.token = r.token.max(token);
        r.settled = None;
    }

    /// Number of acquires of `name` in flight.
    pub(super) fn acquiring(&self, name: &Name) -> u32 {
        self.pending(name).saturating_sub(self.releases.get(name).map_or(0, |r| r.1))
    }

    /// An acquire of `name` answered `token` with `remaining` at `now`: judges the reply (as
    /// [`on_campaign_acquired`](Engine::on_campaign_acquired) for a campaign's attempt, else
    /// [`on_acquired`](Engine::on_acquired)) and ends the operation, in one transition. A reply
    /// not adopted ([`Adoption::Undo`], [`Adoption::GivenUp`]) is undone: its term is counted as
    /// a release in flight and a [`Command::Undo`] asks for it.
    pub fn acquire_answered(
        &mut self,
        name: &Name,
        call: AcquireCall,
        token: Token,
        remaining: impl Into<TermRemaining>,
        now: Instant,
    ) -> (Adoption, Step) {
        let remaining = remaining.into();
        let adoption = match call.campaign {
            Some(campaign) => self.on_campaign_acquired(name, campaign, token, call.sent, remaining, now, call.epoch),
            None => self.on_acquired(name, token, call.sent, remaining, now, call.epoch),
        };
        let mut step = Step::none();
        if matches!(adoption, Adoption::Undo | Adoption::GivenUp) {
            self.begin_release(name, token);
            step.command(Command::Undo { name: name.clone(), token });
        }
        self.end_acquire(name);
        (adoption, step)
    }

    /// An acquire of `name` whose caller no longer waits returned (`token`: the term it brought,
    /// if any): ends the operation and undoes the term unless the session holds that very term
    /// anyway.
    pub fn acquire_abandoned(&mut self, name: &Name, token: Option<Token>) -> Step {
        self.end_acquire(name);
        let mut step = Step::none();
        if let Some(token) = token.filter(|&t| self.held().all(|(n, h)| n != name || h != t)) {
            self.begin_release(name, token);
            step.command(Command::Undo { name: name.clone(), token });
        }
        step
    }

    /// Number of names whose released terms are remembered (bounded by the names with a release
    /// not confirmed by the backend, or with operations in flight, until a keep-alive shows the
    /// term gone).
    #[cfg(test)]
    pub fn remembered_releases(&self) -> usize {
        self.released.len()
    }

    fn end_op(&mut self, name: &Name) {
        if let Some(n) = self.pending.get_mut(name) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.pending.remove(name);
                self.listed_while_acquiring.remove(name);
            }
        }
    }

    /// An acquire of `name` sent at `sent` (with release epoch `epoch`) returned `token` and
    /// `remaining` at `now`. Adopts the term unless the session is no longer alive, the reply came
    /// too late to be of use, or a release of the name overlapped the call. The caller releases
    /// the term on the backend when this returns [`Adoption::Undo`] — never for
    /// [`Adoption::Kept`], a reply confirming the term the session already holds.
    ///
    /// The term's local deadline is `sent + remaining × (1 − drift)` for a measured remaining,
    /// and the session's own local deadline for [`TermRemaining::WithSession`] (a term that ends
    /// with its session: the session's deadline is a lower bound of both lives).
    pub fn on_acquired(
        &mut self,
        name: &Name,
        token: Token,
        sent: Instant,
        remaining: impl Into<TermRemaining>,
        now: Instant,
        epoch: u64,
    ) -> Adoption {
        match self.judge_acquired(name, token, sent, remaining.into(), now, epoch) {
            Adoption::Undo | Adoption::GivenUp if self.holds(name, token) => Adoption::Kept,
            other => other,
        }
    }

    /// True while the session holds the term `token` of `name`: a reply bringing that very term
    /// only confirms it (it is kept, never undone: undoing it would end the held term).
    pub(super) fn holds(&self, name: &Name, token: Token) -> bool {
        self.leases.get(name).is_some_and(|l| l.token == token)
    }

    fn judge_acquired(
        &mut self,
        name: &Name,
        token: Token,
        sent: Instant,
        remaining: TermRemaining,
        now: Instant,
        epoch: u64,
    ) -> Adoption {
        if !self.is_alive(now) {
            return Adoption::SessionEnded;
        }
        if self.released.get(name).is_some_and(|r| token <= r.token) {
            // A term this session already gave up: a release of it may still land.
            return Adoption::GivenUp;
        }
        let epoch_now = self.releases.get(name).map_or(0, |r| r.0);
        if epoch_now != epoch || self.releasing(name) {
            return Adoption::Undo;
        }
        let deadline = match remaining {
            TermRemaining::Known(r) => {
                let measured = self.timing.deadline(super::timing::deadline_basis(sent, now), r);
                // A keep-alive that listed this very term while the acquire was in flight renewed it.
                match self.listed_while_acquiring.get(name) {
                    Some((listed, renewed)) if *listed == token => measured.max(*renewed),
                    _ => measured,
                }
            }
            TermRemaining::WithSession => self.deadline,
        };
        if deadline <= now {
            return Adoption::Undo;
        }
        if let Some(existing) = self.leases.get_mut(name) {
            if existing.token == token {
                // Another caller's acquire answered the same term first: it holds it; this
                // reply only confirms it (never a second handle of one term).
                if now < existing.deadline {
                    existing.deadline = existing.deadline.max(deadline);
                }
                return Adoption::Kept;
            }
        }
        let with_session = remaining == TermRemaining::WithSession;
        self.leases.insert(name.clone(), LeaseEntry { token, deadline, established: now, with_session });
        Adoption::Adopted
    }

    /// A handle of the term `token` of `name` is released (or dropped), in one transition: the
    /// term is no longer held and its release on the backend is counted in flight — even when it
    /// was lost locally, since after a deadline loss the backend may still count it ours (a
    /// release of another term, or by a non-holder, is a no-op there). A newer term of the name
    /// held by another handle stays held. Returns whether to send that release.
    ///
    /// Once the session is closed or expired nothing is sent or counted: the close (the
    /// application's, or the one an expiry commands) frees every term of the session on the
    /// backend, so a guard dropped afterwards costs no call.
    pub fn release(&mut self, name: &Name, token: Token) -> bool {
        if self.state != SessionState::Active {
            return false;
        }
        self.begin_release(name, token);
        true
    }

    /// Drops the held entry of `name`, whatever its term, and returns the token it had: a loss
    /// forced by unit tests (the runtime releases a handle with [`release`](Engine::release)).
    #[cfg(test)]
    pub fn on_release(&mut self, name: &Name) -> Option<Token> {
        self.leases.remove(name).map(|l| l.token)
    }
}
