//! ZooKeeper over TLS against the shared TLS-only ZooKeeper of `scripts/services` (`up
//! zookeeper-tls`: `secureClientPort` 2185, no plaintext port, `ssl.clientAuth=need`) and its
//! throwaway PKI in `SIMBA_TEST_TLS_DIR`: the URL/env configuration, what `check` reports, the
//! refusals (wrong CA, no client certificate, plaintext to the TLS port, a key that does not belong
//! to the certificate), and that key material never shows in `Debug`, `Display`, errors, logs or
//! `simba check`. The whole TCK over TLS is `tests/tck_zookeeper_tls.rs`.

mod support;

use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use simba::backend::{CheckItem, CheckStatus, LeaseBackend};
use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions, ZookeeperTls};
use simba::{Config, ErrorKind, Session, SessionOptions};

/// The test PKI (`ca.pem`, `client.pem`, `client.key`, `other-ca.pem`, …).
fn tls_dir() -> PathBuf {
    PathBuf::from(support::tls::dir())
}

fn file(name: &str) -> PathBuf {
    PathBuf::from(support::tls::file(name))
}

use support::tls::file as path;

/// `host:port` of the TLS-only server, checked to be listening.
fn hosts() -> String {
    let url = url();
    let hosts = url.trim_start_matches("zookeeper://").split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("the TLS-only ZooKeeper (scripts/services up zookeeper-tls)", &hosts);
    hosts
}

fn url() -> String {
    let d = tls_dir();
    let d = d.display();
    support::env_or(
        "SIMBA_TEST_ZOOKEEPER_TLS_URL",
        &format!(
            "zookeeper://127.0.0.1:2185/simba-test?tls_ca={d}/ca.pem&tls_cert={d}/client.pem&tls_key={d}/client.key"
        ),
    )
}

/// A short connection timeout: a plaintext client to the TLS port is refused only when it runs out.
fn opts() -> ZookeeperOptions {
    ZookeeperOptions::default().root("/simba-test").connection_timeout(Duration::from_secs(2))
}

fn client_tls() -> ZookeeperTls {
    ZookeeperTls::from_ca_file(file("ca.pem")).unwrap().identity_files(file("client.pem"), file("client.key")).unwrap()
}

fn vars(pairs: &[(&'static str, String)]) -> impl Fn(&str) -> Option<String> {
    let pairs = pairs.to_vec();
    move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
}

fn transport(items: &[CheckItem]) -> &CheckItem {
    items.iter().find(|c| c.name == "transport").expect("a transport item")
}

/// Pieces of the client's private key (the last 16 characters of each base64 line: the start of a
/// PKCS#8 key is a fixed header, its end is random): none may show anywhere.
fn key_pieces() -> Vec<String> {
    let pem = std::fs::read_to_string(file("client.key")).unwrap();
    let pieces: Vec<String> = pem
        .lines()
        .filter(|l| !l.starts_with("-----") && l.len() >= 32)
        .map(|l| l[l.len() - 16..].to_string())
        .collect();
    assert!(!pieces.is_empty(), "a PEM key in {}", file("client.key").display());
    pieces
}

fn assert_no_key(what: &str, text: &str) {
    assert!(!text.contains("-----BEGIN"), "{what} shows a PEM block: {text}");
    for p in key_pieces() {
        assert!(!text.contains(&p), "{what} shows key material: {text}");
    }
}

/// A self-signed certificate and its key, made with openssl in a fresh directory (returned last).
fn stranger() -> (PathBuf, PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(support::unique("simba-zk-tls-stranger"));
    std::fs::create_dir_all(&dir).unwrap();
    let out = std::process::Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem", "-out", "c.pem"])
        .args(["-days", "1", "-subj", "/CN=stranger"])
        .current_dir(&dir)
        .output()
        .expect("the openssl command");
    assert!(out.status.success(), "openssl: {}", String::from_utf8_lossy(&out.stderr));
    (dir.join("c.pem"), dir.join("k.pem"), dir)
}

/// Every log record of this test binary (a capturing logger, installed once).
fn logs() -> &'static Mutex<Vec<String>> {
    struct Capture;
    static LOGS: OnceLock<Mutex<Vec<String>>> = OnceLock::new();
    impl log::Log for Capture {
        fn enabled(&self, _: &log::Metadata<'_>) -> bool {
            true
        }
        fn log(&self, r: &log::Record<'_>) {
            LOGS.get_or_init(Mutex::default).lock().unwrap().push(format!("{} {}", r.target(), r.args()));
        }
        fn flush(&self) {}
    }
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        log::set_boxed_logger(Box::new(Capture)).expect("no other logger in this test binary");
        log::set_max_level(log::LevelFilter::Trace);
    });
    LOGS.get_or_init(Mutex::default)
}

