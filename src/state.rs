//! The session's and a lease's user-facing states and the session's events: decided by the
//! engine, carried out by the runtime, shown to users through the handles. Below all three (it
//! imports only `types`), re-exported at the crate root.

use crate::types::{Name, Token};

/// Something that happened to a session. Sent in order on every receiver from
/// [`Session::events`](crate::Session::events); receivers that fall behind never slow the session down.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// A lease is lost; its `token()` already fails. A lost semaphore permit is reported as its
    /// slot's lease, `simba.sem:<semaphore>:<slot>` ([`semaphore::slot_of`](crate::semaphore::slot_of)
    /// maps the name back).
    LeaseLost {
        /// The lease.
        name: Name,
        /// The lost term's token.
        token: Token,
        /// Why.
        reason: LossReason,
    },
    /// A keep-alive failed; the session retries until its local deadline.
    RenewalFailed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// A membership is missing on the backend although the session holds it (a leave that
    /// reached the server late, a failover that lost the join). The session re-joins it at once,
    /// and at every renewal until it is back; meanwhile `is_member()` is false.
    MembershipLost {
        /// The group.
        group: Name,
    },
    /// A lost membership is back on the backend.
    MembershipRestored {
        /// The group.
        group: Name,
    },
    /// The session expired. Terminal: it is never used again.
    Expired,
    /// The session was closed by the application. Terminal.
    Closed,
}

/// Lifecycle of a session, as the client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SessionState {
    /// Renewed and usable.
    Active,
    /// Not renewed in time, or the backend said so. Terminal.
    Expired,
    /// Closed by the application. Terminal.
    Closed,
}

/// Why a lease stopped being held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum LossReason {
    /// A keep-alive reply no longer listed it (taken over, or deleted by someone else).
    NotOwned,
    /// Its local deadline passed without a renewal confirming it.
    Deadline,
    /// The session expired.
    SessionExpired,
    /// The session was closed.
    SessionClosed,
}

impl std::fmt::Display for SessionState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            SessionState::Active => "active",
            SessionState::Expired => "expired",
            SessionState::Closed => "closed",
        })
    }
}

impl std::fmt::Display for LossReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LossReason::NotOwned => "no longer owned on the backend",
            LossReason::Deadline => "its local deadline passed",
            LossReason::SessionExpired => "the session expired",
            LossReason::SessionClosed => "the session was closed",
        })
    }
}
