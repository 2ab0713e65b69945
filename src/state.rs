//! The session's and a lease's user-facing states (decided by the engine, shown to users).

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
