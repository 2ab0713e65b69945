//! The session engine's decisions, as a state machine with time as an explicit input.
//!
//! No threads, no I/O, no clock reads: the renewal thread (and the deterministic simulation) feed it
//! instants and backend replies and carry out the [`Output`]s it returns. Everything the SPEC §4 asks
//! of the engine is decided here:
//!
//! - **local deadline**: a successful call *sent* at `t` that returned remaining `r` extends the
//!   deadline to `t + r × (1 − drift)`; ownership is judged only against it;
//! - **keep-alive schedule**: every `renew_interval`, retried with a short backoff after a failure,
//!   a call in flight longer than `query_timeout` is abandoned (its late result is still usable,
//!   because it is judged by its send instant);
//! - **loss**: a lease missing from a keep-alive reply (for a keep-alive sent after the lease was
//!   established) is lost at once; at the local deadline the session is expired locally, every lease
//!   is lost, and the session is never used again; an `Expired` reply has the same effect at once;
//! - **strays**: a lease the backend reports owned that the client does not hold and has no
//!   operation in flight for (e.g. an acquire whose reply was lost) is released;
//! - **memberships** (`groups.rs`): a joined group missing from a keep-alive's report is lost and
//!   re-joined; a reported group the session does not hold is left again.

mod groups;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use crate::backend::KeepAlive;
#[cfg(test)]
use crate::error::{Error, Result};
use crate::options::SessionOptions;
use crate::state::{LossReason, SessionState};
use crate::types::{Name, Token};

/// The engine's timing, copied from [`SessionOptions`] (validated there) or built with
/// [`Timing::new`], which validates it the same way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// How long the backend keeps the session without renewal.
    pub(crate) lease_duration: Duration,
    /// Time between keep-alives.
    pub(crate) renew_interval: Duration,
    /// Allowed clock-rate difference, in `[0, 1)`.
    pub(crate) drift: f64,
    /// A call in flight longer than this is abandoned.
    pub(crate) query_timeout: Duration,
}

impl From<&SessionOptions> for Timing {
    fn from(o: &SessionOptions) -> Timing {
        Timing {
            lease_duration: o.lease_duration(),
            renew_interval: o.renew_interval(),
            drift: o.drift(),
            query_timeout: o.query_timeout(),
        }
    }
}

impl Timing {
    /// A timing with these settings.
    ///
    /// # Errors
    /// `InvalidConfig` when `drift` is not a number in `[0, 1)`, or `lease_duration`,
    /// `renew_interval` or `query_timeout` is zero.
    #[cfg(test)]
    pub fn new(
        lease_duration: Duration,
        renew_interval: Duration,
        drift: f64,
        query_timeout: Duration,
    ) -> Result<Timing> {
        if !(0.0..1.0).contains(&drift) {
            return Err(Error::config(format!("drift must be a number in [0, 1), got {drift}")));
        }
        for (what, d) in
            [("lease_duration", lease_duration), ("renew_interval", renew_interval), ("query_timeout", query_timeout)]
        {
            if d.is_zero() {
                return Err(Error::config(format!("{what} must be more than zero")));
            }
        }
        Ok(Timing { lease_duration, renew_interval, drift, query_timeout })
    }

    /// The local deadline implied by a call sent at `sent` that returned `remaining`. Never
    /// panics: a drift outside `[0, 1)` (only possible within the crate) counts as "no time", a
    /// deadline beyond what an `Instant` holds as far in the future.
    pub fn deadline(&self, sent: Instant, remaining: Duration) -> Instant {
        let remaining = remaining.min(self.lease_duration);
        let factor = 1.0 - self.drift;
        let usable = if (0.0..=1.0).contains(&factor) {
            Duration::try_from_secs_f64(remaining.as_secs_f64() * factor).unwrap_or(remaining)
        } else {
            Duration::ZERO
        };
        later(sent, usable)
    }

    /// Backoff before retrying a failed keep-alive.
    pub fn retry_backoff(&self, failures: u32) -> Duration {
        let base = (self.renew_interval / 4).max(Duration::from_millis(10));
        let factor = 1u32 << failures.min(3);
        base.saturating_mul(factor).min(self.renew_interval)
    }
}

/// `t + d`, or a far-future instant when that is beyond what an `Instant` holds (`Duration::MAX`
/// means "forever").
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).or_else(|| t.checked_add(FOREVER)).unwrap_or(t)
}

/// What "forever" is when an `Instant` must be computed: about 136 years.
const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);

/// `t + d` when it is representable, `None` ("forever") otherwise.
pub(crate) fn deadline_after(t: Instant, d: Duration) -> Option<Instant> {
    t.checked_add(d)
}

/// An instruction or report from the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Send a keep-alive now (the engine has recorded it as in flight, sent at the given instant).
    SendKeepAlive {
        /// The instant the engine recorded as the send instant; pass it back with the reply.
        sent: Instant,
    },
    /// A lease is lost: `token()` already fails.
    LeaseLost {
        /// The lease.
        name: Name,
        /// The lost term's token.
        token: Token,
        /// Why.
        reason: LossReason,
    },
    /// The session is expired; it is never used again (close it on the backend, best effort).
    Expired,
    /// The backend reports `name` owned, but the client does not hold it: release that term.
    ReleaseStray {
        /// The lease to release.
        name: Name,
        /// The term the backend reported.
        token: Token,
    },
    /// The session was closed by the application.
    Closed,
    /// A keep-alive failed; the engine retries until the deadline.
    RenewalFailed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// A membership the session joined is missing on the backend (a leave that landed late, a
    /// failover that lost the join): report it. A [`Rejoin`](Output::Rejoin) follows.
    MembershipLost {
        /// The group.
        group: Name,
    },
    /// A lost membership is back (re-joined, or the backend lists it again).
    MembershipRestored {
        /// The group.
        group: Name,
    },
    /// Join `group` again on the backend, then call [`Engine::end_join`] and, on success,
    /// [`Engine::joined`] (the engine already counted the join as in flight).
    Rejoin {
        /// The group.
        group: Name,
    },
    /// The backend lists the session in `group`, which it does not hold (a join that landed after
    /// its call ended): leave it, then call [`Engine::end_leave`] (already counted in flight).
    LeaveStray {
        /// The group.
        group: Name,
    },
}

