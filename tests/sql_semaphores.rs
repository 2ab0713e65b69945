//! The semaphore table on real SQL servers: an existing schema from before semaphores (the three
//! lease tables only) keeps working for leases, `check()` warns, `Session::semaphore` fails at
//! once in the server's words naming `simba schema apply`, and running the init script again
//! adds the table and nothing else changes (tokens of existing leases carry on).
//!
//! Throwaway databases on the shared servers (`SIMBA_TEST_POSTGRES_URL`, `SIMBA_TEST_MYSQL_URL`;
//! start them with `scripts/services up`).
#![cfg(any(feature = "postgres", feature = "mysql"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backend::{CheckStatus, LeaseBackend};
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{display_chain, ErrorKind, Session, SessionOptions};

fn backend(url: &str) -> SqlBackend {
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(2)).auto_purge(false).build().unwrap();
    SqlBackend::from_url(url, options).unwrap()
}

fn session(b: &SqlBackend) -> Session {
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_secs(1))
        .query_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    Session::open(Arc::new(b.clone()), options).unwrap()
}

/// `drop_table` turns a fresh schema into one from before semaphores; then the upgrade.
fn old_schema_then_upgrade(b: &SqlBackend, drop_table: impl FnOnce(), missing_words: &str) {
    b.init_schema().unwrap();
    let before = session(b);
    let lease = before.lock("job").unwrap();
    let t1 = lease.token().unwrap();
    drop(lease);
    let sem = before.semaphore("workers", 2).unwrap();
    let p = sem.acquire().unwrap();
    drop(p);
    before.close().unwrap();
    drop_table();

    let checks = b.check();
    let item = checks.iter().find(|c| c.name == "semaphores").expect("a semaphores check item");
    assert_eq!(item.status, CheckStatus::Warn, "{checks:?}");
    assert!(
        item.detail.contains("simba_semaphore is missing") && item.detail.contains("simba schema apply"),
        "{item:?}"
    );
    let schema = checks.iter().find(|c| c.name == "schema").expect("a schema check item");
    assert_ne!(schema.status, CheckStatus::Fail, "the lease tables are all there: {checks:?}");

    let s = session(b);
    let lease = s.lock("job").unwrap();
    let t2 = lease.token().unwrap();
    assert!(t2 > t1, "the lease tables lost a token: {t2} after {t1}");
    drop(lease);
    let started = Instant::now();
    let err = s.semaphore("workers", 2).unwrap_err();
    let text = display_chain(&err);
    assert_eq!(err.kind(), ErrorKind::Backend, "{text}");
    assert!(started.elapsed() < Duration::from_secs(1), "not at once: {text}");
    assert!(text.contains(missing_words) && text.contains("simba schema apply") && text.contains("workers"), "{text}");

    b.init_schema().unwrap();
    let checks = b.check();
    assert!(checks.iter().any(|c| c.name == "semaphores" && c.status == CheckStatus::Ok), "{checks:?}");
    let sem = s.semaphore("workers", 3).unwrap();
    let p = sem.acquire().unwrap();
    assert!(p.token().is_ok());
    drop(p);
    s.close().unwrap();
}

#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_schema_from_before_semaphores_upgrades() {
    use ::mysql::prelude::Queryable;
    let db = support::sql::MysqlDatabase::create();
    let b = backend(&db.url);
    old_schema_then_upgrade(&b, || db.connect().query_drop("DROP TABLE simba_semaphore").unwrap(), "1146");
    assert!(b.semaphore_limit(&simba::Name::new("workers").unwrap(), None).unwrap() == Some(3));
}

#[cfg(feature = "postgres")]
#[test]
#[serial_test::serial(postgres)]
fn postgres_schema_from_before_semaphores_upgrades() {
    let base = support::sql::Dialect::Postgres.url();
    let addr = base.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
    support::require_tcp("PostgreSQL", &addr);
    let name = format!("simba_it_{:012x}", rand::random::<u64>() >> 16);
    let mut admin = ::postgres::Client::connect(&base, ::postgres::NoTls).unwrap();
    admin.batch_execute(&format!("create database {name}")).unwrap();
    let mut u = url::Url::parse(&base).unwrap();
    u.set_path(&format!("/{name}"));
    let url = u.to_string();
    {
        let b = backend(&url);
        old_schema_then_upgrade(
            &b,
            || {
                let mut c = ::postgres::Client::connect(&url, ::postgres::NoTls).unwrap();
                c.batch_execute("drop table simba_semaphore").unwrap();
            },
            "42P01",
        );
    }
    admin.batch_execute(&format!("drop database {name} with (force)")).unwrap();
}
