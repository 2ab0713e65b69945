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
    /// True when the session is alive and its margin is above one renew interval: what a
    /// readiness check should ask. A healthy session renews well before its deadline; an unhealthy
    /// but alive one has missed at least one renewal and may lose everything within the margin.
    pub fn is_healthy(&self) -> bool {
        self.state == SessionState::Active && self.margin.is_some_and(|m| m > self.renew_interval)
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
