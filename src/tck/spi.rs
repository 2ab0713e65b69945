//! SPI sessions and leases (SPEC §2 rules 1–5, §5): raw `LeaseBackend` calls, no renewal thread.

use super::*;

/// A new session is alive: keep-alive answers `Alive` with 0 < remaining ≤ lease duration.
pub(super) fn open_session_is_alive(h: &Harness) {
    let s = h.raw_session("");
    assert!(alive(h, &s).is_empty());
    h.backend.close_session(&s).unwrap();
}

/// Rule 1: a session not renewed within its lease duration expires.
pub(super) fn session_expires_without_renewal(h: &Harness) {
    let s = h.raw_session("");
    thread::sleep(h.past_expiry());
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired);
}

/// Rule 1, the other way: a session is alive until its reported remaining has passed. Unrenewed
/// for 0.8 × the remaining a keep-alive reported (counted from before that keep-alive was sent),
/// its lease is still busy for a rival. A backend whose real TTL were shorter than what it
/// reports (say lease / 2) lets its clients' local deadlines outlive the session and fails here.
/// An attempt whose rival call returned after the reported remaining proves nothing and is
/// repeated (bounded).
pub(super) fn session_alive_until_reported_remaining(h: &Harness) {
    for attempt in 0..5 {
        let (a, b) = (h.raw_session("holder"), h.raw_session("rival"));
        let l = h.name(&format!("l{attempt}"));
        acquired(h.backend.acquire(&a, &l), "acquire");
        let rival_sent = Instant::now();
        let rival_remaining = keep_alive_remaining(h, &b);
        let sent = Instant::now();
        let remaining = keep_alive_remaining(h, &a);
        thread::sleep((sent + remaining * 4 / 5).saturating_duration_since(Instant::now()));
        let r = h.backend.acquire(&b, &l);
        let returned = Instant::now();
        if returned >= sent + remaining || returned >= rival_sent + rival_remaining {
            // The rival's call may have been evaluated after the holder's remaining: inconclusive.
            let _ = h.backend.close_session(&a);
            let _ = h.backend.close_session(&b);
            continue;
        }
        match r {
            Ok(Acquire::Busy) => {}
            other => panic!(
                "the holder, unrenewed for {:?} of the {remaining:?} its keep-alive reported, lost its lease \
                 to a rival: {other:?} (the session lives shorter than it reports)",
                returned.duration_since(sent)
            ),
        }
        let holder = h.backend.holder(&l).unwrap().map(|x| x.session);
        if Instant::now() < sent + remaining {
            assert_eq!(holder, Some(a.clone()), "holder() within the reported remaining");
        }
        h.backend.close_session(&a).unwrap();
        h.backend.close_session(&b).unwrap();
        return;
    }
    panic!("5 attempts, every rival acquire returned after the reported remaining: calls are too slow to judge");
}

fn keep_alive_remaining(h: &Harness, s: &SessionId) -> Duration {
    match h.backend.keep_alive(s, h.lease()) {
        Ok(KeepAlive::Alive { remaining, .. }) => remaining,
        other => panic!("keep_alive: expected Alive, got {other:?}"),
    }
}

