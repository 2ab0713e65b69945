//! ZooKeeper backend against the real server (`scripts/services up zookeeper`): every SPI contract,
//! plus czxid tokens, container reaping, the watchdog, watches and ACLs.
#![cfg(feature = "zookeeper")]

mod support;

use std::time::{Duration, Instant};

use serial_test::serial;
use simba::backend::{Acquire, CheckStatus, KeepAlive, LeaseBackend, Notification, TermRemaining, Topic};
use simba::backends::zookeeper::{AclEntry, AclMode, ZookeeperAuth, ZookeeperBackend, ZookeeperOptions};
use simba::{ErrorKind, Name, SessionId, Token};

const LEASE: Duration = Duration::from_secs(1);

fn hosts_and_root() -> (String, String) {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    let rest = url.strip_prefix("zookeeper://").expect("SIMBA_TEST_ZOOKEEPER_URL must start with zookeeper://");
    let (hosts, root) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/simba-test"),
    };
    support::require_tcp("ZooKeeper", hosts.split(',').next().unwrap());
    (hosts.to_string(), root.to_string())
}

/// A fresh root for one test, so tests never see each other's nodes.
fn fresh_root() -> String {
    format!("{}/{}", hosts_and_root().1, support::unique("t"))
}

fn backend_at(root: &str, opts: ZookeeperOptions) -> ZookeeperBackend {
    let (hosts, _) = hosts_and_root();
    ZookeeperBackend::connect(&hosts, opts.root(root)).unwrap()
}

