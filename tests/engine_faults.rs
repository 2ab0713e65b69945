//! The engine against a backend whose calls hang forever (like the sync `postgres` client against a
//! paused server): loss detection, lock timeouts, release and close must not wait for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simba::backend::{Acquire, Holder, KeepAlive, LeaseBackend, Member, SessionGrant};
use simba::Token;
use simba::{
    ErrorKind, LossReason, MemoryBackend, Name, Session, SessionEvent, SessionId, SessionOptions, SessionState,
};

/// Wraps the memory backend; once switched, calls block until the process ends.
#[derive(Debug)]
struct Hanging {
    inner: MemoryBackend,
    keep_alive: AtomicBool,
    everything: AtomicBool,
    // Never sent on: `recv` blocks forever (the sender lives as long as the backend).
    _never_tx: Sender<()>,
    never_rx: Receiver<()>,
}

impl Hanging {
    fn new() -> Arc<Hanging> {
        let (tx, rx) = crossbeam_channel::bounded(0);
        Arc::new(Hanging {
            inner: MemoryBackend::new(),
            keep_alive: AtomicBool::new(false),
            everything: AtomicBool::new(false),
            _never_tx: tx,
            never_rx: rx,
        })
    }
    fn maybe_hang(&self, keep_alive: bool) {
        if self.everything.load(Ordering::SeqCst) || (keep_alive && self.keep_alive.load(Ordering::SeqCst)) {
            let _ = self.never_rx.recv();
        }
    }
}

impl LeaseBackend for Hanging {
    fn kind(&self) -> &'static str {
        "hanging"
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<SessionGrant> {
        self.maybe_hang(false);
        self.inner.open_session(d, m)
    }
    fn keep_alive(&self, s: &SessionId, d: Duration) -> simba::Result<KeepAlive> {
        self.maybe_hang(true);
        self.inner.keep_alive(s, d)
    }
    fn close_session(&self, s: &SessionId) -> simba::Result<()> {
        self.maybe_hang(false);
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &Name) -> simba::Result<Acquire> {
        self.maybe_hang(false);
        self.inner.acquire(s, n)
    }
    fn release(&self, s: &SessionId, n: &Name, t: Token) -> simba::Result<()> {
        self.maybe_hang(false);
        self.inner.release(s, n, t)
    }
    fn holder(&self, n: &Name) -> simba::Result<Option<Holder>> {
        self.maybe_hang(false);
        self.inner.holder(n)
    }
    fn join(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.maybe_hang(false);
        self.inner.join(s, g)
    }
    fn leave(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.maybe_hang(false);
        self.inner.leave(s, g)
    }
    fn members(&self, g: &Name) -> simba::Result<Vec<Member>> {
        self.maybe_hang(false);
        self.inner.members(g)
    }
}

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .build()
        .unwrap()
}

/// Slack for thread scheduling on a loaded machine; the deadline itself is exact.
const SLACK: Duration = Duration::from_millis(400);

#[test]
fn hung_keep_alive_never_delays_loss_detection() {
    let backend = Hanging::new();
    let session = Session::open(backend.clone(), options()).unwrap();
    let events = session.events();
    let lease = session.lock("job").unwrap();
    let token = lease.token().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(lease.token().unwrap(), token, "renewals keep it");

    backend.keep_alive.store(true, Ordering::SeqCst);
    let hung_at = Instant::now();
    // The local deadline can only move forward by a keep-alive sent before the hang; it is at most
    // one lease (minus drift) after the hang started.
    let latest_deadline = hung_at + Duration::from_secs(1);
    let mut saw = Vec::new();
    while saw.len() < 2 {
        match events.recv_deadline(latest_deadline + SLACK) {
            Ok(SessionEvent::RenewalFailed { .. }) => {}
            Ok(ev) => saw.push((ev, Instant::now())),
            Err(_) => panic!("no loss events by the local deadline (+slack); got {saw:?}"),
        }
    }
    assert_eq!(
        saw[0].0,
        SessionEvent::LeaseLost { name: Name::new("job").unwrap(), token, reason: LossReason::SessionExpired }
    );
    assert_eq!(saw[1].0, SessionEvent::Expired);
    // token() fails no later than the deadline, without any help from the stuck thread.
    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
    assert!(saw[0].1 <= latest_deadline + SLACK);
    assert_eq!(session.state(), SessionState::Expired);
    // Dropping everything does not block on the hung backend.
    let start = Instant::now();
    drop(lease);
    drop(session);
    assert!(start.elapsed() < Duration::from_secs(1));
}