#[derive(Debug, Clone)]
struct LeaseEntry {
    token: Token,
    deadline: Instant,
    /// Reply instant of the acquire that established the term: only keep-alives sent after it may
    /// judge the lease.
    established: Instant,
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

/// Why a campaign cannot start (see [`Engine::start_campaign`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CampaignConflict {
    /// The session holds the name (a lease).
    Held,
    /// The session already campaigns for the name.
    Campaigning,
    /// A lock of the name is in flight (its term would be adopted twice).
    Acquiring,
}

/// A term this session gave up and must never adopt again while a release of it may land.
#[derive(Debug, Clone, Copy)]
struct Released {
    token: Token,
    /// Set (to a keep-alive reply's instant) once no operation on the name was in flight; a
    /// keep-alive *sent* after it that does not report the term proves the term gone on the
    /// backend, and the entry is forgotten.
    settled: Option<Instant>,
}

/// Result of a keep-alive, as fed to [`Engine::on_keep_alive`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepAliveResult {
    /// The backend's reply.
    Reply(KeepAlive),
    /// The call failed or was abandoned; outcome unknown.
    Failed,
}

/// The state machine of one session.
#[derive(Debug, Clone)]
pub struct Engine {
    timing: Timing,
    state: SessionState,
    deadline: Instant,
    leases: HashMap<Name, LeaseEntry>,
    pending: HashMap<Name, u32>,
    /// Per name: (release epoch, releases in flight).
    releases: HashMap<Name, (u64, u32)>,
    /// Per name: the newest term this session asked the backend to release, or lost. Never
    /// adopted again.
    released: HashMap<Name, Released>,
    /// Names this session campaigns for: an acquire answered for a campaign is adopted only
    /// while its name is in here (and then the session leads that term).
    campaigns: HashSet<Name>,
    ka_in_flight: Option<Instant>,
    next_keep_alive: Instant,
    failures: u32,
    groups: groups::Groups,
}

impl Engine {
    /// A session opened by a call sent at `sent` that returned `remaining`.
    pub fn new(timing: Timing, sent: Instant, remaining: Duration) -> Engine {
        Engine {
            timing,
            state: SessionState::Active,
            deadline: timing.deadline(sent, remaining),
            leases: HashMap::new(),
            pending: HashMap::new(),
            releases: HashMap::new(),
            released: HashMap::new(),
            campaigns: HashSet::new(),
            ka_in_flight: None,
            next_keep_alive: later(sent, timing.renew_interval),
            failures: 0,
            groups: groups::Groups::default(),
        }
    }

    /// The session state (as of the last input).
    pub fn state(&self) -> SessionState {
        self.state
    }

    /// The session's local deadline.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// True while the session is active and `now` is before its local deadline.
    pub fn is_alive(&self, now: Instant) -> bool {
        self.state == SessionState::Active && now < self.deadline
    }

    /// The token of `name` if it is held and valid at `now` (no I/O: the guard of every write).
    pub fn token(&self, name: &Name, now: Instant) -> Option<Token> {
        if !self.is_alive(now) {
            return None;
        }
        self.leases.get(name).filter(|l| now < l.deadline).map(|l| l.token)
    }

    /// Time left on `name`'s local deadline at `now`, if held.
    pub fn remaining(&self, name: &Name, now: Instant) -> Option<Duration> {
        self.token(name, now)?;
        let l = self.leases.get(name)?;
        Some(l.deadline.min(self.deadline).saturating_duration_since(now))
    }

    /// Names currently held (valid or not yet judged lost).
    pub fn held(&self) -> impl Iterator<Item = (&Name, Token)> {
        self.leases.iter().map(|(n, l)| (n, l.token))
    }

    /// Number of operations (acquires and releases) in flight on `name`.
    pub fn pending(&self, name: &Name) -> u32 {
        self.pending.get(name).copied().unwrap_or(0)
    }

    /// True while a release of `name` is in flight: an acquire must not be sent meanwhile (its
    /// reply could confirm the very term the release is about to free).
    pub fn releasing(&self, name: &Name) -> bool {
        self.releases.get(name).is_some_and(|r| r.1 > 0)
    }

    /// Records that a join of `group` is being sent (by the application or a re-join).
    pub fn begin_join(&mut self, group: &Name) {
        self.groups.begin_join(group);
    }

    /// Records that a join call of `group` returned at `now`, whatever its outcome and even when
    /// its caller no longer waited (a late success is then a stray, left by a later keep-alive).
    pub fn end_join(&mut self, group: &Name, now: Instant) {
        self.groups.end_join(group, now);
    }

    /// Records that the session holds `group` as of `now` (a join returned success to its caller);
    /// keep-alives sent after `now` judge it. Reports a restored membership after a loss.
    pub fn joined(&mut self, group: &Name, now: Instant) -> Vec<Output> {
        self.groups.joined(group, now)
    }

