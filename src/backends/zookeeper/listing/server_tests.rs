//! What a listing reads, counted, against the real server: `SIMBA_TEST_ZOOKEEPER_URL` (default
//! `zookeeper://127.0.0.1:2181/simba-test`); start it with `scripts/services up`. Each test works
//! under a fresh root, so it sees only its own nodes.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use futures::future::join_all;
use serial_test::serial;
use zookeeper_client::CreateMode;

use super::super::{ZookeeperBackend, ZookeeperOptions};
use super::{Reads, MAX_CHILDREN, MIN_SKIPS};
use crate::backend::{Acquire, LeaseBackend, ListRequest, Listing};
use crate::backends::zookeeper::exec::run_until;
use crate::error::ErrorKind;
use crate::types::{Name, SessionId};

const LEASE: Duration = Duration::from_secs(20);

/// A backend under a fresh root of the test server.
fn backend() -> ZookeeperBackend {
    let var = "SIMBA_TEST_ZOOKEEPER_URL";
    let url = std::env::var(var).ok().filter(|v| !v.is_empty());
    let url = url.unwrap_or_else(|| "zookeeper://127.0.0.1:2181/simba-test".to_string());
    let rest = url.strip_prefix("zookeeper://").unwrap_or_else(|| panic!("{var} must start with zookeeper://"));
    let (hosts, root) = rest.split_once('/').map_or((rest, "simba-test"), |(h, r)| (h, r));
    let root = format!("/{root}/list-{:016x}", rand::random::<u64>());
    ZookeeperBackend::connect(hosts, ZookeeperOptions::default().root(root))
        .unwrap_or_else(|e| panic!("ZooKeeper at {hosts} ({var}): {e}: run scripts/services up"))
}

fn name(n: String) -> Name {
    Name::new(n).unwrap()
}

fn list(b: &ZookeeperBackend, prefix: &str, limit: usize) -> (Listing, Reads) {
    let reads = Reads::default();
    let listing = b.inner.list_counted(&ListRequest::new(prefix, limit).unwrap(), &reads, MAX_CHILDREN).unwrap();
    (listing, reads)
}

/// (exists, getChildren, lease reads, session reads, member reads).
fn counts(r: &Reads) -> (usize, usize, usize, usize, usize) {
    (r.stats.get(), r.children.get(), r.leases.get(), r.sessions.get(), r.members.get())
}

/// `sessions` sessions; the first holds leases `job-00`..`job-{leases}`, each joins groups
/// `grp-00`..`grp-{groups}`; `other-x` is held and `other-g` joined outside the prefixes.
fn populate(b: &ZookeeperBackend, sessions: usize, leases: usize, groups: usize) -> Vec<SessionId> {
    let ids: Vec<SessionId> = (0..sessions).map(|i| b.open_session(LEASE, &format!("s{i}")).unwrap().id).collect();
    for i in 0..leases {
        assert!(matches!(b.acquire(&ids[0], &name(format!("job-{i:02}"))).unwrap(), Acquire::Acquired { .. }));
    }
    for s in &ids {
        for g in 0..groups {
            b.join(s, &name(format!("grp-{g:02}"))).unwrap();
        }
    }
    assert!(matches!(b.acquire(&ids[0], &name("other-x".into())).unwrap(), Acquire::Acquired { .. }));
    b.join(&ids[0], &name("other-g".into())).unwrap();
    ids
}

#[test]
#[serial(zookeeper)]
fn a_prefix_that_matches_no_child_reads_no_lease_or_group_node() {
    let b = backend();
    let ids = populate(&b, 2, 30, 5);
    let (l, reads) = list(&b, "nomatch", 10);
    assert!(l.leases.is_empty() && l.groups.is_empty(), "{l:?}");
    assert_eq!(l.sessions.len(), 2, "sessions are not filtered by the prefix: {l:?}");
    // The three parents and the two live sessions' nodes: no lease, group or member node.
    assert_eq!(counts(&reads), (3, 3, 0, 2, 0));
    for s in &ids {
        b.close_session(s).unwrap();
    }
}

#[test]
#[serial(zookeeper)]
fn node_reads_are_bounded_by_the_limit() {
    let b = backend();
    let ids = populate(&b, 4, 40, 12);
    let (l, reads) = list(&b, "", 2);
    assert_eq!(l.leases.iter().map(|x| x.name.as_str()).collect::<Vec<_>>(), ["job-00", "job-01"]);
    assert_eq!(l.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["grp-00", "grp-01"]);
    assert!(l.groups.iter().all(|g| g.members.len() == 2), "{l:?}");
    assert!(l.truncated.leases && l.truncated.groups && l.truncated.sessions, "{:?}", l.truncated);
    // limit + 1 of each: 3 lease nodes (and their holder's session node), 3 groups (after the
    // three parents) with 3 member nodes each, 3 session nodes; of 41 leases, 13 groups, 49
    // memberships and 4 sessions.
    assert_eq!(counts(&reads), (3 + 3, 3 + 3, 3, 3 + 3, 9));
    let (all, reads) = list(&b, "job-", 100);
    assert_eq!((all.leases.len(), all.truncated.leases), (40, false));
    assert_eq!(counts(&reads).2, 40);
    for s in &ids {
        b.close_session(s).unwrap();
    }
}

