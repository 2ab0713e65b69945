//! The engine's unit tests: each decision, and each race of issue #14 the engine closes, forced
//! step by step with explicit instants.

use std::time::{Duration, Instant};

use super::*;
use crate::backend::{KeepAlive, TermRemaining};
use crate::state::{LossReason, SessionEvent};

fn timing() -> Timing {
    Timing {
        lease_duration: Duration::from_secs(10),
        renew_interval: Duration::from_secs(3),
        drift: 0.01,
        query_timeout: Duration::from_secs(3),
    }
}
fn n(s: &str) -> Name {
    Name::new(s).unwrap()
}
fn t(v: u64) -> Token {
    Token::new(v).unwrap()
}
fn ms(v: u64) -> Duration {
    Duration::from_millis(v)
}
/// A session opened at `t0` with 10 s remaining.
fn fresh() -> (Instant, Engine) {
    let t0 = Instant::now();
    (t0, Engine::new(timing(), t0, Duration::from_secs(10)))
}
/// One acquire of `a` sent and answered at `at` with `token` and 10 s remaining.
fn one_acquire(e: &mut Engine, a: &Name, token: u64, at: Instant) -> Adoption {
    let epoch = e.begin_acquire(a);
    let r = e.on_acquired(a, t(token), at, Duration::from_secs(10), at, epoch);
    e.end_acquire(a);
    r
}
fn events(events: Vec<SessionEvent>) -> Step {
    Step { events, commands: Vec::new() }
}
fn commands(commands: Vec<Command>) -> Step {
    Step { events: Vec::new(), commands }
}
fn alive(remaining: Duration, owned: &[(&str, u64)]) -> KeepAliveResult {
    KeepAliveResult::Reply(KeepAlive::Alive {
        remaining,
        owned: owned.iter().map(|(a, b)| (n(a), t(*b))).collect(),
        groups: Vec::new(),
        unknown: Vec::new(),
        remaining_before: None,
    })
}

#[test]
fn deadline_is_send_instant_plus_remaining_minus_drift() {
    let t0 = Instant::now();
    let e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert_eq!(e.deadline(), t0 + ms(9_900));
    assert!(e.is_alive(t0 + ms(9_899)));
    assert!(!e.is_alive(t0 + ms(9_900)));
}

#[test]
fn renews_on_schedule_and_extends_by_send_instant() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.poll(t0 + ms(2_999)).is_empty());
    assert_eq!(e.next_wakeup(), Some(t0 + ms(3_000)));
    let out = e.poll(t0 + ms(3_000));
    assert_eq!(out, commands(vec![Command::SendKeepAlive { sent: t0 + ms(3_000) }]));
    // The reply arrives 2 s later; the deadline counts from the send instant.
    let out = e.on_keep_alive(t0 + ms(3_000), t0 + ms(5_000), alive(Duration::from_secs(10), &[]));
    assert!(out.is_empty());
    assert_eq!(e.deadline(), t0 + ms(12_900));
    assert_eq!(e.next_wakeup(), Some(t0 + ms(6_000)));
}

#[test]
fn expires_at_local_deadline_when_renewals_fail_and_never_revives() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.on_acquired(&n("a"), t(1), t0, Duration::from_secs(10), t0 + ms(1), 0) == Adoption::Adopted);
    let mut now = t0;
    let mut failures = 0;
    loop {
        now += ms(100);
        let out = e.poll(now);
        for o in &out.commands {
            if let Command::SendKeepAlive { sent } = o {
                failures += 1;
                let r = e.on_keep_alive(*sent, now + ms(50), KeepAliveResult::Failed);
                assert!(matches!(r.events[0], SessionEvent::RenewalFailed { .. }));
            }
        }
        if out.events.contains(&SessionEvent::Expired) {
            assert_eq!(out.commands, vec![Command::CloseSession]);
            assert!(out.events.contains(&SessionEvent::LeaseLost {
                name: n("a"),
                token: t(1),
                reason: LossReason::SessionExpired
            }));
            break;
        }
        assert!(e.token(&n("a"), now).is_some());
    }
    assert!(failures >= 3, "retried {failures} times");
    assert_eq!(now, t0 + ms(9_900));
    assert_eq!(e.state(), SessionState::Expired);
    assert_eq!(e.token(&n("a"), now), None);
    // A late success does not revive it.
    assert!(e.on_keep_alive(t0 + ms(9_000), now, alive(Duration::from_secs(10), &[("a", 1)])).is_empty());
    assert_eq!(e.state(), SessionState::Expired);
    assert!(e.poll(now + ms(1)).is_empty());
    assert_eq!(e.on_acquired(&n("b"), t(2), now, Duration::from_secs(10), now, 0), Adoption::SessionEnded);
}

#[test]
fn hung_keep_alive_is_abandoned_and_retried() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let out = e.poll(t0 + ms(3_000));
    assert_eq!(out.commands.len(), 1);
    assert_eq!(e.next_wakeup(), Some(t0 + ms(6_000)));
    let out = e.poll(t0 + ms(6_000));
    assert_eq!(out, events(vec![SessionEvent::RenewalFailed { failures: 1 }]));
    // Retry after the backoff.
    let out = e.poll(t0 + ms(6_750));
    assert_eq!(out, commands(vec![Command::SendKeepAlive { sent: t0 + ms(6_750) }]));
    // The abandoned call's late success still extends the deadline by its own send instant.
    let _ = e.on_keep_alive(t0 + ms(3_000), t0 + ms(7_000), alive(Duration::from_secs(10), &[]));
    assert_eq!(e.deadline(), t0 + ms(12_900));
}

