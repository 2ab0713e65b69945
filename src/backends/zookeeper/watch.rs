//! One-shot notification registrations and the thread that waits for ZooKeeper watches.
//!
//! Every topic has at most one armed ZooKeeper watch at a time and a list of channels waiting
//! for it (deduplicated with `same_channel`), so re-registering never accumulates watches or
//! tasks. A single driver thread per backend awaits all armed watches.
//!
//! The driver runs under the supervision rule of [`crate::backends::notifier`]: when it panics or
//! returns while the backend lives, its armed watches are gone with it, so every waiter is woken,
//! registrations fail at once with `Unavailable` (saying why) until a new driver — with a new task
//! channel — serves, and `check()` fails its "notifications" item meanwhile.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::Poll;

use crossbeam_channel::{Sender, TrySendError};
use futures::channel::mpsc;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;

use crate::backend::{CheckItem, Notification, Topic};
use crate::backends::notifier::{supervise, Notifier, NotifierHealth, Supervised};
use crate::error::Result;

type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
type Waiting = Arc<Mutex<HashMap<Topic, Vec<Sender<Notification>>>>>;

/// The registrations of one backend.
pub(crate) struct Watches {
    shared: Arc<Shared>,
}

/// What the driver thread shares with the backend (through a `Weak`).
struct Shared {
    waiting: Waiting,
    /// The running driver's task channel (a restarted driver brings a new one).
    tasks: Mutex<mpsc::UnboundedSender<Task>>,
    notifier: Arc<Notifier>,
}

impl Watches {
    /// Starts the driver thread; it ends when this value is dropped.
    pub(crate) fn start() -> std::io::Result<Watches> {
        let (tasks, rx) = mpsc::unbounded::<Task>();
        let notifier = Notifier::new("zookeeper watch driver");
        let shared = Arc::new(Shared { waiting: Arc::default(), tasks: Mutex::new(tasks), notifier: notifier.clone() });
        let mut first = Some(rx);
        let body = move |weak: &Weak<Shared>| {
            let rx = match first.take() {
                Some(rx) => rx,
                // Restarted: a new channel (the dead driver's receiver went with it).
                None => {
                    let Some(shared) = weak.upgrade() else { return };
                    let (tasks, rx) = mpsc::unbounded::<Task>();
                    *shared.tasks.lock() = tasks;
                    rx
                }
            };
            notifier.serving();
            drive(rx, &notifier);
        };
        supervise("simba-zk-watch", "zookeeper".to_string(), Arc::downgrade(&shared), body)?;
        Ok(Watches { shared })
    }

    /// The health of the driver thread.
    pub(crate) fn health(&self) -> NotifierHealth {
        self.shared.notifier.health()
    }

    /// The "notifications" item of `check()`.
    pub(crate) fn check_item(&self) -> CheckItem {
        self.shared.notifier.check_item()
    }

    /// Adds `notify` to `topic`'s waiters. True when the caller must arm a ZooKeeper watch (no
    /// watch is armed or being armed for the topic).
    ///
    /// # Errors
    /// `Unavailable` while the driver thread is dead (not restarted and serving yet).
    pub(crate) fn add(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let mut map = self.shared.waiting.lock();
        // Under the map's lock: a driver that dies marks its notifier down before it takes the
        // lock to wake the waiting, so a registration is either refused or woken.
        self.shared.notifier.available()?;
        Ok(match map.get_mut(topic) {
            Some(list) => {
                if !list.iter().any(|s| s.same_channel(notify)) {
                    list.push(notify.clone());
                }
                false
            }
            None => {
                map.insert(topic.clone(), vec![notify.clone()]);
                true
            }
        })
    }

    /// Notifies every waiter of `topic` once and forgets them.
    pub(crate) fn fire(&self, topic: &Topic) {
        fire(&self.shared.waiting, topic);
    }

