//! The supervision of the watch driver against the real server (see
//! [`crate::backends::notifier::scenario`]): `SIMBA_TEST_ZOOKEEPER_URL` (default
//! `zookeeper://127.0.0.1:2181/simba-test`); start it with `scripts/services up`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serial_test::serial;

use super::super::{ZookeeperBackend, ZookeeperOptions};
use crate::backends::notifier::scenario::{CannotPush, Case};
use crate::types::Name;

#[test]
#[serial(zookeeper)]
fn a_killed_watch_driver_is_restarted_and_says_so() {
    let var = "SIMBA_TEST_ZOOKEEPER_URL";
    let url = std::env::var(var).ok().filter(|v| !v.is_empty());
    let url = url.unwrap_or_else(|| "zookeeper://127.0.0.1:2181/simba-test".to_string());
    let backend = ZookeeperBackend::from_url(&url, ZookeeperOptions::default())
        .unwrap_or_else(|e| panic!("ZooKeeper at {url} ({var}): {e}: run scripts/services up"));
    let watches = &backend.inner.watches;
    let name = Name::new(format!("notifier-{:016x}", rand::random::<u64>())).unwrap();
    Case {
        backend: &backend,
        notifier: &watches.shared.notifier,
        kill: &|| watches.kill(),
        cannot_push: CannotPush::Unavailable,
        confirms: false,
        name,
    }
    .run();
}
