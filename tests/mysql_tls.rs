//! MySQL/MariaDB over TLS against the TLS-only MariaDB of `scripts/services up mysql-tls`
//! (127.0.0.1:3307, `require_secure_transport=ON`; users `root` without a password and
//! `simba_x509` with `REQUIRE X509`), certificates from `scripts/tls-certs` in
//! `SIMBA_TEST_TLS_DIR`, and the plain shared MariaDB (`SIMBA_TEST_MYSQL_URL`) for `PREFERRED`'s
//! fallback.
//!
//! A wrong CA, a missing client certificate, a host-name mismatch under `VERIFY_IDENTITY`, a
//! plaintext client and `REQUIRED` against a server without TLS each fail at once (long before
//! the query timeout) with the server's or the handshake's words and what to change; `check()`
//! and `simba check` say whether the connection is encrypted and the certificate verified (the
//! server's own `Ssl_cipher`); the application's own `mysql::Opts` work, with the backend's
//! settings forced on top; the key's contents never show.
#![cfg(feature = "mysql")]

mod support;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use serial_test::serial;
use simba::backend::{CheckItem, CheckStatus, LeaseBackend};
use simba::backends::sql::{MysqlConfig, MysqlSslMode, MysqlTls, SqlBackend, SqlOptions};
use simba::{ErrorKind, Name, Session, SessionOptions};

/// A query timeout no failing connect may wait for: "at once" means well before it.
const LONG: Duration = Duration::from_secs(30);
const ADDR: &str = "127.0.0.1:3307";

use support::tls::file;

fn require() {
    support::require_tcp("TLS-only MariaDB", ADDR);
}

fn options(timeout: Duration) -> SqlOptions {
    SqlOptions::builder().query_timeout(timeout).build().unwrap()
}

/// `mysql://USER@HOST/test?QUERY` on the TLS-only server (HOST defaults to `ADDR`).
fn url(user: &str, query: &str) -> String {
    require();
    format!("mysql://{user}@{ADDR}/test?{query}")
}

