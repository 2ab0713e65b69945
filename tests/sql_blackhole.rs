//! SQL: a connection blackholed in the middle of a keep-alive (issue #36, "Network faults").
//!
//! A blackhole is not a refusal: `iptables` drops the connection's packets on arrival, both ways
//! (`support::netfault`), so the client's writes succeed, no RST or error comes back, and a read
//! waits for a reply that never arrives — what a dead switch, a cut cable or a firewall dropping
//! state does. Each test runs a **private** server (PostgreSQL or MariaDB) that listens on two
//! loopback addresses: the session under test reaches it at `127.0.0.2` (the path that is cut),
//! everything else — the other session, the admin queries — at `127.0.0.1`, which stays open.
//!
//! The fault is placed by causality, not by sleeping: a [`Forward`] hook holds the session's next
//! keep-alive just before it is sent, the test installs the blackhole and only then lets the
//! keep-alive go, so the keep-alive is in flight on a connection whose packets vanish.
//!
//! 1. **One connection blackholed** (its client port): the engine abandons the keep-alive at its
//!    query timeout (`RenewalFailed { failures: 1 }` then, not later), the driver ends the call
//!    by its own bound (`Timeout`), the connection is dropped and the retry renews on a new one
//!    while the old one's packets still vanish; the session and its lease live on (`token()` Ok
//!    throughout, no `LeaseLost`, no `Expired`).
//! 2. **Every connection blackholed, longer than the lease** (the server's address): the loss is
//!    reported at the local deadline — `LeaseLost` and `Expired` no earlier than the deadline the
//!    session had when the blackhole went up and at most [`MARGIN`] (a quarter of the query
//!    timeout) after it, so no hung call delayed it — and another session (on the open path)
//!    acquires the lease only after that, while being refused before. Every blackholed keep-alive
//!    call returned within its bound (no worker kept), and once the blackhole is lifted the same
//!    backend serves a new session on fresh connections (the dead ones replaced).
//! 3. **The MySQL watchdog's log record** (finding 6 of issue #36, its last part): the watchdog
//!    that ends a late MySQL call wrote its record while holding its lock, so an application
//!    logger that calls into simba (any MySQL call arms the watchdog) stalled every MySQL call of
//!    the process. A blackholed call makes the watchdog fire under a logger that calls back
//!    (`tests/support/logger.rs`); `tests/logger_mysql.rs` cannot reach that record, since on a
//!    healthy server no call runs past its query timeout.
//!
//! Every rule is removed when its guard drops, also when a test panics (checked by
//! [`rules_are_removed_when_a_test_panics`] and with `iptables -S` at the end of each test).
//! Needs root (`iptables`): fails with a clear message otherwise, never skips.
#![cfg(all(feature = "postgres", feature = "mysql"))]

#[path = "support/logger.rs"]
mod logger;
mod support;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use parking_lot::Mutex;
use serial_test::serial;
use simba::backend::{KeepAlive, LeaseBackend};
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{ErrorKind, LossReason, Name, Session, SessionEvent, SessionOptions, SessionState, Token};
use support::forward::{Forward, Hook, Op};
use support::netfault;
use support::sql::{wait_tcp, Dialect, PrivateMariadb, PrivatePostgres};

/// The session's and the backend's query timeout.
const QT: Duration = Duration::from_secs(2);
const LEASE: Duration = Duration::from_secs(8);
const RENEW: Duration = Duration::from_secs(2);
/// How late an event or a call's end may come after the instant it is due (timers, channels, a
/// loaded machine): a quarter of the query timeout, so that anything waiting for a hung call
/// (which ends only at its query timeout) would miss it.
const MARGIN: Duration = Duration::from_millis(500);
/// How early the engine's own instants may be against ours (the send instant is taken just
/// before the hook runs).
const SLACK: Duration = Duration::from_millis(50);
/// The server's address on the path that is cut.
const CUT: &str = "127.0.0.2";
/// The server's address on the path that stays open.
const OPEN: &str = "127.0.0.1";

fn options() -> SessionOptions {
    SessionOptions::builder().lease_duration(LEASE).renew_interval(RENEW).query_timeout(QT).build().unwrap()
}

