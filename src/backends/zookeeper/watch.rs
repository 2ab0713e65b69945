//! One-shot notification registrations and the thread that waits for ZooKeeper watches.
//!
//! Every topic has at most one armed ZooKeeper watch at a time and a list of channels waiting
//! for it (deduplicated with `same_channel`), so re-registering never accumulates watches or
//! tasks. A single driver thread per backend awaits all armed watches.

use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::thread;

use crossbeam_channel::{Sender, TrySendError};
use futures::channel::mpsc;
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;

use crate::backend::{Notification, Topic};

type Task = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;
type Waiting = Arc<Mutex<HashMap<Topic, Vec<Sender<Notification>>>>>;

/// The registrations of one backend.
pub(crate) struct Watches {
    waiting: Waiting,
    tasks: mpsc::UnboundedSender<Task>,
}

impl Watches {
    /// Starts the driver thread; it ends when this value is dropped.
    pub(crate) fn start() -> std::io::Result<Watches> {
        let (tasks, rx) = mpsc::unbounded::<Task>();
        thread::Builder::new().name("simba-zk-watch".into()).spawn(move || drive(rx))?;
        Ok(Watches { waiting: Arc::default(), tasks })
    }

    /// Adds `notify` to `topic`'s waiters. True when the caller must arm a ZooKeeper watch (no
    /// watch is armed or being armed for the topic).
    pub(crate) fn add(&self, topic: &Topic, notify: &Sender<Notification>) -> bool {
        let mut map = self.waiting.lock();
        match map.get_mut(topic) {
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
        }
    }

    /// Notifies every waiter of `topic` once and forgets them.
    pub(crate) fn fire(&self, topic: &Topic) {
        fire(&self.waiting, topic);
    }

    /// Awaits `event` on the driver thread, then fires `topic`.
    pub(crate) fn fire_after(&self, topic: Topic, event: impl Future<Output = ()> + Send + 'static) {
        let waiting = Arc::clone(&self.waiting);
        let fired = topic.clone();
        let task: Task = Box::pin(async move {
            // A watcher whose client vanished without an event counts as fired (a spurious hint).
            let _ = AssertUnwindSafe(event).catch_unwind().await;
            fire(&waiting, &fired);
        });
        if self.tasks.unbounded_send(task).is_err() {
            // The driver is gone (not expected while `self` lives): fire so nobody waits forever.
            fire(&self.waiting, &topic);
        }
    }

    /// Number of topics with waiters (for tests and `Debug`).
    pub(crate) fn len(&self) -> usize {
        self.waiting.lock().len()
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

fn drive(mut rx: mpsc::UnboundedReceiver<Task>) {
    let mut tasks: FuturesUnordered<Task> = FuturesUnordered::new();
    futures::executor::block_on(futures::future::poll_fn(move |cx| {
        loop {
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
        assert!(w.add(&t, &tx));
        for _ in 0..100 {
            assert!(!w.add(&t, &tx));
        }
        let (tx2, rx2) = crossbeam_channel::bounded(1);
        assert!(!w.add(&t, &tx2));
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
