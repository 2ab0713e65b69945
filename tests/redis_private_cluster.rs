//! A private Redis Cluster for tests that freeze, reshard or fail over nodes (never the shared
//! cluster): masters sharing the 16384 slots evenly, optionally with replicas, each node a
//! [`PrivateRedis`] on its own ports and data directory, killed (after a `SIGCONT`) on drop, so a
//! frozen node never outlives its test. Included by other tests with
//! `#[path = "redis_private_cluster.rs"] mod private_cluster;`; compiled alone it tests itself.
#![cfg(feature = "redis")]
#![allow(dead_code)]

#[path = "redis_private.rs"]
pub mod private;

use std::thread;
use std::time::{Duration, Instant};

pub use private::PrivateRedis;

/// The nodes of a private cluster.
pub struct PrivateCluster {
    /// The masters; master `i` serves the `i`-th even share of the slots.
    pub masters: Vec<PrivateRedis>,
    /// The replicas; replica `j` replicates master `j % masters.len()`.
    pub replicas: Vec<PrivateRedis>,
}

impl PrivateCluster {
    /// Starts `masters` masters and `replicas` replicas (spread over the masters) and waits until
    /// every node reports `cluster_state:ok` with every master in its slot map, and every replica
    /// is linked to its master.
    pub fn start(masters: usize, replicas: usize) -> PrivateCluster {
        assert!(masters >= 1);
        let node = || {
            let bus = private::free_port().to_string();
            PrivateRedis::start(&[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                "--cluster-port",
                &bus,
                // Longer than any freeze a test makes: a frozen node is never failed over.
                "--cluster-node-timeout",
                "30000",
                "--cluster-announce-ip",
                "127.0.0.1",
            ])
        };
        let c = PrivateCluster {
            masters: (0..masters).map(|_| node()).collect(),
            replicas: (0..replicas).map(|_| node()).collect(),
        };
        let per = 16384 / masters;
        for (i, m) in c.masters.iter().enumerate() {
            let first = i * per;
            let last = if i + 1 == masters { 16383 } else { first + per - 1 };
            m.cmd(&["CLUSTER", "SET-CONFIG-EPOCH", &(i + 1).to_string()]);
            m.cmd(&["CLUSTER", "ADDSLOTSRANGE", &first.to_string(), &last.to_string()]);
        }
        let all = c.nodes().count();
        for n in c.nodes().skip(1) {
            let bus = n.cmd(&["CONFIG", "GET", "cluster-port"]);
            let bus = bus.lines().nth(1).unwrap_or_default().to_string();
            c.masters[0].cmd(&["CLUSTER", "MEET", "127.0.0.1", &n.port.to_string(), &bus]);
        }
        c.wait("every node knows every other", |n| {
            let nodes = n.try_cmd(&["CLUSTER", "NODES"]).unwrap_or_default();
            nodes.lines().count() == all && !nodes.contains("handshake") && !nodes.contains("noaddr")
        });
        for (j, r) in c.replicas.iter().enumerate() {
            let master = c.id(&c.masters[j % masters]);
            r.cmd(&["CLUSTER", "REPLICATE", &master]);
        }
        // (A replica enters `CLUSTER SLOTS` only seconds after it synced; not waited for.)
        c.wait("cluster_state:ok everywhere, with every master in the slot map", |n| {
            let ok = n.try_cmd(&["CLUSTER", "INFO"]).is_some_and(|i| i.contains("cluster_state:ok"));
            ok && slots(n).is_some_and(|r| r.len() == masters)
        });
        c.wait("replicas in sync", |n| {
            let role = n.try_cmd(&["ROLE"]).unwrap_or_default();
            !role.starts_with("slave") || role.lines().nth(3) == Some("connected")
        });
        c
    }

    fn wait(&self, what: &str, mut ok: impl FnMut(&PrivateRedis) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.nodes().all(&mut ok) {
            assert!(Instant::now() < deadline, "private cluster: timed out waiting until {what}");
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Masters, then replicas.
    pub fn nodes(&self) -> impl Iterator<Item = &PrivateRedis> {
        self.masters.iter().chain(&self.replicas)
    }

    /// `redis+cluster://` URL of every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.nodes().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", hosts.join(","))
    }

    /// The node's cluster id.
    pub fn id(&self, node: &PrivateRedis) -> String {
        node.cmd(&["CLUSTER", "MYID"])
    }

    /// The node serving `slot` as master right now, by the slot map of the first node that answers.
    pub fn master_of(&self, slot: u16) -> &PrivateRedis {
        let ranges = self.nodes().find_map(slots).expect("no node answers CLUSTER SLOTS");
        let port = ranges.iter().find(|r| (r.0..=r.1).contains(&slot)).map(|r| r.2);
        self.nodes().find(|n| Some(n.port) == port).unwrap_or_else(|| panic!("no node serves slot {slot}"))
    }

    /// Freezes every node (`SIGSTOP`); [`thaw`](PrivateCluster::thaw) or drop resumes them.
    pub fn freeze(&self) {
        for n in self.nodes() {
            n.pause();
        }
    }

    /// Resumes every node.
    pub fn thaw(&self) {
        for n in self.nodes() {
            n.resume();
        }
    }
}

/// `(first slot, last slot, master port, replica ports)` of each slot range.
pub type Ranges = Vec<(u16, u16, u16, Vec<u16>)>;

/// The slot ranges from the node's `CLUSTER SLOTS`.
pub fn slots(node: &PrivateRedis) -> Option<Ranges> {
    let client = redis::Client::open(node.url()).ok()?;
    let mut con = client.get_connection_with_timeout(Duration::from_millis(500)).ok()?;
    con.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let ranges: Vec<Vec<redis::Value>> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).ok()?;
    let port = |v: &redis::Value| -> Option<u16> {
        let node: Vec<redis::Value> = redis::from_redis_value(v.clone()).ok()?;
        redis::from_redis_value(node.get(1)?.clone()).ok()
    };
    ranges
        .iter()
        .map(|r| {
            Some((
                redis::from_redis_value(r.first()?.clone()).ok()?,
                redis::from_redis_value(r.get(1)?.clone()).ok()?,
                port(r.get(2)?)?,
                r[3..].iter().map(port).collect::<Option<Vec<u16>>>()?,
            ))
        })
        .collect()
}

#[test]
fn a_private_cluster_serves_every_slot() {
    let c = PrivateCluster::start(2, 1);
    for slot in [0u16, 8191, 8192, 16383] {
        let m = c.master_of(slot);
        assert!(c.masters.iter().any(|x| x.port == m.port), "slot {slot} served by a replica");
    }
    assert_ne!(c.master_of(0).port, c.master_of(16383).port);
    let role = c.replicas[0].cmd(&["ROLE"]);
    assert!(role.starts_with("slave"), "{role}");
}
