//! ZooKeeper: a keep-alive served by a follower, then a real network partition between that
//! follower and the leader (issue #36, finding 4).
//!
//! A follower touches a session when its client sends anything (the keep-alive's `sync`, the
//! client's idle pings); the leader, whose session tracker alone expires sessions, learns of those
//! touches only from the follower's answers to its pings, every tickTime/2. A request forwarded
//! to the leader (the `sync`, a write) checks the session there but does not touch it. So right
//! after a renewal served by a follower, the leader's last touch of the session can be older than
//! the renewal's send instant by half a tick plus the client's longest idle gap; a follower cut
//! from the leader at that moment lets the leader expire the session before the holder's local
//! deadline (send instant + remaining × (1 − drift)), and a second client takes the lease while
//! the first's `token()` is still Ok — unless the remaining the keep-alive reports subtracts that
//! staleness.
//!
//! A **private** 3-server ensemble with ZooKeeper's default tickTime (2 s; syncLimit 2): server 1
//! runs in its own network namespace (`support::netfault`), servers 2 and 3 on the host, started
//! first so one of them leads. Session A is pinned to server 1 (a follower) and holds a lock;
//! right after one of its renewals (its remaining jumps), every TCP packet between the namespace
//! and the host is dropped but those of server 1's client port (A's connection stays; the
//! follower's quorum and election links to the leader and the other follower are cut). Session B,
//! on the leader, waits for the lock; when it gets it, A's `token()` must already fail. Repeated
//! (a fresh lock and session A each time, the partition healed and server 1 following again in
//! between) for about 45 s: whether a trial can show the gap depends on where the leader's ping
//! rounds and expiry buckets fall, which no client can see. Needs root (namespaces, iptables).
#![cfg(feature = "zookeeper")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
use simba::{Session, SessionOptions, SessionState};
use support::netfault::{self, Netns};
use support::zk::{MemberPorts, PrivateZk, ZkConfig};

const TICK_MS: u32 = 2000;

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Members 2 and 3 on the host (started first: one of them leads), member 1 in `ns`, following.
fn start_ensemble(ns: &Netns) -> Vec<PrivateZk> {
    let ports: Vec<MemberPorts> =
        (0..3).map(|_| MemberPorts { client: free_port(), quorum: free_port(), election: free_port() }).collect();
    let hosts = vec![ns.ns_ip.clone(), ns.host_ip.clone(), ns.host_ip.clone()];
    let mut members: Vec<PrivateZk> = (1..=3)
        .map(|id| {
            PrivateZk::configure(
                "simba-zk-follower",
                ZkConfig {
                    ensemble: Some((id, ports.clone())),
                    tick_ms: Some(TICK_MS),
                    sync_limit: Some(2),
                    member_hosts: hosts.clone(),
                    netns: (id == 1).then(|| ns.name.clone()),
                    ..ZkConfig::default()
                },
            )
        })
        .collect();
    members[1].spawn();
    members[2].spawn();
    members[1].wait_ready();
    members[2].wait_ready();
    members[0].spawn();
    wait_following(&members[0]);
    members
}

fn wait_following(m: &PrivateZk) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while m.mode().as_deref() != Some("follower") {
        assert!(Instant::now() < deadline, "server 1 not following within 60 s: {:?}", m.mode());
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
#[serial_test::serial(zookeeper_private)]
fn a_lease_renewed_through_a_follower_cut_from_the_leader_is_never_taken_while_its_token_is_ok() {
    let _ = env_logger::builder().is_test(true).try_init();
    netfault::require_root("zk_follower");
    let ns = Netns::create(0);
    let members = start_ensemble(&ns);
    let leader = (1..3).find(|&i| members[i].mode().as_deref() == Some("leader")).expect("a leader among 2 and 3");
    let lease_duration = Duration::from_secs(6);
    let opts = SessionOptions::builder()
        .lease_duration(lease_duration)
        .renew_interval(Duration::from_millis(1800))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let on_follower = Arc::new(ZookeeperBackend::from_url(&members[0].url(), ZookeeperOptions::default()).unwrap());
    let on_leader = Arc::new(ZookeeperBackend::from_url(&members[leader].url(), ZookeeperOptions::default()).unwrap());
    let started = Instant::now();
    let mut trials = Vec::new();
    while trials.is_empty() || started.elapsed() < Duration::from_secs(40) {
        let name = support::unique("zkf");
        let a = Session::open(on_follower.clone(), opts.clone()).unwrap();
        let held = a.lock(name.as_str()).unwrap();
        let t1 = held.token().unwrap();
        let b = Session::open(on_leader.clone(), opts.clone()).unwrap();
        // Right after a renewal of A: its remaining jumps up.
        let mut last = a.remaining().unwrap();
        let renewed = loop {
            std::thread::sleep(Duration::from_millis(1));
            let now = a.remaining().expect("A active");
            if now > last + Duration::from_millis(300) {
                break Instant::now();
            }
            last = now;
        };
        let remaining_at_renewal = a.remaining().unwrap();
        let cut = netfault::isolate_except(&ns, members[0].port);
        let cut_after = renewed.elapsed();
        let taken = b.lock_timeout(name.as_str(), Duration::from_secs(20)).unwrap();
        let a_token = held.token();
        let a_remaining = a.remaining();
        let took = renewed.elapsed();
        let line = format!(
            "trial {}: cut {cut_after:?} after A's renewal (A's remaining then {remaining_at_renewal:?}); B took the \
             lock {took:?} after the renewal; A's token() then {a_token:?}, its remaining {a_remaining:?}",
            trials.len() + 1
        );
        eprintln!("{line}");
        let lease_b = taken.expect("B never got the lock: A's session did not expire at the leader");
        assert!(lease_b.token().unwrap() > t1);
        assert!(
            a_token.is_err(),
            "B holds the lock (token {}) while A's token() is still Ok ({t1}): {line}",
            lease_b.token().unwrap()
        );
        trials.push(line);
        lease_b.release().unwrap();
        b.close().unwrap();
        cut.remove();
        drop(held);
        let deadline = Instant::now() + lease_duration * 2;
        while a.state() == SessionState::Active {
            assert!(Instant::now() < deadline, "A still active after its lease");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(a);
        wait_following(&members[0]);
    }
    eprintln!("{} trials in {:?}", trials.len(), started.elapsed());
}
