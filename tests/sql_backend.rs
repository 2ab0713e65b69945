//! SQL-backend-specific tests against the real servers (PostgreSQL and MariaDB/MySQL): schema
//! initialisation, concurrency of the acquire upsert, purge limits, time-zone independence,
//! timeouts and redaction. The generic contract is covered by `tck_postgres` / `tck_mysql`.
//!
//! URLs come from `SIMBA_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`) and
//! `SIMBA_TEST_MYSQL_URL` (default `mysql://root@127.0.0.1:3306/test`); start the servers with
//! `scripts/services up`. A few checks read the tables directly to verify what the backend wrote.
// The SQL text comes from the crate-internal test seam (feature `internal-testing`).
#![cfg(all(any(feature = "postgres", feature = "mysql"), feature = "internal-testing"))]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use simba::backend::{Acquire, CheckStatus, KeepAlive, LeaseBackend, TermRemaining};
use simba::backends::sql::{Dialect, SqlBackend, SqlOptions, PURGE_BATCH};
#[cfg(feature = "mysql")]
use simba::testing::sql::mysql::{ACQUIRE_PROCEDURE, KEEP_ALIVE_PROCEDURE};
use simba::{ErrorKind, Name, SessionId, Token};

/// Direct table access for verification.
trait Raw {
    /// `(session_id, token)` of a lease row, if the row exists.
    fn lease_row(&mut self, name: &str) -> Option<(String, i64)>;
    /// Whether a session row exists (alive or not).
    fn session_exists(&mut self, session: &SessionId) -> bool;
    /// Membership rows of a session (alive or not).
    fn member_rows(&mut self, session: &SessionId) -> i64;
    /// Inserts a membership row behind the backend's back (any text as the group name).
    fn insert_member(&mut self, group: &str, session: &SessionId);
    /// Deletes a membership row behind the backend's back; asserts it existed.
    fn delete_member(&mut self, group: &str, session: &SessionId);
    /// In a connection set to an odd time zone: (the backend's "now" expression, expires_at - now
    /// of `session`).
    fn odd_zone_view(&mut self, session: &SessionId) -> (i64, Option<i64>);
    /// Holds a row lock on lease `name` for `hold` (in a background thread; returns once locked).
    fn lock_lease_row(&self, name: &str, hold: Duration);
    /// Terminates the server side of a connection (PostgreSQL backend pid, MySQL connection id).
    fn kill_connection(&mut self, id: u64);
    /// Overwrites the token of lease `name` (to plant a corrupt row).
    fn set_token(&mut self, name: &str, token: i64);
    /// A takeover as the backend's acquire does it, slowed down: in one transaction, locks
    /// `holder`'s session row for share (returns once locked), waits `hold`, moves lease `name`
    /// from `holder` to `rival` with the next token and commits. The handle yields the instant
    /// just before the commit was sent.
    fn take_over_under_lock(
        &self,
        holder: &SessionId,
        name: &str,
        rival: &SessionId,
        hold: Duration,
    ) -> thread::JoinHandle<Instant>;
}

struct Fx {
    dialect: Dialect,
    url: String,
    backend: SqlBackend,
    raw: Box<dyn Raw>,
}

fn addr_of(url: &str) -> String {
    url.split("://")
        .nth(1)
        .unwrap_or_default()
        .split('@')
        .next_back()
        .unwrap_or_default()
        .split(['/', '?'])
        .next()
        .unwrap_or_default()
        .to_string()
}

fn options(query_timeout: Duration, auto_purge: bool) -> SqlOptions {
    SqlOptions::builder().query_timeout(query_timeout).auto_purge(auto_purge).build().unwrap()
}

fn base_url(dialect: Dialect) -> String {
    let (var, default, what) = match dialect {
        Dialect::Postgres => ("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL"),
        Dialect::Mysql => ("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test", "MySQL/MariaDB"),
    };
    let url = support::env_or(var, default);
    support::require_tcp(what, &addr_of(&url));
    url
}

fn make(dialect: Dialect, opts: SqlOptions) -> Fx {
    make_at(dialect, base_url(dialect), opts)
}

fn make_at(dialect: Dialect, url: String, opts: SqlOptions) -> Fx {
    let backend = SqlBackend::from_url(&url, opts).unwrap();
    backend
        .init_schema()
        .unwrap_or_else(|e| panic!("cannot initialise the schema at {url}: {e:?} (run `scripts/services up`)"));
    let raw: Box<dyn Raw> = match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => Box::new(pg::PgRaw::new(&url)),
        #[cfg(feature = "mysql")]
        Dialect::Mysql => Box::new(my::MyRaw::new(&url)),
        #[allow(unreachable_patterns)]
        _ => unreachable!("dialect not compiled in"),
    };
    Fx { dialect, url, backend, raw }
}

/// A fixture in a private PostgreSQL schema / MySQL database (dropped afterwards), for tests that
/// count rows other processes might touch: every backend on the shared server purges expired
/// sessions in the background.
struct Isolated {
    fx: Fx,
    drop_namespace: Option<Box<dyn FnOnce()>>,
}

impl Drop for Isolated {
    fn drop(&mut self) {
        if let Some(f) = self.drop_namespace.take() {
            f();
        }
    }
}

fn make_isolated(dialect: Dialect, opts: SqlOptions) -> Isolated {
    let base = base_url(dialect);
    let ns = format!("simba_it_{:012x}", rand::random::<u64>() >> 16);
    let (url, drop_namespace): (String, Box<dyn FnOnce()>) = match dialect {
        #[cfg(feature = "postgres")]
        Dialect::Postgres => {
            let mut c = ::postgres::Client::connect(&base, ::postgres::NoTls).unwrap();
            c.batch_execute(&format!("create schema {ns}")).unwrap();
            let sep = if base.contains('?') { '&' } else { '?' };
            let url = format!("{base}{sep}options=-c%20search_path%3D{ns}");
            (url, Box::new(move || c.batch_execute(&format!("drop schema {ns} cascade")).unwrap()))
        }
        #[cfg(feature = "mysql")]
        Dialect::Mysql => {
            use ::mysql::prelude::Queryable;
            let mut c = ::mysql::Conn::new(::mysql::Opts::from_url(&base).unwrap()).unwrap();
            c.query_drop(format!("CREATE DATABASE {ns}")).unwrap();
            let mut u = url::Url::parse(&base).unwrap();
            u.set_path(&format!("/{ns}"));
            (u.to_string(), Box::new(move || c.query_drop(format!("DROP DATABASE {ns}")).unwrap()))
        }
        #[allow(unreachable_patterns)]
        _ => unreachable!("dialect not compiled in"),
    };
    Isolated { fx: make_at(dialect, url, opts), drop_namespace: Some(drop_namespace) }
}

fn name(s: &str) -> Name {
    Name::new(s).unwrap()
}

/// Round trips (through `proxy`, which `b` connects through) of a takeover by `s` of a fresh
/// lease `{prefix}-{tag}` whose holder session just expired (its token 2 is checked).
fn takeover_round_trips(b: &SqlBackend, proxy: &rtt::CountingProxy, s: &SessionId, prefix: &str, tag: &str) -> u64 {
    let dying = b.open_session(Duration::from_millis(300), "holder dies").unwrap().id;
    let taken = name(&format!("{prefix}-{tag}"));
    assert_eq!(acquired(b.acquire(&dying, &taken).unwrap()), 1);
    thread::sleep(Duration::from_millis(600));
    let before = proxy.round_trips();
    assert_eq!(acquired(b.acquire(s, &taken).unwrap()), 2, "{tag}: a takeover");
    proxy.round_trips() - before
}

fn acquired(a: Acquire) -> u64 {
    match a {
        Acquire::Acquired { token, .. } => token.get(),
        Acquire::Busy => panic!("expected Acquired, got Busy"),
    }
}

#[cfg(feature = "postgres")]
mod pg {
    use super::*;
    use ::postgres::{Client, NoTls};

    pub struct PgRaw {
        url: String,
        client: Client,
    }

    impl PgRaw {
        pub fn new(url: &str) -> PgRaw {
            PgRaw { url: url.to_string(), client: Client::connect(url, NoTls).unwrap() }
        }
    }