/// Rule 2: an expired session never revives: renewal, acquire and join all fail. Each call is
/// tried first on a fresh expired session (before any keep-alive could delete what the session
/// left behind, e.g. an SQL row), then again after the others.
pub(super) fn expired_session_never_revives(h: &Harness) {
    let (for_acquire, for_join, for_renewal) = (h.raw_session(""), h.raw_session(""), h.raw_session(""));
    let (l, g) = (h.name("l"), h.name("g"));
    thread::sleep(h.past_expiry());
    let e = h.backend.acquire(&for_acquire, &l).expect_err("acquire as the first call on an expired session");
    assert_eq!(e.kind(), ErrorKind::SessionExpired, "acquire on a fresh expired session: {e}");
    let e = h.backend.join(&for_join, &g).expect_err("join as the first call on an expired session");
    assert_eq!(e.kind(), ErrorKind::SessionExpired, "join on a fresh expired session: {e}");
    assert_eq!(h.backend.holder(&l).unwrap(), None, "an expired session's acquire took the lease");
    assert!(h.backend.members(&g).unwrap().is_empty(), "an expired session's join is listed");
    assert_eq!(h.backend.keep_alive(&for_renewal, h.lease()).unwrap(), KeepAlive::Expired);
    assert_eq!(
        h.backend.keep_alive(&for_renewal, h.lease()).unwrap(),
        KeepAlive::Expired,
        "revived on second keep-alive"
    );
    for s in [&for_acquire, &for_join, &for_renewal] {
        let e = h.backend.acquire(s, &l).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::SessionExpired, "{e}");
        let e = h.backend.join(s, &g).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::SessionExpired, "{e}");
        assert_eq!(h.backend.keep_alive(s, h.lease()).unwrap(), KeepAlive::Expired);
    }
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    assert!(h.backend.members(&g).unwrap().is_empty());
}

/// Keep-alive extends the session beyond its first lease duration.
pub(super) fn keep_alive_extends_session(h: &Harness) {
    let s = h.raw_session("");
    let name = h.name("l");
    let t = acquired(h.backend.acquire(&s, &name), "acquire");
    outlive(h, &[&s]);
    assert_eq!(alive(h, &s), vec![(name.clone(), t)]);
    let holder = h.backend.holder(&name).unwrap().expect("holder after renewals");
    assert_eq!(holder.session, s);
    h.backend.close_session(&s).unwrap();
}

/// Closing is idempotent, and closing an unknown session is Ok.
pub(super) fn close_is_idempotent(h: &Harness) {
    let s = h.raw_session("");
    h.backend.close_session(&s).unwrap();
    h.backend.close_session(&s).unwrap();
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired);
    let unknown =
        SessionId::parse(if s.as_str().len() == 16 { "00000000000000ab" } else { "000000000000000000000000000000ab" })
            .unwrap();
    h.backend.close_session(&unknown).unwrap();
}

/// Close releases the session's leases (tokens kept) and memberships.
pub(super) fn close_releases_leases_and_memberships(h: &Harness) {
    let (a, b) = (h.raw_session("a"), h.raw_session("b"));
    let (l, g) = (h.name("l"), h.name("g"));
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.join(&a, &g).unwrap();
    h.backend.close_session(&a).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    assert!(h.backend.members(&g).unwrap().is_empty());
    let t2 = acquired(h.backend.acquire(&b, &l), "acquire after close");
    assert!(t2 > t1, "token after close {t2} not > {t1}");
    h.backend.close_session(&b).unwrap();
}

/// Remaining durations never exceed the lease duration. (An acquire may instead answer that the
/// term lasts as long as its session, `TermRemaining::WithSession`: that the term then ends with
/// the session, and not before, is what the rule-1 and rule-3 cases check of every backend.)
pub(super) fn remaining_never_exceeds_lease_duration(h: &Harness) {
    let s = h.raw_session("");
    let l = h.name("l");
    match h.backend.acquire(&s, &l).unwrap() {
        Acquire::Acquired { remaining: TermRemaining::Known(remaining), .. } => {
            assert!(remaining <= h.lease() && !remaining.is_zero(), "{remaining:?}")
        }
        Acquire::Acquired { remaining: TermRemaining::WithSession, .. } => {}
        Acquire::Busy => panic!("busy"),
    }
    alive(h, &s);
    let holder = h.backend.holder(&l).unwrap().expect("holder");
    assert!(holder.remaining <= h.lease(), "holder remaining {:?}", holder.remaining);
    h.backend.close_session(&s).unwrap();
}

