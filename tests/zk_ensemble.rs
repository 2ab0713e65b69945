//! ZooKeeper as users run it: a 3-server ensemble.
//!
//! - `leader_loss_keeps_sessions_and_never_regresses_a_token` stops the leader of a **private**
//!   ensemble (its own ports and directories; the shared ensemble of `scripts/services` is never
//!   stopped, so other tests may use it meanwhile) while sessions hold leases: the sessions move to
//!   the other servers within their timeout, keep their leases and tokens, and every later term
//!   gets a larger token (writes are quorum-committed).
//! - `a_join_or_acquire_through_one_server_is_visible_at_once_through_another` uses the shared
//!   ensemble (`SIMBA_TEST_ZOOKEEPER_ENSEMBLE_URL`), the writer pinned to a follower and the reader
//!   to the leader (while other clients load it):
//!   `members` and `holder` sync first, so what returned on one server is visible on another.
#![cfg(feature = "zookeeper")]

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backend::{Acquire, LeaseBackend};
use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
use simba::{Name, Session, SessionOptions};
use support::zk::PrivateEnsemble;

fn sid(s: &Session) -> u64 {
    u64::from_str_radix(s.id().as_str(), 16).unwrap()
}

#[test]
#[serial_test::serial(zookeeper_private)]
fn leader_loss_keeps_sessions_and_never_regresses_a_token() {
    let _ = env_logger::builder().is_test(true).try_init();
    let mut ens = PrivateEnsemble::start("simba-zk-ensemble");
    let backend = Arc::new(ZookeeperBackend::from_url(&ens.url(), ZookeeperOptions::default()).unwrap());
    let lease_duration = Duration::from_secs(10);
    let opts = SessionOptions::builder()
        .lease_duration(lease_duration)
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap();
    let leader = ens.leader();
    // Sessions holding leases, until at least one is connected to the leader and one to a
    // follower (each client picks a server at random; 40 sessions miss one side with
    // probability below 1e-6).
    let mut held = Vec::new();
    for i in 0..40 {
        let s = Session::open(backend.clone(), opts.clone()).unwrap();
        let lease = s.lock(format!("ens-{i}")).unwrap();
        let t = lease.token().unwrap();
        held.push((s, lease, t));
        let on_leader = ens.members[leader].connected_sessions();
        let (l, f) = held.iter().partition::<Vec<_>, _>(|(s, _, _)| on_leader.contains(&sid(s)));
        if held.len() >= 4 && !l.is_empty() && !f.is_empty() {
            break;
        }
    }
    let on_leader: Vec<u64> = ens.members[leader]
        .connected_sessions()
        .into_iter()
        .filter(|id| held.iter().any(|(s, _, _)| sid(s) == *id))
        .collect();
    assert!(!on_leader.is_empty(), "no session on the leader after {} sessions", held.len());
    let max_before = held.iter().map(|(_, _, t)| *t).max().unwrap();

    ens.members[leader].stop();
    let down = Instant::now();
    // Every session renews again through a surviving server, never expiring, its lease intact.
    for (s, lease, t) in &held {
        support::zk::assert_renewed_after(s, lease, *t, down, "the leader stopped");
    }
    let new_leader = ens.leader();
    assert_ne!(new_leader, leader);
    // The sessions of the stopped server moved to the others.
    let now_on: Vec<u64> = ens
        .members
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != leader)
        .flat_map(|(_, m)| m.connected_sessions())
        .collect();
    for id in &on_leader {
        assert!(now_on.contains(id), "session {id:016x} of the stopped leader is on no surviving server");
    }
    // No token regresses: every new term is larger than every term before the leader change.
    let mut after = HashMap::new();
    for (s, lease, t) in held {
        let name = lease.name().clone();
        lease.release().unwrap();
        let again = s.lock(name.clone()).unwrap();
        let t2 = again.token().unwrap();
        assert!(t2 > max_before, "{name}: token {t2} after the leader change is not above {max_before} (was {t})");
        after.insert(name, t2);
        drop(again);
        s.close().unwrap();
    }
    assert!(!after.is_empty());
}

const DEFAULT_URL: &str = "zookeeper://127.0.0.1:2281,127.0.0.1:2282,127.0.0.1:2283/simba-test";

