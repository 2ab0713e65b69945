//! Leader election through the public API: `Session::campaign`, `Election`, leader-gated work.

use super::spy::{Call, Spy};
use super::*;

/// Exactly one leader among N candidates; every node observes the same leader.
pub(super) fn exactly_one_leader(h: &Harness) {
    let l = h.name("e");
    let sessions: Vec<Session> = (0..3).map(|i| h.session_with(&format!("node-{i}"))).collect();
    let elections: Vec<_> = sessions.iter().map(|s| s.campaign(&l).unwrap()).collect();
    assert!(eventually(h.patience(), || elections.iter().any(|e| e.is_leader())), "nobody elected");
    thread::sleep(h.options.renew_interval() * 2);
    let leaders: Vec<_> = elections.iter().filter(|e| e.is_leader()).collect();
    assert_eq!(leaders.len(), 1, "{elections:?}");
    let token = leaders[0].token().unwrap();
    for (s, e) in sessions.iter().zip(&elections) {
        let seen = s.leader(&l).unwrap().expect("leader");
        assert_eq!(seen.token, token);
        assert_eq!(e.leader().unwrap().map(|x| x.token), Some(token));
        if !e.is_leader() {
            assert_eq!(e.token().unwrap_err().kind(), ErrorKind::NotLeader);
        }
    }
    drop(elections);
    for s in sessions {
        s.close().unwrap();
    }
}

/// Leadership moves on resign (at once on push backends, within retry periods otherwise), with a
/// larger token; a follower's `leader()` sees the new leader; events arrive in order.
pub(super) fn leadership_moves_on_resign(h: &Harness) {
    let l = h.name("e");
    let (a, b) = (h.session_with("a"), h.session_with("b"));
    let ea = a.campaign(&l).unwrap();
    let t1 = ea.wait_elected_timeout(h.patience()).unwrap();
    let eb = b.campaign(&l).unwrap();
    let events_b = eb.events();
    let events_a = ea.events();
    thread::sleep(h.options.renew_interval());
    assert!(!eb.is_leader());
    ea.resign().unwrap();
    let t2 = eb.wait_elected_timeout(h.patience()).unwrap();
    assert!(t2 > t1, "{t2} not > {t1}");
    let seen = a.leader(&l).unwrap().expect("leader");
    assert_eq!((seen.session, seen.token, seen.metadata.as_str()), (b.id().clone(), t2, "b"));
    let a_events: Vec<_> = events_a.try_iter().collect();
    assert_eq!(a_events.first(), Some(&ElectionEvent::Elected { token: t1 }), "{a_events:?}");
    assert!(a_events.contains(&ElectionEvent::Revoked { token: t1, reason: RevokeReason::Resigned }), "{a_events:?}");
    let b_events: Vec<_> = events_b.try_iter().collect();
    assert!(b_events.contains(&ElectionEvent::Elected { token: t2 }), "{b_events:?}");
    drop(eb);
    a.close().unwrap();
    b.close().unwrap();
}

/// Resigning and dropping elections stop contending and free the lease.
pub(super) fn dropped_election_frees_the_lease(h: &Harness) {
    let l = h.name("e");
    let a = h.session();
    let e = a.campaign(&l).unwrap();
    e.wait_elected_timeout(h.patience()).unwrap();
    drop(e);
    assert!(eventually(h.patience(), || h.backend.holder(&l).unwrap().is_none()), "lease still held after drop");
    thread::sleep(h.options.renew_interval() * 2);
    assert!(h.backend.holder(&l).unwrap().is_none(), "a dropped election contended again");
    a.close().unwrap();
}

/// A leader whose session expires is revoked (token fails), and the other candidate takes over.
pub(super) fn leader_loss_moves_leadership(h: &Harness) {
    let l = h.name("e");
    let (a, b) = (h.session(), h.session());
    let ea = a.campaign(&l).unwrap();
    let t1 = ea.wait_elected_timeout(h.patience()).unwrap();
    let events = ea.events();
    let eb = b.campaign(&l).unwrap();
    h.backend.close_session(a.id()).unwrap();
    let t2 = eb.wait_elected_timeout(h.patience()).unwrap();
    assert!(t2 > t1);
    assert!(eventually(h.patience(), || !ea.is_leader()));
    let revoked = events.iter().find(|e| matches!(e, ElectionEvent::Revoked { .. }));
    assert!(matches!(revoked, Some(ElectionEvent::Revoked { token, .. }) if token == t1), "{revoked:?}");
    drop(eb);
    b.close().unwrap();
}

