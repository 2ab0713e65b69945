//! Coordinator races that need a pause point inside the supervisor (issue #14, finding 5b): the
//! seam `before_reattach` runs the racing operation on the supervisor thread at the exact instant
//! between planning a re-attach and performing it. The other re-attach races (5a, 5c, 5d) are
//! forced from outside, through backend hooks, in `tests/coordinator_races.rs`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Coordinator, CoordinatorEvent};
use crate::backend::LeaseBackend;
use crate::{MemoryBackend, Name, SessionOptions};

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(60))
        .renew_interval(Duration::from_millis(100))
        .query_timeout(Duration::from_secs(2))
        .build()
        .unwrap()
}

/// (b) The application resigns a durable election after the coordinator planned to move it to
/// the replacement session but before it attached it there (the resign went to the expired
/// session). The replacement must not keep a campaign nobody owns: the name is free for this
/// very coordinator to lock, and nothing holds it on the backend.
#[test]
fn resign_during_reattach_leaves_no_zombie_campaign_on_the_new_session() {
    let backend = Arc::new(MemoryBackend::new());
    let coordinator = Coordinator::start(backend.clone(), options()).unwrap();
    let events = coordinator.events();
    let name = Name::new(format!("zombie-{}", rand::random::<u32>())).unwrap();
    let election = coordinator.campaign(&name).unwrap();
    let first = election.wait_elected_timeout(Duration::from_secs(5)).unwrap();

    // The resign runs on the supervisor, after the replacement's plan included the election and
    // before its attach.
    let (resigned_tx, resigned_rx) = crossbeam_channel::bounded(1);
    *coordinator.inner.before_reattach.lock() = Some(Box::new(move || {
        let _ = resigned_tx.send(election.resign());
    }));
    let old = coordinator.session_id().unwrap();
    backend.close_session(&old).unwrap();
    let until = Instant::now() + Duration::from_secs(10);
    let new = loop {
        match events.recv_deadline(until) {
            Ok(CoordinatorEvent::Recovered { new, .. }) => break new,
            Ok(_) => {}
            Err(_) => panic!("the coordinator did not recover within 10 s"),
        }
    };
    resigned_rx.try_recv().expect("the resign did not run during the re-attach").unwrap();
    assert_ne!(new, old);

    // The new session neither campaigns for the name nor holds it: a lock of it on this very
    // coordinator succeeds (a release of an attempt's term may still be landing: retried, as
    // the error says; a zombie campaign answers `AlreadyHeld` for good).
    let lease = loop {
        match coordinator.try_lock(&name) {
            Ok(Some(lease)) => break lease,
            Ok(None) => {}
            Err(e) if e.is_retryable() => {}
            Err(e) => panic!("the resigned election still campaigns on the new session: {e}"),
        }
        assert!(Instant::now() < until, "the name never became free after the resign");
        std::thread::sleep(Duration::from_millis(10));
    };
    let token = lease.token().unwrap();
    assert!(token > first);
    let holder = backend.holder(&name).unwrap().expect("the lock holds it");
    assert_eq!((holder.session, holder.token), (new, token), "only the lock holds the name");
    lease.release().unwrap();
    // Released, and nothing takes it again (an attempt dispatched before the detach may still
    // land, and is undone).
    while backend.holder(&name).unwrap().is_some() {
        assert!(Instant::now() < until, "something keeps the name after the resign and the release");
        std::thread::sleep(Duration::from_millis(10));
    }
    coordinator.close().unwrap();
}
