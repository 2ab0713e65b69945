//! A private etcd cluster for fault tests (never the shared members of `scripts/services`): `n`
//! members on loopback, member `i` serving clients on `base_port + 2i` and its peers on
//! `base_port + 2i + 1`, with a fast raft clock (heartbeat 50 ms, election timeout 500 ms, so
//! etcd's minimum lease TTL is 1 s), and the extra server flags a test asks for
//! ([`EtcdCluster::start_with`]). A test kills, restarts, pauses and resumes members; on drop
//! every member is resumed, killed, and its data directory removed, also when the test fails.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::sys::signal::Signal;

use super::server::{wait_stopped, ServerProcess};

/// The raft election timeout of the private members.
pub const ELECTION_TIMEOUT: Duration = Duration::from_millis(500);
/// The raft heartbeat interval of the private members.
pub const HEARTBEAT: Duration = Duration::from_millis(50);

/// A running private cluster.
pub struct EtcdCluster {
    base: PathBuf,
    base_port: u16,
    /// Server flags every member gets on top of the common ones.
    extra: Vec<String>,
    members: Vec<ServerProcess>,
    paused: Vec<bool>,
}

impl EtcdCluster {
    /// Starts `n` members on ports from `base_port` and waits until every one is healthy (a
    /// quorum answers through it).
    pub fn start(base_port: u16, n: usize) -> EtcdCluster {
        EtcdCluster::start_with(base_port, n, &[])
    }

