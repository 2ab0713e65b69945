//! Recovery: a `Coordinator` replacing an expired session (re-campaign, re-join) and reporting what it saw.

use super::*;

/// A `Coordinator` forwards a membership's loss and restoration as its own events.
pub(super) fn coordinator_reports_membership_loss(h: &Harness) {
    let c = Coordinator::start(h.backend.clone(), h.options.clone()).unwrap();
    let events = c.events();
    let g = h.name("g");
    let m = c.join(&g).unwrap();
    let sid = c.session_id().unwrap();
    h.backend.leave(&sid, &g).unwrap();
    let end = Instant::now() + h.patience() * 2;
    let mut seen = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok(ev @ (CoordinatorEvent::MembershipLost { .. } | CoordinatorEvent::MembershipRestored { .. })) => {
                seen.push(ev);
                if seen.len() == 2 {
                    break;
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert_eq!(
        seen,
        vec![
            CoordinatorEvent::MembershipLost { session: sid.clone(), group: g.clone() },
            CoordinatorEvent::MembershipRestored { session: sid.clone(), group: g.clone() },
        ]
    );
    assert!(m.is_member());
    drop(m);
    c.close().unwrap();
}

/// A coordinator replaces an expired session, re-campaigns with a new, larger token, re-joins
/// durable memberships, and reports the gap through events.
pub(super) fn recovery_reelects_with_larger_token(h: &Harness) {
    let l = h.name("e");
    let g = h.name("g");
    let c = match Coordinator::start(h.backend.clone(), h.options.clone()) {
        Ok(c) => c,
        Err(e) => panic!("coordinator: {e}"),
    };
    let events = c.events();
    let e = c.campaign(&l).unwrap();
    let m = c.join(&g).unwrap();
    let t1 = e.wait_elected_timeout(h.patience()).unwrap();
    let old = c.session_id().expect("session");
    let election_events = e.events();
    h.backend.close_session(&old).unwrap();
    let mut recovered = None;
    let deadline = Instant::now() + h.patience();
    while Instant::now() < deadline {
        if let Ok(CoordinatorEvent::Recovered { old: o, new, .. }) = events.recv_timeout(Duration::from_millis(100)) {
            recovered = Some((o, new));
            break;
        }
    }
    let (o, new) = recovered.expect("recovered event");
    assert_eq!(o, old);
    assert_ne!(new, old);
    let t2 = e.wait_elected_timeout(h.patience()).unwrap();
    assert!(t2 > t1, "{t2} not > {t1}");
    assert_eq!(e.session_id(), Some(new.clone()));
    assert!(eventually(h.patience(), || {
        h.backend.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>() == vec![new.clone()]
    }));
    assert!(m.is_member());
    let evs: Vec<_> = election_events.try_iter().collect();
    let revoked = evs.iter().position(|x| matches!(x, ElectionEvent::Revoked { token, .. } if *token == t1));
    let elected = evs.iter().position(|x| matches!(x, ElectionEvent::Elected { token } if *token == t2));
    assert!(matches!((revoked, elected), (Some(r), Some(el)) if r < el), "{evs:?}");
    let seen: HashSet<_> = h.backend.holder(&l).unwrap().map(|x| x.session).into_iter().collect();
    assert!(seen.contains(&new));
    drop(e);
    drop(m);
    c.close().unwrap();
}
