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
use simba::{Coordinator, CoordinatorEvent, Session, SessionOptions};
use support::zk::PrivateZk;

fn options() -> SessionOptions {
    SessionOptions::builder()
        // 20 s against a 6.5 s outage: CI once saw a restart back at 6.9 s and still no renewal
        // 4.6 s later, so the 12 s it was left no margin for a loaded machine's reconnect (cause
        // not identified; not reproduced here, also not under three CPU hogs).
        .lease_duration(Duration::from_secs(20))
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

    // A restart shorter than the lease: down for 6.5 s, then the JVM's start-up. The client
    // reconnects to the same ZooKeeper session (the backend repeats the host in the connect
    // string so that the client retries about every second; with the host once its waits doubled
    // to 6.4 s and more, so this restart, back at ~7.5 s, was retried only at ~12.7 s and the
    // session expired although the server was back in time — also what full-suite runs, where
    // the JVM restarts slowly, showed): a renewal then restores the full remaining time and the
    // lease keeps its token. Expiry is not accepted.
    let lease_duration = options().lease_duration();
    zk.stop();
    let down = Instant::now();
    std::thread::sleep(Duration::from_millis(6500));
    zk.launch();
    let back = down.elapsed();
    let allowed = lease_duration - Duration::from_secs(2);
    assert!(
        back < allowed,
        "the private ZooKeeper took {back:?} to restart, more than this test allows ({allowed:?} of the \
         {lease_duration:?} lease): the machine is overloaded"
    );
    let what = format!("a restart of {back:?}");
    support::zk::assert_renewed_after(&session, &lease, t1, down, &what);
    assert_eq!(lease.token().unwrap(), t1, "the lease changed across a short restart");
    lease.release().unwrap();
    let again = session.lock("restart-lease").unwrap();
    let next = again.token().unwrap();
    drop(again);
    session.close().unwrap();
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
    let e1 = election.wait_elected_timeout(Duration::from_secs(10)).unwrap();
    zk.stop();
    std::thread::sleep(Duration::from_secs(4));
    assert!(!election.is_leader(), "still leader while ZooKeeper is down past the lease");
    zk.launch();
    let e2 = election.wait_elected_timeout(Duration::from_secs(60)).unwrap();
    assert!(e2 > e1, "re-election token {e2} not > {e1}");
    let evs: Vec<_> = events.try_iter().collect();
    assert!(evs.iter().any(|e| matches!(e, CoordinatorEvent::Recovered { .. })), "{evs:?}");
    drop(election);
    let _ = coordinator.close();
}
