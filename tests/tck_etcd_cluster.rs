//! The TCK against the 3-member etcd cluster (`scripts/services up etcd-cluster`; URL from
//! `SIMBA_TEST_ETCD_CLUSTER_URL`, default
//! `etcd://127.0.0.1:2479,127.0.0.1:2579,127.0.0.1:2679/simba-test`). The client balances its
//! requests over the three members; every read is linearizable, so a follower's answer is as
//! fresh as the leader's.
#![cfg(all(feature = "tck", feature = "etcd"))]

mod support;

use simba::backends::etcd::{EtcdBackend, EtcdOptions};

fn harness() -> simba::tck::Harness {
    let url = support::env_or(
        "SIMBA_TEST_ETCD_CLUSTER_URL",
        "etcd://127.0.0.1:2479,127.0.0.1:2579,127.0.0.1:2679/simba-test",
    );
    let hosts = url.trim_start_matches("etcd://").split('/').next().unwrap_or_default().to_string();
    support::require_tcp("the etcd cluster", hosts.split(',').next().unwrap_or_default());
    let backend = EtcdBackend::from_url(&url, EtcdOptions::default()).unwrap_or_else(|e| {
        panic!("cannot connect to the etcd cluster at {url}: {e} (run `scripts/services up etcd-cluster`)")
    });
    simba::tck::Harness::new(std::sync::Arc::new(backend)).with_native_expiry()
}

mod tck {
    simba::tck_suite!(etcd_cluster, crate::harness(), #[serial_test::serial(etcd_cluster)]);
}
