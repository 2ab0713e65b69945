//! Snapshots of a session for operators and health checks: what it holds and how close it is to
//! losing it ([`SessionStatus`], from [`Session::status`](crate::Session::status)). Taking one does
//! no I/O: it reads the session's local state under its lock, so a health endpoint may call it as
//! often as it likes, also while the backend hangs.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use simba::{MemoryBackend, Session, SessionOptions};
//!
//! # fn main() -> simba::Result<()> {
//! let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
//! let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
//! let lease = session.lock("report")?;
//! let status = session.status();
//! assert!(status.is_healthy());
//! assert_eq!(status.leases[0].name.as_str(), "report");
//! assert_eq!(status.leases[0].token, lease.token()?);
//! # Ok(())
//! # }
//! ```
//!
//! With the `serde` feature every status is `serde::Serialize`, in the versioned JSON schema of
//! [`json`] (for health endpoints and `simba`'s `--json`).

#[cfg(feature = "serde")]
pub mod json;

use std::time::Duration;

use crate::state::SessionState;
use crate::types::{Name, SessionId, Token};

/// A snapshot of a session: its state, the margin left before its local deadline, its renewals,
/// and everything it holds. See the [module docs](crate::status).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SessionStatus {
    /// The session.
    pub session: SessionId,
    /// The backend's short name, e.g. `"redis"`.
    pub backend: &'static str,
    /// The session's state.
    pub state: SessionState,
    /// Time left until the local deadline (`None` once the session ended or the deadline passed).
    /// The session renews every [`renew_interval`](SessionStatus::renew_interval); a margin below
    /// that means renewals are failing or slow.
    pub margin: Option<Duration>,
    /// The lease duration the session asks for.
    pub lease_duration: Duration,
    /// How often it renews.
    pub renew_interval: Duration,
    /// The drift the session allows for (a fraction of every remaining time it is given).
    pub drift: f64,
    /// The clock drift observed against the backend over the last renewals (`None` until two
    /// renewals in a row told it, and on a backend whose renewals do not say what they found
    /// left: see [`ObservedDrift`]). Compare it with [`drift`](SessionStatus::drift).
    pub observed_drift: Option<ObservedDrift>,
    /// The last keep-alive that returned (`None` before the first).
    pub last_renewal: Option<Renewal>,
    /// How long the keep-alive in flight has been waiting for its reply, if one is (one that
    /// outlives the query timeout is abandoned and counted as a failure).
    pub renewal_in_flight: Option<Duration>,
    /// Keep-alives that failed in a row since the last that succeeded (a keep-alive abandoned at
    /// the query timeout counts).
    pub consecutive_failures: u32,
    /// Why keep-alives fail, while they fail: the backend's words, or that they did not answer
    /// within the query timeout.
    pub last_error: Option<String>,
    /// Every held lease, semaphore permit, partition and leadership, by name.
    pub leases: Vec<HeldLease>,
    /// The elections this session campaigns in (leading or not), by name.
    pub campaigns: Vec<Name>,
    /// The groups this session is a member of, by name.
    pub memberships: Vec<Name>,
    /// Blocking waits going on now (`lock`, a semaphore's `acquire`), by the name waited for,
    /// with how many threads wait for it.
    pub waiters: Vec<(Name, u32)>,
}

impl SessionStatus {
    /// True when the session is alive, its margin is above one renew interval, and no observed
    /// clock drift [exceeds](ObservedDrift::exceeds) the `drift` setting: what a readiness check
    /// should ask. A healthy session renews well before its deadline; an unhealthy but alive one
    /// has missed at least one renewal and may lose everything within the margin, or runs on a
    /// clock slower against the backend's than its local deadlines allow for.
    pub fn is_healthy(&self) -> bool {
        self.state == SessionState::Active
            && self.margin.is_some_and(|m| m > self.renew_interval)
            && !self.observed_drift.is_some_and(|d| d.exceeds(self.drift))
    }
}

