//! The bounded worker pool (issue 14, finding 8): a backend whose calls hang parks at most
//! `worker_threads` workers, whatever retries; once every worker is parked a waited-for call
//! fails at once with `Unavailable`, and loss detection is unaffected.
//!
//! Every session of this binary asks for 4 workers (the pool is process-wide and runs the
//! largest limit any session asked for), and the tests run one at a time. Workers are counted
//! as the process's threads named `simba-call`.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serial_test::serial;
use simba::backend::{Notification, Topic};
use simba::{Cancel, Config, Coordinator, CoordinatorEvent, ErrorKind, Name, Session, SessionEvent, SessionOptions};
use support::forward::{Forward, Hook, Op};

const WORKERS: usize = 4;

/// Once switched, the chosen calls block until the gate opens (at the end of the test).
#[derive(Debug)]
struct Hang {
    open_session: AtomicBool,
    acquire: AtomicBool,
    everything: AtomicBool,
    gate: Mutex<Option<Sender<()>>>,
    wait: Receiver<()>,
}

impl Hang {
    fn new() -> Hang {
        let (tx, rx) = crossbeam_channel::bounded(0);
        Hang {
            open_session: AtomicBool::new(false),
            acquire: AtomicBool::new(false),
            everything: AtomicBool::new(false),
            gate: Mutex::new(Some(tx)),
            wait: rx,
        }
    }
    /// Lets every parked call return.
    fn open_gate(&self) {
        self.gate.lock().take();
    }
}

impl Hook for Hang {
    fn before(&self, op: Op) {
        if self.everything.load(Ordering::SeqCst)
            || (op == Op::OpenSession && self.open_session.load(Ordering::SeqCst))
            || (op == Op::Acquire && self.acquire.load(Ordering::SeqCst))
        {
            let _ = self.wait.recv();
        }
    }
}

/// Opens the gate when dropped, also when the test panics: the parked calls hold the backend, so
/// without it they would stay parked for good and starve every later test of workers.
struct OpenOnDrop(Arc<Forward<Hang>>);

impl Drop for OpenOnDrop {
    fn drop(&mut self) {
        self.0.hook.open_gate();
    }
}

/// Opens the gate and waits until every call into `fwd` has returned (no job holds the backend
/// any more).
fn drain(fwd: Arc<Forward<Hang>>) {
    fwd.hook.open_gate();
    let until = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&fwd) > 2 {
        assert!(Instant::now() < until, "calls into the backend still running 10 s after the gate opened");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the pool has a free worker: a worker whose call returned is busy until it is
/// back in the pool, so a test starting right after another's calls returned could be refused.
/// Probes with a session opening (a waited-for call on a worker) over a backend that never
/// hangs.
fn pool_is_free() {
    #[derive(Debug)]
    struct Pass;
    impl Hook for Pass {
        fn before(&self, _: Op) {}
    }
    let probe = Forward::memory("probe", Pass);
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match Session::open(
            probe.clone(),
            options(Duration::from_secs(5), Duration::from_secs(1), Duration::from_secs(1)),
        ) {
            Ok(s) => return s.close().unwrap(),
            Err(e) if e.kind() == ErrorKind::Unavailable && Instant::now() < until => {
                std::thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("the worker pool has no free worker 10 s after the last test: {e}"),
        }
    }
}

/// Threads of this process named `simba-call` (the pool's workers).
fn workers() -> usize {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { panic!("/proc/self/task is not readable") };
    dir.filter_map(|t| t.ok())
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "simba-call"))
        .count()
}

fn options(lease: Duration, renew: Duration, query: Duration) -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(lease)
        .renew_interval(renew)
        .query_timeout(query)
        .worker_threads(WORKERS)
        .build()
        .unwrap()
}

/// The coordinator's reopen loop against a backend whose `open_session` hangs: every retry used
/// to park one more worker thread. Now at most the limit are parked, and the retries beyond it
/// fail at once saying the pool is exhausted.
#[test]
#[serial]
fn reopen_loop_against_a_hanging_backend_parks_at_most_the_worker_limit() {
    pool_is_free();
    let fwd = Forward::memory("hang-open", Hang::new());
    let _open = OpenOnDrop(fwd.clone());
    let opts = options(Duration::from_secs(1), Duration::from_millis(100), Duration::from_millis(20));
    let coordinator = Coordinator::start(fwd.clone(), opts).unwrap();
    let events = coordinator.events();
    fwd.hook.open_session.store(true, Ordering::SeqCst);
    let id = coordinator.session_id().unwrap();
    fwd.inner.close_session(&id).unwrap();
    let (mut failed, mut exhausted) = (0, 0);
    let until = Instant::now() + Duration::from_secs(20);
    while failed < 3 * WORKERS || exhausted == 0 {
        match events.recv_deadline(until) {
            Ok(CoordinatorEvent::OpenFailed { error }) => {
                failed += 1;
                if error.contains("worker pool is exhausted") {
                    exhausted += 1;
                }
            }
            Ok(_) => {}
            Err(_) => panic!("{failed} failed opens, {exhausted} for an exhausted pool, within 20 s"),
        }
        assert!(workers() <= WORKERS, "{} worker threads after {failed} failed opens (limit {WORKERS})", workers());
    }
    drop(coordinator);
    drain(fwd);
}

