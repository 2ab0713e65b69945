//! Counted semaphores through the public API: `Session::semaphore`, `Permit`, the stored limit,
//! per-slot fencing tokens, expiry, and waking on pushed releases. A permit is a term of one of
//! the semaphore's slot leases, so these cases check that the backend keeps the lease rules on
//! the slot names and stores the limit atomically, once.

use std::collections::HashMap;

use parking_lot::Mutex;

use super::spy::{Call, Spy};
use super::*;
use crate::handles::semaphore::{slot_of, Permit, Semaphore, MAX_PERMITS, MAX_SEMAPHORE_NAME_LEN};

/// `try_acquire` until it answers (a transient failure under contention is retried, as the
/// caller would).
fn try_permit(sem: &Semaphore) -> Option<Permit> {
    loop {
        match sem.try_acquire() {
            Ok(p) => return p,
            Err(e) if e.is_retryable() => thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("try_acquire of semaphore '{}': {}", sem.name(), crate::error::display_chain(&e)),
        }
    }
}

/// N + k sessions race for N permits: exactly N win, on N distinct slots, each with a valid
/// token, and `holders()` reports exactly the winners on those slots.
pub(super) fn racing_sessions_exactly_n_win(h: &Harness) {
    const N: u32 = 3;
    const K: usize = 4;
    let name = h.name("race");
    let sessions: Vec<Arc<Session>> = (0..N as usize + K).map(|_| Arc::new(h.session())).collect();
    let barrier = Arc::new(Barrier::new(sessions.len()));
    let racers: Vec<_> = sessions
        .iter()
        .map(|s| {
            let (s, name, barrier) = (s.clone(), name.clone(), barrier.clone());
            thread::spawn(move || {
                let sem = s.semaphore(&name, N).expect("semaphore");
                barrier.wait();
                try_permit(&sem)
            })
        })
        .collect();
    let permits: Vec<Permit> = racers.into_iter().filter_map(|r| r.join().expect("racer")).collect();
    assert_eq!(permits.len(), N as usize, "{} of {} sessions got one of {N} permits", permits.len(), N as usize + K);
    let mut slots: Vec<u32> = permits.iter().map(Permit::slot).collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..N).collect::<Vec<_>>(), "the winners' slots");
    for p in &permits {
        assert!(p.token().is_ok(), "{p:?}");
        assert_eq!(p.name(), &name);
    }
    let sem = sessions[0].semaphore(&name, N).unwrap();
    let holders = sem.holders().unwrap();
    let mut expected: Vec<(u32, SessionId, Token)> =
        permits.iter().map(|p| (p.slot(), p.session_id().clone(), p.granted_token())).collect();
    expected.sort();
    let got: Vec<(u32, SessionId, Token)> = holders.into_iter().map(|(s, h)| (s, h.session, h.token)).collect();
    assert_eq!(got, expected, "holders() must report exactly the winners");
    drop(permits);
    for s in sessions {
        match Arc::try_unwrap(s) {
            Ok(s) => s.close().unwrap(),
            Err(_) => panic!("TCK bug: a racer kept its session"),
        }
    }
}