/// Leader-gated work runs only while leading and is cancelled the moment leadership is lost: a
/// running piece of work sees `LeaderContext::is_cancelled()` false while it leads and true once
/// the session is lost, and no new work starts afterwards.
pub(super) fn leader_work_stops_on_loss(h: &Harness) {
    let l = h.name("e");
    let a = h.session();
    let e = a.campaign(&l).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let task = e.run_while_leader(Schedule::Every(Duration::from_millis(20)), move |ctx| {
        let _ = tx.send((ctx.granted_token(), ctx.is_cancelled(), ctx.token().is_ok()));
    });
    let (ctx_tx, ctx_rx) = crossbeam_channel::unbounded();
    let watcher = e.run_while_leader(Schedule::OncePerTerm, move |ctx| {
        let _ = ctx_tx.send((ctx.granted_token(), false));
        while !ctx.is_cancelled() {
            thread::sleep(Duration::from_millis(2));
        }
        let _ = ctx_tx.send((ctx.granted_token(), true));
    });
    let (token, cancelled, checked) = rx.recv_timeout(h.patience()).expect("work ran");
    assert!(!cancelled);
    assert!(checked, "the context's token is valid while leading");
    assert_eq!(e.token().unwrap(), token);
    assert_eq!(ctx_rx.recv_timeout(h.patience()).expect("long work started"), (token, false));
    // Renewals go on: the running work is not cancelled while the node leads.
    thread::sleep(h.options.renew_interval() * 2);
    assert!(e.is_leader());
    assert!(ctx_rx.try_recv().is_err(), "is_cancelled() turned true while leading");
    h.backend.close_session(a.id()).unwrap();
    assert_eq!(
        ctx_rx.recv_timeout(h.patience()),
        Ok((token, true)),
        "the running work never saw is_cancelled() after the session was lost"
    );
    assert!(!e.is_leader(), "is_cancelled() but still leader");
    // Drain what ran before the loss was noticed; then nothing more runs.
    thread::sleep(Duration::from_millis(200));
    while rx.try_recv().is_ok() {}
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "work ran after leadership was lost");
    task.stop();
    watcher.stop();
}

/// Capability `watch_checks_lease`, for campaign attempts (see
/// `lock_registers_where_it_cannot_miss_a_release`): they register where `lock` does, by the same
/// rule (`runtime/wait.rs`), although they run on workers and wait through the renewal thread.
/// On a backend that claims it, an uncontended campaign's attempt makes one call (its acquire,
/// no registration), and an attempt that finds the lease held registers right after it — the
/// case releases the lease right there, between the two, and the registration must answer it at
/// once (the next attempt then runs on the pushed release, well inside a retry). On a push
/// backend that does not claim it, an attempt registers before it acquires; on a polling one,
/// never.
pub(super) fn campaign_registers_where_it_cannot_miss_a_release(h: &Harness, claimed: bool) {
    let options = super::options(Duration::from_secs(12), Duration::from_secs(6));
    let spy = Spy::new(h.backend.clone());
    let a = h.session_on(h.backend.clone(), options.clone());
    let b = h.session_on(spy.clone(), options);
    let (free, l) = (h.name("free"), h.name("l"));
    let elected = |name: &Name| {
        let e = b.campaign(name).unwrap();
        e.wait_elected_deadline(Instant::now() + h.patience()).expect("the campaign was never elected");
        e
    };
    drop(elected(&free));
    let uncontended = spy.calls_of(&free);
    if !h.backend.capabilities().push_release {
        assert!(!uncontended.iter().any(|c| matches!(c, Call::Watch(_))), "a polling backend's campaign watched");
        a.close().unwrap();
        return b.close().unwrap();
    }
    if claimed {
        assert_eq!(uncontended, [Call::Acquire { name: free.clone(), busy: false }], "an uncontended campaign");
    } else {
        assert_eq!(uncontended.first(), Some(&Call::Watch(free.clone())), "an uncontended campaign: {uncontended:?}");
    }
    let first = a.lock(&l).unwrap();
    spy.release_at_watch_after_busy(move || first.release());
    let election = elected(&l);
    spy.check_registration(&l, claimed, Instant::now(), b.options());
    drop(election);
    a.close().unwrap();
    b.close().unwrap();
}