#[test]
#[serial_test::serial(zookeeper_ensemble)]
fn a_join_or_acquire_through_one_server_is_visible_at_once_through_another() {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_ENSEMBLE_URL", DEFAULT_URL);
    let rest = url.trim_start_matches("zookeeper://");
    let (hosts, root) = rest.split_once('/').map(|(h, r)| (h, format!("/{r}"))).unwrap_or((rest, "/simba-test".into()));
    let hosts: Vec<&str> = hosts.split(',').collect();
    assert!(hosts.len() >= 2, "SIMBA_TEST_ZOOKEEPER_ENSEMBLE_URL must name at least two servers: {url}");
    for h in &hosts {
        support::require_tcp("the ZooKeeper ensemble (scripts/services up zookeeper-ensemble)", h);
    }
    // The reader is pinned to the leader, the writer to a follower: the leader answers a `sync`
    // of its own clients at once, without waiting for the commits it has sent to the followers,
    // so this is where a read can miss a write that already returned on a follower.
    let mode = |h: &str| {
        let (host, port) = h.rsplit_once(':').expect("host:port");
        let out = support::zk::four_letters_at(host, port.parse().expect("port"), "srvr").unwrap_or_default();
        out.lines().find_map(|l| l.strip_prefix("Mode: ")).map(|m| m.trim().to_string())
    };
    let leader = hosts.iter().position(|h| mode(h).as_deref() == Some("leader"));
    let leader = leader.unwrap_or_else(|| panic!("no server of {url} says it leads (srvr); run scripts/services up"));
    let follower = (leader + 1) % hosts.len();
    let root = format!("{root}/{}", support::unique("ens"));
    let pinned = |h: &str| Arc::new(ZookeeperBackend::connect(h, ZookeeperOptions::default().root(&root)).unwrap());
    let (one, other) = (pinned(hosts[follower]), pinned(hosts[leader]));
    let lease = Duration::from_secs(30);
    // Other clients keep the leader's commit queue busy meanwhile (joins and leaves through it).
    let stop = Arc::new(AtomicBool::new(false));
    let load: Vec<_> = (0..3)
        .map(|t| {
            let (b, stop) = (pinned(hosts[leader]), stop.clone());
            std::thread::spawn(move || {
                // Load only: what it gets back is not under test (a call may time out on a busy
                // machine), so its errors are ignored.
                let Ok(s) = b.open_session(lease, "load").map(|g| g.id) else { return };
                let g = Name::new(format!("load{t}")).unwrap();
                while !stop.load(Ordering::Relaxed) {
                    let _ = b.join(&s, &g).and_then(|()| b.leave(&s, &g));
                }
                let _ = b.close_session(&s);
            })
        })
        .collect();
    let s = one.open_session(lease, "joiner").unwrap().id;
    let mut renewed = Instant::now();
    for i in 0..300 {
        // Renewed as the engine would (the watchdog closes a session not renewed within its lease).
        if renewed.elapsed() > lease / 3 {
            assert!(matches!(one.keep_alive(&s, lease).unwrap(), simba::backend::KeepAlive::Alive { .. }));
            renewed = Instant::now();
        }
        let g = Name::new(format!("g{i}")).unwrap();
        one.join(&s, &g).unwrap();
        let members = other.members(&g).unwrap();
        assert_eq!(members.iter().map(|m| &m.session).collect::<Vec<_>>(), vec![&s], "join {i} not visible at once");
        one.leave(&s, &g).unwrap();
        assert!(other.members(&g).unwrap().is_empty(), "leave {i} not visible at once");
        let n = Name::new(format!("l{i}")).unwrap();
        let token = match one.acquire(&s, &n).unwrap() {
            Acquire::Acquired { token, .. } => token,
            Acquire::Busy => panic!("{n} busy"),
        };
        assert_eq!(other.holder(&n).unwrap().map(|h| (h.session, h.token)), Some((s.clone(), token)), "acquire {i}");
        one.release(&s, &n, token).unwrap();
        assert_eq!(other.holder(&n).unwrap(), None, "release {i} not visible at once");
    }
    stop.store(true, Ordering::Relaxed);
    for t in load {
        t.join().unwrap();
    }
    one.close_session(&s).unwrap();
}