/// Sessions take and give back permits in a loop. Every time one is taken, the permits whose
/// `token()` is Ok at that instant (the new one included) number at most N, and each slot's
/// tokens strictly increase in the order its terms were taken. (A holder registers its permit
/// right after the grant and unregisters it before the release, under one lock, so the
/// registration order of a slot is the order of its terms; a stale holder's `token()` already
/// fails when its slot is granted again, so it is not counted.)
pub(super) fn at_most_n_permits_valid_at_once(h: &Harness) {
    const N: u32 = 2;
    const WORKERS: usize = 5;
    const ROUNDS: usize = 6;
    let name = h.name("bound");
    let live: Arc<Mutex<Vec<Arc<Permit>>>> = Arc::new(Mutex::new(Vec::new()));
    let terms: Arc<Mutex<HashMap<u32, Vec<Token>>>> = Arc::new(Mutex::new(HashMap::new()));
    // Leases longer than the harness's (nothing here waits for an expiry): a worker whose session
    // expired under load would fail its acquire, not break the rule checked.
    let long = super::options(Duration::from_secs(4), Duration::from_secs(1));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let session = h.session_on(h.backend.clone(), long.clone());
            let (name, live, terms, patience) = (name.clone(), live.clone(), terms.clone(), h.patience());
            thread::spawn(move || {
                let sem = session.semaphore(&name, N).expect("semaphore");
                let mut most = 0;
                for _ in 0..ROUNDS {
                    let permit = Arc::new(
                        sem.acquire_timeout(patience).expect("acquire").expect("no permit within the patience"),
                    );
                    {
                        let mut live = live.lock();
                        live.push(permit.clone());
                        let valid = live.iter().filter(|p| p.token().is_ok()).count();
                        most = most.max(valid);
                        assert!(valid <= N as usize, "{valid} permits of {N} have a valid token at once: {live:?}");
                        terms.lock().entry(permit.slot()).or_default().push(permit.granted_token());
                    }
                    thread::sleep(Duration::from_millis(15));
                    live.lock().retain(|p| !Arc::ptr_eq(p, &permit));
                    match Arc::try_unwrap(permit) {
                        Ok(p) => p.release().expect("release"),
                        Err(_) => panic!("TCK bug: the permit is still shared"),
                    }
                }
                session.close().expect("close");
                most
            })
        })
        .collect();
    let most = workers.into_iter().map(|w| w.join().expect("worker")).max().unwrap_or(0);
    assert!(most >= 1, "no permit was ever valid");
    let terms = terms.lock();
    assert_eq!(terms.values().map(Vec::len).sum::<usize>(), WORKERS * ROUNDS);
    for (slot, tokens) in terms.iter() {
        assert!(*slot < N, "slot {slot} of a semaphore of {N}");
        assert!(tokens.windows(2).all(|w| w[0] < w[1]), "slot {slot}: tokens {tokens:?} do not strictly increase");
    }
}

