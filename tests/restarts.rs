//! Real faults: database server restarts, on private instances (never the shared servers).
//!
//! A restart shorter than the lease: the session survives (the pool replaces its dead connections
//! and the next renewal succeeds), the lease keeps its token, and the token counter is durable —
//! the next term's token is larger. A restart longer than the lease: the session expires locally
//! at its deadline and a `Coordinator` recovers with a new session and a larger token.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backend::LeaseBackend;
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{Coordinator, CoordinatorEvent, Session, SessionOptions};
use support::sql::{PrivateMariadb, PrivatePostgres};

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(6))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_millis(800))
        .build()
        .unwrap()
}

fn sql_options() -> SqlOptions {
    SqlOptions::builder().query_timeout(Duration::from_millis(800)).build().unwrap()
}

/// The exercise shared by both databases: hold a lease across a short restart, then across a
/// restart longer than the lease (with a coordinator to recover).
fn survive_restarts(backend: Arc<dyn LeaseBackend>, mut restart: impl FnMut(Duration)) {
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("restart-lease").unwrap();
    let t1 = lease.token().unwrap();
    restart(Duration::ZERO);
    // The session renews through fresh connections; the lease and its token survive.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        assert!(lease.token().is_ok(), "lease lost across a short restart");
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lease.token().unwrap(), t1);
    lease.release().unwrap();
    let t2 = session.lock("restart-lease").unwrap();
    assert!(t2.token().unwrap() > t1, "token counter not durable across the restart");
    drop(t2);
    session.close().unwrap();

    // A restart that outlasts the lease: the coordinator's session expires locally on time, and
    // it recovers on a new session with a larger token once the server is back.
    let coordinator = Coordinator::start(backend, options()).unwrap();
    let events = coordinator.events();
    let election = coordinator.campaign("restart-election").unwrap();
    let e1 = election.wait_elected_timeout(Duration::from_secs(10)).unwrap();
    assert!(e1.get() > 0);
    restart(Duration::from_secs(8));
    let e2 = election.wait_elected_timeout(Duration::from_secs(30)).unwrap();
    assert!(e2 > e1, "re-election token {e2} not > {e1}");
    // `Recovered` follows the re-attach of the election, whose first attempt may win before the
    // supervisor gets to emit it: wait for it (bounded), do not assume it already came.
    let mut evs: Vec<_> = Vec::new();
    let until = Instant::now() + Duration::from_secs(10);
    while !evs.iter().any(|e| matches!(e, CoordinatorEvent::Recovered { .. })) {
        match events.recv_timeout(until.saturating_duration_since(Instant::now())) {
            Ok(e) => evs.push(e),
            Err(_) => panic!("no Recovered within 10 s of the re-election: {evs:?}"),
        }
    }
    assert!(evs.iter().any(|e| matches!(e, CoordinatorEvent::SessionLost { .. })), "{evs:?}");
    drop(election);
    coordinator.close().unwrap();
}

// ---------------------------------------------------------------- PostgreSQL

#[test]
#[serial_test::serial(postgres_private)]
fn postgres_restarts() {
    let pg = PrivatePostgres::start(5491);
    let backend = Arc::new(SqlBackend::postgres(&pg.url(), sql_options()).unwrap());
    backend.init_schema().unwrap();
    survive_restarts(backend, |down_for| {
        if down_for.is_zero() {
            pg.ctl(&["restart", "-w", "-m", "fast"]);
        } else {
            pg.ctl(&["stop", "-w", "-m", "fast"]);
            std::thread::sleep(down_for);
            pg.ctl(&["start", "-w"]);
        }
    });
}

// ---------------------------------------------------------------- MariaDB

#[test]
#[serial_test::serial(mariadb_private)]
fn mariadb_restarts() {
    let mut db = PrivateMariadb::start(3391);
    let backend = Arc::new(SqlBackend::mysql(&db.url(), sql_options()).unwrap());
    backend.init_schema().unwrap();
    let db_cell = std::cell::RefCell::new(&mut db);
    survive_restarts(backend, |down_for| {
        let mut db = db_cell.borrow_mut();
        db.stop();
        std::thread::sleep(down_for);
        db.launch();
    });
}