/// Rule 4: tokens are > 0 and strictly increase with every new term.
pub(super) fn token_increases_per_term(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "first");
    assert!(t1.get() > 0);
    h.backend.release(&a, &l, t1).unwrap();
    let t2 = acquired(h.backend.acquire(&a, &l), "same holder after release");
    assert!(t2 > t1, "{t2} not > {t1}");
    h.backend.release(&a, &l, t2).unwrap();
    let t3 = acquired(h.backend.acquire(&b, &l), "new holder");
    assert!(t3 > t2, "{t3} not > {t2}");
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// Rule 4: a token is stable within a term (renewals and re-acquire keep it).
pub(super) fn token_stable_within_term(h: &Harness) {
    let s = h.raw_session("");
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&s, &l), "acquire");
    for _ in 0..3 {
        assert_eq!(alive(h, &s), vec![(l.clone(), t)]);
    }
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| x.token), Some(t));
    h.backend.close_session(&s).unwrap();
}

/// Acquiring a lease this session holds returns the same token.
pub(super) fn reacquire_is_idempotent(h: &Harness) {
    let s = h.raw_session("");
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&s, &l), "acquire");
    assert_eq!(acquired(h.backend.acquire(&s, &l), "re-acquire"), t);
    assert_eq!(acquired(h.backend.acquire(&s, &l), "re-acquire"), t);
    h.backend.close_session(&s).unwrap();
}

/// A lease held by a live session is busy for others.
pub(super) fn held_lease_is_busy(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    acquired(h.backend.acquire(&a, &l), "acquire");
    assert_eq!(h.backend.acquire(&b, &l).unwrap(), Acquire::Busy);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// Rules 3 and 4: after the holder's session expires, another session takes over with a larger token.
pub(super) fn takeover_after_expiry(h: &Harness) {
    let (a, b) = (h.raw_session("a"), h.raw_session("b"));
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    assert_eq!(h.backend.acquire(&b, &l).unwrap(), Acquire::Busy);
    outlive(h, &[&b]);
    assert_eq!(h.backend.holder(&l).unwrap(), None, "holder of an expired session is reported");
    let t2 = acquired(h.backend.acquire(&b, &l), "takeover");
    assert!(t2 > t1, "{t2} not > {t1}");
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| (x.session, x.token)), Some((b.clone(), t2)));
    // The old holder never sees the lease again.
    assert_eq!(h.backend.keep_alive(&a, h.lease()).unwrap(), KeepAlive::Expired);
    h.backend.close_session(&b).unwrap();
}

/// Release frees the lease and keeps the token: the next term's token is larger.
pub(super) fn release_keeps_token(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&a, &l, t1).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    assert!(alive(h, &a).is_empty(), "released lease still reported owned");
    let t2 = acquired(h.backend.acquire(&b, &l), "after release");
    assert!(t2 > t1);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// A release by a session that does not hold the lease is a no-op.
pub(super) fn release_by_non_holder_is_noop(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&b, &l, t).unwrap();
    h.backend.release(&b, &h.name("never-acquired"), t).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| (x.session, x.token)), Some((a.clone(), t)));
    assert_eq!(alive(h, &a), vec![(l.clone(), t)]);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// A release names a term: releasing an older term (a release that lands late) or a wrong token
/// never frees the current one.
pub(super) fn release_of_another_term_is_noop(h: &Harness) {
    let a = h.raw_session("");
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&a, &l, t1).unwrap();
    let t2 = acquired(h.backend.acquire(&a, &l), "second term");
    assert!(t2 > t1);
    // The first term's release arrives again (late), and a release with a token never granted.
    h.backend.release(&a, &l, t1).unwrap();
    let never = Token::new(t2.get() + 1_000_000).unwrap_or(t2);
    h.backend.release(&a, &l, never).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| (x.session, x.token)), Some((a.clone(), t2)));
    assert_eq!(alive(h, &a), vec![(l.clone(), t2)]);
    h.backend.close_session(&a).unwrap();
}

