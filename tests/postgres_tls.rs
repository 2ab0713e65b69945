//! PostgreSQL over TLS against the TLS-only server of `scripts/services up postgres-tls`
//! (127.0.0.1:5433: `hostssl` logins only, `hostnossl … reject`; the role `simba-test-client` logs
//! in only with its client certificate). Certificates come from `scripts/tls-certs` in
//! `SIMBA_TEST_TLS_DIR`.
//!
//! A wrong CA, a missing client certificate, a host name the certificate does not list (under
//! `verify-full`) and a plaintext client each fail at once (long before the query timeout) with
//! what went wrong — the server's own words where it sends some; `verify-ca` accepts that same
//! host name; `check()` says whether the connection is encrypted and what was verified; the
//! application's own `postgres::Config` works with the backend's TLS; the key's contents never
//! show in `Debug`, errors or check output.
#![cfg(feature = "postgres")]

mod support;

use std::time::{Duration, Instant};

use serial_test::serial;
use simba::backend::{CheckStatus, LeaseBackend};
use simba::backends::sql::{PostgresTls, SqlBackend, SqlOptions, SslMode};
use simba::{ErrorKind, Name};

/// A query timeout no failing handshake may wait for: "at once" means well before it.
const LONG: Duration = Duration::from_secs(30);
const ADDR: &str = "127.0.0.1:5433";
const CERT_USER: &str = "simba-test-client";

use support::tls::file;

fn require() {
    support::require_tcp("TLS-only PostgreSQL (scripts/services up postgres-tls)", ADDR);
}

fn options(timeout: Duration) -> SqlOptions {
    SqlOptions::builder().query_timeout(timeout).build().unwrap()
}

/// `postgres://USER@HOST:5433/test?QUERY`.
fn url(user: &str, host: &str, query: &str) -> String {
    require();
    format!("postgres://{user}@{host}:5433/test?{query}")
}

/// The verified, mutually authenticated URL of the TCK.
fn mtls_url() -> String {
    url(
        CERT_USER,
        "127.0.0.1",
        &format!(
            "sslmode=verify-full&sslrootcert={}&sslcert={}&sslkey={}",
            file("ca.pem"),
            file("client.pem"),
            file("client.key")
        ),
    )
}

/// The first statement against `url` fails: the error and how long it took.
fn refused(url: &str) -> (simba::Error, Duration) {
    let backend = SqlBackend::postgres(url, options(LONG)).unwrap_or_else(|e| panic!("{url}: {e}"));
    let started = Instant::now();
    let e = backend.database_now_ms().expect_err("the connection must be refused");
    (e, started.elapsed())
}

fn chain(e: &simba::Error) -> String {
    simba::display_chain(e)
}

fn tls_item(backend: &SqlBackend) -> simba::backend::CheckItem {
    let items = backend.check();
    items.iter().find(|i| i.name == "tls").cloned().unwrap_or_else(|| panic!("no tls item: {items:?}"))
}

#[test]
#[serial(postgres_tls)]
fn a_wrong_ca_fails_at_once_naming_the_root_certificate() {
    let (e, took) =
        refused(&url("postgres", "127.0.0.1", &format!("sslmode=verify-full&sslrootcert={}", file("other-ca.pem"))));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("UnknownIssuer") || text.contains("unknown issuer"), "rustls' words: {text}");
    assert!(text.contains("does not verify against sslrootcert=") && text.contains("other-ca.pem"), "{text}");
    assert_eq!(e.kind(), ErrorKind::Backend, "a certificate that does not verify never heals: {text}");
    // libpq: require with a root certificate verifies the chain like verify-ca.
    let (e, _) =
        refused(&url("postgres", "127.0.0.1", &format!("sslmode=require&sslrootcert={}", file("other-ca.pem"))));
    assert!(chain(&e).contains("does not verify against"), "{}", chain(&e));
}

#[test]
#[serial(postgres_tls)]
fn a_missing_client_certificate_fails_at_once_in_the_servers_words() {
    let (e, took) =
        refused(&url(CERT_USER, "127.0.0.1", &format!("sslmode=verify-full&sslrootcert={}", file("ca.pem"))));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("connection requires a valid client certificate"), "the server's words: {text}");
    assert!(text.contains("sslcert=") && text.contains("sslkey="), "the hint says what to give: {text}");
    assert_eq!(e.kind(), ErrorKind::Backend, "{text}");
}