fn backend() -> ZookeeperBackend {
    backend_at(&fresh_root(), ZookeeperOptions::default())
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn acquired(b: &ZookeeperBackend, s: &SessionId, n: &Name) -> Token {
    match b.acquire(s, n).unwrap() {
        Acquire::Acquired { token, remaining } => {
            // An ephemeral node lives as long as its session: the engine holds the term until the
            // session's local deadline, which the open and keep-alives set within the watchdog's.
            assert_eq!(remaining, TermRemaining::WithSession);
            token
        }
        Acquire::Busy => panic!("{n} busy"),
    }
}

fn owned(b: &ZookeeperBackend, s: &SessionId) -> Vec<(Name, Token)> {
    match b.keep_alive(s, LEASE).unwrap() {
        KeepAlive::Alive { remaining, owned, .. } => {
            assert!(remaining > Duration::ZERO && remaining <= LEASE, "{remaining:?}");
            owned
        }
        KeepAlive::Expired => panic!("session {s} expired"),
    }
}

/// A raw client for inspecting and tampering with nodes.
/// A fresh root whose parent exists with the open ACL (so the backend creates the root itself,
/// with its own ACL), and a raw client without credentials.
fn fresh_root_with_open_parent() -> (String, zookeeper_client::Client) {
    let root = fresh_root();
    let raw = raw_client();
    let opts = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    futures::executor::block_on(raw.mkdir(&root[..root.rfind('/').unwrap()], &opts)).unwrap();
    (root, raw)
}

fn raw_client() -> zookeeper_client::Client {
    let (hosts, _) = hosts_and_root();
    futures::executor::block_on(zookeeper_client::Client::connect(&hosts)).unwrap()
}

#[test]
#[serial(zookeeper)]
fn session_open_keep_alive_close() {
    let b = backend();
    let g = b.open_session(LEASE, "meta").unwrap();
    assert_eq!(g.id.as_str().len(), 16, "ZooKeeper session ids are 16 hex digits: {}", g.id);
    assert!(g.remaining > Duration::ZERO && g.remaining <= LEASE);
    assert_eq!(owned(&b, &g.id), vec![]);
    b.close_session(&g.id).unwrap();
    assert_eq!(b.keep_alive(&g.id, LEASE).unwrap(), KeepAlive::Expired);
    b.close_session(&g.id).unwrap(); // idempotent
    let e = b.acquire(&g.id, &name("x")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SessionExpired, "{e}");
    let e = b.join(&g.id, &name("g")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SessionExpired, "{e}");
    b.release(&g.id, &name("x"), Token::new(1).unwrap()).unwrap();
    b.leave(&g.id, &name("g")).unwrap();
    // Unknown sessions are expired.
    let unknown = SessionId::from_u64(0x1234);
    assert_eq!(b.keep_alive(&unknown, LEASE).unwrap(), KeepAlive::Expired);
    b.close_session(&unknown).unwrap();
}

#[test]
#[serial(zookeeper)]
fn unrenewed_session_is_closed_by_the_watchdog_and_never_revives() {
    let b = backend();
    let other = b.open_session(Duration::from_secs(10), "").unwrap();
    let s = b.open_session(LEASE, "").unwrap().id;
    let n = name("job");
    let t1 = acquired(&b, &s, &n);
    b.join(&s, &name("grp")).unwrap();
    // Keep-alive within the lease keeps it (the client's own pings alone would too).
    thread_sleep(Duration::from_millis(600));
    assert_eq!(owned(&b, &s), vec![(n.clone(), t1)]);
    // Then stop renewing: the watchdog closes the session and its nodes vanish.
    let t0 = Instant::now();
    while b.holder(&n).unwrap().is_some() {
        assert!(t0.elapsed() < Duration::from_secs(5), "watchdog did not close the unrenewed session");
        thread_sleep(Duration::from_millis(50));
    }
    assert!(t0.elapsed() >= Duration::from_millis(300), "closed too early: {:?}", t0.elapsed());
    assert_eq!(b.members(&name("grp")).unwrap(), vec![]);
    assert_eq!(b.keep_alive(&s, LEASE).unwrap(), KeepAlive::Expired);
    assert_eq!(b.acquire(&s, &n).unwrap_err().kind(), ErrorKind::SessionExpired);
    assert_eq!(b.join(&s, &name("grp")).unwrap_err().kind(), ErrorKind::SessionExpired);
    let t2 = match b.acquire(&other.id, &n).unwrap() {
        Acquire::Acquired { token, .. } => token,
        Acquire::Busy => panic!("busy after expiry"),
    };
    assert!(t2 > t1);
    b.close_session(&other.id).unwrap();
}

fn thread_sleep(d: Duration) {
    std::thread::sleep(d)
}

#[test]
#[serial(zookeeper)]
fn acquire_release_tokens_and_holder() {
    let b = backend();
    let s1 = b.open_session(LEASE, "node-1 ✓").unwrap().id;
    let s2 = b.open_session(LEASE, "node-2").unwrap().id;
    let n = name("leader");
    assert_eq!(b.holder(&n).unwrap(), None);
    let t1 = acquired(&b, &s1, &n);
    assert_eq!(acquired(&b, &s1, &n), t1, "re-acquire is idempotent");
    assert_eq!(b.acquire(&s2, &n).unwrap(), Acquire::Busy);
    let h = b.holder(&n).unwrap().unwrap();
    assert_eq!((h.session.clone(), h.token, h.metadata.as_str()), (s1.clone(), t1, "node-1 ✓"));
    assert!(h.remaining > Duration::ZERO && h.remaining <= LEASE);
    // A non-holder's release is a no-op.
    b.release(&s2, &n, t1).unwrap();
    assert_eq!(b.holder(&n).unwrap().unwrap().session, s1);
    assert_eq!(owned(&b, &s1), vec![(n.clone(), t1)]);
    b.release(&s1, &n, t1).unwrap();
    b.release(&s1, &n, t1).unwrap();
    assert_eq!(b.holder(&n).unwrap(), None);
    assert_eq!(owned(&b, &s1), vec![]);
    let t2 = acquired(&b, &s2, &n);
    assert!(t2 > t1, "new term, larger token: {t1} then {t2}");
    b.release(&s2, &n, t2).unwrap();
    let t3 = acquired(&b, &s1, &n);
    assert!(t3 > t2, "same holder after release gets a larger token: {t2} then {t3}");
    assert_eq!(b.holder(&n).unwrap().unwrap().token, t3);
    // Holder as seen from another backend instance (other process): metadata and remaining from the session node.
    let b2 = backend_at(b.root(), ZookeeperOptions::default());
    let h = b2.holder(&n).unwrap().unwrap();
    assert_eq!((h.session, h.token, h.metadata.as_str()), (s1.clone(), t3, "node-1 ✓"));
    assert!(h.remaining > Duration::ZERO && h.remaining <= LEASE, "{:?}", h.remaining);
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

#[test]
#[serial(zookeeper)]
fn close_releases_leases_and_memberships() {
    let b = backend();
    let s1 = b.open_session(LEASE, "").unwrap().id;
    let s2 = b.open_session(LEASE, "").unwrap().id;
    let (n, g) = (name("lock"), name("workers"));
    let t1 = acquired(&b, &s1, &n);
    b.join(&s1, &g).unwrap();
    b.close_session(&s1).unwrap();
    assert_eq!(b.holder(&n).unwrap(), None);
    assert_eq!(b.members(&g).unwrap(), vec![]);
    let t2 = acquired(&b, &s2, &n);
    assert!(t2 > t1);
    b.close_session(&s2).unwrap();
}

#[test]
#[serial(zookeeper)]
fn groups_join_leave_members() {
    let b = backend();
    let s1 = b.open_session(LEASE, "one").unwrap().id;
    let s2 = b.open_session(LEASE, "two").unwrap().id;
    let g = name("g.1:x-y_z");
    assert_eq!(b.members(&g).unwrap(), vec![]);
    b.join(&s1, &g).unwrap();
    b.join(&s1, &g).unwrap(); // idempotent
    b.join(&s2, &g).unwrap();
    let m = b.members(&g).unwrap();
    let mut expect = vec![(s1.clone(), "one".to_string()), (s2.clone(), "two".to_string())];
    expect.sort();
    assert_eq!(m.iter().map(|m| (m.session.clone(), m.metadata.clone())).collect::<Vec<_>>(), expect);
    b.leave(&s1, &g).unwrap();
    b.leave(&s1, &g).unwrap(); // idempotent
    assert_eq!(b.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![s2.clone()]);
    b.close_session(&s2).unwrap();
    assert_eq!(b.members(&g).unwrap(), vec![]);
    b.close_session(&s1).unwrap();
}

#[test]
#[serial(zookeeper)]
fn names_are_case_sensitive() {
    let b = backend();
    let s1 = b.open_session(LEASE, "").unwrap().id;
    let s2 = b.open_session(LEASE, "").unwrap().id;
    acquired(&b, &s1, &name("Job"));
    acquired(&b, &s2, &name("job"));
    b.join(&s1, &name("Grp")).unwrap();
    assert_eq!(b.members(&name("grp")).unwrap(), vec![]);
    assert_eq!(b.members(&name("Grp")).unwrap().len(), 1);
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

#[test]
#[serial(zookeeper)]
fn tokens_increase_after_parents_are_deleted_or_reaped() {
    let b = backend();
    let raw = raw_client();
    let s = b.open_session(LEASE, "").unwrap().id;
    let n = name("t");
    let t1 = acquired(&b, &s, &n);
    b.release(&s, &n, t1).unwrap();
    // Someone deletes the (empty) leases parent: the next term recreates it with a larger czxid.
    futures::executor::block_on(raw.delete(&format!("{}/leases", b.root()), None)).unwrap();
    let t2 = acquired(&b, &s, &n);
    assert!(t2 > t1, "{t1} then {t2}");
    // Group container is reaped by the server once empty; joining again recreates it.
    let g = name("reaped");
    b.join(&s, &g).unwrap();
    b.leave(&s, &g).unwrap();
    let gpath = format!("{}/groups/reaped", b.root());
    let t0 = Instant::now();
    while futures::executor::block_on(raw.check_stat(&gpath)).unwrap().is_some() {
        assert!(t0.elapsed() < Duration::from_secs(30), "container {gpath} was not reaped (server reaping interval?)");
        owned(&b, &s);
        thread_sleep(Duration::from_millis(200));
    }
    assert_eq!(b.members(&g).unwrap(), vec![]);
    b.join(&s, &g).unwrap();
    assert_eq!(b.members(&g).unwrap().len(), 1);
    let stat = futures::executor::block_on(raw.check_stat(&gpath)).unwrap().unwrap();
    assert!(stat.ephemeral_owner == 0, "group node is not ephemeral");
    b.release(&s, &n, t2).unwrap();
    let t3 = acquired(&b, &s, &n);
    assert!(t3 > t2);
    b.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn keep_alive_reports_every_owned_lease() {
    let b = backend();
    let s = b.open_session(Duration::from_secs(5), "").unwrap().id;
    let mut expect = Vec::new();
    for i in 0..50 {
        let n = name(&format!("l{i:03}"));
        let t = match b.acquire(&s, &n).unwrap() {
            Acquire::Acquired { token, .. } => token,
            Acquire::Busy => panic!(),
        };
        expect.push((n, t));
    }
    expect.sort();
    match b.keep_alive(&s, Duration::from_secs(5)).unwrap() {
        KeepAlive::Alive { owned, .. } => assert_eq!(owned, expect),
        KeepAlive::Expired => panic!(),
    }
    b.close_session(&s).unwrap();
}

/// The groups a keep-alive of `s` reports (its `owned` leases are checked by `owned`).
fn groups(b: &ZookeeperBackend, s: &SessionId) -> Vec<Name> {
    match b.keep_alive(s, LEASE).unwrap() {
        KeepAlive::Alive { groups, .. } => {
            let mut sorted = groups.clone();
            sorted.sort();
            sorted.dedup();
            assert_eq!(groups, sorted, "groups are sorted and deduplicated");
            groups
        }
        KeepAlive::Expired => panic!("session {s} expired"),
    }
}

#[test]
#[serial(zookeeper)]
fn keep_alive_reports_exactly_the_joined_groups() {
    let b = backend();
    let s1 = b.open_session(LEASE, "").unwrap().id;
    let s2 = b.open_session(LEASE, "").unwrap().id;
    let (g1, g2, g3) = (name("g1"), name("g.2:x-y_z"), name("G1"));
    assert_eq!(groups(&b, &s1), vec![]);
    b.join(&s1, &g1).unwrap();
    b.join(&s1, &g2).unwrap();
    b.join(&s1, &g1).unwrap(); // idempotent: listed once
    let mut both = vec![g1.clone(), g2.clone()];
    both.sort();
    assert_eq!(groups(&b, &s1), both);
    b.leave(&s1, &g2).unwrap();
    assert_eq!(groups(&b, &s1), vec![g1.clone()]);
    // Another session's memberships, in the same groups or others, are never reported.
    b.join(&s2, &g1).unwrap();
    b.join(&s2, &g2).unwrap();
    b.join(&s2, &g3).unwrap();
    assert_eq!(groups(&b, &s1), vec![g1.clone()]);
    let mut all = vec![g1.clone(), g2.clone(), g3.clone()];
    all.sort();
    assert_eq!(groups(&b, &s2), all);
    // Nor those of a session of another backend instance (another process) on the same root.
    let other = backend_at(b.root(), ZookeeperOptions::default());
    let s3 = other.open_session(LEASE, "").unwrap().id;
    other.join(&s3, &name("theirs")).unwrap();
    assert_eq!(groups(&b, &s1), vec![g1.clone()]);
    assert_eq!(groups(&other, &s3), vec![name("theirs")]);
    // Leaving everything reports nothing; leases are not groups.
    b.leave(&s1, &g1).unwrap();
    acquired(&b, &s1, &g1);
    assert_eq!(groups(&b, &s1), vec![]);
    other.close_session(&s3).unwrap();
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
}

#[test]
#[serial(zookeeper)]
fn member_node_deleted_behind_the_sessions_back_is_not_reported() {
    let root = fresh_root();
    let b = backend_at(&root, ZookeeperOptions::default());
    let s = b.open_session(LEASE, "").unwrap().id;
    let (g1, g2) = (name("kept"), name("lost"));
    b.join(&s, &g1).unwrap();
    b.join(&s, &g2).unwrap();
    assert_eq!(groups(&b, &s), vec![g1.clone(), g2.clone()]);
    // Another ZooKeeper client (an operator) deletes one member node.
    let raw = raw_client();
    let lost = format!("{root}/groups/{}/{}", g2.as_str(), s.as_str());
    futures::executor::block_on(raw.delete(&lost, None)).unwrap();
    assert_eq!(groups(&b, &s), vec![g1.clone()], "the deleted membership is lost, not reported");
    // A node forged at this session's member path by another client is not this session's.
    let forged = name("forged");
    let dir = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let eph = zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
    let forged_dir = format!("{root}/groups/{}", forged.as_str());
    futures::executor::block_on(raw.mkdir(&forged_dir, &dir)).unwrap();
    futures::executor::block_on(raw.create(&format!("{forged_dir}/{}", s.as_str()), b"", &eph)).unwrap();
    assert_eq!(groups(&b, &s), vec![g1.clone()], "ownership, not the path, decides");
    // Joining again restores it.
    b.join(&s, &g2).unwrap();
    assert_eq!(groups(&b, &s), vec![g1.clone(), g2.clone()]);
    b.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn remaining_is_min_of_lease_and_negotiated_timeout() {
    let b = backend();
    // The test ensemble's minSessionTimeout is 500 ms: a 200 ms lease is clamped up by the server,
    // so remaining is the lease duration (the watchdog enforces it locally).
    let g = b.open_session(Duration::from_millis(200), "").unwrap();
    assert_eq!(g.remaining, Duration::from_millis(200));
    b.close_session(&g.id).unwrap();
    // Within the ensemble range the negotiated timeout equals the request; the remaining is that
    // less the leader's possible staleness behind a follower (issue #36 finding 4): half a tick
    // (the test ensemble does not answer `conf`: at most half the timeout) plus the client's
    // ping gap (a quarter of the timeout), so between half and three quarters of it.
    let g = b.open_session(Duration::from_secs(3), "").unwrap();
    let safe = g.remaining;
    assert!(safe >= Duration::from_millis(1500) && safe <= Duration::from_millis(2250), "{safe:?}");
    match b.keep_alive(&g.id, Duration::from_secs(2)).unwrap() {
        KeepAlive::Alive { remaining, .. } => assert_eq!(remaining, safe.min(Duration::from_secs(2))),
        KeepAlive::Expired => panic!(),
    }
    b.close_session(&g.id).unwrap();
}

fn recv(rx: &crossbeam_channel::Receiver<Notification>, within: Duration) -> Option<Notification> {
    rx.recv_timeout(within).ok()
}

#[test]
#[serial(zookeeper)]
fn lease_watch_fires_once_on_release() {
    let b = backend();
    assert!(b.capabilities().push_release && b.capabilities().push_membership);
    let s = b.open_session(LEASE, "").unwrap().id;
    let n = name("w");
    let (tx, rx) = crossbeam_channel::unbounded();
    // Free lease: notified at once.
    assert!(b.watch(&Topic::Lease(n.clone()), &tx).unwrap());
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::Released(n.clone())));
    let tw = acquired(&b, &s, &n);
    // Held: nothing until released; repeated registrations do not duplicate.
    for _ in 0..100 {
        assert!(b.watch(&Topic::Lease(n.clone()), &tx).unwrap());
    }
    owned(&b, &s);
    assert_eq!(recv(&rx, Duration::from_millis(300)), None);
    b.release(&s, &n, tw).unwrap();
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::Released(n.clone())));
    assert_eq!(recv(&rx, Duration::from_millis(300)), None, "one notification per registration round");
    // Expiry of the holder (session closed) also notifies.
    acquired(&b, &s, &n);
    assert!(b.watch(&Topic::Lease(n.clone()), &tx).unwrap());
    b.close_session(&s).unwrap();
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::Released(n.clone())));
}