    /// Records that a [`Rejoin`](Output::Rejoin) of `group` returned at `now` (`ok`: success). The
    /// membership is back unless the application left meanwhile; after a failure the next
    /// keep-alive tries again.
    pub fn end_rejoin(&mut self, group: &Name, now: Instant, ok: bool) -> Vec<Output> {
        self.groups.end_rejoin(group, now, ok)
    }

    /// Records that the caller of a join of `group` gave up at `now` (error or timeout): the group is not
    /// held (a success that lands anyway is a stray, left by a later keep-alive).
    pub fn join_abandoned(&mut self, group: &Name, now: Instant) {
        self.groups.join_abandoned(group, now);
    }

    /// Records that a leave of `group` is being sent: the group is no longer held.
    pub fn begin_leave(&mut self, group: &Name) {
        self.groups.begin_leave(group);
    }

    /// Records that a leave of `group` ended at `now` (whatever its outcome).
    pub fn end_leave(&mut self, group: &Name, now: Instant) {
        self.groups.end_leave(group, now);
    }

    /// True while a leave of `group` is in flight: a join must wait for it (it could land after
    /// the join and undo it).
    pub fn leaving(&self, group: &Name) -> bool {
        self.groups.leaving(group)
    }

    /// True while `group` is held and not known to be lost.
    pub fn is_joined(&self, group: &Name) -> bool {
        self.groups.is_joined(group)
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
        if self.leases.get(name).is_some_and(|l| l.token <= token)
            && !crate::sync::reintroduced(crate::sync::Bug::ResignSplit)
        {
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
    fn give_up(&mut self, name: &Name, token: Token) {
        let r = self.released.entry(name.clone()).or_insert(Released { token, settled: None });
        r.token = r.token.max(token);
        r.settled = None;
    }

    /// Number of acquires of `name` in flight.
    fn acquiring(&self, name: &Name) -> u32 {
        self.pending(name).saturating_sub(self.releases.get(name).map_or(0, |r| r.1))
    }

    /// Starts a campaign for `name`: from now on its attempts' terms are adopted (see
    /// [`on_campaign_acquired`](Engine::on_campaign_acquired)) and a lock of the name is refused.
    ///
    /// # Errors
    /// The conflict when the session holds the name, already campaigns for it, or a lock of it is
    /// in flight.
    pub fn start_campaign(&mut self, name: &Name, now: Instant) -> std::result::Result<(), CampaignConflict> {
        if self.campaigns.contains(name) {
            return Err(CampaignConflict::Campaigning);
        }
        if self.token(name, now).is_some() {
            return Err(CampaignConflict::Held);
        }
        if self.acquiring(name) > 0 {
            return Err(CampaignConflict::Acquiring);
        }
        self.campaigns.insert(name.clone());
        Ok(())
    }

    /// True while the session campaigns for `name`.
    pub fn is_campaigning(&self, name: &Name) -> bool {
        self.campaigns.contains(name)
    }

    /// Ends the campaign for `name` (a resign), in one transition with the release of its term:
    /// the held term (or `leading`, the term the election led, when it is no longer held) is
    /// given up and counted as a release in flight. Returns the term to release on the backend
    /// (then call [`end_release`](Engine::end_release) or
    /// [`end_confirmed_release`](Engine::end_confirmed_release)).
    pub fn stop_campaign(&mut self, name: &Name, leading: Option<Token>) -> Option<Token> {
        if !self.campaigns.remove(name) {
            return None;
        }
        if crate::sync::reintroduced(crate::sync::Bug::ResignSplit) {
            return self.on_release(name).or(leading); // old: the caller releases in a second transition
        }
        let token = self.leases.get(name).map(|l| l.token).or(leading)?;
        self.begin_release(name, token);
        Some(token)
    }

    /// Like [`on_acquired`](Engine::on_acquired), for a campaign attempt: adopted — the session
    /// now leads the term — only while the campaign goes on; an attempt answering after its
    /// campaign ended is undone.
    pub fn on_campaign_acquired(
        &mut self,
        name: &Name,
        token: Token,
        sent: Instant,
        remaining: Duration,
        now: Instant,
        epoch: u64,
    ) -> Adoption {
        if self.is_alive(now) && !self.campaigns.contains(name) {
            return if self.leases.get(name).is_some_and(|l| l.token == token) {
                Adoption::Kept
            } else {
                Adoption::Undo
            };
        }
        self.on_acquired(name, token, sent, remaining, now, epoch)
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
            }
        }
    }

    /// An acquire of `name` sent at `sent` (with release epoch `epoch`) returned `token` and
    /// `remaining` at `now`. Adopts the term unless the session is no longer alive, the reply came
    /// too late to be of use, or a release of the name overlapped the call. The caller releases
    /// the term on the backend when this returns [`Adoption::Undo`] — never for
    /// [`Adoption::Kept`], a reply confirming the term the session already holds.
    pub fn on_acquired(
        &mut self,
        name: &Name,
        token: Token,
        sent: Instant,
        remaining: Duration,
        now: Instant,
        epoch: u64,
    ) -> Adoption {
        match self.judge_acquired(name, token, sent, remaining, now, epoch) {
            Adoption::Undo | Adoption::GivenUp if self.leases.get(name).is_some_and(|l| l.token == token) => {
                Adoption::Kept
            }
            other => other,
        }
    }

    fn judge_acquired(
        &mut self,
        name: &Name,
        token: Token,
        sent: Instant,
        remaining: Duration,
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
        let deadline = self.timing.deadline(sent, remaining);
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
        self.leases.insert(name.clone(), LeaseEntry { token, deadline, established: now });
        Adoption::Adopted
    }

