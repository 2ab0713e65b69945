//! Permanent errors fail at once, in the server's own words and with what to change: refused
//! credentials (`NOAUTH`, `WRONGPASS`, an unknown ACL user), missing ACL permissions (`NOPERM`),
//! a Redis Cluster node given as a standalone server (`redis://` → "use redis+cluster://") and a
//! standalone server given as a cluster node — on standalone and Cluster, from `connect`, from
//! later calls, from `check()` and from `simba check`. The pub/sub thread warns once per failing
//! cause, not once per retry.
//!
//! Private `redis-server`s with `--requirepass` and ACL users on their own ports; the shared
//! cluster (`SIMBA_TEST_REDIS_CLUSTER_URL`) and standalone server (`SIMBA_TEST_REDIS_URL`) only
//! for read-only probes.
#![cfg(feature = "redis")]

#[path = "redis_private_cluster.rs"]
mod private_cluster;
mod support;

use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use private_cluster::{PrivateCluster, PrivateRedis};
use serial_test::serial;
use simba::backend::{CheckStatus, LeaseBackend, Topic};
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::{ErrorKind, Name};

/// Long enough that "at once" cannot be confused with "after the query timeout".
const QT: Duration = Duration::from_secs(20);
const ADMIN_PW: &str = "admin-pw-7f3a";
const ALICE_PW: &str = "alice-pw-91c2";
const WRONG_PW: &str = "wrong-pw-5d0e";

/// Records every log line of this test binary (the pub/sub thread's warnings are counted).
struct Capture;

static LINES: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.target().starts_with("simba")
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            LINES.lock().unwrap_or_else(|e| e.into_inner()).push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

fn init_log() {
    static LOGGER: Capture = Capture;
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
}

fn lines(level: log::Level, containing: &[&str]) -> usize {
    LINES
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(l, m)| *l == level && containing.iter().all(|c| m.contains(c)))
        .count()
}

fn options() -> RedisOptions {
    RedisOptions::builder().query_timeout(QT).build().unwrap()
}

/// A private server with a password for the default user, ACL user `alice` with every right and
/// ACL user `limited`, who may connect and run the startup checks but not the scripts and not
/// subscribe.
fn secured() -> PrivateRedis {
    PrivateRedis::start(&[
        "--requirepass",
        ADMIN_PW,
        "--user",
        "alice",
        "on",
        &format!(">{ALICE_PW}"),
        "~*",
        "&*",
        "+@all",
        "--user",
        "limited",
        "on",
        &format!(">{ALICE_PW}"),
        "~*",
        "resetchannels",
        "+ping",
        "+info",
        "+config|get",
        "+client",
        "+time",
    ])
}

fn admin(r: &PrivateRedis, args: &[&str]) -> String {
    let client = redis::Client::open(format!("redis://:{ADMIN_PW}@127.0.0.1:{}", r.port)).unwrap();
    let mut con = client.get_connection_with_timeout(Duration::from_secs(2)).unwrap();
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let v: redis::Value = cmd.query(&mut con).unwrap();
    private_cluster::private::value_string(&v)
}

/// `connect(url)` fails: its error, which must be permanent, quick, and never show a password.
fn refused(url: &str) -> simba::Error {
    let started = Instant::now();
    let err = match RedisBackend::connect(url, options()) {
        Ok(b) => panic!("{url}: connected ({b:?}), expected a refusal"),
        Err(e) => e,
    };
    let took = started.elapsed();
    let shown = simba::display_chain(&err);
    assert!(!err.is_retryable(), "{url}: a refusal is permanent, got {:?}: {shown}", err.kind());
    assert!(took < QT / 4, "{url}: took {took:?} (query timeout {QT:?}): {shown}");
    for pw in [ADMIN_PW, ALICE_PW, WRONG_PW] {
        assert!(!shown.contains(pw), "{url}: the password shows: {shown}");
    }
    err
}

