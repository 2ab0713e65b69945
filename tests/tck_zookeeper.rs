//! The TCK against the ZooKeeper backend (`scripts/services up zookeeper`; URL from
//! `SIMBA_TEST_ZOOKEEPER_URL`, default `zookeeper://127.0.0.1:2181/simba-test`).
#![cfg(all(feature = "tck", feature = "zookeeper"))]

mod support;

use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};

fn harness() -> simba::tck::Harness {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    let hosts = url.trim_start_matches("zookeeper://").split('/').next().unwrap_or_default().to_string();
    support::require_tcp("ZooKeeper", hosts.split(',').next().unwrap_or_default());
    let backend = ZookeeperBackend::from_url(&url, ZookeeperOptions::default())
        .unwrap_or_else(|e| panic!("cannot connect to ZooKeeper at {url}: {e} (run `scripts/services up zookeeper`)"));
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(zookeeper, crate::harness(), #[serial_test::serial(zookeeper)]);
}