    /// The application releases `name`: it is no longer held, whatever the backend answers.
    /// Returns the token it had.
    pub fn on_release(&mut self, name: &Name) -> Option<Token> {
        self.leases.remove(name).map(|l| l.token)
    }

    /// The application closes the session: every lease is given up.
    pub fn close(&mut self) -> Vec<Output> {
        if self.state != SessionState::Active {
            return Vec::new();
        }
        self.state = SessionState::Closed;
        let mut out = self.lose_all(LossReason::SessionClosed);
        out.push(Output::Closed);
        out
    }

    fn lose_all(&mut self, reason: LossReason) -> Vec<Output> {
        let mut lost: Vec<(Name, LeaseEntry)> = self.leases.drain().collect();
        lost.sort_by(|a, b| a.0.cmp(&b.0));
        lost.into_iter().map(|(name, l)| Output::LeaseLost { name, token: l.token, reason }).collect()
    }

    fn expire(&mut self) -> Vec<Output> {
        if self.state != SessionState::Active {
            return Vec::new();
        }
        self.state = SessionState::Expired;
        let mut out = self.lose_all(LossReason::SessionExpired);
        out.push(Output::Expired);
        out
    }

    /// Advances time to `now`: expires the session at its deadline, drops leases past their own
    /// deadline, abandons an overdue keep-alive and starts the next one when due.
    pub fn poll(&mut self, now: Instant) -> Vec<Output> {
        if self.state != SessionState::Active {
            return Vec::new();
        }
        if now >= self.deadline {
            return self.expire();
        }
        let mut out = Vec::new();
        let overdue: Vec<Name> =
            self.leases.iter().filter(|(_, l)| now >= l.deadline).map(|(n, _)| n.clone()).collect();
        for name in overdue {
            if let Some(l) = self.leases.remove(&name) {
                // The backend may still count the term ours: never adopt it into a new handle.
                self.give_up(&name, l.token);
                out.push(Output::LeaseLost { name, token: l.token, reason: LossReason::Deadline });
            }
        }
        if let Some(sent) = self.ka_in_flight {
            if now >= later(sent, self.timing.query_timeout) {
                self.ka_in_flight = None;
                out.extend(self.keep_alive_failed(now));
            }
        }
        if self.ka_in_flight.is_none() && now >= self.next_keep_alive {
            self.ka_in_flight = Some(now);
            out.push(Output::SendKeepAlive { sent: now });
        }
        out
    }

