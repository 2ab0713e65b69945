//! The TCK against Redis Cluster (`scripts/services up redis-cluster`; nodes from
//! `SIMBA_TEST_REDIS_CLUSTER_URL`, default `redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002`).
//! TCK names carry random prefixes, so a case's leases, groups and sessions land in many slots.
#![cfg(all(feature = "tck", feature = "redis"))]

mod support;

use std::time::Duration;

use simba::backends::redis::{RedisBackend, RedisOptions};

fn harness() -> simba::tck::Harness {
    let url =
        support::env_or("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    let first = url.trim_start_matches("redis+cluster://").split(',').next().unwrap_or_default().to_string();
    support::require_tcp("Redis Cluster", &first);
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
    let backend = RedisBackend::connect(&url, options).unwrap_or_else(|e| {
        panic!("cannot connect to Redis Cluster at {url}: {e} (run `scripts/services up redis-cluster`)")
    });
    assert!(backend.is_clustered());
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(redis_cluster, crate::harness(), #[serial_test::serial(redis_cluster)]);
}