/// The limit is stored by the first use: asking for another is `InvalidConfig` naming both
/// values; `existing_semaphore` reads it back (and stores nothing for an unused name). Bad
/// limits and names are rejected before any I/O, and user leases and groups cannot use the slot
/// names.
pub(super) fn limit_is_stored_and_mismatch_rejected(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let name = h.name("limit");
    let sem = a.semaphore(&name, 3).unwrap();
    assert_eq!(sem.permits(), 3);
    let e = b.semaphore(&name, 4).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    let msg = e.to_string();
    assert!(msg.contains("has 3 permits") && msg.contains("4 were asked for") && msg.contains(name.as_str()), "{msg}");
    assert_eq!(b.semaphore(&name, 3).unwrap().permits(), 3);
    assert_eq!(b.existing_semaphore(&name).unwrap().map(|s| s.permits()), Some(3));
    let unused = h.name("unused");
    assert!(b.existing_semaphore(&unused).unwrap().is_none());
    assert!(b.existing_semaphore(&unused).unwrap().is_none(), "a read stored a limit");
    // Racing first uses with different limits: one limit is stored and everyone is told it.
    let raced = h.name("raced");
    let barrier = Arc::new(Barrier::new(4));
    let backend = h.backend.clone();
    let racers: Vec<_> = (1..=4u32)
        .map(|p| {
            let (backend, raced, barrier) = (backend.clone(), raced.clone(), barrier.clone());
            thread::spawn(move || {
                barrier.wait();
                loop {
                    match backend.semaphore_limit(&raced, Some(p)) {
                        Ok(stored) => return stored,
                        Err(e) if e.is_retryable() => thread::sleep(Duration::from_millis(20)),
                        Err(e) => panic!("semaphore_limit: {}", crate::error::display_chain(&e)),
                    }
                }
            })
        })
        .collect();
    let stored: HashSet<Option<u32>> = racers.into_iter().map(|r| r.join().expect("racer")).collect();
    assert_eq!(stored.len(), 1, "racing first uses were told different limits: {stored:?}");
    assert_eq!(h.backend.semaphore_limit(&raced, None).unwrap(), stored.into_iter().next().flatten());
    for bad in [0, MAX_PERMITS + 1] {
        let e = a.semaphore(h.name("bad"), bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        assert!(e.to_string().contains(&bad.to_string()), "{e}");
    }
    assert!(a.existing_semaphore(h.name("bad")).unwrap().is_none(), "a rejected limit was stored");
    let long = "s".repeat(MAX_SEMAPHORE_NAME_LEN + 1);
    assert_eq!(a.semaphore(long.as_str(), 1).unwrap_err().kind(), ErrorKind::InvalidName);
    let slot = sem.fence_resource(0).unwrap();
    assert_eq!(a.try_lock(&slot).unwrap_err().kind(), ErrorKind::InvalidName);
    assert_eq!(a.join(&slot).unwrap_err().kind(), ErrorKind::InvalidName);
    assert_eq!(a.campaign(&slot).unwrap_err().kind(), ErrorKind::InvalidName);
    assert_eq!(h.backend.holder(&slot).unwrap(), None, "a rejected lock reached the backend");
    a.close().unwrap();
    b.close().unwrap();
}

/// One session may hold several permits of one semaphore, through one handle or several, each
/// on its own slot; re-acquiring takes another permit (not idempotent). Once it holds them all,
/// nobody gets one; a dropped one goes to another session with a larger token on that slot.
pub(super) fn several_permits_in_one_session(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let name = h.name("multi");
    let sem = a.semaphore(&name, 3).unwrap();
    let first = sem.acquire().unwrap();
    let second = sem.try_acquire().unwrap().expect("a second permit");
    let third = a.semaphore(&name, 3).unwrap().try_acquire().unwrap().expect("a third permit, other handle");
    let mut slots = vec![first.slot(), second.slot(), third.slot()];
    slots.sort_unstable();
    assert_eq!(slots, vec![0, 1, 2]);
    assert!([&first, &second, &third].iter().all(|p| p.token().is_ok() && p.session_id() == a.id()));
    assert!(sem.try_acquire().unwrap().is_none(), "a session holding every slot got another permit");
    assert!(sem.acquire_timeout(Duration::from_millis(200)).unwrap().is_none());
    let other = b.semaphore(&name, 3).unwrap();
    assert!(other.try_acquire().unwrap().is_none());
    let (freed, t) = (second.slot(), second.granted_token());
    drop(second);
    let taken = other.acquire_timeout(h.patience()).unwrap().expect("the dropped permit's slot");
    assert_eq!(taken.slot(), freed);
    assert!(taken.token().unwrap() > t, "slot {freed}: token {} not > {t}", taken.granted_token());
    assert!(first.is_held() && third.is_held());
    drop((first, third, taken));
    a.close().unwrap();
    b.close().unwrap();
}

/// `release` frees the slot on the backend at once and fails `token()` (naming the semaphore and
/// the slot); `Drop` frees it too; a slot's next term has a larger token, and a fence on the
/// slot's resource then rejects the old one.
pub(super) fn release_and_drop_free_the_slot(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let name = h.name("free");
    let sem = a.semaphore(&name, 1).unwrap();
    let p = sem.acquire().unwrap();
    let (slot, resource, t1) = (p.slot(), p.fence_resource().clone(), p.token().unwrap());
    assert_eq!(slot, 0);
    assert_eq!(p.lease_name(), &resource);
    assert_eq!(slot_of(&resource), Some((name.clone(), 0)));
    assert_eq!(h.backend.holder(&resource).unwrap().map(|x| (x.session, x.token)), Some((a.id().clone(), t1)));
    let fence = crate::fence::Memory::new();
    fence.check(&resource, t1).unwrap();
    p.release().unwrap();
    assert_eq!(h.backend.holder(&resource).unwrap(), None);
    assert!(sem.holders().unwrap().is_empty());
    let other = b.semaphore(&name, 1).unwrap();
    let q = other.try_acquire().unwrap().expect("the released slot");
    let t2 = q.token().unwrap();
    assert!(t2 > t1, "{t2} not > {t1}");
    fence.check(&resource, t2).unwrap();
    assert!(fence.check(&resource, t1).unwrap_err().is_stale(), "the fence accepted the stale permit");
    drop(q);
    let r = sem.acquire_timeout(h.patience()).unwrap().expect("freed by drop");
    assert!(r.token().unwrap() > t2);
    r.release().unwrap();
    assert_eq!(h.backend.holder(&resource).unwrap(), None);
    a.close().unwrap();
    b.close().unwrap();
}

/// A permit taken behind its holder's back is reported lost as its slot lease (the event's name
/// maps back to the semaphore and slot), its `token()` fails naming both, and the slot's next
/// term has a larger token.
pub(super) fn lost_permit_names_semaphore_and_slot(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let events = a.events();
    let name = h.name("lost");
    let p = a.semaphore(&name, 2).unwrap().acquire().unwrap();
    let t1 = p.token().unwrap();
    h.backend.release(a.id(), p.lease_name(), t1).unwrap();
    let other = b.semaphore(&name, 2).unwrap();
    let mut taken = Vec::new();
    let end = Instant::now() + h.patience();
    while !taken.iter().any(|q: &Permit| q.slot() == p.slot()) {
        assert!(Instant::now() < end, "the released slot {} was never taken", p.slot());
        if let Some(q) = other.acquire_timeout(h.patience()).unwrap() {
            taken.push(q);
        }
    }
    let ev = events.recv_timeout(h.patience()).expect("lost event");
    assert_eq!(ev, SessionEvent::LeaseLost { name: p.lease_name().clone(), token: t1, reason: LossReason::NotOwned });
    assert_eq!(slot_of(p.lease_name()), Some((name.clone(), p.slot())));
    let e = p.token().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::LeaseLost);
    assert!(e.to_string().contains(&format!("permit {} of semaphore '{name}'", p.slot())), "{e}");
    let q = taken.iter().find(|q| q.slot() == p.slot()).expect("taken");
    assert!(q.token().unwrap() > t1);
    drop((p, taken));
    a.close().unwrap();
    b.close().unwrap();
}

