//! A test backend that forwards every SPI call to another backend after a hook: the doubles that
//! observe, delay or hang calls (engine_faults.rs, hung_backends.rs) write only their hook; and a
//! waiter observed by such a hook ([`waiter`], redis_pubsub.rs and etcd_watch.rs).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simba::backend::{
    Acquire, Capabilities, CheckItem, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant, Topic,
};
use simba::{MemoryBackend, Name, Session, SessionId, SessionOptions, Token};

/// The SPI call about to be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    OpenSession,
    KeepAlive,
    CloseSession,
    Acquire,
    Release,
    Holder,
    Join,
    Leave,
    Members,
    Watch,
    SemaphoreLimit,
}

/// Runs on the calling thread before each forwarded call.
pub trait Hook: Send + Sync + fmt::Debug + 'static {
    fn before(&self, op: Op);
    /// After `before`: an error to answer instead of forwarding the call (none by default).
    fn fail(&self, _op: Op) -> Option<simba::Error> {
        None
    }
    /// After `before`: the answer to a watch instead of forwarding it (none by default).
    fn watch(&self, _topic: &Topic, _notify: &Sender<Notification>) -> Option<simba::Result<bool>> {
        None
    }
    /// After a forwarded acquire returned `reply`, before the caller sees it (nothing by default).
    fn acquired(&self, _session: &SessionId, _reply: &simba::Result<Acquire>) {}
    /// After `acquired`: the reply the caller sees (the forwarded one by default).
    fn answer_acquire(&self, reply: simba::Result<Acquire>) -> simba::Result<Acquire> {
        reply
    }
    /// After the forwarded keep-alive returned, before the caller sees its reply (nothing by
    /// default): a keep-alive whose listing was read before what happens here.
    fn kept_alive(&self) {}
    /// After `kept_alive`: sees the keep-alive's reply (nothing by default).
    fn keep_alive_reply(&self, _reply: &simba::Result<KeepAlive>) {}
    /// After `keep_alive_reply`: the reply the caller sees to the keep-alive of `session`
    /// forwarded at `called` (the forwarded one by default).
    fn answer_keep_alive(
        &self,
        _session: &SessionId,
        _called: Instant,
        reply: simba::Result<KeepAlive>,
    ) -> simba::Result<KeepAlive> {
        reply
    }
    /// After a forwarded release of `name` returned (nothing by default).
    fn released(&self, _name: &Name) {}
}

/// Forwards to `inner` after `hook.before(op)`. Reports `kind`; `call_bound` and push
/// capabilities are the inner backend's only when asked for ([`Forward::inheriting`]).
#[derive(Debug)]
pub struct Forward<H> {
    pub inner: Arc<dyn LeaseBackend>,
    pub hook: H,
    kind: &'static str,
    call_bound: Option<Duration>,
    inherit: bool,
    /// With `inherit`: keeps the inner backend's `watch_checks_lease` (only `inheriting` does).
    watch_checks: bool,
}

impl<H: Hook> Forward<H> {
    /// Over a fresh memory backend, with no call bound and no push (candidates poll).
    pub fn memory(kind: &'static str, hook: H) -> Arc<Forward<H>> {
        Self::over_memory(kind, hook, None, false)
    }

    /// Over a fresh memory backend, declaring `bound` as its call bound (no push).
    pub fn memory_bounded(kind: &'static str, bound: Option<Duration>, hook: H) -> Arc<Forward<H>> {
        Self::over_memory(kind, hook, bound, false)
    }

    /// Over a fresh memory backend with its push capabilities and watches, but no call bound
    /// (every user call runs on a worker the caller abandons at its deadline). Its registrations
    /// are not declared to check the lease (`watch_checks_lease`: the hook may answer watches
    /// itself, as a subscription that does not look at the lease), so waiters register before
    /// every attempt, as on Redis and PostgreSQL.
    pub fn pushing(kind: &'static str, hook: H) -> Arc<Forward<H>> {
        Self::over_memory(kind, hook, None, true)
    }

    fn over_memory(kind: &'static str, hook: H, call_bound: Option<Duration>, inherit: bool) -> Arc<Forward<H>> {
        let inner = Arc::new(MemoryBackend::new());
        Arc::new(Forward { inner, hook, kind, call_bound, inherit, watch_checks: false })
    }

    /// Over `inner`, with its kind, call bound, capabilities and watches.
    pub fn inheriting(inner: Arc<dyn LeaseBackend>, hook: H) -> Arc<Forward<H>> {
        let kind = inner.kind();
        let call_bound = inner.call_bound();
        Arc::new(Forward { inner, hook, kind, call_bound, inherit: true, watch_checks: true })
    }
}

impl<H: Hook> Forward<H> {
    fn enter(&self, op: Op) -> simba::Result<()> {
        self.hook.before(op);
        self.hook.fail(op).map_or(Ok(()), Err)
    }
}