fn assert_says(err: &simba::Error, kind: ErrorKind, words: &[&str]) {
    let shown = simba::display_chain(err);
    assert_eq!(err.kind(), kind, "{shown}");
    for w in words {
        assert!(shown.contains(w), "expected {w:?} in: {shown}");
    }
}

const NOAUTH: &str = "NOAUTH Authentication required";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled";
const PUT_IT_IN_THE_URL: &str = "redis://:password@host:port";
const FIX_THE_URL: &str = "redis://user:password@host:port";

#[test]
#[serial(redis_errors)]
fn refused_credentials_fail_at_once_in_the_servers_words() {
    init_log();
    let r = secured();
    let url = |auth: &str| format!("redis://{auth}127.0.0.1:{}", r.port);
    assert_says(&refused(&url("")), ErrorKind::Backend, &[NOAUTH, PUT_IT_IN_THE_URL]);
    assert_says(&refused(&url(&format!(":{WRONG_PW}@"))), ErrorKind::Backend, &[WRONGPASS, FIX_THE_URL]);
    // An unknown ACL user: Redis answers as for a wrong password (it does not tell which).
    assert_says(&refused(&url(&format!("nobody:{ALICE_PW}@"))), ErrorKind::Backend, &[WRONGPASS, FIX_THE_URL]);
    assert_says(&refused(&url(&format!("alice:{WRONG_PW}@"))), ErrorKind::Backend, &[WRONGPASS, FIX_THE_URL]);
    // A password for a server that has none (the shared one).
    let host = standalone_host();
    let err = refused(&format!("redis://:{WRONG_PW}@{host}"));
    assert_says(&err, ErrorKind::Backend, &["called without any password configured", FIX_THE_URL]);

    let b = RedisBackend::connect(&url(&format!("alice:{ALICE_PW}@")), options()).unwrap();
    let sid = b.open_session(Duration::from_secs(5), "").unwrap().id;
    b.acquire(&sid, &Name::new(support::unique("auth")).unwrap()).unwrap();

    // The password changes under a running backend: the next call that needs a new connection
    // fails at once, in the server's words, and so does check().
    admin(&r, &["ACL", "SETUSER", "alice", "resetpass", ">another-pw-0a9b"]);
    admin(&r, &["CLIENT", "KILL", "USER", "alice"]);
    let started = Instant::now();
    let err = b.open_session(Duration::from_secs(5), "").unwrap_err();
    assert!(started.elapsed() < QT / 4, "took {:?}", started.elapsed());
    assert_says(&err, ErrorKind::Backend, &[WRONGPASS, FIX_THE_URL]);
    let items = b.check();
    let reachable = items.iter().find(|i| i.name == "reachable").unwrap();
    assert_eq!(reachable.status, CheckStatus::Fail, "{items:?}");
    assert!(reachable.detail.contains(WRONGPASS) && reachable.detail.contains(FIX_THE_URL), "{reachable:?}");
}

