//! Locks through the public API: `Session::lock`/`try_lock`, the `Lease` guard, session loss.

use super::spy::{Call, Spy};
use super::*;

/// Invalid names are rejected before any I/O, naming the value and the rule.
pub(super) fn invalid_names_rejected(h: &Harness) {
    let s = h.session();
    for bad in ["", ".", "..", "a/b", "a b", "x{y}", "é"] {
        let e = s.try_lock(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad}: {e}");
        assert!(e.to_string().contains("[A-Za-z0-9._:-]"), "{e}");
        assert_eq!(s.join(bad).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(s.campaign(bad).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(s.members(bad).unwrap_err().kind(), ErrorKind::InvalidName);
    }
    let long = "x".repeat(129);
    assert_eq!(s.try_lock(long.as_str()).unwrap_err().kind(), ErrorKind::InvalidName);
    assert!(s.is_alive());
    s.close().unwrap();
}

/// `lock` returns a guard whose `token()` works until `release`, then fails.
pub(super) fn lock_guard_token_until_release(h: &Harness) {
    let s = h.session();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    let t = lease.token().unwrap();
    assert!(lease.is_held());
    assert!(lease.remaining().is_some_and(|r| r <= h.lease()));
    // Renewals keep the token valid well past one lease duration.
    thread::sleep(h.past_expiry());
    assert_eq!(lease.token().unwrap(), t);
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| x.token), Some(t));
    lease.release().unwrap();
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    s.close().unwrap();
}

/// `try_lock` returns `None` while another session holds the lease; `lock_timeout` times out.
pub(super) fn try_lock_and_timeout_when_held(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let l = h.name("l");
    let held = a.lock(&l).unwrap();
    assert!(b.try_lock(&l).unwrap().is_none());
    let start = Instant::now();
    assert!(b.lock_timeout(&l, Duration::from_millis(600)).unwrap().is_none());
    assert!(start.elapsed() >= Duration::from_millis(600));
    assert!(b.lock_deadline(&l, Instant::now() + Duration::from_millis(100)).unwrap().is_none());
    assert!(held.is_held());
    drop(held);
    a.close().unwrap();
    b.close().unwrap();
}

/// A zero (or passed) timeout makes one attempt, as crossbeam's `recv_timeout(ZERO)` tries once:
/// on a free lock it acquires, on every backend however long its round trip.
pub(super) fn zero_timeout_on_a_free_lock_acquires(h: &Harness) {
    let s = h.session();
    let l = h.name("zero");
    let lease = s.lock_timeout(&l, Duration::ZERO).unwrap().expect("one attempt on a free lock");
    assert!(lease.is_held());
    let l2 = h.name("passed");
    let lease2 = s.lock_deadline(&l2, Instant::now()).unwrap().expect("one attempt on a free lock");
    assert!(lease2.is_held());
    // A zero wait on a fresh campaign for a free election waits for its first attempt.
    let e = s.campaign(h.name("elect")).unwrap();
    let t = e.wait_elected_timeout(Duration::ZERO).expect("the first attempt wins a free election");
    assert_eq!(e.token().unwrap(), t);
    drop((lease, lease2, e));
    s.close().unwrap();
}

/// A waiter in `lock` gets the lease after the holder releases it, with a larger token.
pub(super) fn lock_waits_for_release(h: &Harness) {
    let (a, b) = (h.session(), Arc::new(h.session()));
    let l = h.name("l");
    let first = a.lock(&l).unwrap();
    let t1 = first.token().unwrap();
    let (b2, l2) = (b.clone(), l.clone());
    let waiter = thread::spawn(move || {
        let lease = b2.lock(&l2).expect("lock");
        let t = lease.token().expect("token");
        (t, lease)
    });
    thread::sleep(Duration::from_millis(300));
    first.release().unwrap();
    let (t2, lease) = waiter.join().expect("waiter");
    assert!(t2 > t1, "{t2} not > {t1}");
    assert!(lease.is_held());
    drop(lease);
    a.close().unwrap();
}

/// Dropping the guard releases the lease.
pub(super) fn drop_releases_lease(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let l = h.name("l");
    let t1 = a.lock(&l).unwrap().token().unwrap();
    // The guard above was dropped at the end of the statement.
    let lease = b.lock_timeout(&l, h.patience()).unwrap().expect("released by drop");
    assert!(lease.token().unwrap() > t1);
    drop(lease);
    a.close().unwrap();
    b.close().unwrap();
}