#[test]
fn lease_missing_from_reply_is_lost_but_only_if_established_before_send() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.on_acquired(&n("a"), t(5), t0, Duration::from_secs(10), t0 + ms(10), 0) == Adoption::Adopted);
    let out = e.poll(t0 + ms(3_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    // "b" is acquired while the keep-alive is in flight: the reply may not list it yet.
    assert!(
        e.on_acquired(&n("b"), t(9), t0 + ms(3_010), Duration::from_secs(10), t0 + ms(3_020), 0) == Adoption::Adopted
    );
    let out = e.on_keep_alive(sent, t0 + ms(3_050), alive(Duration::from_secs(10), &[]));
    assert_eq!(out, events(vec![SessionEvent::LeaseLost { name: n("a"), token: t(5), reason: LossReason::NotOwned }]));
    assert_eq!(e.token(&n("a"), t0 + ms(3_050)), None);
    assert_eq!(e.token(&n("b"), t0 + ms(3_050)), Some(t(9)));
}

#[test]
fn different_token_in_reply_means_lost() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.on_acquired(&n("a"), t(5), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
    let out = e.on_keep_alive(t0 + ms(1), t0 + ms(2), alive(Duration::from_secs(10), &[("a", 6)]));
    assert_eq!(out.events, vec![SessionEvent::LeaseLost { name: n("a"), token: t(5), reason: LossReason::NotOwned }]);
    // "a" is now owned by us per the backend but not held: release it.
    assert_eq!(out.commands, vec![Command::ReleaseStray { name: n("a"), token: t(6) }]);
    assert!(e.releasing(&n("a")), "the stray's release is counted in flight by the same transition");
}

#[test]
fn strays_are_released_unless_an_operation_is_in_flight() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    e.begin_acquire(&n("p"));
    let out = e.on_keep_alive(t0, t0 + ms(1), alive(Duration::from_secs(10), &[("p", 1), ("s", 2)]));
    assert_eq!(out, commands(vec![Command::ReleaseStray { name: n("s"), token: t(2) }]));
    e.end_acquire(&n("p"));
    let out = e.on_keep_alive(t0, t0 + ms(2), alive(Duration::from_secs(10), &[("p", 1)]));
    assert_eq!(out, commands(vec![Command::ReleaseStray { name: n("p"), token: t(1) }]));
}

#[test]
fn expired_reply_expires_at_once() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.on_acquired(&n("a"), t(1), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
    let out = e.on_keep_alive(t0, t0 + ms(5), KeepAliveResult::Reply(KeepAlive::Expired));
    assert_eq!(out.events.last(), Some(&SessionEvent::Expired));
    assert_eq!(out.commands, vec![Command::CloseSession]);
    assert_eq!(e.state(), SessionState::Expired);
}

#[test]
fn a_lease_with_a_short_grant_expires_on_its_own_deadline() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.on_acquired(&n("a"), t(1), t0, ms(1_000), t0 + ms(5), 0) == Adoption::Adopted);
    assert_eq!(e.remaining(&n("a"), t0 + ms(5)), Some(ms(985)));
    let out = e.poll(t0 + ms(990));
    assert_eq!(out, events(vec![SessionEvent::LeaseLost { name: n("a"), token: t(1), reason: LossReason::Deadline }]));
    // A reply too late to be useful is not adopted.
    assert_eq!(e.on_acquired(&n("b"), t(1), t0, ms(1_000), t0 + ms(991), 0), Adoption::Undo);
}

/// A term answered "as long as the session" (MySQL's free-lease upsert) is held until the
/// session's own local deadline, whenever in the session's life it was acquired, and renewals
/// that list it carry it on with the session.
#[test]
fn a_term_that_lasts_with_its_session_ends_at_the_session_deadline() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let session_deadline = e.deadline();
    assert_eq!(session_deadline, t0 + ms(9_900));
    let at = t0 + ms(4_000);
    assert_eq!(e.on_acquired(&n("a"), t(3), at, TermRemaining::WithSession, at + ms(1), 0), Adoption::Adopted);
    assert_eq!(e.remaining(&n("a"), at + ms(1)), Some(ms(5_899)), "the session's time left, not a lease's");
    assert_eq!(e.token(&n("a"), t0 + ms(9_899)), Some(t(3)));
    // A renewal that lists it extends it with the session.
    let out = e.on_keep_alive(t0 + ms(5_000), t0 + ms(5_010), alive(Duration::from_secs(10), &[("a", 3)]));
    assert!(out.events.is_empty(), "{out:?}");
    assert_eq!(e.deadline(), t0 + ms(14_900));
    assert_eq!(e.token(&n("a"), t0 + ms(14_899)), Some(t(3)));
    assert_eq!(e.remaining(&n("a"), t0 + ms(14_000)), Some(ms(900)));
    let out = e.poll(t0 + ms(14_900));
    assert_eq!(out.events.last(), Some(&SessionEvent::Expired), "{out:?}");
    assert_eq!(e.token(&n("a"), t0 + ms(14_900)), None);
}