#[test]
#[serial(zookeeper)]
fn group_watch_covers_missing_group_joins_and_leaves() {
    let b = backend();
    let s1 = b.open_session(LEASE, "").unwrap().id;
    let s2 = b.open_session(LEASE, "").unwrap().id;
    let g = name("watched");
    let topic = Topic::Group(g.clone());
    let (tx, rx) = crossbeam_channel::unbounded();
    // The group does not exist yet.
    assert!(b.watch(&topic, &tx).unwrap());
    assert!(b.watch(&topic, &tx).unwrap());
    assert_eq!(recv(&rx, Duration::from_millis(300)), None);
    b.join(&s1, &g).unwrap();
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::MembersChanged(g.clone())));
    assert_eq!(recv(&rx, Duration::from_millis(200)), None);
    // Existing group: a join of another session.
    assert!(b.watch(&topic, &tx).unwrap());
    assert_eq!(recv(&rx, Duration::from_millis(200)), None);
    b.join(&s2, &g).unwrap();
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::MembersChanged(g.clone())));
    // A leave.
    assert!(b.watch(&topic, &tx).unwrap());
    b.leave(&s1, &g).unwrap();
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::MembersChanged(g.clone())));
    // A session end.
    assert!(b.watch(&topic, &tx).unwrap());
    b.close_session(&s2).unwrap();
    assert_eq!(recv(&rx, Duration::from_secs(2)), Some(Notification::MembersChanged(g.clone())));
    b.close_session(&s1).unwrap();
}

