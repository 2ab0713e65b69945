//! Memory backend edges (issue 14, findings 6 and 8). Watch registrations: a waiter that calls
//! `lock_timeout` in a loop registers a new watch each call; the registrations of finished
//! calls must not pile up while the lease stays held.

mod support;

use std::sync::Arc;
use std::time::Duration;

use simba::{MemoryBackend, Name, Session, SessionOptions};

#[test]
#[cfg(feature = "internal-testing")] // the watch count comes from the crate-internal test seam
fn a_lock_timeout_loop_on_a_held_lease_does_not_grow_the_watchers() {
    let memory = MemoryBackend::new();
    let backend: Arc<dyn simba::backend::LeaseBackend> = Arc::new(memory.clone());
    let options = SessionOptions::builder().lease_duration(Duration::from_secs(30)).build().unwrap();
    let holder = Session::open(backend.clone(), options.clone()).unwrap();
    let waiter = Session::open(backend, options).unwrap();
    let name = Name::new(support::unique("watch-leak")).unwrap();
    let _held = holder.lock(&name).unwrap();
    for _ in 0..2_000 {
        assert!(waiter.lock_timeout(&name, Duration::ZERO).unwrap().is_none());
    }
    let watchers = simba::testing::memory_watcher_count(&memory);
    assert!(
        watchers <= simba::backends::memory::MAX_WATCHERS_PER_TOPIC,
        "{watchers} watch registrations after 2000 calls"
    );
}

/// `Duration::MAX` as a lease duration means "never expires", not an overflow panic.
#[test]
fn a_lease_duration_of_duration_max_does_not_overflow() {
    use simba::backend::LeaseBackend;
    let memory = MemoryBackend::new();
    let grant = memory.open_session(Duration::MAX, "").unwrap();
    assert!(matches!(memory.keep_alive(&grant.id, Duration::MAX).unwrap(), simba::backend::KeepAlive::Alive { .. }));
    assert_eq!(memory.purge_expired().unwrap(), 0);
}

/// A backend written before semaphores existed: every SPI method but `semaphore_limit`, whose
/// default answers `Unsupported`.
#[derive(Debug)]
struct NoSemaphores(MemoryBackend);

impl simba::backend::LeaseBackend for NoSemaphores {
    fn kind(&self) -> &'static str {
        "legacy"
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<simba::backend::SessionGrant> {
        self.0.open_session(d, m)
    }
    fn keep_alive(&self, s: &simba::SessionId, d: Duration) -> simba::Result<simba::backend::KeepAlive> {
        self.0.keep_alive(s, d)
    }
    fn close_session(&self, s: &simba::SessionId) -> simba::Result<()> {
        self.0.close_session(s)
    }
    fn acquire(&self, s: &simba::SessionId, n: &Name) -> simba::Result<simba::backend::Acquire> {
        self.0.acquire(s, n)
    }
    fn release(&self, s: &simba::SessionId, n: &Name, t: simba::Token) -> simba::Result<()> {
        self.0.release(s, n, t)
    }
    fn holder(&self, n: &Name) -> simba::Result<Option<simba::backend::Holder>> {
        self.0.holder(n)
    }
    fn join(&self, s: &simba::SessionId, g: &Name) -> simba::Result<()> {
        self.0.join(s, g)
    }
    fn leave(&self, s: &simba::SessionId, g: &Name) -> simba::Result<()> {
        self.0.leave(s, g)
    }
    fn members(&self, g: &Name) -> simba::Result<Vec<simba::backend::Member>> {
        self.0.members(g)
    }
}

#[test]
fn a_backend_without_semaphores_compiles_and_says_so() {
    let session = Session::open(Arc::new(NoSemaphores(MemoryBackend::new())), SessionOptions::default()).unwrap();
    let err = session.semaphore("s", 2).expect_err("no semaphores on this backend");
    assert_eq!(err.kind(), simba::ErrorKind::Unsupported);
    let text = err.to_string();
    assert!(text.contains("legacy backend does not implement semaphores") && text.contains("'s'"), "{text}");
    // Everything else works.
    let lease = session.try_lock("l").unwrap().expect("free");
    lease.release().unwrap();
}

/// `MemberWatch` has the deadline form of the crossbeam shape (`recv`, `try_recv`, `recv_timeout`,
/// `recv_deadline`): a change queued before the deadline is returned; with none, `Timeout` comes
/// at the deadline, not before it.
#[test]
fn member_watch_recv_deadline_returns_a_change_or_times_out_at_the_deadline() {
    use crossbeam_channel::RecvTimeoutError;
    use std::time::Instant;
    let backend: Arc<dyn simba::backend::LeaseBackend> = Arc::new(MemoryBackend::new());
    let options = SessionOptions::builder().lease_duration(Duration::from_secs(30)).build().unwrap();
    let watcher = Session::open(backend.clone(), options.clone()).unwrap();
    let joiner = Session::open(backend, options).unwrap();
    let group = Name::new(support::unique("deadline-watch")).unwrap();
    let membership = joiner.join(&group).unwrap();
    let watch = watcher.watch_members(&group).unwrap();

    let first = watch.recv_deadline(Instant::now() + Duration::from_secs(10)).expect("the first change");
    assert!(first.members.iter().any(|m| &m.session == joiner.id()), "{first:?}");

    let deadline = Instant::now() + Duration::from_millis(200);
    assert_eq!(watch.recv_deadline(deadline), Err(RecvTimeoutError::Timeout));
    assert!(Instant::now() >= deadline, "timed out before the deadline");

    membership.leave().unwrap();
    let left = watch.recv_deadline(Instant::now() + Duration::from_secs(10)).expect("the leave");
    assert!(left.left.iter().any(|m| &m.session == joiner.id()), "{left:?}");
}