/// Every worker parked in a hanging backend: a user call fails at once with `Unavailable`
/// (naming the pool and how to raise it), and the lease and session are still lost at the local
/// deadline, with their events.
#[test]
#[serial]
fn exhausted_pool_fails_user_calls_at_once_and_loss_detection_is_unaffected() {
    pool_is_free();
    let fwd = Forward::memory("hang-all", Hang::new());
    let _open = OpenOnDrop(fwd.clone());
    let opts = options(Duration::from_secs(1), Duration::from_millis(250), Duration::from_millis(200));
    let session = Session::open(fwd.clone(), opts).unwrap();
    let events = session.events();
    let name = Name::new(support::unique("pool")).unwrap();
    let lease = session.lock(&name).unwrap();
    let token = lease.token().unwrap();
    fwd.hook.everything.store(true, Ordering::SeqCst);
    // No renewal sent after this point can succeed, so the deadline is at most one lease away.
    let latest_deadline = Instant::now() + Duration::from_secs(1);
    // Each call parks a worker (it times out) until the pool is exhausted.
    let mut timeouts = 0;
    let refused = loop {
        let err = session.try_lock(support::unique("park")).unwrap_err();
        match err.kind() {
            ErrorKind::Timeout => timeouts += 1,
            ErrorKind::Unavailable => break err,
            k => panic!("unexpected {k:?}: {err}"),
        }
        assert!(timeouts <= WORKERS, "more than {WORKERS} calls parked a worker");
    };
    let text = refused.to_string();
    assert!(text.contains("worker pool is exhausted"), "{text}");
    assert!(text.contains("worker_threads") && text.contains("SIMBA_WORKER_THREADS"), "{text}");
    assert!(workers() <= WORKERS, "{} worker threads (limit {WORKERS})", workers());
    support::assert_lost_by(&session, &events, &lease, (name, token), latest_deadline + Duration::from_millis(500));
    drop(lease);
    drop(session);
    drain(fwd);
}

