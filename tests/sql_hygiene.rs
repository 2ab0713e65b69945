//! MySQL/MariaDB session hygiene against real servers: every pooled connection runs with
//! autocommit on whatever the server's default (a private MariaDB started with
//! `--autocommit=0`), the purge skips rows other transactions hold instead of waiting for them,
//! and on MariaDB every write and `CALL` is cut off by `max_statement_time` (= the query timeout),
//! before the row-lock wait limit.
//!
//! `SIMBA_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`); start the shared server
//! with `scripts/services up`. The private server needs `mariadbd` (installed by it too).
#![cfg(feature = "mysql")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use ::mysql::prelude::Queryable;
use ::mysql::{Conn, Row, TxOpts};
use simba::backend::{Acquire, KeepAlive, LeaseBackend};
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{display_chain, ErrorKind, Name, SessionId};
use support::sql::{MysqlDatabase, PrivateMariadb};

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

fn count(c: &mut Conn, sql: &str, params: impl Into<::mysql::Params>) -> i64 {
    let rows: Vec<Row> = c.exec(sql, params).unwrap();
    rows[0].get_opt::<i64, usize>(0).unwrap().unwrap()
}

/// A raw connection's transaction holding a session row `FOR UPDATE` (in a background thread).
struct Held {
    release: mpsc::Sender<()>,
    thread: thread::JoinHandle<()>,
}

impl Held {
    /// Locks `session`'s row; returns once it is locked.
    fn session_row(db_url: &str, session: &SessionId) -> Held {
        let (url, session) = (db_url.to_string(), session.to_string());
        let (locked_tx, locked_rx) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let thread = thread::spawn(move || {
            let mut c = Conn::new(::mysql::Opts::from_url(&url).unwrap()).unwrap();
            let mut tx = c.start_transaction(TxOpts::default()).unwrap();
            let rows: Vec<Row> =
                tx.exec("SELECT session_id FROM simba_session WHERE session_id = ? FOR UPDATE", (&session,)).unwrap();
            assert_eq!(rows.len(), 1, "the session row exists");
            locked_tx.send(()).unwrap();
            let _ = release_rx.recv();
            tx.commit().unwrap();
        });
        locked_rx.recv().expect("the raw connection locked the row");
        Held { release, thread }
    }

    /// Commits the raw transaction; returns once it has committed.
    fn release(self) {
        self.release.send(()).unwrap();
        self.thread.join().unwrap();
    }
}

/// A server whose default is `autocommit=0`: the backend's statements still commit at once (a
/// raw connection sees them) and no transaction stays open on its pooled connections.
#[test]
#[serial_test::serial(mariadb_private)]
fn autocommit_is_forced_on_every_connection() {
    let db = PrivateMariadb::start_with(3392, &["--autocommit=0"]);
    let mut raw = Conn::new(::mysql::Opts::from_url(&db.url()).unwrap()).unwrap();
    assert_eq!(count(&mut raw, "SELECT @@global.autocommit", ()), 0, "the server default is autocommit=0");
    raw.query_drop("SET autocommit = 1").unwrap();
    let opts =
        SqlOptions::builder().query_timeout(Duration::from_secs(2)).pool_size(2).auto_purge(false).build().unwrap();
    let b = SqlBackend::mysql(&db.url(), opts).unwrap();
    b.init_schema().unwrap();
    let s = b.open_session(Duration::from_secs(30), "autocommit").unwrap().id;
    let lease = name("autocommit-lease");
    let group = name("autocommit-group");
    assert!(matches!(b.acquire(&s, &lease).unwrap(), Acquire::Acquired { .. }));
    b.join(&s, &group).unwrap();
    assert!(matches!(b.keep_alive(&s, Duration::from_secs(30)).unwrap(), KeepAlive::Alive { .. }));
    let seen = |raw: &mut Conn| {
        (
            count(raw, "SELECT COUNT(*) FROM simba_session WHERE session_id = ?", (s.as_str(),)),
            count(
                raw,
                "SELECT COUNT(*) FROM simba_lease WHERE name = ? AND session_id = ?",
                (lease.as_str(), s.as_str()),
            ),
            count(raw, "SELECT COUNT(*) FROM simba_member WHERE session_id = ?", (s.as_str(),)),
        )
    };
    assert_eq!(seen(&mut raw), (1, 1, 1), "every write is committed");
    let ids = b.connection_ids();
    assert!(!ids.is_empty());
    for id in &ids {
        let open =
            count(&mut raw, "SELECT COUNT(*) FROM information_schema.innodb_trx WHERE trx_mysql_thread_id = ?", (id,));
        assert_eq!(open, 0, "connection {id} left a transaction open");
    }
    b.close_session(&s).unwrap();
    assert_eq!(seen(&mut raw), (0, 0, 0), "the close is committed");
}