/// Expiry frees a permit: the holder's keep-alives hang (its process goes on) while a waiter
/// waits in `acquire`; the waiter gets the expired holder's slot — not the other holder's — with
/// a larger token, and the expired holder's last `token()` Ok precedes that grant.
pub(super) fn expiry_frees_a_permit(h: &Harness) {
    let spy = Spy::new(h.backend.clone());
    let stuck = h.session_on(spy.clone(), h.options.clone());
    // Only the stuck holder's session is meant to expire: the others get longer leases, so load
    // on the machine cannot end them first.
    let long = super::options(Duration::from_secs(4), Duration::from_secs(1));
    let other = h.session_on(h.backend.clone(), long.clone());
    let waiter = Arc::new(h.session_on(h.backend.clone(), long));
    let name = h.name("expiry");
    let held = stuck.semaphore(&name, 2).unwrap().acquire().unwrap();
    let kept = other.semaphore(&name, 2).unwrap().acquire().unwrap();
    let t1 = held.token().unwrap();
    let w = {
        let (waiter, name, patience) = (waiter.clone(), name.clone(), h.patience());
        thread::spawn(move || {
            let p = waiter.semaphore(&name, 2).expect("semaphore").acquire_timeout(patience).expect("acquire");
            (Instant::now(), p)
        })
    };
    let hang = spy.hang_keep_alives();
    let mut last_ok = None;
    let (granted, p) = loop {
        let before = Instant::now();
        if held.token().is_ok() {
            last_ok = Some(before);
        }
        if w.is_finished() {
            break w.join().expect("waiter");
        }
        thread::sleep(Duration::from_millis(2));
    };
    let p = p.expect("the waiter never got the expired holder's permit");
    assert_eq!(p.slot(), held.slot(), "the waiter got a slot whose holder is alive");
    assert!(p.token().unwrap() > t1, "slot {}: token {} not > {t1}", p.slot(), p.granted_token());
    let last_ok = last_ok.expect("token() never succeeded while renewals hung");
    assert!(last_ok < granted, "the expired holder's token() succeeded after its slot was granted again");
    assert!(held.token().is_err());
    assert!(kept.token().is_ok(), "the live holder lost its permit");
    drop(hang);
    drop((held, kept, p));
    let _ = stuck.close();
    other.close().unwrap();
    match Arc::try_unwrap(waiter) {
        Ok(w) => w.close().unwrap(),
        Err(_) => panic!("TCK bug: the waiter kept its session"),
    }
}