/// A long connection timeout for the refusals: each must arrive well before it runs out, because
/// the backend's TLS probe sees the cause instead of waiting for the client library's retries.
const LONG: Duration = Duration::from_secs(20);

/// Connecting with TLS `opts` to `hosts` fails with `Backend` (permanent) in under half of
/// [`LONG`], naming the host and the cause in rustls' words and what to check (`words`).
fn refused_at_once(what: &str, hosts: &str, opts: ZookeeperOptions, words: &[&str]) {
    refused_at_once_as(what, hosts, opts, words, ErrorKind::Backend);
}

/// As [`refused_at_once`], with the error kind expected (`Unavailable` where the refusal may be
/// transient: a server closing the connection without a TLS answer).
fn refused_at_once_as(what: &str, hosts: &str, opts: ZookeeperOptions, words: &[&str], kind: ErrorKind) {
    let started = Instant::now();
    let e = match ZookeeperBackend::connect(hosts, opts.connection_timeout(LONG)) {
        Ok(_) => panic!("{what}: connected"),
        Err(e) => e,
    };
    let took = started.elapsed();
    let shown = simba::display_chain(&e);
    eprintln!("{what}, after {took:?}: {shown}");
    assert_eq!(e.kind(), kind, "{what}: {shown}");
    assert_eq!(e.is_retryable(), kind == ErrorKind::Unavailable, "{what}: {shown}");
    let at = format!("the ZooKeeper server at {hosts} refused the TLS connection");
    for w in [at.as_str()].iter().chain(words) {
        assert!(shown.contains(w), "{what}: {w:?} missing in: {shown}");
    }
    assert_no_key(what, &shown);
    assert!(took < LONG / 2, "{what}: the refusal took {took:?}, not before the connection timeout {LONG:?}");
}

#[test]
#[serial_test::serial(zookeeper_tls)]
fn sessions_and_leases_over_tls_and_check_reports_the_transport() {
    let logs = logs();
    let backend = Arc::new(
        ZookeeperBackend::from_url(&url(), opts())
            .unwrap_or_else(|e| panic!("cannot connect to {}: {e} (run `scripts/services up zookeeper-tls`)", url())),
    );
    let items = backend.check();
    let t = transport(&items);
    assert_eq!(t.status, CheckStatus::Ok, "{t:?}");
    for w in ["encrypted", "TLS", "server certificate verified", "client certificate presented", "names the host"] {
        assert!(t.detail.contains(w), "{w:?} missing: {t:?}");
    }
    assert!(items.iter().all(|c| c.status != CheckStatus::Fail), "{items:?}");
    let so = SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let a = Session::open(backend.clone(), so.clone()).unwrap();
    let b = Session::open(backend.clone(), so).unwrap();
    let name = support::unique("tls");
    let lease = a.try_lock(&name).unwrap().expect("a free lease");
    let t1 = lease.token().unwrap();
    assert!(b.try_lock(&name).unwrap().is_none(), "held by a");
    assert_eq!(backend.holder(&simba::Name::new(name.clone()).unwrap()).unwrap().unwrap().token, t1);
    lease.release().unwrap();
    let l2 = b.lock_timeout(&name, Duration::from_secs(10)).unwrap().expect("taken over after the release");
    assert!(l2.token().unwrap() > t1);
    l2.release().unwrap();
    a.close().unwrap();
    b.close().unwrap();
    // Nothing printable carries the key: Debug of the options and the backend, the check, the logs.
    assert_no_key("backend Debug", &format!("{backend:?}"));
    assert_no_key("options Debug", &format!("{:?}", opts().tls(client_tls())));
    assert_no_key("check", &format!("{items:?}"));
    assert_no_key("logs", &logs.lock().unwrap().join("\n"));
}