#[test]
#[serial(postgres_tls)]
fn verify_full_refuses_a_host_name_the_certificate_does_not_list_and_verify_ca_accepts_it() {
    // The server's certificate lists 127.0.0.1, ::1 and localhost; `hostaddr` sends the TCP
    // connection to 127.0.0.1 while the certificate is checked against the host name.
    let query = |mode: &str| format!("hostaddr=127.0.0.1&sslmode={mode}&sslrootcert={}", file("ca.pem"));
    let (e, took) = refused(&url("postgres", "db.wrong-name.invalid", &query("verify-full")));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("does not name the host \"db.wrong-name.invalid\""), "{text}");
    assert!(text.contains("certificate not valid for name"), "rustls' words: {text}");
    let backend =
        SqlBackend::postgres(&url("postgres", "db.wrong-name.invalid", &query("verify-ca")), options(LONG)).unwrap();
    backend.database_now_ms().unwrap_or_else(|e| panic!("verify-ca checks the chain only: {}", chain(&e)));
    let item = tls_item(&backend);
    assert_eq!(item.status, CheckStatus::Ok, "{item:?}");
    assert!(item.detail.contains("chain verified") && item.detail.contains("host name is not checked"), "{item:?}");
}

#[test]
#[serial(postgres_tls)]
fn a_plaintext_client_fails_at_once_in_the_servers_words() {
    let (e, took) = refused(&url("postgres", "127.0.0.1", "sslmode=disable"));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("no encryption"), "the server's words (pg_hba.conf): {text}");
    assert!(text.contains("sslmode=verify-full"), "the hint says to use TLS: {text}");
    assert_eq!(e.kind(), ErrorKind::Backend, "{text}");
}

#[test]
#[serial(postgres_tls)]
fn prefer_and_require_encrypt_without_verifying() {
    for mode in ["prefer", "require"] {
        let backend =
            SqlBackend::postgres(&url("postgres", "127.0.0.1", &format!("sslmode={mode}")), options(LONG)).unwrap();
        backend.database_now_ms().unwrap_or_else(|e| panic!("sslmode={mode}: {}", chain(&e)));
        let item = tls_item(&backend);
        assert!(item.detail.starts_with("encrypted (TLS"), "{mode}: {item:?}");
        assert!(item.detail.contains("NOT verified"), "{mode}: {item:?}");
    }
    // Without sslmode (libpq's default, prefer) a server offering TLS gets TLS.
    let backend = SqlBackend::postgres(&url("postgres", "127.0.0.1", ""), options(LONG)).unwrap();
    backend.database_now_ms().unwrap();
    assert!(tls_item(&backend).detail.starts_with("encrypted"), "{:?}", tls_item(&backend));
}

#[test]
#[serial(postgres_tls)]
fn check_reports_encryption_and_verification_and_never_the_key() {
    let key = std::fs::read_to_string(file("client.key")).unwrap();
    let key_lines: Vec<&str> = key.lines().filter(|l| !l.starts_with("-----") && l.len() > 8).collect();
    assert!(!key_lines.is_empty());
    let leaks = |what: &str, text: &str| {
        for l in &key_lines {
            assert!(!text.contains(l), "{what} shows the client key: {text}");
        }
    };
    let backend = SqlBackend::postgres(&mtls_url(), options(Duration::from_secs(5))).unwrap();
    backend.init_schema().unwrap_or_else(|e| panic!("{}", chain(&e)));
    let items = backend.check();
    let item = tls_item(&backend);
    assert_eq!(item.status, CheckStatus::Ok, "{item:?}");
    assert!(item.detail.starts_with("encrypted (TLSv1"), "{item:?}");
    assert!(
        item.detail.contains("server certificate and host name \"127.0.0.1\" verified against sslrootcert="),
        "{item:?}"
    );
    assert!(
        item.detail.contains("ca.pem")
            && item.detail.contains("client certificate")
            && item.detail.contains("client.pem"),
        "{item:?}"
    );
    assert!(items.iter().all(|i| i.status != CheckStatus::Fail), "{items:?}");
    leaks("check", &format!("{items:?}"));
    leaks("Debug", &format!("{backend:?}"));
    // A plain connection says so (loopback: not a warning).
    let plain = support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
    let sep = if plain.contains('?') { '&' } else { '?' };
    let backend =
        SqlBackend::postgres(&format!("{plain}{sep}sslmode=disable"), options(Duration::from_secs(5))).unwrap();
    let item = tls_item(&backend);
    assert!(item.detail.starts_with("not encrypted (sslmode=disable)"), "{item:?}");
}