/// A session does not take a lease it already holds twice (locks are not reentrant).
pub(super) fn lock_is_not_reentrant(h: &Harness) {
    let s = h.session();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    assert_eq!(s.try_lock(&l).unwrap_err().kind(), ErrorKind::AlreadyHeld);
    assert!(lease.is_held());
    drop(lease);
    s.close().unwrap();
}

/// Closing the session fails every `token()` at once and releases on the backend; close events.
pub(super) fn close_session_ends_leases(h: &Harness) {
    let s = h.session();
    let events = s.events();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    let t = lease.token().unwrap();
    s.close().unwrap();
    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    let got: Vec<SessionEvent> = events.try_iter().collect();
    assert_eq!(
        got,
        vec![
            SessionEvent::LeaseLost { name: l.clone(), token: t, reason: LossReason::SessionClosed },
            SessionEvent::Closed
        ]
    );
}

/// When the backend loses the session (deleted behind its back), the engine reports `LeaseLost`
/// then `Expired`, `token()` fails, and the session is never used again.
pub(super) fn session_loss_is_detected(h: &Harness) {
    let s = h.session();
    let events = s.events();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    let t = lease.token().unwrap();
    h.backend.close_session(s.id()).unwrap();
    let first = events.recv_timeout(h.patience()).expect("an event");
    assert_eq!(first, SessionEvent::LeaseLost { name: l.clone(), token: t, reason: LossReason::SessionExpired });
    assert_eq!(events.recv_timeout(h.patience()).expect("expired event"), SessionEvent::Expired);
    assert!(lease.token().is_err());
    assert_eq!(s.state(), SessionState::Expired);
    assert_eq!(s.try_lock(h.name("other")).unwrap_err().kind(), ErrorKind::SessionExpired);
}

/// A lease taken by someone else while we still believe we hold it is reported lost on the next
/// keep-alive (here the backend releases it behind the holder's back).
pub(super) fn lease_taken_behind_back_is_lost(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let events = a.events();
    let l = h.name("l");
    let lease = a.lock(&l).unwrap();
    let t1 = lease.token().unwrap();
    h.backend.release(a.id(), &l, t1).unwrap();
    let got = b.lock_timeout(&l, h.patience()).unwrap().expect("takeover");
    let ev = events.recv_timeout(h.patience()).expect("lost event");
    assert_eq!(ev, SessionEvent::LeaseLost { name: l.clone(), token: t1, reason: LossReason::NotOwned });
    assert!(lease.token().is_err());
    assert!(got.token().unwrap() > t1);
    assert!(a.is_alive());
    drop(got);
    a.close().unwrap();
    b.close().unwrap();
}

/// Rule 1 over real time, through the public API: the holder's keep-alives hang (its process goes
/// on, its renewals never reach the backend) while a rival polls for the lease and the holder's
/// `token()` is sampled in a tight loop. The holder's last `Ok` precedes the rival's grant: a
/// `token()` that began after the rival's acquire returned with the lease is a second valid token.
/// A backend whose sessions live shorter than they report fails here.
pub(super) fn token_exclusive_over_real_time(h: &Harness) {
    let spy = Spy::new(h.backend.clone());
    let holder = h.session_on(spy.clone(), h.options.clone());
    let l = h.name("l");
    let lease = holder.lock(&l).unwrap();
    let rival = h.raw_session("rival");
    let hang = spy.hang_keep_alives();
    let hung_at = Instant::now();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let stop = stop.clone();
        thread::spawn(move || {
            let (mut last_ok, mut samples, mut revived) = (None, 0u64, false);
            let mut failed = false;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let before = Instant::now();
                samples += 1;
                match lease.token() {
                    Ok(_) => {
                        revived |= failed;
                        last_ok = Some(before);
                    }
                    Err(_) => failed = true,
                }
            }
            (last_ok, samples, revived, lease)
        })
    };
    let end = Instant::now() + h.patience();
    let mut kept = Instant::now();
    let granted = loop {
        assert!(Instant::now() < end, "the rival never got the lease of the holder whose renewals hang");
        if kept.elapsed() >= h.options.renew_interval() {
            alive(h, &rival);
            kept = Instant::now();
        }
        if let Acquire::Acquired { token, .. } = h.backend.acquire(&rival, &l).unwrap() {
            break (Instant::now(), token);
        }
        thread::sleep(Duration::from_millis(5));
    };
    // Sample on a little after the grant: a token() that still succeeds now is caught.
    thread::sleep(Duration::from_millis(50));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (last_ok, samples, revived, lease) = sampler.join().expect("sampler");
    let last_ok = last_ok.expect("token() never succeeded");
    assert!(last_ok >= hung_at, "token() failed at once when renewals hung ({samples} samples)");
    assert!(
        last_ok < granted.0,
        "the holder's token() succeeded {:?} after the rival's acquire had returned token {} ({samples} samples)",
        last_ok.duration_since(granted.0),
        granted.1
    );
    assert!(!revived, "the holder's token() succeeded again after failing");
    drop(hang);
    drop(lease);
    let _ = holder.close();
    h.backend.close_session(&rival).unwrap();
}