/// Parks every worker in a hanging acquire: `try_lock`s until `WORKERS` of them timed out (each
/// parks its worker until the gate opens). A refusal before that is a worker busy for a moment with
/// something else (a keep-alive runs on the pool too): tried again. Then no worker can free up
/// before the gate opens, so every waited-for call is refused.
fn exhaust(session: &Session) {
    let (mut parked, until) = (0, Instant::now() + Duration::from_secs(10));
    while parked < WORKERS {
        match session.try_lock(support::unique("park")) {
            Err(e) if e.kind() == ErrorKind::Timeout => parked += 1,
            Err(e) if e.kind() == ErrorKind::Unavailable && e.to_string().contains("worker pool is exhausted") => {
                assert!(Instant::now() < until, "only {parked} of {WORKERS} workers parked within 10 s");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// Simulation finding (seed 592 of the Cluster election sweep): a join or a waited leave that the
/// exhausted pool refused never ran, and nothing ended it in the engine, so it stayed counted in
/// flight for good. A join counted in flight keeps the group from ever being judged again (a
/// membership removed behind the session was never reported lost); a leave counted in flight
/// makes every later join of the group fail. Now a refused call is ended like one that failed.
#[test]
#[serial]
fn joins_and_leaves_refused_by_an_exhausted_pool_leave_nothing_in_flight() {
    pool_is_free();
    let fwd = Forward::memory("hang-acquire", Hang::new());
    let _open = OpenOnDrop(fwd.clone());
    let opts = options(Duration::from_secs(3), Duration::from_millis(100), Duration::from_millis(200));
    let session = Session::open(fwd.clone(), opts).unwrap();
    let events = session.events();
    let (joined, refused_join) = (support::unique("joined"), support::unique("refused"));
    let member = session.join(joined.as_str()).unwrap();
    fwd.hook.acquire.store(true, Ordering::SeqCst);
    exhaust(&session);
    let err = session.join(refused_join.as_str()).unwrap_err();
    assert!(err.to_string().contains("worker pool is exhausted"), "{err}");
    let err = member.leave().unwrap_err();
    assert!(err.to_string().contains("worker pool is exhausted"), "{err}");
    // The parked acquires return; the pool has workers again.
    fwd.hook.acquire.store(false, Ordering::SeqCst);
    fwd.hook.open_gate();
    pool_is_free();
    // The refused leave is not in flight: the group can be joined again at once.
    let again = session.join(joined.as_str()).expect("a join after a refused leave");
    // The refused join is not in flight: its group is judged by the keep-alives, so a membership
    // removed behind the session is reported lost (and re-joined).
    let member = session.join(refused_join.as_str()).expect("a join after a refused join");
    fwd.inner.leave(session.id(), member.group()).unwrap();
    let lost = loop {
        match events.recv_timeout(Duration::from_secs(5)) {
            Ok(SessionEvent::MembershipLost { group }) => break group,
            Ok(_) => {}
            Err(e) => panic!("the membership removed behind the session was not reported lost within 5 s: {e}"),
        }
    };
    assert_eq!(lost.as_str(), refused_join);
    drop((again, member));
    session.close().unwrap();
}

/// Registrations for a release that hang (a backend whose `watch` never answers, as a
/// PostgreSQL notification connection whose `LISTEN` is held): the wait keeps the one in flight
/// and waits for it again each round instead of starting another, so it parks one worker
/// however many rounds it waits (a wait that started one per round parked one more per round,
/// up to the pool's limit, and then had its registrations refused).
#[test]
#[serial]
fn a_hanging_registration_is_not_started_again_every_round() {
    #[derive(Debug)]
    struct HangWatch {
        hang: AtomicBool,
        in_flight: AtomicUsize,
        most: AtomicUsize,
        gate: Mutex<Option<Sender<()>>>,
        wait: Receiver<()>,
    }
    impl Hook for HangWatch {
        fn before(&self, _: Op) {}
        fn watch(&self, _: &Topic, _: &Sender<Notification>) -> Option<simba::Result<bool>> {
            if !self.hang.load(Ordering::SeqCst) {
                return Some(Ok(false));
            }
            let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            self.most.fetch_max(now, Ordering::SeqCst);
            let _ = self.wait.recv();
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            Some(Ok(false))
        }
    }
    struct GateOnDrop(Arc<Forward<HangWatch>>);
    impl Drop for GateOnDrop {
        fn drop(&mut self) {
            self.0.hook.gate.lock().take();
        }
    }
    pool_is_free();
    let (tx, rx) = crossbeam_channel::bounded(0);
    let hook = HangWatch {
        hang: AtomicBool::new(false),
        in_flight: AtomicUsize::new(0),
        most: AtomicUsize::new(0),
        gate: Mutex::new(Some(tx)),
        wait: rx,
    };
    let fwd = Forward::pushing("hang-watch", hook);
    let open = GateOnDrop(fwd.clone());
    let opts = || {
        SessionOptions::builder()
            .lease_duration(Duration::from_secs(10))
            .renew_interval(Duration::from_secs(3))
            .query_timeout(Duration::from_millis(50))
            .poll_interval(Duration::from_millis(10))
            .worker_threads(WORKERS)
            .build()
            .unwrap()
    };
    let holder = Session::open(fwd.clone(), opts()).unwrap();
    let name = Name::new(support::unique("hangwatch")).unwrap();
    let _held = holder.lock(&name).unwrap();
    let waiter = Session::open(fwd.clone(), opts()).unwrap();
    fwd.hook.hang.store(true, Ordering::SeqCst);
    // Rounds of: wait up to the query timeout for the registration, attempt (busy), pause; the
    // wait is cancelled after its sixth busy attempt.
    let (cancel, mut rounds) = (Cancel::new(), 0);
    let got = waiter.lock_cancellable(&name, None, &cancel, |_| {
        rounds += 1;
        if rounds == 6 {
            cancel.cancel();
        }
    });
    assert_eq!(got.map(|l| l.is_some()).map_err(|e| e.kind()), Err(ErrorKind::Cancelled));
    let most = fwd.hook.most.load(Ordering::SeqCst);
    assert_eq!(most, 1, "{most} registrations in flight at once over {rounds} rounds (one hangs for good)");
    drop(open);
    drop((waiter, _held, holder));
    drain_watches(fwd);
}

/// Waits until no call into `fwd` is running any more (its gate is open).
fn drain_watches(fwd: Arc<Forward<impl Hook>>) {
    let until = Instant::now() + Duration::from_secs(10);
    while Arc::strong_count(&fwd) > 1 {
        assert!(Instant::now() < until, "calls into the backend still running 10 s after the gate opened");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn worker_threads_is_configured_by_simba_worker_threads() {
    let vars = |v: &'static str| {
        move |name: &str| match name {
            "SIMBA_URL" => Some("memory://".to_string()),
            "SIMBA_WORKER_THREADS" => Some(v.to_string()),
            _ => None,
        }
    };
    let c = Config::from_vars(vars("16")).unwrap();
    assert_eq!(c.session_options().worker_threads(), 16);
    let e = Config::from_vars(vars("0")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert!(e.to_string().contains("worker_threads 0 must be in 1..=4096"), "{e}");
    let e = Config::from_vars(vars("many")).unwrap_err();
    assert!(e.to_string().contains("SIMBA_WORKER_THREADS=\"many\" is not a whole number"), "{e}");
    assert_eq!(Config::from_url("memory://").unwrap().session_options().worker_threads(), 64);
}
