//! The session runtime's races and deadline rules (issue #14), each forced deterministically with
//! a per-call hook backend (`support::forward`): a gate holds chosen SPI calls until the test
//! lets them go, so "a lock's acquire is in flight while ..." is a fact, not a hope.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use simba::{ElectionEvent, ErrorKind, MemoryBackend, Schedule, Session, SessionOptions};
use support::forward::{Forward, Hook, Op};

mod support;

/// Generous bound for things that happen at once; only reached when a test fails.
const PATIENCE: Duration = Duration::from_secs(10);

/// Holds every call of the ops in `held` until the test sends on `open` (one message, one call);
/// reports each held call on `entered` before it blocks. Calls of the ops in `hung` block until
/// the process ends.
#[derive(Debug)]
struct Gate {
    held: Mutex<Vec<Op>>,
    hung: Mutex<Vec<Op>>,
    entered_tx: Sender<Op>,
    entered: Receiver<Op>,
    open_tx: Sender<()>,
    open_rx: Receiver<()>,
    _never_tx: Sender<()>,
    never_rx: Receiver<()>,
    /// Every call that reached the hook, in order.
    seen: Mutex<Vec<Op>>,
}

impl Gate {
    fn new() -> Gate {
        let (entered_tx, entered) = unbounded();
        let (open_tx, open_rx) = unbounded();
        let (_never_tx, never_rx) = unbounded();
        Gate {
            held: Mutex::new(Vec::new()),
            hung: Mutex::new(Vec::new()),
            entered_tx,
            entered,
            open_tx,
            open_rx,
            _never_tx,
            never_rx,
            seen: Mutex::new(Vec::new()),
        }
    }
    fn hang(&self, op: Op) {
        self.hung.lock().unwrap().push(op);
    }
    fn hold(&self, op: Op) {
        self.held.lock().unwrap().push(op);
    }
    fn pass(&self, op: Op) {
        self.held.lock().unwrap().retain(|o| *o != op);
    }
    fn open(&self) {
        self.open_tx.send(()).unwrap();
    }
}

impl Hook for Gate {
    fn before(&self, op: Op) {
        self.seen.lock().unwrap().push(op);
        if self.hung.lock().unwrap().contains(&op) {
            let _ = self.never_rx.recv();
        }
        if self.held.lock().unwrap().contains(&op) {
            let _ = self.entered_tx.send(op);
            let _ = self.open_rx.recv();
        }
    }
}

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// A 120 s lease renewed every `renew`: no keep-alive (nor a second campaign attempt, with a long
/// `query_timeout`) gets in the way of a test.
fn slow_renewal(renew: Duration, query_timeout: Duration) -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(120))
        .renew_interval(renew)
        .query_timeout(query_timeout)
        .build()
        .unwrap()
}

fn memory_session() -> Session {
    Session::open(Arc::new(MemoryBackend::new()), options()).unwrap()
}

#[test]
fn campaign_while_a_lock_of_the_name_is_in_flight_waits_for_it_and_is_refused() {
    // Finding 3 of issue #14: a concurrent lock() and campaign() on one name both adopted the
    // same term. Since finding 9 of issue #36 the campaign waits for the lock's acquire in flight
    // (its outcome decides) instead of failing at once: the lock takes the name, the campaign is
    // refused as already held.
    let backend = Forward::memory("gated", Gate::new());
    let session = Arc::new(Session::open(backend.clone(), options()).unwrap());
    backend.hook.hold(Op::Acquire);
    let s = session.clone();
    let locker = thread::spawn(move || s.lock("x"));
    assert_eq!(backend.hook.entered.recv_timeout(PATIENCE), Ok(Op::Acquire), "lock's acquire is in flight");
    backend.hook.pass(Op::Acquire);
    let s = session.clone();
    let campaigner = thread::spawn(move || s.campaign("x").map(|_| ()).map_err(|e| e.kind()));
    backend.hook.open();
    let lease = locker.join().unwrap().expect("the lock takes the free name");
    assert_eq!(campaigner.join().unwrap(), Err(ErrorKind::AlreadyHeld), "campaign accepted while a lock held the name");
    assert!(lease.is_held());
}

