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

/// A logged call: an acquire of a name (with whether it came back `Busy`) or a watch of a lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Call {
    Acquire { name: Name, busy: bool },
    Watch(Name),
}

/// When a release made at a watch returned, or its error.
type Released = std::result::Result<Instant, String>;

/// A release the spy makes at a watch (a lease's or a permit's).
struct AtWatch(Box<dyn FnOnce() -> crate::Result<()> + Send>);

impl std::fmt::Debug for AtWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AtWatch")
    }
}

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
    release_at_watch: Mutex<(Option<AtWatch>, Option<Released>)>,
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

    /// The acquires of `name` and the watches of its lease so far, in order.
    pub(super) fn calls_of(&self, name: &Name) -> Vec<Call> {
        let of = |c: &Call| matches!(c, Call::Acquire { name: n, .. } | Call::Watch(n) if n == name);
        self.calls().into_iter().filter(of).collect()
    }

    /// The checks of the `…_registers_where_it_cannot_miss_a_release` cases, once the waiter got
    /// `name` at `woken` after the release made at its watch: on a backend that claims
    /// `watch_checks_lease` it made exactly busy attempt → registration → attempt and got the
    /// lease within `renew_interval / 4` of the release (a poll retries after `renew_interval /
    /// 2`); on a push backend that does not, it registered before its first attempt.
    pub(super) fn check_registration(&self, name: &Name, claimed: bool, woken: Instant, options: &SessionOptions) {
        let calls = self.calls_of(name);
        if !claimed {
            assert_eq!(calls.first(), Some(&Call::Watch(name.clone())), "a waiter's first call: {calls:?}");
            return;
        }
        let acquire = |busy| Call::Acquire { name: name.clone(), busy };
        assert_eq!(calls, [acquire(true), Call::Watch(name.clone()), acquire(false)], "a waiter's calls");
        let released = self.released_at_watch().expect("no release at the watch").expect("the release failed");
        let (took, bound) = (woken.duration_since(released), options.renew_interval() / 4);
        assert!(
            took < bound,
            "released between the waiter's busy attempt and its registration, '{name}' reached the waiter \
             {took:?} later (a poll retries after {:?}; the registration must answer inside {bound:?})",
            options.renew_interval() / 2
        );
    }

    /// Runs `release` (a lease's or a permit's) at the first lease watch that follows a busy
    /// acquire reply, before that watch reaches the backend: the release lands between a
    /// waiter's busy attempt and its registration.
    pub(super) fn release_at_watch_after_busy(&self, release: impl FnOnce() -> crate::Result<()> + Send + 'static) {
        *self.release_at_watch.lock() = (Some(AtWatch(Box::new(release))), None);
    }

    /// When the release given to [`release_at_watch_after_busy`](Spy::release_at_watch_after_busy)
    /// returned, or its error; `None` before.
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
            let release = {
                let mut slot = self.release_at_watch.lock();
                if self.busy_replies() > 0 {
                    slot.0.take()
                } else {
                    None
                }
            };
            if let Some(AtWatch(release)) = release {
                // Outside the spy's lock: the release is a call on another session's backend.
                let released = release().map(|()| Instant::now()).map_err(|e| e.to_string());
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