#[test]
#[serial(postgres_tls)]
fn the_applications_own_config_works_with_the_backends_tls() {
    require();
    let mut config = postgres::Config::new();
    config.host("127.0.0.1").port(5433).user(CERT_USER).dbname("test").application_name("my-app");
    // The backend's TLS replaces the configuration's own sslmode.
    config.ssl_mode(postgres::config::SslMode::Disable);
    let tls = PostgresTls::new(SslMode::VerifyFull)
        .root_cert(file("ca.pem"))
        .client_identity(file("client.pem"), file("client.key"));
    let o = SqlOptions::builder()
        .query_timeout(Duration::from_secs(5))
        .pool_size(2)
        .connection_lifetime(Duration::from_secs(60))
        .build()
        .unwrap();
    let backend = SqlBackend::postgres_from_config(config, &tls, o).unwrap();
    assert_eq!(backend.redacted_url(), "postgres://simba-test-client@127.0.0.1:5433/test");
    backend.init_schema().unwrap_or_else(|e| panic!("{}", chain(&e)));
    let grant = backend.open_session(Duration::from_secs(10), "from-config").unwrap();
    let name = Name::new(support::unique("pg-tls-config")).unwrap();
    let got = backend.acquire(&grant.id, &name).unwrap();
    assert!(matches!(got, simba::backend::Acquire::Acquired { .. }), "{got:?}");
    backend.close_session(&grant.id).unwrap();
    let item = tls_item(&backend);
    assert!(item.detail.contains("host name \"127.0.0.1\" verified") && item.detail.contains("client.pem"), "{item:?}");
    // Settings in code and in the URL join; a setting made twice with different values is refused.
    let in_code =
        PostgresTls::default().root_cert(file("ca.pem")).client_identity(file("client.pem"), file("client.key"));
    let b = SqlBackend::postgres_with_tls(&url(CERT_USER, "127.0.0.1", "sslmode=verify-full"), &in_code, options(LONG))
        .unwrap();
    b.database_now_ms().unwrap_or_else(|e| panic!("{}", chain(&e)));
    let e = SqlBackend::postgres_with_tls(
        &url(CERT_USER, "127.0.0.1", "sslmode=require"),
        &PostgresTls::new(SslMode::VerifyFull),
        options(LONG),
    )
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
}

#[test]
#[serial(postgres_tls)]
fn bad_tls_settings_are_invalid_config_before_any_io() {
    let tmp = std::env::temp_dir().join(support::unique("simba-pg-tls"));
    std::fs::create_dir_all(&tmp).unwrap();
    let junk = tmp.join("junk.pem");
    std::fs::write(&junk, "not PEM at all").unwrap();
    // Port 1 refuses connections: an error other than InvalidConfig would mean I/O happened.
    for (query, names) in [
        (format!("sslmode=verify-full&sslrootcert={}/missing.pem", tmp.display()), "missing.pem"),
        (format!("sslmode=verify-ca&sslrootcert={}", junk.display()), "junk.pem"),
        (format!("sslmode=require&sslcert={0}&sslkey={0}", junk.display()), "junk.pem"),
        ("sslmode=verify-full".to_string(), "sslrootcert"),
        ("sslmode=require&sslrootcert=system".to_string(), "verify-full"),
        (format!("sslcert={}", junk.display()), "both"),
        ("sslmode=nope".to_string(), "verify-full"),
        ("sslpassword=hunter2".to_string(), "sslpassword is not supported"),
    ] {
        let u = format!("postgres://u:topsecret@127.0.0.1:1/db?{query}");
        let e = SqlBackend::postgres(&u, options(LONG)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{query}: {e}");
        let text = chain(&e);
        assert!(text.contains(names), "{query}: {text}");
        assert!(!text.contains("topsecret") && !text.contains("hunter2"), "{query}: {text}");
    }
    // The same through the configuration, when it is built (before any I/O).
    let e = simba::Config::from_url(&format!(
        "postgres://u@127.0.0.1:1/db?sslmode=verify-ca&sslrootcert={}",
        junk.display()
    ))
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("junk.pem"), "{e}");
    std::fs::remove_dir_all(&tmp).ok();
}

#[test]
#[serial(postgres_tls)]
fn a_url_through_the_configuration_connects_over_verified_tls() {
    let config = simba::Config::from_url(&mtls_url()).unwrap();
    let backend = config.connect().unwrap();
    let items = backend.check();
    let item = items.iter().find(|i| i.name == "tls").unwrap_or_else(|| panic!("{items:?}"));
    assert_eq!(item.status, CheckStatus::Ok, "{item:?}");
    assert!(item.detail.contains("verified against sslrootcert="), "{item:?}");
}