#[test]
#[serial(zookeeper)]
fn creator_all_acl_denies_other_identities() {
    // The shared test root stays open; only this test's root gets the creator-all ACL.
    let (root, _raw) = fresh_root_with_open_parent();
    let auth = ZookeeperAuth::digest("simba-test", "secret").unwrap();
    let owner = backend_at(&root, ZookeeperOptions::default().auth(auth.clone()).acl(AclMode::CreatorAll));
    let s = owner.open_session(LEASE, "m").unwrap().id;
    let n = name("secured");
    let t = acquired(&owner, &s, &n);
    owner.join(&s, &name("g")).unwrap();
    assert_eq!(owner.holder(&n).unwrap().unwrap().token, t);
    // Same identity from another backend (another process): allowed.
    let peer = backend_at(&root, ZookeeperOptions::default().auth(auth).acl(AclMode::CreatorAll));
    assert_eq!(peer.holder(&n).unwrap().unwrap().session, s);
    assert_eq!(peer.members(&name("g")).unwrap().len(), 1);
    // No credentials, or other credentials: denied, with a clear error.
    let anon = backend_at(&root, ZookeeperOptions::default());
    let other = backend_at(
        &root,
        ZookeeperOptions::default().auth(ZookeeperAuth::digest("intruder", "x").unwrap()).acl(AclMode::CreatorAll),
    );
    for b in [&anon, &other] {
        let e = b.holder(&n).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
        assert!(e.to_string().contains("denied"), "{e}");
        let s2 = match b.open_session(LEASE, "") {
            Ok(g) => g.id,
            Err(e) => {
                assert!(e.to_string().contains("denied"), "{e}");
                continue;
            }
        };
        let e = b.acquire(&s2, &name("other")).unwrap_err();
        assert!(e.to_string().contains("denied"), "{e}");
        b.close_session(&s2).unwrap();
    }
    // The checks report the ACL state.
    let acl = owner.check().into_iter().find(|c| c.name == "acl").unwrap();
    assert_eq!(acl.status, CheckStatus::Ok, "{acl:?}");
    owner.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn custom_acl_lets_anyone_read_and_only_the_identity_write() {
    let (root, raw) = fresh_root_with_open_parent();
    let acl = AclMode::Custom(vec![
        AclEntry::digest("simba-writer", "secret", "cdrwa").unwrap(),
        AclEntry::parse("world:anyone:r").unwrap(),
    ]);
    let writer_opts =
        ZookeeperOptions::default().auth(ZookeeperAuth::digest("simba-writer", "secret").unwrap()).acl(acl.clone());
    let owner = backend_at(&root, writer_opts);
    let s = owner.open_session(LEASE, "m").unwrap().id;
    let n = name("shared");
    let t = acquired(&owner, &s, &n);
    owner.join(&s, &name("g")).unwrap();
    // Every node the backend created (root, parents, leaf) carries exactly the configured list.
    for path in [root.clone(), format!("{root}/leases"), format!("{root}/leases/{}", n.as_str())] {
        let (acls, _) = futures::executor::block_on(raw.get_acl(&path)).unwrap();
        let shown: Vec<String> = acls.iter().map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission())).collect();
        assert_eq!(acls.len(), 2, "{path}: {shown:?}");
        assert!(shown.iter().any(|a| a.starts_with("digest:simba-writer:")), "{path}: {shown:?}");
        let world = acls.iter().find(|a| a.scheme() == "world" && a.id() == "anyone");
        assert_eq!(world.map(|a| a.permission()), Some(zookeeper_client::Permission::READ), "{path}: {shown:?}");
    }
    // Anyone reads holders and members ...
    let anon = backend_at(&root, ZookeeperOptions::default());
    let h = anon.holder(&n).unwrap().unwrap();
    assert_eq!((h.session, h.token), (s.clone(), t));
    assert_eq!(anon.members(&name("g")).unwrap().len(), 1);
    // ... but cannot even open a session (its node goes under the root), nor delete the holder's node.
    let e = anon.open_session(LEASE, "").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(e.to_string().contains("denied"), "{e}");
    let del = futures::executor::block_on(raw.delete(&format!("{root}/leases/{}", n.as_str()), None));
    assert!(matches!(del, Err(zookeeper_client::Error::NoAuth)), "{del:?}");
    assert_eq!(owner.holder(&n).unwrap().unwrap().token, t);
    // The check shows the list and no longer warns about an open root.
    let item = owner.check().into_iter().find(|c| c.name == "acl").unwrap();
    assert_eq!(item.status, CheckStatus::Ok, "{item:?}");
    assert!(item.detail.contains("custom [digest:simba-writer:"), "{item:?}");
    owner.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn foreign_nodes_give_clear_errors_or_are_ignored() {
    // Nodes simba never writes, created by hand (an operator, another tool) under the backend's root.
    let root = fresh_root();
    let b = backend_at(&root, ZookeeperOptions::default());
    let s = b.open_session(LEASE, "").unwrap().id;
    let raw = raw_client();
    let open = zookeeper_client::CreateMode::Persistent.with_acls(zookeeper_client::Acls::anyone_all());
    let mk = |path: &str, data: &[u8]| futures::executor::block_on(raw.create(path, data, &open)).unwrap();
    // A persistent (not ephemeral) lease node: nobody can take the lease, the holder read says why.
    let squatted = name("squatted");
    futures::executor::block_on(raw.mkdir(&format!("{root}/leases"), &open)).unwrap();
    mk(&format!("{root}/leases/{}", squatted.as_str()), b"garbage");
    assert_eq!(b.acquire(&s, &squatted).unwrap(), Acquire::Busy);
    let e = b.holder(&squatted).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(e.to_string().contains("not ephemeral"), "{e}");
    // Foreign children of a group are ignored; real members are still listed.
    let g = name("mixed");
    b.join(&s, &g).unwrap();
    mk(&format!("{root}/groups/{}/not-a-session", g.as_str()), b"x");
    let members = b.members(&g).unwrap();
    assert_eq!(members.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![s.clone()]);
    // Garbage in a session node (read by `holder` for metadata and remaining time): still a holder.
    let n = name("held");
    let t = acquired(&b, &s, &n);
    let spath = format!("{root}/sessions/{}", s.as_str());
    futures::executor::block_on(raw.set_data(&spath, b"\xff\xfe not a number", None)).unwrap();
    let h = b.holder(&n).unwrap().unwrap();
    assert_eq!((h.session.clone(), h.token), (s.clone(), t));
    // The session itself is unaffected.
    assert!(matches!(b.keep_alive(&s, LEASE).unwrap(), KeepAlive::Alive { .. }));
    b.close_session(&s).unwrap();
}

