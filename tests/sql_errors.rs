//! Permanent connection errors fail at once, in the server's words (PostgreSQL and MySQL/MariaDB,
//! real servers): a wrong password, an unknown database, an unknown role or user, a login the
//! server accepts only over TLS, missing tables. Each fails the first call with a `Backend`
//! error carrying the server's message and SQLSTATE / error number and what to do — not the
//! query timeout's `Unavailable` — `check()` shows the same words, and the log gets one warning
//! per cause, not one per retry. An unreachable server is still retried until the query timeout.
//!
//! Shared servers: `SIMBA_TEST_POSTGRES_URL`, `SIMBA_TEST_MYSQL_URL` (`scripts/services up`);
//! throwaway users and databases get random names and are dropped. Password and TLS logins on
//! PostgreSQL use a private cluster (the shared one trusts every loopback login).
#![cfg(all(feature = "postgres", feature = "mysql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use simba::backend::{CheckStatus, LeaseBackend};
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{display_chain, ErrorKind};
use support::sql::{Dialect, MysqlDatabase, PrivatePostgres};

/// Long, so that an error that waited for it cannot pass for one that did not.
const QUERY_TIMEOUT: Duration = Duration::from_secs(20);

/// Every log record of this binary (tests filter by their own random names).
struct Capture(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata) -> bool {
        true
    }
    fn log(&self, record: &log::Record) {
        self.0.lock().unwrap().push((record.level(), record.args().to_string()));
    }
    fn flush(&self) {}
}

fn logs() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).unwrap();
        log::set_max_level(log::LevelFilter::Debug);
        c
    })
}

/// Warnings logged so far that mention `needle`.
fn warnings_about(needle: &str) -> usize {
    logs().0.lock().unwrap().iter().filter(|(l, m)| *l == log::Level::Warn && m.contains(needle)).count()
}

fn backend(url: &str) -> SqlBackend {
    let opts = SqlOptions::builder().query_timeout(QUERY_TIMEOUT).auto_purge(false).build().unwrap();
    SqlBackend::from_url(url, opts).unwrap()
}

/// `url`'s first call fails at once with a `Backend` error containing every one of `words`;
/// the next calls and `check()` say the same, and one warning (mentioning `needle`) was logged.
fn fails_at_once(url: &str, words: &[&str], needle: &str) {
    logs();
    let b = backend(url);
    let started = Instant::now();
    let err = b.open_session(Duration::from_secs(10), "").unwrap_err();
    let took = started.elapsed();
    let text = display_chain(&err);
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(took < QUERY_TIMEOUT / 2, "waited {took:?} for a permanent failure: {text}");
    for w in words {
        assert!(text.contains(w), "{w:?} missing from: {text}");
    }
    assert!(!text.contains("db error"), "the driver's words instead of the server's: {text}");
    for _ in 0..3 {
        let again = b.open_session(Duration::from_secs(10), "").unwrap_err();
        assert_eq!(again.kind(), ErrorKind::Backend, "{}", display_chain(&again));
    }
    let checks = b.check();
    assert_eq!(checks[0].status, CheckStatus::Fail, "{checks:?}");
    for w in words {
        assert!(checks[0].detail.contains(w), "check(): {w:?} missing from: {}", checks[0].detail);
    }
    assert_eq!(warnings_about(needle), 1, "one warning per cause, not one per retry");
}

fn rand_name(prefix: &str) -> String {
    format!("{prefix}_{:012x}", rand::random::<u64>() >> 16)
}

fn with_path(url: &str, path: &str) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_path(path);
    u.to_string()
}

#[test]
fn postgres_unknown_database() {
    let db = rand_name("simba_nodb");
    let url = with_path(&Dialect::Postgres.url(), &format!("/{db}"));
    fails_at_once(&url, &[&format!("database \"{db}\" does not exist"), "3D000", "create the database"], &db);
}

#[test]
fn postgres_unknown_role() {
    let role = rand_name("simba_norole");
    let mut u = url::Url::parse(&Dialect::Postgres.url()).unwrap();
    u.set_username(&role).unwrap();
    fails_at_once(u.as_str(), &[&format!("role \"{role}\" does not exist"), "28000", "create the role"], &role);
}

#[test]
fn mysql_unknown_database() {
    let db = rand_name("simba_nodb");
    let url = with_path(&Dialect::Mysql.url(), &format!("/{db}"));
    fails_at_once(&url, &["1049", &format!("Unknown database '{db}'"), "create the database"], &db);
}

#[test]
fn mysql_unknown_user() {
    let user = rand_name("simba_nouser");
    let mut u = url::Url::parse(&Dialect::Mysql.url()).unwrap();
    u.set_username(&user).unwrap();
    // MySQL answers 1045, MariaDB 1698 (no password sent); both SQLSTATE 28000.
    fails_at_once(u.as_str(), &["ERROR 1", "28000", &format!("Access denied for user '{user}'"), "password"], &user);
}

