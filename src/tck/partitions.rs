//! Partition sets through the public API: `Session::partitions`, the assignment's guarantees
//! (exclusive, covered, balanced, sticky, live) on joins, graceful leaves and crashes, the drain
//! and its early end, the stored count, and bad input rejected before any I/O. A partition is a
//! term of one reserved lease, so these cases check that the backend keeps the lease rules on the
//! partition names and that the members' views converge on every backend.

use std::collections::{BTreeMap, BTreeSet};

use super::spy::Spy;
use super::*;
use crate::handles::partitions::{
    PartitionEvent, PartitionOptions, Partitions, MAX_PARTITIONS, MAX_PARTITION_SET_NAME_LEN,
};

/// The partitions `p` owns now.
fn owned(p: &Partitions) -> BTreeSet<u32> {
    p.owned().iter().map(|x| x.index()).collect()
}

/// Every partition's token as `members` own them now: (partition → token).
fn tokens(members: &[&Partitions]) -> BTreeMap<u32, Token> {
    members.iter().flat_map(|m| m.owned()).map(|x| (x.index(), x.granted_token())).collect()
}

/// Waits until `members` own every partition exactly once, each at most ⌈count / members⌉, with
/// a valid token, and each member counts them all; panics with their views otherwise.
fn converge(h: &Harness, members: &[&Partitions], what: &str) {
    let count = members[0].count();
    let cap = count.div_ceil(members.len() as u32) as usize;
    let done = eventually(h.patience(), || {
        let sets: Vec<BTreeSet<u32>> = members.iter().map(|m| owned(m)).collect();
        let total: usize = sets.iter().map(BTreeSet::len).sum();
        let union: BTreeSet<u32> = sets.iter().flatten().copied().collect();
        total == count as usize
            && union.len() == count as usize
            && sets.iter().all(|s| s.len() <= cap)
            && members.iter().all(|m| m.members().len() == members.len())
            && members.iter().all(|m| m.owned().iter().all(|x| x.token().is_ok()))
    });
    let views: Vec<(Vec<u32>, usize)> =
        members.iter().map(|m| (owned(m).into_iter().collect(), m.members().len())).collect();
    assert!(done, "{what}: the members did not converge on a covered, balanced assignment: {views:?}");
}

/// Drain quickly: the members in these cases do not release on `Revoking` themselves.
fn quick() -> PartitionOptions {
    PartitionOptions::default().drain(Duration::from_millis(100))
}

/// A join moves partitions only to the joiner (at most ⌈count / members⌉), a graceful close moves
/// only the leaver's; every new owner's token is larger than the last one's.
pub(super) fn partitions_join_and_leave_are_sticky(h: &Harness) {
    let name = h.name("sticky");
    let (sa, sb, sc) = (h.session(), h.session(), h.session());
    let a = sa.partitions_with(&name, 6, quick()).expect("partitions");
    converge(h, &[&a], "one member");
    let t1 = tokens(&[&a]);
    let a1 = owned(&a);
    let b = sb.partitions_with(&name, 6, quick()).expect("partitions");
    converge(h, &[&a, &b], "after the second member joined");
    let (a2, b2) = (owned(&a), owned(&b));
    assert!(a2.is_subset(&a1), "a kept {a2:?}, not a subset of what it had ({a1:?})");
    assert_eq!(b2.len(), 3);
    let c = sc.partitions_with(&name, 6, quick()).expect("partitions");
    converge(h, &[&a, &b, &c], "after the third member joined");
    let (a3, b3, c3) = (owned(&a), owned(&b), owned(&c));
    assert!(a3.is_subset(&a2) && b3.is_subset(&b2), "a join moved partitions between the old members");
    assert_eq!(c3.len(), 2);
    let t3 = tokens(&[&a, &b, &c]);
    for p in b2.iter().chain(&c3) {
        assert!(t3[p] > t1[p], "partition {p}: token {} after a hand-off is not larger than {}", t3[p], t1[p]);
    }
    c.close().expect("close");
    converge(h, &[&a, &b], "after the third member left");
    let (a4, b4) = (owned(&a), owned(&b));
    assert!(a3.is_subset(&a4) && b3.is_subset(&b4), "a leave moved partitions of members that stayed");
    let t4 = tokens(&[&a, &b]);
    for p in &c3 {
        assert!(t4[p] > t3[p], "partition {p}: token {} after the leave is not larger than {}", t4[p], t3[p]);
    }
    drop((a, b));
}