fn free_port() -> u16 {
    std::net::TcpListener::bind((OPEN, 0)).unwrap().local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------------
// A private server on two loopback addresses.

enum Process {
    Postgres(#[allow(dead_code)] PrivatePostgres),
    Mariadb(#[allow(dead_code)] PrivateMariadb),
}

struct Server {
    dialect: Dialect,
    port: u16,
    _process: Process,
}

impl Server {
    fn start(dialect: Dialect) -> Server {
        let port = free_port();
        let process = match dialect {
            Dialect::Postgres => {
                let pg = PrivatePostgres::start(port);
                // `pg_ctl` appends `-o` options: this `listen_addresses` comes last and wins.
                pg.ctl(&["restart", "-w", "-o", &format!("-c listen_addresses={OPEN},{CUT}")]);
                Process::Postgres(pg)
            }
            Dialect::Mysql => {
                // The last `--bind-address` wins; MariaDB 10.11 binds a comma-separated list.
                Process::Mariadb(PrivateMariadb::start_with(port, &[&format!("--bind-address={OPEN},{CUT}")]))
            }
        };
        for host in [OPEN, CUT] {
            wait_tcp(&format!("{host}:{port}"), Duration::from_secs(30));
        }
        let server = Server { dialect, port, _process: process };
        server.backend(OPEN, 4).init_schema().unwrap();
        server
    }

    fn url(&self, host: &str) -> String {
        match self.dialect {
            Dialect::Postgres => format!("postgres://postgres@{host}:{}/postgres", self.port),
            Dialect::Mysql => format!("mysql://root@{host}:{}/mysql", self.port),
        }
    }

    /// A backend reaching the server at `host`, with `pool_size` connections, no automatic purge
    /// (nothing but the test's calls uses the pool).
    fn backend(&self, host: &str, pool_size: u32) -> Arc<SqlBackend> {
        let options = SqlOptions::builder().query_timeout(QT).pool_size(pool_size).auto_purge(false).build().unwrap();
        Arc::new(SqlBackend::from_url(&self.url(host), options).unwrap())
    }

    /// The client port of the connection the server knows as `id` (`SqlBackend::connection_ids`).
    fn client_port(&self, id: u64) -> u16 {
        match self.dialect {
            Dialect::Postgres => {
                let mut admin = postgres::Client::connect(&self.url(OPEN), postgres::NoTls).unwrap();
                let row = admin
                    .query_one("SELECT client_port FROM pg_stat_activity WHERE pid = $1", &[&(id as i32)])
                    .unwrap();
                u16::try_from(row.get::<_, i32>(0)).unwrap()
            }
            Dialect::Mysql => {
                use mysql::prelude::Queryable;
                let mut admin = mysql::Conn::new(mysql::Opts::from_url(&self.url(OPEN)).unwrap()).unwrap();
                let host: String = admin
                    .exec_first("SELECT host FROM information_schema.processlist WHERE id = ?", (id,))
                    .unwrap()
                    .expect("the connection is listed");
                host.rsplit(':').next().unwrap().parse().unwrap()
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The hook: holds a chosen keep-alive before it is sent, and records every keep-alive.

#[derive(Debug, Clone)]
enum Reply {
    Alive(Vec<(Name, Token)>),
    Expired,
    Failed(ErrorKind, String),
}

#[derive(Debug, Clone)]
struct Call {
    /// When it was forwarded to the SQL backend (after any hold).
    entered: Instant,
    returned: Option<(Instant, Reply)>,
}

impl Call {
    fn lists(&self, name: &Name, token: Token) -> bool {
        matches!(&self.returned, Some((_, Reply::Alive(owned))) if owned.contains(&(name.clone(), token)))
    }
}

#[derive(Debug, Default)]
struct Watch {
    /// Set by [`Watch::hold_next`]: the next keep-alive says so and waits for the go.
    hold: Mutex<Option<(Sender<Instant>, Receiver<()>)>>,
    calls: Mutex<Vec<Call>>,
}

thread_local! {
    /// The index in `calls` of the keep-alive this thread is forwarding.
    static CALL: Cell<usize> = const { Cell::new(usize::MAX) };
}

impl Watch {
    /// The next keep-alive sends the instant it was held on the first channel and waits (at most
    /// 10 s, or until the sender is dropped) for the second before it is forwarded.
    fn hold_next(&self) -> (Receiver<Instant>, Sender<()>) {
        let (tell, held) = crossbeam_channel::bounded(1);
        let (go, wait) = crossbeam_channel::bounded(1);
        *self.hold.lock() = Some((tell, wait));
        (held, go)
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }

    /// Waits (at most `within`) for a keep-alive from index `from` on that returned listing
    /// (`name`, `token`); its index.
    fn wait_listing(&self, from: usize, name: &Name, token: Token, within: Duration) -> usize {
        wait_for(&format!("a keep-alive listing '{name}' ({token:?})"), within, || {
            self.calls().iter().enumerate().skip(from).find(|(_, c)| c.lists(name, token)).map(|(i, _)| i)
        })
    }
}

impl Hook for Watch {
    fn before(&self, op: Op) {
        if op != Op::KeepAlive {
            return;
        }
        let hold = self.hold.lock().take();
        if let Some((tell, go)) = hold {
            let _ = tell.send(Instant::now());
            let _ = go.recv_timeout(Duration::from_secs(10));
        }
        let mut calls = self.calls.lock();
        CALL.with(|c| c.set(calls.len()));
        calls.push(Call { entered: Instant::now(), returned: None });
    }

    fn keep_alive_reply(&self, reply: &simba::Result<KeepAlive>) {
        let reply = match reply {
            Ok(KeepAlive::Alive { owned, .. }) => Reply::Alive(owned.clone()),
            Ok(KeepAlive::Expired) => Reply::Expired,
            Err(e) => Reply::Failed(e.kind(), e.to_string()),
        };
        let i = CALL.with(Cell::get);
        if let Some(c) = self.calls.lock().get_mut(i) {
            c.returned = Some((Instant::now(), reply));
        }
    }
}

/// Polls `f` every few milliseconds until it gives a value; panics after `within`.
fn wait_for<T>(what: &str, within: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + within;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "no {what} within {within:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Sets its flag when dropped: a scoped helper thread polling the flag ends also when the test
/// panics (the scope would otherwise wait for it for good).
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

/// Panics unless this process has no iptables rule left.
fn assert_no_rules_left() {
    let left = netfault::own_rules();
    assert!(left.is_empty(), "iptables rules of this test left behind: {left:?}");
}

/// A fresh session on `backend` holding a fresh lease, settled: a keep-alive after the lock
/// listed it. Returns the session, its events, the lease, its name and token, and the index of
/// that keep-alive.
fn session_holding(
    backend: &Arc<Forward<Watch>>,
) -> (Session, simba::Events<SessionEvent>, simba::Lease, Name, Token, usize) {
    let session = Session::open(backend.clone(), options()).unwrap();
    let events = session.events();
    let name = Name::new(support::unique("blackhole")).unwrap();
    let from = backend.hook.calls().len();
    let lease = session.lock(&name).unwrap();
    let token = lease.token().unwrap();
    let settled = backend.hook.wait_listing(from, &name, token, RENEW + QT + MARGIN);
    (session, events, lease, name, token, settled)
}

// ---------------------------------------------------------------------------------------------
// 1. One connection blackholed mid-keep-alive.

fn one_connection_blackholed(dialect: Dialect) {
    netfault::require_root("sql_blackhole");
    let server = Server::start(dialect);
    // One connection: the keep-alive can only take the one that is cut, and its retry only a new one.
    let sql = server.backend(CUT, 1);
    let backend = Forward::inheriting(sql.clone(), Watch::default());
    let (session, events, lease, name, t1, _) = session_holding(&backend);
    let ids = sql.connection_ids();
    assert_eq!(ids.len(), 1, "one pooled connection: {ids:?}");
    let old = ids[0];
    let client_port = server.client_port(old);

    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        // token() Ok throughout: sampled every 2 ms from before the blackhole to the end.
        let checker = s.spawn(|| {
            let mut failures = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                if let Err(e) = lease.token() {
                    failures.push(e.to_string());
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            failures
        });
        let _stop = SetOnDrop(&stop);

        let (held, go) = backend.hook.hold_next();
        let held_at = held.recv_timeout(RENEW + QT).expect("the next keep-alive within a renew interval");
        let first = backend.hook.calls().len();
        let cut = netfault::blackhole_connection(CUT, server.port, client_port);
        go.send(()).unwrap();

        // The engine abandons the keep-alive at its query timeout, not before, not much later.
        let failed_at = match events.recv_timeout(QT + MARGIN) {
            Ok(SessionEvent::RenewalFailed { failures: 1 }) => Instant::now(),
            other => panic!("expected RenewalFailed {{ failures: 1 }} by the query timeout, got {other:?}"),
        };
        let abandoned = failed_at - held_at;
        assert!(
            abandoned + SLACK >= QT && abandoned <= QT + MARGIN,
            "the keep-alive was abandoned {abandoned:?} after it was sent (query timeout {QT:?})"
        );
        // The driver ends the blackholed call by its own bound: Timeout, at the query timeout.
        let hung = wait_for("end of the blackholed keep-alive", QT + MARGIN, || {
            backend.hook.calls()[first].returned.clone().map(|r| (backend.hook.calls()[first].entered, r))
        });
        let (entered, (returned, reply)) = hung;
        assert!(
            matches!(&reply, Reply::Failed(ErrorKind::Timeout, _)),
            "the blackholed keep-alive should fail with Timeout, got {reply:?}"
        );
        let took = returned - entered;
        assert!(took + SLACK >= QT && took <= QT + MARGIN, "the blackholed keep-alive took {took:?}");

        // The retry renews, on a new connection: the old one's packets still vanish.
        let retry = backend.hook.wait_listing(first + 1, &name, t1, RENEW + QT + MARGIN);
        let retried = &backend.hook.calls()[retry];
        assert!(retried.entered >= failed_at, "the retry was sent before the failure: {retried:?}");
        let ids = sql.connection_ids();
        assert!(!ids.contains(&old), "the blackholed connection {old} is still pooled: {ids:?}");
        assert_eq!(ids.len(), 1, "{ids:?}");
        // And the session keeps renewing on it.
        backend.hook.wait_listing(retry + 1, &name, t1, RENEW + QT + MARGIN);

        stop.store(true, Ordering::SeqCst);
        let failures = checker.join().unwrap();
        assert!(failures.is_empty(), "token() failed while the session lived: {failures:?}");
        let later: Vec<SessionEvent> = events.try_iter().collect();
        assert!(later.is_empty(), "no event after the one failed renewal, got {later:?}");
        assert_eq!(session.state(), SessionState::Active);
        assert_eq!(lease.token().unwrap(), t1);
        assert!(!netfault::own_rules().is_empty());
        eprintln!(
            "{dialect:?}: keep-alive abandoned {abandoned:?} after it was sent, the blackholed call ended after \
             {took:?}, the retry renewed on connection {ids:?} (was {old})"
        );
        cut.remove();
    });
    assert_no_rules_left();
    lease.release().unwrap();
    session.close().unwrap();
}

#[test]
#[serial(sql_blackhole)]
fn postgres_a_keep_alive_on_a_blackholed_connection_is_abandoned_and_retried_on_another() {
    one_connection_blackholed(Dialect::Postgres);
}

#[test]
#[serial(sql_blackhole)]
fn mysql_a_keep_alive_on_a_blackholed_connection_is_abandoned_and_retried_on_another() {
    one_connection_blackholed(Dialect::Mysql);
}

// ---------------------------------------------------------------------------------------------
// 2. Every connection blackholed for longer than the lease.

/// One attempt of the other session: when it started and ended, and what it got.
#[derive(Debug)]
struct Attempt {
    start: Instant,
    end: Instant,
    got: Result<Option<Token>, String>,
    /// On success: the first session's `token()` at that moment.
    first_token: Option<Result<Token, ErrorKind>>,
}

fn every_connection_blackholed(dialect: Dialect) {
    netfault::require_root("sql_blackhole");
    let server = Server::start(dialect);
    let sql = server.backend(CUT, 1);
    let backend = Forward::inheriting(sql.clone(), Watch::default());
    let other = Session::open(server.backend(OPEN, 4), options()).unwrap();
    let (session, events, lease, name, t1, _) = session_holding(&backend);
    let old_ids = sql.connection_ids();

    let (held, go) = backend.hook.hold_next();
    held.recv_timeout(RENEW + QT).expect("the next keep-alive within a renew interval");
    let first = backend.hook.calls().len();
    let cut = netfault::blackhole_server(CUT, server.port);
    // The deadlines cannot move from here: nothing reaches the server on this path.
    let before = Instant::now();
    let (lease_left, session_left) = (lease.remaining().unwrap(), session.remaining().unwrap());
    let after = Instant::now();
    go.send(()).unwrap();
    let (lease_due, session_due) =
        ((before + lease_left, after + lease_left), (before + session_left, after + session_left));

    let done = AtomicBool::new(false);
    let (lost_at, expired_at, attempts) = std::thread::scope(|s| {
        // The other session tries all along, on the open path.
        let contender = s.spawn(|| {
            let mut attempts = Vec::new();
            let give_up = session_due.1 + LEASE;
            while !done.load(Ordering::SeqCst) && Instant::now() < give_up {
                let start = Instant::now();
                let got = other.try_lock(&name);
                let end = Instant::now();
                match got {
                    Ok(Some(l)) => {
                        let first_token = Some(lease.token().map_err(|e| e.kind()));
                        attempts.push(Attempt { start, end, got: Ok(Some(l.token().unwrap())), first_token });
                        l.release().unwrap();
                        break;
                    }
                    Ok(None) => attempts.push(Attempt { start, end, got: Ok(None), first_token: None }),
                    Err(e) => attempts.push(Attempt { start, end, got: Err(e.to_string()), first_token: None }),
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            attempts
        });
        let _done = SetOnDrop(&done);
        let mut lost_at = None;
        let mut renewal_failures = 0;
        let expired_at = loop {
            match events.recv_deadline(session_due.1 + MARGIN) {
                Ok(SessionEvent::RenewalFailed { .. }) => renewal_failures += 1,
                Ok(SessionEvent::LeaseLost { name: n, token, reason })
                    if n == name
                        && token == t1
                        && lost_at.is_none()
                        && matches!(reason, LossReason::SessionExpired | LossReason::Deadline) =>
                {
                    lost_at = Some(Instant::now());
                    // From this instant on, token() fails.
                    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
                }
                Ok(SessionEvent::Expired) => break Instant::now(),
                Ok(ev) => panic!("unexpected event {ev:?}"),
                Err(_) => {
                    panic!(
                        "the loss was not reported by the local deadline plus {MARGIN:?} (lost at {lost_at:?}, \
                         {renewal_failures} renewal failures)"
                    )
                }
            }
        };
        assert!(renewal_failures >= 1, "the blackholed keep-alives failed before the deadline");
        let attempts = contender.join().unwrap();
        done.store(true, Ordering::SeqCst);
        (lost_at.expect("LeaseLost before Expired"), expired_at, attempts)
    });

    // The loss, at the local deadline: not before, and not a hung call later.
    assert!(lost_at >= lease_due.0, "LeaseLost {:?} before the lease's deadline", lease_due.0 - lost_at);
    assert!(lost_at <= lease_due.1 + MARGIN, "LeaseLost {:?} after the lease's deadline", lost_at - lease_due.1);
    assert!(expired_at >= session_due.0, "Expired {:?} before the deadline", session_due.0 - expired_at);
    assert!(expired_at <= session_due.1 + MARGIN, "Expired {:?} after the deadline", expired_at - session_due.1);

    // The other session: refused while the first held the lease, granted only after the loss.
    let errors: Vec<&Attempt> = attempts.iter().filter(|a| a.got.is_err()).collect();
    assert!(errors.is_empty(), "the open path failed: {errors:?}");
    assert!(
        attempts.iter().any(|a| a.got == Ok(None) && a.end < lost_at),
        "the other session was never refused during the blackhole: {attempts:?}"
    );
    let won = attempts.last().filter(|a| matches!(a.got, Ok(Some(_)))).expect("the other session got the lease");
    assert!(
        won.end > lost_at,
        "the other session got the lease (attempt sent {:?} before the loss) before the first reported the loss: \
         {won:?}",
        lost_at.saturating_duration_since(won.start)
    );
    assert!(
        matches!(won.first_token, Some(Err(ErrorKind::LeaseLost))),
        "the first session's token() when the other got the lease: {won:?}"
    );
    assert!(matches!(won.got, Ok(Some(t)) if t > t1), "{won:?}");

    // Every blackholed keep-alive ended by its bound: no call (and no worker) left hanging.
    std::thread::sleep(QT + MARGIN);
    let calls = backend.hook.calls();
    for c in &calls[first..] {
        match &c.returned {
            Some((at, Reply::Failed(_, error))) => {
                assert!(*at - c.entered <= QT + MARGIN, "a blackholed keep-alive took {:?}: {error}", *at - c.entered)
            }
            other => panic!("a blackholed keep-alive did not fail by its bound: {other:?}"),
        }
    }
    cut.remove();
    assert_no_rules_left();

    // The path is back: the same backend (its pool) serves a new session, whose keep-alives run
    // on the process's workers again, on connections that replaced the dead ones. The pool's
    // pending connect ends at its connect timeout (the query timeout) and retries within half of
    // it: allow both.
    eprintln!(
        "{dialect:?}: LeaseLost {:?} and Expired {:?} after the deadlines (at most), the other session got the lease \
         {:?} after the loss",
        lost_at - lease_due.0,
        expired_at - session_due.0,
        won.end - lost_at
    );
    let lifted = Instant::now();
    let again = loop {
        match Session::open(backend.clone(), options()) {
            Ok(s) => break s,
            Err(e) => {
                assert!(lifted.elapsed() < QT * 2 + MARGIN, "no session once the blackhole was lifted: {e}");
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    };
    let fresh = Name::new(support::unique("blackhole-after")).unwrap();
    let from = backend.hook.calls().len();
    let l = again.lock(&fresh).unwrap();
    let recovered = lifted.elapsed();
    backend.hook.wait_listing(from, &fresh, l.token().unwrap(), RENEW + QT + MARGIN);
    let ids = sql.connection_ids();
    assert!(ids.iter().all(|id| !old_ids.contains(id)), "a dead connection is still pooled: {old_ids:?} in {ids:?}");
    eprintln!(
        "{dialect:?}: a new session held a lease {recovered:?} after the blackhole was lifted, connections {ids:?}"
    );
    l.release().unwrap();
    again.close().unwrap();
    assert_eq!(session.state(), SessionState::Expired);
    other.close().unwrap();
}

#[test]
#[serial(sql_blackhole)]
fn postgres_a_session_blackholed_past_its_lease_is_lost_at_its_local_deadline() {
    every_connection_blackholed(Dialect::Postgres);
}

#[test]
#[serial(sql_blackhole)]
fn mysql_a_session_blackholed_past_its_lease_is_lost_at_its_local_deadline() {
    every_connection_blackholed(Dialect::Mysql);
}

// ---------------------------------------------------------------------------------------------
// 3. The MySQL watchdog's record, under a logger that calls back into simba.

#[test]
#[serial(sql_blackhole)]
fn mysql_the_watchdog_ends_a_blackholed_call_without_logging_under_its_lock() {
    netfault::require_root("sql_blackhole");
    let server = Server::start(Dialect::Mysql);
    let probe = server.backend(OPEN, 4);
    let victim = server.backend(CUT, 1);
    let name = Name::new(support::unique("watchdog")).unwrap();
    victim.holder(&name).unwrap();
    probe.holder(&name).unwrap();
    let ids = victim.connection_ids();
    assert_eq!(ids.len(), 1, "{ids:?}");
    let cut = netfault::blackhole_connection(CUT, server.port, server.client_port(ids[0]));
    let mut late = None;
    let outcome = logger::probing(
        {
            let (probe, name) = (probe.clone(), name.clone());
            move || {
                let _ = probe.holder(&name);
            }
        },
        || {
            let start = Instant::now();
            let r = victim.holder(&name);
            late = Some((r.map_err(|e| e.kind()), start.elapsed()));
        },
    );
    cut.remove();
    assert_no_rules_left();
    let (result, took) = late.unwrap();
    assert_eq!(result.unwrap_err(), ErrorKind::Timeout, "the blackholed call ends with Timeout");
    logger::assert_never_stalled("a logger calling into MySQL when the watchdog ends a late call", &outcome);
    assert!(took <= QT + MARGIN, "the blackholed call took {took:?} (query timeout {QT:?})");
}

// ---------------------------------------------------------------------------------------------

#[test]
#[serial(sql_blackhole)]
fn rules_are_removed_when_a_test_panics() {
    netfault::require_root("sql_blackhole");
    let port = free_port();
    let panicked = std::panic::catch_unwind(|| {
        let _whole = netfault::blackhole_server(CUT, port);
        let _one = netfault::blackhole_connection(CUT, port, free_port());
        assert_eq!(netfault::own_rules().len(), 4, "{:?}", netfault::own_rules());
        panic!("a test fails with its blackhole up");
    });
    assert!(panicked.is_err());
    assert_no_rules_left();
}
