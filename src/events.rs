//! Event subscriptions shared by [`Session`](crate::Session), [`Election`](crate::Election) and
//! [`Coordinator`](crate::Coordinator).
//!
//! Each subscriber is an unbounded channel (a slow consumer never blocks the sender) plus a drop
//! guard: the list keeps a `Weak` of the guard, so a dropped [`Events`] is pruned on the next
//! subscribe or send even if no event is ever sent (crossbeam-channel cannot tell the sender).

use std::fmt;
use std::ops::Deref;
use std::sync::{Arc, Weak};

use crate::sync::{unbounded, Mutex, Receiver, Sender};

/// A subscription to a handle's events: every event sent after it was made (plus any initial
/// ones the handle documents), in order.
///
/// It dereferences to a [`Receiver`](crate::channel::Receiver) (crossbeam's, re-exported on
/// purpose: see [`simba::channel`](crate::channel)), so `recv`, `try_recv`, `recv_timeout`,
/// `try_iter` and `iter` work on it directly, and `select!` takes `&*events`. Dropping it (and
/// every clone of it) ends the subscription. A bare `Receiver` cloned out of it (`(*events).clone()`)
/// is disconnected once the last `Events` is dropped.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use simba::{MemoryBackend, Session, SessionEvent, SessionOptions};
///
/// # fn main() -> simba::Result<()> {
/// let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
/// let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
/// let events = session.events();
/// assert!(events.try_recv().is_err()); // nothing happened yet
/// session.close()?;
/// assert_eq!(events.recv_timeout(Duration::from_secs(5)).ok(), Some(SessionEvent::Closed));
/// # Ok(())
/// # }
/// ```
pub struct Events<T> {
    rx: Receiver<T>,
    _alive: Arc<()>,
}

impl<T> Clone for Events<T> {
    /// Another handle on the same subscription (the two share one queue, as cloned receivers do).
    fn clone(&self) -> Self {
        Events { rx: self.rx.clone(), _alive: self._alive.clone() }
    }
}

impl<T> Deref for Events<T> {
    type Target = Receiver<T>;

    fn deref(&self) -> &Receiver<T> {
        &self.rx
    }
}

impl<'a, T> IntoIterator for &'a Events<T> {
    type Item = T;
    type IntoIter = crate::sync::Iter<'a, T>;

    /// Blocks for each next event; ends when the handle that sends them is gone.
    fn into_iter(self) -> Self::IntoIter {
        self.rx.iter()
    }
}

impl<T> fmt::Debug for Events<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Events").field("queued", &self.rx.len()).finish()
    }
}

/// The senders of one handle's events. Its lock is held only to push, prune and `send` on
/// unbounded channels (which never block and run no user code).
pub(crate) struct Subscribers<T> {
    list: Mutex<Vec<(Weak<()>, Sender<T>)>>,
}

impl<T> fmt::Debug for Subscribers<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Subscribers").field("len", &self.list.lock().len()).finish()
    }
}

impl<T: Clone> Subscribers<T> {
    pub(crate) fn new() -> Subscribers<T> {
        Subscribers { list: Mutex::new(Vec::new()) }
    }

    /// A new subscription whose first events are `initial`; dead subscriptions are pruned. The
    /// caller holds the lock its events are decided under, so nothing can come between.
    pub(crate) fn subscribe(&self, initial: impl IntoIterator<Item = T>) -> Events<T> {
        let (tx, rx) = unbounded();
        for ev in initial {
            let _ = tx.send(ev);
        }
        let alive = Arc::new(());
        let mut list = self.list.lock();
        list.retain(|(guard, _)| guard.strong_count() > 0);
        list.push((Arc::downgrade(&alive), tx));
        Events { rx, _alive: alive }
    }

    /// Sends `ev` to every live subscription, dropping the dead ones.
    pub(crate) fn emit(&self, ev: &T) {
        self.list.lock().retain(|(guard, tx)| guard.strong_count() > 0 && tx.send(ev.clone()).is_ok());
    }

    /// Entries in the list, dead ones included (for leak tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.list.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Subscribers;
    use crate::{Coordinator, MemoryBackend, Session, SessionOptions};

    const CALLS: usize = 10_000;
    /// At most the one subscriber dropped since the last prune.
    const BOUND: usize = 1;

    fn options() -> SessionOptions {
        SessionOptions::builder().lease_duration(Duration::from_secs(30)).build().unwrap()
    }

    #[test]
    fn live_subscriptions_and_their_clones_keep_every_event_in_order() {
        let subs = Subscribers::new();
        let kept = subs.subscribe([0]);
        let clone = subs.subscribe(None).clone(); // the original dropped: the clone keeps it alive
        drop(subs.subscribe(None));
        subs.emit(&1);
        subs.emit(&2);
        assert_eq!(subs.len(), 2, "the dropped one is pruned, the live two stay");
        assert_eq!(kept.try_iter().collect::<Vec<_>>(), vec![0, 1, 2]);
        assert_eq!(clone.try_iter().collect::<Vec<_>>(), vec![1, 2]);
        drop(kept);
        subs.emit(&3);
        assert_eq!(subs.len(), 1);
        assert_eq!(clone.try_recv(), Ok(3));
    }

    /// `CALLS` subscriptions, each dropped at once with no event sent, leave at most `BOUND`.
    fn churn<E>(events: impl Fn() -> E, count: impl Fn() -> usize) {
        for _ in 0..CALLS {
            drop(events());
        }
        assert!(count() <= BOUND, "{} subscribers kept after {CALLS} dropped", count());
    }

    #[test]
    fn session_subscribers_dropped_without_an_event_do_not_pile_up() {
        // Finding 8: an application calling events() per health check grew the list without bound.
        let session = Session::open(Arc::new(MemoryBackend::new()), options()).unwrap();
        churn(|| session.events(), || session.subscriber_count());
        session.close().unwrap();
    }

    #[test]
    fn election_subscribers_dropped_without_an_event_do_not_pile_up() {
        let session = Session::open(Arc::new(MemoryBackend::new()), options()).unwrap();
        let election = session.campaign("leak").unwrap();
        churn(|| election.events(), || election.subscriber_count());
        drop(election);
        session.close().unwrap();
    }

    #[test]
    fn coordinator_subscribers_dropped_without_an_event_do_not_pile_up() {
        let coordinator = Coordinator::start(Arc::new(MemoryBackend::new()), options()).unwrap();
        churn(|| coordinator.events(), || coordinator.subscriber_count());
        coordinator.close().unwrap();
    }
}