#[test]
fn zero_timeout_on_a_free_lock_acquires_on_a_backend_without_a_call_bound() {
    // Issue #20 item 3: a zero timeout means one attempt, as crossbeam's recv_timeout(ZERO).
    // The acquire runs on a worker (no call bound) and answers only after the caller waited for
    // it: it is let go by another thread once it is in flight.
    let backend = Forward::memory("unbounded", Gate::new());
    backend.hook.hold(Op::Acquire);
    let session = Session::open(backend.clone(), options()).unwrap();
    let b = backend.clone();
    let opener = thread::spawn(move || {
        for _ in 0..2 {
            assert_eq!(b.hook.entered.recv_timeout(PATIENCE), Ok(Op::Acquire));
            b.hook.open();
        }
    });
    let lease = session.lock_timeout("x", Duration::ZERO).unwrap().expect("one attempt on a free lock");
    assert!(lease.is_held());
    let lease2 = session.lock_deadline("y", Instant::now()).unwrap().expect("one attempt on a free lock");
    assert!(lease2.is_held());
    opener.join().unwrap();
}

#[test]
fn a_hanging_watch_registration_does_not_cost_the_first_attempt_its_term() {
    // Finding 7: the watch was bounded by the query timeout, not the caller's deadline, and the
    // attempt sent after it was cut at the (passed) deadline: it took the lease, gave up waiting,
    // and released it again (a token bump for nothing).
    // The acquire answers only once the caller waits for it (let go by another thread).
    let backend = Forward::pushing("hung-watch", Gate::new());
    backend.hook.hang(Op::Watch);
    backend.hook.hold(Op::Acquire);
    let session = Session::open(backend.clone(), options()).unwrap();
    let b = backend.clone();
    let opener = thread::spawn(move || {
        assert_eq!(b.hook.entered.recv_timeout(PATIENCE), Ok(Op::Acquire));
        b.hook.open();
    });
    let lease = session
        .lock_deadline("x", Instant::now() + Duration::from_millis(50))
        .unwrap()
        .expect("the first attempt runs to its own bound");
    opener.join().unwrap();
    backend.hook.pass(Op::Acquire);
    let first = lease.token().unwrap();
    lease.release().unwrap();
    let next = session.try_lock("x").unwrap().expect("free after the release");
    assert_eq!(next.token().unwrap().get(), first.get() + 1, "no term was taken and released in between");
}

#[test]
fn lock_timeout_of_duration_max_waits_forever_without_panicking() {
    let session = memory_session();
    let lease = session.lock_timeout("x", Duration::MAX).unwrap().expect("free");
    assert!(lease.is_held());
}

#[test]
fn wait_elected_of_duration_max_waits_forever_without_panicking() {
    let session = memory_session();
    let election = session.campaign("e").unwrap();
    let token = election.wait_elected_timeout(Duration::MAX).unwrap();
    assert_eq!(election.token().unwrap(), token);
    let again = session.campaign("f").unwrap();
    let token = again.wait_elected().unwrap(); // the unbounded form
    assert_eq!(again.token().unwrap(), token);
}

/// Sets its flag when dropped while its thread panics.
struct PanicFlag(Arc<AtomicBool>);

impl Drop for PanicFlag {
    fn drop(&mut self) {
        if thread::panicking() {
            self.0.store(true, Ordering::SeqCst);
        }
    }
}

#[test]
fn a_leader_task_every_duration_max_keeps_its_thread() {
    let session = memory_session();
    let election = session.campaign("e").unwrap();
    let panicked = Arc::new(AtomicBool::new(false));
    let guard = PanicFlag(panicked.clone());
    let (tx, rx) = unbounded();
    let task = election.run_while_leader(Schedule::Every(Duration::MAX), move |ctx| {
        let _keep = &guard;
        let _ = tx.send(ctx.is_cancelled());
    });
    assert_eq!(rx.recv_timeout(PATIENCE), Ok(false), "the work ran once, leading");
    election.resign().unwrap();
    task.stop();
    assert!(!panicked.load(Ordering::SeqCst), "the leader task's thread panicked");
}

