//! The coordinator's re-attach races (issue 14, finding 5), each forced deterministically: a hook
//! in the test backend (`support::forward`) or in the logger runs the racing operation at the
//! exact point of the replacement where it used to break, and the test then checks the outcome
//! on the backend itself.
//!
//! Sessions expire on purpose by closing them on the inner memory backend behind the
//! coordinator's back: the next keep-alive answers "expired" and the coordinator replaces them.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use simba::{Coordinator, CoordinatorEvent, Events, Name, SessionId, SessionOptions};
use support::forward::{Forward, Hook, Op};

type Action = Box<dyn FnOnce() + Send>;

/// Runs a one-shot action before the first forwarded call of `op` once armed.
#[derive(Default)]
struct Trap {
    armed: Mutex<Option<(Op, Action)>>,
    fired: AtomicBool,
}

impl std::fmt::Debug for Trap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trap").field("fired", &self.fired.load(Ordering::SeqCst)).finish()
    }
}

impl Trap {
    fn arm(&self, op: Op, action: impl FnOnce() + Send + 'static) {
        *self.armed.lock() = Some((op, Box::new(action)));
    }
}

impl Hook for Trap {
    fn before(&self, op: Op) {
        let action = {
            let mut armed = self.armed.lock();
            match armed.take() {
                Some((o, action)) if o == op => Some(action),
                other => {
                    *armed = other;
                    None
                }
            }
        };
        if let Some(action) = action {
            self.fired.store(true, Ordering::SeqCst);
            action();
        }
    }
}

/// Calls run on the caller's thread (the memory backend never blocks), so the supervisor's
/// re-attach runs the hook on the supervisor thread itself.
fn backend() -> Arc<Forward<Trap>> {
    Forward::memory_bounded("race", Some(Duration::ZERO), Trap::default())
}

/// A long lease (a session left open outlives every wait of these tests), fast renewals (an
/// expiry behind the coordinator's back is noticed within 100 ms).
fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(60))
        .renew_interval(Duration::from_millis(100))
        .query_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

fn name(prefix: &str) -> Name {
    Name::new(support::unique(prefix)).unwrap()
}

/// Ends the coordinator's current session on the backend; the coordinator notices at its next
/// keep-alive.
fn expire_current(fwd: &Forward<Trap>, coordinator: &Coordinator) -> SessionId {
    let id = coordinator.session_id().expect("a current session");
    fwd.inner.close_session(&id).unwrap();
    id
}

/// The next `Recovered` event (the replacement is in place and everything re-attached).
fn recovered(events: &Events<CoordinatorEvent>) -> SessionId {
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        match events.recv_deadline(until) {
            Ok(CoordinatorEvent::Recovered { new, .. }) => return new,
            Ok(_) => {}
            Err(_) => panic!("the coordinator did not recover within 10 s"),
        }
    }
}

/// Every event until the coordinator is gone (its last handle and its supervisor), so that
/// whatever it did is done.
fn all_events(events: &Events<CoordinatorEvent>) -> Vec<CoordinatorEvent> {
    let until = Instant::now() + Duration::from_secs(10);
    let mut got = Vec::new();
    loop {
        match events.recv_deadline(until) {
            Ok(e) => got.push(e),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return got,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => panic!("the coordinator is still running: {got:?}"),
        }
    }
}

fn opened_besides(events: &[CoordinatorEvent], first: &SessionId) -> Vec<SessionId> {
    events
        .iter()
        .filter_map(|e| match e {
            CoordinatorEvent::SessionOpened { session } if session != first => Some(session.clone()),
            _ => None,
        })
        .collect()
}

/// Once the coordinator is gone (its events end), the replacement it was opening is not alive on
/// the backend and nothing of it holds `group`.
fn nothing_outlives_the_coordinator(
    fwd: &Forward<Trap>,
    events: &Events<CoordinatorEvent>,
    expired: &SessionId,
    group: &Name,
) {
    let opened = opened_besides(&all_events(events), expired);
    assert!(fwd.hook.fired.load(Ordering::SeqCst), "the replacement was never opened");
    for s in &opened {
        assert!(!alive_on_backend(fwd, s), "session {s}, opened while the coordinator closed, is still alive");
    }
    no_session_left(fwd);
    let members = fwd.inner.members(group).unwrap();
    assert!(members.is_empty(), "a session of the closed coordinator still holds the group: {members:?}");
}

/// The test's private memory backend holds no session any more (the replacement may have been
/// closed before the coordinator announced it, so its id is not known).
fn no_session_left(fwd: &Forward<Trap>) {
    let state = format!("{:?}", fwd.inner);
    assert!(state.contains("sessions: 0"), "a session of the coordinator outlives it: {state}");
}