#[test]
#[serial(zookeeper)]
fn empty_groups_are_skipped_within_an_allowance_then_the_section_is_cut() {
    let b = backend();
    let s = b.open_session(LEASE, "member").unwrap().id;
    // Group nodes without members sorted before the live one (as containers left empty are
    // until the server reaps them; persistent here, so none is reaped during the test).
    let inner = &b.inner;
    let deadline = Instant::now() + Duration::from_secs(30);
    let client = inner.shared(deadline).unwrap();
    let empty: Vec<String> = (0..MIN_SKIPS + 20).map(|i| inner.paths.group(&name(format!("g-{i:03}")))).collect();
    for path in &empty {
        inner.ensure_dir(&client, path, CreateMode::Persistent, deadline).unwrap();
    }
    b.join(&s, &name("g-zzz".into())).unwrap();
    // Limit 1: two groups wanted, max(2, MIN_SKIPS) may be empty; the live one is beyond.
    // An empty group costs an `exists` (no `getChildren`); {root}/leases does not exist.
    let (l, reads) = list(&b, "g-", 1);
    assert!(l.groups.is_empty() && l.truncated.groups, "{l:?}");
    assert_eq!(counts(&reads), (3 + 2 + MIN_SKIPS, 2, 0, 1, 0));
    // A limit whose allowance reaches it lists it and cuts nothing.
    let (l, reads) = list(&b, "g-", MIN_SKIPS);
    assert_eq!(l.groups.iter().map(|g| g.name.as_str()).collect::<Vec<_>>(), ["g-zzz"], "{l:?}");
    assert!(!l.truncated.groups, "{:?}", l.truncated);
    assert_eq!(counts(&reads), (3 + empty.len() + 1, 2 + 1, 0, 1, 1));
    b.close_session(&s).unwrap();
    let deletes: Vec<_> = empty.iter().map(|p| client.delete(p, None)).collect();
    for r in run_until(join_all(deletes), deadline).unwrap() {
        r.unwrap();
    }
}

/// ZooKeeper has no paged child listing and does not cap a reply: a parent whose child names
/// are over 1 MB (the default `jute.maxbuffer`, which bounds what a server accepts and what the
/// Java client accepts) is listed whole by this client, and a prefix that matches none of them
/// still reads no lease node.
#[test]
#[serial(zookeeper)]
fn a_parent_above_a_megabyte_of_names_is_listed() {
    let b = backend();
    let inner = &b.inner;
    let deadline = Instant::now() + Duration::from_secs(60);
    // The nodes are ephemeral nodes of a client of their own: they vanish with it.
    let owner = inner.connect_client(LEASE, deadline).unwrap();
    let opts = inner.create_options(CreateMode::Ephemeral);
    inner.ensure_dir(&owner, &inner.paths.leases_dir(), CreateMode::Persistent, deadline).unwrap();
    let count = 9_000; // 9000 names of 128 characters: ~1.2 MB of reply
    let paths: Vec<String> =
        (0..count).map(|i| format!("{}/{i:05}{}", inner.paths.leases_dir(), "x".repeat(123))).collect();
    for chunk in paths.chunks(1_000) {
        let creates: Vec<_> = chunk.iter().map(|p| owner.create(p, b"", &opts)).collect();
        for r in run_until(join_all(creates), deadline).unwrap() {
            r.unwrap();
        }
    }
    let (l, reads) = list(&b, "nomatch", 10);
    assert!(l.leases.is_empty(), "{l:?}");
    assert_eq!(counts(&reads).2, 0);
    // 1000 names match; none is held by a live simba session (their owner has no session
    // node): limit + 1 reads and the allowance find nothing, and the section says it was cut.
    let (l, reads) = list(&b, "00", 5);
    assert!(l.leases.is_empty() && l.truncated.leases, "{l:?}");
    assert_eq!(counts(&reads).2, 6 + MIN_SKIPS);
    drop(owner);
}

/// A parent with more children than a listing reads is refused after its `exists`, before its
/// `getChildren` (which would bring every name at once), saying which and how many.
#[test]
#[serial(zookeeper)]
fn a_parent_above_the_bound_is_refused_without_listing_it() {
    let b = backend();
    let s = b.open_session(LEASE, "holder").unwrap().id;
    for i in 0..12 {
        assert!(matches!(b.acquire(&s, &name(format!("job-{i:02}"))).unwrap(), Acquire::Acquired { .. }));
    }
    let reads = Reads::default();
    let e = b.inner.list_counted(&ListRequest::new("", 10).unwrap(), &reads, 10).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unsupported, "{e}");
    let leases = b.inner.paths.leases_dir();
    assert!(e.to_string().contains(&format!("cannot list {leases}: it has 12 children, more than the 10")), "{e}");
    // Three `exists`; only {root}/sessions (one child) listed; {root}/groups does not exist.
    assert_eq!(counts(&reads), (3, 1, 0, 0, 0));
    // At 12 it is listed.
    let reads = Reads::default();
    let l = b.inner.list_counted(&ListRequest::new("", 10).unwrap(), &reads, 12).unwrap();
    assert_eq!((l.leases.len(), l.truncated.leases), (10, true));
    b.close_session(&s).unwrap();
}
