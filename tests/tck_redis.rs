//! The TCK against the standalone Redis backend (`scripts/services up redis`; URL from
//! `SIMBA_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`).
#![cfg(all(feature = "tck", feature = "redis"))]

mod support;

use std::time::Duration;

use simba::backends::redis::{RedisBackend, RedisOptions};

fn harness() -> simba::tck::Harness {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    support::require_tcp("Redis", url.trim_start_matches("redis://").split('/').next().unwrap_or_default());
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
    let backend = RedisBackend::connect(&url, options)
        .unwrap_or_else(|e| panic!("cannot connect to Redis at {url}: {e} (run `scripts/services up redis`)"));
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(redis, crate::harness(), #[serial_test::serial(redis)]);
}
