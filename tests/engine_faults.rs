//! The engine against a backend whose calls hang forever (like the sync `postgres` client against a
//! paused server): loss detection, lock timeouts, release and close must not wait for it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simba::{ErrorKind, LossReason, Name, Session, SessionEvent, SessionOptions, SessionState};
use support::forward::{Forward, Hook, Op};

mod support;

/// Over the memory backend: once switched, calls block until the process ends.
#[derive(Debug)]
struct Hang {
    keep_alive: AtomicBool,
    everything: AtomicBool,
    // Never sent on: `recv` blocks forever (the sender lives as long as the backend).
    _never_tx: Sender<()>,
    never_rx: Receiver<()>,
}

impl Hook for Hang {
    fn before(&self, op: Op) {
        let keep_alive = op == Op::KeepAlive;
        if self.everything.load(Ordering::SeqCst) || (keep_alive && self.keep_alive.load(Ordering::SeqCst)) {
            let _ = self.never_rx.recv();
        }
    }
}

fn hanging() -> Arc<Forward<Hang>> {
    let (tx, rx) = crossbeam_channel::bounded(0);
    let hang =
        Hang { keep_alive: AtomicBool::new(false), everything: AtomicBool::new(false), _never_tx: tx, never_rx: rx };
    Forward::memory("hanging", hang)
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
    let backend = hanging();
    let session = Session::open(backend.clone(), options()).unwrap();
    let events = session.events();
    let lease = session.lock("job").unwrap();
    let token = lease.token().unwrap();
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(lease.token().unwrap(), token, "renewals keep it");

    backend.hook.keep_alive.store(true, Ordering::SeqCst);
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
    let backend = hanging();
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("job").unwrap();
    backend.hook.keep_alive.store(true, Ordering::SeqCst);
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
    let backend = hanging();
    let session = Session::open(backend.clone(), options()).unwrap();
    let held = session.lock("held").unwrap();
    backend.hook.everything.store(true, Ordering::SeqCst);
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
    let backend = hanging();
    backend.hook.everything.store(true, Ordering::SeqCst);
    let start = Instant::now();
    let e = Session::open(backend, options()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout);
    assert!(start.elapsed() < Duration::from_millis(250) + SLACK);
}

/// Over the memory backend with a chosen [`LeaseBackend::call_bound`]: records the thread of
/// every call, and can make acquires slower than the bound it claims.
#[derive(Debug, Default)]
struct Record {
    acquire_delay: parking_lot::Mutex<Duration>,
    calls: parking_lot::Mutex<Vec<(Op, std::thread::ThreadId)>>,
}

impl Hook for Record {
    fn before(&self, op: Op) {
        self.calls.lock().push((op, std::thread::current().id()));
        if op == Op::Acquire {
            let delay = *self.acquire_delay.lock();
            std::thread::sleep(delay);
        }
    }
}

impl Record {
    /// Threads the calls `op` ran on.
    fn threads(&self, op: Op) -> Vec<std::thread::ThreadId> {
        self.calls.lock().iter().filter(|(o, _)| *o == op).map(|(_, t)| *t).collect()
    }
}

type Recording = Forward<Record>;