#[test]
fn leader_changed_for_this_node_reports_its_remaining_time() {
    // Finding 9: the node's own LeaderChanged said `remaining: 0`.
    let backend = Forward::memory("gated", Gate::new());
    backend.hook.hold(Op::Acquire);
    let session = Session::open(backend.clone(), options()).unwrap();
    let election = session.campaign("e").unwrap();
    let events = election.events();
    assert_eq!(backend.hook.entered.recv_timeout(PATIENCE), Ok(Op::Acquire));
    backend.hook.pass(Op::Acquire);
    backend.hook.open();
    loop {
        match events.recv_timeout(PATIENCE).expect("LeaderChanged for this node") {
            ElectionEvent::LeaderChanged { leader } => {
                assert_eq!(&leader.session, session.id());
                assert!(leader.remaining > Duration::from_secs(1), "remaining {:?}", leader.remaining);
                break;
            }
            ElectionEvent::Elected { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[test]
fn join_waiting_for_a_slow_leave_returns_within_one_query_timeout() {
    // Finding 7: the wait for the session's own leave in flight and the join call each had a
    // query timeout of their own (2 × query_timeout in all). The leave is let go part-way through
    // the join's bound; the join call itself hangs.
    let backend = Forward::memory("slow-leave", Gate::new());
    let session = Session::open(backend.clone(), options()).unwrap();
    let qt = session.options().query_timeout();
    backend.hook.hold(Op::Leave);
    drop(session.join("h").unwrap());
    assert_eq!(backend.hook.entered.recv_timeout(PATIENCE), Ok(Op::Leave), "the leave of 'h' is in flight");
    backend.hook.pass(Op::Leave);
    backend.hook.hang(Op::Join);
    let start = Instant::now();
    let b = backend.clone();
    let opener = thread::spawn(move || {
        // Part-way through the join's one bound (this only positions the leave's end; the
        // assertion below holds however late this thread runs).
        thread::sleep(qt * 4 / 5);
        b.hook.open();
    });
    let err = session.join("h").unwrap_err();
    let took = start.elapsed();
    opener.join().unwrap();
    assert!(matches!(err.kind(), ErrorKind::Timeout | ErrorKind::Unavailable), "{err}");
    assert!(took < qt + Duration::from_millis(250), "join took {took:?}, more than one query timeout {qt:?}");
}

#[test]
fn zero_wait_elected_on_a_free_election_waits_for_the_first_attempt() {
    // Issue #20 item 3, for elections: a zero wait on a fresh campaign for a free name gives the
    // campaign's first attempt its own bound instead of failing before it answered.
    let backend = Forward::memory("unbounded", Gate::new());
    backend.hook.hold(Op::Acquire);
    let session = Session::open(backend.clone(), options()).unwrap();
    let election = session.campaign("e").unwrap();
    let b = backend.clone();
    let opener = thread::spawn(move || {
        assert_eq!(b.hook.entered.recv_timeout(PATIENCE), Ok(Op::Acquire));
        b.hook.open();
    });
    let token = election.wait_elected_timeout(Duration::ZERO).expect("the first attempt wins the free election");
    opener.join().unwrap();
    assert_eq!(election.token().unwrap(), token);
}

#[test]
fn a_leader_contexts_token_fails_once_its_term_is_over() {
    // Finding 9: `LeaderContext::token()` returned the granted token unchecked, so work that
    // guarded its writes with it kept writing after its term ended.
    let session = memory_session();
    let election = session.campaign("e").unwrap();
    let (tx, rx) = unbounded();
    let task = election.run_while_leader(Schedule::OncePerTerm, move |ctx| {
        let _ = tx.send(ctx.token());
        while !ctx.is_cancelled() {
            thread::sleep(Duration::from_millis(1));
        }
        let _ = tx.send(ctx.token());
    });
    let leading = rx.recv_timeout(PATIENCE).expect("the work ran").expect("valid while leading");
    assert_eq!(leading, election.token().expect("the election leads"));
    session.close().unwrap();
    let over = rx.recv_timeout(PATIENCE).expect("the work saw its term end");
    assert!(over.is_err(), "the token of an ended term is still handed out: {over:?}");
    task.stop();
}

#[test]
fn a_campaign_attempt_that_starts_late_sends_no_acquire_after_its_resign() {
    // The open finding of the shipped-runtime simulation (seed 1,225 of the coordinator workload):
    // an attempt dispatched before a resign but started late (queued in the worker pool behind
    // stalled calls there; held in its watch registration here, the step before its acquire) sent
    // its acquire after resign() had returned: a grant of the resigned name, undone only later.
    // Long timings: no keep-alive and no second attempt of the campaign during the test.
    let opts = slow_renewal(Duration::from_secs(40), Duration::from_secs(30));
    let backend = Forward::pushing("late-attempt", Gate::new());
    backend.hook.hold(Op::Watch);
    let session = Session::open(backend.clone(), opts).unwrap();
    let idle = Arc::strong_count(&backend);
    let election = session.campaign("e").unwrap();
    assert_eq!(backend.hook.entered.recv_timeout(PATIENCE), Ok(Op::Watch), "the attempt registers its watch");
    election.resign().unwrap();
    let after_resign = backend.hook.seen.lock().unwrap().len();
    backend.hook.pass(Op::Watch);
    backend.hook.open();
    // The attempt holds the backend until it is done (and so does anything it starts, such as
    // the undo of a grant): wait for it, then look at what it sent.
    let until = Instant::now() + PATIENCE;
    while Arc::strong_count(&backend) > idle {
        assert!(Instant::now() < until, "the campaign attempt is still running {PATIENCE:?} after its watch returned");
        thread::sleep(Duration::from_millis(2));
    }
    let late: Vec<Op> = backend.hook.seen.lock().unwrap()[after_resign..].to_vec();
    assert!(!late.contains(&Op::Acquire), "the resigned campaign's attempt sent {late:?} after resign() returned");
    assert_eq!(backend.inner.holder(&simba::Name::new("e").unwrap()).unwrap(), None, "nobody holds the resigned name");
}

/// Counts the watch registrations made through it.
#[derive(Debug, Default)]
struct CountWatches(std::sync::atomic::AtomicUsize);

impl Hook for CountWatches {
    fn before(&self, op: Op) {
        if op == Op::Watch {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

#[test]
fn a_semaphore_waiter_does_not_spin_on_its_own_slot_freed_behind_its_back() {
    // The session holds the semaphore's only slot locally, but the backend freed it (the local
    // view is corrected at the next keep-alive). A waiter of the same session watched every slot;
    // the freed slot's watch answered "free" at once, the round skipped the slot (held here), and
    // the waiter went round again at once: a busy loop of watch and acquire calls until the next
    // keep-alive. Renewal is far away here: the waiter must just wait out its timeout.
    let opts = slow_renewal(Duration::from_secs(60), Duration::from_secs(5));
    let inner: Arc<dyn simba::backend::LeaseBackend> = Arc::new(MemoryBackend::new());
    let backend = Forward::inheriting(inner.clone(), CountWatches::default());
    let session = Session::open(backend.clone(), opts).unwrap();
    let sem = session.semaphore("s", 1).unwrap();
    let permit = sem.try_acquire().unwrap().expect("the free slot");
    let token = permit.token().unwrap();
    inner.release(session.id(), permit.lease_name(), token).unwrap();
    assert_eq!(inner.holder(permit.lease_name()).unwrap(), None, "freed on the backend");
    let before = backend.hook.0.load(Ordering::SeqCst);
    let got = sem.acquire_timeout(Duration::from_millis(300)).unwrap();
    assert!(got.is_none(), "the only slot is this session's own (as far as it knows)");
    let watches = backend.hook.0.load(Ordering::SeqCst) - before;
    assert!(watches <= 1, "the waiter registered {watches} watches in one wait: it spun");
    drop(permit);
}

#[test]
fn a_waiter_on_a_backend_without_pushes_polls_at_the_poll_interval_not_half_the_renewal() {
    // Without pushed releases a waiting lock retried every renew_interval / 2 (+ jitter): here
    // ~30 s, far past the waiter's 10 s. It now polls every poll_interval (default 500 ms).
    let opts = slow_renewal(Duration::from_secs(60), Duration::from_secs(5));
    let backend = Forward::memory("no-push", Gate::new());
    assert!(!simba::backend::LeaseBackend::capabilities(&*backend).push_release);
    let holder = Session::open(backend.clone(), opts.clone()).unwrap();
    let lease = holder.try_lock("x").unwrap().expect("free");
    let waiter_session = Session::open(backend.clone(), opts).unwrap();
    let waiter = thread::spawn(move || waiter_session.lock_timeout("x", Duration::from_secs(10)).map(|l| l.is_some()));
    // The waiter's first attempt is busy (its acquire answered while the lease is held).
    let until = Instant::now() + PATIENCE;
    while backend.hook.seen.lock().unwrap().iter().filter(|o| **o == Op::Acquire).count() < 2 {
        assert!(Instant::now() < until, "the waiter never tried");
        thread::sleep(Duration::from_millis(2));
    }
    lease.release().unwrap();
    assert!(waiter.join().unwrap().unwrap(), "the waiter got the lease released while it waited, before its deadline");
}

/// Watches as plain one-shot subscriptions, the way Redis and PostgreSQL serve them: a
/// registration does not look at the lease (the memory backend's answers "free" at once when it
/// is), and a release notifies the registrations made before it. [`hint`](Subscriptions::hint)
/// notifies them without a release, as Redis does once a channel's `SUBSCRIBE` is confirmed
/// ("re-check"). Once armed, a hint goes out right before the waiter's next acquire (consuming
/// whatever it registered before), and that acquire, busy, releases the holder's lease before its
/// reply reaches the runtime: the release lands between the attempt and what follows it.
#[derive(Debug, Default)]
struct Subscriptions {
    registered: Mutex<Vec<Sender<simba::backend::Notification>>>,
    waiter: Mutex<Option<simba::SessionId>>,
    busy_tx: Mutex<Option<Sender<()>>>,
    release_on_busy: Mutex<Option<simba::Lease>>,
}

impl Subscriptions {
    fn hint(&self) {
        for tx in self.registered.lock().unwrap().drain(..) {
            let _ = tx.try_send(simba::backend::Notification::Released(simba::Name::new("x").unwrap()));
        }
    }
}

impl Hook for Subscriptions {
    fn before(&self, op: Op) {
        if op == Op::Acquire && self.release_on_busy.lock().unwrap().is_some() {
            self.hint();
        }
    }
    fn watch(
        &self,
        _topic: &simba::backend::Topic,
        notify: &Sender<simba::backend::Notification>,
    ) -> Option<simba::Result<bool>> {
        let mut registered = self.registered.lock().unwrap();
        if !registered.iter().any(|tx| tx.same_channel(notify)) {
            registered.push(notify.clone());
        }
        Some(Ok(true))
    }
    fn acquired(&self, session: &simba::SessionId, reply: &simba::Result<simba::backend::Acquire>) {
        if self.waiter.lock().unwrap().as_ref() != Some(session) || !matches!(reply, Ok(simba::backend::Acquire::Busy))
        {
            return;
        }
        let armed = self.release_on_busy.lock().unwrap().take();
        if let Some(lease) = armed {
            lease.release().unwrap();
        }
        if let Some(tx) = &*self.busy_tx.lock().unwrap() {
            let _ = tx.send(());
        }
    }
    fn released(&self, _name: &simba::Name) {
        self.hint();
    }
}

#[test]
fn a_lock_waiter_woken_for_nothing_still_hears_a_release_right_after_its_next_attempt() {
    // lock() re-armed its one-shot watch after a busy attempt (only the first attempt had one
    // armed before it). Once a notification had consumed the watch without freeing the lease
    // (Redis's "subscribed now, re-check", or a release another contender won), a release that
    // landed between the next busy attempt and the re-arm notified nobody: the waiter slept to
    // its poll (renew_interval / 2, here 30 s; seen as a 3.29 s hand-off on a Redis Cluster TLS
    // run). Each attempt now has a watch armed before it.
    let opts = slow_renewal(Duration::from_secs(60), Duration::from_secs(5));
    let (busy_tx, busy) = unbounded();
    let hook = Subscriptions { busy_tx: Mutex::new(Some(busy_tx)), ..Subscriptions::default() };
    let backend = Forward::pushing("subscriptions", hook);
    let holder = Session::open(backend.clone(), opts.clone()).unwrap();
    let lease = holder.try_lock("x").unwrap().expect("free");
    let waiter_session = Session::open(backend.clone(), opts).unwrap();
    *backend.hook.waiter.lock().unwrap() = Some(waiter_session.id().clone());
    let waiter = thread::spawn(move || {
        let got = waiter_session.lock_timeout("x", Duration::from_secs(10)).map(|l| l.is_some());
        (got, waiter_session)
    });
    assert_eq!(busy.recv_timeout(PATIENCE), Ok(()), "the waiter's first attempt is busy");
    // Wake the waiter for nothing; its next attempt finds its watch consumed by another hint,
    // answers busy, and the lease is released right after.
    *backend.hook.release_on_busy.lock().unwrap() = Some(lease);
    backend.hook.hint();
    assert_eq!(busy.recv_timeout(PATIENCE), Ok(()), "the waiter's second attempt is busy");
    let (got, _waiter_session) = waiter.join().unwrap();
    assert!(
        got.unwrap(),
        "the lease was released right after the waiter's busy attempt, and the waiter never heard of it"
    );
}

/// Watches that take `hang` each (a registration that waits for a notification connection that
/// does not come up), counting those in flight and the most at once.
#[derive(Debug)]
struct SlowWatches {
    hang: Duration,
    started: std::sync::atomic::AtomicUsize,
    in_flight: std::sync::atomic::AtomicUsize,
    most: std::sync::atomic::AtomicUsize,
}

impl Hook for SlowWatches {
    fn before(&self, _op: Op) {}
    fn watch(
        &self,
        _topic: &simba::backend::Topic,
        _notify: &Sender<simba::backend::Notification>,
    ) -> Option<simba::Result<bool>> {
        self.started.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        self.most.fetch_max(now, Ordering::SeqCst);
        thread::sleep(self.hang);
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        Some(Ok(true))
    }
}

#[test]
fn a_waiter_keeps_one_hanging_registration_in_flight_not_one_per_round() {
    // A backend that pushes releases but bounds no call: a lock waiter's registration runs on a
    // worker and is abandoned at the query timeout (100 ms). Each registration here takes 1 s.
    // The waiter started a new one every round (about every 200 ms), so several hung at once and
    // a backend whose registrations hang parked one more worker per round; the one wait loop
    // waits for the registration still in flight instead (as `simba lock` did), and starts the
    // next one only once it returned.
    let hook = SlowWatches {
        hang: Duration::from_secs(1),
        started: Default::default(),
        in_flight: Default::default(),
        most: Default::default(),
    };
    let backend = Forward::pushing("slow-watch", hook);
    let opts = slow_renewal(Duration::from_millis(200), Duration::from_millis(100));
    let holder = Session::open(backend.clone(), opts.clone()).unwrap();
    let lease = holder.try_lock("x").unwrap().expect("free");
    let waiter = Session::open(backend.clone(), opts).unwrap();
    let started = Instant::now();
    assert!(waiter.lock_timeout("x", Duration::from_millis(2500)).unwrap().is_none(), "the lease is held");
    assert!(started.elapsed() >= Duration::from_millis(2500));
    let (most, registrations) = (backend.hook.most.load(Ordering::SeqCst), backend.hook.started.load(Ordering::SeqCst));
    assert!(registrations >= 2, "the waiter registered again once its first registration returned: {registrations}");
    assert_eq!(most, 1, "registrations in flight at once (of {registrations} started)");
    drop(lease);
}

/// Declines every watch (a push backend whose notification connection is down) and counts
/// acquires.
#[derive(Debug, Default)]
struct DeclinedWatches(std::sync::atomic::AtomicUsize);

impl Hook for DeclinedWatches {
    fn before(&self, op: Op) {
        if op == Op::Acquire {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn watch(
        &self,
        _topic: &simba::backend::Topic,
        _notify: &Sender<simba::backend::Notification>,
    ) -> Option<simba::Result<bool>> {
        Some(Ok(false))
    }
}

#[test]
fn a_waiter_whose_registration_is_declined_polls_at_the_poll_interval() {
    // A push backend that declines the registration (PostgreSQL while its LISTEN connection is
    // down): no push will come, so the waiter polls at the poll interval (500 ms), as on a
    // backend without push — it retried at renew_interval / 2 (the lost-push fallback, ~30 s
    // here), far past its 10 s.
    let opts = slow_renewal(Duration::from_secs(60), Duration::from_secs(5));
    let backend = Forward::pushing("declines", DeclinedWatches::default());
    let holder = Session::open(backend.clone(), opts.clone()).unwrap();
    let lease = holder.try_lock("x").unwrap().expect("free");
    let waiter_session = Session::open(backend.clone(), opts).unwrap();
    let waiter = thread::spawn(move || waiter_session.lock_timeout("x", Duration::from_secs(10)).map(|l| l.is_some()));
    // The waiter's first attempt is busy.
    let until = Instant::now() + PATIENCE;
    while backend.hook.0.load(Ordering::SeqCst) < 2 {
        assert!(Instant::now() < until, "the waiter never tried");
        thread::sleep(Duration::from_millis(2));
    }
    lease.release().unwrap();
    assert!(waiter.join().unwrap().unwrap(), "the waiter got the lease released while it waited, before its deadline");
}

#[test]
fn a_cancelled_wait_ends_at_once_with_cancelled() {
    // Renewal far away: a push backend's waiter retries only every ~30 s, so nothing but the
    // cancel (or a release, which never comes) can end the wait early.
    let opts = slow_renewal(Duration::from_secs(60), Duration::from_secs(5));
    let backend = Arc::new(MemoryBackend::new());
    let holder = Session::open(backend.clone(), opts.clone()).unwrap();
    let waiter = Arc::new(Session::open(backend, opts).unwrap());
    let _lease = holder.try_lock("x").unwrap().expect("free");
    let _permit = holder.semaphore("s", 1).unwrap().try_acquire().unwrap().expect("free");
    for permit in [false, true] {
        let cancel = simba::Cancel::new();
        let (busy_tx, busy_rx) = unbounded();
        let (w, c) = (waiter.clone(), cancel.clone());
        let wait = thread::spawn(move || {
            let observe = |a: simba::Attempt<'_>| {
                assert!(matches!(a, simba::Attempt::Busy), "{a:?}");
                let _ = busy_tx.send(());
            };
            if permit {
                w.semaphore("s", 1).unwrap().acquire_cancellable(None, &c, observe).map(|p| p.is_some())
            } else {
                w.lock_cancellable("x", None, &c, observe).map(|l| l.is_some())
            }
        });
        busy_rx.recv_timeout(PATIENCE).expect("the observer heard of the busy attempt");
        let cancelled = Instant::now();
        cancel.cancel();
        let err = wait.join().unwrap().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Cancelled, "{err}");
        assert!(cancelled.elapsed() < Duration::from_secs(2), "the cancel took {:?}", cancelled.elapsed());
        assert!(cancel.is_cancelled());
    }
    // A token cancelled before the call: no attempt (the free lock is not taken).
    let cancel = simba::Cancel::new();
    cancel.clone().cancel();
    let err = waiter.lock_cancellable("free", None, &cancel, |a| panic!("attempted: {a:?}")).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Cancelled);
    assert!(holder.try_lock("free").unwrap().is_some(), "the cancelled wait took the lock");
}