#[test]
#[serial_test::serial(mysql)]
fn mysql_wrong_password() {
    use ::mysql::prelude::Queryable;
    let db = MysqlDatabase::create();
    let user = rand_name("simba_pw");
    let mut admin = db.connect();
    admin.query_drop(format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'right-secret'")).unwrap();
    struct DropUser(::mysql::Conn, String);
    impl Drop for DropUser {
        fn drop(&mut self) {
            let _ = self.0.query_drop(format!("DROP USER '{}'@'%'", self.1));
        }
    }
    let _cleanup = DropUser(admin, user.clone());
    let mut u = url::Url::parse(&db.url).unwrap();
    u.set_username(&user).unwrap();
    u.set_password(Some("wrong-secret")).unwrap();
    fails_at_once(u.as_str(), &["1045", &format!("Access denied for user '{user}'"), "(using password: YES)"], &user);
    let text = display_chain(&backend(u.as_str()).open_session(Duration::from_secs(1), "").unwrap_err());
    assert!(!text.contains("wrong-secret"), "{text}");
}

#[test]
#[serial_test::serial(mysql)]
fn mysql_missing_tables() {
    let db = MysqlDatabase::create();
    let b = backend(&db.url);
    let started = Instant::now();
    let err = b.open_session(Duration::from_secs(10), "").unwrap_err();
    let text = display_chain(&err);
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(started.elapsed() < QUERY_TIMEOUT / 2, "{text}");
    assert!(text.contains("1146") && text.contains("simba schema apply"), "{text}");
}

/// A private cluster (ssl = off): `simba_pw` logs in with a password, `simba_tls` only over TLS.
#[test]
#[serial_test::serial(postgres_private)]
fn postgres_password_tls_and_missing_tables() {
    let pg = PrivatePostgres::start_with(5493, |data| {
        std::fs::write(
            data.join("pg_hba.conf"),
            "local all all trust\n\
             host all postgres 127.0.0.1/32 trust\n\
             hostssl all simba_tls 127.0.0.1/32 trust\n\
             host all simba_pw 127.0.0.1/32 scram-sha-256\n",
        )
        .unwrap();
    });
    let mut admin = ::postgres::Client::connect(&pg.url(), ::postgres::NoTls).unwrap();
    admin.batch_execute("create role simba_pw login password 'right-secret'; create role simba_tls login;").unwrap();
    let port = pg.port;
    let ok = backend(&format!("postgres://simba_pw:right-secret@127.0.0.1:{port}/postgres"));
    let checks = ok.check();
    assert_eq!(checks[0].status, CheckStatus::Ok, "the right password logs in: {checks:?}");

    fails_at_once(
        &format!("postgres://simba_pw:wrong-secret@127.0.0.1:{port}/postgres"),
        &["password authentication failed for user \"simba_pw\"", "28P01", "check the password"],
        "password authentication failed for user \"simba_pw\"",
    );
    fails_at_once(
        &format!("postgres://simba_pw@127.0.0.1:{port}/postgres"),
        &["password missing", "put it in the URL"],
        "password missing",
    );
    fails_at_once(
        &format!("postgres://simba_tls@127.0.0.1:{port}/postgres"),
        &["no pg_hba.conf entry", "no encryption", "28000", "only over TLS"],
        "user \"simba_tls\"",
    );
    fails_at_once(
        &format!("postgres://postgres@127.0.0.1:{port}/postgres?sslmode=require"),
        &["server does not support TLS", "sslmode=require needs TLS", "ssl = off"],
        "sslmode=require needs TLS",
    );
    // Missing tables: at once, with the server's words.
    let b = backend(&pg.url());
    let err = b.open_session(Duration::from_secs(10), "").unwrap_err();
    let text = display_chain(&err);
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(text.contains("42P01") && text.contains("simba_session") && text.contains("simba schema apply"), "{text}");
    assert!(!text.contains("db error"), "{text}");
}

/// Nothing listens: a network failure, retried until the query timeout, and the error says
/// what the last attempt found (not the driver's "db error").
#[test]
fn unreachable_servers_are_retried_until_the_timeout() {
    for url in ["postgres://postgres@127.0.0.1:1/test", "mysql://root@127.0.0.1:1/test"] {
        let opts = SqlOptions::builder().query_timeout(Duration::from_millis(600)).auto_purge(false).build().unwrap();
        let b = SqlBackend::from_url(url, opts).unwrap();
        let err = b.open_session(Duration::from_secs(10), "").unwrap_err();
        let text = display_chain(&err);
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{text}");
        assert!(text.contains("within the query timeout"), "{text}");
        assert!(text.to_lowercase().contains("refused"), "the last attempt's cause: {text}");
    }
}