/// An owner told `Revoking` keeps the partition (its token valid, nobody else owns it) until it
/// releases it; then the new owner takes it. Planned hand-offs are `Revoked`, never `Lost`.
pub(super) fn partitions_drain_until_released(h: &Harness) {
    let name = h.name("drain");
    let (sa, sb) = (h.session(), h.session());
    let forever = PartitionOptions::default().drain(Duration::MAX);
    let a = sa.partitions_with(&name, 4, forever).expect("partitions");
    converge(h, &[&a], "one member");
    let events = a.events();
    let b = sb.partitions_with(&name, 4, forever).expect("partitions");
    let mut revoking = BTreeSet::new();
    let deadline = Instant::now() + h.patience();
    while revoking.len() < 2 {
        match events.recv_deadline(deadline) {
            Ok(PartitionEvent::Revoking { partition, .. }) => {
                revoking.insert(partition);
            }
            Ok(PartitionEvent::Lost { partition, reason, .. }) => panic!("partition {partition} lost ({reason:?})"),
            Ok(_) => {}
            Err(e) => panic!("no Revoking for two partitions after the second member joined: {e}"),
        }
    }
    // Draining: still a's, and b waits.
    thread::sleep(h.options.renew_interval() * 2);
    let held = a.owned();
    assert_eq!(held.len(), 4, "a gave up partitions before releasing them");
    assert!(owned(&b).is_empty(), "b took a partition a still drains: {:?}", owned(&b));
    for x in &held {
        assert!(x.token().is_ok(), "partition {} failed its token during the drain", x.index());
        if revoking.contains(&x.index()) {
            assert!(x.revoking_deadline().is_some());
        }
    }
    for x in held.into_iter().filter(|x| revoking.contains(&x.index())) {
        let p = x.index();
        let guard = x.clone();
        x.release().expect("release");
        assert!(guard.token().is_err(), "partition {p}: the token works after release()");
    }
    converge(h, &[&a, &b], "after the drained partitions were released");
    assert_eq!(owned(&b), revoking, "b owns other partitions than those a gave up");
    let mut revoked = BTreeSet::new();
    while let Ok(ev) = events.try_recv() {
        match ev {
            PartitionEvent::Revoked { partition, .. } => {
                revoked.insert(partition);
            }
            PartitionEvent::Lost { partition, reason, .. } => panic!("partition {partition} lost ({reason:?})"),
            _ => {}
        }
    }
    assert_eq!(revoked, revoking, "every released partition is reported Revoked");
}

/// A member whose session stops renewing loses its partitions (`Lost`), and only those move: the
/// survivor takes them in new terms once the crashed member's session expired.
pub(super) fn partitions_crash_moves_only_the_crashed_members(h: &Harness) {
    let name = h.name("crash");
    let spy = Spy::new(h.backend.clone());
    let stuck = h.session_on(spy.clone(), h.options.clone());
    let long = super::options(Duration::from_secs(4), Duration::from_secs(1));
    let survivor = h.session_on(h.backend.clone(), long);
    let a = stuck.partitions_with(&name, 4, quick()).expect("partitions");
    let b = survivor.partitions_with(&name, 4, quick()).expect("partitions");
    converge(h, &[&a, &b], "two members");
    let (a1, b1, t1) = (owned(&a), owned(&b), tokens(&[&a, &b]));
    let events = a.events();
    let hang = spy.hang_keep_alives();
    // The snapshot never lists a partition whose token already fails: watch one partition's
    // token and the snapshot together, with no pause, until the token fails.
    let watched = a.owned().into_iter().next().expect("the crashed member owns a partition");
    let end = Instant::now() + h.patience();
    while watched.token().is_ok() {
        assert!(Instant::now() < end, "the crashed member's token never failed");
        thread::yield_now();
    }
    let listed = owned(&a);
    assert!(
        !listed.contains(&watched.index()),
        "owned() still lists partition {} after its token failed: {listed:?}",
        watched.index()
    );
    let done = eventually(h.patience(), || owned(&b).len() == 4);
    assert!(done, "the survivor did not take the crashed member's partitions: it owns {:?}", owned(&b));
    assert!(b1.is_subset(&owned(&b)), "the survivor lost its own partitions");
    let t2 = tokens(&[&b]);
    for p in &a1 {
        assert!(t2[p] > t1[p], "partition {p}: token {} after the crash is not larger than {}", t2[p], t1[p]);
    }
    assert!(owned(&a).is_empty(), "the crashed member still lists {:?}", owned(&a));
    let mut lost = BTreeSet::new();
    while let Ok(ev) = events.try_recv() {
        if let PartitionEvent::Lost { partition, .. } = ev {
            lost.insert(partition);
        }
    }
    assert_eq!(lost, a1, "each of the crashed member's partitions is reported Lost");
    drop(hang);
    drop((a, b));
}