/// True while `session` is alive on the backend (its keep-alive is answered `Alive`).
fn alive_on_backend(fwd: &Forward<Trap>, session: &SessionId) -> bool {
    matches!(fwd.inner.keep_alive(session, Duration::from_secs(60)), Ok(simba::backend::KeepAlive::Alive { .. }))
}

/// Waits until `cond` holds, up to 5 s (it is an outcome the code under test must reach by
/// itself, not a timing assumption: the failing case never reaches it).
fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let until = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < until, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// (a) The application leaves a durable group while the coordinator re-joins it on the
/// replacement session: the new session must not stay in the group.
#[test]
fn leave_during_rejoin_does_not_leave_the_new_session_in_the_group() {
    let fwd = backend();
    let coordinator = Coordinator::start(fwd.clone(), options()).unwrap();
    let events = coordinator.events();
    let group = name("leave-race");
    let membership = coordinator.join(&group).unwrap();
    // The re-join on the replacement session is the next forwarded join: leave right before it.
    let slot = Arc::new(Mutex::new(Some(membership)));
    let to_leave = slot.clone();
    fwd.hook.arm(Op::Join, move || {
        let m = to_leave.lock().take().expect("the membership");
        m.leave().unwrap();
    });
    expire_current(&fwd, &coordinator);
    let new = recovered(&events);
    assert!(fwd.hook.fired.load(Ordering::SeqCst), "the re-join never ran");
    assert!(slot.lock().is_none());
    eventually("the replacement session stayed in a group the application left", || {
        coordinator.members(&group).unwrap().iter().all(|m| m.session != new)
    });
    coordinator.close().unwrap();
}

/// A logger that runs a one-shot action on the first record containing a pattern (on the
/// logging thread). It is the only pause point between a join's attach and its registration
/// in the unchanged coordinator.
struct TrapLogger;

type LogTrap = Option<(String, Action)>;
static LOG_TRAP: Mutex<LogTrap> = Mutex::new(None);

impl log::Log for TrapLogger {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        let action = {
            let mut trap = LOG_TRAP.lock();
            let hit = trap.as_ref().is_some_and(|(pattern, _)| record.args().to_string().contains(pattern.as_str()));
            if hit {
                trap.take().map(|(_, action)| action)
            } else {
                None
            }
        };
        if let Some(action) = action {
            action();
        }
    }
    fn flush(&self) {}
}

fn install_logger() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_boxed_logger(Box::new(TrapLogger)).unwrap();
        log::set_max_level(log::LevelFilter::Debug);
    });
}

/// (c) The session expires (and is replaced) after a durable join attached to it but before the
/// coordinator registered the membership: it must still move to the replacement session.
#[test]
fn expiry_between_attach_and_registration_does_not_strand_a_membership() {
    install_logger();
    let fwd = backend();
    let coordinator = Arc::new(Coordinator::start(fwd.clone(), options()).unwrap());
    let events = coordinator.events();
    let group = name("strand-race");
    let old = coordinator.session_id().unwrap();
    let (new_tx, new_rx) = crossbeam_channel::bounded(1);
    let (f, c) = (fwd.clone(), coordinator.clone());
    // The session logs the join once attached; the coordinator registers the membership after.
    *LOG_TRAP.lock() = Some((
        format!("joined '{group}'"),
        Box::new(move || {
            expire_current(&f, &c);
            let _ = new_tx.send(recovered(&events));
        }),
    ));
    let membership = coordinator.join(&group).unwrap();
    let new = new_rx.recv_timeout(Duration::from_secs(10)).expect("the log trap never fired");
    assert_ne!(new, old);
    eventually("the membership stayed on the expired session", || {
        membership.session_id().as_ref() == Some(&new)
            && coordinator.members(&group).unwrap().iter().any(|m| m.session == new)
    });
    assert!(membership.is_member());
    drop(membership);
    Arc::try_unwrap(coordinator).unwrap().close().unwrap();
}

/// (d) `close()` while a replacement session is being opened: once `close()` returned, no
/// session of the coordinator is alive on the backend (none holds a membership up to a lease
/// longer).
#[test]
fn close_during_replacement_closes_the_new_session() {
    let fwd = backend();
    let coordinator = Coordinator::start(fwd.clone(), options()).unwrap();
    let events = coordinator.events();
    let group = name("close-race");
    let _membership = coordinator.join(&group).unwrap();
    let slot = Arc::new(Mutex::new(Some(coordinator)));
    let to_close = slot.clone();
    let (closed_tx, closed_rx) = crossbeam_channel::bounded(1);
    let (returned_tx, returned_rx) = crossbeam_channel::bounded::<()>(1);
    // The replacement's open_session is the next forwarded open: close the coordinator first,
    // from another thread (close may wait for this very open to finish).
    fwd.hook.arm(Op::OpenSession, move || {
        let c: Coordinator = to_close.lock().take().expect("the coordinator");
        std::thread::spawn(move || {
            let r = c.close();
            let _ = returned_tx.send(());
            let _ = closed_tx.send(r);
        });
        // Let the close run first: it returns (the unchanged coordinator) or waits for this
        // open (a coordinator that closes what it opens during close); the outcome checked
        // below must hold in both cases.
        let _ = returned_rx.recv_timeout(Duration::from_secs(1));
    });
    let current = slot.lock().as_ref().map(|c| expire_current(&fwd, c)).unwrap();
    let result = closed_rx.recv_timeout(Duration::from_secs(10)).expect("close did not return");
    result.unwrap();
    nothing_outlives_the_coordinator(&fwd, &events, &current, &group);
}