#[test]
fn token_fails_at_the_deadline_even_before_any_event() {
    let backend = Hanging::new();
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("job").unwrap();
    backend.keep_alive.store(true, Ordering::SeqCst);
    let remaining = lease.remaining().expect("held");
    let deadline = Instant::now() + remaining;
    // token() judges against the deadline itself, so it flips exactly there.
    while Instant::now() + Duration::from_millis(50) < deadline {
        assert!(lease.token().is_ok());
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(2));
    assert!(lease.token().is_err());
}

#[test]
fn hung_calls_are_abandoned_at_their_timeouts() {
    let backend = Hanging::new();
    let session = Session::open(backend.clone(), options()).unwrap();
    let held = session.lock("held").unwrap();
    backend.everything.store(true, Ordering::SeqCst);
    let qt = session.options().query_timeout();

    let start = Instant::now();
    let e = session.try_lock("other").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(start.elapsed() < qt + SLACK);

    let start = Instant::now();
    assert!(session.lock_timeout("other2", Duration::from_millis(300)).unwrap().is_none());
    assert!(start.elapsed() < qt + SLACK);

    let start = Instant::now();
    let e = held.release().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(start.elapsed() < qt + SLACK);

    let start = Instant::now();
    let e = session.members("g").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(start.elapsed() < qt + SLACK);

    let start = Instant::now();
    assert_eq!(session.close().unwrap_err().kind(), ErrorKind::Timeout);
    assert!(start.elapsed() < qt + SLACK);
}