/// The count is stored on first use; another count is `InvalidConfig` naming both; the same
/// count joins.
pub(super) fn partitions_count_is_stored_and_mismatch_rejected(h: &Harness) {
    let name = h.name("count");
    let (sa, sb) = (h.session(), h.session());
    let a = sa.partitions(&name, 4).expect("partitions");
    let e = sb.partitions(&name, 5).expect_err("another count must be refused");
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    let msg = e.to_string();
    assert!(
        msg.contains("has 4 partitions") && msg.contains("5 were asked for") && msg.contains(name.as_str()),
        "{msg}"
    );
    let again = sa.partitions(&name, 4).expect_err("one membership per session");
    assert_eq!(again.kind(), ErrorKind::AlreadyHeld, "{again}");
    let b = sb.partitions(&name, 4).expect("the stored count joins");
    converge(h, &[&a, &b], "two members");
}

/// Bad input is refused before any I/O, with the allowed range; the reserved names cannot be
/// taken as locks, groups or semaphores.
pub(super) fn partitions_bad_input_rejected(h: &Harness) {
    let s = h.session();
    let name = h.name("bad");
    for count in [0, MAX_PARTITIONS + 1] {
        let e = s.partitions(&name, count).expect_err("count out of range");
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert!(e.to_string().contains(&format!("1 to {MAX_PARTITIONS}")), "{e}");
    }
    let long = "x".repeat(MAX_PARTITION_SET_NAME_LEN + 1);
    let e = s.partitions(long.as_str(), 4).expect_err("name too long");
    assert_eq!(e.kind(), ErrorKind::InvalidName);
    assert!(e.to_string().contains(&MAX_PARTITION_SET_NAME_LEN.to_string()), "{e}");
    let e = s.partitions_with(&name, 4, PartitionOptions::default().max_per_member(0)).expect_err("max 0");
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    let lease = format!("{}{name}:0", crate::types::PARTITION_NAME_PREFIX);
    assert_eq!(s.try_lock(lease.as_str()).expect_err("reserved").kind(), ErrorKind::InvalidName);
    assert_eq!(s.join(lease.as_str()).expect_err("reserved").kind(), ErrorKind::InvalidName);
    assert_eq!(s.semaphore(lease.as_str(), 2).expect_err("reserved").kind(), ErrorKind::InvalidName);
    // Nothing was stored: a first real use may pick any count.
    let p = s.partitions(&name, 3).expect("partitions");
    assert_eq!(p.count(), 3);
}