/// A coordinator's semaphore takes its permits on the coordinator's current session.
pub(super) fn coordinator_semaphore_uses_current_session(h: &Harness) {
    let c = Coordinator::start(h.backend.clone(), h.options.clone()).unwrap();
    let name = h.name("coord");
    let sem = c.semaphore(&name, 2).unwrap();
    let p = sem.acquire().unwrap();
    assert_eq!(Some(p.session_id().clone()), c.session_id());
    assert!(p.token().is_ok());
    assert_eq!(c.semaphore(&name, 3).unwrap_err().kind(), ErrorKind::InvalidConfig);
    assert_eq!(c.existing_semaphore(&name).unwrap().map(|s| s.permits()), Some(2));
    drop(p);
    c.close().unwrap();
    assert_eq!(sem.try_acquire().unwrap_err().kind(), ErrorKind::Closed);
}

/// Capability `push_release`: a waiter in `acquire` wakes on the pushed release of any slot.
/// Sessions renew every 6 s, so a poll would retry after at least 3 s; a backend that claims push
/// must hand the permit over inside 1.5 s (`renew_interval / 4`) of the release call. On a backend
/// that polls, the waiter gets it by its retries.
pub(super) fn permit_waiter_wakes_on_release(h: &Harness, claimed: bool) {
    let options = super::options(Duration::from_secs(12), Duration::from_secs(6));
    let bound = options.renew_interval() / 4;
    let spy = Spy::new(h.backend.clone());
    let a = h.session_on(h.backend.clone(), options.clone());
    let b = Arc::new(h.session_on(spy.clone(), options));
    let name = h.name("wake");
    let sem = a.semaphore(&name, 2).unwrap();
    let (first, second) = (sem.acquire().unwrap(), sem.acquire().unwrap());
    let waiter = {
        let (b, name, patience) = (b.clone(), name.clone(), h.patience());
        thread::spawn(move || {
            let sem = b.semaphore(&name, 2).expect("semaphore");
            let p = sem.acquire_timeout(patience).expect("acquire").expect("the waiter never got a permit");
            (Instant::now(), p)
        })
    };
    // Both slots answered busy: the waiter made a full round and waits.
    assert!(eventually(h.patience(), || spy.busy_replies() >= 2), "the waiter never tried the held slots");
    let (slot, t1) = (second.slot(), second.granted_token());
    let released = Instant::now();
    second.release().unwrap();
    let (woken, p) = waiter.join().expect("waiter");
    assert_eq!(p.slot(), slot);
    assert!(p.token().unwrap() > t1);
    if claimed {
        let took = woken.duration_since(released);
        assert!(
            took < bound,
            "the backend claims push_release, yet the waiter got the permit {took:?} after the release (a poll \
             retries after {:?}; pushed, it must be inside {bound:?})",
            b.options().renew_interval() / 2
        );
    }
    drop((first, p));
    a.close().unwrap();
    match Arc::try_unwrap(b) {
        Ok(b) => b.close().unwrap(),
        Err(_) => panic!("TCK bug: the waiter kept its session"),
    }
}

/// Capability `watch_checks_lease`, for a permit waiter (see
/// `lock_registers_where_it_cannot_miss_a_release`): with one permit held elsewhere, the waiter's
/// round finds the slot busy, the spy releases the permit between that attempt and the slot's
/// registration, and on a claiming backend the registration must answer it at once; on a push
/// backend that does not claim it, the waiter registers before its first round; on a polling
/// one, a round registers nothing.
pub(super) fn permit_waiter_registers_where_it_cannot_miss_a_release(h: &Harness, claimed: bool) {
    let options = super::options(Duration::from_secs(12), Duration::from_secs(6));
    let spy = Spy::new(h.backend.clone());
    let a = h.session_on(h.backend.clone(), options.clone());
    let b = h.session_on(spy.clone(), options);
    let name = h.name("order");
    let held = a.semaphore(&name, 1).unwrap().acquire().unwrap();
    let slot = held.lease_name().clone();
    let sem = b.semaphore(&name, 1).unwrap();
    if !h.backend.capabilities().push_release {
        assert!(sem.acquire_timeout(Duration::ZERO).unwrap().is_none(), "the held permit was taken");
        let calls = spy.calls_of(&slot);
        assert!(!calls.iter().any(|c| matches!(c, Call::Watch(_))), "a polling backend's round watched: {calls:?}");
    } else {
        spy.release_at_watch_after_busy(move || held.release());
        let p = sem.acquire_timeout(h.patience()).expect("acquire").expect("the waiter never got the permit");
        spy.check_registration(&slot, claimed, Instant::now(), b.options());
        drop(p);
    }
    a.close().unwrap();
    b.close().unwrap();
}
