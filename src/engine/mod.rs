//! The session engine's decisions, as a state machine with time as an explicit input.
//!
//! No threads, no I/O, no clock reads: the renewal thread (and the deterministic simulation) feed it
//! instants and backend replies. Every transition that can report something or ask for a backend
//! call returns a [`Step`]: the [`SessionEvent`](crate::SessionEvent)s to forward (the session's
//! events themselves: one list of them) and the [`Command`]s to perform (already recorded as in
//! flight). Everything the SPEC §4 asks of the engine is decided here:
//!
//! - **local deadline** (`timing.rs`): a successful call *sent* at `t` that returned remaining `r`
//!   extends the deadline to `t + r × (1 − drift)`; ownership is judged only against it;
//! - **keep-alive schedule** (`keep_alive.rs`): every `renew_interval`, retried with a short
//!   backoff after a failure, a call in flight longer than `query_timeout` is abandoned (its late
//!   result is still usable, because it is judged by its send instant);
//! - **loss** (`keep_alive.rs`): a lease missing from a keep-alive reply (for a keep-alive sent
//!   after the lease was established) is lost at once; at the local deadline the session is
//!   expired locally, every lease is lost, and the session is never used again; an `Expired`
//!   reply has the same effect at once;
//! - **strays** (`keep_alive.rs`): a lease the backend reports owned that the client does not hold
//!   and has no operation in flight for (e.g. an acquire whose reply was lost) is released;
//! - **adoption** (`leases.rs`): an acquire reply is adopted, kept (it confirms the held term) or
//!   undone (too late, raced a release, a term given up), and its operation ended, in one
//!   transition; a term given up is never adopted again while a release of it may land;
//! - **campaigns** (`campaigns.rs`): each campaign has its own id; an attempt is sent, and its
//!   answer adopted, only while its own campaign goes on (asked when it is about to send, so an
//!   attempt that starts late after a resign sends nothing); a resign ends the campaign and gives
//!   up its term in one transition;
//! - **memberships** (`groups.rs`): a joined group missing from a keep-alive's report is lost and
//!   re-joined; a reported group the session does not hold is left again;
//! - **observed clock drift** (`drift.rs`): how fast the client's clock ran against the backend's
//!   over the last renewals, from the time each renewal found left on the backend.
//!
//! The files depend on `mod.rs` (the [`Engine`] itself) and on the leaves `timing.rs` and
//! `step.rs`; `keep_alive.rs` and `campaigns.rs` use `leases.rs`, nothing uses them back.

mod campaigns;
mod drift;
mod groups;
mod keep_alive;
mod leases;
pub(crate) mod partitions;
mod step;
#[cfg(test)]
mod tests;
mod timing;

use std::collections::HashMap;
use std::time::{Duration, Instant};

pub use campaigns::CampaignConflict;
pub use keep_alive::KeepAliveResult;
pub use leases::{AcquireCall, Adoption, CampaignId, NotSent};
use leases::{LeaseEntry, Released};
pub use step::{Command, Step};
pub use timing::Timing;
pub(crate) use timing::{deadline_after, deadline_basis, later};

use crate::state::SessionState;
use crate::status::ObservedDrift;
use crate::types::{Name, Token};

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
    /// Per name with an acquire in flight and no held term of that token: the term a keep-alive
    /// reply listed meanwhile and the deadline that reply gave it. An acquire measures its term's
    /// time left when it runs; a keep-alive applied before the acquire's reply may have renewed
    /// the term since, and the adopted term keeps that renewal (engine case B of issue #36).
    listed_while_acquiring: HashMap<Name, (Token, Instant)>,
    /// The campaign going on per name: an attempt is sent, and its answer adopted (the session
    /// then leads that term), only while its own campaign is the one in here.
    campaigns: HashMap<Name, CampaignId>,
    /// The last campaign id handed out.
    last_campaign: u64,
    ka_in_flight: Option<Instant>,
    next_keep_alive: Instant,
    failures: u32,
    groups: groups::Groups,
    drift: drift::DriftMeter,
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
            listed_while_acquiring: HashMap::new(),
            campaigns: HashMap::new(),
            last_campaign: 0,
            ka_in_flight: None,
            next_keep_alive: later(sent, timing.renew_interval),
            failures: 0,
            groups: groups::Groups::default(),
            drift: drift::DriftMeter::default(),
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

    /// Keep-alives that failed in a row since the last that returned.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// The clock drift observed over the last renewals (`None` until two renewals in a row said
    /// what they found left, or when the backend does not say): see [`ObservedDrift`].
    pub fn observed_drift(&self) -> Option<ObservedDrift> {
        self.drift.observed()
    }

    /// When the keep-alive in flight was sent, if one is (an abandoned one is not).
    pub fn keep_alive_in_flight(&self) -> Option<Instant> {
        self.ka_in_flight
    }

    /// The names campaigned for now.
    pub fn campaigning(&self) -> impl Iterator<Item = &Name> {
        self.campaigns.keys()
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
}