impl<H: Hook> LeaseBackend for Forward<H> {
    fn kind(&self) -> &'static str {
        self.kind
    }
    fn call_bound(&self) -> Option<Duration> {
        self.call_bound
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<SessionGrant> {
        self.enter(Op::OpenSession)?;
        self.inner.open_session(d, m)
    }
    fn keep_alive(&self, s: &SessionId, d: Duration) -> simba::Result<KeepAlive> {
        self.enter(Op::KeepAlive)?;
        let called = Instant::now();
        let reply = self.inner.keep_alive(s, d);
        self.hook.kept_alive();
        self.hook.keep_alive_reply(&reply);
        self.hook.answer_keep_alive(s, called, reply)
    }
    fn close_session(&self, s: &SessionId) -> simba::Result<()> {
        self.enter(Op::CloseSession)?;
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &Name) -> simba::Result<Acquire> {
        self.enter(Op::Acquire)?;
        let reply = self.inner.acquire(s, n);
        self.hook.acquired(s, &reply);
        self.hook.answer_acquire(reply)
    }
    fn release(&self, s: &SessionId, n: &Name, t: Token) -> simba::Result<()> {
        self.enter(Op::Release)?;
        let r = self.inner.release(s, n, t);
        self.hook.released(n);
        r
    }
    fn holder(&self, n: &Name) -> simba::Result<Option<Holder>> {
        self.enter(Op::Holder)?;
        self.inner.holder(n)
    }
    fn join(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.enter(Op::Join)?;
        self.inner.join(s, g)
    }
    fn leave(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.enter(Op::Leave)?;
        self.inner.leave(s, g)
    }
    fn members(&self, g: &Name) -> simba::Result<Vec<Member>> {
        self.enter(Op::Members)?;
        self.inner.members(g)
    }
    fn semaphore_limit(&self, n: &Name, p: Option<u32>) -> simba::Result<Option<u32>> {
        self.enter(Op::SemaphoreLimit)?;
        self.inner.semaphore_limit(n, p)
    }
    fn capabilities(&self) -> Capabilities {
        if self.inherit {
            let mut caps = self.inner.capabilities();
            caps.watch_checks_lease &= self.watch_checks;
            caps
        } else {
            Capabilities::default()
        }
    }
    fn purge_expired(&self) -> simba::Result<usize> {
        self.inner.purge_expired()
    }
    fn check(&self) -> Vec<CheckItem> {
        self.inner.check()
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> simba::Result<bool> {
        if !self.inherit {
            return Ok(false);
        }
        self.enter(Op::Watch)?;
        match self.hook.watch(topic, notify) {
            Some(answer) => answer,
            None => self.inner.watch(topic, notify),
        }
    }
}

/// A hook that makes keep-alives fail with an error ([`fail`](KeepAliveTrouble::fail)) or hang
/// ([`hang`](KeepAliveTrouble::hang)) while told to; every other call goes through.
#[derive(Debug, Default)]
pub struct KeepAliveTrouble {
    failing: std::sync::atomic::AtomicBool,
    hung: std::sync::Mutex<bool>,
    cond: std::sync::Condvar,
}

impl KeepAliveTrouble {
    /// Keep-alives fail (`Unavailable`) from now on while `on`.
    pub fn fail(&self, on: bool) {
        self.failing.store(on, std::sync::atomic::Ordering::SeqCst);
    }

    /// Keep-alives hang from now on while `on` (a hung one returns once it is off again).
    pub fn hang(&self, on: bool) {
        *self.hung.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = on;
        self.cond.notify_all();
    }
}

impl Hook for KeepAliveTrouble {
    fn before(&self, op: Op) {
        if op == Op::KeepAlive {
            let mut hung = self.hung.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            while *hung {
                hung = self.cond.wait(hung).unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        }
    }
    fn fail(&self, op: Op) -> Option<simba::Error> {
        (op == Op::KeepAlive && self.failing.load(std::sync::atomic::Ordering::SeqCst))
            .then(|| simba::Error::new(simba::ErrorKind::Unavailable, "the test's keep-alive fails"))
    }
}

/// The renew interval of [`slow_polling`] sessions (20 s).
pub const SLOW_RENEW: Duration = Duration::from_secs(20);

/// Session options of a waiter that must be woken by a push: a 60 s lease renewed every
/// [`SLOW_RENEW`], so it polls for the first time 10 s after a busy attempt at the earliest, and a
/// lease it gets well before that was pushed.
pub fn slow_polling() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(60))
        .renew_interval(SLOW_RENEW)
        .query_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// What a [`waiter`] reports once: the instant its `lock` returned, and what it returned.
pub type Granted = Receiver<(Instant, simba::Result<simba::Lease>)>;

/// A `lock(name)` waiting on its own thread, in a [`slow_polling`] session over `inner` behind
/// `hook` ([`Forward::inheriting`]: the inner backend's push capabilities and watches, so the
/// hook sees the waiter's registrations and attempts). The lease arrives on the returned channel
/// with the instant it did; the session (and the lease) are kept 2 s longer, for the test to look
/// at them.
pub fn waiter<H: Hook>(inner: Arc<dyn LeaseBackend>, hook: H, name: &Name) -> Granted {
    let session = Session::open(Forward::inheriting(inner, hook), slow_polling()).unwrap();
    let (tx, rx) = crossbeam_channel::bounded(1);
    let n = name.clone();
    std::thread::spawn(move || {
        let r = session.lock(&n);
        let _ = tx.send((Instant::now(), r));
        // Keep the session (and the lease) until the test has looked at it.
        std::thread::sleep(Duration::from_secs(2));
        drop(session);
    });
    rx
}