#[test]
#[serial_test::serial(zookeeper_tls)]
fn config_from_url_and_env_connects_over_tls() {
    // The URL parameters (what SIMBA_TEST_ZOOKEEPER_TLS_URL carries) …
    let c = Config::from_url(&url()).unwrap();
    assert_eq!(c.zookeeper_root(), "/simba-test");
    let backend = c.connect().unwrap_or_else(|e| panic!("{e} (run `scripts/services up zookeeper-tls`)"));
    let items = backend.check();
    assert!(transport(&items).detail.contains("client certificate presented"), "{items:?}");
    for shown in [format!("{c:?}"), format!("{backend:?}"), format!("{items:?}")] {
        assert_no_key("config", &shown);
    }
    // … and the same settings from the environment.
    let env = [
        ("SIMBA_URL", format!("zookeeper://{}/simba-test", hosts())),
        ("SIMBA_ZOOKEEPER_TLS_CA", path("ca.pem")),
        ("SIMBA_ZOOKEEPER_TLS_CERT", path("client.pem")),
        ("SIMBA_ZOOKEEPER_TLS_KEY", path("client.key")),
        ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "5s".to_string()),
    ];
    let c = Config::from_vars(vars(&env)).unwrap();
    assert_eq!(c.zookeeper_tls_ca(), Some(file("ca.pem").as_path()));
    let backend = c.connect().unwrap();
    assert!(transport(&backend.check()).detail.contains("encrypted"));
    assert_no_key("config from env", &format!("{c:?}"));
    // Both at once is ambiguous.
    let mut twice = env.to_vec();
    twice[0].1 = url();
    let e = Config::from_vars(vars(&twice)).unwrap_err();
    assert!(e.to_string().contains("TLS is set twice"), "{e}");
    let e = ZookeeperBackend::from_url(&url(), opts().tls(client_tls())).unwrap_err();
    assert!(e.to_string().contains("TLS is set twice"), "{e}");
}

#[test]
#[serial_test::serial(zookeeper_tls)]
fn a_wrong_ca_is_refused() {
    let wrong_ca = ZookeeperTls::from_ca_file(file("other-ca.pem"))
        .unwrap()
        .identity_files(file("client.pem"), file("client.key"))
        .unwrap();
    refused_at_once(
        "a CA that did not sign the server's certificate",
        &hosts(),
        opts().tls(wrong_ca),
        &[
            "(client certificate presented)",
            "invalid peer certificate: UnknownIssuer",
            "does not verify against the configured CA",
            "SIMBA_ZOOKEEPER_TLS_CA",
        ],
    );
}

