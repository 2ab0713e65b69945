//! Shared helpers of the integration tests: server addresses and unique name prefixes.
//!
//! Real-server tests never skip: when a server is unreachable they fail with a message saying
//! how to start it (`scripts/services up`).
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use simba::backend::LeaseBackend;
use simba::{Name, Session, SessionOptions};

#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "etcd")]
pub mod etcd;
pub mod forward;
pub mod netfault;
#[cfg(all(feature = "postgres", feature = "redis"))]
pub mod paused;
pub mod proxy;
pub mod server;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis", feature = "zookeeper", feature = "etcd"))]
pub mod tls;
pub mod zk;

/// Polls `cond` every 10 ms until it holds or `within` passes; whether it held.
pub fn eventually(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = std::time::Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The value of `var`, or `default`.
pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

/// The shared Redis Cluster's nodes (`host:port`), from `SIMBA_TEST_REDIS_CLUSTER_URL`; panics
/// with a clear message unless the first one is reachable.
pub fn redis_cluster_nodes() -> Vec<String> {
    let url = env_or("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    let nodes: Vec<String> =
        url.trim_start_matches("redis+cluster://").split(',').map(|s| s.trim().to_string()).collect();
    require_tcp("Redis Cluster", &nodes[0]);
    nodes
}

/// Panics with a clear message unless something listens on `host:port`.
pub fn require_tcp(what: &str, addr: &str) {
    let ok = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        .unwrap_or(false);
    assert!(ok, "{what} is not reachable at {addr}: run `scripts/services up` (or set the test URL variable)");
}

/// Waits for the loss of `lease` (`name`, `token`) and then of its session, by `by`: a
/// `LeaseLost` event and then `Expired` (renewal failures aside), `token()` failing and the
/// session expired.
///
/// The lease may go first by its own deadline (`Deadline`) or with its session
/// (`SessionExpired`): its deadline comes from its acquire's reply and the session's from the last
/// keep-alive's, so when no renewal succeeds after the acquire the two are within the calls'
/// delays of each other, and either may pass first. Both are on time; no other reason is.
///
/// `events` is the session's [`simba::Events`] itself, not the crossbeam `Receiver` it
/// dereferences to in a normal build: with `--cfg simba_explore` it dereferences to the
/// explorer's receiver instead, and a `&crossbeam_channel::Receiver` parameter did not compile
/// there (hung_backends, worker_pool and etcd_faults call this).
pub fn assert_lost_by(
    session: &simba::Session,
    events: &simba::Events<simba::SessionEvent>,
    lease: &simba::Lease,
    (name, token): (simba::Name, simba::Token),
    by: std::time::Instant,
) {
    use simba::SessionEvent;
    let mut got = Vec::new();
    while got.len() < 2 {
        match events.recv_deadline(by) {
            Ok(SessionEvent::RenewalFailed { .. }) => {}
            Ok(ev) => got.push(ev),
            Err(_) => panic!("loss not detected by the local deadline; events so far: {got:?}"),
        }
    }
    match &got[0] {
        SessionEvent::LeaseLost { name: n, token: t, reason }
            if *n == name
                && *t == token
                && matches!(reason, simba::LossReason::SessionExpired | simba::LossReason::Deadline) => {}
        ev => panic!("expected LeaseLost {{ {name}, {token:?}, SessionExpired or Deadline }} first, got {ev:?}"),
    }
    assert_eq!(got[1], SessionEvent::Expired);
    assert_eq!(lease.token().unwrap_err().kind(), simba::ErrorKind::LeaseLost);
    assert_eq!(session.state(), simba::SessionState::Expired);
}

/// A random prefix so concurrent and repeated runs never see each other's names.
pub fn unique(prefix: &str) -> String {
    let r: u64 = rand::random();
    format!("{prefix}-{r:016x}")
}

/// A lock, its holder as another session sees it, a second session refused, then woken by the
/// release: `backend` works end to end (for a backend built on the application's own
/// connections: the ones it built from them carry the calls, the pool and the notifications).
pub fn exercise_lock_handoff(backend: Arc<dyn LeaseBackend>) {
    let opts = SessionOptions::builder().lease_duration(Duration::from_secs(6)).build().unwrap();
    let a = Session::open(backend.clone(), opts.clone()).unwrap();
    let b = Session::open(backend.clone(), opts).unwrap();
    let name = unique("byo");
    let lease = a.lock(name.as_str()).unwrap();
    let holder = backend.holder(&Name::new(name.as_str()).unwrap()).unwrap().expect("held");
    assert_eq!(holder.token, lease.token().unwrap());
    assert!(b.try_lock(name.as_str()).unwrap().is_none());
    let waiter = std::thread::spawn(move || {
        let l = b.lock_timeout(name.as_str(), Duration::from_secs(20)).unwrap().expect("granted after the release");
        l.release().unwrap();
        b.close().unwrap();
    });
    lease.release().unwrap();
    waiter.join().unwrap();
    a.close().unwrap();
}

/// Threads of this process whose name (truncated to 15 bytes by Linux) is `comm`.
pub fn threads_named(comm: &str) -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|c| c.trim() == comm)
        .count()
}
