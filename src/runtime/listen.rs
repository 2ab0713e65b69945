//! The delivery of a session's [`SessionListener`] calls: a bounded queue the session fills
//! without blocking (under its locks: sending runs no application code) and one thread,
//! `simba-listener`, that empties it in order and calls the listener with no lock held, catching
//! its panics. What the full queue cannot take is counted and reported (see `simba::listener`).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::listener::{SessionListener, Told, QUEUE};
use crate::types::SessionId;

/// The session's end of its listener's queue.
pub(crate) struct ListenerQueue {
    tx: Sender<Told>,
    dropped: Arc<AtomicU64>,
}

impl ListenerQueue {
    /// Starts the listener thread of session `id`; `None` (logged) when no thread can be started:
    /// the session then runs without telling its listener anything.
    pub(super) fn start(listener: Arc<dyn SessionListener>, id: SessionId) -> Option<ListenerQueue> {
        let (tx, rx) = crossbeam_channel::bounded(QUEUE);
        let dropped = Arc::new(AtomicU64::new(0));
        let counted = dropped.clone();
        // A plain thread (also in the explorer build, which never sets a listener): it only
        // waits on its own queue, which ends when the session's state is gone.
        let spawned = std::thread::Builder::new()
            .name("simba-listener".into())
            .spawn(move || deliver(&*listener, &id, &rx, &counted));
        match spawned {
            Ok(_) => Some(ListenerQueue { tx, dropped }),
            Err(e) => {
                log::error!("cannot start the session listener thread; the listener is not told anything: {e}");
                None
            }
        }
    }

    /// Queues `told` without blocking; counts it dropped when the queue is full.
    pub(super) fn tell(&self, told: Told) {
        if let Err(TrySendError::Full(_)) = self.tx.try_send(told) {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The listener thread: every queued call in order, a panic caught and logged once.
fn deliver(listener: &dyn SessionListener, id: &SessionId, rx: &Receiver<Told>, dropped: &AtomicU64) {
    let mut panicked = false;
    let mut call = |f: &dyn Fn()| {
        if let Err(p) = catch_unwind(AssertUnwindSafe(f)) {
            let what = p
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string panic".to_string());
            if panicked {
                log::debug!("session {id}: the session listener panicked again: {what}");
            } else {
                panicked = true;
                log::error!(
                    "session {id}: the session listener panicked (caught; later calls go on, further panics are \
                     logged at debug): {what}"
                );
            }
        }
    };
    for told in rx {
        let n = dropped.swap(0, Ordering::Relaxed);
        if n > 0 {
            call(&|| listener.dropped(id, n));
        }
        call(&|| told.deliver(listener, id));
    }
}
