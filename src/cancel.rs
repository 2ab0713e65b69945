//! The caller's side of a cancellable wait: the [`Cancel`] token and what an observer of the wait
//! is told after each attempt ([`Attempt`]). The wait itself is the runtime's one wait loop
//! (`runtime/wait.rs`), used by [`Session::lock_cancellable`](crate::Session::lock_cancellable)
//! and [`Semaphore::acquire_cancellable`](crate::semaphore::Semaphore::acquire_cancellable).

use std::fmt;
use std::sync::Arc;

use crate::error::Error;
use crate::sync::{bounded, Mutex, Receiver, Sender};

/// A cancellation token for a blocking wait: [`cancel`](Cancel::cancel) it from any thread (a
/// signal handler's thread, a UI, a shutdown hook) and every wait given it returns
/// [`ErrorKind::Cancelled`](crate::ErrorKind::Cancelled) — at once when it is waiting between
/// attempts, after the backend call in flight when it is in one (each is bounded by the query
/// timeout, so a cancelled wait returns within one bounded call).
///
/// Clones share the one state: cancelling any clone cancels them all, and a token stays
/// cancelled (make a new one for the next wait). Cheap to clone, `Send + Sync`.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use simba::{Cancel, ErrorKind, MemoryBackend, Session, SessionOptions};
///
/// # fn main() -> simba::Result<()> {
/// let backend = Arc::new(MemoryBackend::new());
/// let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
/// let (holder, waiter) = (Session::open(backend.clone(), options.clone())?, Session::open(backend, options)?);
/// let _held = holder.lock("report")?;
/// let cancel = Cancel::new();
/// let stop = cancel.clone();
/// std::thread::spawn(move || {
///     std::thread::sleep(Duration::from_millis(50));
///     stop.cancel();
/// });
/// let err = waiter.lock_cancellable("report", None, &cancel, |_| {}).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Cancelled);
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Cancel {
    inner: Arc<Inner>,
}

struct Inner {
    /// Dropped by `cancel`: that wakes every wait selecting on `rx`.
    tx: Mutex<Option<Sender<()>>>,
    rx: Receiver<()>,
}

impl Cancel {
    /// A token not cancelled yet.
    pub fn new() -> Cancel {
        let (tx, rx) = bounded(0);
        Cancel { inner: Arc::new(Inner { tx: Mutex::new(Some(tx)), rx }) }
    }

    /// Cancels every wait given this token (or a clone), now and later. Idempotent.
    pub fn cancel(&self) {
        self.inner.tx.lock().take();
    }

    /// True once [`cancel`](Cancel::cancel) was called on this token or a clone.
    pub fn is_cancelled(&self) -> bool {
        self.inner.tx.lock().is_none()
    }

    /// Disconnected (ready in a `select!`) once cancelled.
    pub(crate) fn receiver(&self) -> &Receiver<()> {
        &self.inner.rx
    }
}

impl Default for Cancel {
    fn default() -> Cancel {
        Cancel::new()
    }
}

impl fmt::Debug for Cancel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Cancel").field("cancelled", &self.is_cancelled()).finish()
    }
}

/// How one attempt of a cancellable wait ended when it did not take the lease (a permit): what
/// the observer given to [`Session::lock_cancellable`](crate::Session::lock_cancellable) or
/// [`Semaphore::acquire_cancellable`](crate::semaphore::Semaphore::acquire_cancellable) is told, on the
/// waiting thread, right after the attempt and before the wait registers for the release (where
/// its backend registers after an attempt) and waits. No internal lock is held: the observer may
/// call the session (e.g. [`Session::leader`](crate::Session::leader) to show who holds the
/// lease); the time it takes delays the wait's next attempt.
#[derive(Debug)]
#[non_exhaustive]
pub enum Attempt<'a> {
    /// Another session holds the lease (for a semaphore: every slot this session does not hold).
    Busy,
    /// The attempt failed with a transient error (`Unavailable`, `Timeout`); the wait goes on.
    Failed(&'a Error),
}
