//! `LeaseBackend::list` on Redis and Redis Cluster beyond the TCK's `listing` area
//! (`scripts/services up`; URLs from `SIMBA_TEST_REDIS_URL` and `SIMBA_TEST_REDIS_CLUSTER_URL`):
//! a `SCAN` walk that runs out of its budget cuts the sections it feeds and says so; on Cluster
//! the walk covers every master; a key of a shape simba does not write is skipped, and a key of
//! simba's shape whose inside is no name fails the listing, naming the key.
// The scan budget is set through the crate-internal test seam (feature `internal-testing`).
#![cfg(all(feature = "redis", feature = "internal-testing"))]

mod support;

use std::collections::HashSet;
use std::time::Duration;

use redis::Commands;
use serial_test::serial;
use simba::backend::{Acquire, LeaseBackend, ListRequest, Listing};
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::testing::redis::list_within;
use simba::{ErrorKind, Name, SessionId};

fn options() -> RedisOptions {
    RedisOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap()
}

fn standalone() -> (RedisBackend, String) {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    support::require_tcp("Redis", url.trim_start_matches("redis://").split('/').next().unwrap_or_default());
    let b = RedisBackend::connect(&url, options()).unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
    (b, url)
}

fn cluster() -> (RedisBackend, Vec<String>) {
    let nodes = support::redis_cluster_nodes();
    let b = RedisBackend::clustered(&nodes, options()).unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
    (b, nodes)
}

/// A session holding `n` leases `<prefix>-l<i>` and member of `n` groups `<prefix>-g<i>`.
fn hold(b: &RedisBackend, prefix: &str, n: usize) -> SessionId {
    let sid = b.open_session(Duration::from_secs(60), &format!("{prefix} holder")).unwrap().id;
    for i in 0..n {
        let lease = Name::new(format!("{prefix}-l{i:02}")).unwrap();
        assert!(matches!(b.acquire(&sid, &lease).unwrap(), Acquire::Acquired { .. }), "{lease}");
        b.join(&sid, &Name::new(format!("{prefix}-g{i:02}")).unwrap()).unwrap();
    }
    sid
}

fn names(l: &Listing) -> (Vec<String>, Vec<String>) {
    (l.leases.iter().map(|x| x.name.to_string()).collect(), l.groups.iter().map(|x| x.name.to_string()).collect())
}

/// A walk of one `SCAN … COUNT 1` per master stops long before the end of the keyspace: the
/// lease and group sections (and the sessions) are cut and say so; what they list is right; the
/// backend's own budget lists everything and cuts nothing.
fn budget_reached_says_so(b: &RedisBackend) {
    let prefix = support::unique("budget");
    let sid = hold(b, &prefix, 30);
    let request = ListRequest::new(format!("{prefix}-"), 100).unwrap();
    let all = b.list(&request).unwrap();
    let (leases, groups) = names(&all);
    assert_eq!((leases.len(), groups.len()), (30, 30), "{all:?}");
    assert!(!all.truncated.leases && !all.truncated.groups, "{:?}", all.truncated);
    assert!(all.sessions.iter().any(|s| s.id == sid));
    let cut = list_within(b, &request, 1, 1).unwrap();
    assert!(cut.truncated.leases && cut.truncated.groups && cut.truncated.sessions, "{:?}", cut.truncated);
    let (some, _) = names(&cut);
    assert!(some.len() < 30, "one SCAN step of COUNT 1 per master found {} of 30 leases", some.len());
    // Time left passes between the two listings; the rest is the same.
    let term = |l: &simba::backend::ListedLease| {
        (l.name.clone(), l.holder.session.clone(), l.holder.token, l.holder.metadata.clone())
    };
    for l in &cut.leases {
        assert!(all.leases.iter().any(|x| term(x) == term(l)), "{l:?} is not as the full listing has it");
    }
    for g in &cut.groups {
        assert!(all.groups.contains(g), "{g:?} is not as the full listing has it");
    }
    b.close_session(&sid).unwrap();
    let gone = b.list(&request).unwrap();
    assert!(gone.leases.is_empty() && gone.groups.is_empty(), "{gone:?}");
}

