//! Redis over TLS against the TLS-only servers of `scripts/services up` (`redis-tls` on :6390,
//! which requires a client certificate; `redis-cluster-tls` on :7100-7102, client certificates
//! optional). Certificates come from `scripts/tls-certs` in `SIMBA_TEST_TLS_DIR`.
//!
//! A wrong CA, a missing client certificate and a plaintext client each fail at once (long before
//! the query timeout) with the handshake's words; the pushed release wakes a waiter over TLS;
//! `check()` and `simba check` say the connection is encrypted and the certificate verified; the
//! key's contents never show in `Debug`, errors or check output.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serial_test::serial;
use simba::backend::{CheckStatus, LeaseBackend};
use simba::backends::redis::{RedisBackend, RedisOptions, RedisTls};
use simba::{ErrorKind, Name, Session, SessionOptions};

/// A query timeout no failing handshake may wait for: "at once" means well before it.
const LONG: Duration = Duration::from_secs(30);

use support::tls::file;

fn require(addr: &str) {
    support::require_tcp("TLS-only Redis", addr);
}

fn options(timeout: Duration) -> RedisOptions {
    RedisOptions::builder().query_timeout(timeout).build().unwrap()
}

/// The standalone TLS URL with the test CA and client identity.
fn mtls_url() -> String {
    require("127.0.0.1:6390");
    format!("rediss://127.0.0.1:6390?ca={}&cert={}&key={}", file("ca.pem"), file("client.pem"), file("client.key"))
}

fn cluster_url() -> String {
    require("127.0.0.1:7100");
    format!("rediss+cluster://127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102?ca={}", file("ca.pem"))
}

/// Connects to `url`, expecting a failure; returns it and how long it took.
fn refused(url: &str) -> (simba::Error, Duration) {
    let started = Instant::now();
    let e = RedisBackend::connect(url, options(LONG)).expect_err("the connection must be refused");
    (e, started.elapsed())
}

fn chain(e: &simba::Error) -> String {
    simba::display_chain(e)
}

#[test]
#[serial(redis_tls)]
fn a_wrong_ca_fails_at_once_with_the_handshake_error() {
    require("127.0.0.1:6390");
    let url = format!(
        "rediss://127.0.0.1:6390?ca={}&cert={}&key={}",
        file("other-ca.pem"),
        file("client.pem"),
        file("client.key")
    );
    let (e, took) = refused(&url);
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("UnknownIssuer") || text.contains("unknown issuer"), "{text}");
    assert!(text.contains("certificate"), "{text}");
    assert_eq!(e.kind(), ErrorKind::Backend, "a certificate that does not verify never heals: {text}");
}

#[test]
#[serial(redis_tls)]
fn a_missing_client_certificate_fails_at_once_with_a_clear_error() {
    require("127.0.0.1:6390");
    let (e, took) = refused(&format!("rediss://127.0.0.1:6390?ca={}", file("ca.pem")));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.to_lowercase().contains("certificate"), "{text}");
    assert!(text.contains("client certificate"), "the hint names what is missing: {text}");
}

#[test]
#[serial(redis_tls)]
fn a_plaintext_client_against_the_tls_port_fails_at_once_with_a_clear_error() {
    require("127.0.0.1:6390");
    let (e, took) = refused("redis://127.0.0.1:6390");
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("rediss://"), "the error says to use TLS: {text}");
}

