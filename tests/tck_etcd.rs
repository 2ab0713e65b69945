//! The TCK against the etcd backend's single member (`scripts/services up etcd`; URL from
//! `SIMBA_TEST_ETCD_URL`, default `etcd://127.0.0.1:2379/simba-test`).
#![cfg(all(feature = "tck", feature = "etcd"))]

mod support;

use simba::backends::etcd::{EtcdBackend, EtcdOptions};

fn harness() -> simba::tck::Harness {
    let url = support::env_or("SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379/simba-test");
    let hosts = url.trim_start_matches("etcd://").split('/').next().unwrap_or_default().to_string();
    support::require_tcp("etcd", hosts.split(',').next().unwrap_or_default());
    let backend = EtcdBackend::from_url(&url, EtcdOptions::default())
        .unwrap_or_else(|e| panic!("cannot connect to etcd at {url}: {e} (run `scripts/services up etcd`)"));
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(etcd, crate::harness(), #[serial_test::serial(etcd)]);
}