    /// Forgets given-up terms a keep-alive sent after every operation on their name ended no
    /// longer reports (gone on the backend: no reply can carry them again), and marks the rest
    /// settled once nothing is in flight on their name. Keeps the map bounded by the names with
    /// recent activity.
    fn forget_settled_releases(&mut self, sent: Instant, now: Instant, owned: &HashMap<&Name, Token>) {
        let pending = &self.pending;
        self.released.retain(|name, r| {
            if pending.contains_key(name) {
                r.settled = None;
                return true;
            }
            match r.settled {
                Some(at) if at < sent => owned.get(name).is_some_and(|t| *t <= r.token),
                Some(_) => true,
                None => {
                    r.settled = Some(now);
                    true
                }
            }
        });
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

    fn keep_alive_failed(&mut self, now: Instant) -> Vec<Output> {
        self.failures += 1;
        self.next_keep_alive = later(now, self.timing.retry_backoff(self.failures - 1));
        vec![Output::RenewalFailed { failures: self.failures }]
    }

    /// A keep-alive sent at `sent` completed at `now` with `result`. Late replies (after the call
    /// was abandoned) are still applied: they are judged by their send instant.
    pub fn on_keep_alive(&mut self, sent: Instant, now: Instant, result: KeepAliveResult) -> Vec<Output> {
        let current = self.ka_in_flight == Some(sent);
        if current {
            self.ka_in_flight = None;
        }
        if self.state != SessionState::Active {
            return Vec::new();
        }
        match result {
            KeepAliveResult::Failed => {
                if current {
                    self.keep_alive_failed(now)
                } else {
                    Vec::new()
                }
            }
            KeepAliveResult::Reply(KeepAlive::Expired) => self.expire(),
            KeepAliveResult::Reply(KeepAlive::Alive { remaining, owned, groups }) => {
                let mut out = Vec::new();
                let old = crate::sync::reintroduced(crate::sync::Bug::LateAliveRevives); // old: judged by the reply's deadline
                if now >= if old { self.deadline.max(self.timing.deadline(sent, remaining)) } else { self.deadline } {
                    // Expiry is terminal: the session already counts as expired (token() failed,
                    // lock() said so); a late success never revives it (finding 2 of issue #14).
                    return self.expire();
                }
                let deadline = self.timing.deadline(sent, remaining);
                if current {
                    self.failures = 0;
                    self.next_keep_alive = later(sent, self.timing.renew_interval);
                }
                self.deadline = self.deadline.max(deadline);
                let owned: HashMap<&Name, Token> = owned.iter().map(|(n, t)| (n, *t)).collect();
                let judged: Vec<Name> =
                    self.leases.iter().filter(|(_, l)| l.established <= sent).map(|(n, _)| n.clone()).collect();
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
                lost.sort_by(|a, b| a.0.cmp(&b.0));
                for (name, reason) in lost {
                    if let Some(l) = self.leases.remove(&name) {
                        self.give_up(&name, l.token);
                        out.push(Output::LeaseLost { name, token: l.token, reason });
                    }
                }
                self.forget_settled_releases(sent, now, &owned);
                let mut strays: Vec<(&Name, Token)> = owned
                    .iter()
                    .map(|(n, t)| (*n, *t))
                    .filter(|(n, _)| !self.leases.contains_key(*n) && !self.pending.contains_key(*n))
                    .collect();
                strays.sort();
                out.extend(strays.into_iter().map(|(n, t)| Output::ReleaseStray { name: n.clone(), token: t }));
                out.extend(self.groups.on_report(sent, now, &groups));
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            lease_duration: Duration::from_secs(10),
            renew_interval: Duration::from_secs(3),
            drift: 0.01,
            query_timeout: Duration::from_secs(3),
        }
    }
    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }
    fn t(v: u64) -> Token {
        Token::new(v).unwrap()
    }
    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
    /// A session opened at `t0` with 10 s remaining.
    fn fresh() -> (Instant, Engine) {
        let t0 = Instant::now();
        (t0, Engine::new(timing(), t0, Duration::from_secs(10)))
    }
    /// One acquire of `a` sent and answered at `at` with `token` and 10 s remaining.
    fn one_acquire(e: &mut Engine, a: &Name, token: u64, at: Instant) -> Adoption {
        let epoch = e.begin_acquire(a);
        let r = e.on_acquired(a, t(token), at, Duration::from_secs(10), at, epoch);
        e.end_acquire(a);
        r
    }
    fn alive(remaining: Duration, owned: &[(&str, u64)]) -> KeepAliveResult {
        KeepAliveResult::Reply(KeepAlive::Alive {
            remaining,
            owned: owned.iter().map(|(a, b)| (n(a), t(*b))).collect(),
            groups: Vec::new(),
        })
    }

    #[test]
    fn deadline_is_send_instant_plus_remaining_minus_drift() {
        let t0 = Instant::now();
        let e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert_eq!(e.deadline(), t0 + ms(9_900));
        assert!(e.is_alive(t0 + ms(9_899)));
        assert!(!e.is_alive(t0 + ms(9_900)));
    }

    #[test]
    fn renews_on_schedule_and_extends_by_send_instant() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.poll(t0 + ms(2_999)).is_empty());
        assert_eq!(e.next_wakeup(), Some(t0 + ms(3_000)));
        let out = e.poll(t0 + ms(3_000));
        assert_eq!(out, vec![Output::SendKeepAlive { sent: t0 + ms(3_000) }]);
        // The reply arrives 2 s later; the deadline counts from the send instant.
        let out = e.on_keep_alive(t0 + ms(3_000), t0 + ms(5_000), alive(Duration::from_secs(10), &[]));
        assert!(out.is_empty());
        assert_eq!(e.deadline(), t0 + ms(12_900));
        assert_eq!(e.next_wakeup(), Some(t0 + ms(6_000)));
    }

    #[test]
    fn expires_at_local_deadline_when_renewals_fail_and_never_revives() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.on_acquired(&n("a"), t(1), t0, Duration::from_secs(10), t0 + ms(1), 0) == Adoption::Adopted);
        let mut now = t0;
        let mut failures = 0;
        loop {
            now += ms(100);
            let out = e.poll(now);
            for o in &out {
                if let Output::SendKeepAlive { sent } = o {
                    failures += 1;
                    let r = e.on_keep_alive(*sent, now + ms(50), KeepAliveResult::Failed);
                    assert!(matches!(r[0], Output::RenewalFailed { .. }));
                }
            }
            if out.contains(&Output::Expired) {
                assert!(out.contains(&Output::LeaseLost {
                    name: n("a"),
                    token: t(1),
                    reason: LossReason::SessionExpired
                }));
                break;
            }
            assert!(e.token(&n("a"), now).is_some());
        }
        assert!(failures >= 3, "retried {failures} times");
        assert_eq!(now, t0 + ms(9_900));
        assert_eq!(e.state(), SessionState::Expired);
        assert_eq!(e.token(&n("a"), now), None);
        // A late success does not revive it.
        assert!(e.on_keep_alive(t0 + ms(9_000), now, alive(Duration::from_secs(10), &[("a", 1)])).is_empty());
        assert_eq!(e.state(), SessionState::Expired);
        assert!(e.poll(now + ms(1)).is_empty());
        assert_eq!(e.on_acquired(&n("b"), t(2), now, Duration::from_secs(10), now, 0), Adoption::SessionEnded);
    }

    #[test]
    fn hung_keep_alive_is_abandoned_and_retried() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        let out = e.poll(t0 + ms(3_000));
        assert_eq!(out.len(), 1);
        assert_eq!(e.next_wakeup(), Some(t0 + ms(6_000)));
        let out = e.poll(t0 + ms(6_000));
        assert_eq!(out[0], Output::RenewalFailed { failures: 1 });
        assert_eq!(out.len(), 1);
        // Retry after the backoff.
        let out = e.poll(t0 + ms(6_750));
        assert_eq!(out, vec![Output::SendKeepAlive { sent: t0 + ms(6_750) }]);
        // The abandoned call's late success still extends the deadline by its own send instant.
        e.on_keep_alive(t0 + ms(3_000), t0 + ms(7_000), alive(Duration::from_secs(10), &[]));
        assert_eq!(e.deadline(), t0 + ms(12_900));
    }

    #[test]
    fn lease_missing_from_reply_is_lost_but_only_if_established_before_send() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.on_acquired(&n("a"), t(5), t0, Duration::from_secs(10), t0 + ms(10), 0) == Adoption::Adopted);
        let out = e.poll(t0 + ms(3_000));
        let Output::SendKeepAlive { sent } = out[0] else { panic!("{out:?}") };
        // "b" is acquired while the keep-alive is in flight: the reply may not list it yet.
        assert!(
            e.on_acquired(&n("b"), t(9), t0 + ms(3_010), Duration::from_secs(10), t0 + ms(3_020), 0)
                == Adoption::Adopted
        );
        let out = e.on_keep_alive(sent, t0 + ms(3_050), alive(Duration::from_secs(10), &[]));
        assert_eq!(out, vec![Output::LeaseLost { name: n("a"), token: t(5), reason: LossReason::NotOwned }]);
        assert_eq!(e.token(&n("a"), t0 + ms(3_050)), None);
        assert_eq!(e.token(&n("b"), t0 + ms(3_050)), Some(t(9)));
    }

    #[test]
    fn different_token_in_reply_means_lost() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.on_acquired(&n("a"), t(5), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
        let out = e.on_keep_alive(t0 + ms(1), t0 + ms(2), alive(Duration::from_secs(10), &[("a", 6)]));
        assert_eq!(out[0], Output::LeaseLost { name: n("a"), token: t(5), reason: LossReason::NotOwned });
        // "a" is now owned by us per the backend but not held: release it.
        assert_eq!(out[1], Output::ReleaseStray { name: n("a"), token: t(6) });
    }

    #[test]
    fn strays_are_released_unless_an_operation_is_in_flight() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        e.begin_acquire(&n("p"));
        let out = e.on_keep_alive(t0, t0 + ms(1), alive(Duration::from_secs(10), &[("p", 1), ("s", 2)]));
        assert_eq!(out, vec![Output::ReleaseStray { name: n("s"), token: t(2) }]);
        e.end_acquire(&n("p"));
        let out = e.on_keep_alive(t0, t0 + ms(2), alive(Duration::from_secs(10), &[("p", 1)]));
        assert_eq!(out, vec![Output::ReleaseStray { name: n("p"), token: t(1) }]);
    }

    #[test]
    fn expired_reply_expires_at_once() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.on_acquired(&n("a"), t(1), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
        let out = e.on_keep_alive(t0, t0 + ms(5), KeepAliveResult::Reply(KeepAlive::Expired));
        assert_eq!(out.last(), Some(&Output::Expired));
        assert_eq!(e.state(), SessionState::Expired);
    }

    #[test]
    fn a_lease_with_a_short_grant_expires_on_its_own_deadline() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.on_acquired(&n("a"), t(1), t0, ms(1_000), t0 + ms(5), 0) == Adoption::Adopted);
        assert_eq!(e.remaining(&n("a"), t0 + ms(5)), Some(ms(985)));
        let out = e.poll(t0 + ms(990));
        assert_eq!(out, vec![Output::LeaseLost { name: n("a"), token: t(1), reason: LossReason::Deadline }]);
        // A reply too late to be useful is not adopted.
        assert_eq!(e.on_acquired(&n("b"), t(1), t0, ms(1_000), t0 + ms(991), 0), Adoption::Undo);
    }

    #[test]
    fn release_and_close() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        assert!(e.on_acquired(&n("a"), t(1), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
        assert!(e.on_acquired(&n("b"), t(2), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
        assert_eq!(e.on_release(&n("a")), Some(t(1)));
        assert_eq!(e.token(&n("a"), t0), None);
        let out = e.close();
        assert_eq!(
            out,
            vec![Output::LeaseLost { name: n("b"), token: t(2), reason: LossReason::SessionClosed }, Output::Closed]
        );
        assert_eq!(e.state(), SessionState::Closed);
        assert!(e.close().is_empty());
        assert_eq!(e.next_wakeup(), None);
    }

    #[test]
    fn an_acquire_overlapping_a_release_is_not_adopted() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        let a = n("a");
        // Release in flight when the acquire is sent.
        e.begin_release(&a, t(1));
        let epoch = e.begin_acquire(&a);
        assert!(e.releasing(&a));
        assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
        e.end_acquire(&a);
        e.end_release(&a);
        // Release started and finished while the acquire was in flight.
        let epoch = e.begin_acquire(&a);
        e.begin_release(&a, t(2));
        e.end_release(&a);
        assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
        e.end_acquire(&a);
        // No release overlapping: adopted.
        let epoch = e.begin_acquire(&a);
        assert_eq!(e.on_acquired(&a, t(4), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
        e.end_acquire(&a);
        assert_eq!(e.pending(&a), 0);
    }

    #[test]
    fn a_term_once_released_is_never_adopted_again() {
        // A release of term 5 whose call ended (timed out) may still land later: an idempotent
        // re-acquire answering the same term 5 must not be adopted, a new term 6 may.
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        let a = n("a");
        e.begin_release(&a, t(5));
        e.end_release(&a);
        let epoch = e.begin_acquire(&a);
        assert_eq!(e.on_acquired(&a, t(5), t0, Duration::from_secs(10), t0, epoch), Adoption::GivenUp);
        assert_eq!(e.on_acquired(&a, t(4), t0, Duration::from_secs(10), t0, epoch), Adoption::GivenUp);
        assert_eq!(e.on_acquired(&a, t(6), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
        e.end_acquire(&a);
    }

    #[test]
    fn confirmed_releases_are_forgotten_unconfirmed_ones_are_not() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        for i in 0..100 {
            let a = n(&format!("n{i}"));
            e.begin_release(&a, t(5));
            e.end_confirmed_release(&a, t(5));
        }
        assert_eq!(e.remembered_releases(), 0, "confirmed releases leave nothing behind");
        // Unconfirmed (timed out, failed): remembered, and the term is never adopted again.
        let a = n("a");
        e.begin_release(&a, t(5));
        e.end_release(&a);
        assert_eq!(e.remembered_releases(), 1);
        // An older term's confirmation does not forget the newer one; an operation in flight keeps it.
        e.begin_release(&a, t(7));
        e.end_confirmed_release(&a, t(5));
        let epoch = e.begin_acquire(&a);
        e.begin_release(&a, t(7));
        e.end_confirmed_release(&a, t(7));
        assert_eq!(e.remembered_releases(), 1, "an acquire is still in flight");
        assert_eq!(e.on_acquired(&a, t(7), t0, Duration::from_secs(10), t0, epoch), Adoption::GivenUp);
        e.end_acquire(&a);
        e.begin_release(&a, t(7));
        e.end_confirmed_release(&a, t(7));
        assert_eq!(e.remembered_releases(), 0);
    }

    #[test]
    fn a_late_reply_confirming_the_held_term_is_kept_not_undone() {
        let t0 = Instant::now();
        let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
        let a = n("a");
        let old = e.begin_acquire(&a);
        let new = e.begin_acquire(&a);
        assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, new), Adoption::Adopted);
        e.end_acquire(&a);
        // The older attempt answers too late to be of use (its remaining ran out before the reply
        // came), with the very term held.
        let late = t0 + Duration::from_secs(1);
        let short = Duration::from_millis(10);
        assert_eq!(e.on_acquired(&a, t(3), t0, short, late, old), Adoption::Kept);
        assert_eq!(e.token(&a, late), Some(t(3)), "still held");
        // Another term that late is undone.
        assert_eq!(e.on_acquired(&a, t(4), t0, short, late, old), Adoption::Undo);
        e.end_acquire(&a);
    }

    #[test]
    fn drift_shortens_the_deadline() {
        let t0 = Instant::now();
        let mut tm = timing();
        tm.drift = 0.1;
        let e = Engine::new(tm, t0, Duration::from_secs(10));
        assert_eq!(e.deadline(), t0 + ms(9_000));
        // Remaining above the lease duration is capped.
        let e = Engine::new(timing(), t0, Duration::from_secs(100));
        assert_eq!(e.deadline(), t0 + ms(9_900));
    }

    #[test]
    fn resign_racing_an_adoption_cannot_free_a_held_term() {
        // Finding 1: a resign gives up L:T locally, another handle adopts T (idempotent acquire),
        // then the resign's release of T is sent: the adopted term must not stay held.
        let (t0, mut e) = fresh();
        let a = n("a");
        assert_eq!(e.on_acquired(&a, t(5), t0, Duration::from_secs(10), t0, 0), Adoption::Adopted);
        assert_eq!(e.on_release(&a), Some(t(5)));
        let epoch = e.begin_acquire(&a);
        assert_eq!(e.on_acquired(&a, t(5), t0, Duration::from_secs(10), t0 + ms(1), epoch), Adoption::Adopted);
        e.begin_release(&a, t(5));
        assert_eq!(e.token(&a, t0 + ms(2)), None, "a term being released is not held");
        e.end_acquire(&a);
    }

    #[test]
    fn a_keep_alive_reply_after_the_local_deadline_does_not_revive_the_session() {
        // Finding 2: a retry sent at D - 200 ms whose Alive is applied at D + 20 ms.
        let (_, mut e) = fresh();
        let d = e.deadline();
        let out = e.on_keep_alive(d - ms(200), d + ms(20), alive(Duration::from_secs(10), &[]));
        assert_eq!(out, vec![Output::Expired]);
        assert_eq!(e.state(), SessionState::Expired);
        assert!(!e.is_alive(d + ms(21)));
    }

    #[test]
    fn a_keep_alive_reply_never_extends_a_lease_past_its_own_deadline() {
        let (t0, mut e) = fresh();
        let a = n("a");
        // A short grant: the lease's own deadline is t0 + 990 ms.
        assert_eq!(e.on_acquired(&a, t(1), t0, ms(1_000), t0, 0), Adoption::Adopted);
        let out = e.on_keep_alive(t0 + ms(900), t0 + ms(1_000), alive(Duration::from_secs(10), &[("a", 1)]));
        assert_eq!(
            out,
            vec![
                Output::LeaseLost { name: a.clone(), token: t(1), reason: LossReason::Deadline },
                // Still ours on the backend, no longer held: released.
                Output::ReleaseStray { name: a.clone(), token: t(1) },
            ]
        );
        assert_eq!(e.token(&a, t0 + ms(1_000)), None);
    }

    #[test]
    fn a_term_lost_at_its_deadline_is_not_adopted_into_a_second_lease() {
        // Finding 9: after a deadline loss the backend may still count the term ours; a re-lock
        // answering that same term must not hand it to a second handle (dropping the old handle
        // would release it under the new one).
        let (t0, mut e) = fresh();
        let a = n("a");
        assert_eq!(e.on_acquired(&a, t(1), t0, ms(1_000), t0, 0), Adoption::Adopted);
        let out = e.poll(t0 + ms(990));
        assert_eq!(out, vec![Output::LeaseLost { name: a.clone(), token: t(1), reason: LossReason::Deadline }]);
        let now = t0 + ms(1_000);
        assert_eq!(one_acquire(&mut e, &a, 1, now), Adoption::GivenUp);
        // A new term is adopted.
        assert_eq!(one_acquire(&mut e, &a, 2, now), Adoption::Adopted);
    }

    #[test]
    fn two_acquires_answering_the_same_term_adopt_it_once() {
        // Two callers' acquires (two threads' lock(), or a lock() and a campaign attempt) both
        // answered by the idempotent backend with term 3: only the first becomes a handle.
        let (t0, mut e) = fresh();
        let a = n("a");
        let first = e.begin_acquire(&a);
        let second = e.begin_acquire(&a);
        assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, first), Adoption::Adopted);
        assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, second), Adoption::Kept);
        assert_eq!(e.token(&a, t0), Some(t(3)));
    }

    #[test]
    fn timing_with_a_drift_of_one_or_more_or_nan_never_panics() {
        for drift in [1.0, 1.5, f64::NAN, -0.5, f64::INFINITY] {
            let mut tm = timing();
            tm.drift = drift;
            let t0 = Instant::now();
            let d = tm.deadline(t0, Duration::from_secs(10));
            assert!(d <= t0 + Duration::from_secs(10), "drift {drift}");
        }
        let mut tm = timing();
        tm.lease_duration = Duration::MAX;
        let t0 = Instant::now();
        assert!(tm.deadline(t0, Duration::MAX) > t0 + Duration::from_secs(1_000_000));
    }

    #[test]
    fn a_released_term_being_landed_is_reported_as_given_up_not_as_someone_elses() {
        // Finding 9: try_lock said "held by another" when only this session's own release of the
        // term was still landing.
        let (t0, mut e) = fresh();
        let a = n("a");
        e.begin_release(&a, t(5));
        e.end_release(&a);
        assert_eq!(one_acquire(&mut e, &a, 5, t0), Adoption::GivenUp);
    }

    #[test]
    fn a_campaign_cannot_start_while_a_lock_of_the_name_is_in_flight() {
        let (t0, mut e) = fresh();
        let a = n("a");
        let epoch = e.begin_acquire(&a);
        assert_eq!(e.start_campaign(&a, t0), Err(CampaignConflict::Acquiring));
        assert_eq!(e.on_acquired(&a, t(1), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
        e.end_acquire(&a);
        assert_eq!(e.start_campaign(&a, t0), Err(CampaignConflict::Held));
        assert_eq!(e.start_campaign(&n("b"), t0), Ok(()));
        assert_eq!(e.start_campaign(&n("b"), t0), Err(CampaignConflict::Campaigning));
        // A release in flight does not block a campaign (its attempts wait for it).
        e.begin_release(&n("c"), t(1));
        assert_eq!(e.start_campaign(&n("c"), t0), Ok(()));
    }

    #[test]
    fn an_attempt_answering_after_its_campaign_ended_is_undone() {
        let (t0, mut e) = fresh();
        let a = n("a");
        e.start_campaign(&a, t0).unwrap();
        let epoch = e.begin_acquire(&a);
        assert_eq!(e.stop_campaign(&a, None), None, "nothing held yet");
        assert_eq!(e.on_campaign_acquired(&a, t(1), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
        e.end_acquire(&a);
        assert_eq!(e.token(&a, t0), None);
    }

    #[test]
    fn resign_gives_up_the_held_term_in_the_same_transition() {
        let (t0, mut e) = fresh();
        let a = n("a");
        e.start_campaign(&a, t0).unwrap();
        let epoch = e.begin_acquire(&a);
        assert_eq!(e.on_campaign_acquired(&a, t(4), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
        e.end_acquire(&a);
        assert_eq!(e.stop_campaign(&a, Some(t(4))), Some(t(4)));
        assert_eq!(e.token(&a, t0), None);
        assert!(e.releasing(&a));
        // A lock racing the resign finds the term given up.
        assert_eq!(one_acquire(&mut e, &a, 4, t0), Adoption::GivenUp);
        e.end_confirmed_release(&a, t(4));
        // After a deadline loss the election's term is still released on resign.
        e.start_campaign(&a, t0).unwrap();
        assert_eq!(e.stop_campaign(&a, Some(t(3))), Some(t(3)));
        e.end_release(&a);
    }

    #[test]
    fn unconfirmed_releases_are_forgotten_once_a_later_keep_alive_shows_them_gone() {
        let (t0, mut e) = fresh();
        for i in 0..50 {
            let a = n(&format!("n{i}"));
            e.begin_release(&a, t(5));
            e.end_release(&a);
        }
        e.begin_release(&n("still"), t(2));
        e.end_release(&n("still"));
        assert_eq!(e.remembered_releases(), 51);
        // The first keep-alive after they ended marks them settled; one sent after that which no
        // longer lists them forgets them. A term still listed stays remembered (it is a stray).
        e.on_keep_alive(t0 + ms(1), t0 + ms(2), alive(Duration::from_secs(10), &[("still", 2)]));
        assert_eq!(e.remembered_releases(), 51);
        let out = e.on_keep_alive(t0 + ms(3), t0 + ms(4), alive(Duration::from_secs(10), &[("still", 2)]));
        assert_eq!(out, vec![Output::ReleaseStray { name: n("still"), token: t(2) }]);
        assert_eq!(e.remembered_releases(), 1);
    }

    #[test]
    fn bad_timings_are_refused_with_a_clear_error() {
        let s = Duration::from_secs(1);
        for drift in [1.0, -0.1, f64::NAN] {
            let err = Timing::new(s, s, drift, s).unwrap_err();
            assert!(err.to_string().contains("drift"), "{err}");
        }
        assert!(Timing::new(Duration::ZERO, s, 0.01, s).is_err());
        assert!(Timing::new(s, s, 0.01, s).is_ok());
    }
}