#[test]
#[serial_test::serial(zookeeper_tls)]
fn a_missing_client_certificate_is_refused() {
    // The server requires client certificates (ssl.clientAuth=need).
    let no_identity = ZookeeperTls::from_ca_file(file("ca.pem")).unwrap();
    refused_at_once(
        "no client certificate",
        &hosts(),
        opts().tls(no_identity),
        &["(no client certificate)", "received fatal alert", "requires a client certificate", "tls_cert"],
    );
    // A client certificate the server's CA did not sign is no better.
    let (cert, key, dir) = stranger();
    let foreign = ZookeeperTls::from_ca_file(file("ca.pem")).unwrap().identity_files(cert, key).unwrap();
    refused_at_once(
        "a client certificate of another CA",
        &hosts(),
        opts().tls(foreign),
        &["client certificate presented", "received fatal alert", "does not accept the client certificate"],
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
#[serial_test::serial(zookeeper_tls)]
fn tls_to_a_plaintext_port_is_refused() {
    let plain = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    let plain = plain.trim_start_matches("zookeeper://").split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("the plaintext ZooKeeper (scripts/services up zookeeper)", &plain);
    refused_at_once_as(
        "TLS to a plaintext port",
        &plain,
        opts().tls(client_tls()),
        &["does not speak TLS", "secureClientPort", "connection limit"],
        ErrorKind::Unavailable,
    );
}

#[test]
#[serial_test::serial(zookeeper_tls)]
fn plaintext_to_the_tls_port_is_refused() {
    // The client library retries until the connection timeout (2 s here); then a TLS probe of
    // the port names the cause, a permanent error.
    let started = Instant::now();
    let e = match ZookeeperBackend::connect(&hosts(), opts()) {
        Ok(_) => panic!("plaintext to the TLS-only port: connected"),
        Err(e) => e,
    };
    let shown = simba::display_chain(&e);
    assert_eq!(e.kind(), ErrorKind::Backend, "{shown}");
    for w in [
        "cannot open a ZooKeeper session at 127.0.0.1:2185 within 2s (plaintext TCP)",
        "the server at 127.0.0.1:2185 answers TLS",
        "configure TLS",
    ] {
        assert!(shown.contains(w), "{w:?} missing in: {shown}");
    }
    assert!(started.elapsed() < Duration::from_secs(30), "took {:?}", started.elapsed());
}

#[test]
fn tls_files_are_checked_before_any_io_and_errors_name_them() {
    // Nothing listens on port 9: any I/O would fail differently (Unavailable).
    let unused = "127.0.0.1:9";
    let dir = std::env::temp_dir().join(support::unique("simba-zk-tls-files"));
    std::fs::create_dir_all(&dir).unwrap();
    let key = std::fs::read_to_string(file("client.key")).unwrap();
    // A damaged key: its base64 body cut in half.
    let damaged = dir.join("damaged.key");
    std::fs::write(&damaged, &key[..key.len() / 2]).unwrap();
    let e =
        ZookeeperTls::from_ca_file(file("ca.pem")).unwrap().identity_files(file("client.pem"), &damaged).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    let shown = simba::display_chain(&e);
    assert!(shown.contains(damaged.to_str().unwrap()) && shown.contains("client certificate or key"), "{shown}");
    assert_no_key("damaged key error", &shown);
    // A certificate file given as the key, and the reverse.
    let e = ZookeeperTls::from_ca_file(file("ca.pem"))
        .unwrap()
        .identity_files(file("client.key"), file("client.pem"))
        .unwrap_err();
    let shown = simba::display_chain(&e);
    assert!(shown.contains("no CERTIFICATE block") && shown.contains(&path("client.key")), "{shown}");
    assert_no_key("swapped files error", &shown);
    // A key that is not the certificate's: refused when the client is built, before any I/O.
    let started = Instant::now();
    let (_, other_key, other_dir) = stranger();
    let mismatched =
        ZookeeperTls::from_ca_file(file("ca.pem")).unwrap().identity_files(file("client.pem"), &other_key).unwrap();
    let e = ZookeeperBackend::connect(unused, opts().connection_timeout(Duration::from_secs(20)).tls(mismatched))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("client key belongs to the client certificate"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10), "no connection attempt: {:?}", started.elapsed());
    assert_no_key("mismatched key error", &simba::display_chain(&e));
    // A CA file that is not PEM names the file.
    let e = ZookeeperTls::from_ca_file(file("client.key")).unwrap_err();
    assert!(e.to_string().contains(&format!("invalid ZooKeeper TLS CA file {}", path("client.key"))), "{e}");
    assert_no_key("CA error", &simba::display_chain(&e));
    // The URL's files are read by Config::build, with the same errors.
    let url = format!(
        "zookeeper://{unused}/r?tls_ca={}&tls_cert={}&tls_key={}",
        path("ca.pem"),
        path("client.pem"),
        damaged.display()
    );
    let e = Config::from_url(&url).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains(damaged.to_str().unwrap()), "{e}");
    assert_no_key("URL error", &simba::display_chain(&e));
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&other_dir).unwrap();
}

/// `simba check` prints the transport and never the key (binary built with feature `cli`).
#[cfg(feature = "cli")]
#[test]
#[serial_test::serial(zookeeper_tls)]
fn simba_check_reports_tls_without_key_material() {
    hosts();
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_simba"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SIMBA_") {
            c.env_remove(k);
        }
    }
    let out = c.env("SIMBA_URL", url()).env("RUST_LOG", "trace").arg("check").output().expect("run simba");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("transport") && stdout.contains("encrypted"), "{stdout}");
    assert!(stdout.contains("server certificate verified"), "{stdout}");
    assert_no_key("simba check", &format!("{stdout}\n{stderr}"));
}