/// A term adopted while a keep-alive is in flight, and listed by its reply, is extended by that
/// reply: the reply's `owned` is what the session owns after the renewal, so the renewal renewed
/// it. (It is not judged lost when the reply does not list it: the reply may predate the term.)
/// Without this, a term that took the session's deadline (`WithSession`) at its adoption would
/// keep the deadline of the keep-alive before, and with a renew interval near half the lease be
/// lost before the next reply.
#[test]
fn a_reply_listing_a_term_adopted_while_it_was_in_flight_extends_it() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let out = e.poll(t0 + ms(3_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    let at = t0 + ms(3_010);
    assert_eq!(e.on_acquired(&n("a"), t(4), at, TermRemaining::WithSession, at, 0), Adoption::Adopted);
    assert_eq!(e.on_acquired(&n("b"), t(5), at, TermRemaining::WithSession, at, 0), Adoption::Adopted);
    let out = e.on_keep_alive(sent, t0 + ms(3_020), alive(Duration::from_secs(10), &[("a", 4)]));
    assert!(out.events.is_empty(), "{out:?}");
    assert_eq!(e.deadline(), t0 + ms(12_900));
    assert_eq!(e.token(&n("a"), t0 + ms(12_899)), Some(t(4)), "listed: renewed with the session");
    assert_eq!(e.token(&n("b"), t0 + ms(12_899)), Some(t(5)), "not listed: not judged, and it lasts with its session");
    assert_eq!(e.token(&n("b"), t0 + ms(12_900)), None);
}

/// Finding 3 of issue #36: a term that lasts with its session (`WithSession`, MySQL's one-upsert
/// acquire) adopted while a keep-alive was in flight, which that keep-alive's reply does not list
/// (its listing was read before the acquire committed), follows the session's deadline: the reply
/// renewed the session, and the term lives exactly as long as the session on the backend. Before
/// the fix it kept the deadline of the keep-alive before and, with a renew interval of half the
/// lease, was reported lost before the next keep-alive was even sent, while the session lived on.
/// A term with a measured remaining is not extended by a reply that predates it; and a later reply
/// sent after the term was established judges it as any other.
#[test]
fn a_term_lasting_with_its_session_adopted_during_a_keep_alive_follows_the_session_deadline() {
    let t0 = Instant::now();
    let timing = Timing { renew_interval: Duration::from_secs(5), ..timing() };
    let mut e = Engine::new(timing, t0, Duration::from_secs(10));
    let out = e.poll(t0 + ms(5_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    let at = t0 + ms(5_500);
    assert_eq!(e.on_acquired(&n("with"), t(7), at, TermRemaining::WithSession, at, 0), Adoption::Adopted);
    assert_eq!(e.on_acquired(&n("known"), t(8), at, ms(4_000), at, 0), Adoption::Adopted);
    // The reply (read before either acquire committed) lists neither.
    let out = e.on_keep_alive(sent, t0 + ms(6_500), alive(Duration::from_secs(10), &[]));
    assert!(out.events.is_empty(), "{out:?}");
    assert_eq!(e.deadline(), t0 + ms(14_900));
    // The session's deadline before this reply: the term must outlive it.
    let out = e.poll(t0 + ms(9_900));
    assert!(
        out.events.iter().all(|ev| !matches!(ev, SessionEvent::LeaseLost { name, .. } if name == &n("with"))),
        "{out:?}"
    );
    assert_eq!(e.token(&n("with"), t0 + ms(9_900)), Some(t(7)), "lost at the session's previous deadline");
    assert_eq!(e.remaining(&n("with"), t0 + ms(9_900)), Some(ms(5_000)));
    // The measured term keeps its own deadline (5.5 s + 4 s × 0.99 = 9.46 s).
    assert_eq!(e.token(&n("known"), t0 + ms(9_460)), None);
    // The next keep-alive, sent after the term was established, judges it: listed, it is renewed.
    let out = e.poll(t0 + ms(10_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    let out = e.on_keep_alive(sent, t0 + ms(10_100), alive(Duration::from_secs(10), &[("with", 7)]));
    assert!(out.events.is_empty(), "{out:?}");
    assert_eq!(e.token(&n("with"), t0 + ms(19_899)), Some(t(7)));
    // Not listed by a reply sent after it was established: lost, as any other term.
    let out = e.poll(t0 + ms(15_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    let out = e.on_keep_alive(sent, t0 + ms(15_100), alive(Duration::from_secs(10), &[]));
    assert_eq!(
        out.events,
        vec![SessionEvent::LeaseLost { name: n("with"), token: t(7), reason: LossReason::NotOwned }]
    );
}

/// The session's deadline is the term's: an answer after it is not adopted, and a term adopted
/// just before it is lost with the session, never held past it.
#[test]
fn a_term_that_lasts_with_its_session_never_outlives_the_session_deadline() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let sent = t0 + ms(9_000);
    assert_eq!(e.on_acquired(&n("a"), t(1), sent, TermRemaining::WithSession, t0 + ms(9_899), 0), Adoption::Adopted);
    assert_eq!(e.remaining(&n("a"), t0 + ms(9_899)), Some(ms(1)));
    assert_eq!(e.token(&n("a"), t0 + ms(9_900)), None);
    assert_eq!(
        e.on_acquired(&n("b"), t(1), sent, TermRemaining::WithSession, t0 + ms(9_900), 0),
        Adoption::SessionEnded
    );
}

#[test]
fn release_and_close() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    assert!(e.on_acquired(&n("a"), t(1), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
    assert!(e.on_acquired(&n("b"), t(2), t0, Duration::from_secs(10), t0, 0) == Adoption::Adopted);
    assert_eq!(e.on_release(&n("a")), Some(t(1)));
    assert_eq!(e.token(&n("a"), t0), None);
    let out = e.close();
    assert_eq!(
        out,
        events(vec![
            SessionEvent::LeaseLost { name: n("b"), token: t(2), reason: LossReason::SessionClosed },
            SessionEvent::Closed
        ])
    );
    assert_eq!(e.state(), SessionState::Closed);
    assert!(e.close().is_empty());
    assert_eq!(e.next_wakeup(), None);
}

#[test]
fn an_acquire_overlapping_a_release_is_not_adopted() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let a = n("a");
    // Release in flight when the acquire is sent.
    e.begin_release(&a, t(1));
    let epoch = e.begin_acquire(&a);
    assert!(e.releasing(&a));
    assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
    e.end_acquire(&a);
    e.end_release(&a);
    // Release started and finished while the acquire was in flight.
    let epoch = e.begin_acquire(&a);
    e.begin_release(&a, t(2));
    e.end_release(&a);
    assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
    e.end_acquire(&a);
    // No release overlapping: adopted.
    let epoch = e.begin_acquire(&a);
    assert_eq!(e.on_acquired(&a, t(4), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
    e.end_acquire(&a);
    assert_eq!(e.pending(&a), 0);
}

#[test]
fn a_term_once_released_is_never_adopted_again() {
    // A release of term 5 whose call ended (timed out) may still land later: an idempotent
    // re-acquire answering the same term 5 must not be adopted, a new term 6 may.
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let a = n("a");
    e.begin_release(&a, t(5));
    e.end_release(&a);
    let epoch = e.begin_acquire(&a);
    assert_eq!(e.on_acquired(&a, t(5), t0, Duration::from_secs(10), t0, epoch), Adoption::GivenUp);
    assert_eq!(e.on_acquired(&a, t(4), t0, Duration::from_secs(10), t0, epoch), Adoption::GivenUp);
    assert_eq!(e.on_acquired(&a, t(6), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
    e.end_acquire(&a);
}

#[test]
fn confirmed_releases_are_forgotten_unconfirmed_ones_are_not() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    for i in 0..100 {
        let a = n(&format!("n{i}"));
        e.begin_release(&a, t(5));
        e.end_confirmed_release(&a, t(5));
    }
    assert_eq!(e.remembered_releases(), 0, "confirmed releases leave nothing behind");
    // Unconfirmed (timed out, failed): remembered, and the term is never adopted again.
    let a = n("a");
    e.begin_release(&a, t(5));
    e.end_release(&a);
    assert_eq!(e.remembered_releases(), 1);
    // An older term's confirmation does not forget the newer one; an operation in flight keeps it.
    e.begin_release(&a, t(7));
    e.end_confirmed_release(&a, t(5));
    let epoch = e.begin_acquire(&a);
    e.begin_release(&a, t(7));
    e.end_confirmed_release(&a, t(7));
    assert_eq!(e.remembered_releases(), 1, "an acquire is still in flight");
    assert_eq!(e.on_acquired(&a, t(7), t0, Duration::from_secs(10), t0, epoch), Adoption::GivenUp);
    e.end_acquire(&a);
    e.begin_release(&a, t(7));
    e.end_confirmed_release(&a, t(7));
    assert_eq!(e.remembered_releases(), 0);
}

#[test]
fn a_late_reply_confirming_the_held_term_is_kept_not_undone() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let a = n("a");
    let old = e.begin_acquire(&a);
    let new = e.begin_acquire(&a);
    assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, new), Adoption::Adopted);
    e.end_acquire(&a);
    // The older attempt answers too late to be of use (its remaining ran out before the reply
    // came), with the very term held.
    let late = t0 + Duration::from_secs(1);
    let short = Duration::from_millis(10);
    assert_eq!(e.on_acquired(&a, t(3), t0, short, late, old), Adoption::Kept);
    assert_eq!(e.token(&a, late), Some(t(3)), "still held");
    // Another term that late is undone.
    assert_eq!(e.on_acquired(&a, t(4), t0, short, late, old), Adoption::Undo);
    e.end_acquire(&a);
}

#[test]
fn drift_shortens_the_deadline() {
    let t0 = Instant::now();
    let mut tm = timing();
    tm.drift = 0.1;
    let e = Engine::new(tm, t0, Duration::from_secs(10));
    assert_eq!(e.deadline(), t0 + ms(9_000));
    // Remaining above the lease duration is capped.
    let e = Engine::new(timing(), t0, Duration::from_secs(100));
    assert_eq!(e.deadline(), t0 + ms(9_900));
}

#[test]
fn resign_racing_an_adoption_cannot_free_a_held_term() {
    // Finding 1: a resign gives up L:T locally, another handle adopts T (idempotent acquire),
    // then the resign's release of T is sent: the adopted term must not stay held.
    let (t0, mut e) = fresh();
    let a = n("a");
    assert_eq!(e.on_acquired(&a, t(5), t0, Duration::from_secs(10), t0, 0), Adoption::Adopted);
    assert_eq!(e.on_release(&a), Some(t(5)));
    let epoch = e.begin_acquire(&a);
    assert_eq!(e.on_acquired(&a, t(5), t0, Duration::from_secs(10), t0 + ms(1), epoch), Adoption::Adopted);
    e.begin_release(&a, t(5));
    assert_eq!(e.token(&a, t0 + ms(2)), None, "a term being released is not held");
    e.end_acquire(&a);
}

#[test]
fn a_keep_alive_reply_after_the_local_deadline_does_not_revive_the_session() {
    // Finding 2: a retry sent at D - 200 ms whose Alive is applied at D + 20 ms.
    let (_, mut e) = fresh();
    let d = e.deadline();
    let out = e.on_keep_alive(d - ms(200), d + ms(20), alive(Duration::from_secs(10), &[]));
    assert_eq!(Step { events: vec![SessionEvent::Expired], commands: vec![Command::CloseSession] }, out);
    assert_eq!(e.state(), SessionState::Expired);
    assert!(!e.is_alive(d + ms(21)));
}

#[test]
fn a_keep_alive_reply_never_extends_a_lease_past_its_own_deadline() {
    let (t0, mut e) = fresh();
    let a = n("a");
    // A short grant: the lease's own deadline is t0 + 990 ms.
    assert_eq!(e.on_acquired(&a, t(1), t0, ms(1_000), t0, 0), Adoption::Adopted);
    let out = e.on_keep_alive(t0 + ms(900), t0 + ms(1_000), alive(Duration::from_secs(10), &[("a", 1)]));
    assert_eq!(
        out,
        Step {
            events: vec![SessionEvent::LeaseLost { name: a.clone(), token: t(1), reason: LossReason::Deadline }],
            // Still ours on the backend, no longer held: released.
            commands: vec![Command::ReleaseStray { name: a.clone(), token: t(1) }],
        }
    );
    assert_eq!(e.token(&a, t0 + ms(1_000)), None);
}

#[test]
fn a_term_lost_at_its_deadline_is_not_adopted_into_a_second_lease() {
    // Finding 9: after a deadline loss the backend may still count the term ours; a re-lock
    // answering that same term must not hand it to a second handle (dropping the old handle
    // would release it under the new one).
    let (t0, mut e) = fresh();
    let a = n("a");
    assert_eq!(e.on_acquired(&a, t(1), t0, ms(1_000), t0, 0), Adoption::Adopted);
    let out = e.poll(t0 + ms(990));
    assert_eq!(
        out,
        events(vec![SessionEvent::LeaseLost { name: a.clone(), token: t(1), reason: LossReason::Deadline }])
    );
    let now = t0 + ms(1_000);
    assert_eq!(one_acquire(&mut e, &a, 1, now), Adoption::GivenUp);
    // A new term is adopted.
    assert_eq!(one_acquire(&mut e, &a, 2, now), Adoption::Adopted);
}

#[test]
fn two_acquires_answering_the_same_term_adopt_it_once() {
    // Two callers' acquires (two threads' lock(), or a lock() and a campaign attempt) both
    // answered by the idempotent backend with term 3: only the first becomes a handle.
    let (t0, mut e) = fresh();
    let a = n("a");
    let first = e.begin_acquire(&a);
    let second = e.begin_acquire(&a);
    assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, first), Adoption::Adopted);
    assert_eq!(e.on_acquired(&a, t(3), t0, Duration::from_secs(10), t0, second), Adoption::Kept);
    assert_eq!(e.token(&a, t0), Some(t(3)));
}

#[test]
fn timing_with_a_drift_of_one_or_more_or_nan_never_panics() {
    for drift in [1.0, 1.5, f64::NAN, -0.5, f64::INFINITY] {
        let mut tm = timing();
        tm.drift = drift;
        let t0 = Instant::now();
        let d = tm.deadline(t0, Duration::from_secs(10));
        assert!(d <= t0 + Duration::from_secs(10), "drift {drift}");
    }
    let mut tm = timing();
    tm.lease_duration = Duration::MAX;
    let t0 = Instant::now();
    assert!(tm.deadline(t0, Duration::MAX) > t0 + Duration::from_secs(1_000_000));
}

#[test]
fn a_released_term_being_landed_is_reported_as_given_up_not_as_someone_elses() {
    // Finding 9: try_lock said "held by another" when only this session's own release of the
    // term was still landing.
    let (t0, mut e) = fresh();
    let a = n("a");
    e.begin_release(&a, t(5));
    e.end_release(&a);
    assert_eq!(one_acquire(&mut e, &a, 5, t0), Adoption::GivenUp);
}

#[test]
fn a_campaign_cannot_start_while_a_lock_of_the_name_is_in_flight() {
    let (t0, mut e) = fresh();
    let a = n("a");
    let epoch = e.begin_acquire(&a);
    assert_eq!(e.start_campaign(&a, t0), Err(CampaignConflict::Acquiring));
    assert_eq!(e.on_acquired(&a, t(1), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
    e.end_acquire(&a);
    assert_eq!(e.start_campaign(&a, t0), Err(CampaignConflict::Held));
    assert!(e.start_campaign(&n("b"), t0).is_ok());
    assert_eq!(e.start_campaign(&n("b"), t0), Err(CampaignConflict::Campaigning));
    // A release in flight does not block a campaign (its attempts wait for it).
    e.begin_release(&n("c"), t(1));
    assert!(e.start_campaign(&n("c"), t0).is_ok());
}

#[test]
fn an_attempt_answering_after_its_campaign_ended_is_undone() {
    let (t0, mut e) = fresh();
    let a = n("a");
    let campaign = e.start_campaign(&a, t0).unwrap();
    let epoch = e.begin_attempt(&a, campaign, t0).unwrap();
    assert_eq!(e.stop_campaign(&a, campaign, None), None, "nothing held yet");
    assert_eq!(e.on_campaign_acquired(&a, campaign, t(1), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
    e.end_acquire(&a);
    assert_eq!(e.token(&a, t0), None);
}

#[test]
fn resign_gives_up_the_held_term_in_the_same_transition() {
    let (t0, mut e) = fresh();
    let a = n("a");
    let campaign = e.start_campaign(&a, t0).unwrap();
    let epoch = e.begin_attempt(&a, campaign, t0).unwrap();
    assert_eq!(e.on_campaign_acquired(&a, campaign, t(4), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
    e.end_acquire(&a);
    assert_eq!(e.stop_campaign(&a, campaign, Some(t(4))), Some(t(4)));
    assert_eq!(e.token(&a, t0), None);
    assert!(e.releasing(&a));
    // A lock racing the resign finds the term given up.
    assert_eq!(one_acquire(&mut e, &a, 4, t0), Adoption::GivenUp);
    e.end_confirmed_release(&a, t(4));
    // After a deadline loss the election's term is still released on resign.
    let again = e.start_campaign(&a, t0).unwrap();
    assert_eq!(e.stop_campaign(&a, campaign, Some(t(3))), None, "an ended campaign stops nothing");
    assert_eq!(e.stop_campaign(&a, again, Some(t(3))), Some(t(3)));
    e.end_release(&a);
}

#[test]
fn unconfirmed_releases_are_forgotten_once_a_later_keep_alive_shows_them_gone() {
    let (t0, mut e) = fresh();
    for i in 0..50 {
        let a = n(&format!("n{i}"));
        e.begin_release(&a, t(5));
        e.end_release(&a);
    }
    e.begin_release(&n("still"), t(2));
    e.end_release(&n("still"));
    assert_eq!(e.remembered_releases(), 51);
    // The first keep-alive after they ended marks them settled; one sent after that which no
    // longer lists them forgets them. A term still listed stays remembered (it is a stray).
    let stray = commands(vec![Command::ReleaseStray { name: n("still"), token: t(2) }]);
    let out = e.on_keep_alive(t0 + ms(1), t0 + ms(2), alive(Duration::from_secs(10), &[("still", 2)]));
    assert_eq!(out, stray);
    assert_eq!(e.remembered_releases(), 51);
    // The stray's release fails (unconfirmed): the next report releases it again.
    e.end_release(&n("still"));
    let out = e.on_keep_alive(t0 + ms(3), t0 + ms(4), alive(Duration::from_secs(10), &[("still", 2)]));
    assert_eq!(out, stray);
    assert_eq!(e.remembered_releases(), 1);
}

#[test]
fn bad_timings_are_refused_with_a_clear_error() {
    let s = Duration::from_secs(1);
    for drift in [1.0, -0.1, f64::NAN] {
        let err = Timing::new(s, s, drift, s).unwrap_err();
        assert!(err.to_string().contains("drift"), "{err}");
    }
    assert!(Timing::new(Duration::ZERO, s, 0.01, s).is_err());
    assert!(Timing::new(s, s, 0.01, s).is_ok());
}

#[test]
fn an_answered_acquire_is_judged_undone_and_ended_in_one_transition() {
    let (t0, mut e) = fresh();
    let a = n("a");
    // Adopted: no command, the operation ended.
    let call = AcquireCall { sent: t0, epoch: e.begin_acquire(&a), campaign: None };
    let (adoption, step) = e.acquire_answered(&a, call, t(1), Duration::from_secs(10), t0);
    assert_eq!((adoption, step), (Adoption::Adopted, Step::none()));
    assert_eq!(e.pending(&a), 0);
    // Raced a release: undone, the term counted as a release in flight by the same transition.
    let b = n("b");
    let call = AcquireCall { sent: t0, epoch: e.begin_acquire(&b), campaign: None };
    e.begin_release(&b, t(1));
    let (adoption, step) = e.acquire_answered(&b, call, t(2), Duration::from_secs(10), t0);
    assert_eq!(adoption, Adoption::Undo);
    assert_eq!(step, commands(vec![Command::Undo { name: b.clone(), token: t(2) }]));
    assert!(e.releasing(&b));
    assert_eq!(e.pending(&b), 2, "two releases in flight, the acquire ended");
    // A campaign's attempt answering after its campaign ended: undone the same way.
    let c = n("c");
    let campaign = e.start_campaign(&c, t0).unwrap();
    let call = AcquireCall { sent: t0, epoch: e.begin_attempt(&c, campaign, t0).unwrap(), campaign: Some(campaign) };
    assert_eq!(e.stop_campaign(&c, campaign, None), None);
    let (adoption, step) = e.acquire_answered(&c, call, t(3), Duration::from_secs(10), t0);
    assert_eq!(adoption, Adoption::Undo);
    assert_eq!(step, commands(vec![Command::Undo { name: c.clone(), token: t(3) }]));
}

#[test]
fn an_abandoned_acquire_is_undone_unless_it_brought_the_held_term() {
    let (t0, mut e) = fresh();
    let a = n("a");
    assert_eq!(one_acquire(&mut e, &a, 4, t0), Adoption::Adopted);
    e.begin_acquire(&a);
    assert_eq!(e.acquire_abandoned(&a, Some(t(4))), Step::none(), "the held term is kept");
    assert_eq!(e.token(&a, t0), Some(t(4)));
    e.begin_acquire(&a);
    assert_eq!(e.acquire_abandoned(&a, Some(t(5))), commands(vec![Command::Undo { name: a.clone(), token: t(5) }]));
    e.begin_acquire(&a);
    assert_eq!(e.acquire_abandoned(&a, None), Step::none(), "a busy or failed reply: nothing to undo");
    assert_eq!(e.pending(&a), 1, "only the undo's release is in flight");
}

#[test]
fn releasing_a_handle_gives_up_its_term_and_counts_the_release_in_one_transition() {
    let (t0, mut e) = fresh();
    let a = n("a");
    assert_eq!(one_acquire(&mut e, &a, 3, t0), Adoption::Adopted);
    assert!(e.release(&a, t(3)));
    assert_eq!(e.token(&a, t0), None);
    assert!(e.releasing(&a));
    e.end_confirmed_release(&a, t(3));
    // A term lost locally is still released on the backend; a newer term held stays held.
    assert_eq!(one_acquire(&mut e, &a, 4, t0), Adoption::Adopted);
    assert!(e.release(&a, t(2)));
    assert_eq!(e.token(&a, t0), Some(t(4)));
    assert!(e.releasing(&a));
}

#[test]
fn a_handle_released_after_close_or_expiry_needs_no_backend_call() {
    // Close (or the close an expiry commands) frees every term of the session on the backend: a
    // guard dropped afterwards must not send a release of its own, nor count one in flight.
    let (t0, mut e) = fresh();
    let a = n("a");
    assert_eq!(one_acquire(&mut e, &a, 3, t0), Adoption::Adopted);
    assert!(e.close().events.contains(&SessionEvent::Closed));
    assert!(!e.release(&a, t(3)), "closed: the close released it");
    assert_eq!(e.pending(&a), 0);
    assert!(!e.releasing(&a));

    let (t0, mut e) = fresh();
    assert_eq!(one_acquire(&mut e, &a, 4, t0), Adoption::Adopted);
    let step = e.poll(t0 + Duration::from_secs(11));
    assert!(step.commands.contains(&Command::CloseSession), "{step:?}");
    assert!(!e.release(&a, t(4)), "expired: the commanded close releases it");
    assert_eq!(e.pending(&a), 0);

    // The same for a resign after close (the runtime detaches elections at close; the engine
    // does not rely on it).
    let (t0, mut e) = fresh();
    let campaign = e.start_campaign(&a, t0).unwrap();
    let epoch = e.begin_attempt(&a, campaign, t0).unwrap();
    assert_eq!(e.on_campaign_acquired(&a, campaign, t(5), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
    e.end_acquire(&a);
    assert!(e.close().events.contains(&SessionEvent::Closed));
    assert_eq!(e.stop_campaign(&a, campaign, Some(t(5))), None, "closed: the close released it");
    assert_eq!(e.pending(&a), 0);

    // And for a membership: the close left the group.
    let (t0, mut e) = fresh();
    let g = n("g");
    e.begin_join(&g);
    e.end_join(&g, t0);
    assert_eq!(e.joined(&g, t0), Step::none());
    assert!(e.close().events.contains(&SessionEvent::Closed));
    assert!(!e.begin_leave(&g), "closed: the close left it");
    assert!(!e.leaving(&g));
}

#[test]
fn a_lock_or_an_attempt_is_sent_only_when_the_engine_says_so() {
    let (t0, mut e) = fresh();
    let a = n("a");
    e.begin_release(&a, t(1));
    assert_eq!(e.begin_lock(&a, t0), Err(NotSent::Releasing));
    let on_a = e.start_campaign(&a, t0).unwrap();
    assert_eq!(e.begin_attempt(&a, on_a, t0), Err(NotSent::Releasing));
    assert_eq!(e.stop_campaign(&a, on_a, None), None);
    e.end_release(&a);
    let epoch = e.begin_lock(&a, t0).unwrap();
    assert_eq!(e.pending(&a), 1);
    assert_eq!(e.on_acquired(&a, t(2), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
    e.end_acquire(&a);
    assert_eq!(e.begin_lock(&a, t0), Err(NotSent::Held));
    let b = n("b");
    let on_b = e.start_campaign(&b, t0).unwrap();
    assert_eq!(e.begin_lock(&b, t0), Err(NotSent::Held), "a lock of a name the session campaigns for");
    assert!(e.begin_attempt(&b, on_b, t0).is_ok());
    let late = e.deadline();
    assert_eq!(e.begin_lock(&n("c"), late), Err(NotSent::Ended));
    assert_eq!(e.begin_attempt(&b, on_b, late), Err(NotSent::Ended));
}

#[test]
fn an_attempt_of_an_ended_campaign_is_not_sent_even_when_the_name_campaigns_again() {
    // Finding 6 (the shipped-runtime simulation's open finding): an attempt scheduled before a
    // resign that starts late asks only now, and its campaign is over. Nor does a new campaign
    // of the name take the old one's attempts for its own: each campaign has its own id.
    let (t0, mut e) = fresh();
    let a = n("a");
    let first = e.start_campaign(&a, t0).unwrap();
    let early = e.begin_attempt(&a, first, t0).unwrap();
    assert_eq!(e.stop_campaign(&a, first, None), None);
    assert_eq!(e.begin_attempt(&a, first, t0), Err(NotSent::CampaignOver), "the late attempt sends nothing");
    // The attempt sent before the resign still answers: its term is undone.
    let call = AcquireCall { sent: t0, epoch: early, campaign: Some(first) };
    let (adoption, step) = e.acquire_answered(&a, call, t(1), Duration::from_secs(10), t0);
    assert_eq!(adoption, Adoption::Undo);
    assert_eq!(step, commands(vec![Command::Undo { name: a.clone(), token: t(1) }]));
    e.end_confirmed_release(&a, t(1));
    // A new campaign of the name: the old one's attempts are still over, and its stop is no
    // stop of the new one.
    let second = e.start_campaign(&a, t0).unwrap();
    assert_ne!(first, second);
    assert_eq!(e.begin_attempt(&a, first, t0), Err(NotSent::CampaignOver));
    assert_eq!(e.stop_campaign(&a, first, None), None);
    assert!(e.is_campaigning(&a), "the new campaign goes on");
    let epoch = e.begin_attempt(&a, second, t0).unwrap();
    assert_eq!(e.on_campaign_acquired(&a, first, t(2), t0, Duration::from_secs(10), t0, epoch), Adoption::Undo);
    let epoch = e.begin_attempt(&a, second, t0).unwrap();
    assert_eq!(e.on_campaign_acquired(&a, second, t(2), t0, Duration::from_secs(10), t0, epoch), Adoption::Adopted);
}

/// A term adopted at the very instant a keep-alive was sent is not judged by that keep-alive's
/// reply: its listing may have been read before the acquire landed (the send instant is taken
/// before the call goes out). Found by the simulation's no-spurious-loss invariant (virtual time
/// moves only between steps): it was reported `LeaseLost { NotOwned }` while the backend held it.
#[test]
fn a_term_adopted_at_the_instant_a_keep_alive_was_sent_is_not_judged_by_it() {
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let out = e.poll(t0 + ms(3_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    assert_eq!(e.on_acquired(&n("a"), t(1), sent, Duration::from_secs(10), sent, 0), Adoption::Adopted);
    let out = e.on_keep_alive(sent, t0 + ms(3_010), alive(Duration::from_secs(10), &[]));
    assert!(out.events.is_empty(), "{out:?}");
    assert_eq!(e.token(&n("a"), t0 + ms(3_010)), Some(t(1)));
}

fn alive_unknown(remaining: Duration, owned: &[(&str, u64)], unknown: &[&str]) -> KeepAliveResult {
    KeepAliveResult::Reply(KeepAlive::Alive {
        remaining,
        owned: owned.iter().map(|(a, b)| (n(a), t(*b))).collect(),
        groups: Vec::new(),
        unknown: unknown.iter().map(|a| n(a)).collect(),
        remaining_before: None,
    })
}

#[test]
fn a_given_up_term_a_reply_could_not_check_is_never_adopted_again() {
    // Finding 2 of issue #36 (Redis Cluster): a term lost while its node could not be reached may
    // still be live there. Replies that could not check it must not count as proof that it is
    // gone, or a later lock() reaching the recovered node adopts the same term into a second
    // handle (and a late release of the first frees the second's term).
    let (t0, mut e) = fresh();
    let a = n("a");
    assert_eq!(e.on_acquired(&a, t(1), t0, ms(1_000), t0, 0), Adoption::Adopted);
    let out = e.poll(t0 + ms(990));
    assert_eq!(
        out,
        events(vec![SessionEvent::LeaseLost { name: a.clone(), token: t(1), reason: LossReason::Deadline }])
    );
    for i in 1..=4 {
        let sent = t0 + ms(1_000 * i);
        let out = e.on_keep_alive(sent, sent + ms(10), alive_unknown(Duration::from_secs(10), &[], &["a"]));
        assert_eq!(out, Step::none(), "reply {i}");
    }
    assert_eq!(e.remembered_releases(), 1, "a term its replies could not check is remembered");
    assert_eq!(one_acquire(&mut e, &a, 1, t0 + ms(5_000)), Adoption::GivenUp);
    // Replies that check the name and do not list the term prove it gone: then it is forgotten.
    for i in 6..=7 {
        let sent = t0 + ms(1_000 * i);
        let out = e.on_keep_alive(sent, sent + ms(10), alive_unknown(Duration::from_secs(10), &[], &[]));
        assert_eq!(out, Step::none(), "reply {i}");
    }
    assert_eq!(e.remembered_releases(), 0, "the map stays bounded once the name is checked again");
}

#[test]
fn a_held_lease_a_reply_could_not_check_keeps_its_deadline_and_is_not_lost_by_it() {
    // Unknown is not lost: a held term a reply could not check is neither reported lost nor
    // extended; it ends at its own deadline unless a later reply lists it.
    let (t0, mut e) = fresh();
    let (a, b) = (n("a"), n("b"));
    assert_eq!(one_acquire(&mut e, &a, 1, t0), Adoption::Adopted);
    assert_eq!(one_acquire(&mut e, &b, 1, t0), Adoption::Adopted);
    let sent = t0 + ms(3_000);
    let out = e.on_keep_alive(sent, sent + ms(10), alive_unknown(Duration::from_secs(10), &[("b", 1)], &["a"]));
    assert_eq!(out, Step::none());
    assert_eq!(e.token(&a, t0 + ms(9_000)), Some(t(1)));
    // Its own deadline (t0 + 9.9 s) passes while the session's (sent + 9.9 s) and b's go on.
    let out = e.poll(t0 + ms(9_900));
    assert_eq!(
        out.events,
        vec![SessionEvent::LeaseLost { name: a.clone(), token: t(1), reason: LossReason::Deadline }]
    );
    assert_eq!(e.token(&b, t0 + ms(9_900)), Some(t(1)));
    assert!(e.is_alive(t0 + ms(12_000)));
}

#[test]
fn a_term_a_keep_alive_renewed_before_its_acquire_was_adopted_keeps_that_renewal() {
    // Engine case B of the liveness invariants (issue #36): an acquire measures the term's time
    // left when it runs; a keep-alive sent after it renews the term and lists it, but its reply is
    // applied before the acquire's (the term is not held yet, so the listing was ignored). The
    // adopted term must keep that renewal, not the acquire's older deadline.
    let (t0, mut e) = fresh();
    let a = n("a");
    let epoch = e.begin_acquire(&a);
    let sent_acquire = t0 + ms(1_000);
    let out = e.poll(t0 + ms(3_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    let out = e.on_keep_alive(sent, sent + ms(10), alive(Duration::from_secs(10), &[("a", 1)]));
    assert_eq!(out, Step::none(), "a listed term with its acquire in flight is no stray");
    let (adoption, _) = e.acquire_answered(
        &a,
        AcquireCall { sent: sent_acquire, epoch, campaign: None },
        t(1),
        TermRemaining::Known(Duration::from_secs(10)),
        sent + ms(20),
    );
    assert_eq!(adoption, Adoption::Adopted);
    // The acquire alone gives 1 s + 9.9 s; the keep-alive sent at 3 s renewed it to 12.9 s.
    assert_eq!(e.token(&a, t0 + ms(11_000)), Some(t(1)), "the term lost the renewal its keep-alive listed");
    assert_eq!(e.token(&a, t0 + ms(12_900)), None);
}

#[test]
fn a_membership_joined_at_the_instant_a_keep_alive_was_sent_is_not_judged_by_it() {
    // The membership form of engine case A (9b7ef97): the send instant is taken before the call
    // goes out, so a join returning at that same instant (a coarse or virtual clock) may be
    // missing from the keep-alive's listing. The simulation's no-spurious-loss found it
    // ("membership of 'G' lost, no fault touched the session").
    let t0 = Instant::now();
    let mut e = Engine::new(timing(), t0, Duration::from_secs(10));
    let out = e.poll(t0 + ms(3_000));
    let Command::SendKeepAlive { sent } = out.commands[0] else { panic!("{out:?}") };
    let g = n("g");
    e.begin_join(&g);
    e.end_join(&g, sent);
    assert_eq!(e.joined(&g, sent), Step::none());
    let out = e.on_keep_alive(sent, t0 + ms(3_010), alive(Duration::from_secs(10), &[]));
    assert!(out.events.is_empty(), "{out:?}");
    assert!(e.is_joined(&g));
}
