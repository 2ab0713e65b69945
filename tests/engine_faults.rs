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
