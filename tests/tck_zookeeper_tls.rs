//! The whole TCK against the TLS-only ZooKeeper of `scripts/services` (`scripts/services up
//! zookeeper-tls`: a `secureClientPort` with no plaintext port, client certificates required). URL
//! from `SIMBA_TEST_ZOOKEEPER_TLS_URL`, default
//! `zookeeper://127.0.0.1:2185/simba-test?tls_ca=…/ca.pem&tls_cert=…/client.pem&tls_key=…/client.key`
//! with the PKI in `SIMBA_TEST_TLS_DIR` (default `/tmp/simba-services/tls`). Every client of the
//! backend (each session's and the shared reader) connects over TLS with the client certificate.
#![cfg(all(feature = "tck", feature = "zookeeper"))]

mod support;

use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};

fn harness() -> simba::tck::Harness {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_ZOOKEEPER_TLS_URL",
        &format!(
            "zookeeper://127.0.0.1:2185/simba-test?tls_ca={dir}/ca.pem&tls_cert={dir}/client.pem&tls_key={dir}/client.key"
        ),
    );
    let hosts = url.trim_start_matches("zookeeper://").split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("the TLS-only ZooKeeper", hosts.split(',').next().unwrap_or_default());
    let backend = ZookeeperBackend::from_url(&url, ZookeeperOptions::default()).unwrap_or_else(|e| {
        panic!("cannot connect to the TLS-only ZooKeeper at {url}: {e} (run `scripts/services up zookeeper-tls`)")
    });
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(zookeeper_tls, crate::harness(), #[serial_test::serial(zookeeper_tls)]);
}