/// A coordinator's member lives across session replacement: when its session is deleted behind
/// its back, its partitions are reported `Lost`, and on the replacement session it owns them all
/// again in new terms with larger tokens (reported `Assigned`).
pub(super) fn coordinator_partitions_survive_replacement(h: &Harness) {
    let name = h.name("coord");
    let c = match Coordinator::start(h.backend.clone(), h.options.clone()) {
        Ok(c) => c,
        Err(e) => panic!("coordinator: {e}"),
    };
    let p = c.partitions_with(&name, 3, quick()).expect("partitions");
    converge(h, &[&p], "one coordinator member");
    let t1 = tokens(&[&p]);
    let events = p.events();
    let old = c.session_id().expect("session");
    h.backend.close_session(&old).expect("close_session behind the coordinator's back");
    let done = eventually(h.patience() * 2, || {
        c.session_id().is_some_and(|s| s != old) && owned(&p).len() == 3 && p.owned().iter().all(|x| x.token().is_ok())
    });
    assert!(done, "the member did not own every partition again on the replacement session: {:?}", owned(&p));
    let t2 = tokens(&[&p]);
    for (i, t) in &t2 {
        assert!(*t > t1[i], "partition {i}: token {t} on the new session is not larger than {}", t1[i]);
    }
    let evs: Vec<PartitionEvent> = events.try_iter().collect();
    for i in 0..3u32 {
        let lost = evs.iter().position(|e| matches!(e, PartitionEvent::Lost { partition, .. } if *partition == i));
        let again =
            evs.iter().rposition(|e| matches!(e, PartitionEvent::Assigned { partition, .. } if *partition == i));
        assert!(
            matches!((lost, again), (Some(l), Some(a)) if l < a),
            "partition {i}: expected Lost then Assigned: {evs:?}"
        );
    }
    p.close().expect("close");
    c.close().expect("close");
}

/// Capability `push_release`, for partitions: a member waiting for a partition the target gives
/// it (registered for its release after a busy claim) takes it within a quarter of the renew
/// interval of the owner's release on a backend that pushes releases (its next poll would come
/// only after half of it); without push it takes it at a later poll.
pub(super) fn partition_handoff_is_pushed(h: &Harness, claimed: bool) {
    let options = super::options(Duration::from_secs(12), Duration::from_secs(6));
    let bound = options.renew_interval() / 4;
    let spy = Spy::new(h.backend.clone());
    let sa = h.session_on(h.backend.clone(), options.clone());
    let sb = h.session_on(spy.clone(), options.clone());
    let name = h.name("pushed");
    let forever = PartitionOptions::default().drain(Duration::MAX);
    let a = sa.partitions_with(&name, 2, forever).expect("partitions");
    converge(h, &[&a], "one member");
    let a_events = a.events();
    let b = sb.partitions_with(&name, 2, forever).expect("partitions");
    let b_events = b.events();
    let revoking = loop {
        match a_events.recv_timeout(h.patience()) {
            Ok(PartitionEvent::Revoking { partition, .. }) => break partition,
            Ok(_) => {}
            Err(e) => panic!("no Revoking after the second member joined: {e}"),
        }
    };
    // The waiter's claim found the partition busy: it registered (or polls) and waits.
    assert!(eventually(h.patience(), || spy.busy_replies() >= 1), "the second member never tried the partition");
    // Release right after one of its busy claims, never just before its next poll: that claim
    // may lie seconds back (the owner revokes only once it counts the joiner), and a poll due
    // inside the bound would pass for a push. The member retries a busy claim on its retry
    // delay (push or poll), so a fresh one comes within `renew_interval * 3 / 4`.
    let seen = spy.busy_replies();
    let fresh = eventually(options.renew_interval(), || spy.busy_replies() > seen);
    assert!(
        fresh,
        "the waiting member made no further claim of partition {revoking} in {:?}",
        options.renew_interval()
    );
    let t1 = a.owned().iter().find(|x| x.index() == revoking).map(|x| x.granted_token()).expect("still owned");
    let x = a.owned().into_iter().find(|x| x.index() == revoking).expect("still owned");
    let released = Instant::now();
    x.release().expect("release");
    let (woken, token) = loop {
        match b_events.recv_timeout(h.patience()) {
            Ok(PartitionEvent::Assigned { partition, token, .. }) if partition == revoking => {
                break (Instant::now(), token)
            }
            Ok(_) => {}
            Err(e) => panic!("the second member never took partition {revoking}: {e}"),
        }
    };
    assert!(token > t1, "partition {revoking}: token {token} not > {t1}");
    if claimed {
        let took = woken.duration_since(released);
        assert!(
            took < bound,
            "the backend claims push_release, yet the waiting member took the partition {took:?} after the release \
             (a poll retries after {:?}; pushed, it must be inside {bound:?})",
            options.renew_interval() / 2
        );
    }
    drop((a, b));
    sa.close().expect("close");
    sb.close().expect("close");
}

