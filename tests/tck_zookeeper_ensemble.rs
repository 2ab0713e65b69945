//! The TCK against the 3-server ZooKeeper ensemble of `scripts/services` (URL from
//! `SIMBA_TEST_ZOOKEEPER_ENSEMBLE_URL`, default
//! `zookeeper://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283/simba-test`). Every session's
//! client picks a server at random (the client shuffles the connect string), and so does the
//! backend's reader (holder, members, watches), so a case's sessions and reads are spread over the
//! servers; `sessions_are_spread_over_the_servers` checks that with each server's `cons`.
#![cfg(all(feature = "tck", feature = "zookeeper"))]

mod support;

use std::sync::Arc;
use std::time::Duration;

use simba::backend::LeaseBackend;
use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};

const DEFAULT_URL: &str = "zookeeper://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283/simba-test";

fn url() -> String {
    support::env_or("SIMBA_TEST_ZOOKEEPER_ENSEMBLE_URL", DEFAULT_URL)
}

/// The `host:port` of every server, each checked to be listening.
fn servers() -> Vec<String> {
    let url = url();
    let hosts = url.trim_start_matches("zookeeper://").split('/').next().unwrap_or_default().to_string();
    let hosts: Vec<String> = hosts.split(',').map(str::to_string).collect();
    for h in &hosts {
        support::require_tcp("the ZooKeeper ensemble (scripts/services up zookeeper-ensemble)", h);
    }
    hosts
}

fn backend() -> ZookeeperBackend {
    servers();
    let url = url();
    ZookeeperBackend::from_url(&url, ZookeeperOptions::default()).unwrap_or_else(|e| {
        panic!("cannot connect to the ZooKeeper ensemble at {url}: {e} (run `scripts/services up zookeeper-ensemble`)")
    })
}

/// 2 s leases (the TCK's default is 1 s): the client drops a connection that is silent for 2/5 of
/// the session timeout, and with three JVMs on a loaded 2-core machine 400 ms of silence was seen
/// (an acquire failed with "no response from connection in 400ms"); 800 ms leaves room.
fn harness() -> simba::tck::Harness {
    let options = simba::SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    simba::tck::Harness::new(Arc::new(backend())).with_options(options).with_native_expiry()
}

mod tck {
    simba::tck_suite!(zookeeper_ensemble, crate::harness(), #[serial_test::serial(zookeeper_ensemble)]);
}

#[test]
#[serial_test::serial(zookeeper_ensemble)]
fn sessions_are_spread_over_the_servers() {
    let ports: Vec<u16> = servers().iter().map(|h| h.rsplit(':').next().unwrap().parse().unwrap()).collect();
    let b = backend();
    // 12 sessions: all on one of 3 servers by chance has probability 3 × 3^-12 ≈ 6e-6.
    let ids: Vec<_> = (0..12).map(|_| b.open_session(Duration::from_secs(5), "").unwrap().id).collect();
    let ours: Vec<u64> = ids.iter().map(|id| u64::from_str_radix(id.as_str(), 16).unwrap()).collect();
    let per_server: Vec<usize> = ports
        .iter()
        .map(|p| support::zk::connected_sessions(*p).iter().filter(|sid| ours.contains(sid)).count())
        .collect();
    assert_eq!(per_server.iter().sum::<usize>(), ids.len(), "every session is connected somewhere: {per_server:?}");
    assert!(per_server.iter().filter(|n| **n > 0).count() >= 2, "sessions all on one server: {per_server:?}");
    for id in ids {
        b.close_session(&id).unwrap();
    }
}