/// `simba check` over verified TLS: its `tls` line says encrypted and verified, and the client
/// key's contents never show.
#[cfg(feature = "cli")]
#[test]
#[serial(postgres_tls)]
fn simba_check_reports_encryption_and_verification() {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_simba"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SIMBA_") {
            c.env_remove(k);
        }
    }
    let o = c
        .env("SIMBA_URL", mtls_url())
        .env("SIMBA_QUERY_TIMEOUT", "5s")
        .args(["check"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let out = format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr));
    let line = out.lines().find(|l| l.contains(" tls ")).unwrap_or_else(|| panic!("no tls line: {out}"));
    assert!(line.trim_start().starts_with("ok"), "{line}");
    assert!(line.contains("encrypted (TLSv1") && line.contains("host name \"127.0.0.1\" verified"), "{line}");
    let key = std::fs::read_to_string(file("client.key")).unwrap();
    for l in key.lines().filter(|l| !l.starts_with("-----") && l.len() > 8) {
        assert!(!out.contains(l), "simba check shows the client key: {out}");
    }
}

/// A password login over verified TLS (SCRAM, as managed services use it): the right password
/// works — with SCRAM-SHA-256-PLUS, channel binding to the server's certificate, which
/// `channel_binding=require` insists on — a wrong one fails at once in the server's words, and
/// neither password shows.
#[test]
#[serial(postgres_tls)]
fn a_scram_password_login_over_tls() {
    let q = format!("sslmode=verify-full&sslrootcert={}", file("ca.pem"));
    let ok =
        SqlBackend::postgres(&url("simba-test-scram:simba-test-password", "127.0.0.1", &q), options(LONG)).unwrap();
    ok.database_now_ms().unwrap_or_else(|e| panic!("{}", chain(&e)));
    assert!(tls_item(&ok).detail.contains("host name \"127.0.0.1\" verified"), "{:?}", tls_item(&ok));
    assert!(!format!("{ok:?}").contains("simba-test-password"), "{ok:?}");
    let bound = format!("{q}&channel_binding=require");
    let ok =
        SqlBackend::postgres(&url("simba-test-scram:simba-test-password", "127.0.0.1", &bound), options(LONG)).unwrap();
    ok.database_now_ms().unwrap_or_else(|e| panic!("SCRAM-SHA-256-PLUS (channel binding): {}", chain(&e)));
    // Where no channel binding can happen (no TLS), channel_binding=require fails at once.
    let plain = support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
    let sep = if plain.contains('?') { '&' } else { '?' };
    let (e, took) = refused(&format!("{plain}{sep}sslmode=disable&channel_binding=require"));
    let text = chain(&e);
    assert!(took < LONG / 2 && text.contains("channel binding"), "took {took:?}: {text}");
    let (e, took) = refused(&url("simba-test-scram:not-the-password", "127.0.0.1", &q));
    let text = chain(&e);
    assert!(took < LONG / 2, "took {took:?}: {text}");
    assert!(text.contains("password authentication failed") && text.contains("28P01"), "{text}");
    assert!(!text.contains("not-the-password"), "{text}");
}

/// `connection_lifetime` is a setting: a connection older than it is closed when its call ends and
/// the next call opens a new one (a new server process), over the same TLS setup.
#[test]
#[serial(postgres_tls)]
fn connections_are_replaced_after_their_lifetime() {
    let lifetime = Duration::from_secs(1);
    let o = SqlOptions::builder()
        .query_timeout(Duration::from_secs(5))
        .pool_size(1)
        .auto_purge(false)
        .connection_lifetime(lifetime)
        .build()
        .unwrap();
    let backend = SqlBackend::postgres(&mtls_url(), o).unwrap();
    let before = Instant::now();
    backend.database_now_ms().unwrap();
    // The connection was born between `before` and `after`.
    let after = Instant::now();
    let first = backend.connection_ids();
    assert_eq!(first.len(), 1, "{first:?}");
    backend.database_now_ms().unwrap();
    if before.elapsed() < lifetime / 2 {
        // That call ended well within the lifetime: it reused the connection.
        assert_eq!(backend.connection_ids(), first);
    }
    // Past the lifetime, the call that uses the old connection closes it when it ends, and the
    // next one opens another.
    std::thread::sleep(lifetime.saturating_sub(after.elapsed()) + Duration::from_millis(20));
    backend.database_now_ms().unwrap();
    backend.database_now_ms().unwrap();
    let now = backend.connection_ids();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_ne!(now, first, "the connection outlived its lifetime");
    assert!(tls_item(&backend).detail.starts_with("encrypted"), "{:?}", tls_item(&backend));
    let e = SqlOptions::builder().connection_lifetime(Duration::from_millis(10)).build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
}
