//! What one engine transition returns: the [`SessionEvent`]s it reports and the [`Command`]s it
//! asks for, together in one [`Step`]. The engine reports the session's events themselves (the
//! user-facing type, `crate::state`), so there is one list of them.
//!
//! The split is the runtime's contract: it forwards every event (a session event and a log line,
//! under the engine lock so they stay in order) and performs every command (a backend call, after
//! the lock is released), and decides nothing itself. A command's bookkeeping — a release counted
//! in flight, a re-join counted as a join — is already done by the transition that returned it.

use std::time::Instant;

use crate::state::SessionEvent;
use crate::types::{Name, Token};

/// An instruction from the engine: a backend call to make. The engine has already recorded it as
/// in flight; the runtime reports its end with the matching transition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Send a keep-alive now (recorded as in flight, sent at `sent`); pass the reply to
    /// [`Engine::on_keep_alive`](super::Engine::on_keep_alive) with that instant.
    SendKeepAlive {
        /// The instant the engine recorded as the send instant.
        sent: Instant,
    },
    /// The backend reports `name` owned but the client does not hold it: release that term
    /// (counted in flight), then call [`Engine::end_release`](super::Engine::end_release) or
    /// [`Engine::end_confirmed_release`](super::Engine::end_confirmed_release).
    ReleaseStray {
        /// The lease to release.
        name: Name,
        /// The term the backend reported.
        token: Token,
    },
    /// An acquire reply was not adopted (too late, raced a release, a term given up, or nobody
    /// waits for it any more): release the term it brought (counted in flight), then end the
    /// release as for [`ReleaseStray`](Command::ReleaseStray).
    Undo {
        /// The lease.
        name: Name,
        /// The term the reply carried.
        token: Token,
    },
    /// Close the expired session on the backend, best effort (it frees everything at once rather
    /// than at the backend's own expiry).
    CloseSession,
    /// Join `group` again on the backend (already counted as a join in flight), then call
    /// [`Engine::end_rejoin`](super::Engine::end_rejoin).
    Rejoin {
        /// The group.
        group: Name,
    },
    /// The backend lists the session in `group`, which it does not hold (a join that landed after
    /// its call ended): leave it (already counted in flight), then call
    /// [`Engine::end_leave`](super::Engine::end_leave).
    LeaveStray {
        /// The group.
        group: Name,
    },
}

/// The result of one engine transition: its events, in the order they happened, and its
/// commands, in the order they were decided.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[must_use = "forward the events and perform the commands"]
pub struct Step {
    /// Reports, to forward (in order).
    pub events: Vec<SessionEvent>,
    /// Backend calls, to perform (in order).
    pub commands: Vec<Command>,
}

impl Step {
    /// A step with nothing to report or do.
    pub fn none() -> Step {
        Step::default()
    }

    /// True when the step reports nothing and asks for nothing.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.events.is_empty() && self.commands.is_empty()
    }

    pub(super) fn event(&mut self, event: SessionEvent) {
        self.events.push(event);
    }

    pub(super) fn command(&mut self, command: Command) {
        self.commands.push(command);
    }

    /// Appends `other`'s events and commands after this step's.
    pub(super) fn append(&mut self, other: Step) {
        self.events.extend(other.events);
        self.commands.extend(other.commands);
    }
}
