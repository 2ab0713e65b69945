//! Redis Cluster notifications through sharded pub/sub (issue #19): a release or join is
//! `SPUBLISH`ed on the key's own channel by the script on the key's master, and the backend
//! `SSUBSCRIBE`s that channel on that master — no plain subscription anywhere, so no message
//! crosses the cluster bus. After the slot moves, Redis ends the subscription (`sunsubscribe`):
//! the watcher is woken and its next registration subscribes on the new master.
//!
//! Every notification asserted here has one possible cause: a registration is first woken by its
//! subscription's confirmation (the backend's "re-check now"), and only the registration made
//! after that is waited on, so it can only be served by a message on the subscribed channel (a
//! registration is forgotten only after 10 s without renewal, longer than any wait here).
#![cfg(all(feature = "redis", feature = "tck"))]

mod support;

use support::redis_cluster_nodes as shared_nodes;

#[path = "redis_private_cluster.rs"]
mod private_cluster;

use std::time::Duration;

use crossbeam_channel::Receiver;
use serial_test::serial;
use simba::backend::{Acquire, LeaseBackend, Notification, Topic};
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::tck::eventually;
use simba::Name;

use private_cluster::PrivateCluster;

fn options() -> RedisOptions {
    RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap()
}

/// Runs a command on the node at `addr` (`host:port`).
fn on(addr: &str, args: &[&str]) -> redis::Value {
    let client = redis::Client::open(format!("redis://{addr}")).unwrap();
    let mut con = client.get_connection_with_timeout(Duration::from_secs(1)).unwrap();
    con.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    cmd.query(&mut con).unwrap_or_else(|e| panic!("{addr}: {args:?} failed: {e}"))
}

/// `(first slot, last slot, master, every node)` of each range, by `addr`'s `CLUSTER SLOTS`.
fn ranges(addr: &str) -> Vec<(u16, u16, String, Vec<String>)> {
    let v: Vec<Vec<redis::Value>> = redis::from_redis_value(on(addr, &["CLUSTER", "SLOTS"])).unwrap();
    let node = |v: &redis::Value| -> String {
        let parts: Vec<redis::Value> = redis::from_redis_value(v.clone()).unwrap();
        let host: String = redis::from_redis_value(parts[0].clone()).unwrap();
        let port: u16 = redis::from_redis_value(parts[1].clone()).unwrap();
        format!("{host}:{port}")
    };
    v.iter()
        .map(|r| {
            let first: u16 = redis::from_redis_value(r[0].clone()).unwrap();
            let last: u16 = redis::from_redis_value(r[1].clone()).unwrap();
            (first, last, node(&r[2]), r[2..].iter().map(node).collect())
        })
        .collect()
}

fn keyslot(addr: &str, key: &str) -> u16 {
    redis::from_redis_value(on(addr, &["CLUSTER", "KEYSLOT", key])).unwrap()
}

/// `PUBSUB SHARDNUMSUB` (`sharded`) or `PUBSUB NUMSUB` of `channel` on the node at `addr`.
fn subscribers(addr: &str, channel: &str, sharded: bool) -> i64 {
    let sub = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
    let v: Vec<redis::Value> = redis::from_redis_value(on(addr, &["PUBSUB", sub, channel])).unwrap();
    redis::from_redis_value(v[1].clone()).unwrap()
}

fn lease_channel(n: &Name) -> String {
    format!("simba:lease:{{{n}}}")
}

/// Registers on `topic` and waits for the wake of its subscription's confirmation; then
/// registers again, so the next notification can only come from a message.
fn subscribed(b: &RedisBackend, topic: &Topic) -> Receiver<Notification> {
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(topic, &tx).unwrap());
    rx.recv_timeout(Duration::from_secs(5)).expect("no wake once the channel was subscribed");
    assert!(b.watch(topic, &tx).unwrap());
    assert!(rx.try_recv().is_err(), "woken again without a message");
    rx
}

const WAIT: Duration = Duration::from_secs(3);