#[test]
#[serial(redis_errors)]
fn missing_permissions_fail_at_once_and_the_subscriber_warns_once_per_cause() {
    init_log();
    let r = secured();
    let b = RedisBackend::connect(&format!("redis://limited:{ALICE_PW}@127.0.0.1:{}", r.port), options()).unwrap();
    let started = Instant::now();
    let err = b.open_session(Duration::from_secs(5), "").unwrap_err();
    assert!(started.elapsed() < QT / 4, "took {:?}", started.elapsed());
    assert_says(&err, ErrorKind::Backend, &["NOPERM", "grant it", "docs/backends/redis.md"]);

    // The subscriber may not subscribe: it retries with backoff, and warns once for the cause.
    let (tx, _rx) = crossbeam_channel::unbounded();
    b.watch(&Topic::Lease(Name::new(support::unique("perm")).unwrap()), &tx).unwrap();
    let port = r.port.to_string();
    let failures =
        || lines(log::Level::Warn, &["pub/sub", &port]) + lines(log::Level::Debug, &["pub/sub", &port, "again"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while failures() < 4 {
        assert!(
            Instant::now() < deadline,
            "the subscriber did not retry: {:?}",
            LINES.lock().unwrap_or_else(|e| e.into_inner())
        );
        thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(
        lines(log::Level::Warn, &["pub/sub", &port]),
        1,
        "one warning per cause: {:?}",
        LINES.lock().unwrap_or_else(|e| e.into_inner())
    );
    assert_eq!(lines(log::Level::Warn, &["pub/sub", &port, "NOPERM"]), 1, "in the server's words");
}

fn cluster_hosts() -> Vec<String> {
    let url =
        support::env_or("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    let hosts: Vec<String> = url.trim_start_matches("redis+cluster://").split(',').map(str::to_string).collect();
    support::require_tcp("Redis Cluster", &hosts[0]);
    hosts
}

fn standalone_host() -> String {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    let host = url.trim_start_matches("redis://").split('/').next().unwrap_or_default().to_string();
    support::require_tcp("Redis", &host);
    host
}

#[test]
#[serial(redis_errors)]
fn cluster_refusals_fail_at_once_in_the_servers_words() {
    init_log();
    // The shared cluster has no password: an unknown ACL user is refused by every node.
    let hosts = cluster_hosts().join(",");
    let err = refused(&format!("redis+cluster://nobody:{WRONG_PW}@{hosts}"));
    assert_says(&err, ErrorKind::Backend, &[WRONGPASS, FIX_THE_URL]);

    // A private one-master cluster with a password.
    let c = PrivateCluster::start(1, 0);
    let port = c.masters[0].port;
    c.masters[0].cmd(&["CONFIG", "SET", "requirepass", ADMIN_PW]);
    let url = |auth: &str| format!("redis+cluster://{auth}127.0.0.1:{port}");
    assert_says(&refused(&url("")), ErrorKind::Backend, &[NOAUTH, PUT_IT_IN_THE_URL]);
    assert_says(&refused(&url(&format!(":{WRONG_PW}@"))), ErrorKind::Backend, &[WRONGPASS, FIX_THE_URL]);
    let b = RedisBackend::connect(&url(&format!(":{ADMIN_PW}@")), options()).unwrap();
    let sid = b.open_session(Duration::from_secs(5), "").unwrap().id;
    b.acquire(&sid, &Name::new(support::unique("auth")).unwrap()).unwrap();
}

#[test]
#[serial(redis_errors)]
fn a_cluster_node_given_as_a_standalone_server_is_refused_with_the_url_to_use() {
    init_log();
    let node = cluster_hosts()[0].clone();
    let err = refused(&format!("redis://{node}"));
    assert_says(&err, ErrorKind::InvalidConfig, &["is a Redis Cluster node", &format!("redis+cluster://{node}")]);
    // And the other way round: a standalone server given as a cluster node.
    let host = standalone_host();
    let err = refused(&format!("redis+cluster://{host}"));
    assert_says(&err, ErrorKind::InvalidConfig, &["is not a Redis Cluster node", &format!("redis://{host}")]);
}

/// `simba check` with `url`: (exit code, stdout + stderr).
fn simba_check(url: &str) -> (i32, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_simba"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SIMBA_") {
            c.env_remove(k);
        }
    }
    c.env("SIMBA_URL", url).env("SIMBA_QUERY_TIMEOUT", "10s").env("RUST_LOG", "warn").arg("check");
    let started = Instant::now();
    let o = c.stdin(Stdio::null()).output().expect("run simba");
    assert!(started.elapsed() < QT / 2, "simba check took {:?}", started.elapsed());
    let text = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    (o.status.code().unwrap_or(-1), text)
}

#[test]
#[serial(redis_errors)]
fn simba_check_says_what_the_server_said() {
    init_log();
    let node = cluster_hosts()[0].clone();
    let (code, out) = simba_check(&format!("redis://{node}"));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains("is a Redis Cluster node") && out.contains(&format!("redis+cluster://{node}")), "{out}");

    let r = secured();
    let (code, out) = simba_check(&format!("redis://:{WRONG_PW}@127.0.0.1:{}", r.port));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(WRONGPASS) && out.contains(FIX_THE_URL), "{out}");
    assert!(!out.contains(WRONG_PW), "{out}");
    let (code, out) = simba_check(&format!("redis://127.0.0.1:{}", r.port));
    assert_ne!(code, 0, "{out}");
    assert!(out.contains(NOAUTH) && out.contains(PUT_IT_IN_THE_URL), "{out}");
}

