//! Real fault: a holder process paused with SIGSTOP past its lease.
//!
//! For every network backend compiled in, a child process (this binary, re-executed) takes a lock
//! and reads its token; the test pauses it with SIGSTOP; another session takes over with a larger
//! token and writes, through `simba::fence`, to a PostgreSQL table (`fence::postgres::check` in
//! the write's transaction) and a Redis key (`fence::redis::set`); the child is resumed and tries
//! the same writes with the token it read before the pause: both fences reject them (the
//! PostgreSQL write is rolled back, the Redis value is untouched), and the child's `token()` fails.
//!
//! This test binary has its own `main` (harness = false) so that it can act as the child.

use std::time::Duration;

use simba::{Session, SessionOptions};
use support::paused::{self, accepted, backend, Paused, Resources, FENCED};

mod support;

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .build()
        .unwrap()
}

/// The child: take the lock, report the token, and write with it after the pause.
fn child(kind: &str, name: &str) {
    let session = Session::open(backend(kind), options()).unwrap();
    let lease = session.lock(name).unwrap();
    let token = lease.token().unwrap();
    let mut resources = Resources::connect();
    paused::child_holds(&token.to_string());
    paused::child_writes(&mut resources, name, token, || lease.token().is_ok());
}

fn paused_holder_is_fenced(kind: &str) {
    let name = support::unique(&format!("fence-{kind}"));
    let mut resources = Resources::connect();
    let (child, held) = Paused::spawn(kind, &name);
    let t1: u64 = held.parse().unwrap_or_else(|_| panic!("{kind}: child holds {held:?}"));

    child.pause();
    let session = Session::open(backend(kind), options()).unwrap();
    let lease = session
        .lock_timeout(name.as_str(), Duration::from_secs(20))
        .unwrap()
        .unwrap_or_else(|| panic!("{kind}: no takeover while the holder was paused"));
    let t2 = lease.token().unwrap();
    assert!(t2.get() > t1, "{kind}: takeover token {t2} not > {t1}");
    assert_eq!(resources.write(&name, 2, t2), accepted(), "{kind}: the new holder's writes");
    assert_eq!(child.resume_and_write(kind), FENCED, "{kind}");
    // The new holder keeps writing in its term; only its writes landed.
    assert_eq!(resources.write(&name, 3, t2), accepted(), "{kind}: the same term keeps writing");
    assert_eq!(resources.landed(&name), vec![2, 3], "{kind}: the paused holder's PostgreSQL write was rolled back");
    assert_eq!(resources.value(&name), 3, "{kind}: the Redis value is the new holder's");
    assert_eq!(simba::fence::redis::seen(&mut resources.redis, name.as_str()).unwrap(), Some(t2));
    lease.release().unwrap();
    session.close().unwrap();
}

fn main() {
    paused::main("paused_holder_is_fenced", paused_holder_is_fenced, child);
}
