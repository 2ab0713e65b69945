//! A backend call that panics (a third-party SPI, a driver bug) is that call's error — kind
//! `Backend`, saying it panicked — and leaves nothing behind: no worker slot lost for good, no
//! operation counted in flight for ever (finding 5 of issue #36). Over the memory backend with a
//! hook that panics in chosen calls; it bounds no call, so every call runs on a pool worker.
//!
//! One binary: the worker pool is process-wide, and the tests run one at a time.

mod support;

use std::time::Duration;

use parking_lot::Mutex;
use serial_test::serial;
use simba::{ErrorKind, Session, SessionEvent, SessionOptions};
use support::forward::{Forward, Hook, Op};

/// Panics in the next `n` calls of each armed op.
#[derive(Debug, Default)]
struct Panics {
    armed: Mutex<Vec<(Op, u32)>>,
}

impl Panics {
    fn arm(&self, op: Op, n: u32) {
        self.armed.lock().push((op, n));
    }
}

impl Hook for Panics {
    fn before(&self, op: Op) {
        let fire = {
            let mut armed = self.armed.lock();
            match armed.iter_mut().find(|(o, n)| *o == op && *n > 0) {
                Some((_, n)) => {
                    *n -= 1;
                    true
                }
                None => false,
            }
        };
        if fire {
            panic!("injected panic in {op:?}");
        }
    }
}

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn panicked(err: &simba::Error, op: &str) {
    assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
    let text = err.to_string();
    assert!(text.contains(&format!("the backend's {op} call panicked")), "{text}");
    assert!(text.contains("injected panic"), "{text}");
}

/// The reproduction: after one panicking release, the same name could not be locked
/// within 6 s (the release stayed in flight for good); the same run without the panic locks at
/// once.
#[test]
#[serial]
fn a_panicking_release_is_its_error_and_the_name_can_be_locked_again() {
    let backend = Forward::memory("panicking", Panics::default());
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("job").unwrap();
    let first = lease.token().unwrap();
    backend.hook.arm(Op::Release, 1);
    let err = lease.release().unwrap_err();
    let again = session.lock_timeout("job", Duration::from_secs(6)).unwrap().expect("locked again");
    assert!(again.token().unwrap() > first, "a new term");
    panicked(&err, "release");
    again.release().unwrap();
    session.close().unwrap();
}

/// A campaign attempt that panics is a failed attempt: the campaign goes on and wins, and
/// nothing of the attempt stays counted in flight — a new campaign of the name after a resign
/// campaigns. Before, the name stayed "acquiring" for good: every later campaign of it was
/// refused ("has a lock in flight").
#[test]
#[serial]
fn a_panicking_campaign_attempt_is_a_failed_attempt() {
    let backend = Forward::memory("panicking", Panics::default());
    let session = Session::open(backend.clone(), options()).unwrap();
    backend.hook.arm(Op::Acquire, 1);
    let election = session.campaign("lead").unwrap();
    election.wait_elected_timeout(Duration::from_secs(10)).expect("elected after the panicking attempt");
    assert!(election.token().is_ok());
    election.resign().unwrap();
    let again = session.campaign("lead").map_err(|e| e.to_string()).expect("campaign again");
    again.wait_elected_timeout(Duration::from_secs(10)).expect("elected again");
    again.resign().unwrap();
    session.close().unwrap();
}

/// Panics never shrink the pool: far more panicking calls than the pool has workers (64 by
/// default), each its caller's error at once, and the pool still runs calls afterwards. Before,
/// each panic killed a worker that stayed counted, until every call was refused as if the pool
/// were exhausted.
#[test]
#[serial]
fn panicking_calls_never_shrink_the_pool() {
    let backend = Forward::memory("panicking", Panics::default());
    let session = Session::open(backend.clone(), options()).unwrap();
    backend.hook.arm(Op::Holder, 100);
    for _ in 0..100 {
        panicked(&session.leader("nobody").unwrap_err(), "holder");
    }
    assert!(session.leader("nobody").unwrap().is_none());
    session.close().unwrap();
}

/// A keep-alive that panics is a failed renewal (reported as one, at once), retried: the session
/// and its lease live on.
#[test]
#[serial]
fn a_panicking_keep_alive_is_a_failed_renewal() {
    let backend = Forward::memory("panicking", Panics::default());
    let session = Session::open(backend.clone(), options()).unwrap();
    let events = session.events();
    let lease = session.lock("kept").unwrap();
    let token = lease.token().unwrap();
    backend.hook.arm(Op::KeepAlive, 1);
    match events.recv_timeout(Duration::from_secs(10)) {
        Ok(SessionEvent::RenewalFailed { failures: 1 }) => {}
        other => panic!("expected the panicking keep-alive's RenewalFailed, got {other:?}"),
    }
    // Two more renewals succeed: the lease outlives a full lease duration after the panic.
    std::thread::sleep(Duration::from_secs(4));
    assert!(session.is_alive());
    assert_eq!(lease.token().unwrap(), token);
    lease.release().unwrap();
    session.close().unwrap();
}