#[test]
#[serial(redis_cluster)]
fn releases_and_joins_arrive_through_a_sharded_subscription_on_the_keys_master() {
    let _ = env_logger::builder().is_test(true).try_init();
    let seeds = shared_nodes();
    let url = format!("redis+cluster://{}", seeds.join(","));
    let b = RedisBackend::connect(&url, options()).unwrap();
    let map = ranges(&seeds[0]);
    let all: Vec<String> = {
        let mut v: Vec<String> = map.iter().flat_map(|r| r.3.clone()).collect();
        v.sort();
        v.dedup();
        v
    };
    let master_of = |key: &str| {
        let s = keyslot(&seeds[0], key);
        map.iter().find(|r| (r.0..=r.1).contains(&s)).map(|r| r.2.clone()).unwrap()
    };

    let l = Name::new(support::unique("shardpub")).unwrap();
    let channel = lease_channel(&l);
    let x = master_of(&channel);
    let rx = subscribed(&b, &Topic::Lease(l.clone()));
    // A shard message published on the lease's master alone reaches the watcher...
    let _ = on(&x, &["SPUBLISH", &channel, "released"]);
    assert_eq!(rx.recv_timeout(WAIT), Ok(Notification::Released(l.clone())), "no shard message from {x}");
    // ... through a sharded subscription there; there is no plain subscription on any node.
    assert_eq!(subscribers(&x, &channel, true), 1, "no sharded subscription on the lease's master {x}");
    for n in &all {
        assert_eq!(subscribers(n, &channel, false), 0, "a plain subscription on {n}");
    }

    // A real release, by another backend: its release_slot.lua SPUBLISHes on the lease's master.
    let other = RedisBackend::connect(&url, options()).unwrap();
    let sid = other.open_session(Duration::from_secs(5), "").unwrap().id;
    let Acquire::Acquired { token, .. } = other.acquire(&sid, &l).unwrap() else { panic!("not acquired") };
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    assert!(rx.try_recv().is_err(), "woken before the release");
    other.release(&sid, &l, token).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Notification::Released(l.clone()));

    // A join on Cluster (join_group.lua) SPUBLISHes on the group's master.
    let g = Name::new(support::unique("shardpub-g")).unwrap();
    let rx = subscribed(&b, &Topic::Group(g.clone()));
    let group_channel = format!("simba:group:{{{g}}}");
    assert_eq!(subscribers(&master_of(&group_channel), &group_channel, true), 1);
    other.join(&sid, &g).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Notification::MembersChanged(g.clone()));
    other.close_session(&sid).unwrap();
}

#[test]
fn after_its_slot_moves_a_watcher_is_woken_and_subscribes_on_the_new_master() {
    let _ = env_logger::builder().is_test(true).try_init();
    let c = PrivateCluster::start(2, 0);
    let url = c.url();
    let b = RedisBackend::connect(&url, options()).unwrap();
    let l = Name::new(support::unique("shardmove")).unwrap();
    let channel = lease_channel(&l);
    let s = keyslot(&format!("127.0.0.1:{}", c.masters[0].port), &channel);
    let from = c.master_of(s);
    let to = c.masters.iter().find(|m| m.port != from.port).unwrap();
    let (from_addr, to_addr) = (format!("127.0.0.1:{}", from.port), format!("127.0.0.1:{}", to.port));

    let rx = subscribed(&b, &Topic::Lease(l.clone()));
    assert_eq!(subscribers(&from_addr, &channel, true), 1);

    // Move the (empty) slot to the other master.
    let (from_id, to_id) = (c.id(from), c.id(to));
    let slot = s.to_string();
    to.cmd(&["CLUSTER", "SETSLOT", &slot, "IMPORTING", &from_id]);
    from.cmd(&["CLUSTER", "SETSLOT", &slot, "MIGRATING", &to_id]);
    from.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    to.cmd(&["CLUSTER", "SETSLOT", &slot, "NODE", &to_id]);
    // Redis ended the subscription (sunsubscribe): the watcher is woken, as messages may be missed.
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Notification::Released(l.clone()));
    assert_eq!(subscribers(&from_addr, &channel, true), 0);

    // Registered again, it subscribes on the new master and is served from there.
    let rx = subscribed(&b, &Topic::Lease(l.clone()));
    assert_eq!(subscribers(&to_addr, &channel, true), 1, "not resubscribed on the slot's new master");
    let _ = on(&to_addr, &["SPUBLISH", &channel, "released"]);
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Notification::Released(l.clone()));

    // A release on the new master reaches a watcher.
    let other = RedisBackend::connect(&url, options()).unwrap();
    let sid = other.open_session(Duration::from_secs(5), "").unwrap().id;
    let Acquire::Acquired { token, .. } = other.acquire(&sid, &l).unwrap() else { panic!("not acquired") };
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    other.release(&sid, &l, token).unwrap();
    assert_eq!(rx.recv_timeout(WAIT).unwrap(), Notification::Released(l.clone()));
    other.close_session(&sid).unwrap();
    drop(b);
    // The backend's subscribers leave with it.
    assert!(eventually(Duration::from_secs(3), || subscribers(&to_addr, &channel, true) == 0));
}
