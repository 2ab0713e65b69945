//! Bad data written by someone else (rows, keys): every operation that touches it fails with a
//! clear `Backend` error naming what is wrong — no panic — and nothing else is disturbed: the
//! session stays alive and keeps the leases it holds.

mod support;

use std::sync::Arc;
use std::time::Duration;

use simba::backend::LeaseBackend;
use simba::{ErrorKind, Session, SessionOptions};

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// Runs its closure when dropped: removes planted data even when the check panics.
#[allow(dead_code)]
struct Planted<F: FnMut()>(F);

impl<F: FnMut()> Drop for Planted<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}

/// Bad data was planted under `bad_lease` (corrupt token), `held_by_intruder` (held by a
/// session with a malformed id) and `bad_group` (a member with a malformed id).
fn check_isolation(backend: Arc<dyn LeaseBackend>, bad_lease: &str, held_by_intruder: &str, bad_group: &str) {
    let session = Session::open(backend.clone(), options()).unwrap();
    let good = session.lock(support::unique("good").as_str()).unwrap();
    let t = good.token().unwrap();

    let e = session.try_lock(bad_lease).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(e.to_string().contains(bad_lease), "the error names the lease: {e}");

    let e = session.leader(held_by_intruder).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
    assert!(simba::display_chain(&e).contains("session id"), "{}", simba::display_chain(&e));

    let e = session.members(bad_group).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend, "{e}");

    // Nothing else is disturbed: renewals go on, the good lease stays ours.
    std::thread::sleep(Duration::from_secs(3));
    assert!(session.is_alive());
    assert_eq!(good.token().unwrap(), t);
    drop(good);
    session.close().unwrap();
}

#[cfg(feature = "postgres")]
#[test]
#[serial_test::serial(postgres)]
fn postgres_corrupt_rows() {
    use simba::backends::sql::{SqlBackend, SqlOptions};
    let url = support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
    let backend = SqlBackend::postgres(&url, SqlOptions::builder().build().unwrap())
        .unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
    backend.init_schema().unwrap();
    let mut raw = postgres::Client::connect(&url, postgres::NoTls).unwrap();
    let (bad, held, group) = (support::unique("bad"), support::unique("held"), support::unique("group"));
    let intruder = format!("{:Z<32}", &support::unique("X")[..18]);
    raw.execute(include_str!("sql/corrupt-lease-pg.sql"), &[&bad]).unwrap();
    raw.execute(include_str!("sql/corrupt-session-pg.sql"), &[&intruder]).unwrap();
    raw.execute(include_str!("sql/corrupt-held-pg.sql"), &[&held, &intruder]).unwrap();
    raw.execute(include_str!("sql/corrupt-member-pg.sql"), &[&group, &intruder]).unwrap();
    // The planted session is removed again however the check ends: it is live for an hour, and
    // every later listing of the shared database's sessions (the TCK's `listing` area) would fail
    // on it, as it should.
    let _planted = Planted(move || {
        let _ = raw.execute(include_str!("sql/corrupt-session-delete-pg.sql"), &[&intruder]);
    });
    check_isolation(Arc::new(backend), &bad, &held, &group);
}

#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_corrupt_rows() {
    use mysql::prelude::Queryable;
    use simba::backends::sql::{SqlBackend, SqlOptions};
    let url = support::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
    let backend = SqlBackend::mysql(&url, SqlOptions::builder().build().unwrap())
        .unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
    backend.init_schema().unwrap();
    let mut raw = mysql::Conn::new(mysql::Opts::from_url(&url).unwrap()).unwrap();
    let (bad, held, group) = (support::unique("bad"), support::unique("held"), support::unique("group"));
    let intruder = format!("{:Z<32}", &support::unique("X")[..18]);
    raw.exec_drop(include_str!("sql/corrupt-lease-mysql.sql"), (&bad,)).unwrap();
    raw.exec_drop(include_str!("sql/corrupt-session-mysql.sql"), (&intruder,)).unwrap();
    raw.exec_drop(include_str!("sql/corrupt-held-mysql.sql"), (&held, &intruder)).unwrap();
    raw.exec_drop(include_str!("sql/corrupt-member-mysql.sql"), (&group, &intruder)).unwrap();
    // Removed again however the check ends (see postgres_corrupt_rows).
    let _planted = Planted(move || {
        let _ = raw.exec_drop(include_str!("sql/corrupt-session-delete-mysql.sql"), (&intruder,));
    });
    check_isolation(Arc::new(backend), &bad, &held, &group);
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn redis_corrupt_keys() {
    use simba::backends::redis::{RedisBackend, RedisOptions};
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    let backend = RedisBackend::connect(&url, RedisOptions::builder().build().unwrap())
        .unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
    let mut raw = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let (bad, held, group) = (support::unique("bad"), support::unique("held"), support::unique("group"));
    let intruder = format!("{:Z<32}", &support::unique("X")[..18]);
    // Removed again however the check ends (see postgres_corrupt_rows): the intruder session is
    // live for an hour and every later listing of the server's sessions would fail on it.
    let planted = [
        format!("simba:lease:{{{bad}}}"),
        format!("simba:session:{{{intruder}}}"),
        format!("simba:lease:{{{held}}}"),
        format!("simba:group:{{{group}}}"),
    ];
    let mut cleanup = redis::Client::open(url.as_str()).unwrap().get_connection().unwrap();
    let _planted = Planted(move || {
        let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&planted).query(&mut cleanup);
    });
    let _: () = redis::cmd("HSET")
        .arg(format!("simba:lease:{{{bad}}}"))
        .arg("session")
        .arg("")
        .arg("token")
        .arg("not-a-number")
        .query(&mut raw)
        .unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("simba:session:{{{intruder}}}"))
        .arg("metadata")
        .arg("intruder")
        .query(&mut raw)
        .unwrap();
    let _: () =
        redis::cmd("PEXPIRE").arg(format!("simba:session:{{{intruder}}}")).arg(3_600_000).query(&mut raw).unwrap();
    let _: () = redis::cmd("HSET")
        .arg(format!("simba:lease:{{{held}}}"))
        .arg("session")
        .arg(&intruder)
        .arg("token")
        .arg(3)
        .arg("expires")
        .arg(i64::MAX / 4)
        .query(&mut raw)
        .unwrap();
    let _: () = redis::cmd("ZADD")
        .arg(format!("simba:group:{{{group}}}"))
        .arg(i64::MAX / 4)
        .arg(&intruder)
        .query(&mut raw)
        .unwrap();
    check_isolation(Arc::new(backend), &bad, &held, &group);
}