/// The purge never waits for a row another transaction holds (`SKIP LOCKED`, MySQL 8 and
/// MariaDB 10.6+): with one expired session's row locked by a raw connection, it deletes every
/// other expired session at once; the locked one goes in the next purge after the lock is
/// released. A purge that waited would wait until the row is released, which happens only after
/// the purge returns: it would end at the query timeout (5 s) with an error. The set-up takes no
/// bet on speed: the sessions live 30 s until every join is in, then the test sets their expiry
/// a second in the past.
#[test]
#[serial_test::serial(mysql)]
fn purge_skips_rows_others_hold() {
    let db = MysqlDatabase::create();
    let opts = SqlOptions::builder().query_timeout(Duration::from_secs(5)).auto_purge(false).build().unwrap();
    let b = SqlBackend::mysql(&db.url, opts).unwrap();
    b.init_schema().unwrap();
    let group = name(&support::unique("purge-group"));
    let sessions: Vec<SessionId> =
        (0..6).map(|_| b.open_session(Duration::from_secs(30), "purge").unwrap().id).collect();
    for s in &sessions {
        b.join(s, &group).unwrap();
    }
    // Expired on the server, oldest first (a keep-alive of 1 ms could find its own session
    // expired and delete it).
    let mut raw = db.connect();
    for (i, s) in (0_i64..).zip(&sessions) {
        raw.exec_drop(
            "UPDATE simba_session SET expires_at = CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) - 1000 + ? \
             WHERE session_id = ?",
            (i, s.as_str()),
        )
        .unwrap();
    }
    // The oldest: the first in the purge's order, so a purge that waited would wait for it first.
    let held = Held::session_row(&db.url, &sessions[0]);
    let purged =
        b.purge_expired().unwrap_or_else(|e| panic!("the purge waited for the locked row: {}", display_chain(&e)));
    assert_eq!(purged, 5, "every expired session but the locked one");
    assert_eq!(count(&mut raw, "SELECT COUNT(*) FROM simba_session", ()), 1);
    assert_eq!(count(&mut raw, "SELECT COUNT(*) FROM simba_member WHERE session_id = ?", (sessions[0].as_str(),)), 1);
    assert_eq!(
        count(&mut raw, "SELECT COUNT(*) FROM simba_member", ()),
        1,
        "the purged sessions' memberships went too"
    );
    held.release();
    assert_eq!(b.purge_expired().unwrap(), 1, "the released session is purged");
    assert_eq!(count(&mut raw, "SELECT COUNT(*) FROM simba_session", ()), 0);
    assert_eq!(count(&mut raw, "SELECT COUNT(*) FROM simba_member", ()), 0);
}

/// MariaDB: with the session row locked by another transaction for longer than the row-lock
/// wait limit (whole seconds, at least 1 s), every write and `CALL` waiting for it is interrupted
/// by `max_statement_time` (the query timeout, 300 ms) — MariaDB error 1969 — not by the lock
/// wait limit (error 1205).
#[test]
#[serial_test::serial(mysql)]
fn writes_and_calls_are_bounded_by_the_statement_time_on_mariadb() {
    let db = MysqlDatabase::create();
    let mut raw = db.connect();
    let version: Vec<Row> = raw.query("SELECT VERSION()").unwrap();
    let version: String = version[0].get_opt::<String, usize>(0).unwrap().unwrap();
    assert!(version.contains("MariaDB"), "this test is about MariaDB's max_statement_time; the server is {version}");
    // The set-up gets a generous timeout; only the calls under test run with 300 ms, on one
    // pooled connection made beforehand (a connect on a busy machine may take longer than that,
    // which is not what this test is about).
    let generous = SqlOptions::builder().query_timeout(Duration::from_secs(5)).auto_purge(false).build().unwrap();
    let setup = SqlBackend::mysql(&db.url, generous).unwrap();
    setup.init_schema().unwrap();
    let s = setup.open_session(Duration::from_secs(30), "bounded").unwrap().id;
    let lease = name(&support::unique("bounded"));
    let group = name(&support::unique("bounded-group"));
    let opts =
        SqlOptions::builder().query_timeout(Duration::from_millis(300)).pool_size(1).auto_purge(false).build().unwrap();
    let b = SqlBackend::mysql(&db.url, opts).unwrap();
    let connected = (0..20).any(|_| b.holder(&lease).is_ok());
    assert!(connected, "no connection to {} within 20 tries of 300 ms", db.url);
    let held = Held::session_row(&db.url, &s);
    let interrupted = |what: &str, e: simba::Error| {
        let chain = display_chain(&e);
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{what}: {chain}");
        assert!(
            chain.contains("1969") && chain.contains("max_statement_time"),
            "{what}: not cut off by max_statement_time: {chain}"
        );
    };
    interrupted("keep-alive (CALL)", b.keep_alive(&s, Duration::from_secs(30)).unwrap_err());
    interrupted("acquire (CALL)", b.acquire(&s, &lease).unwrap_err());
    interrupted("join (INSERT … SELECT)", b.join(&s, &group).unwrap_err());
    interrupted("close (DELETE)", b.close_session(&s).unwrap_err());
    held.release();
    assert!(matches!(b.keep_alive(&s, Duration::from_secs(30)).unwrap(), KeepAlive::Alive { .. }));
    b.close_session(&s).unwrap();
}
