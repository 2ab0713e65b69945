//! etcd user/password auth against a private etcd member with auth enabled (started by this test
//! through tests/support/etcd.rs on 127.0.0.1:2399, peer 2400, from the `etcd` and `etcdctl` of
//! `scripts/services up etcd`):
//! a wrong password and a missing permission fail at once in the server's words, and the server's
//! auth tokens, which expire after 1 s here (`--auth-token-ttl 1`), are renewed without losing
//! the session. `check` reports auth on and the plain user's missing permission.
#![cfg(feature = "etcd")]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use simba::backend::{CheckStatus, KeepAlive, LeaseBackend};
use simba::backends::etcd::{EtcdBackend, EtcdOptions};
use simba::ErrorKind;
use support::etcd::{etcdctl_ok, EtcdCluster};

const PORT: u16 = 2399;

/// Counts the backend's "logging in again" records (this binary's only logger).
struct Relogins;
static RELOGINS: AtomicUsize = AtomicUsize::new(0);

impl log::Log for Relogins {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        if record.args().to_string().contains("logging in again") {
            RELOGINS.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn flush(&self) {}
}

/// A private member (tests/support/etcd.rs) whose auth tokens expire after 1 s, with users root
/// (role root) and plain (no role), auth enabled.
fn start() -> EtcdCluster {
    let cluster = EtcdCluster::start_with(PORT, 1, &["--auth-token-ttl", "1"]);
    let addr = cluster.addr(0);
    etcdctl_ok(&addr, &["user", "add", "root", "--new-user-password=root-pw"]);
    etcdctl_ok(&addr, &["role", "add", "root"]);
    etcdctl_ok(&addr, &["user", "grant-role", "root", "root"]);
    etcdctl_ok(&addr, &["user", "add", "plain", "--new-user-password=plain-pw"]);
    etcdctl_ok(&addr, &["auth", "enable"]);
    cluster
}

#[test]
fn auth_errors_are_permanent_and_in_the_servers_words_and_expired_tokens_are_renewed() {
    log::set_logger(&Relogins).expect("the only logger of this binary");
    log::set_max_level(log::LevelFilter::Debug);
    let _member = start();
    let url = |user: &str| format!("etcd://{user}@127.0.0.1:{PORT}/simba-auth");

    let t0 = Instant::now();
    let err = EtcdBackend::from_url(&url("root:wrong"), EtcdOptions::default()).expect_err("wrong password");
    assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
    assert!(err.to_string().contains("authentication failed, invalid user ID or password"), "{err}");
    assert!(!err.to_string().contains("wrong"), "the password is not shown: {err}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());

    // plain may log in but not write under the prefix.
    let plain = EtcdBackend::from_url(&url("plain:plain-pw"), EtcdOptions::default()).unwrap();
    let err = plain.open_session(Duration::from_secs(5), "m").expect_err("no permission");
    assert_eq!(err.kind(), ErrorKind::Backend, "{err}");
    assert!(err.to_string().contains("permission denied"), "{err}");

    // `check` shows the same denial: its probe does what the backend needs under the prefix.
    let items = plain.check();
    let auth = items.iter().find(|c| c.name == "auth").unwrap_or_else(|| panic!("no auth item: {items:?}"));
    assert_eq!(auth.status, CheckStatus::Fail, "{auth:?}");
    for words in ["logged in as plain", "cannot do what simba needs under /simba-auth/", "permission denied"] {
        assert!(auth.detail.contains(words), "{words:?} missing: {auth:?}");
    }

    let root = EtcdBackend::from_url(&url("root:root-pw"), EtcdOptions::default()).unwrap();
    let items = root.check();
    let auth = items.iter().find(|c| c.name == "auth").unwrap_or_else(|| panic!("no auth item: {items:?}"));
    assert_eq!(auth.status, CheckStatus::Ok, "{auth:?}");
    assert!(auth.detail.starts_with("auth enabled, logged in as root;"), "{auth:?}");
    let s = root.open_session(Duration::from_secs(10), "m").unwrap().id;
    let name = simba::Name::new("auth-lease").unwrap();
    let token = root.acquire(&s, &name).unwrap().token().unwrap();
    // Past the 1 s token TTL (the server drops tokens it has not seen used for that long, checked
    // every second or so): every later call is refused with "invalid auth token" until the
    // backend logs in again, which it does without the session noticing.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(2500));
        match root.keep_alive(&s, Duration::from_secs(10)).unwrap() {
            KeepAlive::Alive { owned, .. } => assert_eq!(owned, vec![(name.clone(), token)]),
            KeepAlive::Expired => panic!("the session expired across a token renewal"),
        }
    }
    // The renewal was exercised, not skipped: the server did refuse an expired token.
    assert!(RELOGINS.load(Ordering::SeqCst) >= 1, "no token expired during the test");
    root.close_session(&s).unwrap();
}
