//! `simba lock` on a backend that pushes releases (PostgreSQL `LISTEN`/`NOTIFY`): the wait
//! registers its interest in the release *before* each attempt, so a release that lands right
//! after a busy attempt wakes it at once instead of at its next poll.
//!
//! The interleaving is forced with a real fault, not a hook in the binary: `simba` reaches the
//! shared PostgreSQL server through a proxy that holds back the notification connection's
//! `listen` statement (every other connection flows), so the first registration cannot complete
//! until the test lets it through. A wait that attempts while its registration is still pending
//! finds the lock busy and misses the release the test makes meanwhile; its polls are set 30 s
//! apart, so nothing else wakes it within the test's bound.
//!
//! The same held `listen` also makes every registration hang (each slot's registration waits for
//! the notification connection up to the connect timeout, here the query timeout): the wait goes
//! on round after round, attempting after each timed-out registration. (PostgreSQL bounds its
//! calls, so these registrations run on the waiter's own thread; that a wait keeps at most one
//! registration in flight where they run on workers is `tests/worker_pool.rs`
//! `a_hanging_registration_is_not_started_again_every_round`: the CLI waits through the same
//! library call. Counting `simba-watch` threads here, as before the CLI did, could no longer fail.)
//!
//! `SIMBA_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); start the server
//! with `scripts/services up`.
#![cfg(all(feature = "cli", feature = "postgres"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serial_test::serial;
use simba::backend::LeaseBackend;
use simba::{Name, Session, SessionOptions};
use support::cli::{clean_command, Lines};
use support::proxy::Proxy;
use support::sql::{shared_backend, Dialect};

const BIN: &str = env!("CARGO_BIN_EXE_simba");

/// Far above a notification's delay, below everything else that wakes a wait: its polls (30 s
/// apart here) and the notification connection's sweep of registrations older than 10 s.
const PUSHED: Duration = Duration::from_secs(5);

/// How long a wait that attempts without waiting for its registration takes to answer "busy":
/// one round trip and one holder read on loopback; the old code did it in milliseconds.
const ATTEMPT_CHANCE: Duration = Duration::from_secs(2);

/// `url` with its `host:port` replaced by `addr`, in plain text (the proxy reads the statements).
fn through(url: &str, addr: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    let (host, port) = addr.rsplit_once(':').unwrap();
    u.set_host(Some(host)).unwrap();
    u.set_port(Some(port.parse().unwrap())).unwrap();
    let kept: Vec<(String, String)> =
        u.query_pairs().filter(|(k, _)| k != "sslmode").map(|(k, v)| (k.into(), v.into())).collect();
    u.query_pairs_mut().clear().extend_pairs(kept).append_pair("sslmode", "disable");
    u.to_string()
}

fn upstream(url: &str) -> String {
    let u = url::Url::parse(url).unwrap();
    format!("{}:{}", u.host_str().unwrap_or("127.0.0.1"), u.port().unwrap_or(5432))
}

#[test]
#[serial(postgres)]
fn a_lock_wait_registers_for_the_release_before_it_attempts() {
    let backend = shared_backend(Dialect::Postgres);
    let url = Dialect::Postgres.url();
    let proxy = Proxy::start(&upstream(&url));
    proxy.hold_on(b"listen simba_release");

    let name = Name::new(support::unique("clipush")).unwrap();
    let holder = Session::open(Arc::clone(&backend) as Arc<dyn LeaseBackend>, SessionOptions::default()).unwrap();
    let lease = holder.try_lock(&name).unwrap().expect("the lock is free");

    let mut waiter = clean_command(BIN)
        .env("SIMBA_URL", through(&url, &proxy.addr()))
        .env("SIMBA_LEASE_DURATION", "120s")
        .env("SIMBA_RENEW_INTERVAL", "60s")
        .env("SIMBA_POLL_INTERVAL", "60s")
        .env("SIMBA_QUERY_TIMEOUT", "5s")
        .args(["lock", name.as_str(), "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run simba");
    let mut lines = Lines::of(&mut waiter);

    // The wait's first registration started the notification connection, whose `listen` is held.
    let until = Instant::now() + Duration::from_secs(30);
    while !proxy.holding() {
        assert!(Instant::now() < until, "the notification connection never sent its listen; stderr:\n{:?}", lines.seen);
        std::thread::sleep(Duration::from_millis(5));
    }
    // A wait that attempts now finds the lock busy and says so; one that waits for its
    // registration does not attempt yet.
    let early = lines.wait_within("waiting for lock", ATTEMPT_CHANCE);
    lease.release().unwrap();
    proxy.let_through();
    let released = Instant::now();
    let acquired = lines.wait_within("acquired lock", PUSHED);
    let took = released.elapsed();
    let _ = waiter.kill();
    let _ = waiter.wait();
    holder.close().unwrap();
    assert!(
        acquired.is_some(),
        "the wait did not take the lock within {took:?} of its release (nothing but a notification wakes it that soon); stderr:\n{}",
        lines.seen.join("\n")
    );
    assert!(
        early.is_none(),
        "the wait attempted while its registration for the release was still pending: {early:?} (it took the lock {took:?} after the release)"
    );
}

/// The debug line of a round whose registration did not complete within the query timeout.
const ROUND_TIMED_OUT: &str = "took longer than";

#[test]
#[serial(postgres)]
fn a_wait_goes_on_through_hanging_release_registrations() {
    // How many rounds whose registration hung to watch, and the slots of the semaphore (each
    // slot's registration waits up to the query timeout for the held notification connection).
    const ROUNDS: usize = 8;
    const SLOTS: u32 = 3;
    let backend = shared_backend(Dialect::Postgres);
    let url = Dialect::Postgres.url();
    let proxy = Proxy::start(&upstream(&url));
    proxy.hold_on(b"listen simba_release");

    let name = support::unique("clipile");
    let holder = Session::open(Arc::clone(&backend) as Arc<dyn LeaseBackend>, SessionOptions::default()).unwrap();
    let sem = holder.semaphore(name.as_str(), SLOTS).unwrap();
    let permits: Vec<_> = (0..SLOTS).map(|_| sem.try_acquire().unwrap().expect("a free permit")).collect();

    let mut waiter = clean_command(BIN)
        .env("RUST_LOG", "warn,simba=debug")
        .env("SIMBA_URL", through(&url, &proxy.addr()))
        .env("SIMBA_LEASE_DURATION", "120s")
        .env("SIMBA_RENEW_INTERVAL", "60s")
        .env("SIMBA_POLL_INTERVAL", "10ms")
        .env("SIMBA_QUERY_TIMEOUT", "250ms")
        .args(["lock", "-n", &SLOTS.to_string(), name.as_str(), "--", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run simba");
    let mut lines = Lines::of(&mut waiter);

    // Rounds whose registration timed out (the waiter says so, then attempts).
    let mut rounds = 0;
    for _ in 0..ROUNDS {
        if lines.wait_within(ROUND_TIMED_OUT, Duration::from_secs(30)).is_none() {
            break;
        }
        rounds += 1;
    }
    let held = proxy.holding();
    let _ = waiter.kill();
    let _ = waiter.wait();
    for p in permits {
        p.release().unwrap();
    }
    holder.close().unwrap();
    assert!(held, "the notification connection's listen was never held; stderr:\n{}", lines.seen.join("\n"));
    assert_eq!(
        rounds,
        ROUNDS,
        "fewer rounds than expected timed out their registration; stderr:\n{}",
        lines.seen.join("\n")
    );
}