/// Rule 4: tokens never reset — not by release, expiry, close or purge. The purge must have done
/// its work: it deletes the expired session (count ≥ 1), or reports 0 on a backend whose server
/// expires sessions itself ([`Harness::with_native_expiry`]). Another client of a shared server
/// may purge the session first; a count of 0 is therefore tried again (bounded) before it fails.
pub(super) fn token_never_resets(h: &Harness) {
    let l = h.name("l");
    let mut last = None;
    let mut purged_one = false;
    for _ in 0..4 {
        let a = h.raw_session("");
        let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
        assert!(last.is_none_or(|t| t1 > t), "{t1} not > {last:?} after an expiry and purge");
        thread::sleep(h.past_expiry());
        // The first call after the expiry: nothing of this case swept the session before.
        let purged = h.backend.purge_expired().unwrap();
        assert_eq!(h.backend.keep_alive(&a, h.lease()).unwrap(), KeepAlive::Expired);
        last = Some(t1);
        if h.native_expiry {
            assert_eq!(purged, 0, "a backend declared to expire sessions natively purged {purged} sessions");
            break;
        }
        if purged >= 1 {
            purged_one = true;
            break;
        }
    }
    assert!(
        h.native_expiry || purged_one,
        "purge_expired deleted nothing in 4 tries although this case's session had expired each time (a \
         backend whose server deletes expired sessions itself declares it with Harness::with_native_expiry)"
    );
    let b = h.raw_session("");
    let t2 = acquired(h.backend.acquire(&b, &l), "after expiry and purge");
    assert!(last.is_some_and(|t1| t2 > t1), "{t2} not > {last:?}");
    h.backend.close_session(&b).unwrap();
    let c = h.raw_session("");
    let t3 = acquired(h.backend.acquire(&c, &l), "after close");
    assert!(t3 > t2);
    h.backend.close_session(&c).unwrap();
}

/// `holder` reports the live holder with its metadata and token; `None` when free.
pub(super) fn holder_reports_metadata(h: &Harness) {
    let meta = format!("node-1 ✓ {}", "x".repeat(900));
    let a = h.raw_session(&meta);
    let l = h.name("l");
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    let t = acquired(h.backend.acquire(&a, &l), "acquire");
    let holder = h.backend.holder(&l).unwrap().expect("holder");
    assert_eq!((holder.session, holder.token, holder.metadata), (a.clone(), t, meta));
    h.backend.close_session(&a).unwrap();
}

/// Keep-alive lists every lease the session holds with its token, and never one it lost.
pub(super) fn keep_alive_reports_owned_leases(h: &Harness) {
    let s = h.raw_session("");
    let mut want = Vec::new();
    for i in 0..5 {
        let l = h.name(&format!("l{i}"));
        let t = acquired(h.backend.acquire(&s, &l), "acquire");
        want.push((l, t));
    }
    want.sort();
    let mut got = alive(h, &s);
    got.sort();
    assert_eq!(got, want);
    h.backend.release(&s, &want[0].0, want[0].1).unwrap();
    let mut got = alive(h, &s);
    got.sort();
    assert_eq!(got, want[1..].to_vec());
    h.backend.close_session(&s).unwrap();
}

/// A lease taken over (after the holder's session expired) is never reported owned by the old
/// holder again: the takeover judged that session expired, so its keep-alive says `Expired`
/// (rule 2), never `Alive`.
pub(super) fn keep_alive_reports_lease_taken_over(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    acquired(h.backend.acquire(&a, &l), "acquire");
    outlive(h, &[&b]);
    acquired(h.backend.acquire(&b, &l), "takeover");
    assert_eq!(
        h.backend.keep_alive(&a, h.lease()).unwrap(),
        KeepAlive::Expired,
        "the session a takeover judged expired was renewed"
    );
    h.backend.close_session(&b).unwrap();
}

