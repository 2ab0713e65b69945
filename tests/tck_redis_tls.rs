//! The TCK against the TLS-only standalone Redis (`scripts/services up redis-tls`; URL from
//! `SIMBA_TEST_REDIS_TLS_URL`, default `rediss://127.0.0.1:6390?ca=…&cert=…&key=…` with the files of
//! `SIMBA_TEST_TLS_DIR`). The server requires a client certificate, so every connection — the pool's
//! and the pub/sub subscriber's — runs a verified, mutually authenticated TLS handshake.
#![cfg(all(feature = "tck", feature = "redis"))]

mod support;

use std::time::Duration;

use simba::backends::redis::{RedisBackend, RedisOptions};

fn harness() -> simba::tck::Harness {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_REDIS_TLS_URL",
        &format!("rediss://127.0.0.1:6390?ca={dir}/ca.pem&cert={dir}/client.pem&key={dir}/client.key"),
    );
    let addr = url.trim_start_matches("rediss://").split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("TLS-only Redis", &addr);
    // 2 s, not the plain TCK's 1 s: a new TLS connection costs a handshake and redis-rs reloads the
    // system trust store for each one, and a connect gets only a quarter of the query timeout — on a
    // loaded 2-core CI machine 250 ms was once not enough (docs/backends/redis.md, TLS).
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    let backend = RedisBackend::connect(&url, options).unwrap_or_else(|e| {
        panic!("cannot connect to the TLS-only Redis at {url}: {e} (run `scripts/services up redis-tls`)")
    });
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(redis_tls, crate::harness(), #[serial_test::serial(redis_tls)]);
}
