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