/// Names are case-sensitive: `Job` and `job` are different leases and groups.
pub(super) fn names_are_case_sensitive(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let upper = h.name("Job");
    let lower = h.name("job");
    acquired(h.backend.acquire(&a, &upper), "Job");
    acquired(h.backend.acquire(&b, &lower), "job");
    assert_eq!(h.backend.holder(&upper).unwrap().map(|x| x.session), Some(a.clone()));
    assert_eq!(h.backend.holder(&lower).unwrap().map(|x| x.session), Some(b.clone()));
    h.backend.join(&a, &upper).unwrap();
    assert!(h.backend.members(&lower).unwrap().is_empty());
    assert_eq!(h.backend.members(&upper).unwrap().len(), 1);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// N sessions racing for one free name produce exactly one winner.
pub(super) fn racing_sessions_one_winner(h: &Harness) {
    const N: usize = 8;
    let l = h.name("race");
    let sessions: Vec<SessionId> = (0..N).map(|_| h.raw_session("")).collect();
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = sessions
        .iter()
        .cloned()
        .map(|s| {
            let (b, l, backend) = (barrier.clone(), l.clone(), h.backend.clone());
            thread::spawn(move || {
                b.wait();
                backend.acquire(&s, &l)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|j| j.join().expect("racer panicked").expect("acquire")).collect();
    let winners = results.iter().filter(|r| matches!(r, Acquire::Acquired { .. })).count();
    assert_eq!(winners, 1, "{results:?}");
    for s in &sessions {
        h.backend.close_session(s).unwrap();
    }
}

/// Capability `push_release`. A backend that claims it accepts a watch of a lease and sends
/// `Released` when the lease is released and when its holder's session is closed; one that does
/// not claim it declines the watch (`Ok(false)`), so candidates know to poll.
pub(super) fn release_is_pushed(h: &Harness, claimed: bool) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&a, &l), "acquire");
    let (tx, rx) = crossbeam_channel::unbounded();
    let watching = h.backend.watch(&Topic::Lease(l.clone()), &tx).unwrap();
    if !claimed {
        assert!(!watching, "the backend claims no push_release but accepted a watch of a lease");
        h.backend.close_session(&a).unwrap();
        h.backend.close_session(&b).unwrap();
        return;
    }
    assert!(watching, "the backend claims push_release but declined to watch a lease");
    assert_eq!(h.backend.acquire(&b, &l).unwrap(), Acquire::Busy);
    h.backend.release(&a, &l, t).unwrap();
    assert_eq!(next_notification(h, &rx), Some(Notification::Released(l.clone())), "no Released after release");
    acquired(h.backend.acquire(&b, &l), "after release");
    assert!(h.backend.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    h.backend.close_session(&b).unwrap();
    assert_eq!(next_notification(h, &rx), Some(Notification::Released(l.clone())), "no Released after close");
    h.backend.close_session(&a).unwrap();
}

/// Capability `watch_checks_lease`: a lease registration looks at the lease. Registered while
/// the lease is free — never taken, released by its holder, or freed by its holder's close — the
/// backend sends `Released` at once: a waiter that registers only after its busy attempt relies
/// on it to hear a release that landed in between. A backend that does not claim it may stay
/// silent there; it must still accept a lease watch exactly when it claims `push_release`.
pub(super) fn watch_of_a_free_lease_answers_at_once(h: &Harness, claimed: bool) {
    let a = h.raw_session("");
    let l = h.name("l");
    let (tx, rx) = crossbeam_channel::unbounded();
    let registered_free = |when: &str| {
        while rx.try_recv().is_ok() {}
        let watching = h.backend.watch(&Topic::Lease(l.clone()), &tx).unwrap();
        assert_eq!(watching, h.backend.capabilities().push_release, "a lease watch accepted iff push_release");
        if claimed {
            assert_eq!(
                next_notification(h, &rx),
                Some(Notification::Released(l.clone())),
                "the backend claims watch_checks_lease, yet a registration {when} was not answered at once"
            );
        }
    };
    registered_free("of a lease never taken");
    let t = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&a, &l, t).unwrap();
    registered_free("after the holder's release");
    let b = h.raw_session("");
    acquired(h.backend.acquire(&b, &l), "acquire by b");
    h.backend.close_session(&b).unwrap();
    registered_free("after the holder's close");
    h.backend.close_session(&a).unwrap();
}