#[test]
#[serial(redis)]
fn standalone_scan_budget_reached_says_so() {
    budget_reached_says_so(&standalone().0);
}

#[test]
#[serial(redis_cluster)]
fn cluster_scan_budget_reached_says_so() {
    budget_reached_says_so(&cluster().0);
}

/// On Cluster every master's keyspace is walked: the leases, spread over the masters by their
/// slots, are all listed, with the holders `holder` reports.
#[test]
#[serial(redis_cluster)]
fn cluster_lists_across_every_master() {
    let (b, nodes) = cluster();
    let prefix = support::unique("nodes");
    let sid = hold(&b, &prefix, 30);
    // Where the lease keys are: each node's own SCAN (a node that is a replica has none of its own
    // writes, but sees them replicated; masters are what counts).
    let mut on_masters = HashSet::new();
    for node in &nodes {
        let mut con = redis::Client::open(format!("redis://{node}")).unwrap().get_connection().unwrap();
        let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).unwrap();
        if !matches!(&role[0], redis::Value::BulkString(r) if r == b"master") {
            continue;
        }
        let keys: Vec<String> = con
            .scan_match::<_, String>(format!("simba:lease:{{{prefix}-*"))
            .unwrap()
            .collect::<redis::RedisResult<_>>()
            .unwrap();
        if !keys.is_empty() {
            on_masters.insert(node.clone());
        }
    }
    assert!(on_masters.len() >= 2, "30 leases on one master only ({on_masters:?}): the test proves nothing");
    let listing = b.list(&ListRequest::new(format!("{prefix}-"), 1000).unwrap()).unwrap();
    let (leases, groups) = names(&listing);
    let expected: Vec<String> = (0..30).map(|i| format!("{prefix}-l{i:02}")).collect();
    assert_eq!(leases, expected, "{listing:?}");
    assert_eq!(groups.len(), 30, "{listing:?}");
    for l in &listing.leases {
        assert_eq!(
            b.holder(&l.name).unwrap().map(|h| (h.session, h.token)),
            Some((l.holder.session.clone(), l.holder.token))
        );
        assert_eq!(l.holder.session, sid);
        assert_eq!(l.holder.metadata, format!("{prefix} holder"));
    }
    b.close_session(&sid).unwrap();
}

/// Removes the planted keys when dropped, however the test ends (a bad key fails every listing
/// of its prefix).
struct Planted(redis::Connection, Vec<String>);

impl Drop for Planted {
    fn drop(&mut self) {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&self.1).query(&mut self.0);
    }
}

/// A key the walk matches but of a shape simba does not write is skipped; a key of simba's shape
/// whose inside is no name fails the listing, naming the key.
#[test]
#[serial(redis)]
fn foreign_keys_are_skipped_and_bad_names_are_named() {
    let (b, url) = standalone();
    let prefix = support::unique("foreign");
    let sid = hold(&b, &prefix, 2);
    let con = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let foreign = [format!("simba:lease:{{{prefix}-l00}}:copy"), format!("simba:leasehold:{{{prefix}-x}}")];
    let mut planted = Planted(con, foreign.to_vec());
    for key in &foreign {
        let _: () = redis::cmd("SET").arg(key).arg("not simba's").query(&mut planted.0).unwrap();
    }
    let request = ListRequest::new(format!("{prefix}-"), 100).unwrap();
    let listing = b.list(&request).unwrap();
    assert_eq!(names(&listing).0, [format!("{prefix}-l00"), format!("{prefix}-l01")], "{listing:?}");
    let bad = format!("simba:group:{{{prefix}-bad name}}");
    planted.1.push(bad.clone());
    let _: () = redis::cmd("ZADD").arg(&bad).arg(1).arg("x").query(&mut planted.0).unwrap();
    let e = b.list(&request).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(simba::display_chain(&e).contains(&bad), "the error names the key: {}", simba::display_chain(&e));
    drop(planted);
    assert_eq!(names(&b.list(&request).unwrap()).1.len(), 2);
    b.close_session(&sid).unwrap();
}