/// Capability `push_release`, through the public API: a `lock` waiter wakes on the pushed
/// release. Sessions here renew every 6 s, so a poll would retry after at least 3 s
/// (`renew_interval / 2`); a backend that claims push must hand the lease over well inside that
/// (1.5 s, `renew_interval / 4`, from the release call to the waiter holding the lease). On a
/// backend that polls, the waiter gets the lease by its retries.
pub(super) fn lock_waiter_wakes_on_release(h: &Harness, claimed: bool) {
    let options = super::options(Duration::from_secs(12), Duration::from_secs(6));
    let bound = options.renew_interval() / 4;
    let spy = Spy::new(h.backend.clone());
    let a = h.session_on(h.backend.clone(), options.clone());
    let b = Arc::new(h.session_on(spy.clone(), options));
    let l = h.name("l");
    let first = a.lock(&l).unwrap();
    let t1 = first.token().unwrap();
    let waiter = {
        let (b, l, patience) = (b.clone(), l.clone(), h.patience());
        thread::spawn(move || {
            let lease = b.lock_timeout(&l, patience).expect("lock").expect("the waiter never got the lease");
            (Instant::now(), lease)
        })
    };
    assert!(eventually(h.patience(), || spy.busy_replies() > 0), "the waiter never tried the held lease");
    let released = Instant::now();
    first.release().unwrap();
    let (woken, lease) = waiter.join().expect("waiter");
    let t2 = lease.token().unwrap();
    assert!(t2 > t1, "{t2} not > {t1}");
    if claimed {
        let took = woken.duration_since(released);
        assert!(
            took < bound,
            "the backend claims push_release, yet the waiter got the lease {took:?} after the release (a poll \
             retries after {:?}; pushed, it must be inside {bound:?})",
            b.options().renew_interval() / 2
        );
    }
    drop(lease);
    a.close().unwrap();
    match Arc::try_unwrap(b) {
        Ok(b) => b.close().unwrap(),
        Err(_) => panic!("TCK bug: the waiter kept its session"),
    }
}

/// Capability `watch_checks_lease`, through the public API: where `lock` registers for the
/// release. On a backend that claims it, an uncontended `lock` makes one call (its acquire, no
/// registration), and a waiter registers after its busy attempt — the case releases the lease
/// right there, between the two, and the registration must answer it at once (well inside a
/// poll: `renew_interval / 4`). On a push backend that does not claim it, the waiter registers
/// before its first attempt; on a polling one, never.
pub(super) fn lock_registers_where_it_cannot_miss_a_release(h: &Harness, claimed: bool) {
    let options = super::options(Duration::from_secs(12), Duration::from_secs(6));
    let spy = Spy::new(h.backend.clone());
    let a = h.session_on(h.backend.clone(), options.clone());
    let b = h.session_on(spy.clone(), options);
    let (free, l) = (h.name("free"), h.name("l"));
    drop(b.lock(&free).unwrap());
    let uncontended = spy.calls_of(&free);
    if !h.backend.capabilities().push_release {
        assert!(!uncontended.iter().any(|c| matches!(c, Call::Watch(_))), "a polling backend's lock() watched");
        a.close().unwrap();
        return b.close().unwrap();
    }
    if claimed {
        assert_eq!(uncontended, [Call::Acquire { name: free.clone(), busy: false }], "an uncontended lock()");
    } else {
        assert_eq!(uncontended.first(), Some(&Call::Watch(free.clone())), "an uncontended lock(): {uncontended:?}");
    }
    let first = a.lock(&l).unwrap();
    spy.release_at_watch_after_busy(move || first.release());
    let lease = b.lock_timeout(&l, h.patience()).expect("lock").expect("the waiter never got the lease");
    spy.check_registration(&l, claimed, Instant::now(), b.options());
    drop(lease);
    a.close().unwrap();
    b.close().unwrap();
}
