//! Finding 2 of issue #36: a Redis Cluster node the client cannot reach. Its leases' renewals
//! fail; after a third of the lease duration the backend's replies leave them out of `owned`
//! and name them `unknown`. Unknown is not lost: the first handle keeps its term until its own
//! deadline, and a term the session gave up there is never adopted again — before the fix the
//! replies left the lease out as if it were gone, the engine reported it lost and, two replies
//! later, forgot the term, so a `lock` that reached the recovered node adopted the same term into
//! a second handle.
//!
//! A private cluster of three masters, every client connection through a proxy (the nodes
//! announce the proxies' ports); the lease's node is cut from the client by stalling its proxy.
#![cfg(all(feature = "redis", feature = "tck"))]

mod support;

#[path = "redis_private_cluster.rs"]
mod private_cluster;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use private_cluster::PrivateCluster;
use redis::cluster_routing::Slot;
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::tck::eventually;
use simba::{ErrorKind, KeepAlive, Name, Session, SessionOptions, Token};
use support::forward::{Forward, Hook, Op};
use support::proxy::Proxy;

/// Records every successful keep-alive reply: (owned, unknown).
#[derive(Debug, Default)]
struct Replies(Mutex<Vec<(Vec<(Name, Token)>, Vec<Name>)>>);

impl Hook for Replies {
    fn before(&self, _op: Op) {}
    fn keep_alive_reply(&self, reply: &simba::Result<KeepAlive>) {
        if let Ok(KeepAlive::Alive { owned, unknown, .. }) = reply {
            self.0.lock().push((owned.clone(), unknown.clone()));
        }
    }
}

impl Replies {
    fn count(&self) -> usize {
        self.0.lock().len()
    }
    /// The replies from the `from`-th on.
    fn since(&self, from: usize) -> Vec<(Vec<(Name, Token)>, Vec<Name>)> {
        self.0.lock()[from..].to_vec()
    }
}

fn slot_number(key: &str) -> u16 {
    let slot = Slot::for_key(key);
    (0..16384u16).find(|s| Slot::new(*s) == Some(slot)).unwrap_or_else(|| panic!("no slot for {key}"))
}

/// Three masters, each behind a proxy it announces.
fn proxied_cluster() -> (PrivateCluster, Vec<Proxy>) {
    let c = PrivateCluster::start(3, 0);
    let proxies: Vec<Proxy> = c.masters.iter().map(|m| Proxy::start(&format!("127.0.0.1:{}", m.port))).collect();
    for (m, p) in c.masters.iter().zip(&proxies) {
        m.cmd(&["CONFIG", "SET", "cluster-announce-port", &p.port().to_string()]);
    }
    let announced = |n: &private_cluster::PrivateRedis| {
        private_cluster::slots(n).is_some_and(|r| r.iter().all(|x| proxies.iter().any(|p| p.port() == x.2)))
    };
    assert!(
        eventually(Duration::from_secs(20), || c.masters.iter().all(announced)),
        "the nodes did not announce the proxies' ports"
    );
    (c, proxies)
}

/// The index of the proxy in front of the master serving `key`.
fn proxy_of(c: &PrivateCluster, proxies: &[Proxy], key: &str) -> usize {
    let slot = slot_number(key);
    let ranges = c.masters.iter().find_map(private_cluster::slots).expect("no node answers CLUSTER SLOTS");
    let port = ranges.iter().find(|r| (r.0..=r.1).contains(&slot)).map(|r| r.2).expect("slot served");
    proxies.iter().position(|p| p.port() == port).expect("served through a proxy")
}

#[test]
fn a_term_on_an_unreachable_node_is_unknown_not_lost_and_never_adopted_twice() {
    let _ = env_logger::builder().is_test(true).try_init();
    let (c, proxies) = proxied_cluster();
    let url = format!("redis+cluster://{}", proxies.iter().map(Proxy::addr).collect::<Vec<_>>().join(","));
    let options = RedisOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let redis = RedisBackend::connect(&url, options).unwrap_or_else(|e| panic!("private cluster: {e}"));
    let backend = Forward::inheriting(Arc::new(redis), Replies::default());
    // Renewals well under a third of the lease: the window of the finding.
    let lease = Duration::from_secs(9);
    let options =
        SessionOptions::builder().lease_duration(lease).renew_interval(Duration::from_millis(250)).build().unwrap();
    let session = Session::open(backend.clone(), options).unwrap();
    let session_node = proxy_of(&c, &proxies, &format!("simba:session:{{{}}}", session.id()));
    let x = loop {
        let x = Name::new(support::unique("unreachable")).unwrap();
        if proxy_of(&c, &proxies, &format!("simba:lease:{{{x}}}")) != session_node {
            break x;
        }
    };
    let node = proxy_of(&c, &proxies, &format!("simba:lease:{{{x}}}"));
    let first = session.lock(x.as_str()).unwrap();
    let t1 = first.token().unwrap();

    // The lease's node is cut from the client; the session's own node still answers.
    proxies[node].stall();
    let from = backend.hook.count();
    let given_up = |replies: &[(Vec<(Name, Token)>, Vec<Name>)]| {
        replies.iter().filter(|(owned, _)| !owned.iter().any(|(n, _)| *n == x)).count()
    };
    // Three successful renewals that could not renew the lease: before the fix the first
    // reported it lost and the third found the given-up term forgotten.
    assert!(
        eventually(lease * 2 / 3, || given_up(&backend.hook.since(from)) >= 3),
        "the renewals did not go on without the unreachable node: {:?}",
        backend.hook.since(from)
    );
    for (owned, unknown) in backend.hook.since(from).iter().filter(|(owned, _)| !owned.iter().any(|(n, _)| *n == x)) {
        assert_eq!(unknown, &vec![x.clone()], "a reply that could not check the lease names it unknown: {owned:?}");
    }

    // The node answers again. A second lock of the name never gets the first handle's term.
    proxies[node].resume();
    match session.try_lock(x.as_str()) {
        Ok(Some(second)) => panic!("the term {t1} was adopted into a second handle (token {:?})", second.token()),
        Ok(None) => panic!("the session's own term was reported busy"),
        Err(e) => assert_eq!(e.kind(), ErrorKind::AlreadyHeld, "{e}"),
    }
    assert_eq!(first.token().ok(), Some(t1), "a lease its node could not confirm is not lost before its deadline");
    // And the first handle's term is renewed again.
    let resumed = backend.hook.count();
    assert!(
        eventually(lease / 2, || backend.hook.since(resumed).iter().any(|(owned, _)| owned.contains(&(x.clone(), t1)))),
        "the lease was not renewed once its node answered: {:?}",
        backend.hook.since(resumed)
    );
    assert_eq!(first.token().ok(), Some(t1));
    first.release().unwrap();
    session.close().unwrap();
}
