//! Differential testing of every backend against the reference model (SPEC §8; issue #36): seeded
//! random sequences of SPI calls from several sessions over colliding names, groups and semaphore
//! slots, run on the real backend and on a fresh memory backend and compared answer by answer
//! (`support/differential.rs`; docs/testing.md, "Differential testing").
//!
//! `SIMBA_DIFF_SEED=<n>` replays one sequence, `SIMBA_DIFF_CASES` sets how many sequences run
//! (seeds n, n + 1, …), `SIMBA_DIFF_STEPS` their length. CI runs a few sequences per backend; a
//! long run is `SIMBA_DIFF_CASES=2000 cargo test --all-features --test differential -- --nocapture`.
//! Real servers as `scripts/test` exports them; a server that is down fails the test with "run
//! `scripts/services up`". Each backend's test is serial with that backend's TCK (same key).

mod support;

// Kept out of `support/mod.rs` so the other test binaries do not compile it.
#[path = "support/differential.rs"]
mod differential;
#[path = "support/real_backends.rs"]
mod real_backends;

#[allow(unused_imports)]
use std::sync::Arc;
#[allow(unused_imports)]
use std::time::Duration;

/// Sequences per backend in a plain `cargo test` (well under a few seconds each: CI's budget is tight).
const CI_CASES: usize = 60;
/// Sequences for the TLS instances (the same code paths over TLS).
const CI_CASES_TLS: usize = 20;

/// The model against itself: the runner and the comparator agree with themselves (and the
/// generator's sequences run without a panic).
#[test]
fn memory_agrees_with_itself() {
    differential::check("memory", Arc::new(simba::MemoryBackend::new()), 50);
}

/// A backend that forgets a re-acquired term in its keep-alives (the shape of issue #36's finding
/// 1) is caught and shrunk to the steps that show it.
#[test]
fn a_keep_alive_that_omits_a_term_is_caught_and_shrunk() {
    use differential::{run, shrink, Step};
    let flawed: Arc<dyn simba::backend::LeaseBackend> = Arc::new(OmitsReacquired::default());
    let steps = vec![
        Step::Open(0),
        Step::Open(1),
        Step::Join(1, 0),
        Step::Acquire(0, 0),
        Step::Holder(0),
        Step::Release(0, 0, 0),
        Step::KeepAlive(0),
        Step::Acquire(1, 1),
        Step::Acquire(0, 0),
        Step::KeepAlive(0),
        Step::Members(0),
        Step::KeepAlive(0),
    ];
    let outcome = run(flawed.as_ref(), &steps);
    assert_eq!(outcome.mismatch, Some(9), "{outcome}");
    let (shrunk, _) = shrink(flawed.as_ref(), &steps, outcome);
    assert_eq!(
        shrunk,
        vec![Step::Open(0), Step::Acquire(0, 0), Step::Release(0, 0, 0), Step::Acquire(0, 0), Step::KeepAlive(0)]
    );
}

/// Issue #36's finding 1 as a fixed sequence, on every real backend: acquire X → release X →
/// keep_alive → acquire X (t2) → keep_alive → keep_alive must list (X, t2) each time.
fn finding_1(label: &str, real: Arc<dyn simba::backend::LeaseBackend>) {
    use differential::{run, Step};
    let steps = [
        Step::Open(0),
        Step::Acquire(0, 0),
        Step::Release(0, 0, 0),
        Step::KeepAlive(0),
        Step::Acquire(0, 0),
        Step::KeepAlive(0),
        Step::KeepAlive(0),
    ];
    let outcome = run(real.as_ref(), &steps);
    assert!(!outcome.failed(), "differential {label}: issue #36 finding 1:\n{outcome}");
}

/// A memory backend whose keep-alive omits a lease acquired again after a release of it (a
/// deliberately flawed backend for the test above).
#[derive(Debug, Default)]
struct OmitsReacquired {
    inner: simba::MemoryBackend,
    released: parking_lot::Mutex<std::collections::HashSet<simba::Name>>,
}

impl simba::backend::LeaseBackend for OmitsReacquired {
    fn kind(&self) -> &'static str {
        "flawed"
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<simba::backend::SessionGrant> {
        self.inner.open_session(d, m)
    }
    fn keep_alive(&self, s: &simba::SessionId, d: Duration) -> simba::Result<simba::backend::KeepAlive> {
        let released = self.released.lock().clone();
        Ok(match self.inner.keep_alive(s, d)? {
            simba::backend::KeepAlive::Alive { remaining, mut owned, groups, unknown, remaining_before } => {
                owned.retain(|(n, _)| !released.contains(n));
                simba::backend::KeepAlive::Alive { remaining, owned, groups, unknown, remaining_before }
            }
            e => e,
        })
    }
    fn close_session(&self, s: &simba::SessionId) -> simba::Result<()> {
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &simba::SessionId, n: &simba::Name) -> simba::Result<simba::backend::Acquire> {
        self.inner.acquire(s, n)
    }
    fn release(&self, s: &simba::SessionId, n: &simba::Name, t: simba::Token) -> simba::Result<()> {
        self.released.lock().insert(n.clone());
        self.inner.release(s, n, t)
    }
    fn holder(&self, n: &simba::Name) -> simba::Result<Option<simba::backend::Holder>> {
        self.inner.holder(n)
    }
    fn join(&self, s: &simba::SessionId, g: &simba::Name) -> simba::Result<()> {
        self.inner.join(s, g)
    }
    fn leave(&self, s: &simba::SessionId, g: &simba::Name) -> simba::Result<()> {
        self.inner.leave(s, g)
    }
    fn members(&self, g: &simba::Name) -> simba::Result<Vec<simba::backend::Member>> {
        self.inner.members(g)
    }
    fn semaphore_limit(&self, n: &simba::Name, p: Option<u32>) -> simba::Result<Option<u32>> {
        self.inner.semaphore_limit(n, p)
    }
}

/// One test per real backend: `$name` (also the `serial_test` key of its TCK) built by
/// `real_backends::$name()`, `$cases` sequences in a plain run.
macro_rules! differential {
    ($($feature:literal $name:ident $cases:expr;)*) => {$(
        #[cfg(feature = $feature)]
        #[test]
        #[serial_test::serial($name)]
        fn $name() {
            let backend = real_backends::$name();
            finding_1(stringify!($name), backend.clone());
            differential::check(stringify!($name), backend, $cases);
        }
    )*};
}

differential! {
    "postgres" postgres CI_CASES;
    "mysql" mysql CI_CASES;
    "redis" redis CI_CASES;
    "redis" redis_cluster CI_CASES;
    "zookeeper" zookeeper CI_CASES;
    "etcd" etcd CI_CASES;
    "postgres" postgres_tls CI_CASES_TLS;
    "mysql" mysql_tls CI_CASES_TLS;
    "redis" redis_tls CI_CASES_TLS;
    "redis" redis_cluster_tls CI_CASES_TLS;
    "zookeeper" zookeeper_tls CI_CASES_TLS;
    "etcd" etcd_tls CI_CASES_TLS;
}