#[test]
#[serial(redis_tls)]
fn bad_tls_files_are_invalid_config_naming_the_file_before_any_io() {
    let tmp = std::env::temp_dir().join(support::unique("simba-redis-tls"));
    std::fs::create_dir_all(&tmp).unwrap();
    let junk = tmp.join("junk.pem");
    std::fs::write(&junk, "not PEM at all").unwrap();
    // Port 1 refuses connections: an error other than InvalidConfig would mean I/O happened.
    for (url, names) in [
        (format!("rediss://127.0.0.1:1?ca={}/missing.pem", tmp.display()), "missing.pem"),
        (format!("rediss://127.0.0.1:1?ca={}", junk.display()), "junk.pem"),
        (format!("rediss://127.0.0.1:1?cert={0}&key={0}", junk.display()), "junk.pem"),
        (format!("rediss+cluster://127.0.0.1:1,127.0.0.1:2?ca={}", junk.display()), "junk.pem"),
    ] {
        let e = RedisBackend::connect(&url, options(LONG)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}: {e}");
        assert!(e.to_string().contains(names), "{url}: {e}");
    }
    let e = RedisBackend::connect(&format!("redis://127.0.0.1:1?ca={}", junk.display()), options(LONG)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("rediss://"), "{e}");
    let e = RedisBackend::connect("rediss://127.0.0.1:1#insecure", options(LONG)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
#[serial(redis_tls)]
fn check_reports_encryption_and_verification_and_never_the_key() {
    let key = std::fs::read_to_string(file("client.key")).unwrap();
    let key_lines: Vec<&str> = key.lines().filter(|l| !l.starts_with("-----") && l.len() > 8).collect();
    assert!(!key_lines.is_empty());
    let leaks = |what: &str, text: &str| {
        for l in &key_lines {
            assert!(!text.contains(l), "{what} shows the client key: {text}");
        }
    };
    for url in [mtls_url(), cluster_url()] {
        let backend = RedisBackend::connect(&url, options(Duration::from_secs(5))).unwrap();
        let items = backend.check();
        let tls = items.iter().find(|i| i.name == "tls").unwrap_or_else(|| panic!("no tls item: {items:?}"));
        assert_eq!(tls.status, CheckStatus::Ok, "{tls:?}");
        assert!(tls.detail.contains("encrypted") && tls.detail.contains("verified"), "{tls:?}");
        assert!(tls.detail.contains("ca.pem"), "{tls:?}");
        leaks("check", &format!("{items:?}"));
        leaks("Debug", &format!("{backend:?}"));
    }
    // The same through RedisOptions::tls instead of the URL.
    let tls = RedisTls::new().ca(file("ca.pem")).client_identity(file("client.pem"), file("client.key"));
    let o = RedisOptions::builder().tls(tls).build().unwrap();
    leaks("options Debug", &format!("{o:?}"));
    let backend = RedisBackend::connect("rediss://127.0.0.1:6390", o).unwrap();
    let items = backend.check();
    let item = items.iter().find(|i| i.name == "tls").unwrap();
    assert!(item.detail.contains("client certificate") && item.detail.contains("client.pem"), "{item:?}");
    // A plain connection says so.
    let plain = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    let backend = RedisBackend::connect(&plain, options(Duration::from_secs(5))).unwrap();
    let items = backend.check();
    let item = items.iter().find(|i| i.name == "tls").unwrap();
    assert!(item.detail.contains("not encrypted"), "{item:?}");
}

#[test]
#[serial(redis_tls)]
fn the_environment_variables_configure_tls() {
    let url = {
        require("127.0.0.1:6390");
        "rediss://127.0.0.1:6390".to_string()
    };
    let (ca, cert, key) = (file("ca.pem"), file("client.pem"), file("client.key"));
    let vars = |k: &str| match k {
        "SIMBA_URL" => Some(url.clone()),
        "SIMBA_REDIS_TLS_CA" => Some(ca.clone()),
        "SIMBA_REDIS_TLS_CERT" => Some(cert.clone()),
        "SIMBA_REDIS_TLS_KEY" => Some(key.clone()),
        _ => None,
    };
    let config = simba::Config::from_vars(vars).unwrap();
    let backend = config.connect().unwrap();
    let items = backend.check();
    let item = items.iter().find(|i| i.name == "tls").unwrap();
    assert!(item.detail.contains("encrypted") && item.detail.contains("client.pem"), "{item:?}");
    // Half an identity is refused before any I/O.
    let half = |k: &str| if k == "SIMBA_REDIS_TLS_KEY" { None } else { vars(k) };
    let e = simba::Config::from_vars(half).unwrap().connect().map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
}

/// A release pushed over TLS wakes a waiter long before it would poll: the waiter's renew
/// interval is 20 s (first poll after 10 s at the earliest), so a lease within 5 s was pushed.
#[test]
#[serial(redis_tls)]
fn a_pushed_release_wakes_a_waiter_over_tls() {
    for url in [mtls_url(), cluster_url()] {
        let connect = || -> Arc<dyn LeaseBackend> {
            Arc::new(RedisBackend::connect(&url, options(Duration::from_secs(2))).unwrap())
        };
        let slow = SessionOptions::builder()
            .lease_duration(Duration::from_secs(60))
            .renew_interval(Duration::from_secs(20))
            .query_timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        let n = Name::new(support::unique("tls-push")).unwrap();
        let holder = Session::open(connect(), SessionOptions::default()).unwrap();
        let held = holder.try_lock(&n).unwrap().unwrap();
        let waiter = Session::open(connect(), slow).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let name = n.clone();
        let t = thread::spawn(move || {
            let lease = waiter.lock(&name).unwrap();
            tx.send(Instant::now()).unwrap();
            lease.release().unwrap();
            waiter.close().unwrap();
        });
        // Let the waiter fail its first attempt and subscribe (its wait is registered before).
        thread::sleep(Duration::from_millis(300));
        let released = Instant::now();
        held.release().unwrap();
        let got = rx.recv_timeout(Duration::from_secs(15)).expect("the waiter never got the lease");
        let after = got.saturating_duration_since(released);
        assert!(after < Duration::from_secs(5), "{url}: the waiter got the lease {after:?} after the release");
        t.join().unwrap();
        holder.close().unwrap();
    }
}

#[cfg(feature = "cli")]
#[test]
#[serial(redis_tls)]
fn simba_check_reports_tls() {
    let url = mtls_url();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_simba"))
        .env("SIMBA_URL", &url)
        .env("RUST_LOG", "warn")
        .arg("check")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("tls") && stdout.contains("encrypted") && stdout.contains("verified"), "{stdout}{stderr}");
    let key = std::fs::read_to_string(file("client.key")).unwrap();
    for l in key.lines().filter(|l| !l.starts_with("-----") && l.len() > 8) {
        assert!(!stdout.contains(l) && !stderr.contains(l), "simba check shows the key");
    }
}

/// With one seed, the router reaches the nodes the cluster announces (`CLUSTER SLOTS`) with the
/// seed's TLS settings: every master answers, and leases on many slots work.
#[test]
#[serial(redis_tls)]
fn a_single_tls_seed_reaches_every_announced_node() {
    require("127.0.0.1:7100");
    let url = format!("rediss+cluster://127.0.0.1:7100?ca={}", file("ca.pem"));
    let backend = RedisBackend::connect(&url, options(Duration::from_secs(5))).unwrap();
    let items = backend.check();
    let reachable = items.iter().find(|i| i.name == "reachable").unwrap();
    assert!(reachable.detail.contains("3 master(s) answered PING"), "{reachable:?}");
    let session = Session::open(Arc::new(backend), SessionOptions::default()).unwrap();
    let prefix = support::unique("tls-slots");
    let leases: Vec<_> = (0..24).map(|i| session.try_lock(format!("{prefix}-{i}")).unwrap().unwrap()).collect();
    for l in leases {
        l.release().unwrap();
    }
    session.close().unwrap();
}

#[test]
fn tls_urls_choose_the_redis_backends_without_io() {
    let c = simba::Config::from_url("rediss://:pw@h:6380/1?ca=/etc/ca.pem").unwrap();
    assert_eq!(c.backend_kind(), simba::BackendKind::Redis);
    let c = simba::Config::from_url("rediss+cluster://h1:7000,h2:7001?ca=/etc/ca.pem&cert=/c&key=/k").unwrap();
    assert_eq!(c.backend_kind(), simba::BackendKind::RedisCluster);
    // Only the TLS parameters are taken on Cluster; a missing file is named when connecting.
    let e = simba::Config::from_url("rediss+cluster://127.0.0.1:1?ca=/nonexistent/ca.pem").unwrap().connect();
    let e = e.map(|_| ()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    let e = RedisBackend::connect("rediss+cluster://127.0.0.1:1?protocol=resp3", options(LONG)).unwrap_err();
    assert!(e.to_string().contains("only the query parameters ca=, cert= and key="), "{e}");
}
