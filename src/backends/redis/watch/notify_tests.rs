//! The supervision of the pub/sub thread against the real servers (see
//! [`crate::backends::notifier::scenario`]): standalone Redis (`SIMBA_TEST_REDIS_URL`, default
//! `redis://127.0.0.1:6379`) and Redis Cluster (`SIMBA_TEST_REDIS_CLUSTER_URL`, default
//! `redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`); start them with
//! `scripts/services up`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serial_test::serial;

use super::super::{RedisBackend, RedisOptions};
use crate::backends::notifier::scenario::{CannotPush, Case};
use crate::types::Name;

fn backend(var: &str, default: &str) -> RedisBackend {
    let url = std::env::var(var).unwrap_or_else(|_| default.to_string());
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    RedisBackend::connect(&url, options)
        .unwrap_or_else(|e| panic!("cannot connect to {url} ({var}): {e}: run scripts/services up"))
}

fn run(b: &RedisBackend) {
    let w = &b.inner.watchers;
    let name = Name::new(format!("notifier-{:016x}", rand::random::<u64>())).unwrap();
    Case {
        backend: b,
        notifier: &w.notifier,
        kill: &|| w.notifier.kill(),
        cannot_push: CannotPush::Unavailable,
        confirms: true,
        name,
    }
    .run();
}

#[test]
#[serial(redis)]
fn a_killed_pubsub_thread_is_restarted_and_says_so_standalone() {
    run(&backend("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379"));
}

#[test]
#[serial(redis_cluster)]
fn a_killed_pubsub_thread_is_restarted_and_says_so_cluster() {
    run(&backend("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"));
}

/// Redis Cluster's per-master subscriber threads: one that panics is down like one whose
/// connection failed — its watchers are woken, the coordinator serves on (notifications are not
/// down), and the next registration subscribes on a new subscriber, which pushes the release.
#[test]
#[serial(redis_cluster)]
fn a_killed_cluster_subscriber_wakes_its_watchers_and_is_replaced() {
    use crate::backend::{Acquire, CheckStatus, LeaseBackend, Notification};
    use crate::backends::notifier::scenario::{until, BEFORE_STALE};
    use crossbeam_channel::unbounded;

    let b = backend("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    let notifier = &b.inner.watchers.notifier;
    let name = Name::new(format!("notifier-{:016x}", rand::random::<u64>())).unwrap();
    let case = Case {
        backend: &b,
        notifier,
        kill: &|| notifier.kill_helper(),
        cannot_push: CannotPush::Unavailable,
        confirms: true,
        name: name.clone(),
    };
    let holder = b.open_session(Duration::from_secs(60), "notifier-test").unwrap().id;
    let Acquire::Acquired { token, .. } = b.acquire(&holder, &name).unwrap() else { panic!("a fresh name is busy") };
    let (tx, rx) = unbounded();
    let armed = case.arm(&tx, &rx);
    (case.kill)();
    until("the subscriber panics at its checkpoint", || notifier.killed() == 1);
    // Woken by the death, not by the stale sweep.
    let woken = rx.recv_timeout(BEFORE_STALE.saturating_sub(armed.elapsed()));
    assert!(woken.is_ok(), "the watcher of the killed subscriber was not woken before its stale sweep: {woken:?}");
    assert!(!notifier.is_down(), "the coordinator serves on");
    let item = b.check().into_iter().find(|i| i.name == "notifications").unwrap();
    assert_eq!(item.status, CheckStatus::Ok, "{item:?}");
    let (tx2, rx2) = unbounded();
    let armed = case.arm(&tx2, &rx2);
    b.release(&holder, &name, token).unwrap();
    let pushed = rx2.recv_timeout(BEFORE_STALE.saturating_sub(armed.elapsed()));
    assert_eq!(pushed.ok(), Some(Notification::Released(name.clone())), "pushed by the new subscriber");
    b.close_session(&holder).unwrap();
}