    /// Like [`EtcdCluster::start`], every member also started (and restarted) with the server
    /// flags `extra` (e.g. `["--auth-token-ttl", "1"]`).
    pub fn start_with(base_port: u16, n: usize, extra: &[&str]) -> EtcdCluster {
        let base = std::env::temp_dir().join(format!("simba-etcd-private-{base_port}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        std::fs::create_dir_all(&base).unwrap();
        let members = (0..n).map(|i| ServerProcess::new(base.join(format!("m{i}")))).collect();
        let mut cluster = EtcdCluster {
            base,
            base_port,
            extra: extra.iter().map(|a| a.to_string()).collect(),
            members,
            paused: vec![false; n],
        };
        for i in 0..n {
            cluster.spawn(i);
        }
        for i in 0..n {
            cluster.wait_healthy(i);
        }
        cluster
    }

    fn client_port(&self, i: usize) -> u16 {
        self.base_port + 2 * i as u16
    }

    fn peer_url(&self, i: usize) -> String {
        format!("http://127.0.0.1:{}", self.base_port + 2 * i as u16 + 1)
    }

    /// Starts member `i` (its data directory kept across restarts: a restart rejoins the cluster).
    fn spawn(&mut self, i: usize) {
        let initial: Vec<String> = (0..self.members.len()).map(|j| format!("m{j}={}", self.peer_url(j))).collect();
        let dir = self.members[i].dir.clone();
        std::fs::create_dir_all(&dir).unwrap();
        let client = format!("http://{}", self.addr(i));
        let log = std::fs::OpenOptions::new().create(true).append(true).open(dir.join("etcd.log")).unwrap();
        let child = Command::new("etcd")
            .args(["--name", &format!("m{i}"), "--data-dir"])
            .arg(dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &self.peer_url(i), "--initial-advertise-peer-urls", &self.peer_url(i)])
            .args(["--initial-cluster", &initial.join(","), "--initial-cluster-state", "new"])
            .args(["--initial-cluster-token", &format!("simba-private-{}", self.base_port)])
            .args(["--heartbeat-interval", &HEARTBEAT.as_millis().to_string()])
            .args(["--election-timeout", &ELECTION_TIMEOUT.as_millis().to_string()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("etcd is missing: run `scripts/services up etcd` (it installs etcd-server)");
        self.members[i].running(child);
        self.paused[i] = false;
    }

    /// Member `i`'s client address, `127.0.0.1:port`.
    pub fn addr(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.client_port(i))
    }

    /// Every member's client address.
    pub fn addrs(&self) -> Vec<String> {
        (0..self.members.len()).map(|i| self.addr(i)).collect()
    }

    /// Waits (at most 20 s) until member `i` answers a linearizable read: it is up and in a quorum.
    pub fn wait_healthy(&mut self, i: usize) {
        let addr = self.addr(i);
        let ok = super::eventually(Duration::from_secs(20), || {
            etcdctl(&addr, &["--command-timeout", "1s", "endpoint", "health"]).is_some()
        });
        let log = self.members[i].dir.join("etcd.log");
        assert!(ok && !self.members[i].exited(), "private etcd member {i} is not healthy; see {}", log.display());
    }

    /// The index of the member every reachable member names as the leader, once they agree (at
    /// most 20 s).
    pub fn leader(&self) -> usize {
        let mut found = None;
        let ok = super::eventually(Duration::from_secs(20), || {
            found = self.agreed_leader();
            found.is_some()
        });
        assert!(ok, "the private etcd members never agreed on a leader");
        found.unwrap_or_default()
    }

    /// The agreed leader (as [`EtcdCluster::leader`]) and the other members, the followers, in
    /// ring order after it (`leader + 1`, `leader + 2`… modulo the size).
    pub fn roles(&self) -> (usize, Vec<usize>) {
        let leader = self.leader();
        let n = self.members.len();
        (leader, (1..n).map(|k| (leader + k) % n).collect())
    }

    /// Starts 3 members on ports from `base_port` and kills a follower (`SIGKILL`) once they agree
    /// on a leader: the cluster and the dead member.
    pub fn with_a_dead_follower(base_port: u16) -> (EtcdCluster, usize) {
        let mut cluster = EtcdCluster::start(base_port, 3);
        let dead = cluster.roles().1[0];
        cluster.kill(dead);
        (cluster, dead)
    }

    fn agreed_leader(&self) -> Option<usize> {
        let mut ids = Vec::new(); // (member index, its id, the leader it names)
        for i in (0..self.members.len()).filter(|i| self.is_up(*i)) {
            let out = etcdctl(&self.addr(i), &["--command-timeout", "1s", "endpoint", "status", "-w", "json"])?;
            let v: serde_json::Value = serde_json::from_str(&out).ok()?;
            let status = &v.get(0)?["Status"];
            ids.push((i, status["header"]["member_id"].as_u64()?, status["leader"].as_u64()?));
        }
        let leader = ids.first()?.2;
        if leader == 0 || ids.iter().any(|(_, _, l)| *l != leader) {
            return None;
        }
        ids.iter().find(|(_, id, _)| *id == leader).map(|(i, _, _)| *i)
    }

    fn is_up(&self, i: usize) -> bool {
        self.members[i].pid().is_some() && !self.paused[i]
    }

    /// Kills member `i` (`SIGKILL`: a crash).
    pub fn kill(&mut self, i: usize) {
        self.members[i].kill();
        self.paused[i] = false;
    }

    /// Restarts member `i` after [`EtcdCluster::kill`] and waits until it is healthy again.
    pub fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_healthy(i);
    }

    /// Pauses member `i` (`SIGSTOP`: connections stay open, nothing answers); returns once every
    /// one of its threads is stopped.
    pub fn pause(&mut self, i: usize) {
        let pid = self.members[i].pid().expect("a running member");
        self.paused[i] = true;
        assert!(self.members[i].signal(Signal::SIGSTOP));
        wait_stopped(pid);
    }

    /// Resumes member `i` after [`EtcdCluster::pause`].
    pub fn resume(&mut self, i: usize) {
        self.members[i].signal(Signal::SIGCONT);
        self.paused[i] = false;
    }

    /// An `etcd://` URL of the members `which`, prefix `prefix`.
    pub fn url(&self, which: &[usize], prefix: &str) -> String {
        let hosts: Vec<String> = which.iter().map(|i| self.addr(*i)).collect();
        format!("etcd://{}/{prefix}", hosts.join(","))
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for m in &self.members {
            // A paused member must run again to die cleanly (SIGKILL works anyway; be explicit).
            m.signal(Signal::SIGCONT);
        }
        self.members.clear();
        let _ = std::fs::remove_dir_all(&self.base);
    }
}

/// `etcdctl --endpoints addr args…`'s stdout when it succeeds.
pub fn etcdctl(addr: &str, args: &[&str]) -> Option<String> {
    let out = run_etcdctl(addr, args);
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `etcdctl --endpoints addr args…`'s stdout; panics with its stderr unless it succeeds.
pub fn etcdctl_ok(addr: &str, args: &[&str]) -> String {
    let out = run_etcdctl(addr, args);
    assert!(out.status.success(), "etcdctl {args:?} at {addr}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run_etcdctl(addr: &str, args: &[&str]) -> std::process::Output {
    Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", addr])
        .args(args)
        .output()
        .expect("etcdctl is missing: run `scripts/services up etcd` (it installs etcd-client)")
}
