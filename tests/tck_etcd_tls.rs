//! The whole TCK against the TLS-only etcd member of `scripts/services` (`scripts/services up
//! etcd-tls`: clients over TLS only, client certificates required). URL from
//! `SIMBA_TEST_ETCD_TLS_URL`, default
//! `etcds://127.0.0.1:2389/simba-test?ca=…/ca.pem&cert=…/client.pem&key=…/client.key` with the
//! PKI in `SIMBA_TEST_TLS_DIR` (default `/tmp/simba-services/tls`).
#![cfg(all(feature = "tck", feature = "etcd"))]

mod support;

use simba::backends::etcd::{EtcdBackend, EtcdOptions};

fn harness() -> simba::tck::Harness {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_ETCD_TLS_URL",
        &format!("etcds://127.0.0.1:2389/simba-test?ca={dir}/ca.pem&cert={dir}/client.pem&key={dir}/client.key"),
    );
    let hosts = url.trim_start_matches("etcds://").split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("the TLS-only etcd", hosts.split(',').next().unwrap_or_default());
    let backend = EtcdBackend::from_url(&url, EtcdOptions::default()).unwrap_or_else(|e| {
        panic!("cannot connect to the TLS-only etcd at {url}: {e} (run `scripts/services up etcd-tls`)")
    });
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(etcd_tls, crate::harness(), #[serial_test::serial(etcd_tls)]);
}