#[test]
#[serial(redis_errors)]
fn an_acl_user_with_the_documented_rights_runs_everything() {
    init_log();
    // docs/backends/redis.md: ACL SETUSER simba on >secret ~simba:* &simba:* +@read +@write
    // +@scripting +@pubsub +@connection +info +config|get +time +wait +cluster|slots +cluster|info
    let rules = [
        "~simba:*",
        "&simba:*",
        "+@read",
        "+@write",
        "+@scripting",
        "+@pubsub",
        "+@connection",
        "+info",
        "+config|get",
        "+time",
        "+wait",
        "+cluster|slots",
        "+cluster|info",
    ];
    let pw = format!(">{ALICE_PW}");
    let mut args = vec!["--requirepass", ADMIN_PW, "--user", "simba", "on", &pw];
    args.extend(rules);
    let r = PrivateRedis::start(&args);
    let b = RedisBackend::connect(&format!("redis://simba:{ALICE_PW}@127.0.0.1:{}", r.port), options()).unwrap();
    let items = b.check();
    assert!(items.iter().all(|i| i.status != CheckStatus::Fail), "{items:?}");
    assert!(items.iter().any(|i| i.name == "maxmemory-policy" && i.status == CheckStatus::Ok), "{items:?}");
    let (l, g) = (Name::new(support::unique("acl")).unwrap(), Name::new(support::unique("acl-g")).unwrap());
    let (s1, s2) = (
        b.open_session(Duration::from_secs(5), "one").unwrap().id,
        b.open_session(Duration::from_secs(5), "").unwrap().id,
    );
    let t = match b.acquire(&s1, &l).unwrap() {
        simba::backend::Acquire::Acquired { token, .. } => token,
        other => panic!("{other:?}"),
    };
    assert_eq!(b.acquire(&s2, &l).unwrap(), simba::backend::Acquire::Busy);
    assert_eq!(b.holder(&l).unwrap().unwrap().metadata, "one");
    let (tx, rx) = crossbeam_channel::unbounded();
    b.watch(&Topic::Lease(l.clone()), &tx).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        simba::backend::Notification::Released(l.clone()),
        "subscribed"
    );
    b.watch(&Topic::Lease(l.clone()), &tx).unwrap();
    b.release(&s1, &l, t).unwrap();
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(5)).unwrap(),
        simba::backend::Notification::Released(l.clone()),
        "pushed"
    );
    assert!(matches!(b.acquire(&s2, &l).unwrap(), simba::backend::Acquire::Acquired { .. }));
    b.join(&s1, &g).unwrap();
    assert_eq!(b.members(&g).unwrap().len(), 1);
    assert!(matches!(b.keep_alive(&s1, Duration::from_secs(5)).unwrap(), simba::backend::KeepAlive::Alive { .. }));
    b.leave(&s1, &g).unwrap();
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
    // With wait_replicas the acquire runs WAIT (no replica here: the documented refusal).
    let o = RedisOptions::builder().query_timeout(Duration::from_secs(1)).wait_replicas(1).build().unwrap();
    let w = RedisBackend::connect(&format!("redis://simba:{ALICE_PW}@127.0.0.1:{}", r.port), o).unwrap();
    let s = w.open_session(Duration::from_secs(5), "").unwrap().id;
    let err = w.acquire(&s, &Name::new(support::unique("acl-w")).unwrap()).unwrap_err();
    assert!(err.to_string().contains("replicas acknowledged"), "{err}");
}
