//! The lease guard.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;
use crate::runtime::SessionInner;
use crate::types::{Name, SessionId, Token};

/// A held lease: the guard you consult before every write to the protected resource.
///
/// Call [`token`](Lease::token) immediately before each write and pass the token to the resource,
/// so that it can reject writes from a stale holder (one with a smaller token). `token()` does no
/// I/O: it fails as soon as the lease may no longer be ours — lost in a keep-alive reply, past its
/// local deadline (even if the renewal thread is stuck in a hung backend call), or released.
///
/// Dropping the guard releases the lease on a background worker without blocking the caller (after
/// the session's close it sends nothing: the close freed the lease).
pub struct Lease {
    session: Arc<SessionInner>,
    name: Name,
    token: Token,
    released: bool,
}

impl Lease {
    pub(crate) fn new(session: Arc<SessionInner>, name: Name, token: Token) -> Lease {
        Lease { session, name, token, released: false }
    }

    /// The guard of the term a lock call on `session` won (`term`: the token the runtime
    /// returned, `None` when the call did not win). The runtime returns terms and the handle
    /// layer builds the guards, so the runtime names no handle; call this right after the call,
    /// with nothing in between that could drop the term unreleased.
    pub(crate) fn of_term(session: &Arc<SessionInner>, name: &Name, term: Option<Token>) -> Option<Lease> {
        term.map(|token| Lease::new(session.clone(), name.clone(), token))
    }

    /// The lease name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The holding session's id.
    pub fn session_id(&self) -> &SessionId {
        &self.session.id
    }

    /// The fencing token of this term, if the lease is still held.
    ///
    /// # Errors
    /// `LeaseLost` once the lease may no longer be ours (the message says why).
    pub fn token(&self) -> Result<Token> {
        self.session.lease_token(&self.name, self.token)
    }

    /// The token this term was granted with, whether or not it is still held (for logs; use
    /// [`token`](Lease::token) to guard writes).
    pub fn granted_token(&self) -> Token {
        self.token
    }

    /// Time until the lease's local deadline, or `None` once it is no longer held.
    pub fn remaining(&self) -> Option<Duration> {
        self.session.lease_remaining(&self.name, self.token)
    }

    /// True while [`token`](Lease::token) would succeed.
    pub fn is_held(&self) -> bool {
        self.token().is_ok()
    }

    /// Releases the lease (the token is kept by the backend for the next term). `token()` fails
    /// from the moment this is called. Waits at most the query timeout: on a backend that bounds
    /// its calls itself ([`LeaseBackend::call_bound`](crate::backend::LeaseBackend::call_bound)) the release
    /// runs on the calling thread and ends with the backend's own timeout; otherwise it runs on a
    /// worker thread that the caller stops waiting for at the query timeout. Once the session is
    /// closed or expired this makes no call and returns `Ok`: the session's close frees its leases.
    ///
    /// # Errors
    /// `Timeout` when a release on a worker did not finish in time (it goes on in the background);
    /// the backend's error otherwise (`Unavailable` when its own timeout ended the call). Either way
    /// the lease is no longer ours locally.
    pub fn release(mut self) -> Result<()> {
        self.released = true;
        self.session.release_lease(&self.name, self.token, true)
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if !self.released {
            let _ = self.session.release_lease(&self.name, self.token, false);
        }
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("name", &self.name)
            .field("token", &self.token)
            .field("session", &self.session.id)
            .field("held", &self.is_held())
            .finish()
    }
}
