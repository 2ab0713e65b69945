//! Memory backend edges (issue 14, findings 6 and 8). Watch registrations: a waiter that calls
//! `lock_timeout` in a loop registers a new watch each call; the registrations of finished
//! calls must not pile up while the lease stays held.

mod support;

use std::sync::Arc;
use std::time::Duration;

use simba::{MemoryBackend, Name, Session, SessionOptions};

#[test]
fn a_lock_timeout_loop_on_a_held_lease_does_not_grow_the_watchers() {
    let memory = MemoryBackend::new();
    let backend: Arc<dyn simba::LeaseBackend> = Arc::new(memory.clone());
    let options = SessionOptions::builder().lease_duration(Duration::from_secs(30)).build().unwrap();
    let holder = Session::open(backend.clone(), options.clone()).unwrap();
    let waiter = Session::open(backend, options).unwrap();
    let name = Name::new(support::unique("watch-leak")).unwrap();
    let _held = holder.lock(&name).unwrap();
    for _ in 0..2_000 {
        assert!(waiter.lock_timeout(&name, Duration::ZERO).unwrap().is_none());
    }
    let watchers = memory.watcher_count();
    assert!(watchers <= simba::memory::MAX_WATCHERS_PER_TOPIC, "{watchers} watch registrations after 2000 calls");
}

/// `Duration::MAX` as a lease duration means "never expires", not an overflow panic.
#[test]
fn a_lease_duration_of_duration_max_does_not_overflow() {
    use simba::LeaseBackend;
    let memory = MemoryBackend::new();
    let grant = memory.open_session(Duration::MAX, "").unwrap();
    assert!(matches!(memory.keep_alive(&grant.id, Duration::MAX).unwrap(), simba::KeepAlive::Alive { .. }));
    assert_eq!(memory.purge_expired().unwrap(), 0);
}
