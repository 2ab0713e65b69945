//! A backend that forwards every call to the backend under test while a case watches or holds
//! some of them: it counts `Busy` acquire replies (so a case knows a waiter is waiting), logs
//! acquires and lease watches in order, can release a lease at the first watch that follows a
//! busy reply (a release between a waiter's attempt and its registration), and can hang
//! keep-alives (so a session stops renewing while its process goes on).

use std::sync::atomic::{AtomicU64, Ordering};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};

use super::*;
use crate::backend::{Capabilities, CheckItem, Holder, Member, Notification, SessionGrant, Topic};
use crate::Lease;

/// A logged call: an acquire of a name (with whether it came back `Busy`) or a watch of a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Call {
    Acquire { name: Name, busy: bool },
    Watch(Name),
}

/// When a release made at a watch returned, or its error.
type Released = std::result::Result<Instant, String>;

/// Forwards to `inner`, reporting its kind, call bound, capabilities and watches.
#[derive(Debug)]
pub(super) struct Spy {
    inner: Arc<dyn LeaseBackend>,
    busy: AtomicU64,
    hung: Mutex<bool>,
    unhung: Condvar,
    calls: Mutex<Vec<Call>>,
    /// Released (on the watching thread, before the watch is forwarded) at the first lease
    /// watch after a busy reply; then the instant its release returned (or its error).
    release_at_watch: Mutex<(Option<Lease>, Option<Released>)>,
}

/// Keep-alives hang while this lives; dropping it lets them (and any hung one) go on.
pub(super) struct Hang<'a>(&'a Spy);

impl Drop for Hang<'_> {
    fn drop(&mut self) {
        *self.0.hung.lock() = false;
        self.0.unhung.notify_all();
    }
}

impl Spy {
    pub(super) fn new(inner: Arc<dyn LeaseBackend>) -> Arc<Spy> {
        Arc::new(Spy {
            inner,
            busy: AtomicU64::new(0),
            hung: Mutex::new(false),
            unhung: Condvar::new(),
            calls: Mutex::new(Vec::new()),
            release_at_watch: Mutex::new((None, None)),
        })
    }

    /// The acquires and lease watches so far, in the order they reached the spy.
    pub(super) fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }

    /// Releases `lease` at the first lease watch that follows a busy acquire reply, before that
    /// watch reaches the backend: the release lands between a waiter's busy attempt and its
    /// registration.
    pub(super) fn release_at_watch_after_busy(&self, lease: Lease) {
        *self.release_at_watch.lock() = (Some(lease), None);
    }

    /// When the lease given to [`release_at_watch_after_busy`](Spy::release_at_watch_after_busy)
    /// was released (its release had returned), or the release's error; `None` before.
    pub(super) fn released_at_watch(&self) -> Option<Released> {
        self.release_at_watch.lock().1.clone()
    }

    /// `Busy` replies to acquires so far.
    pub(super) fn busy_replies(&self) -> u64 {
        self.busy.load(Ordering::SeqCst)
    }

    /// From now on every keep-alive waits, before it reaches the backend, until the guard drops.
    pub(super) fn hang_keep_alives(&self) -> Hang<'_> {
        *self.hung.lock() = true;
        Hang(self)
    }
}

impl LeaseBackend for Spy {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn open_session(&self, d: Duration, m: &str) -> crate::Result<SessionGrant> {
        self.inner.open_session(d, m)
    }
    fn keep_alive(&self, s: &SessionId, d: Duration) -> crate::Result<KeepAlive> {
        let mut hung = self.hung.lock();
        while *hung {
            self.unhung.wait(&mut hung);
        }
        drop(hung);
        self.inner.keep_alive(s, d)
    }
    fn close_session(&self, s: &SessionId) -> crate::Result<()> {
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &Name) -> crate::Result<Acquire> {
        let r = self.inner.acquire(s, n);
        let busy = matches!(r, Ok(Acquire::Busy));
        if busy {
            self.busy.fetch_add(1, Ordering::SeqCst);
        }
        self.calls.lock().push(Call::Acquire { name: n.clone(), busy });
        r
    }
    fn release(&self, s: &SessionId, n: &Name, t: Token) -> crate::Result<()> {
        self.inner.release(s, n, t)
    }
    fn holder(&self, n: &Name) -> crate::Result<Option<Holder>> {
        self.inner.holder(n)
    }
    fn join(&self, s: &SessionId, g: &Name) -> crate::Result<()> {
        self.inner.join(s, g)
    }
    fn leave(&self, s: &SessionId, g: &Name) -> crate::Result<()> {
        self.inner.leave(s, g)
    }
    fn members(&self, g: &Name) -> crate::Result<Vec<Member>> {
        self.inner.members(g)
    }
    fn semaphore_limit(&self, n: &Name, p: Option<u32>) -> crate::Result<Option<u32>> {
        self.inner.semaphore_limit(n, p)
    }
    fn call_bound(&self) -> Option<Duration> {
        self.inner.call_bound()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> crate::Result<bool> {
        if let Topic::Lease(n) = topic {
            self.calls.lock().push(Call::Watch(n.clone()));
            let lease = {
                let mut slot = self.release_at_watch.lock();
                if self.busy_replies() > 0 {
                    slot.0.take()
                } else {
                    None
                }
            };
            if let Some(lease) = lease {
                // Outside the spy's lock: the release is a call on another session's backend.
                let released = lease.release().map(|()| Instant::now()).map_err(|e| e.to_string());
                self.release_at_watch.lock().1 = Some(released);
            }
        }
        self.inner.watch(topic, notify)
    }
    fn purge_expired(&self) -> crate::Result<usize> {
        self.inner.purge_expired()
    }
    fn check(&self) -> Vec<CheckItem> {
        self.inner.check()
    }
}