/// (d) Dropping the coordinator while a replacement session is being opened: the new session is
/// closed (in the background, promptly), not left to expire a lease later.
#[test]
fn drop_during_replacement_closes_the_new_session() {
    let fwd = backend();
    let coordinator = Coordinator::start(fwd.clone(), options()).unwrap();
    let events = coordinator.events();
    let group = name("drop-race");
    let _membership = coordinator.join(&group).unwrap();
    let slot = Arc::new(Mutex::new(Some(coordinator)));
    let to_drop = slot.clone();
    fwd.hook.arm(Op::OpenSession, move || drop(to_drop.lock().take()));
    let current = slot.lock().as_ref().map(|c| expire_current(&fwd, c)).unwrap();
    nothing_outlives_the_coordinator(&fwd, &events, &current, &group);
}

/// Finding 6: `Duration::MAX` means "wait forever", it must not overflow the deadline.
#[test]
fn lock_timeout_of_duration_max_waits_forever_instead_of_panicking() {
    let fwd = backend();
    let coordinator = Coordinator::start(fwd.clone(), options()).unwrap();
    let lease = coordinator.lock_timeout(name("max"), Duration::MAX).unwrap().expect("a free lease");
    assert!(lease.token().is_ok());
    drop(lease);
    coordinator.close().unwrap();
}

/// The coordinator's `lock_deadline` (the session's lock loop): gives up at the deadline while
/// another session holds the lease, and takes it once free.
#[test]
fn lock_deadline_gives_up_at_the_deadline_and_takes_a_free_lease() {
    let fwd = backend();
    let coordinator = Coordinator::start(fwd.clone(), options()).unwrap();
    let other = coordinator.open_session().unwrap();
    let n = name("deadline");
    let held = other.lock(&n).unwrap();
    let deadline = Instant::now() + Duration::from_millis(100);
    assert!(coordinator.lock_deadline(&n, deadline).unwrap().is_none());
    assert!(Instant::now() >= deadline);
    held.release().unwrap();
    let lease = coordinator.lock_deadline(&n, Instant::now() + Duration::from_secs(10)).unwrap().expect("free");
    assert!(lease.token().is_ok());
    assert!(coordinator.try_lock(&n).unwrap_err().kind() == simba::ErrorKind::AlreadyHeld);
    drop(lease);
    coordinator.close().unwrap();
}

/// Finding 9 of issue #36: a coordinator's call whose current session expires under it fails
/// with `Unavailable` (the session is being replaced; retry), as the coordinator's docs say —
/// a semaphore's acquire and a lock returned `SessionExpired`. The session is ended on the
/// backend right before the call's first acquire reaches it.
#[test]
fn a_coordinator_call_spanning_a_replacement_is_unavailable() {
    let fwd = backend();
    let coordinator = Coordinator::start(fwd.clone(), options()).unwrap();
    let events = coordinator.events();
    let semaphore = coordinator.semaphore(name("sem-replaced"), 2).unwrap();
    let (f, c) = (fwd.clone(), coordinator.session_id().expect("a current session"));
    fwd.hook.arm(Op::Acquire, move || f.inner.close_session(&c).unwrap());
    let err = semaphore.acquire().map(|_| ()).unwrap_err();
    assert!(fwd.hook.fired.load(Ordering::SeqCst));
    assert_eq!(err.kind(), simba::ErrorKind::Unavailable, "{err}");
    recovered(&events);

    let (f, c) = (fwd.clone(), coordinator.session_id().expect("a current session"));
    fwd.hook.arm(Op::Acquire, move || f.inner.close_session(&c).unwrap());
    let err = coordinator.lock(name("lock-replaced")).map(|_| ()).unwrap_err();
    assert_eq!(err.kind(), simba::ErrorKind::Unavailable, "{err}");
    recovered(&events);
    // And once replaced, both work.
    let permit = semaphore.acquire().unwrap();
    let lease = coordinator.lock(name("lock-replaced")).unwrap();
    drop((permit, lease));
    coordinator.close().unwrap();
}