    impl Raw for PgRaw {
        fn lease_row(&mut self, name: &str) -> Option<(String, i64)> {
            self.client
                .query_opt("select session_id::text, token from simba_lease where name = $1", &[&name])
                .unwrap()
                .map(|r| (r.get(0), r.get(1)))
        }
        fn session_exists(&mut self, s: &SessionId) -> bool {
            self.client
                .query_opt("select 1 from simba_session where session_id = $1", &[&s.as_str()])
                .unwrap()
                .is_some()
        }
        fn member_rows(&mut self, s: &SessionId) -> i64 {
            self.client
                .query_one("select count(*) from simba_member where session_id = $1", &[&s.as_str()])
                .unwrap()
                .get(0)
        }
        fn insert_member(&mut self, group: &str, s: &SessionId) {
            let n = self
                .client
                .execute("insert into simba_member (group_name, session_id) values ($1, $2)", &[&group, &s.as_str()])
                .unwrap();
            assert_eq!(n, 1);
        }
        fn delete_member(&mut self, group: &str, s: &SessionId) {
            let n = self
                .client
                .execute("delete from simba_member where group_name = $1 and session_id = $2", &[&group, &s.as_str()])
                .unwrap();
            assert_eq!(n, 1, "membership ({group}, {s}) existed");
        }
        fn odd_zone_view(&mut self, s: &SessionId) -> (i64, Option<i64>) {
            let mut c = Client::connect(&self.url, NoTls).unwrap();
            c.batch_execute("set time zone 'Pacific/Chatham'").unwrap();
            let tz: String = c.query_one("show timezone", &[]).unwrap().get(0);
            assert_eq!(tz, "Pacific/Chatham");
            let now: i64 = c.query_one(simba::testing::sql::postgres::NOW, &[]).unwrap().get(0);
            let rem = c
                .query_opt(
                    "select expires_at - (extract(epoch from statement_timestamp()) * 1000)::bigint \
                     from simba_session where session_id = $1",
                    &[&s.as_str()],
                )
                .unwrap()
                .map(|r| r.get(0));
            (now, rem)
        }
        fn lock_lease_row(&self, name: &str, hold: Duration) {
            let (url, name) = (self.url.clone(), name.to_string());
            let ready = Arc::new(Barrier::new(2));
            let r2 = ready.clone();
            thread::spawn(move || {
                let mut c = Client::connect(&url, NoTls).unwrap();
                let mut tx = c.transaction().unwrap();
                tx.query("select * from simba_lease where name = $1 for update", &[&name]).unwrap();
                r2.wait();
                thread::sleep(hold);
                tx.rollback().unwrap();
            });
            ready.wait();
        }
        fn kill_connection(&mut self, id: u64) {
            let pid = i32::try_from(id).unwrap();
            let killed: bool = self.client.query_one("select pg_terminate_backend($1)", &[&pid]).unwrap().get(0);
            assert!(killed, "backend {pid} terminated");
        }
        fn set_token(&mut self, name: &str, token: i64) {
            let n = self.client.execute("update simba_lease set token = $2 where name = $1", &[&name, &token]).unwrap();
            assert_eq!(n, 1);
        }
        fn take_over_under_lock(
            &self,
            holder: &SessionId,
            name: &str,
            rival: &SessionId,
            hold: Duration,
        ) -> thread::JoinHandle<Instant> {
            let (url, holder, name, rival) =
                (self.url.clone(), holder.to_string(), name.to_string(), rival.to_string());
            let ready = Arc::new(Barrier::new(2));
            let r2 = ready.clone();
            let h = thread::spawn(move || {
                let mut c = Client::connect(&url, NoTls).unwrap();
                let mut tx = c.transaction().unwrap();
                let locked =
                    tx.query("select 1 from simba_session where session_id = $1 for share", &[&holder]).unwrap();
                assert_eq!(locked.len(), 1);
                r2.wait();
                thread::sleep(hold);
                let n = tx
                    .execute(
                        "update simba_lease set session_id = $3, token = token + 1 where name = $1 and session_id = $2",
                        &[&name, &holder, &rival],
                    )
                    .unwrap();
                assert_eq!(n, 1);
                // Taken before the commit is sent: the row lock is held until the server has it,
                // so a keep-alive that waited for the lock returns after this instant (the
                // instant after the commit's reply may come later than the keep-alive's own).
                let committing = Instant::now();
                tx.commit().unwrap();
                committing
            });
            ready.wait();
            h
        }
    }
}

#[cfg(feature = "mysql")]
mod my {
    use super::*;
    use ::mysql::prelude::Queryable;
    use ::mysql::{Conn, Opts, Row};

    pub struct MyRaw {
        opts: Opts,
        conn: Conn,
    }

    impl MyRaw {
        pub fn new(url: &str) -> MyRaw {
            let opts = Opts::from_url(url).unwrap();
            MyRaw { conn: Conn::new(opts.clone()).unwrap(), opts }
        }
    }

    fn i(row: &Row, idx: usize) -> i64 {
        row.get_opt::<i64, usize>(idx).unwrap().unwrap()
    }

    impl Raw for MyRaw {
        fn lease_row(&mut self, name: &str) -> Option<(String, i64)> {
            let rows: Vec<Row> =
                self.conn.exec("SELECT session_id, token FROM simba_lease WHERE name = ?", (name,)).unwrap();
            rows.first().map(|r| (r.get_opt::<String, usize>(0).unwrap().unwrap(), i(r, 1)))
        }
        fn session_exists(&mut self, s: &SessionId) -> bool {
            let rows: Vec<Row> =
                self.conn.exec("SELECT COUNT(*) FROM simba_session WHERE session_id = ?", (s.as_str(),)).unwrap();
            i(&rows[0], 0) > 0
        }
        fn member_rows(&mut self, s: &SessionId) -> i64 {
            let rows: Vec<Row> =
                self.conn.exec("SELECT COUNT(*) FROM simba_member WHERE session_id = ?", (s.as_str(),)).unwrap();
            i(&rows[0], 0)
        }
        fn insert_member(&mut self, group: &str, s: &SessionId) {
            self.conn
                .exec_drop("INSERT INTO simba_member (group_name, session_id) VALUES (?, ?)", (group, s.as_str()))
                .unwrap();
            assert_eq!(self.conn.affected_rows(), 1);
        }
        fn delete_member(&mut self, group: &str, s: &SessionId) {
            self.conn
                .exec_drop("DELETE FROM simba_member WHERE group_name = ? AND session_id = ?", (group, s.as_str()))
                .unwrap();
            assert_eq!(self.conn.affected_rows(), 1, "membership ({group}, {s}) existed");
        }
        fn odd_zone_view(&mut self, s: &SessionId) -> (i64, Option<i64>) {
            let mut c = Conn::new(self.opts.clone()).unwrap();
            c.query_drop("SET time_zone = '+12:45'").unwrap();
            let tz: Vec<Row> = c.query("SELECT @@time_zone").unwrap();
            assert_eq!(tz[0].get_opt::<String, usize>(0).unwrap().unwrap(), "+12:45");
            let now: Vec<Row> = c.query(simba::testing::sql::mysql::NOW).unwrap();
            let rem: Vec<Row> = c
                .exec(
                    "SELECT expires_at - CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED) FROM simba_session \
                     WHERE session_id = ?",
                    (s.as_str(),),
                )
                .unwrap();
            (i(&now[0], 0), rem.first().map(|r| i(r, 0)))
        }
        fn lock_lease_row(&self, name: &str, hold: Duration) {
            let (opts, name) = (self.opts.clone(), name.to_string());
            let ready = Arc::new(Barrier::new(2));
            let r2 = ready.clone();
            thread::spawn(move || {
                let mut c = Conn::new(opts).unwrap();
                let mut tx = c.start_transaction(::mysql::TxOpts::default()).unwrap();
                let _: Vec<Row> = tx.exec("SELECT * FROM simba_lease WHERE name = ? FOR UPDATE", (name,)).unwrap();
                r2.wait();
                thread::sleep(hold);
                tx.rollback().unwrap();
            });
            ready.wait();
        }
        fn kill_connection(&mut self, id: u64) {
            self.conn.exec_drop("KILL ?", (id,)).unwrap();
        }
        fn set_token(&mut self, name: &str, token: i64) {
            self.conn.exec_drop("UPDATE simba_lease SET token = ? WHERE name = ?", (token, name)).unwrap();
            assert_eq!(self.conn.affected_rows(), 1);
        }
        fn take_over_under_lock(
            &self,
            holder: &SessionId,
            name: &str,
            rival: &SessionId,
            hold: Duration,
        ) -> thread::JoinHandle<Instant> {
            let (opts, holder, name, rival) =
                (self.opts.clone(), holder.to_string(), name.to_string(), rival.to_string());
            let ready = Arc::new(Barrier::new(2));
            let r2 = ready.clone();
            let h = thread::spawn(move || {
                let mut c = Conn::new(opts).unwrap();
                let mut tx = c.start_transaction(::mysql::TxOpts::default()).unwrap();
                let locked: Vec<Row> =
                    tx.exec("SELECT 1 FROM simba_session WHERE session_id = ? LOCK IN SHARE MODE", (&holder,)).unwrap();
                assert_eq!(locked.len(), 1);
                r2.wait();
                thread::sleep(hold);
                tx.exec_drop(
                    "UPDATE simba_lease SET session_id = ?, token = token + 1 WHERE name = ? AND session_id = ?",
                    (&rival, &name, &holder),
                )
                .unwrap();
                assert_eq!(tx.affected_rows(), 1);
                // Taken before the commit is sent: the row lock is held until the server has it,
                // so a keep-alive that waited for the lock returns after this instant (the
                // instant after the commit's reply may come later than the keep-alive's own).
                let committing = Instant::now();
                tx.commit().unwrap();
                committing
            });
            ready.wait();
            h
        }
    }
}

/// A loopback TCP proxy that counts round trips, like the benchmark's (`benches/simba/proxy.rs`):
/// a client write that follows a server reply on a connection (or is its first) starts one. Only
/// this test's connections pass through it, so the count is exact on a shared server.
mod rtt {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
    use std::sync::Arc;
    use std::thread;
    use std::time::Duration;

    pub struct CountingProxy {
        port: u16,
        round_trips: Arc<AtomicU64>,
        stop: Arc<AtomicBool>,
    }

    impl CountingProxy {
        pub fn start(upstream: &str) -> CountingProxy {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            listener.set_nonblocking(true).unwrap();
            let port = listener.local_addr().unwrap().port();
            let round_trips = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let (rt, st, up) = (round_trips.clone(), stop.clone(), upstream.to_string());
            thread::spawn(move || {
                while !st.load(Ordering::SeqCst) {
                    match listener.accept() {
                        Ok((client, _)) => {
                            client.set_nonblocking(false).unwrap();
                            let server = TcpStream::connect(&up).unwrap();
                            client.set_nodelay(true).unwrap();
                            server.set_nodelay(true).unwrap();
                            let last = Arc::new(AtomicU8::new(0));
                            let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                            let (rt2, l2) = (rt.clone(), last.clone());
                            thread::spawn(move || pump(client, server, true, &l2, &rt2));
                            let rt3 = rt.clone();
                            thread::spawn(move || pump(s2, c2, false, &last, &rt3));
                        }
                        Err(_) => thread::sleep(Duration::from_millis(2)),
                    }
                }
            });
            CountingProxy { port, round_trips, stop }
        }

