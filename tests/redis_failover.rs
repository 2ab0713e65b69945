//! Real fault: Redis primary failover (private primary + replica; never the shared servers).
//!
//! Redis replication is asynchronous. The replica is paused so it misses a new term, then the
//! primary dies and the replica is promoted:
//! - without `wait_replicas`, the promoted replica hands out a token that was already used — the
//!   documented token regression (`premise:tokenReset`), asserted as the hazard it is;
//! - with `wait_replicas = 1`, the unreplicated term is never handed out (the acquire fails and
//!   releases it), so no token is ever used twice.
#![cfg(feature = "redis")]

#[path = "redis_private.rs"]
mod private;
mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use private::PrivateRedis;
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::{ErrorKind, Session, SessionOptions, Token};
use support::proxy::Proxy;

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn backend(url: &str, wait_replicas: u32) -> Arc<RedisBackend> {
    let o = RedisOptions::builder().query_timeout(Duration::from_secs(1)).wait_replicas(wait_replicas).build().unwrap();
    Arc::new(RedisBackend::connect(url, o).unwrap())
}

/// Runs the scenario; returns (tokens handed out before the failover, token after it).
fn failover(wait_replicas: u32) -> (Vec<Token>, Token) {
    let mut primary = PrivateRedis::start(&[]);
    // Replication runs through a proxy, so the test can cut the link without the replica ever
    // receiving what the primary wrote meanwhile.
    let link = Proxy::start(primary.url().trim_start_matches("redis://"));
    let port = link.port().to_string();
    let replica = PrivateRedis::start(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while !primary.replicated(1) {
        assert!(Instant::now() < deadline, "replica never caught up");
        std::thread::sleep(Duration::from_millis(100));
    }
    let b = backend(&primary.url(), wait_replicas);
    let mut handed_out = Vec::new();
    let s1 = Session::open(b.clone(), options()).unwrap();
    let l1 = s1.lock("job").unwrap();
    handed_out.push(l1.token().unwrap());
    l1.release().unwrap();
    assert!(primary.replicated(1), "first term not replicated");

    // The link stalls (the replica misses everything from now on); a new term starts on the primary.
    link.stall();
    let s2 = Session::open(b.clone(), options()).unwrap();
    match s2.try_lock("job") {
        Ok(Some(l2)) => {
            assert_eq!(wait_replicas, 0, "a term was handed out without the replica's acknowledgement");
            handed_out.push(l2.token().unwrap());
            std::mem::forget(l2); // the primary dies holding it
        }
        Ok(None) => panic!("lease unexpectedly busy"),
        Err(e) => {
            assert!(wait_replicas > 0, "acquire failed without wait_replicas: {e}");
            assert!(matches!(e.kind(), ErrorKind::Unavailable | ErrorKind::Timeout), "{e}");
        }
    }
    // Failover: the primary dies, the link is gone, the replica is promoted.
    primary.kill();
    drop(link);
    replica.cmd(&["REPLICAOF", "NO", "ONE"]);
    drop(s2);
    drop(s1);
    let promoted = backend(&replica.url(), 0);
    let s3 = Session::open(promoted, options()).unwrap();
    let l3 = s3.lock_timeout("job", Duration::from_secs(10)).unwrap().expect("lease after failover");
    let after = l3.token().unwrap();
    drop(l3);
    let _ = s3.close();
    (handed_out, after)
}

#[test]
#[serial_test::serial(redis_private)]
fn failover_without_wait_replicas_regresses_tokens_as_documented() {
    let (before, after) = failover(0);
    assert_eq!(before.len(), 2);
    // The hazard the docs warn about: a token already handed out is handed out again.
    assert!(before.contains(&after), "expected a reused token after failover: before {before:?}, after {after}");
}

#[test]
#[serial_test::serial(redis_private)]
fn failover_with_wait_replicas_never_reuses_a_token() {
    let (before, after) = failover(1);
    assert_eq!(before.len(), 1, "only the replicated term was handed out");
    assert!(before.iter().all(|t| after > *t), "token reused or regressed: before {before:?}, after {after}");
}
