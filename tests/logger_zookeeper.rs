//! The application's logger never runs under a lock of the ZooKeeper backend (issue #36, finding
//! 6): its log calls ran under the session's `leases` lock (a release, a keep-alive that finds a
//! lease gone), so a logger that called back into the same session deadlocked it. See
//! `tests/support/logger.rs`. One binary per backend: the logger is process-global.
#![cfg(feature = "zookeeper")]

#[path = "support/logger.rs"]
mod logger;
mod support;

use std::sync::Arc;

use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};

#[test]
fn the_logger_may_call_back_into_simba_from_any_zookeeper_record() {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    let hosts = url.trim_start_matches("zookeeper://").split('/').next().unwrap_or_default().to_string();
    support::require_tcp("ZooKeeper", hosts.split(',').next().unwrap_or_default());
    let backend = ZookeeperBackend::from_url(&url, ZookeeperOptions::default())
        .unwrap_or_else(|e| panic!("cannot connect to ZooKeeper at {url}: {e} (run `scripts/services up zookeeper`)"));
    logger::every_record_may_call_back(Arc::new(backend), logger::lease_life);
}
