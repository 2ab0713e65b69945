//! Finding 2 of issue #36: a Redis Cluster node the client cannot reach. Its leases' renewals
//! fail; after a third of the lease duration the backend's replies leave them out of `owned`
//! and name them `unknown`. Unknown is not lost: the first handle keeps its term until its own
//! deadline, and a term the session gave up there is never adopted again — before the fix the
//! replies left the lease out as if it were gone, the engine reported it lost and, two replies
//! later, forgot the term, so a `lock` that reached the recovered node adopted the same term into
//! a second handle.
//!
//! A private cluster of three masters; the lease's master is cut from the client with `iptables`
//! (its client port's packets dropped on loopback, its cluster bus left alone). Needs root
//! (tests/support/netfault.rs): fails with what to do otherwise, never skips.
#![cfg(all(feature = "redis", feature = "tck"))]

mod support;

#[path = "redis_private_cluster.rs"]
mod private_cluster;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use private_cluster::PrivateCluster;
use redis::cluster_routing::Slot;
use simba::backend::KeepAlive;
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::tck::eventually;
use simba::{ErrorKind, Name, Session, SessionOptions, Token};
use support::forward::{Forward, Hook, Op};
use support::netfault;

/// A successful keep-alive reply: (owned, unknown).
type Reply = (Vec<(Name, Token)>, Vec<Name>);

/// Records every successful keep-alive reply.
#[derive(Debug, Default)]
struct Replies(Mutex<Vec<Reply>>);

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
    fn since(&self, from: usize) -> Vec<Reply> {
        self.0.lock()[from..].to_vec()
    }
}

fn slot_number(key: &str) -> u16 {
    let slot = Slot::for_key(key);
    (0..16384u16).find(|s| Slot::new(*s) == Some(slot)).unwrap_or_else(|| panic!("no slot for {key}"))
}

/// The port of the master serving `key`.
fn master_port(c: &PrivateCluster, key: &str) -> u16 {
    c.master_of(slot_number(key)).port
}

/// Cuts every TCP packet to and from `port` on loopback (the node's client port; its cluster bus
/// port keeps the cluster whole), until dropped.
fn cut(port: u16) -> netfault::Rules {
    let port = port.to_string();
    netfault::Rules::insert(&[
        &["INPUT", "-i", "lo", "-p", "tcp", "--dport", &port, "-j", "DROP"],
        &["INPUT", "-i", "lo", "-p", "tcp", "--sport", &port, "-j", "DROP"],
    ])
}

#[test]
fn a_term_on_an_unreachable_node_is_unknown_not_lost_and_never_adopted_twice() {
    let _ = env_logger::builder().is_test(true).try_init();
    netfault::require_root("a_term_on_an_unreachable_node_is_unknown_not_lost_and_never_adopted_twice");
    let c = PrivateCluster::start(3, 0);
    let url = c.url();
    let options = RedisOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let redis = RedisBackend::connect(&url, options).unwrap_or_else(|e| panic!("private cluster: {e}"));
    let backend = Forward::inheriting(Arc::new(redis), Replies::default());
    // Renewals well under a third of the lease: the window of the finding.
    let lease = Duration::from_secs(9);
    let options =
        SessionOptions::builder().lease_duration(lease).renew_interval(Duration::from_millis(250)).build().unwrap();
    let session = Session::open(backend.clone(), options).unwrap();
    let session_node = master_port(&c, &format!("simba:session:{{{}}}", session.id()));
    let x = loop {
        let x = Name::new(support::unique("unreachable")).unwrap();
        if master_port(&c, &format!("simba:lease:{{{x}}}")) != session_node {
            break x;
        }
    };
    let node = master_port(&c, &format!("simba:lease:{{{x}}}"));
    let first = session.lock(x.as_str()).unwrap();
    let t1 = first.token().unwrap();

    // The lease's node is cut from the client; the session's own node still answers.
    let partition = cut(node);
    let from = backend.hook.count();
    let given_up = |replies: &[Reply]| replies.iter().filter(|(owned, _)| !owned.iter().any(|(n, _)| *n == x)).count();
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
    partition.remove();
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