fn recording(bound: Option<Duration>) -> Arc<Recording> {
    Forward::memory_bounded("recording", bound, Record::default())
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

const USER_CALLS: [Op; 7] = [Op::Acquire, Op::Release, Op::Holder, Op::Join, Op::Members, Op::Leave, Op::CloseSession];

#[test]
fn a_backend_that_bounds_its_calls_runs_user_calls_on_the_callers_thread() {
    let backend = recording(Some(Duration::from_millis(100)));
    user_calls(backend.clone());
    let me = std::thread::current().id();
    for what in USER_CALLS {
        let threads = backend.hook.threads(what);
        assert!(!threads.is_empty(), "no {what:?} call");
        assert!(threads.iter().all(|t| *t == me), "{what:?} ran on another thread");
    }
    // Keep-alives never run on a user's thread (nor on the renewal thread's timer): on workers.
    let keep_alives = backend.hook.threads(Op::KeepAlive);
    assert!(!keep_alives.is_empty(), "no keep-alive in 600 ms");
    assert!(keep_alives.iter().all(|t| *t != me));
}

#[test]
fn a_backend_without_a_bound_runs_every_call_on_a_worker() {
    let backend = recording(None);
    user_calls(backend.clone());
    let me = std::thread::current().id();
    for what in USER_CALLS.into_iter().chain([Op::KeepAlive, Op::OpenSession]) {
        let threads = backend.hook.threads(what);
        assert!(!threads.is_empty(), "no {what:?} call");
        assert!(threads.iter().all(|t| *t != me), "{what:?} ran on the caller's thread");
    }
}

#[test]
fn a_bound_longer_than_the_callers_time_runs_on_a_worker() {
    // The bound (1 h) exceeds the query timeout (250 ms) and every deadline here: the engine cannot
    // wait that long on the caller's thread, so the calls go to workers and are abandoned on time.
    let backend = recording(Some(Duration::from_secs(3600)));
    let session = Session::open(backend.clone(), options()).unwrap();
    *backend.hook.acquire_delay.lock() = Duration::from_secs(2);
    let qt = session.options().query_timeout();
    let start = Instant::now();
    let e = session.try_lock("slow").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert!(start.elapsed() < qt + SLACK);
    let me = std::thread::current().id();
    assert!(backend.hook.threads(Op::Acquire).iter().all(|t| *t != me));
    // A short lock_timeout gives its one attempt the attempt's own bound, the query timeout (not
    // the 50 ms left): with a bound beyond it the call runs on a worker, abandoned at the query
    // timeout, and lock_timeout returns by its timeout plus that one bounded call.
    let backend = recording(Some(qt * 2));
    let session = Session::open(backend.clone(), options()).unwrap();
    *backend.hook.acquire_delay.lock() = Duration::from_secs(2);
    let start = Instant::now();
    assert!(session.lock_timeout("slow", Duration::from_millis(50)).unwrap().is_none());
    assert!(start.elapsed() < Duration::from_millis(50) + qt + SLACK);
    assert!(backend.hook.threads(Op::Acquire).iter().all(|t| *t != me));
}

#[test]
fn an_inline_acquire_that_overruns_its_deadline_is_undone() {
    // The backend claims 50 ms but its acquire takes 600 ms, past the query timeout (250 ms): the
    // caller gets Timeout, exactly as from an abandoned worker call, and the term it took on the
    // backend is released rather than adopted.
    let backend = recording(Some(Duration::from_millis(50)));
    let session = Session::open(backend.clone(), options()).unwrap();
    *backend.hook.acquire_delay.lock() = Duration::from_millis(600);
    let e = session.try_lock("late").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
    assert_eq!(backend.hook.threads(Op::Acquire), vec![std::thread::current().id()]);
    let name = Name::new("late").unwrap();
    // The undo is a background release: wait for it (generously), then the name is free.
    let until = Instant::now() + Duration::from_secs(10);
    while backend.inner.holder(&name).unwrap().is_some() {
        assert!(Instant::now() < until, "the late term was never released");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(backend.hook.threads(Op::Release).iter().all(|t| *t != std::thread::current().id()));
    // Nothing of it is held locally, and the name can be taken again.
    *backend.hook.acquire_delay.lock() = Duration::ZERO;
    let lease = session.try_lock("late").unwrap().expect("free again");
    assert!(lease.token().is_ok());
}

/// Over the memory backend: `leave` waits for the test to open a gate (one leave per message).
#[derive(Debug)]
struct LeaveGate {
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl Hook for LeaveGate {
    fn before(&self, op: Op) {
        if op == Op::Leave {
            let _ = self.rx.recv_timeout(Duration::from_secs(30));
        }
    }
}

/// A leave still in flight (here: a dropped membership's background leave) must not land after a
/// re-join of the same group and undo it (simulation finding 3): the join waits for it.
#[test]
fn a_rejoin_waits_for_the_leave_in_flight() {
    let (tx, rx) = crossbeam_channel::unbounded();
    let backend = Forward::memory("gated-leave", LeaveGate { tx, rx });
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
    backend.hook.tx.send(()).unwrap();
    done_rx.recv_timeout(Duration::from_secs(20)).expect("the re-join finishes once the leave returned");
    let membership = joiner.join().unwrap().unwrap();
    let members = session.members(&group).unwrap();
    assert_eq!(members.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![session.id().clone()]);
    drop(membership);
    backend.hook.tx.send(()).unwrap();
}

/// Waits (up to a generous bound) until nothing but the test holds `backend`: every thread and
/// background call of its sessions has let go of it, so every call they were going to make is made.
fn until_only_the_test_holds<T>(backend: &Arc<T>) {
    let until = Instant::now() + Duration::from_secs(20);
    while Arc::strong_count(backend) > 1 {
        assert!(Instant::now() < until, "the session still holds the backend after 20 s");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_lease_or_membership_let_go_after_close_sends_nothing() {
    // Close frees every term of the session on the backend and leaves its groups; releasing a
    // guard afterwards must not make a call of its own (10,000 dropped guards would be 10,000
    // useless calls).
    let backend = recording(Some(Duration::from_millis(100)));
    let session = Session::open(backend.clone(), options()).unwrap();
    let released = session.lock("released").unwrap();
    let dropped = session.lock("dropped").unwrap();
    let election = session.campaign("led").unwrap();
    election.wait_elected_timeout(Duration::from_secs(20)).unwrap();
    let (left, dropped_member) = (session.join("left").unwrap(), session.join("dropped").unwrap());
    session.close().unwrap();
    released.release().unwrap();
    drop(dropped);
    election.resign().unwrap();
    left.leave().unwrap();
    drop(dropped_member);
    until_only_the_test_holds(&backend);
    assert!(backend.hook.threads(Op::CloseSession).len() == 1, "one close");
    assert_eq!(backend.hook.threads(Op::Release), vec![], "a release after close reached the backend");
    assert_eq!(backend.hook.threads(Op::Leave), vec![], "a leave after close reached the backend");
    for name in ["released", "dropped", "led"] {
        assert!(backend.inner.holder(&Name::new(name).unwrap()).unwrap().is_none(), "{name} is still held");
    }
}

/// Over the memory backend: every acquire answers `TermRemaining::WithSession` (as MySQL's
/// one-upsert acquire does), and one keep-alive, once armed, is held after its listing was read
/// until the test lets it answer.
#[derive(Debug)]
struct HeldListing {
    armed: AtomicBool,
    /// Told when the armed keep-alive has read its listing.
    listed_tx: Sender<()>,
    listed_rx: Receiver<()>,
    /// The armed keep-alive answers once this is sent on.
    answer_tx: Sender<()>,
    answer_rx: Receiver<()>,
}

impl Hook for HeldListing {
    fn before(&self, _: Op) {}
    fn answer_acquire(&self, reply: simba::Result<simba::backend::Acquire>) -> simba::Result<simba::backend::Acquire> {
        reply.map(|a| match a {
            simba::backend::Acquire::Acquired { token, .. } => {
                simba::backend::Acquire::Acquired { token, remaining: simba::backend::TermRemaining::WithSession }
            }
            busy => busy,
        })
    }
    fn kept_alive(&self) {
        if self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.listed_tx.send(());
            let _ = self.answer_rx.recv();
        }
    }
}

/// Finding 3 of issue #36: a term that lasts with its session, taken while a keep-alive is in
/// flight whose listing predates it, is still held after the session's previous deadline — the
/// keep-alive renewed the session, and the term lives as long as the session. Lease 4 s, renew
/// 2 s: before the fix the term kept the deadline of the session's open (~4 s) and was reported
/// lost before the next keep-alive was even sent (at 4 s), while the session lived on.
#[test]
fn a_term_lasting_with_its_session_taken_during_a_keep_alive_outlives_the_previous_deadline() {
    let (listed_tx, listed_rx) = crossbeam_channel::bounded(1);
    let (answer_tx, answer_rx) = crossbeam_channel::bounded(1);
    let hook = HeldListing { armed: AtomicBool::new(true), listed_tx, listed_rx, answer_tx, answer_rx };
    let backend = Forward::memory("held-listing", hook);
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(2))
        .build()
        .unwrap();
    let session = Session::open(backend.clone(), options).unwrap();
    // Every deadline the open set lies before this (open's send + 4 s × (1 − drift)).
    let previous_deadline = Instant::now() + Duration::from_secs(4);
    let events = session.events();
    // The first keep-alive (sent 2 s after the open) has read its listing: the lock comes after.
    backend.hook.listed_rx.recv_timeout(Duration::from_secs(10)).expect("no keep-alive within 10 s");
    let lease = session.lock("job").unwrap();
    let token = lease.token().unwrap();
    backend.hook.answer_tx.send(()).unwrap();
    // Past the open's deadline, before the renewed one (the keep-alive was sent ≥ 2 s after the
    // open started: its deadline is ≥ 5.96 s after it, ≥ 1.7 s after this instant).
    std::thread::sleep(previous_deadline.saturating_duration_since(Instant::now()) + Duration::from_millis(200));
    assert!(session.is_alive(), "the session lives on");
    assert_eq!(lease.token().map_err(|e| e.to_string()), Ok(token), "the term must live as long as its session");
    while let Ok(ev) = events.try_recv() {
        assert!(!matches!(ev, SessionEvent::LeaseLost { .. }), "a lease lost for no reason: {ev:?}");
    }
    session.close().unwrap();
}

/// Over the memory backend: the first acquire, once armed, tells the test it was sent and waits
/// until the test lets it through.
#[derive(Debug)]
struct HeldAcquire {
    armed: AtomicBool,
    sent_tx: Sender<()>,
    sent_rx: Receiver<()>,
    go_tx: Sender<()>,
    go_rx: Receiver<()>,
}

impl Hook for HeldAcquire {
    fn before(&self, op: Op) {
        if op == Op::Acquire && self.armed.swap(false, Ordering::SeqCst) {
            let _ = self.sent_tx.send(());
            let _ = self.go_rx.recv();
        }
    }
}

/// Finding 9 of issue #36: `campaign(name)` right after `resign()`, while the resigned campaign's
/// attempt is still in flight, waits for that attempt and campaigns — it was refused with
/// `AlreadyHeld` and a misleading "has a lock in flight".
#[test]
fn a_campaign_right_after_resign_waits_for_the_old_attempt() {
    let (sent_tx, sent_rx) = crossbeam_channel::bounded(1);
    let (go_tx, go_rx) = crossbeam_channel::bounded(1);
    let hook = HeldAcquire { armed: AtomicBool::new(true), sent_tx, sent_rx, go_tx, go_rx };
    let backend = Forward::memory("held-acquire", hook);
    let session = Session::open(backend.clone(), options()).unwrap();
    let first = session.campaign("lead").unwrap();
    backend.hook.sent_rx.recv_timeout(Duration::from_secs(10)).expect("the first attempt was sent");
    first.resign().unwrap();
    // The held attempt answers a little later, whenever this thread is inside campaign() or not:
    // the outcome must not depend on which.
    let go = backend.hook.go_tx.clone();
    let opener = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        go.send(()).unwrap();
    });
    let second = session.campaign("lead").map_err(|e| e.to_string()).expect("campaign after resign");
    second.wait_elected_timeout(Duration::from_secs(10)).expect("the new campaign leads");
    opener.join().unwrap();
    second.resign().unwrap();
    session.close().unwrap();
}
