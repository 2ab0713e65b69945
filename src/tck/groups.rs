//! Group membership: the SPI's `join`/`leave`/`members` and keep-alive group reports, and `Session::join`/`watch_members` through the public API.

use super::*;

fn groups_of(h: &Harness, sid: &SessionId) -> Vec<Name> {
    match h.backend.keep_alive(sid, h.lease()) {
        Ok(KeepAlive::Alive { groups, .. }) => groups,
        other => panic!("keep_alive: expected Alive, got {other:?}"),
    }
}

/// A keep-alive reports exactly the groups the session is a member of, sorted: joined ones,
/// not left ones, never another session's.
pub(super) fn keep_alive_reports_groups(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let (g1, g2, g3) = (h.name("g1"), h.name("g2"), h.name("g3"));
    assert!(groups_of(h, &a).is_empty());
    for g in [&g2, &g1, &g3] {
        h.backend.join(&a, g).unwrap();
    }
    h.backend.join(&b, &g3).unwrap();
    let mut want = vec![g1.clone(), g2.clone(), g3.clone()];
    want.sort();
    assert_eq!(groups_of(h, &a), want);
    h.backend.leave(&a, &g2).unwrap();
    h.backend.leave(&a, &g3).unwrap();
    assert_eq!(groups_of(h, &a), vec![g1.clone()]);
    assert_eq!(groups_of(h, &b), vec![g3.clone()]);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// A join that returned is visible at once, with the member's metadata; join and leave are idempotent.
pub(super) fn join_visible_at_once(h: &Harness) {
    let (a, b) = (h.raw_session("meta-a"), h.raw_session("meta-b"));
    let g = h.name("g");
    h.backend.join(&a, &g).unwrap();
    h.backend.join(&a, &g).unwrap();
    h.backend.join(&b, &g).unwrap();
    let m = h.backend.members(&g).unwrap();
    let mut want = vec![(a.clone(), "meta-a".to_string()), (b.clone(), "meta-b".to_string())];
    want.sort();
    assert_eq!(m.iter().map(|m| (m.session.clone(), m.metadata.clone())).collect::<Vec<_>>(), want);
    h.backend.leave(&a, &g).unwrap();
    h.backend.leave(&a, &g).unwrap();
    assert_eq!(h.backend.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![b.clone()]);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// `members` lists live sessions only: an expired member disappears.
pub(super) fn members_are_live_sessions_only(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let g = h.name("g");
    h.backend.join(&a, &g).unwrap();
    h.backend.join(&b, &g).unwrap();
    assert_eq!(h.backend.members(&g).unwrap().len(), 2);
    outlive(h, &[&a]);
    let m = h.backend.members(&g).unwrap();
    assert_eq!(m.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![a.clone()]);
    h.backend.close_session(&a).unwrap();
    assert!(h.backend.members(&g).unwrap().is_empty());
}

/// A membership removed behind the session's back (as a leave that reached the server late
/// would) is found by the next renewals: `MembershipLost`, then the session re-joins it
/// (`MembershipRestored`) and is listed again.
pub(super) fn membership_lost_behind_back_is_rejoined(h: &Harness) {
    let s = h.session();
    let events = s.events();
    let g = h.name("g");
    let m = s.join(&g).unwrap();
    assert!(m.is_member());
    h.backend.leave(s.id(), &g).unwrap();
    let next = |want: &dyn Fn(&SessionEvent) -> bool| {
        let end = Instant::now() + h.patience();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match events.recv_timeout(left) {
                Ok(ev) if want(&ev) => return ev,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no such event within {:?}", h.patience());
    };
    let lost = next(&|ev| matches!(ev, SessionEvent::MembershipLost { .. }));
    assert_eq!(lost, SessionEvent::MembershipLost { group: g.clone() });
    let back = next(&|ev| matches!(ev, SessionEvent::MembershipRestored { .. }));
    assert_eq!(back, SessionEvent::MembershipRestored { group: g.clone() });
    assert!(m.is_member());
    assert!(h.backend.members(&g).unwrap().iter().any(|x| &x.session == s.id()));
    m.leave().unwrap();
    assert!(h.backend.members(&g).unwrap().is_empty());
    s.close().unwrap();
}

/// A membership the session does not hold (as a join that landed after its caller gave up
/// would make) is left again by the next renewals.
pub(super) fn stray_membership_is_left(h: &Harness) {
    let s = h.session();
    let (g, kept) = (h.name("g"), h.name("kept"));
    let m = s.join(&kept).unwrap();
    h.backend.join(s.id(), &g).unwrap();
    assert!(
        eventually(h.patience(), || h.backend.members(&g).unwrap().is_empty()),
        "the stray membership of {g} was not left"
    );
    assert!(m.is_member());
    assert_eq!(h.backend.members(&kept).unwrap().len(), 1);
    drop(m);
    s.close().unwrap();
}

/// A member appears in `members` and in the change stream, and disappears from both when it leaves.
pub(super) fn membership_changes_are_streamed(h: &Harness) {
    let g = h.name("g");
    let (a, b) = (h.session_with("watcher"), h.session_with("member"));
    let watch = a.watch_members(&g).unwrap();
    let first = watch.recv_timeout(h.patience()).expect("initial snapshot");
    assert!(first.members.is_empty());
    let m = b.join(&g).unwrap();
    assert!(m.is_member());
    assert_eq!(a.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![b.id().clone()]);
    let change = watch.recv_timeout(h.patience()).expect("join change");
    assert_eq!(
        change.joined.iter().map(|m| (m.session.clone(), m.metadata.clone())).collect::<Vec<_>>(),
        vec![(b.id().clone(), "member".to_string())]
    );
    m.leave().unwrap();
    assert!(a.members(&g).unwrap().is_empty());
    let change = watch.recv_timeout(h.patience()).expect("leave change");
    assert_eq!(change.left.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![b.id().clone()]);
    assert!(change.members.is_empty());
    a.close().unwrap();
    b.close().unwrap();
}

/// A member whose session ends disappears from `members`; dropping the handle leaves.
pub(super) fn membership_ends_with_session(h: &Harness) {
    let g = h.name("g");
    let (a, b) = (h.session(), h.session());
    let ma = a.join(&g).unwrap();
    let mb = b.join(&g).unwrap();
    assert_eq!(a.members(&g).unwrap().len(), 2);
    drop(mb);
    assert!(eventually(h.patience(), || a.members(&g).unwrap().len() == 1));
    let _mb2 = b.join(&g).unwrap();
    b.close().unwrap();
    assert_eq!(a.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![a.id().clone()]);
    assert!(ma.is_member());
    drop(ma);
    a.close().unwrap();
}

/// Capability `push_membership`. A backend that claims it accepts a watch of a group and sends
/// `MembersChanged` when a member joins and when it leaves; one that does not claim it declines
/// the watch (`Ok(false)`), so watchers know to poll.
pub(super) fn membership_changes_are_pushed(h: &Harness, claimed: bool) {
    let a = h.raw_session("member");
    let g = h.name("g");
    let (tx, rx) = crossbeam_channel::unbounded();
    let watching = h.backend.watch(&Topic::Group(g.clone()), &tx).unwrap();
    if !claimed {
        assert!(!watching, "the backend claims no push_membership but accepted a watch of a group");
        h.backend.close_session(&a).unwrap();
        return;
    }
    assert!(watching, "the backend claims push_membership but declined to watch a group");
    h.backend.join(&a, &g).unwrap();
    assert_eq!(
        next_notification(h, &rx),
        Some(Notification::MembersChanged(g.clone())),
        "no MembersChanged after join"
    );
    assert!(h.backend.watch(&Topic::Group(g.clone()), &tx).unwrap());
    h.backend.leave(&a, &g).unwrap();
    assert_eq!(
        next_notification(h, &rx),
        Some(Notification::MembersChanged(g.clone())),
        "no MembersChanged after leave"
    );
    h.backend.close_session(&a).unwrap();
}