/// Dropping a member's handle hands its partitions on at once (its session lives on): the other
/// member owns them all, in new terms, well before the dropped member's session would expire.
pub(super) fn dropped_partitions_are_released(h: &Harness) {
    let name = h.name("dropped");
    let long = super::options(Duration::from_secs(30), Duration::from_secs(10));
    let (sa, sb) = (h.session_on(h.backend.clone(), long.clone()), h.session_on(h.backend.clone(), long));
    let a = sa.partitions_with(&name, 4, quick()).expect("partitions");
    let b = sb.partitions_with(&name, 4, quick()).expect("partitions");
    converge(h, &[&a, &b], "two members");
    let (b_owned, t1) = (owned(&b), tokens(&[&b]));
    drop(b);
    let done = eventually(h.patience(), || owned(&a).len() == 4);
    assert!(done, "the remaining member did not take the dropped member's partitions: it owns {:?}", owned(&a));
    assert!(sb.is_alive(), "the dropped member's session ended: the hand-off proves nothing");
    let t2 = tokens(&[&a]);
    for p in &b_owned {
        assert!(t2[p] > t1[p], "partition {p}: token {} not > {}", t2[p], t1[p]);
    }
}

/// A maximum per member leaves partitions unowned when there are too few members, and a new
/// member takes them without moving any other.
pub(super) fn max_per_member_leaves_the_rest_unowned(h: &Harness) {
    let name = h.name("max");
    let (sa, sb, sc) = (h.session(), h.session(), h.session());
    let one = quick().max_per_member(1);
    let a = sa.partitions_with(&name, 3, one).expect("partitions");
    let b = sb.partitions_with(&name, 3, one).expect("partitions");
    let two = eventually(h.patience(), || owned(&a).len() == 1 && owned(&b).len() == 1 && a.members().len() == 2);
    assert!(two, "two members with a maximum of 1 own {:?} and {:?}", owned(&a), owned(&b));
    // Stable: nothing more is taken.
    thread::sleep(h.options.renew_interval() * 2);
    assert_eq!((owned(&a).len(), owned(&b).len()), (1, 1), "a member exceeded its maximum");
    let (a1, b1) = (owned(&a), owned(&b));
    let c = sc.partitions_with(&name, 3, one).expect("partitions");
    converge(h, &[&a, &b, &c], "three members with a maximum of 1");
    assert_eq!((owned(&a), owned(&b)), (a1, b1), "the third member's arrival moved partitions of the others");
}

/// The settle period: a joiner is counted by the others only after it (no `Revoking` before the
/// settle period has passed since the join), and a member that joins and leaves within it moves
/// nothing.
pub(super) fn settle_period_damps_flapping(h: &Harness) {
    let name = h.name("settle");
    let settle = Duration::from_secs(2);
    let options = quick().settle(settle);
    let (sa, sb, sc) = (h.session(), h.session(), h.session());
    let a = sa.partitions_with(&name, 4, options).expect("partitions");
    converge(h, &[&a], "one member");
    let events = a.events();
    // A flapping member: joins and leaves well within the settle period.
    let flap = sc.partitions_with(&name, 4, options).expect("partitions");
    flap.close().expect("close");
    // A member that stays.
    let joining = Instant::now();
    let b = sb.partitions_with(&name, 4, options).expect("partitions");
    let revoking = loop {
        match events.recv_timeout(h.patience()) {
            Ok(PartitionEvent::Revoking { .. }) => break Instant::now(),
            Ok(PartitionEvent::Lost { partition, reason, .. }) => panic!("partition {partition} lost ({reason:?})"),
            Ok(_) => {}
            Err(e) => panic!("no Revoking after the second member joined: {e}"),
        }
    };
    let after = revoking.duration_since(joining);
    assert!(after >= settle, "the first member revoked a partition {after:?} after the join, within the settle period");
    converge(h, &[&a, &b], "two members");
    let revoked: usize = events.try_iter().filter(|e| matches!(e, PartitionEvent::Revoked { .. })).count();
    assert!(revoked <= 2, "the flapping member moved partitions: {} revoked in all", revoked + 1);
}