    /// Awaits `event` on the driver thread, then fires `topic`.
    pub(crate) fn fire_after(&self, topic: Topic, event: impl Future<Output = ()> + Send + 'static) {
        let waiting = Arc::clone(&self.shared.waiting);
        let fired = topic.clone();
        let task: Task = Box::pin(async move {
            // A watcher whose client vanished without an event counts as fired (a spurious hint).
            let _ = AssertUnwindSafe(event).catch_unwind().await;
            fire(&waiting, &fired);
        });
        let sent = self.shared.tasks.lock().unbounded_send(task);
        if sent.is_err() {
            // The driver is gone (it died; a restarted one brings a new channel): fire so nobody
            // waits forever.
            fire(&self.shared.waiting, &topic);
        }
    }

    /// Makes the driver panic: the kill flag, and a no-op task to wake it.
    #[cfg(test)]
    fn kill(&self) {
        self.shared.notifier.kill();
        let _ = self.shared.tasks.lock().unbounded_send(Box::pin(async {}));
    }

    /// Number of topics with waiters (for tests and `Debug`).
    pub(crate) fn len(&self) -> usize {
        self.shared.waiting.lock().len()
    }
}

impl Supervised for Shared {
    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// The armed watches went with the driver: every waiter is woken (a caller that still waits
    /// registers again, and arms a new watch once a driver serves).
    fn died(&self) {
        let all: Vec<Topic> = self.waiting.lock().keys().cloned().collect();
        for topic in all {
            fire(&self.waiting, &topic);
        }
    }
}

impl super::ZookeeperBackend {
    /// The health of the watch driver thread.
    #[allow(dead_code)] // for `Session::status` (issue #39)
    pub(crate) fn notifier_health(&self) -> NotifierHealth {
        self.inner.watches.health()
    }
}

fn fire(waiting: &Waiting, topic: &Topic) {
    let senders = waiting.lock().remove(topic).unwrap_or_default();
    let note = match topic {
        Topic::Lease(n) => Notification::Released(n.clone()),
        Topic::Group(g) => Notification::MembersChanged(g.clone()),
    };
    for s in senders {
        // A full channel already holds a pending hint; a disconnected one has no reader.
        match s.try_send(note.clone()) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

fn drive(mut rx: mpsc::UnboundedReceiver<Task>, notifier: &Notifier) {
    let mut tasks: FuturesUnordered<Task> = FuturesUnordered::new();
    futures::executor::block_on(futures::future::poll_fn(move |cx| {
        loop {
            notifier.checkpoint();
            match rx.poll_next_unpin(cx) {
                Poll::Ready(Some(t)) => tasks.push(t),
                // The backend was dropped: stop, dropping (and so unregistering) pending watches.
                Poll::Ready(None) => return Poll::Ready(()),
                Poll::Pending => break,
            }
        }
        while let Poll::Ready(Some(())) = tasks.poll_next_unpin(cx) {}
        Poll::Pending
    }));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Name;
    use std::time::Duration;

    #[test]
    fn dedup_and_fire_once() {
        let w = Watches::start().unwrap();
        let (tx, rx) = crossbeam_channel::unbounded();
        let t = Topic::Lease(Name::new("a").unwrap());
        assert!(w.add(&t, &tx).unwrap());
        for _ in 0..100 {
            assert!(!w.add(&t, &tx).unwrap());
        }
        let (tx2, rx2) = crossbeam_channel::bounded(1);
        assert!(!w.add(&t, &tx2).unwrap());
        let (ftx, frx) = futures::channel::oneshot::channel::<()>();
        w.fire_after(t.clone(), async move {
            let _ = frx.await;
        });
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        ftx.send(()).unwrap();
        assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Notification::Released(Name::new("a").unwrap()));
        assert!(rx2.recv_timeout(Duration::from_secs(5)).is_ok());
        assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        assert_eq!(w.len(), 0);
    }
}

#[cfg(test)]
mod notify_tests;