        /// `url` with its `host:port` (`addr`) replaced by the proxy's address.
        pub fn url(&self, url: &str, addr: &str) -> String {
            url.replacen(addr, &format!("127.0.0.1:{}", self.port), 1)
        }

        pub fn round_trips(&self) -> u64 {
            self.round_trips.load(Ordering::SeqCst)
        }
    }

    impl Drop for CountingProxy {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::SeqCst);
        }
    }

    /// Forwards `from` → `to`; `up` is the client-to-server direction. `last` is 1 after client
    /// bytes, 2 after server bytes (set before they are forwarded, so the client's next request is
    /// always counted).
    fn pump(mut from: TcpStream, mut to: TcpStream, up: bool, last: &AtomicU8, round_trips: &AtomicU64) {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if up {
                if last.swap(1, Ordering::SeqCst) != 1 {
                    round_trips.fetch_add(1, Ordering::SeqCst);
                }
            } else {
                last.store(2, Ordering::SeqCst);
            }
            if to.write_all(&buf[..n]).is_err() {
                break;
            }
        }
        let _ = to.shutdown(Shutdown::Write);
    }
}

/// The test bodies, shared by both dialects.
mod cases {
    use super::*;

    const LONG: Duration = Duration::from_secs(10);

    pub fn schema_init_is_idempotent(fx: &mut Fx) {
        fx.backend.init_schema().unwrap();
        fx.backend.init_schema().unwrap();
        // Concurrently, from fresh backends (fresh connections).
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let url = fx.url.clone();
                thread::spawn(move || {
                    SqlBackend::from_url(&url, options(Duration::from_secs(5), false)).unwrap().init_schema().unwrap()
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        let checks = fx.backend.check();
        let status = |n: &str| checks.iter().find(|c| c.name == n).map(|c| c.status);
        assert_eq!(status("reachable"), Some(CheckStatus::Ok), "{checks:?}");
        assert_eq!(status("schema"), Some(CheckStatus::Ok), "{checks:?}");
        assert_ne!(status("clock"), Some(CheckStatus::Fail), "{checks:?}");
        assert!(fx.dialect.init_sql().contains("create table if not exists simba_member"));
    }

    pub fn racing_sessions_one_winner(fx: &mut Fx) {
        let b = Arc::new(fx.backend.clone());
        let lease = name(&support::unique("race"));
        for round in 0..4u64 {
            let n = 12;
            let sessions: Vec<SessionId> = (0..n).map(|_| b.open_session(LONG, "racer").unwrap().id).collect();
            let barrier = Arc::new(Barrier::new(n));
            let handles: Vec<_> = sessions
                .iter()
                .cloned()
                .map(|s| {
                    let (b, barrier, lease) = (b.clone(), barrier.clone(), lease.clone());
                    thread::spawn(move || {
                        barrier.wait();
                        (s.clone(), b.acquire(&s, &lease).unwrap())
                    })
                })
                .collect();
            let results: Vec<(SessionId, Acquire)> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let winners: Vec<_> =
                results.iter().filter_map(|(s, a)| matches!(a, Acquire::Acquired { .. }).then_some((s, a))).collect();
            assert_eq!(winners.len(), 1, "round {round}: exactly one winner expected: {results:?}");
            let (winner, a) = winners[0];
            let token = match a {
                Acquire::Acquired { token, .. } => token.get(),
                Acquire::Busy => unreachable!(),
            };
            assert_eq!(token, round + 1, "round {round}: one new term per round");
            assert_eq!(b.holder(&lease).unwrap().unwrap().session, *winner);
            // Losers go away; the winner's term ends by close (even rounds) or by expiry (odd).
            for s in sessions.iter().filter(|s| *s != winner) {
                b.close_session(s).unwrap();
            }
            if round % 2 == 0 {
                b.close_session(winner).unwrap();
            } else {
                assert!(matches!(b.keep_alive(winner, Duration::from_millis(300)).unwrap(), KeepAlive::Alive { .. }));
                thread::sleep(Duration::from_millis(600));
            }
        }
    }

    /// A holder's renewal racing a rival's takeover right at the holder's expiry: the renewal
    /// either wins (the rival sees the lease busy) or the takeover does, and then the renewal
    /// says `Expired` (the takeover judged the session expired; it never revives). Never both.
    /// 40 rounds, and more (at most 400) until both outcomes were seen: the race really happened.
    pub fn takeover_races_renewal(fx: &mut Fx) {
        let b = Arc::new(fx.backend.clone());
        let rival = b.open_session(Duration::from_secs(60), "rival").unwrap().id;
        let (mut renewed, mut taken, mut expired) = (0, 0, 0);
        let lease_ms = 120u64;
        let mut i = 0u64;
        while i < 40 || renewed == 0 || taken == 0 {
            assert!(i < 400, "{i} rounds without both outcomes: {renewed} renewals won, {taken} takeovers");
            i += 1;
            let lease = name(&support::unique("tvr"));
            let holder = b.open_session(Duration::from_millis(lease_ms), "holder").unwrap().id;
            match b.acquire(&holder, &lease) {
                Ok(a) => assert_eq!(acquired(a), 1),
                // A loaded machine let the short session expire before its first acquire: this
                // iteration has nothing to race.
                Err(e) if e.kind() == ErrorKind::SessionExpired => continue,
                Err(e) => panic!("iteration {i}: {e:?}"),
            }
            // Aim around the expiry: a little before, at, or after.
            thread::sleep(Duration::from_millis(lease_ms - 20 + (i * 7) % 40));
            let barrier = Arc::new(Barrier::new(2));
            let ka = {
                let (b, barrier, holder) = (b.clone(), barrier.clone(), holder.clone());
                thread::spawn(move || {
                    barrier.wait();
                    b.keep_alive(&holder, Duration::from_millis(lease_ms)).unwrap()
                })
            };
            let acq = {
                let (b, barrier, rival, lease) = (b.clone(), barrier.clone(), rival.clone(), lease.clone());
                thread::spawn(move || {
                    barrier.wait();
                    b.acquire(&rival, &lease).unwrap()
                })
            };
            let (ka, acq) = (ka.join().unwrap(), acq.join().unwrap());
            let still_owned = match &ka {
                KeepAlive::Alive { owned, .. } => owned.iter().any(|(n, _)| *n == lease),
                KeepAlive::Expired => false,
            };
            match (&acq, still_owned) {
                (Acquire::Acquired { token, .. }, false) => {
                    assert_eq!(token.get(), 2);
                    // The takeover judged the holder expired; a renewal judged later (after the
                    // lock, on the same clock) finds it expired too, never alive.
                    assert_eq!(ka, KeepAlive::Expired, "iteration {i}: the rival took the lease of a live session");
                    taken += 1;
                }
                (Acquire::Busy, true) => renewed += 1,
                (Acquire::Busy, false) => {
                    // The rival saw the holder alive, then the holder's renewal came too late.
                    // A live holder that lost the lease would need a winner: there is none.
                    assert_eq!(ka, KeepAlive::Expired, "iteration {i}: lease lost without a taker");
                    expired += 1;
                }
                (Acquire::Acquired { .. }, true) => {
                    panic!("iteration {i}: renewal reported {lease} owned while the rival took it: {ka:?} / {acq:?}")
                }
            }
            // The database agrees with what the winner was told.
            let h = b.holder(&lease).unwrap().map(|h| h.session);
            if still_owned {
                // The renewal's lease is short (120 ms): on a loaded machine it may have run out
                // again before this read, but nobody else holds the lease.
                assert!(h.is_none() || h == Some(holder.clone()), "iteration {i}: {h:?}");
            }
            if let Acquire::Acquired { token, .. } = acq {
                assert_eq!(h, Some(rival.clone()));
                b.release(&rival, &lease, token).unwrap();
            }
            b.close_session(&holder).unwrap();
        }
        b.close_session(&rival).unwrap();
        eprintln!("takeover vs renewal ({i} rounds): {renewed} renewals won, {taken} takeovers, {expired} neither");
    }

    pub fn purge_limits_and_tokens(fx: &mut Fx) {
        // A private schema/database and no auto purge: nobody else deletes these sessions.
        let b = Arc::new(fx.backend.clone());
        assert_eq!(b.purge_expired().unwrap(), 0);
        // 1495 sessions that expire at once, and 5 that first take a lease and join a group.
        let total = PURGE_BATCH + 500;
        let handles: Vec<_> = (0..5)
            .map(|_| {
                let b = b.clone();
                thread::spawn(move || {
                    (0..(total - 5) / 5)
                        .map(|_| b.open_session(Duration::from_millis(1), "doomed").unwrap().id)
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let mut sessions: Vec<SessionId> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let prefix = support::unique("purge");
        let group = name(&format!("{prefix}-group"));
        let leases: Vec<Name> = (0..5).map(|i| name(&format!("{prefix}-lease-{i}"))).collect();
        let special: Vec<SessionId> =
            (0..5).map(|_| b.open_session(Duration::from_millis(1500), "member").unwrap().id).collect();
        for (s, l) in special.iter().zip(&leases) {
            assert_eq!(acquired(b.acquire(s, l).unwrap()), 1);
            b.join(s, &group).unwrap();
            assert_eq!(fx.raw.member_rows(s), 1);
        }
        sessions.extend(special.iter().cloned());
        assert_eq!(sessions.len(), total);
        thread::sleep(Duration::from_millis(1700));
        assert!(b.members(&group).unwrap().is_empty(), "expired sessions are not members");
        let first = b.purge_expired().unwrap();
        assert_eq!(first, PURGE_BATCH, "one run deletes at most {PURGE_BATCH} sessions");
        let mut runs = vec![first];
        for _ in 0..10 {
            if sessions.iter().all(|s| !fx.raw.session_exists(s)) {
                break;
            }
            let n = b.purge_expired().unwrap();
            assert!(n <= PURGE_BATCH);
            runs.push(n);
        }
        assert_eq!(runs, vec![PURGE_BATCH, 500], "the rest goes in the next run");
        for s in &sessions {
            assert!(!fx.raw.session_exists(s), "session {s} was not purged ({runs:?})");
        }
        for (s, l) in special.iter().zip(&leases) {
            assert_eq!(fx.raw.member_rows(s), 0, "memberships of purged sessions are deleted");
            let (sid, token) = fx.raw.lease_row(l.as_str()).expect("lease rows are never deleted");
            assert_eq!((sid.trim(), token), (s.as_str(), 1), "purge leaves lease rows and tokens untouched");
        }
        // Tokens continue after the purge: never reset.
        let next = b.open_session(LONG, "next").unwrap().id;
        for l in &leases {
            assert_eq!(acquired(b.acquire(&next, l).unwrap()), 2);
        }
        b.close_session(&next).unwrap();
        assert_eq!(b.purge_expired().unwrap(), 0, "nothing left to purge");
    }

    pub fn names_are_case_sensitive(fx: &mut Fx) {
        let b = &fx.backend;
        let p = support::unique("case");
        let (upper, lower) = (name(&format!("{p}-Job")), name(&format!("{p}-job")));
        let s1 = b.open_session(LONG, "one").unwrap().id;
        let s2 = b.open_session(LONG, "two").unwrap().id;
        assert_eq!(acquired(b.acquire(&s1, &upper).unwrap()), 1);
        assert_eq!(acquired(b.acquire(&s2, &lower).unwrap()), 1, "'Job' and 'job' are different leases");
        assert_eq!(b.holder(&upper).unwrap().unwrap().session, s1);
        assert_eq!(b.holder(&lower).unwrap().unwrap().session, s2);
        let (gu, gl) = (name(&format!("{p}-G")), name(&format!("{p}-g")));
        b.join(&s1, &gu).unwrap();
        b.join(&s2, &gl).unwrap();
        assert_eq!(b.members(&gu).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![s1.clone()]);
        assert_eq!(b.members(&gl).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![s2.clone()]);
        b.close_session(&s1).unwrap();
        b.close_session(&s2).unwrap();
    }

    /// The database clock decides, whatever the connection's time zone.
    pub fn odd_time_zone(fx: &mut Fx) {
        let b = &fx.backend;
        let local_ms = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64;
        let db_ms = b.database_now_ms().unwrap();
        assert!((db_ms - local_ms).abs() < 5_000, "this machine's clocks agree: db {db_ms} local {local_ms}");
        let s = b.open_session(Duration::from_secs(2), "tz").unwrap().id;
        let (odd_now, remaining) = fx.raw.odd_zone_view(&s);
        assert!((odd_now - db_ms).abs() < 5_000, "epoch ms is time-zone independent: {odd_now} vs {db_ms}");
        let remaining = remaining.expect("session row");
        assert!(remaining > 0 && remaining <= 2_000, "expires_at is UTC epoch ms: remaining {remaining} ms");
        b.close_session(&s).unwrap();

        // PostgreSQL: the backend's own connections in Pacific/Chatham (+12:45/+13:45).
        if fx.dialect == Dialect::Postgres {
            let sep = if fx.url.contains('?') { '&' } else { '?' };
            let url = format!("{}{sep}options=-c%20TimeZone%3DPacific/Chatham", fx.url);
            let odd = SqlBackend::from_url(&url, options(Duration::from_secs(2), false)).unwrap();
            assert!((odd.database_now_ms().unwrap() - b.database_now_ms().unwrap()).abs() < 5_000);
            lifecycle_in(&odd, b);
        }
        lifecycle_in(b, b);
    }

    /// Open, acquire, observe remaining from `observer`, expire, no revival.
    fn lifecycle_in(b: &SqlBackend, observer: &SqlBackend) {
        let lease = name(&support::unique("tzlease"));
        let s = b.open_session(Duration::from_secs(1), "tz").unwrap().id;
        let Acquire::Acquired { token, remaining } = b.acquire(&s, &lease).unwrap() else { panic!("busy") };
        assert_eq!(token.get(), 1);
        match remaining {
            TermRemaining::Known(r) => assert!(r > Duration::ZERO && r <= Duration::from_secs(1), "{r:?}"),
            // MySQL's free-lease upsert reads no time left: the term is the session's.
            TermRemaining::WithSession => assert_eq!(b.dialect(), Dialect::Mysql, "{remaining:?}"),
        }
        let h = observer.holder(&lease).unwrap().expect("held");
        assert_eq!(h.session, s);
        assert!(h.remaining > Duration::from_millis(200) && h.remaining <= Duration::from_secs(1), "{:?}", h.remaining);
        thread::sleep(Duration::from_millis(1400));
        assert!(observer.holder(&lease).unwrap().is_none(), "expired after its lease by the database clock");
        assert_eq!(b.keep_alive(&s, Duration::from_secs(1)).unwrap(), KeepAlive::Expired);
    }

    pub fn expiry_and_no_revival(fx: &mut Fx) {
        let b = &fx.backend;
        let p = support::unique("exp");
        let (lease, group) = (name(&format!("{p}-lease")), name(&format!("{p}-group")));
        let s = b.open_session(Duration::from_millis(300), "short").unwrap().id;
        assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
        b.join(&s, &group).unwrap();
        thread::sleep(Duration::from_millis(700));
        assert!(fx.raw.session_exists(&s), "nobody deleted it yet");
        assert_eq!(b.keep_alive(&s, Duration::from_millis(300)).unwrap(), KeepAlive::Expired);
        assert!(!fx.raw.session_exists(&s), "a keep-alive that finds its session expired deletes it");
        assert_eq!(fx.raw.member_rows(&s), 0);
        assert_eq!(b.keep_alive(&s, Duration::from_secs(5)).unwrap(), KeepAlive::Expired, "never revives");
        assert_eq!(b.acquire(&s, &lease).unwrap_err().kind(), ErrorKind::SessionExpired);
        assert_eq!(b.join(&s, &group).unwrap_err().kind(), ErrorKind::SessionExpired);
        let other = b.open_session(LONG, "other").unwrap().id;
        assert_eq!(acquired(b.acquire(&other, &lease).unwrap()), 2, "new term after expiry");
        b.close_session(&other).unwrap();
    }

    pub fn close_is_idempotent(fx: &mut Fx) {
        let b = &fx.backend;
        let p = support::unique("close");
        let (lease, group) = (name(&format!("{p}-lease")), name(&format!("{p}-group")));
        let s = b.open_session(LONG, "closing").unwrap().id;
        assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
        b.join(&s, &group).unwrap();
        b.close_session(&s).unwrap();
        b.close_session(&s).unwrap();
        b.close_session(&SessionId::random()).unwrap();
        assert!(!fx.raw.session_exists(&s));
        assert_eq!(fx.raw.member_rows(&s), 0);
        let (sid, token) = fx.raw.lease_row(lease.as_str()).unwrap();
        assert_eq!((sid.trim(), token), ("", 1), "released, token kept");
        assert_eq!(b.acquire(&s, &lease).unwrap_err().kind(), ErrorKind::SessionExpired);
        assert_eq!(b.keep_alive(&s, LONG).unwrap(), KeepAlive::Expired);
    }

    /// Release is term-scoped: a late release carrying an old token never frees a newer term.
    pub fn release_is_term_scoped(fx: &mut Fx) {
        let b = &fx.backend;
        let lease = name(&support::unique("term"));
        let s = b.open_session(LONG, "terms").unwrap().id;
        let other = b.open_session(LONG, "other").unwrap().id;
        let t1 = Token::new(acquired(b.acquire(&s, &lease).unwrap())).unwrap();
        b.release(&other, &lease, t1).unwrap(); // not the holder: no-op
        assert_eq!(b.holder(&lease).unwrap().unwrap().session, s);
        b.release(&s, &lease, t1).unwrap();
        assert!(b.holder(&lease).unwrap().is_none());
        let t2 = Token::new(acquired(b.acquire(&s, &lease).unwrap())).unwrap();
        assert_eq!(t2.get(), 2);
        b.release(&s, &lease, t1).unwrap(); // stale: the term of t1 is over
        let h = b.holder(&lease).unwrap().unwrap();
        assert_eq!((h.session, h.token), (s.clone(), t2), "a stale release leaves the newer term alone");
        b.release(&s, &lease, t2).unwrap();
        assert!(b.holder(&lease).unwrap().is_none());
        assert_eq!(
            fx.raw.lease_row(lease.as_str()).map(|(sid, t)| (sid.trim().to_string(), t)),
            Some((String::new(), 2))
        );
        b.close_session(&s).unwrap();
        b.close_session(&other).unwrap();
    }

    /// A statement blocked on a row lock ends with `Unavailable` within about the query timeout;
    /// afterwards the pool works normally.
    pub fn blocked_statement_times_out(fx: &mut Fx) {
        let b = &fx.backend; // query timeout 1 s
        let lease = name(&support::unique("locked"));
        let s = b.open_session(LONG, "blocked").unwrap().id;
        assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
        b.release(&s, &lease, Token::new(1).unwrap()).unwrap();
        fx.raw.lock_lease_row(lease.as_str(), Duration::from_secs(4));
        let started = Instant::now();
        let err = b.acquire(&s, &lease).unwrap_err();
        let took = started.elapsed();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err:?}");
        assert!(took < Duration::from_millis(3500), "bounded by the query timeout: {took:?}");
        thread::sleep(Duration::from_secs(4).saturating_sub(took) + Duration::from_millis(300));
        assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 2);
        b.close_session(&s).unwrap();
    }

    pub fn keep_alive_reports_many_leases(fx: &mut Fx) {
        let b = &fx.backend;
        let p = support::unique("many");
        let s = b.open_session(LONG, "many").unwrap().id;
        let names: Vec<Name> = (0..300).map(|i| name(&format!("{p}-{i}"))).collect();
        for n in &names {
            acquired(b.acquire(&s, n).unwrap());
        }
        let KeepAlive::Alive { remaining, owned, .. } = b.keep_alive(&s, LONG).unwrap() else { panic!("expired") };
        assert!(remaining <= LONG && remaining > Duration::from_secs(5));
        let got: HashSet<Name> = owned.into_iter().map(|(n, _)| n).collect();
        assert_eq!(got, names.iter().cloned().collect::<HashSet<_>>());
        assert!(!b.connection_ids().is_empty(), "the pool reports its server-side connection ids");
        b.close_session(&s).unwrap();
        let other = b.open_session(LONG, "after").unwrap().id;
        assert_eq!(acquired(b.acquire(&other, &names[0]).unwrap()), 2);
        b.close_session(&other).unwrap();
    }

    /// A backend with a single connection and no background purge, through a round-trip counting
    /// proxy (nothing but the test's own calls on that connection).
    fn counted_backend(url: &str) -> (rtt::CountingProxy, SqlBackend) {
        let addr = addr_of(url);
        let proxy = rtt::CountingProxy::start(&addr);
        let opts =
            SqlOptions::builder().query_timeout(Duration::from_secs(5)).pool_size(1).auto_purge(false).build().unwrap();
        let b = SqlBackend::from_url(&proxy.url(url, &addr), opts).unwrap();
        (proxy, b)
    }

    /// SPEC §10: a keep-alive is one round trip whatever the number of leases held, on the
    /// renewal path and on the expired path, counted at the TCP level by a proxy in front of the
    /// server for a backend with a single connection and no background purge (nothing else on the
    /// connection). The first keep-alive prepares the statement; the ones counted reuse it.
    pub fn keep_alive_is_one_round_trip(fx: &mut Fx) {
        let (proxy, b) = counted_backend(&fx.url);
        let direct = &fx.backend;
        let p = support::unique("rtt");
        let s = b.open_session(LONG, "rtt").unwrap().id;
        let names: Vec<Name> = (0..200).map(|i| name(&format!("{p}-{i}"))).collect();
        for n in &names {
            assert_eq!(acquired(direct.acquire(&s, n).unwrap()), 1);
        }
        let group = name(&format!("{p}-group"));
        direct.join(&s, &group).unwrap();
        let mut groups: Vec<Name> = (0..50).map(|i| name(&format!("{p}-g{i}"))).collect();
        for g in &groups {
            direct.join(&s, g).unwrap();
        }
        groups.push(group.clone());
        groups.sort();
        assert!(matches!(b.keep_alive(&s, LONG).unwrap(), KeepAlive::Alive { .. }), "warm-up");
        for i in 0..5 {
            let before = proxy.round_trips();
            let reply = b.keep_alive(&s, LONG).unwrap();
            let trips = proxy.round_trips() - before;
            let KeepAlive::Alive { remaining, owned, groups: got, .. } = reply else { panic!("expired") };
            assert_eq!(
                trips,
                1,
                "keep-alive {i} with {} leases and {} groups took {trips} round trips",
                names.len(),
                groups.len()
            );
            assert!(remaining > Duration::from_secs(5) && remaining <= LONG, "{remaining:?}");
            let mut want: Vec<(Name, Token)> = names.iter().map(|n| (n.clone(), Token::new(1).unwrap())).collect();
            want.sort();
            assert_eq!(owned, want, "every lease with its token, sorted");
            assert_eq!(got, groups, "every group, sorted");
        }
        // A released lease is no longer owned.
        b.release(&s, &names[0], Token::new(1).unwrap()).unwrap();
        let KeepAlive::Alive { owned, .. } = b.keep_alive(&s, LONG).unwrap() else { panic!("expired") };
        assert_eq!(owned.len(), names.len() - 1);
        assert!(owned.iter().all(|(n, _)| *n != names[0]));

        // The expired path is one round trip too, and deletes the session and its memberships.
        let short = Duration::from_millis(300);
        let dead = b.open_session(short, "rtt-dead").unwrap().id;
        let lease = name(&format!("{p}-dead"));
        assert_eq!(acquired(direct.acquire(&dead, &lease).unwrap()), 1);
        direct.join(&dead, &group).unwrap();
        assert!(matches!(b.keep_alive(&dead, short).unwrap(), KeepAlive::Alive { ref owned, .. } if owned.len() == 1));
        thread::sleep(Duration::from_millis(700));
        let before = proxy.round_trips();
        assert_eq!(b.keep_alive(&dead, short).unwrap(), KeepAlive::Expired);
        assert_eq!(proxy.round_trips() - before, 1, "an expired keep-alive is one round trip");
        assert!(!fx.raw.session_exists(&dead), "the expired session is deleted");
        assert_eq!(fx.raw.member_rows(&dead), 0, "with its memberships");
        assert_eq!(fx.raw.lease_row(lease.as_str()).map(|(_, t)| t), Some(1), "lease rows stay");
        assert_eq!(b.keep_alive(&dead, LONG).unwrap(), KeepAlive::Expired, "never revives");
        let other = direct.open_session(LONG, "rtt-other").unwrap().id;
        assert_eq!(acquired(direct.acquire(&other, &lease).unwrap()), 2, "new term after expiry");
        assert_eq!(fx.raw.member_rows(&s), 51, "the live session keeps its memberships");
        direct.close_session(&other).unwrap();
        b.close_session(&s).unwrap();
    }

    /// Round trips per acquire, counted at the TCP level like the keep-alive (the first call of
    /// each statement warms the connection and prepares it; the counted ones reuse it).
    /// PostgreSQL: one in every case — a new lease, a free one, one whose holder expired
    /// (takeover), one this session already holds, a busy one, an acquire by an expired session.
    /// MySQL/MariaDB: one for a new or free lease (the upsert alone), and for a name this backend
    /// last found busy (straight to the procedure); otherwise the upsert takes nothing and the
    /// procedure follows: two.
    pub fn acquire_round_trips(fx: &mut Fx) {
        let (proxy, b) = counted_backend(&fx.url);
        let direct = &fx.backend;
        let p = support::unique("acq-rtt");
        let s = direct.open_session(LONG, "acq-rtt").unwrap().id;
        let other = direct.open_session(LONG, "acq-rtt-other").unwrap().id;
        assert_eq!(acquired(b.acquire(&s, &name(&format!("{p}-warm"))).unwrap()), 1, "warm-up");
        // The procedure's warm-up: a name held by this session.
        assert_eq!(acquired(b.acquire(&s, &name(&format!("{p}-warm"))).unwrap()), 1, "warm-up");
        let (one, held) = match fx.dialect {
            Dialect::Postgres => (1, 1),
            Dialect::Mysql => (1, 2),
        };
        let counted = |what: &str, want: u64, f: &dyn Fn() -> Acquire| {
            let before = proxy.round_trips();
            let a = f();
            let trips = proxy.round_trips() - before;
            assert_eq!(trips, want, "{what}: {trips} round trips ({a:?})");
            a
        };
        let new = name(&format!("{p}-new"));
        assert_eq!(acquired(counted("a new lease", one, &|| b.acquire(&s, &new).unwrap())), 1);
        assert_eq!(acquired(counted("held by this session", held, &|| b.acquire(&s, &new).unwrap())), 1);
        assert_eq!(counted("held by a live session", held, &|| b.acquire(&other, &new).unwrap()), Acquire::Busy);
        assert_eq!(counted("seen busy before", one, &|| b.acquire(&other, &new).unwrap()), Acquire::Busy);
        direct.release(&s, &new, Token::new(1).unwrap()).unwrap();
        assert_eq!(acquired(counted("a free lease seen busy before", one, &|| b.acquire(&other, &new).unwrap())), 2);
        direct.release(&other, &new, Token::new(2).unwrap()).unwrap();
        assert_eq!(acquired(counted("a free lease", one, &|| b.acquire(&s, &new).unwrap())), 3);
        let short = Duration::from_millis(300);
        let dying = direct.open_session(short, "acq-rtt-dying").unwrap().id;
        let taken = name(&format!("{p}-taken"));
        assert_eq!(acquired(direct.acquire(&dying, &taken).unwrap()), 1);
        thread::sleep(Duration::from_millis(600));
        assert_eq!(acquired(counted("a takeover", held, &|| b.acquire(&s, &taken).unwrap())), 2);
        let before = proxy.round_trips();
        let err = b.acquire(&dying, &taken).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::SessionExpired, "{err:?}");
        assert_eq!(proxy.round_trips() - before, held, "an acquire by an expired session");
        direct.close_session(&s).unwrap();
        direct.close_session(&other).unwrap();
    }

    /// A renewal that waits for a takeover's lock on its session row, while the session expires,
    /// never revives it (rule 2): expiry is judged with database time read after the lock is
    /// granted, so the keep-alive reports the session expired and deletes it — on PostgreSQL, and
    /// on MySQL/MariaDB through the procedure and through the separate-statement fallback alike.
    /// Deterministic: the takeover holds the lock from before the keep-alive starts until after
    /// the session has expired.
    pub fn renewal_waiting_for_a_takeover(fx: &mut Fx) {
        let b = &fx.backend;
        let lease_d = Duration::from_millis(400);
        let lease = name(&support::unique("waiting"));
        let rival = b.open_session(LONG, "rival").unwrap().id;
        let holder = b.open_session(lease_d, "holder").unwrap().id;
        assert_eq!(acquired(b.acquire(&holder, &lease).unwrap()), 1);
        assert!(matches!(b.keep_alive(&holder, lease_d).unwrap(), KeepAlive::Alive { .. }));
        let takeover = fx.raw.take_over_under_lock(&holder, lease.as_str(), &rival, lease_d * 2);
        let ka = b.keep_alive(&holder, lease_d).unwrap();
        let returned = Instant::now();
        let committing = takeover.join().unwrap();
        assert!(returned >= committing, "the keep-alive waited for the takeover's lock");
        assert_eq!(ka, KeepAlive::Expired, "a session that expired while its renewal waited is not revived");
        assert!(!fx.raw.session_exists(&holder), "an expired keep-alive deletes it");
        let (sid, token) = fx.raw.lease_row(lease.as_str()).unwrap();
        assert_eq!((sid.trim(), token), (rival.as_str(), 2));
        b.close_session(&holder).unwrap();
        b.close_session(&rival).unwrap();
    }

    /// A lease row someone else corrupted (a token that is not positive) is left out of the
    /// keep-alive reply; the renewal and every other lease are not disturbed.
    pub fn keep_alive_skips_corrupt_rows(fx: &mut Fx) {
        let b = &fx.backend;
        let p = support::unique("corrupt");
        let s = b.open_session(LONG, "corrupt").unwrap().id;
        let names: Vec<Name> = (0..3).map(|i| name(&format!("{p}-{i}"))).collect();
        for n in &names {
            assert_eq!(acquired(b.acquire(&s, n).unwrap()), 1);
        }
        fx.raw.set_token(names[1].as_str(), -7);
        let KeepAlive::Alive { remaining, owned, .. } = b.keep_alive(&s, LONG).unwrap() else { panic!("expired") };
        assert!(remaining > Duration::from_secs(5), "{remaining:?}");
        let one = Token::new(1).unwrap();
        assert_eq!(owned, vec![(names[0].clone(), one), (names[2].clone(), one)]);
        b.close_session(&s).unwrap();
    }

    /// The groups of a live session's keep-alive (panics when it reports the session expired).
    pub fn groups_of(b: &SqlBackend, s: &SessionId) -> Vec<Name> {
        match b.keep_alive(s, LONG).unwrap() {
            KeepAlive::Alive { remaining, groups, .. } => {
                assert!(remaining > Duration::from_secs(5), "{remaining:?}");
                groups
            }
            KeepAlive::Expired => panic!("session {s} expired"),
        }
    }

    /// The keep-alive reports the session's memberships as the database has them, sorted: what it
    /// joined and did not leave, no longer a row deleted behind its back, a row inserted behind its
    /// back, never another session's; a row with a group name that is no valid name is left out
    /// without disturbing the renewal, the leases or the other groups.
    pub fn keep_alive_reports_groups(fx: &mut Fx) {
        let b = &fx.backend;
        let p = support::unique("groups");
        let g = |s: &str| name(&format!("{p}-{s}"));
        let (g1, g2, g3, g4, upper) = (g("g1"), g("g2"), g("g3"), g("g4"), g("G1"));
        let s = b.open_session(LONG, "groups").unwrap().id;
        let other = b.open_session(LONG, "other").unwrap().id;
        assert_eq!(groups_of(b, &s), Vec::<Name>::new(), "no membership yet");
        b.join(&s, &g2).unwrap();
        b.join(&s, &g1).unwrap();
        b.join(&s, &g1).unwrap(); // idempotent: still one membership
        b.join(&other, &g1).unwrap();
        b.join(&other, &g3).unwrap();
        assert_eq!(groups_of(b, &s), vec![g1.clone(), g2.clone()], "joined, sorted");
        b.leave(&s, &g2).unwrap();
        assert_eq!(groups_of(b, &s), vec![g1.clone()], "g2 left");
        b.join(&s, &upper).unwrap();
        assert_eq!(groups_of(b, &s), vec![upper.clone(), g1.clone()], "case-sensitive, byte order");

        // Behind the backend's back.
        fx.raw.delete_member(g1.as_str(), &s);
        assert_eq!(groups_of(b, &s), vec![upper.clone()], "a deleted row is not reported");
        fx.raw.insert_member(g4.as_str(), &s);
        assert_eq!(groups_of(b, &s), vec![upper.clone(), g4.clone()], "an inserted row is reported");
        let lease = g("lease");
        assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
        fx.raw.insert_member(&format!("{p} grüppe €😀"), &s);
        fx.raw.insert_member("", &s);
        let KeepAlive::Alive { remaining, owned, groups, .. } = b.keep_alive(&s, LONG).unwrap() else {
            panic!("expired")
        };
        assert!(remaining > Duration::from_secs(5), "{remaining:?}");
        assert_eq!(owned, vec![(lease.clone(), Token::new(1).unwrap())]);
        assert_eq!(groups, vec![upper.clone(), g4.clone()], "rows with invalid group names are left out");
        assert_eq!(fx.raw.member_rows(&s), 4, "and stay in the table");

        // Another session's memberships are its own.
        assert_eq!(groups_of(b, &other), vec![g1.clone(), g3.clone()]);
        b.close_session(&s).unwrap();
        assert_eq!(fx.raw.member_rows(&s), 0, "close deletes every membership row");
        assert_eq!(groups_of(b, &other), vec![g1, g3], "untouched by the other session's close");
        b.close_session(&other).unwrap();
        assert_eq!(b.keep_alive(&other, LONG).unwrap(), KeepAlive::Expired);
    }

    /// A connection killed on the server is dropped from the pool (never reused) and the call is
    /// retried on a new connection within the same query timeout.
    pub fn killed_connection_is_replaced(fx: &mut Fx) {
        let b = SqlBackend::from_url(
            &fx.url,
            SqlOptions::builder().query_timeout(Duration::from_secs(2)).pool_size(1).auto_purge(false).build().unwrap(),
        )
        .unwrap();
        let lease = name(&support::unique("killed"));
        let s = b.open_session(LONG, "killed").unwrap().id;
        assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
        let before = b.connection_ids();
        assert_eq!(before.len(), 1, "pool of one: {before:?}");
        for round in 0..3 {
            let victim = b.connection_ids()[0];
            fx.raw.kill_connection(victim);
            thread::sleep(Duration::from_millis(100));
            // Every kind of call survives: the broken connection is replaced transparently.
            match round {
                0 => assert!(
                    matches!(b.keep_alive(&s, LONG).unwrap(), KeepAlive::Alive { ref owned, .. } if owned.len() == 1)
                ),
                1 => assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1, "idempotent re-acquire"),
                _ => assert_eq!(b.holder(&lease).unwrap().unwrap().session, s),
            }
            let after = b.connection_ids();
            assert_eq!(after.len(), 1);
            assert_ne!(after[0], victim, "the killed connection is not reused");
        }
        b.close_session(&s).unwrap();
    }

    pub fn unreachable_server_is_unavailable(fx: &mut Fx) {
        let url = match fx.dialect {
            Dialect::Postgres => "postgres://simba:hunter2@127.0.0.1:1/test",
            Dialect::Mysql => "mysql://simba:hunter2@127.0.0.1:1/test",
        };
        let b = SqlBackend::from_url(url, options(Duration::from_millis(500), true)).unwrap();
        let dbg = format!("{b:?}");
        assert!(!dbg.contains("hunter2") && dbg.contains("***"), "{dbg}");
        let started = Instant::now();
        let err = b.open_session(LONG, "").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err:?}");
        assert!(!format!("{err:?}").contains("hunter2"));
        assert!(started.elapsed() < Duration::from_secs(3), "{:?}", started.elapsed());
        let checks = b.check();
        assert_eq!(checks[0].status, CheckStatus::Fail, "{checks:?}");
        assert!(!checks[0].detail.contains("hunter2"));
        let bad = match fx.dialect {
            Dialect::Postgres => "postgres://[::1",
            Dialect::Mysql => "mysql://[::1",
        };
        let e = SqlBackend::from_url(bad, SqlOptions::default()).unwrap_err();
        assert!(e.is_invalid_input(), "{e:?}");
        assert!(b.open_session(Duration::ZERO, "").unwrap_err().is_invalid_input());
        assert!(b.open_session(LONG, &"x".repeat(1025)).unwrap_err().is_invalid_input());
    }
}

macro_rules! dialect_tests {
    ($module:ident, $feature:literal, $dialect:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            /// 5 s query timeout: the shared machine can be slow (builds, other suites).
            fn fx() -> Fx {
                make($dialect, options(Duration::from_secs(5), true))
            }

            #[test]
            #[serial_test::serial($module)]
            fn schema_init_is_idempotent() {
                cases::schema_init_is_idempotent(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn racing_sessions_one_winner() {
                cases::racing_sessions_one_winner(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn takeover_races_renewal() {
                cases::takeover_races_renewal(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn purge_limits_and_tokens() {
                cases::purge_limits_and_tokens(&mut make_isolated($dialect, options(Duration::from_secs(5), false)).fx);
            }

            #[test]
            #[serial_test::serial($module)]
            fn names_are_case_sensitive() {
                cases::names_are_case_sensitive(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn odd_time_zone() {
                cases::odd_time_zone(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn expiry_and_no_revival() {
                cases::expiry_and_no_revival(&mut make_isolated($dialect, options(Duration::from_secs(5), false)).fx);
            }

            #[test]
            #[serial_test::serial($module)]
            fn close_is_idempotent() {
                cases::close_is_idempotent(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn blocked_statement_times_out() {
                cases::blocked_statement_times_out(&mut make($dialect, options(Duration::from_secs(1), true)));
            }

            #[test]
            #[serial_test::serial($module)]
            fn keep_alive_reports_many_leases() {
                cases::keep_alive_reports_many_leases(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn release_is_term_scoped() {
                cases::release_is_term_scoped(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn killed_connection_is_replaced() {
                cases::killed_connection_is_replaced(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn keep_alive_is_one_round_trip() {
                cases::keep_alive_is_one_round_trip(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn acquire_round_trips() {
                cases::acquire_round_trips(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn renewal_waiting_for_a_takeover() {
                cases::renewal_waiting_for_a_takeover(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn keep_alive_skips_corrupt_rows() {
                cases::keep_alive_skips_corrupt_rows(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn keep_alive_reports_groups() {
                cases::keep_alive_reports_groups(&mut fx());
            }

            #[test]
            #[serial_test::serial($module)]
            fn unreachable_server_is_unavailable() {
                cases::unreachable_server_is_unavailable(&mut fx());
            }
        }
    };
}

dialect_tests!(postgres, "postgres", Dialect::Postgres);
dialect_tests!(mysql, "mysql", Dialect::Mysql);

/// MySQL/MariaDB: a schema without the keep-alive and acquire procedures (made by an older
/// version, or by a user without CREATE ROUTINE) keeps working with the separate statements,
/// `check` warns, and applying the schema again brings the one-round-trip calls back.
#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_keep_alive_without_the_procedure() {
    use ::mysql::prelude::Queryable;
    let mut iso = make_isolated(Dialect::Mysql, options(Duration::from_secs(5), false));
    let fx = &mut iso.fx;
    let mut admin = ::mysql::Conn::new(::mysql::Opts::from_url(&fx.url).unwrap()).unwrap();
    admin.query_drop(format!("DROP PROCEDURE {KEEP_ALIVE_PROCEDURE}")).unwrap();
    admin.query_drop(format!("DROP PROCEDURE {ACQUIRE_PROCEDURE}")).unwrap();
    let addr = addr_of(&fx.url);
    let proxy = rtt::CountingProxy::start(&addr);
    let opts = SqlOptions::builder().pool_size(1).auto_purge(false).build().unwrap();
    let b = SqlBackend::from_url(&proxy.url(&fx.url, &addr), opts).unwrap();
    let schema = |b: &SqlBackend| b.check().into_iter().find(|c| c.name == "schema").unwrap();
    let warn = schema(&b);
    assert_eq!(warn.status, CheckStatus::Warn, "{warn:?}");
    assert!(warn.detail.contains(KEEP_ALIVE_PROCEDURE), "{warn:?}");

    let p = support::unique("noproc");
    let (lease, group) = (name(&format!("{p}-lease")), name(&format!("{p}-group")));
    let (g1, g2, g3) = (name(&format!("{p}-g1")), name(&format!("{p}-g2")), name(&format!("{p}-g3")));
    let s = b.open_session(Duration::from_secs(10), "old schema").unwrap().id;
    let other = b.open_session(Duration::from_secs(10), "other").unwrap().id;
    b.join(&other, &g3).unwrap();
    assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
    let before = proxy.round_trips();
    assert_eq!(acquired(b.acquire(&s, &name(&format!("{p}-second"))).unwrap()), 1);
    assert_eq!(proxy.round_trips() - before, 1, "a new lease: the one upsert, with or without the procedure");
    b.release(&s, &name(&format!("{p}-second")), Token::new(1).unwrap()).unwrap();
    assert_eq!(b.acquire(&other, &lease).unwrap(), Acquire::Busy);
    takeover_round_trips(&b, &proxy, &other, &p, "warm-up"); // prepares the fallback's statements
    assert_eq!(
        takeover_round_trips(&b, &proxy, &other, &p, "taken"),
        3,
        "a takeover without the procedure: the upsert takes nothing, then the read, then the upsert"
    );
    let one = Token::new(1).unwrap();
    for i in 0..6 {
        match i {
            1 => b.join(&s, &g2).unwrap(),
            2 => b.join(&s, &g1).unwrap(),
            3 => b.leave(&s, &g2).unwrap(),
            4 => fx.raw.delete_member(g1.as_str(), &s),
            5 => fx.raw.insert_member(g2.as_str(), &s),
            _ => {}
        }
        let want_groups = match i {
            1 => vec![g2.clone()],
            2 => vec![g1.clone(), g2.clone()],
            3 => vec![g1.clone()],
            5 => vec![g2.clone()],
            _ => vec![],
        };
        let before = proxy.round_trips();
        let KeepAlive::Alive { owned, groups, .. } = b.keep_alive(&s, Duration::from_secs(10)).unwrap() else {
            panic!("expired")
        };
        let trips = proxy.round_trips() - before;
        assert_eq!(owned, vec![(lease.clone(), one)]);
        assert_eq!(groups, want_groups, "keep-alive {i}: the fallback reports the groups");
        if i > 0 {
            assert_eq!(trips, 5, "the fallback: BEGIN, lock, UPDATE, SELECT, COMMIT");
        }
    }
    let KeepAlive::Alive { groups, .. } = b.keep_alive(&other, Duration::from_secs(10)).unwrap() else {
        panic!("expired")
    };
    assert_eq!(groups, vec![g3.clone()], "only the session's own memberships");
    let short = Duration::from_millis(300);
    let dead = b.open_session(short, "old schema, dies").unwrap().id;
    b.join(&dead, &group).unwrap();
    thread::sleep(Duration::from_millis(700));
    assert_eq!(b.keep_alive(&dead, short).unwrap(), KeepAlive::Expired);
    assert!(!fx.raw.session_exists(&dead));
    assert_eq!(fx.raw.member_rows(&dead), 0);

    b.init_schema().unwrap();
    assert_eq!(schema(&b).status, CheckStatus::Ok);
    assert!(schema(&b).detail.contains(KEEP_ALIVE_PROCEDURE), "{:?}", schema(&b));
    assert!(matches!(b.keep_alive(&s, Duration::from_secs(10)).unwrap(), KeepAlive::Alive { .. }), "warm-up");
    b.join(&s, &g1).unwrap();
    let before = proxy.round_trips();
    let KeepAlive::Alive { owned, groups, .. } = b.keep_alive(&s, Duration::from_secs(10)).unwrap() else {
        panic!("expired")
    };
    assert_eq!(owned, vec![(lease.clone(), one)]);
    assert_eq!(groups, vec![g1.clone(), g2.clone()], "the procedure reports the groups");
    assert_eq!(proxy.round_trips() - before, 1, "the procedure again after init_schema");
    takeover_round_trips(&b, &proxy, &s, &p, "warm-up-2"); // prepares the call
    assert_eq!(
        takeover_round_trips(&b, &proxy, &s, &p, "third"),
        2,
        "a takeover: the upsert takes nothing, then the procedure"
    );
    b.close_session(&s).unwrap();
    b.close_session(&other).unwrap();
}

/// MySQL/MariaDB: an uncontended lock runs no stored procedure — the acquire of a new or a free
/// lease is the one upsert (its token in the OK packet; the term lasts as long as the session, so
/// no second statement reads the time left) and the release one update — while a lease held by
/// another session still goes through `simba_acquire_v2`. Counted by the server
/// (`Com_call_procedure` is global: the MySQL tests of this binary run one at a time, and this
/// one's sessions are raw SPI sessions that nothing renews).
#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_uncontended_acquire_calls_no_procedure() {
    use ::mysql::prelude::Queryable;
    let iso = make_isolated(Dialect::Mysql, options(Duration::from_secs(5), false));
    let b = &iso.fx.backend;
    let mut admin = ::mysql::Conn::new(::mysql::Opts::from_url(&iso.fx.url).unwrap()).unwrap();
    let mut calls = || -> u64 {
        let row: Option<(String, u64)> = admin.query_first("SHOW GLOBAL STATUS LIKE 'Com_call_procedure'").unwrap();
        row.expect("Com_call_procedure").1
    };
    let p = support::unique("nocall");
    let s = b.open_session(Duration::from_secs(10), "uncontended").unwrap().id;
    let other = b.open_session(Duration::from_secs(10), "other").unwrap().id;
    let before = calls();
    for i in 0..10 {
        let lease = name(&format!("{p}-{}", i % 3));
        let a = b.acquire(&s, &lease).unwrap();
        assert_eq!(
            a,
            Acquire::Acquired { token: Token::new(i / 3 + 1).unwrap(), remaining: TermRemaining::WithSession }
        );
        b.release(&s, &lease, a.token().unwrap()).unwrap();
    }
    assert_eq!(calls() - before, 0, "10 uncontended acquires (new and free leases) and releases");
    let held = name(&format!("{p}-held"));
    assert_eq!(acquired(b.acquire(&s, &held).unwrap()), 1);
    let before = calls();
    assert_eq!(b.acquire(&other, &held).unwrap(), Acquire::Busy);
    assert_eq!(calls() - before, 1, "a held lease: the procedure classifies it");
    b.close_session(&s).unwrap();
    b.close_session(&other).unwrap();
}

/// MySQL/MariaDB without the procedures (the separate-statement keep-alive and acquire): the
/// races of the procedure path hold there too — one winner among racing acquirers, a takeover
/// racing a renewal, and a renewal waiting for a takeover's lock never revives the session.
#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_races_without_the_procedures() {
    use ::mysql::prelude::Queryable;
    let mut iso = make_isolated(Dialect::Mysql, options(Duration::from_secs(5), false));
    let mut admin = ::mysql::Conn::new(::mysql::Opts::from_url(&iso.fx.url).unwrap()).unwrap();
    admin.query_drop(format!("DROP PROCEDURE {KEEP_ALIVE_PROCEDURE}")).unwrap();
    admin.query_drop(format!("DROP PROCEDURE {ACQUIRE_PROCEDURE}")).unwrap();
    for _ in 0..2 {
        cases::renewal_waiting_for_a_takeover(&mut iso.fx);
    }
    cases::racing_sessions_one_winner(&mut iso.fx);
    cases::takeover_races_renewal(&mut iso.fx);
    let schema = iso.fx.backend.check().into_iter().find(|c| c.name == "schema").unwrap();
    assert_eq!(schema.status, CheckStatus::Warn, "the fallbacks were used: {schema:?}");
}

/// MySQL/MariaDB: a database upgraded from a version whose init script created only
/// `simba_keep_alive_v1` (which returns no groups) is not enough: `check` warns about the new
/// procedure, the keep-alive falls back (and still reports the groups) until the script runs
/// again, and the old procedure is left in place for older clients.
#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_keep_alive_with_only_the_old_procedure() {
    use ::mysql::prelude::Queryable;
    let iso = make_isolated(Dialect::Mysql, options(Duration::from_secs(5), false));
    let fx = &iso.fx;
    let mut admin = ::mysql::Conn::new(::mysql::Opts::from_url(&fx.url).unwrap()).unwrap();
    admin.query_drop(format!("DROP PROCEDURE {KEEP_ALIVE_PROCEDURE}")).unwrap();
    // The shape of the old procedure: three columns, no groups.
    admin
        .query_drop(
            "CREATE PROCEDURE simba_keep_alive_v1(IN p_session CHAR(32) CHARACTER SET ascii COLLATE ascii_bin, \
             IN p_lease_ms BIGINT) MODIFIES SQL DATA SQL SECURITY INVOKER \
             SELECT p_lease_ms, l.name, l.token FROM (SELECT 1 AS one) AS live \
             LEFT JOIN simba_lease l ON l.session_id = p_session",
        )
        .unwrap();
    let b = &fx.backend;
    let schema = |b: &SqlBackend| b.check().into_iter().find(|c| c.name == "schema").unwrap();
    let warn = schema(b);
    assert_eq!(warn.status, CheckStatus::Warn, "{warn:?}");
    assert!(warn.detail.contains(KEEP_ALIVE_PROCEDURE), "{warn:?}");
    let group = name(&support::unique("oldproc"));
    let s = b.open_session(Duration::from_secs(10), "upgraded").unwrap().id;
    b.join(&s, &group).unwrap();
    let KeepAlive::Alive { groups, .. } = b.keep_alive(&s, Duration::from_secs(10)).unwrap() else { panic!("expired") };
    assert_eq!(groups, vec![group.clone()], "the fallback, not the old procedure");
    b.init_schema().unwrap();
    assert_eq!(schema(b).status, CheckStatus::Ok);
    let KeepAlive::Alive { groups, .. } = b.keep_alive(&s, Duration::from_secs(10)).unwrap() else { panic!("expired") };
    assert_eq!(groups, vec![group.clone()]);
    let old: Vec<::mysql::Row> = admin
        .query(
            "SELECT routine_name FROM information_schema.routines WHERE routine_schema = DATABASE() \
             AND routine_name = 'simba_keep_alive_v1'",
        )
        .unwrap();
    assert_eq!(old.len(), 1, "the init script leaves the old procedure alone");
    b.close_session(&s).unwrap();
}

/// MySQL/MariaDB: a database whose schema an older version made has `simba_acquire_v1` (the read
/// of the lease row first, always) but not `simba_acquire_v2` (a free or new lease in one upsert).
/// `check` warns naming the new procedure; an acquire the free-lease upsert cannot answer falls
/// back to the separate statements (a takeover: the upsert, the read, the upsert again — three
/// round trips; the old procedure, never called, would make it two) with the same outcomes; and
/// applying the schema again creates `simba_acquire_v2` (a takeover in two round trips again) and
/// leaves `simba_acquire_v1` in place for older clients.
#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_acquire_with_only_the_old_procedure() {
    use ::mysql::prelude::Queryable;
    let iso = make_isolated(Dialect::Mysql, options(Duration::from_secs(5), false));
    let fx = &iso.fx;
    let mut admin = ::mysql::Conn::new(::mysql::Opts::from_url(&fx.url).unwrap()).unwrap();
    admin.query_drop(format!("DROP PROCEDURE {ACQUIRE_PROCEDURE}")).unwrap();
    admin.query_drop(include_str!("sql/acquire-v1-mysql.sql")).unwrap();
    let addr = addr_of(&fx.url);
    let proxy = rtt::CountingProxy::start(&addr);
    let opts = SqlOptions::builder().pool_size(1).auto_purge(false).build().unwrap();
    let b = SqlBackend::from_url(&proxy.url(&fx.url, &addr), opts).unwrap();
    let schema = |b: &SqlBackend| b.check().into_iter().find(|c| c.name == "schema").unwrap();
    let warn = schema(&b);
    assert_eq!(warn.status, CheckStatus::Warn, "{warn:?}");
    assert!(warn.detail.contains("simba_acquire_v2"), "{warn:?}");
    let p = support::unique("oldacq");
    let s = b.open_session(Duration::from_secs(10), "upgraded").unwrap().id;
    let other = b.open_session(Duration::from_secs(10), "upgraded, other").unwrap().id;
    let lease = name(&format!("{p}-a"));
    assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1, "warm-up (prepares the upsert)");
    assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1, "held by this session (prepares the read)");
    assert_eq!(b.acquire(&other, &lease).unwrap(), Acquire::Busy);
    b.release(&s, &lease, Token::new(1).unwrap()).unwrap();
    assert_eq!(acquired(b.acquire(&other, &lease).unwrap()), 2, "a free lease: a new term");
    takeover_round_trips(&b, &proxy, &s, &p, "warm-up"); // prepares the fallback's upsert
    assert_eq!(
        takeover_round_trips(&b, &proxy, &s, &p, "b"),
        3,
        "a takeover: the fallback's statements after the upsert, not simba_acquire_v1"
    );

    b.init_schema().unwrap();
    assert_eq!(schema(&b).status, CheckStatus::Ok, "{:?}", schema(&b));
    assert_eq!(b.acquire(&s, &lease).unwrap(), Acquire::Busy, "warm-up of the procedure call");
    assert_eq!(
        takeover_round_trips(&b, &proxy, &s, &p, "c"),
        2,
        "a takeover: simba_acquire_v2 after the upsert, after init_schema"
    );
    let old: Vec<::mysql::Row> = admin
        .query(
            "SELECT routine_name FROM information_schema.routines WHERE routine_schema = DATABASE() \
             AND routine_name = 'simba_acquire_v1'",
        )
        .unwrap();
    assert_eq!(old.len(), 1, "the init script leaves the old procedure alone");
    b.close_session(&s).unwrap();
    b.close_session(&other).unwrap();
}

/// MySQL/MariaDB: an application user without EXECUTE on the keep-alive procedure (only the
/// table privileges an older version needed) keeps working with the separate-statement keep-alive and acquire,
/// and `check` says why.
#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_keep_alive_without_execute_privilege() {
    use ::mysql::prelude::Queryable;
    let iso = make_isolated(Dialect::Mysql, options(Duration::from_secs(5), false));
    let fx = &iso.fx;
    let mut u = url::Url::parse(&fx.url).unwrap();
    let db = u.path().trim_start_matches('/').to_string();
    let user = format!("simba_it_{:012x}", rand::random::<u64>() >> 16);
    struct DropUser(::mysql::Conn, String);
    impl Drop for DropUser {
        fn drop(&mut self) {
            let _ = self.0.query_drop(format!("DROP USER '{}'@'%'", self.1));
        }
    }
    let mut admin = DropUser(::mysql::Conn::new(::mysql::Opts::from_url(&fx.url).unwrap()).unwrap(), user.clone());
    admin.0.query_drop(format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'app-secret'")).unwrap();
    for t in ["simba_session", "simba_lease", "simba_member"] {
        admin.0.query_drop(format!("GRANT SELECT, INSERT, UPDATE, DELETE ON {db}.{t} TO '{user}'@'%'")).unwrap();
    }
    u.set_username(&user).unwrap();
    u.set_password(Some("app-secret")).unwrap();
    let addr = addr_of(&fx.url);
    let proxy = rtt::CountingProxy::start(&addr);
    let opts = SqlOptions::builder().pool_size(1).auto_purge(false).build().unwrap();
    let b = SqlBackend::from_url(&proxy.url(u.as_str(), &addr), opts).unwrap();
    let schema = b.check().into_iter().find(|c| c.name == "schema").unwrap();
    assert_eq!(schema.status, CheckStatus::Warn, "{schema:?}");

    let lease = name(&support::unique("noexec"));
    let group = name(&support::unique("noexec-group"));
    let s = b.open_session(Duration::from_secs(10), "no execute").unwrap().id;
    assert_eq!(acquired(b.acquire(&s, &lease).unwrap()), 1);
    b.join(&s, &group).unwrap();
    for i in 0..3 {
        let before = proxy.round_trips();
        let KeepAlive::Alive { owned, groups, .. } = b.keep_alive(&s, Duration::from_secs(10)).unwrap() else {
            panic!("expired")
        };
        assert_eq!(owned, vec![(lease.clone(), Token::new(1).unwrap())]);
        assert_eq!(groups, vec![group.clone()]);
        if i > 0 {
            assert_eq!(proxy.round_trips() - before, 5, "the fallback: BEGIN, lock, UPDATE, SELECT, COMMIT");
        }
    }
    b.close_session(&s).unwrap();
    assert_eq!(b.keep_alive(&s, Duration::from_secs(10)).unwrap(), KeepAlive::Expired);
}