#[test]
fn opening_against_a_hung_backend_times_out() {
    let backend = Hanging::new();
    backend.everything.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let e = Session::open(backend, options()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(start.elapsed() < Duration::from_millis(250) + SLACK);
}

/// Wraps the memory backend with a chosen [`LeaseBackend::call_bound`], records the thread of
/// every call, and can make acquires slower than the bound it claims.
#[derive(Debug)]
struct Recording {
    inner: MemoryBackend,
    bound: Option<Duration>,
    acquire_delay: parking_lot::Mutex<Duration>,
    calls: parking_lot::Mutex<Vec<(&'static str, std::thread::ThreadId)>>,
}

impl Recording {
    fn new(bound: Option<Duration>) -> Arc<Recording> {
        Arc::new(Recording {
            inner: MemoryBackend::new(),
            bound,
            acquire_delay: parking_lot::Mutex::new(Duration::ZERO),
            calls: parking_lot::Mutex::new(Vec::new()),
        })
    }
    fn record(&self, what: &'static str) {
        self.calls.lock().push((what, std::thread::current().id()));
    }
    /// Threads the calls named `what` ran on.
    fn threads(&self, what: &str) -> Vec<std::thread::ThreadId> {
        self.calls.lock().iter().filter(|(w, _)| *w == what).map(|(_, t)| *t).collect()
    }
}

impl LeaseBackend for Recording {
    fn kind(&self) -> &'static str {
        "recording"
    }
    fn call_bound(&self) -> Option<Duration> {
        self.bound
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<SessionGrant> {
        self.record("open_session");
        self.inner.open_session(d, m)
    }
    fn keep_alive(&self, s: &SessionId, d: Duration) -> simba::Result<KeepAlive> {
        self.record("keep_alive");
        self.inner.keep_alive(s, d)
    }
    fn close_session(&self, s: &SessionId) -> simba::Result<()> {
        self.record("close_session");
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &Name) -> simba::Result<Acquire> {
        self.record("acquire");
        let delay = *self.acquire_delay.lock();
        std::thread::sleep(delay);
        self.inner.acquire(s, n)
    }
    fn release(&self, s: &SessionId, n: &Name, t: Token) -> simba::Result<()> {
        self.record("release");
        self.inner.release(s, n, t)
    }
    fn holder(&self, n: &Name) -> simba::Result<Option<Holder>> {
        self.record("holder");
        self.inner.holder(n)
    }
    fn join(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.record("join");
        self.inner.join(s, g)
    }
    fn leave(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.record("leave");
        self.inner.leave(s, g)
    }
    fn members(&self, g: &Name) -> simba::Result<Vec<Member>> {
        self.record("members");
        self.inner.members(g)
    }
}

/// Runs the user-thread calls once: try_lock, lock, release, leader, join, members, leave, close.
fn user_calls(backend: Arc<Recording>) {
    let session = Session::open(backend, options()).unwrap();
    let lease = session.try_lock("a").unwrap().expect("free");
    lease.release().unwrap();
    let lease = session.lock("b").unwrap();
    lease.release().unwrap();
    assert!(session.leader("b").unwrap().is_none());
    let m = session.join("g").unwrap();
    assert_eq!(session.members("g").unwrap().len(), 1);
    m.leave().unwrap();
    // Let the renewal thread send a keep-alive or two (renew interval 250 ms).
    std::thread::sleep(Duration::from_millis(600));
    session.close().unwrap();
}

const USER_CALLS: [&str; 7] = ["acquire", "release", "holder", "join", "members", "leave", "close_session"];

#[test]
fn a_backend_that_bounds_its_calls_runs_user_calls_on_the_callers_thread() {
    let backend = Recording::new(Some(Duration::from_millis(100)));
    user_calls(backend.clone());
    let me = std::thread::current().id();
    for what in USER_CALLS {
        let threads = backend.threads(what);
        assert!(!threads.is_empty(), "no {what} call");
        assert!(threads.iter().all(|t| *t == me), "{what} ran on another thread");
    }
    // Keep-alives never run on a user's thread (nor on the renewal thread's timer): on workers.
    let keep_alives = backend.threads("keep_alive");
    assert!(!keep_alives.is_empty(), "no keep-alive in 600 ms");
    assert!(keep_alives.iter().all(|t| *t != me));
}

#[test]
fn a_backend_without_a_bound_runs_every_call_on_a_worker() {
    let backend = Recording::new(None);
    user_calls(backend.clone());
    let me = std::thread::current().id();
    for what in USER_CALLS.iter().chain(&["keep_alive", "open_session"]) {
        let threads = backend.threads(what);
        assert!(!threads.is_empty(), "no {what} call");
        assert!(threads.iter().all(|t| *t != me), "{what} ran on the caller's thread");
    }
}

#[test]
fn a_bound_longer_than_the_callers_time_runs_on_a_worker() {
    // The bound (1 h) exceeds the query timeout (250 ms) and every deadline here: the engine cannot
    // wait that long on the caller's thread, so the calls go to workers and are abandoned on time.
    let backend = Recording::new(Some(Duration::from_secs(3600)));
    let session = Session::open(backend.clone(), options()).unwrap();
    *backend.acquire_delay.lock() = Duration::from_secs(2);
    let qt = session.options().query_timeout();
    let start = Instant::now();
    let e = session.try_lock("slow").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(start.elapsed() < qt + SLACK);
    let me = std::thread::current().id();
    assert!(backend.threads("acquire").iter().all(|t| *t != me));
    // A short lock_timeout also runs on a worker even with a bound that fits the query timeout.
    let backend = Recording::new(Some(qt));
    let session = Session::open(backend.clone(), options()).unwrap();
    *backend.acquire_delay.lock() = Duration::from_secs(2);
    let start = Instant::now();
    assert!(session.lock_timeout("slow", Duration::from_millis(50)).unwrap().is_none());
    assert!(start.elapsed() < Duration::from_millis(50) + SLACK);
    assert!(backend.threads("acquire").iter().all(|t| *t != me));
}

#[test]
fn an_inline_acquire_that_overruns_its_deadline_is_undone() {
    // The backend claims 50 ms but its acquire takes 600 ms, past the query timeout (250 ms): the
    // caller gets Timeout, exactly as from an abandoned worker call, and the term it took on the
    // backend is released rather than adopted.
    let backend = Recording::new(Some(Duration::from_millis(50)));
    let session = Session::open(backend.clone(), options()).unwrap();
    *backend.acquire_delay.lock() = Duration::from_millis(600);
    let e = session.try_lock("late").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(backend.threads("acquire"), vec![std::thread::current().id()]);
    let name = Name::new("late").unwrap();
    // The undo is a background release: wait for it (generously), then the name is free.
    let until = Instant::now() + Duration::from_secs(10);
    while backend.inner.holder(&name).unwrap().is_some() {
        assert!(Instant::now() < until, "the late term was never released");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(backend.threads("release").iter().all(|t| *t != std::thread::current().id()));
    // Nothing of it is held locally, and the name can be taken again.
    *backend.acquire_delay.lock() = Duration::ZERO;
    let lease = session.try_lock("late").unwrap().expect("free again");
    assert!(lease.token().is_ok());
}

/// The memory backend whose `leave` waits for the test to open a gate (one leave per message).
#[derive(Debug)]
struct GatedLeave {
    inner: MemoryBackend,
    gate_tx: Sender<()>,
    gate_rx: Receiver<()>,
}

impl LeaseBackend for GatedLeave {
    fn kind(&self) -> &'static str {
        "gated-leave"
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<SessionGrant> {
        self.inner.open_session(d, m)
    }
    fn keep_alive(&self, s: &SessionId, d: Duration) -> simba::Result<KeepAlive> {
        self.inner.keep_alive(s, d)
    }
    fn close_session(&self, s: &SessionId) -> simba::Result<()> {
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &Name) -> simba::Result<Acquire> {
        self.inner.acquire(s, n)
    }
    fn release(&self, s: &SessionId, n: &Name, t: Token) -> simba::Result<()> {
        self.inner.release(s, n, t)
    }
    fn holder(&self, n: &Name) -> simba::Result<Option<Holder>> {
        self.inner.holder(n)
    }
    fn join(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.inner.join(s, g)
    }
    fn leave(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        let _ = self.gate_rx.recv_timeout(Duration::from_secs(30));
        self.inner.leave(s, g)
    }
    fn members(&self, g: &Name) -> simba::Result<Vec<Member>> {
        self.inner.members(g)
    }
}

/// A leave still in flight (here: a dropped membership's background leave) must not land after a
/// re-join of the same group and undo it (simulation finding 3): the join waits for it.
#[test]
fn a_rejoin_waits_for_the_leave_in_flight() {
    let (gate_tx, gate_rx) = crossbeam_channel::unbounded();
    let backend = Arc::new(GatedLeave { inner: MemoryBackend::new(), gate_tx, gate_rx });
    let session = Arc::new(Session::open(backend.clone(), options()).unwrap());
    let group = Name::new("workers").unwrap();
    let first = session.join(&group).unwrap();
    drop(first); // leaves in the background; the leave waits at the gate

    // While the leave is in flight, a join gives up after the query timeout with a clear error.
    let e = session.join(&group).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("still in flight"), "{e}");

    // A join started meanwhile proceeds only once the leave has returned.
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    let s2 = session.clone();
    let g2 = group.clone();
    let joiner = std::thread::spawn(move || {
        let r = loop {
            match s2.join(&g2) {
                Err(e) if e.kind() == ErrorKind::Unavailable => continue,
                r => break r,
            }
        };
        done_tx.send(()).unwrap();
        r
    });
    assert!(done_rx.recv_timeout(Duration::from_millis(300)).is_err(), "the re-join overtook the leave");
    backend.gate_tx.send(()).unwrap();
    done_rx.recv_timeout(Duration::from_secs(20)).expect("the re-join finishes once the leave returned");
    let membership = joiner.join().unwrap().unwrap();
    let members = session.members(&group).unwrap();
    assert_eq!(members.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![session.id().clone()]);
    drop(membership);
    backend.gate_tx.send(()).unwrap();
}
