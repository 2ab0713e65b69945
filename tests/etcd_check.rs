//! `simba check` on etcd, end to end through the `simba` binary: the server's version, auth, and
//! the cluster's health (members, leader, each member's status; an unreachable member named),
//! against the shared single member, the shared 3-member cluster and a private 3-member cluster
//! (tests/support/etcd.rs, ports from 2800) with one member killed.
#![cfg(all(feature = "cli", feature = "etcd"))]

mod support;

use serde_json::Value;
use support::cli::{code, json_result, run, simba, stdout};
use support::etcd::EtcdCluster;

/// `simba --json check` at `url`: its exit code and its items by name.
fn check(url: &str) -> (i32, Vec<(String, String, String)>, String) {
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "check"]);
        c
    });
    let v = json_result(&o);
    let items = v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("no items: {v}"))
        .iter()
        .map(|i: &Value| {
            let s = |k: &str| i[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("status"), s("detail"))
        })
        .collect();
    (code(&o), items, stdout(&o))
}

fn find<'a>(items: &'a [(String, String, String)], name: &str) -> &'a (String, String, String) {
    items.iter().find(|i| i.0 == name).unwrap_or_else(|| panic!("no {name} item: {items:?}"))
}

fn shared(var: &str, default: &str) -> String {
    let url = support::env_or(var, default);
    let first = url.trim_start_matches("etcd://").split(['/', ',']).next().unwrap_or_default().to_string();
    support::require_tcp("etcd", &first);
    url
}

#[test]
fn check_on_the_shared_member_reports_version_auth_and_a_one_member_cluster() {
    let url = shared("SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379/simba-test");
    let (rc, items, out) = check(&url);
    assert_eq!(rc, 0, "{out}");
    let reachable = find(&items, "reachable");
    assert_eq!(reachable.1, "ok", "{out}");
    assert!(reachable.2.contains("etcd 3."), "the version: {out}");
    let auth = find(&items, "auth");
    // The shared member runs without auth: said, and flagged.
    assert_eq!(auth.1, "warn", "{out}");
    assert!(auth.2.starts_with("auth disabled: anyone who reaches a member may read and write"), "{out}");
    assert!(auth.2.contains("may grant leases and read and write under /simba-test/"), "{out}");
    let cluster = find(&items, "cluster");
    assert_eq!(cluster.1, "ok", "{out}");
    assert!(cluster.2.starts_with("1 members, leader "), "{out}");
    assert!(cluster.2.contains(": leader, etcd 3."), "{out}");
}

#[test]
fn check_on_the_shared_cluster_names_the_leader_and_every_member() {
    let url = shared("SIMBA_TEST_ETCD_CLUSTER_URL", "etcd://127.0.0.1:2479,127.0.0.1:2579,127.0.0.1:2679/simba-test");
    let (rc, items, out) = check(&url);
    assert_eq!(rc, 0, "{out}");
    let cluster = find(&items, "cluster");
    assert_eq!(cluster.1, "ok", "{out}");
    assert!(cluster.2.starts_with("3 members, leader "), "{out}");
    assert_eq!(cluster.2.matches(": leader,").count(), 1, "one leader: {out}");
    assert_eq!(cluster.2.matches(": follower,").count(), 2, "two followers: {out}");
}

#[test]
fn check_names_the_member_that_is_down() {
    let (cluster, dead) = EtcdCluster::with_a_dead_follower(2800);
    let (rc, items, out) = check(&cluster.url(&[0, 1, 2], "simba-check"));
    // Still usable (a quorum answers): a warning, not a failure.
    assert_eq!(rc, 0, "{out}");
    assert_eq!(find(&items, "reachable").1, "ok", "{out}");
    let c = find(&items, "cluster");
    assert_eq!(c.1, "warn", "{out}");
    assert!(c.2.starts_with("3 members, leader m"), "{out}");
    assert!(c.2.contains(&format!("m{dead} at {} UNREACHABLE", cluster.addr(dead))), "{out}");
    assert_eq!(c.2.matches(": leader,").count() + c.2.matches(": follower,").count(), 2, "{out}");
}
