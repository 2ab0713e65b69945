//! The TCK against the TLS-only Redis Cluster (`scripts/services up redis-cluster-tls`; URL from
//! `SIMBA_TEST_REDIS_CLUSTER_TLS_URL`, default
//! `rediss+cluster://127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102?ca=…` with the CA of
//! `SIMBA_TEST_TLS_DIR`). The nodes accept TLS only (the cluster bus too), so the router's every
//! node connection, slot-map read and redirect, and the pub/sub subscriber, run over TLS; client
//! certificates are optional there, so this also covers TLS with a CA only.
#![cfg(all(feature = "tck", feature = "redis"))]

mod support;

use std::time::Duration;

use simba::backends::redis::{RedisBackend, RedisOptions};

fn harness() -> simba::tck::Harness {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_REDIS_CLUSTER_TLS_URL",
        &format!("rediss+cluster://127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102?ca={dir}/ca.pem"),
    );
    let first = url.trim_start_matches("rediss+cluster://").split([',', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("TLS-only Redis Cluster", &first);
    // 2 s, not the plain TCK's 1 s: a new TLS connection costs a handshake and redis-rs reloads the
    // system trust store for each one, and a connect gets only a quarter of the query timeout — on a
    // loaded 2-core CI machine 250 ms was once not enough (docs/backends/redis.md, TLS).
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    let backend = RedisBackend::connect(&url, options).unwrap_or_else(|e| {
        panic!(
            "cannot connect to the TLS-only Redis Cluster at {url}: {e} (run `scripts/services up redis-cluster-tls`)"
        )
    });
    assert!(backend.is_clustered());
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(redis_cluster_tls, crate::harness(), #[serial_test::serial(redis_cluster_tls)]);
}
