//! A hook the application gives a session to be told what happens to it, off every internal lock:
//! [`SessionListener`] (r2d2's `HandleEvent` style — every method has an empty default, implement
//! what you need), set with [`SessionOptionsBuilder::listener`](crate::options::SessionOptionsBuilder::listener).
//!
//! **Delivery.** The session puts what happened into a bounded queue of [`QUEUE`] entries, without
//! blocking and without running any application code where it decides it (under its locks); one
//! thread per session — `simba-listener` — takes them out in order and calls the listener. When the
//! queue is full (a listener slower than the session), what does not fit is dropped and counted, and
//! the listener is told how many were dropped ([`SessionListener::dropped`]) before the next
//! call. So a slow listener, or one that blocks forever, never delays a renewal, a loss or
//! anything else the session does; it only misses what it could not keep up with, and knows it.
//!
//! **Panics.** A listener call that panics is caught on the listener thread: the first panic of a
//! session is logged at `error` (the rest at `debug`), and the next calls go on.
//!
//! ```
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//! use std::time::Duration;
//! use simba::listener::SessionListener;
//! use simba::{MemoryBackend, Name, Session, SessionId, SessionOptions, Token};
//!
//! #[derive(Default)]
//! struct Acquires(AtomicU32);
//!
//! impl SessionListener for Acquires {
//!     fn acquired(&self, _session: &SessionId, _name: &Name, _token: Token) {
//!         self.0.fetch_add(1, Ordering::SeqCst);
//!     }
//! }
//!
//! # fn main() -> simba::Result<()> {
//! let acquires = Arc::new(Acquires::default());
//! let options = SessionOptions::builder()
//!     .lease_duration(Duration::from_secs(2))
//!     .listener(acquires.clone())
//!     .build()?;
//! let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
//! drop(session.lock("report")?);
//! session.close()?;
//! # let end = std::time::Instant::now() + Duration::from_secs(10);
//! # while acquires.0.load(Ordering::SeqCst) == 0 && std::time::Instant::now() < end {
//! #     std::thread::sleep(Duration::from_millis(5));
//! # }
//! assert_eq!(acquires.0.load(Ordering::SeqCst), 1); // told on the listener thread, soon after
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::state::{LossReason, SessionEvent};
use crate::types::{Name, SessionId, Token};

/// How many things a session's listener queue holds before it drops (and counts) what follows.
pub const QUEUE: usize = 1024;

/// Told what happens to a session, on the session's listener thread, in order (see the
/// [module docs](crate::listener)). Every method has an empty default.
pub trait SessionListener: Send + Sync + 'static {
    /// A keep-alive renewed the session: it took `latency` (sent to reply), and the session's
    /// local deadline is now `margin` away.
    fn renewed(&self, _session: &SessionId, _latency: Duration, _margin: Duration) {}

    /// A keep-alive failed (or was abandoned at the query timeout): `failures` in a row; `error`
    /// is the backend's words when the call returned an error.
    fn renewal_failed(&self, _session: &SessionId, _failures: u32, _error: Option<&str>) {}

    /// The session took a term of `name` (a lock, a leadership, a permit's slot, a partition).
    fn acquired(&self, _session: &SessionId, _name: &Name, _token: Token) {}

    /// The session gave up its term of `name` (a release; the backend keeps the token).
    fn released(&self, _session: &SessionId, _name: &Name, _token: Token) {}

    /// The session lost its term of `name`, for `reason`.
    fn lost(&self, _session: &SessionId, _name: &Name, _token: Token, _reason: LossReason) {}

    /// Every [`SessionEvent`] of the session, as [`Session::events`](crate::Session::events)
    /// delivers it (losses, renewal failures, membership losses, expiry, close), after the
    /// specific call above where there is one.
    fn event(&self, _session: &SessionId, _event: &SessionEvent) {}

    /// `count` things happened that the full queue could not take: they were dropped, before
    /// the call that follows this one.
    fn dropped(&self, _session: &SessionId, _count: u64) {}
}

/// A listener in [`SessionOptions`](crate::SessionOptions): compared by identity (two options are
/// equal when they hold the same listener, the same `Arc`), shown in `Debug` as present.
#[derive(Clone)]
pub(crate) struct Listener(pub(crate) Arc<dyn SessionListener>);

impl PartialEq for Listener {
    fn eq(&self, other: &Listener) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl fmt::Debug for Listener {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionListener")
    }
}

/// What the session tells its listener (queued).
#[derive(Debug, Clone)]
pub(crate) enum Told {
    Renewed { latency: Duration, margin: Duration },
    Acquired { name: Name, token: Token },
    Released { name: Name, token: Token },
    Event { event: SessionEvent, error: Option<String> },
}

impl Told {
    /// Calls the listener's methods for this.
    pub(crate) fn deliver(&self, listener: &dyn SessionListener, session: &SessionId) {
        match self {
            Told::Renewed { latency, margin } => listener.renewed(session, *latency, *margin),
            Told::Acquired { name, token } => listener.acquired(session, name, *token),
            Told::Released { name, token } => listener.released(session, name, *token),
            Told::Event { event, error } => {
                match event {
                    SessionEvent::LeaseLost { name, token, reason } => listener.lost(session, name, *token, *reason),
                    SessionEvent::RenewalFailed { failures } => {
                        listener.renewal_failed(session, *failures, error.as_deref())
                    }
                    _ => {}
                }
                listener.event(session, event);
            }
        }
    }
}