#[test]
fn acl_entries_are_validated() {
    assert_eq!(AclEntry::parse("world:anyone:r").unwrap().to_string(), "world:anyone:r");
    let d = AclEntry::parse("digest:u:abc=:cdrwa").unwrap();
    assert_eq!((d.scheme(), d.id()), ("digest", "u:abc="));
    assert!(d.grants("cdrwa"));
    // The digest id ZooKeeper computes for user "super", password "test" (its documentation's example).
    assert_eq!(AclEntry::digest("super", "test", "a").unwrap().id(), "super:D/InIHSb7yEEbrWz8b9l71RjZJU=");
    for bad in ["world:anyone", "world:anyone:", "world:anyone:rx", ":anyone:r", "wor ld:anyone:r", "world::r"] {
        let e = AclEntry::parse(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{bad}: {e}");
    }
    let e = ZookeeperOptions::default().acl(AclMode::Custom(vec![])).validate().unwrap_err();
    assert!(e.to_string().contains("empty"), "{e}");
}

#[test]
#[serial(zookeeper)]
fn check_reports_reachability_open_acl_and_clock_independence() {
    let b = backend();
    let s = b.open_session(LEASE, "").unwrap().id;
    acquired(&b, &s, &name("x"));
    let items = b.check();
    let get = |n: &str| items.iter().find(|c| c.name == n).unwrap_or_else(|| panic!("no {n} in {items:?}"));
    assert_eq!(get("reachable").status, CheckStatus::Ok);
    assert_eq!(get("acl").status, CheckStatus::Warn, "{:?}", get("acl"));
    assert_eq!(get("clock").status, CheckStatus::Ok);
    assert!(get("clock").detail.contains("clock-independent"));
    // scripts/services leaves conf out of the servers' 4lw.commands.whitelist: the tickTime is
    // unavailable, in the server's own words, and the default assumed is a warning.
    let tick = get("tick");
    assert_eq!(tick.status, CheckStatus::Warn, "{tick:?}");
    assert!(tick.detail.starts_with("unavailable: "), "{tick:?}");
    assert!(tick.detail.contains("not in the whitelist") && tick.detail.contains("assuming"), "{tick:?}");
    b.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn invalid_configuration_is_rejected_before_io() {
    let (hosts, _) = hosts_and_root();
    for (h, o, what) in [
        (hosts.as_str(), ZookeeperOptions::default().root("relative"), "root"),
        (hosts.as_str(), ZookeeperOptions::default().root("/a/"), "root"),
        (hosts.as_str(), ZookeeperOptions::default().acl(AclMode::CreatorAll), "creator-all"),
        ("", ZookeeperOptions::default(), "hosts"),
        ("127.0.0.1:2181/chroot", ZookeeperOptions::default(), "hosts"),
        ("127.0.0.1", ZookeeperOptions::default(), "hosts"),
    ] {
        let e = ZookeeperBackend::connect(h, o).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
        assert!(e.to_string().contains(what), "{e}");
    }
    assert_eq!(
        // `user:password@` is digest auth (as in `Config`); a user without a password is not.
        ZookeeperBackend::from_url("zookeeper://justuser@127.0.0.1:2181/x", ZookeeperOptions::default())
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidConfig
    );
    let b = backend();
    let e = b.open_session(LEASE, &"x".repeat(2000)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
}

#[test]
#[serial(zookeeper)]
fn from_url_uses_the_url_root() {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    let b = ZookeeperBackend::from_url(&url, ZookeeperOptions::default()).unwrap();
    assert_eq!(b.root(), hosts_and_root().1);
}

#[test]
#[serial(zookeeper)]
fn unreachable_ensemble_fails_fast_as_unavailable() {
    let t0 = Instant::now();
    let e = ZookeeperBackend::connect(
        "127.0.0.1:1",
        ZookeeperOptions::default().connection_timeout(Duration::from_millis(500)),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
}

#[test]
#[serial(zookeeper)]
fn dropping_the_backend_stops_its_threads_and_closes_sessions() {
    let counts = || (support::threads_named("simba-zk-watchd"), support::threads_named("simba-zk-watch"));
    // Backends of earlier tests may still be winding down; no other test holds one now (serial).
    let t0 = Instant::now();
    while counts() != (0, 0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "threads of dropped backends still running: {:?}", counts());
        thread_sleep(Duration::from_millis(20));
    }
    let b = backend();
    let root = b.root().to_string();
    let s = b.open_session(Duration::from_secs(10), "").unwrap().id;
    acquired_long(&b, &s, &name("held"));
    let (tx, _rx) = crossbeam_channel::unbounded();
    b.watch(&Topic::Lease(name("held")), &tx).unwrap();
    assert_eq!(counts(), (1, 1));
    drop(b);
    let t0 = Instant::now();
    while counts() != (0, 0) {
        assert!(t0.elapsed() < Duration::from_secs(5), "backend threads still running after drop: {:?}", counts());
        thread_sleep(Duration::from_millis(20));
    }
    // Its sessions end with it (the client closes them), long before their 10 s timeout.
    let b2 = backend_at(&root, ZookeeperOptions::default());
    let t0 = Instant::now();
    while b2.holder(&name("held")).unwrap().is_some() {
        assert!(t0.elapsed() < Duration::from_secs(5), "session survived its backend");
        thread_sleep(Duration::from_millis(20));
    }
}

fn acquired_long(b: &ZookeeperBackend, s: &SessionId, n: &Name) -> Token {
    match b.acquire(s, n).unwrap() {
        Acquire::Acquired { token, .. } => token,
        Acquire::Busy => panic!("{n} busy"),
    }
}

#[test]
fn debug_redacts_credentials() {
    let o = ZookeeperOptions::default().auth(ZookeeperAuth::digest("user", "hunter2").unwrap());
    let s = format!("{o:?}");
    assert!(!s.contains("hunter2"), "{s}");
}

#[test]
fn handles_are_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<ZookeeperBackend>();
    check::<ZookeeperOptions>();
    let _: fn(ZookeeperBackend) -> Box<dyn LeaseBackend> = |b| Box::new(b);
}

#[test]
#[serial(zookeeper)]
fn acquire_answers_a_term_that_lasts_with_its_session() {
    // The term's deadline is the session's (finding 3 of issue #36): what bounds it by the
    // watchdog is the session's remaining, which the open and every keep-alive report.
    let b = backend();
    let grant = b.open_session(LEASE, "").unwrap();
    let (s, t0) = (grant.id, Instant::now());
    assert!(grant.remaining <= LEASE, "{:?}", grant.remaining);
    thread_sleep(Duration::from_millis(600));
    match b.acquire(&s, &name("late")).unwrap() {
        Acquire::Acquired { remaining, .. } => assert_eq!(remaining, TermRemaining::WithSession),
        Acquire::Busy => panic!("busy"),
    }
    // A keep-alive reports no more than the watchdog allows from its send.
    let sent = Instant::now();
    match b.keep_alive(&s, LEASE).unwrap() {
        KeepAlive::Alive { remaining, .. } => {
            assert!(sent + remaining <= Instant::now() + LEASE, "remaining {remaining:?} outlives the watchdog")
        }
        KeepAlive::Expired => panic!("expired"),
    }
    assert!(t0.elapsed() < LEASE * 10);
    b.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn lease_node_deleted_behind_the_sessions_back_is_not_reported() {
    let root = fresh_root();
    let b = backend_at(&root, ZookeeperOptions::default());
    let s = b.open_session(Duration::from_secs(5), "").unwrap().id;
    let (kept, lost) = (name("kept"), name("lost"));
    let tk = acquired_long(&b, &s, &kept);
    let tl = acquired_long(&b, &s, &lost);
    let keep = |b: &ZookeeperBackend| match b.keep_alive(&s, Duration::from_secs(5)).unwrap() {
        KeepAlive::Alive { owned, .. } => owned,
        KeepAlive::Expired => panic!("session {s} expired"),
    };
    let mut both = vec![(kept.clone(), tk), (lost.clone(), tl)];
    both.sort();
    assert_eq!(keep(&b), both);
    // Another ZooKeeper client (an operator, a shared identity) deletes one lease node.
    let raw = raw_client();
    futures::executor::block_on(raw.delete(&format!("{root}/leases/{}", lost.as_str()), None)).unwrap();
    assert_eq!(keep(&b), vec![(kept.clone(), tk)], "the deleted lease is lost, not reported from memory");
    // A rival takes it with a larger token; the old holder never reports it again.
    let r = b.open_session(Duration::from_secs(5), "").unwrap().id;
    let tr = acquired_long(&b, &r, &lost);
    assert!(tr > tl, "{tr} after {tl}");
    assert_eq!(keep(&b), vec![(kept.clone(), tk)]);
    assert_eq!(b.acquire(&s, &lost).unwrap(), Acquire::Busy);
    // Releasing the lost term is a no-op that never deletes the rival's node.
    b.release(&s, &lost, tl).unwrap();
    assert_eq!(b.holder(&lost).unwrap().map(|h| (h.session, h.token)), Some((r.clone(), tr)));
    b.close_session(&s).unwrap();
    b.close_session(&r).unwrap();
}

#[test]
#[serial(zookeeper)]
fn holder_whose_node_is_deleted_loses_the_lease_at_its_next_renewal() {
    use simba::{Session, SessionEvent, SessionOptions};
    let root = fresh_root();
    let b = std::sync::Arc::new(backend_at(&root, ZookeeperOptions::default()));
    let renew = Duration::from_millis(300);
    let query = Duration::from_secs(1);
    let opts = SessionOptions::builder()
        .lease_duration(Duration::from_secs(6))
        .renew_interval(renew)
        .query_timeout(query)
        .build()
        .unwrap();
    let holder = Session::open(b.clone(), opts.clone()).unwrap();
    let events = holder.events();
    let lease = holder.lock("deleted").unwrap();
    let t1 = lease.token().unwrap();
    let raw = raw_client();
    futures::executor::block_on(raw.delete(&format!("{root}/leases/deleted"), None)).unwrap();
    let deleted = Instant::now();
    // The next keep-alive (at most one renew interval away) reports the loss, bounded by its own
    // query timeout.
    let bound = renew + query + Duration::from_millis(500);
    let lost = loop {
        let left = bound.checked_sub(deleted.elapsed()).unwrap_or_else(|| {
            panic!("no LeaseLost within {bound:?} of the delete; token() still says {:?}", lease.token())
        });
        match events.recv_timeout(left) {
            Ok(SessionEvent::LeaseLost { name, token, .. }) => break (name, token),
            Ok(_) => {}
            Err(_) => panic!("no LeaseLost within {bound:?} of the delete; token() says {:?}", lease.token()),
        }
    };
    assert_eq!(lost.0.as_str(), "deleted");
    assert_eq!(lost.1, t1);
    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
    assert_eq!(holder.state(), simba::SessionState::Active, "only the lease is lost, not the session");
    // A rival takes it: never two holders.
    let rival = Session::open(b.clone(), opts).unwrap();
    let taken = rival.try_lock("deleted").unwrap().expect("free after the delete");
    let t2 = taken.token().unwrap();
    assert!(t2 > t1, "{t2} after {t1}");
    assert!(lease.token().is_err(), "two holders");
    drop(taken);
    drop(lease);
    rival.close().unwrap();
    holder.close().unwrap();
}

#[test]
#[serial(zookeeper)]
fn denied_identity_fails_at_once_and_check_says_the_same() {
    use simba::{Session, SessionOptions};
    // The root belongs to one digest identity (creator-all); a backend with the wrong password
    // for the same user is denied: ZooKeeper accepts any digest credentials and denies by ACL.
    let (root, _raw) = fresh_root_with_open_parent();
    let owner = backend_at(
        &root,
        ZookeeperOptions::default().auth(ZookeeperAuth::digest("simba", "right").unwrap()).acl(AclMode::CreatorAll),
    );
    let s = owner.open_session(LEASE, "").unwrap().id;
    let wrong = std::sync::Arc::new(backend_at(
        &root,
        ZookeeperOptions::default()
            .auth(ZookeeperAuth::digest("simba", "wrong").unwrap())
            .acl(AclMode::CreatorAll)
            .query_timeout(Duration::from_secs(20)),
    ));
    let started = Instant::now();
    let long = Duration::from_secs(20);
    let opts = SessionOptions::builder().lease_duration(long).query_timeout(long).build().unwrap();
    let e = Session::open(wrong.clone(), opts).map(|_| ()).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5), "not at once: {:?}", started.elapsed());
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    let shown = simba::display_chain(&e);
    for words in ["denied", "digest user simba", "SIMBA_ZOOKEEPER_AUTH", "not authorized"] {
        assert!(shown.contains(words), "{words:?} missing: {shown}");
    }
    // `check` shows the same denial (a probe of what opening a session and acquiring need).
    let items = wrong.check();
    let access = items.iter().find(|c| c.name == "access").unwrap_or_else(|| panic!("no access item: {items:?}"));
    assert_eq!(access.status, CheckStatus::Fail, "{access:?}");
    for words in ["denied", "digest user simba", "SIMBA_ZOOKEEPER_AUTH", "not authorized"] {
        assert!(access.detail.contains(words), "{words:?} missing: {access:?}");
    }
    // The owner's identity passes the probe, which leaves no node behind.
    let items = owner.check();
    let access = items.iter().find(|c| c.name == "access").unwrap_or_else(|| panic!("no access item: {items:?}"));
    assert_eq!(access.status, CheckStatus::Ok, "{access:?}");
    let raw = zookeeper_client::Client::connector().with_auth("digest", b"simba:right");
    let raw = futures::executor::block_on(raw.connect(&hosts_and_root().0)).unwrap();
    for dir in ["sessions", "leases"] {
        let children = futures::executor::block_on(raw.list_children(&format!("{root}/{dir}"))).unwrap();
        assert!(children.iter().all(|c| !c.contains("check")), "{dir}: {children:?}");
    }
    owner.close_session(&s).unwrap();
}

#[test]
#[serial(zookeeper)]
fn holder_remaining_is_known_here_and_an_upper_bound_elsewhere() {
    // The shared server's minSessionTimeout is 500 ms: a 400 ms lease negotiates 500 ms, so a
    // holder whose process died keeps its node up to 500 ms (plus the server's expiry tick) after
    // its last ping, while a live one whose renewals stop is closed by its watchdog after 400 ms.
    let b = backend();
    let elsewhere = backend_at(b.root(), ZookeeperOptions::default());
    let lease = Duration::from_millis(400);
    let s = b.open_session(lease, "").unwrap().id;
    let n = name("bound");
    let t = acquired_long(&b, &s, &n);
    // Another process cannot know when the holder last renewed: it reports the bound, the longer
    // of the two.
    let h = elsewhere.holder(&n).unwrap().expect("held");
    assert_eq!((h.session.clone(), h.token), (s.clone(), t));
    assert!(h.remaining >= Duration::from_millis(500), "not an upper bound: {:?}", h.remaining);
    // This process knows: at most the lease, counted from the last renewal.
    let here = b.holder(&n).unwrap().expect("held");
    assert!(here.remaining <= lease, "{:?}", here.remaining);
    b.close_session(&s).unwrap();
}