/// The clock drift a session observed against its backend (from the time each renewal found
/// left on the backend: [`KeepAlive::Alive::remaining_before`](crate::backend::KeepAlive)), over
/// up to its last 16 pairs of renewals in a row.
///
/// The drift is `1 − client elapsed / backend elapsed`: positive when the client's monotonic clock
/// runs slower than the backend's. The session's local deadlines allow for a positive drift up to
/// its `drift` setting (a term whose backend time left is `r` ends locally after `r × (1 − drift)`
/// by the client's clock); a negative drift (the client's clock running faster) only ends terms
/// early. Each renewal ran somewhere within its round trip, which bounds how far the true value
/// can be from the estimate: [`uncertainty`](ObservedDrift::uncertainty).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct ObservedDrift {
    /// The drift estimated over the window.
    pub estimate: f64,
    /// How far the true drift can be from `estimate`, either way.
    pub uncertainty: f64,
    /// The backend time the window covers.
    pub window: Duration,
    /// The pairs of renewals the window covers.
    pub renewals: u32,
}

impl ObservedDrift {
    /// True when even the smallest drift the window allows is above `drift`: the client's clock
    /// runs slower against the backend's than the setting allows for, and a local deadline may
    /// come after the backend already expired the term. Raise the setting or fix the clock.
    pub fn exceeds(&self, drift: f64) -> bool {
        self.estimate - self.uncertainty > drift
    }
}

/// A snapshot of a [`Coordinator`](crate::Coordinator) (from
/// [`Coordinator::status`](crate::Coordinator::status)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct CoordinatorStatus {
    /// The current session's status (`None` while a replacement is being opened, or after close).
    pub session: Option<SessionStatus>,
    /// How many times the session was replaced.
    pub replacements: u32,
    /// The last replacement's gap: from noticing the loss to the new session being ready.
    pub last_gap: Option<Duration>,
}

impl CoordinatorStatus {
    /// True when there is a current session and it [is healthy](SessionStatus::is_healthy).
    pub fn is_healthy(&self) -> bool {
        self.session.as_ref().is_some_and(SessionStatus::is_healthy)
    }
}

/// A snapshot of a partition set's member (from
/// [`Partitions::status`](crate::partitions::Partitions::status)).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct PartitionsStatus {
    /// The set's name.
    pub name: Name,
    /// The number of partitions.
    pub count: u32,
    /// The assignment generation.
    pub generation: u64,
    /// The members this member counts (itself included), sorted.
    pub members: Vec<SessionId>,
    /// The partitions it owns, by index.
    pub owned: Vec<OwnedPartition>,
}

/// An owned partition in a [`PartitionsStatus`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct OwnedPartition {
    /// The partition.
    pub index: u32,
    /// The term's token.
    pub token: Token,
    /// Time until the term's local deadline (`None`: no longer valid).
    pub remaining: Option<Duration>,
    /// Time left of the drain, while the partition is being revoked.
    pub revoking: Option<Duration>,
}

/// The last keep-alive that returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Renewal {
    /// How long ago it returned.
    pub ago: Duration,
    /// How long it took, from sending to its reply.
    pub latency: Duration,
    /// What it returned.
    pub outcome: RenewalOutcome,
}

/// What a keep-alive returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RenewalOutcome {
    /// The session was renewed.
    Renewed,
    /// The call failed (retried until the local deadline).
    Failed,
    /// The backend said the session is expired.
    Expired,
}

/// A held lease term.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HeldLease {
    /// The lease name (a semaphore slot's or a partition's reserved name for those).
    pub name: Name,
    /// What the lease is: a lock, a semaphore permit, a partition.
    pub kind: LeaseKind,
    /// The term's token.
    pub token: Token,
    /// Time until the term's local deadline (`None`: no longer valid).
    pub remaining: Option<Duration>,
}

/// What a held lease is, from its name.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeaseKind {
    /// A lock or an election's term.
    Lease,
    /// Slot `slot` of semaphore `semaphore`.
    Permit {
        /// The semaphore.
        semaphore: Name,
        /// The slot.
        slot: u32,
    },
    /// Partition `index` of partition set `set`.
    Partition {
        /// The partition set.
        set: Name,
        /// The partition.
        index: u32,
    },
}
