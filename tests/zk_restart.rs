//! Real fault: a ZooKeeper server restart, on a private instance (never the shared server).
//!
//! ZooKeeper keeps sessions across a restart when the client reconnects within the session
//! timeout: a restart shorter than the lease keeps the lease and its token (czxid), and zxids are
//! durable, so the next term's token is larger. An outage longer than the lease expires the session
//! and a `Coordinator` recovers with a new session and a larger token.
#![cfg(feature = "zookeeper")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
use simba::{Coordinator, CoordinatorEvent, Session, SessionOptions, SessionState};
use support::zk::PrivateZk;

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(8))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

#[test]
#[serial_test::serial(zookeeper_private)]
fn zookeeper_restarts() {
    let mut zk = PrivateZk::start("simba-zk-restart");
    let backend = Arc::new(ZookeeperBackend::from_url(&zk.url(), ZookeeperOptions::default()).unwrap());
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("restart-lease").unwrap();
    let t1 = lease.token().unwrap();

    // A restart shorter than the session timeout. The client reconnects to the same ZooKeeper
    // session with its own backoff; then a renewal restores the full remaining time and the lease
    // keeps its token. If it does not reconnect before the local deadline, the session must expire
    // cleanly (lease lost, never silently kept). Either way no other outcome is allowed.
    // (Observed: isolated runs always reconnect; in full-suite runs the client sometimes stayed
    // disconnected — an open finding, see the closing notes.)
    zk.stop();
    zk.launch();
    let before = session.remaining().expect("alive after the restart");
    let until = Instant::now() + options().lease_duration() + Duration::from_secs(5);
    let survived = loop {
        assert!(Instant::now() < until, "neither a renewal nor an expiry after the restart");
        if session.remaining().is_some_and(|r| r > before + Duration::from_millis(300)) {
            break true;
        }
        if session.state() == SessionState::Expired {
            break false;
        }
        match lease.token() {
            Ok(t) => assert_eq!(t, t1),
            Err(_) => assert_eq!(session.state(), SessionState::Expired, "lease lost while the session lives"),
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let next = if survived {
        assert_eq!(lease.token().unwrap(), t1, "the lease changed across a short restart");
        lease.release().unwrap();
        let again = session.lock("restart-lease").unwrap();
        let t = again.token().unwrap();
        drop(again);
        session.close().unwrap();
        t
    } else {
        assert!(lease.token().is_err(), "an expired session still reports its lease");
        drop(lease);
        drop(session);
        let fresh = Session::open(backend.clone(), options()).unwrap();
        let l = fresh.lock_timeout("restart-lease", Duration::from_secs(30)).unwrap().expect("lease after expiry");
        let t = l.token().unwrap();
        drop(l);
        let _ = fresh.close();
        t
    };
    assert!(next > t1, "zxids not durable across the restart: {next} after {t1}");

    // An outage longer than the lease: the session expires; a coordinator recovers afterwards.
    let short = SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let coordinator = Coordinator::start(backend, short).unwrap();
    let events = coordinator.events();
    let election = coordinator.campaign("restart-election").unwrap();
    let e1 = election.wait_elected(Duration::from_secs(10)).unwrap();
    zk.stop();
    std::thread::sleep(Duration::from_secs(4));
    assert!(!election.is_leader(), "still leader while ZooKeeper is down past the lease");
    zk.launch();
    let e2 = election.wait_elected(Duration::from_secs(60)).unwrap();
    assert!(e2 > e1, "re-election token {e2} not > {e1}");
    let evs: Vec<_> = events.try_iter().collect();
    assert!(evs.iter().any(|e| matches!(e, CoordinatorEvent::Recovered { .. })), "{evs:?}");
    drop(election);
    let _ = coordinator.close();
}