fn verified(user: &str) -> String {
    url(user, &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", file("ca.pem")))
}

fn mutual(user: &str) -> String {
    format!("{}&ssl-cert={}&ssl-key={}", verified(user), file("client.pem"), file("client.key"))
}

/// The first call's error on a backend for `url`, and how long it took.
fn refused(url: &str) -> (simba::Error, Duration) {
    let backend = SqlBackend::mysql(url, options(LONG)).unwrap_or_else(|e| panic!("{url}: {e}"));
    let started = Instant::now();
    let e = backend.database_now_ms().expect_err("the connection must be refused");
    (e, started.elapsed())
}

fn chain(e: &simba::Error) -> String {
    simba::display_chain(e)
}

fn tls_item(items: &[CheckItem]) -> CheckItem {
    items.iter().find(|i| i.name == "tls").cloned().unwrap_or_else(|| panic!("no tls item: {items:?}"))
}

fn key_lines() -> Vec<String> {
    let key = std::fs::read_to_string(file("client.key")).unwrap();
    let lines: Vec<String> = key.lines().filter(|l| !l.starts_with("-----") && l.len() > 8).map(String::from).collect();
    assert!(!lines.is_empty());
    lines
}

fn assert_no_key(what: &str, text: &str) {
    for l in key_lines() {
        assert!(!text.contains(&l), "{what} shows the client key: {text}");
    }
}

/// A TCP forwarder on `bind` (another loopback address) to the TLS server: reaching it by an
/// address its certificate does not list.
fn forwarder(bind: &str) -> String {
    let listener = TcpListener::bind(bind).expect("bind the forwarder");
    let addr = listener.local_addr().unwrap().to_string();
    thread::spawn(move || {
        for client in listener.incoming() {
            let Ok(client) = client else { continue };
            let Ok(server) = TcpStream::connect(ADDR) else { continue };
            for (mut from, mut to) in [
                (client.try_clone().unwrap(), server.try_clone().unwrap()),
                (server.try_clone().unwrap(), client.try_clone().unwrap()),
            ] {
                thread::spawn(move || {
                    let mut buf = [0u8; 16 * 1024];
                    while let Ok(n) = from.read(&mut buf) {
                        if n == 0 || to.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = to.shutdown(Shutdown::Write);
                });
            }
        }
    });
    addr
}

#[test]
#[serial(mysql_tls)]
fn a_wrong_ca_fails_at_once_with_the_handshake_error() {
    let (e, took) = refused(&url("root", &format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={}", file("other-ca.pem"))));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("UnknownIssuer") || text.contains("unknown issuer"), "{text}");
    assert!(text.contains("TLS handshake failed") && text.contains("ssl-ca"), "{text}");
    assert_eq!(e.kind(), ErrorKind::Backend, "a certificate that does not verify never heals: {text}");
    // VERIFY_CA checks the chain too.
    let (e, _) = refused(&url("root", &format!("ssl-mode=VERIFY_CA&ssl-ca={}", file("other-ca.pem"))));
    assert!(chain(&e).contains("UnknownIssuer") || chain(&e).contains("unknown issuer"), "{e}");
}

#[test]
#[serial(mysql_tls)]
fn a_missing_client_certificate_fails_at_once_in_the_servers_words() {
    let (e, took) = refused(&verified("simba_x509"));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("Access denied for user 'simba_x509'"), "the server's words: {text}");
    assert!(text.contains("no client certificate was presented") && text.contains("ssl-cert"), "{text}");
    assert_eq!(e.kind(), ErrorKind::Backend, "{text}");
    // With the certificate the same account logs in.
    let backend = SqlBackend::mysql(&mutual("simba_x509"), options(Duration::from_secs(5))).unwrap();
    backend.database_now_ms().unwrap();
}

#[test]
#[serial(mysql_tls)]
fn a_host_name_mismatch_fails_under_verify_identity_only() {
    require();
    // 127.0.0.2 reaches the server through the forwarder; the certificate lists 127.0.0.1, ::1
    // and localhost only.
    let other = forwarder("127.0.0.2:0");
    let ca = file("ca.pem");
    let backend =
        SqlBackend::mysql(&format!("mysql://root@{other}/test?ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}"), options(LONG))
            .unwrap();
    let started = Instant::now();
    let e = backend.database_now_ms().unwrap_err();
    let text = chain(&e);
    assert!(started.elapsed() < LONG / 2, "took {:?}: {text}", started.elapsed());
    assert!(text.contains("NotValidForName") || text.contains("not valid for name"), "{text}");
    assert!(text.contains("does not name the host"), "{text}");
    // VERIFY_CA checks the chain but not the name: the same address works.
    let backend =
        SqlBackend::mysql(&format!("mysql://root@{other}/test?ssl-mode=VERIFY_CA&ssl-ca={ca}"), options(LONG)).unwrap();
    backend.database_now_ms().unwrap();
    let item = tls_item(&backend.check());
    assert!(item.detail.contains("host name NOT checked (VERIFY_CA)"), "{item:?}");
}

#[test]
#[serial(mysql_tls)]
fn a_plaintext_client_against_the_tls_only_port_fails_at_once_with_a_clear_error() {
    let (e, took) = refused(&url("root", "ssl-mode=DISABLED"));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("Access denied for user 'root'"), "the server's words: {text}");
    assert!(text.contains("not encrypted") && text.contains("ssl-mode=VERIFY_IDENTITY"), "{text}");
}

#[test]
#[serial(mysql_tls)]
fn required_against_a_server_without_tls_fails_at_once_and_preferred_falls_back() {
    let plain = support::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
    let host = plain.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
    support::require_tcp("MySQL/MariaDB", &host);
    let sep = if plain.contains('?') { '&' } else { '?' };
    let (e, took) = refused(&format!("{plain}{sep}ssl-mode=REQUIRED"));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("offers no TLS") && text.contains("ssl-mode=REQUIRED"), "{text}");
    // PREFERRED (the default) connects in plain, and check says so from the server's view.
    for url in [plain.clone(), format!("{plain}{sep}ssl-mode=PREFERRED")] {
        let backend = SqlBackend::mysql(&url, options(Duration::from_secs(5))).unwrap();
        backend.database_now_ms().unwrap();
        let item = tls_item(&backend.check());
        assert!(item.detail.contains("not encrypted") && item.detail.contains("offers no TLS"), "{item:?}");
        assert_eq!(item.status, CheckStatus::Ok, "loopback: {item:?}");
    }
    // PREFERRED against the TLS-only server encrypts, without verifying.
    let backend = SqlBackend::mysql(&url("root", ""), options(Duration::from_secs(5))).unwrap();
    let item = tls_item(&backend.check());
    assert!(item.detail.contains("encrypted (TLS") && item.detail.contains("NOT verified"), "{item:?}");
    assert_eq!(item.status, CheckStatus::Warn, "{item:?}");
    let backend = SqlBackend::mysql(&url("root", "ssl-mode=REQUIRED"), options(Duration::from_secs(5))).unwrap();
    assert!(tls_item(&backend.check()).detail.contains("NOT verified (ssl-mode=REQUIRED)"));
}

#[test]
#[serial(mysql_tls)]
fn check_reports_encryption_and_verification_and_never_the_key() {
    let backend = SqlBackend::mysql(&mutual("simba_x509"), options(Duration::from_secs(5))).unwrap();
    // The check reports a missing schema as a failure: create it (this test failed alone against
    // a fresh server).
    backend.init_schema().unwrap();
    let items = backend.check();
    let item = tls_item(&items);
    assert_eq!(item.status, CheckStatus::Ok, "{item:?}");
    for part in ["encrypted (TLSv1.", "VERIFY_IDENTITY", "verified", "ca.pem", "client certificate", "client.pem"] {
        assert!(item.detail.contains(part), "{part}: {item:?}");
    }
    assert!(items.iter().all(|i| i.status != CheckStatus::Fail), "{items:?}");
    assert_no_key("check", &format!("{items:?}"));
    assert_no_key("Debug", &format!("{backend:?}"));
    assert_no_key("config Debug", &format!("{:?}", MysqlConfig::from_url(&mutual("simba_x509")).unwrap()));
}

#[test]
#[serial(mysql_tls)]
fn the_applications_own_opts_work_with_the_backends_settings_forced() {
    require();
    let ssl = mysql::SslOpts::default()
        .with_root_cert_path(Some(std::path::PathBuf::from(file("ca.pem"))))
        .with_client_identity(Some(mysql::ClientIdentity::new(
            std::path::PathBuf::from(file("client.pem")),
            std::path::PathBuf::from(file("client.key")),
        )));
    // The application's own session settings that would break the backend: no autocommit, a
    // local time zone, found rows instead of affected rows. The backend overrides them.
    let opts = mysql::OptsBuilder::new()
        .ip_or_hostname(Some("127.0.0.1"))
        .tcp_port(3307)
        .user(Some("simba_x509"))
        .db_name(Some("test"))
        .ssl_opts(ssl)
        .init(vec!["SET SESSION autocommit = 0", "SET SESSION time_zone = '+05:00'"])
        .additional_capabilities(mysql::consts::CapabilityFlags::CLIENT_FOUND_ROWS);
    let config = MysqlConfig::from_opts(opts.clone());
    assert_eq!(config.ssl_mode(), MysqlSslMode::VerifyIdentity);
    let mine = Arc::new(SqlBackend::mysql_opts(opts, options(Duration::from_secs(5))).unwrap());
    mine.init_schema().unwrap();
    let item = tls_item(&mine.check());
    assert!(item.status == CheckStatus::Ok && item.detail.contains("client.pem"), "{item:?}");
    assert!(mine.redacted_url().contains("ssl-mode=VERIFY_IDENTITY"), "{}", mine.redacted_url());
    // Another backend, on its own connections, sees what this one wrote: it was committed.
    let other = Arc::new(SqlBackend::mysql(&mutual("simba_x509"), options(Duration::from_secs(5))).unwrap());
    let session = Session::open(mine.clone(), SessionOptions::default()).unwrap();
    let name = Name::new(support::unique("byo-opts")).unwrap();
    let lease = session.lock(&name).unwrap();
    let holder = other.holder(&name).unwrap().expect("the other backend sees the holder");
    assert_eq!(&holder.session, session.id());
    assert_eq!(holder.token, lease.token().unwrap());
    // A rival on the same backend is refused. (The forced-off CLIENT_FOUND_ROWS matters only in
    // the race where a holder seen dead is replaced between the acquire's read and its upsert,
    // which this test does not force: there an unchanged row would count as taken.)
    let rival = Session::open(mine.clone(), SessionOptions::default()).unwrap();
    assert!(rival.try_lock(&name).unwrap().is_none(), "a held lease was taken by a rival");
    rival.close().unwrap();
    // The database clock is UTC whatever the application's time zone.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as i64;
    let db = mine.database_now_ms().unwrap();
    assert!((db - now).abs() < 60_000, "database clock {db} vs local {now}: not UTC");
    lease.release().unwrap();
    session.close().unwrap();
    // MySQL-style TLS settings replace the driver's SslOpts.
    let config = MysqlConfig::from_opts(
        mysql::OptsBuilder::new()
            .ip_or_hostname(Some("127.0.0.1"))
            .tcp_port(3307)
            .user(Some("root"))
            .db_name(Some("test")),
    )
    .with_tls(MysqlTls::new().mode(MysqlSslMode::VerifyIdentity).ca(file("ca.pem")))
    .unwrap();
    let backend = SqlBackend::mysql_config(config, options(Duration::from_secs(5))).unwrap();
    assert_eq!(tls_item(&backend.check()).status, CheckStatus::Ok);
    // Without SslOpts the application's Opts mean plain TCP: refused by the TLS-only server.
    let plain = mysql::OptsBuilder::new().ip_or_hostname(Some("127.0.0.1")).tcp_port(3307).user(Some("root"));
    let e = SqlBackend::mysql_opts(plain, options(LONG)).unwrap().database_now_ms().unwrap_err();
    assert!(chain(&e).contains("not encrypted"), "{e}");
}

#[test]
#[serial(mysql_tls)]
fn bad_tls_settings_are_invalid_config_naming_the_file_before_any_io() {
    let tmp = std::env::temp_dir().join(support::unique("simba-mysql-tls"));
    std::fs::create_dir_all(&tmp).unwrap();
    let junk = tmp.join("junk.pem");
    std::fs::write(&junk, "SECRET-MATERIAL not a pem").unwrap();
    let j = junk.display();
    // Port 1 refuses connections: an error other than InvalidConfig would mean I/O happened.
    for (query, names) in [
        (format!("ssl-ca={}/missing.pem", tmp.display()), "missing.pem"),
        (format!("ssl-ca={j}"), "junk.pem"),
        (format!("ssl-mode=REQUIRED&ssl-cert={j}&ssl-key={j}"), "junk.pem"),
        (format!("ssl-mode=REQUIRED&ssl-ca={j}"), "VERIFY_IDENTITY"),
        (format!("ssl-mode=DISABLED&ssl-cert={j}&ssl-key={j}"), "DISABLED"),
        (format!("ssl-cert={j}"), "both"),
        ("ssl-mode=verify-full".to_string(), "VERIFY_IDENTITY"),
        ("require_ssl=true".to_string(), "ssl-mode=REQUIRED"),
        ("danger_accept_invalid_certs=true".to_string(), "ssl-mode=REQUIRED"),
    ] {
        let url = format!("mysql://root@127.0.0.1:1/test?{query}");
        let e = SqlBackend::mysql(&url, options(LONG)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}: {e}");
        assert!(e.to_string().contains(names), "{url}: {e}");
        assert!(!chain(&e).contains("SECRET-MATERIAL"), "{url}: {e}");
        // The configuration refuses it when it is built.
        let e = simba::Config::from_url(&url).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}: {e}");
    }
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
#[serial(mysql_tls)]
fn the_configuration_connects_over_tls() {
    let url = mutual("simba_x509");
    let config = simba::Config::from_url(&url).unwrap();
    let backend: Arc<dyn LeaseBackend> = config.connect().unwrap();
    let item = tls_item(&backend.check());
    assert!(item.status == CheckStatus::Ok && item.detail.contains("encrypted"), "{item:?}");
    // The key file's path is shown (errors about the file can name it), never its content.
    let shown = config.redacted_url().unwrap_or_default();
    assert!(shown.contains("ssl-key=") && shown.contains("client.key"), "{config:?}");
    assert!(!format!("{config:?}").contains("PRIVATE KEY"), "{config:?}");
}

#[cfg(feature = "cli")]
#[test]
#[serial(mysql_tls)]
fn simba_check_reports_tls() {
    let url = mutual("simba_x509");
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
    assert_no_key("simba check stdout", &stdout);
    assert_no_key("simba check stderr", &stderr);
}
