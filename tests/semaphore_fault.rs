//! Real fault: one of N permit holders paused with SIGSTOP past its lease.
//!
//! For every network backend compiled in: this test's session holds N - 1 permits of a semaphore
//! with N = 3; a child process (this binary, re-executed) takes the last one and reads its token;
//! the test pauses the child with SIGSTOP; a third session waits for a permit and gets the
//! paused child's slot (the only one that frees) with a larger token, while the other N - 1
//! permits stay held. The new holder writes through `simba::fence` on the slot's resource
//! ([`Permit::fence_resource`](simba::semaphore::Permit::fence_resource)) to a PostgreSQL table
//! (`fence::postgres::check` in the write's transaction) and a Redis key (`fence::redis::set`);
//! the child is resumed and tries the same writes with the token it read before the pause: both
//! fences reject them (the PostgreSQL write is rolled back, the Redis value is untouched), and
//! the child's `token()` fails. The slots still held by the test never see a rejection.
//!
//! This test binary has its own `main` (harness = false) so that it can act as the child.

use std::time::Duration;

use simba::{Session, SessionOptions};
use support::paused::{self, accepted, backend, Paused, Resources, FENCED};

mod support;

/// The semaphore's limit.
const N: u32 = 3;

/// Session options with `lease` (renewed every quarter of it). The paused child's lease is short,
/// so that it expires soon; the test's own sessions have long ones, so that a loaded machine never
/// makes them expire while the test waits.
fn options(lease: Duration) -> SessionOptions {
    SessionOptions::builder().lease_duration(lease).renew_interval(lease / 4).build().unwrap()
}

/// The paused child's lease.
const SHORT: Duration = Duration::from_secs(2);
/// The lease of the test's own sessions.
const LONG: Duration = Duration::from_secs(20);

/// The child: take a permit, report its slot and token, and write with it after the pause.
fn child(kind: &str, name: &str) {
    let session = Session::open(backend(kind), options(SHORT)).unwrap();
    let permit = session.semaphore(name, N).unwrap().acquire().unwrap();
    let token = permit.token().unwrap();
    let resource = permit.fence_resource().to_string();
    let mut resources = Resources::connect();
    paused::child_holds(&format!("{} {token}", permit.slot()));
    paused::child_writes(&mut resources, &resource, token, || permit.token().is_ok());
}

fn paused_permit_is_fenced(kind: &str) {
    let name = support::unique(&format!("semfence-{kind}"));
    let mut resources = Resources::connect();
    // N - 1 permits held here, for the whole test.
    let holder = Session::open(backend(kind), options(LONG)).unwrap();
    let sem = holder.semaphore(name.as_str(), N).unwrap();
    let kept: Vec<_> = (1..N).map(|_| sem.try_acquire().unwrap().expect("a free permit")).collect();
    for (i, p) in kept.iter().enumerate() {
        let attempt = 10 + i as i64;
        assert_eq!(resources.write(p.fence_resource().as_str(), attempt, p.token().unwrap()), accepted(), "{kind}");
    }

    let (child, held) = Paused::spawn(kind, &name);
    let (slot, t1) = held.split_once(' ').unwrap_or_else(|| panic!("{kind}: child holds {held:?}"));
    let (slot, t1): (u32, u64) = (slot.parse().unwrap(), t1.parse().unwrap());
    assert!(kept.iter().all(|p| p.slot() != slot), "{kind}: the child got a held slot {slot}");
    let resource = sem.fence_resource(slot).unwrap().to_string();
    assert_eq!(resource, format!("simba.sem:{name}:{slot}"));

    child.pause();
    let taker = Session::open(backend(kind), options(LONG)).unwrap();
    let permit = taker
        .semaphore(name.as_str(), N)
        .unwrap()
        .acquire_timeout(Duration::from_secs(30))
        .unwrap()
        .unwrap_or_else(|| panic!("{kind}: no permit freed while the holder was paused"));
    assert_eq!(permit.slot(), slot, "{kind}: the paused holder's slot is the one that frees");
    let t2 = permit.token().unwrap();
    assert!(t2.get() > t1, "{kind}: takeover token {t2} not > {t1} on slot {slot}");
    // The other permits were never lost, and there are still at most N holders.
    for p in &kept {
        p.token().unwrap_or_else(|e| panic!("{kind}: a kept permit was lost: {e}"));
    }
    let holders = sem.holders().unwrap();
    assert_eq!(holders.len(), N as usize, "{kind}: {holders:?}");
    assert!(holders.iter().any(|(s, h)| *s == slot && &h.session == taker.id() && h.token == t2), "{holders:?}");
    assert_eq!(resources.write(&resource, 2, t2), accepted(), "{kind}: the new holder's writes");

    assert_eq!(child.resume_and_write(kind), FENCED, "{kind}");
    // The new holder keeps writing in its term; only its writes landed on the slot.
    assert_eq!(resources.write(&resource, 3, t2), accepted(), "{kind}: the same term keeps writing");
    assert_eq!(resources.landed(&resource), vec![2, 3], "{kind}: the paused holder's PostgreSQL write was rolled back");
    assert_eq!(resources.value(&resource), 3, "{kind}: the Redis value is the new holder's");
    assert_eq!(simba::fence::redis::seen(&mut resources.redis, resource.as_str()).unwrap(), Some(t2));
    // The kept slots' resources are their own: still writable with their tokens.
    for (i, p) in kept.iter().enumerate() {
        let attempt = 20 + i as i64;
        assert_eq!(resources.write(p.fence_resource().as_str(), attempt, p.token().unwrap()), accepted(), "{kind}");
    }
    permit.release().unwrap();
    taker.close().unwrap();
    for p in kept {
        p.release().unwrap();
    }
    holder.close().unwrap();
}

fn main() {
    paused::main("paused_permit_is_fenced", paused_permit_is_fenced, child);
}
