//! PostgreSQL release and membership notifications (`LISTEN`/`NOTIFY`) against the shared
//! server: a `lock` waiter is woken by the notification long before its poll would retry; only a
//! committed release notifies, in commit order; the purge announces leases of purged sessions;
//! joins, leaves and closes announce their groups (only when they change a member row), the purge
//! the groups of purged sessions, and a `watch_members` stream sees them long before its poll; and
//! a notification connection killed on the server (`pg_terminate_backend`) wakes every watcher
//! (lease and group), falls back to polling, says so once per cause, reconnects and pushes again.
//!
//! `SIMBA_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`); start the server
//! with `scripts/services up`.
#![cfg(feature = "postgres")]
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serial_test::serial;
use simba::backend::{Acquire, LeaseBackend, Notification, Topic};
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{Name, Session, SessionOptions};
use support::forward::{Forward, Hook, Op};
use support::sql::{shared_backend, Dialect};

/// Generous bound for anything that is not a poll: far below every poll period used here.
const PUSHED: Duration = Duration::from_secs(8);
/// How long a test waits for a condition before it fails.
const PATIENCE: Duration = Duration::from_secs(20);

fn name(tag: &str) -> Name {
    Name::new(support::unique(&format!("pgpush.{tag}"))).unwrap()
}

fn eventually(within: Duration, mut ok: impl FnMut() -> bool) -> bool {
    let until = Instant::now() + within;
    while Instant::now() < until {
        if ok() {
            return true;
        }
        thread::sleep(Duration::from_millis(10));
    }
    ok()
}

/// Sessions whose `lock` waiters poll only every 30–45 s (renew 60 s): a waiter that holds the
/// lease within [`PUSHED`] of the release was woken by the notification.
fn slow_poll() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(180))
        .renew_interval(Duration::from_secs(60))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Sessions whose waiters poll every 1–1.5 s (renew 2 s).
fn fast_poll() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(6))
        .renew_interval(Duration::from_secs(2))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// Counts busy acquire replies: the waiter's first one means it found the lease held (with a
/// watch armed before that attempt).
#[derive(Debug, Default)]
struct Busy(AtomicUsize);

impl Hook for Arc<Busy> {
    fn before(&self, _op: Op) {}
    fn acquired(&self, _session: &simba::SessionId, reply: &simba::Result<simba::backend::Acquire>) {
        if matches!(reply, Ok(simba::backend::Acquire::Busy)) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}

impl Busy {
    fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

/// `holder` holds `l`; a waiter on `waiter_backend` calls `lock`; once it found `l` busy, the
/// holder releases. Returns the time from the release to the waiter holding the lease.
fn hand_off(holder: &Session, waiter_backend: Arc<dyn LeaseBackend>, busy: &Busy, options: SessionOptions) -> Duration {
    let l = name("l");
    let first = holder.lock(&l).unwrap();
    let t1 = first.token().unwrap();
    let waiter = Arc::new(Session::open(waiter_backend, options).unwrap());
    let before = busy.count();
    let w = {
        let (waiter, l) = (waiter.clone(), l.clone());
        thread::spawn(move || {
            let lease = waiter.lock_timeout(&l, Duration::from_secs(120)).unwrap().expect("the waiter got the lease");
            (Instant::now(), lease)
        })
    };
    assert!(eventually(PATIENCE, || busy.count() > before), "the waiter never found the lease busy");
    let released = Instant::now();
    first.release().unwrap();
    let (got, lease) = w.join().unwrap();
    assert!(lease.token().unwrap() > t1);
    drop(lease);
    match Arc::try_unwrap(waiter) {
        Ok(w) => w.close().unwrap(),
        Err(_) => panic!("the waiter thread kept its session"),
    }
    got.duration_since(released)
}

#[test]
#[serial(postgres)]
fn lock_waiter_is_woken_by_notify_long_before_its_poll() {
    let shared = shared_backend(Dialect::Postgres);
    assert!(shared.capabilities().push_release);
    let holder = Session::open(shared.clone(), slow_poll()).unwrap();
    let busy = Arc::new(Busy::default());
    let spy = Forward::inheriting(shared.clone(), busy.clone());
    let took = hand_off(&holder, spy, &busy, slow_poll());
    // The waiter's next poll is ≥ 30 s after its busy attempt; only the notification wakes it here.
    assert!(took < PUSHED, "the waiter got the lease {took:?} after the release: not pushed (poll: 30-45 s)");
    holder.close().unwrap();
}

#[test]
#[serial(postgres)]
fn only_a_committed_release_notifies_in_commit_order() {
    let b = shared_backend(Dialect::Postgres);
    let (a, other) = (
        b.open_session(Duration::from_secs(30), "").unwrap().id,
        b.open_session(Duration::from_secs(30), "").unwrap().id,
    );
    let (l1, l2, l3) = (name("a"), name("b"), name("c"));
    let token = |r: Acquire| match r {
        Acquire::Acquired { token, .. } => token,
        Acquire::Busy => panic!("busy"),
    };
    let t1 = token(b.acquire(&a, &l1).unwrap());
    let t2 = token(b.acquire(&a, &l2).unwrap());
    let (tx, rx) = crossbeam_channel::unbounded();
    for l in [&l1, &l2, &l3] {
        assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    }
    // No-ops: another term's token, a non-holder, a free lease, a close of a session holding nothing.
    b.release(&a, &l1, simba::Token::new(t1.get() + 1).unwrap()).unwrap();
    b.release(&other, &l2, t2).unwrap();
    b.release(&a, &l3, t1).unwrap();
    b.close_session(&other).unwrap();
    // Then a real release: notifications arrive in commit order, so nothing may come before it.
    b.release(&a, &l2, t2).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), Notification::Released(l2.clone()));
    assert!(rx.try_recv().is_err(), "a no-op release or close notified");
    // A close notifies each lease it frees.
    b.close_session(&a).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), Notification::Released(l1.clone()));
    assert!(b.holder(&l1).unwrap().is_none());
}

#[test]
#[serial(postgres)]
fn the_purge_announces_leases_of_purged_sessions() {
    let b = shared_backend(Dialect::Postgres);
    let mut raw = postgres::Client::connect(&Dialect::Postgres.url(), postgres::NoTls).unwrap();
    let crashed = b.open_session(Duration::from_millis(300), "").unwrap().id;
    let live = b.open_session(Duration::from_secs(30), "").unwrap().id;
    let (l, after) = (name("purged"), name("after"));
    assert!(matches!(b.acquire(&crashed, &l).unwrap(), Acquire::Acquired { .. }));
    let Acquire::Acquired { token, .. } = b.acquire(&live, &after).unwrap() else { panic!("busy") };
    // The holder never renews: once the database clock passed its expiry the lease is free.
    assert!(eventually(PATIENCE, || b.holder(&l).unwrap().is_none()), "the session never expired");
    let (tx, rx) = crossbeam_channel::unbounded();
    // Purge (in batches: the shared server may hold other tests' expired sessions, and another
    // process's purge may take this one) until the crashed session's row is gone, committed.
    let gone = |raw: &mut postgres::Client| {
        let row =
            raw.query_one("select count(*) from simba_session where session_id = $1", &[&crashed.as_str()]).unwrap();
        row.get::<_, i64>(0) == 0
    };
    while !gone(&mut raw) {
        assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
        b.purge_expired().unwrap();
    }
    // A release committed after the purge: notifications come in commit order, so the purge's
    // comes first (without it, the release's would).
    assert!(b.watch(&Topic::Lease(after.clone()), &tx).unwrap());
    b.release(&live, &after, token).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), Notification::Released(l.clone()), "the purge sent nothing");
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), Notification::Released(after.clone()));
    b.close_session(&live).unwrap();
}

// ----- membership changes -----

/// Sessions whose member watches re-read only every 30–45 s (`poll_interval` 30 s, renew 60 s):
/// a change a `watch_members` stream reports within [`MEMBERS_PUSHED`] was pushed. (The listener
/// also wakes a registration nobody renewed for 10 s; a watch renews its registration on every
/// re-read, so that is farther out than [`MEMBERS_PUSHED`] too.)
fn slow_member_poll() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(180))
        .renew_interval(Duration::from_secs(60))
        .poll_interval(Duration::from_secs(30))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

/// How long a test waits for a pushed member change: below both the watch's poll (30 s) and the
/// listener's stale-registration wake-up (10 s after the watch's last registration).
const MEMBERS_PUSHED: Duration = Duration::from_secs(5);

fn members_changed(g: &Name) -> Notification {
    Notification::MembersChanged(g.clone())
}

#[test]
#[serial(postgres)]
fn joins_leaves_and_closes_are_pushed_to_group_watchers() {
    let b = shared_backend(Dialect::Postgres);
    assert!(b.capabilities().push_membership, "PostgreSQL pushes membership changes");
    let (a, c) = (
        b.open_session(Duration::from_secs(30), "a").unwrap().id,
        b.open_session(Duration::from_secs(30), "c").unwrap().id,
    );
    let g = name("g");
    let (tx, rx) = crossbeam_channel::unbounded();
    // The same name as a lease: a member change must not wake it (its own channel).
    let (lease_tx, lease_rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(g.clone()), &lease_tx).unwrap());

    // A join is pushed (no poll exists at this level: whatever arrives was sent by the server).
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap(), "a group watch was declined");
    b.join(&a, &g).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g), "no MembersChanged after a join");

    // No-ops notify nothing: a repeated join, a leave of a non-member, a close of a session in no
    // group. Notifications arrive in commit order, so the leave's must be the next one.
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
    b.join(&a, &g).unwrap();
    b.leave(&c, &g).unwrap();
    let idle = b.open_session(Duration::from_secs(30), "").unwrap().id;
    b.close_session(&idle).unwrap();
    b.leave(&a, &g).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g), "no MembersChanged after a leave");
    assert!(rx.try_recv().is_err(), "a no-op join, leave or close notified");

    // A member's close is pushed (close-session.sql deletes its member rows).
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
    b.join(&c, &g).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g));
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
    b.close_session(&c).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g), "no MembersChanged after a member's close");
    assert!(b.members(&g).unwrap().is_empty());

    // The lease registration of the same name heard none of it.
    assert!(lease_rx.try_recv().is_err(), "a member change woke a lease watcher");
    b.close_session(&a).unwrap();
}

#[test]
#[serial(postgres)]
fn the_purge_announces_groups_of_purged_sessions() {
    let b = shared_backend(Dialect::Postgres);
    let mut raw = postgres::Client::connect(&Dialect::Postgres.url(), postgres::NoTls).unwrap();
    let crashed = b.open_session(Duration::from_millis(300), "").unwrap().id;
    let live = b.open_session(Duration::from_secs(30), "").unwrap().id;
    let (g, after) = (name("purged"), name("after"));
    b.join(&crashed, &g).unwrap();
    // The member never renews: once the database clock passed its expiry it is no member.
    assert!(eventually(PATIENCE, || b.members(&g).unwrap().is_empty()), "the session never expired");
    let (tx, rx) = crossbeam_channel::unbounded();
    let gone = |raw: &mut postgres::Client| {
        let row =
            raw.query_one("select count(*) from simba_member where session_id = $1", &[&crashed.as_str()]).unwrap();
        row.get::<_, i64>(0) == 0
    };
    while !gone(&mut raw) {
        assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
        b.purge_expired().unwrap();
    }
    // A join committed after the purge: the purge's notification comes first.
    assert!(b.watch(&Topic::Group(after.clone()), &tx).unwrap());
    b.join(&live, &after).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g), "the purge sent nothing");
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&after));
    b.close_session(&live).unwrap();
}

#[test]
#[serial(postgres)]
fn watch_members_sees_joins_and_leaves_long_before_its_poll() {
    let shared = shared_backend(Dialect::Postgres);
    let g = name("watched");
    let watcher = Session::open(shared.clone(), slow_member_poll()).unwrap();
    let watch = watcher.watch_members(&g).unwrap();
    let first = watch.recv_timeout(PATIENCE).unwrap();
    assert!(first.members.is_empty(), "{first:?}");

    // A join, a leave and a member's close, each seen within MEMBERS_PUSHED (the poll: 30-45 s).
    let member = Session::open(shared.clone(), slow_member_poll()).unwrap();
    let membership = member.join(&g).unwrap();
    let change = watch.recv_timeout(MEMBERS_PUSHED).expect("the join was not pushed (poll: 30-45 s)");
    assert_eq!(change.joined.iter().map(|m| &m.session).collect::<Vec<_>>(), vec![member.id()]);
    membership.leave().unwrap();
    let change = watch.recv_timeout(MEMBERS_PUSHED).expect("the leave was not pushed (poll: 30-45 s)");
    assert_eq!(change.left.iter().map(|m| &m.session).collect::<Vec<_>>(), vec![member.id()]);
    assert!(change.members.is_empty());

    let _again = member.join(&g).unwrap();
    let change = watch.recv_timeout(MEMBERS_PUSHED).expect("the second join was not pushed");
    assert_eq!(change.members.len(), 1);
    let id = member.id().clone();
    member.close().unwrap();
    let change = watch.recv_timeout(MEMBERS_PUSHED).expect("the member's close was not pushed (poll: 30-45 s)");
    assert_eq!(change.left.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![id]);
    drop(watch);
    watcher.close().unwrap();
}

// ----- the notification connection is lost -----

/// Collects simba's log lines (this binary's logger).
struct Capture(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("simba")
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).expect("no other logger in this binary");
        log::set_max_level(log::LevelFilter::Debug);
        c
    })
}

fn lines(level: log::Level, containing: &str) -> usize {
    capture().0.lock().iter().filter(|(l, m)| *l == level && m.contains(containing)).count()
}

/// A login role of its own on the shared server (so its connection limit can keep the
/// notification connection from reconnecting while the pool's one connection stays), dropped
/// at the end.
struct Role {
    name: String,
    admin_url: String,
}

impl Role {
    fn create() -> Role {
        // The shared backend's first use creates the tables the role is granted.
        let _ = shared_backend(Dialect::Postgres);
        let name = format!("simba_push_{:08x}", rand::random::<u32>());
        let role = Role { name, admin_url: Dialect::Postgres.url() };
        role.sql(&format!(
            "create role {n} login; grant select, insert, update, delete on simba_session, simba_lease, simba_member to {n}",
            n = role.name
        ));
        role
    }

    /// Runs `sql` as the admin user (test setup only; the library never builds SQL).
    fn sql(&self, sql: &str) {
        let mut c = postgres::Client::connect(&self.admin_url, postgres::NoTls).unwrap();
        c.batch_execute(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    fn url(&self) -> String {
        let url = &self.admin_url;
        let rest = url.split_once('@').map(|(_, r)| r).expect("a user@ in SIMBA_TEST_POSTGRES_URL");
        format!("postgres://{}@{rest}", self.name)
    }

    fn terminate(&self, pid: u64) {
        let mut c = postgres::Client::connect(&self.admin_url, postgres::NoTls).unwrap();
        let pid = i32::try_from(pid).unwrap();
        let row = c.query_one("select pg_terminate_backend($1)", &[&pid]).unwrap();
        assert!(row.get::<_, bool>(0), "pg_terminate_backend({pid}) found no such backend");
    }
}

impl Drop for Role {
    fn drop(&mut self) {
        let n = &self.name;
        let _ = postgres::Client::connect(&self.admin_url, postgres::NoTls).map(|mut c| {
            let _ = c.batch_execute(&format!(
                "select pg_terminate_backend(pid) from pg_stat_activity where usename = '{n}'; \
                 revoke all on simba_session, simba_lease, simba_member from {n}"
            ));
            // The terminated backends may need a moment to go before the role can be dropped.
            for _ in 0..100 {
                if c.batch_execute(&format!("drop role if exists {n}")).is_ok() {
                    break;
                }
                thread::sleep(Duration::from_millis(50));
            }
        });
    }
}

#[test]
#[serial(postgres)]
fn a_killed_notification_connection_falls_back_to_polling_and_recovers() {
    let _ = capture();
    let role = Role::create();
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(1)).pool_size(1).build().unwrap();
    let limited = Arc::new(SqlBackend::postgres(&role.url(), options).unwrap());
    let busy = Arc::new(Busy::default());
    let spy: Arc<dyn LeaseBackend> = Forward::inheriting(limited.clone(), busy.clone());
    let holder = Session::open(shared_backend(Dialect::Postgres), fast_poll()).unwrap();

    // Pushed at first (this also opens the pool's one connection and the notification connection).
    assert!(limited.notification_connection_id().is_none(), "no connection before the first watch");
    let took = hand_off(&holder, spy.clone(), &busy, slow_poll());
    assert!(took < PUSHED, "not pushed before the fault: {took:?}");
    let first = limited.notification_connection_id().expect("listening");

    // Kill the notification connection; the role's connection limit (1: the pool's) keeps it down.
    role.sql(&format!("alter role {} connection limit 1", role.name));
    let warned = lines(log::Level::Warn, "release notifications unavailable");
    // A watcher registered before the loss is woken by it (its notification may be lost with it).
    let (early_tx, early_rx) = crossbeam_channel::unbounded();
    let early = name("early");
    assert!(limited.watch(&Topic::Lease(early.clone()), &early_tx).unwrap());
    role.terminate(first);
    assert_eq!(early_rx.recv_timeout(PATIENCE).unwrap(), Notification::Released(early));
    assert!(
        eventually(PATIENCE, || limited.notification_connection_id().is_none()),
        "the lost connection was not noticed"
    );
    let (tx, _rx) = crossbeam_channel::unbounded();
    assert!(!limited.watch(&Topic::Lease(name("x")), &tx).unwrap(), "watch accepted while the connection is down");
    // Waiters poll meanwhile: this one gets the lease by its retries (every 1-1.5 s).
    let _ = hand_off(&holder, spy.clone(), &busy, fast_poll());
    assert!(limited.notification_connection_id().is_none(), "it reconnected despite the connection limit");
    // Reconnection attempts failed several times; each cause was logged once.
    assert!(
        eventually(PATIENCE, || lines(log::Level::Debug, "release notifications still unavailable") >= 2),
        "no repeated reconnection attempts"
    );
    let new_warnings = lines(log::Level::Warn, "release notifications unavailable") - warned;
    assert!((1..=2).contains(&new_warnings), "{new_warnings} warnings: want one per cause (killed, then refused)");

    // Lift the limit: it reconnects, says so once, and pushes again.
    let back = lines(log::Level::Info, "release notifications are back");
    role.sql(&format!("alter role {} connection limit -1", role.name));
    assert!(
        eventually(PATIENCE, || limited.notification_connection_id().is_some_and(|p| p != first)),
        "the notification connection never came back"
    );
    assert_eq!(lines(log::Level::Info, "release notifications are back"), back + 1);
    let took = hand_off(&holder, spy, &busy, slow_poll());
    assert!(took < PUSHED, "not pushed after recovery: {took:?}");
    holder.close().unwrap();
}

#[test]
#[serial(postgres)]
fn a_killed_notification_connection_wakes_group_watchers_and_pushes_again() {
    let role = Role::create();
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(1)).pool_size(1).build().unwrap();
    let limited = SqlBackend::postgres(&role.url(), options).unwrap();
    // The pool's one connection, opened before the role's limit goes down to it.
    let a = limited.open_session(Duration::from_secs(30), "").unwrap().id;
    let g = name("resync");
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(limited.watch(&Topic::Group(g.clone()), &tx).unwrap(), "a group watch was declined");
    let first = limited.notification_connection_id().expect("listening");

    // Kill the notification connection and keep it from reconnecting: the group watcher is woken
    // (a change may have been lost with the connection), and watches are declined meanwhile.
    role.sql(&format!("alter role {} connection limit 1", role.name));
    role.terminate(first);
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g), "the loss did not wake the group watcher");
    assert!(
        eventually(PATIENCE, || limited.notification_connection_id().is_none()),
        "the lost connection was not noticed"
    );
    assert!(
        !limited.watch(&Topic::Group(g.clone()), &tx).unwrap(),
        "group watch accepted while the connection is down"
    );
    // A join while nobody listens: nothing can be pushed; the watcher's re-read finds it.
    limited.join(&a, &g).unwrap();
    assert!(rx.try_recv().is_err());

    // Back: the watch is accepted again and a change is pushed again.
    role.sql(&format!("alter role {} connection limit -1", role.name));
    assert!(
        eventually(PATIENCE, || limited.notification_connection_id().is_some_and(|p| p != first)),
        "the notification connection never came back"
    );
    assert!(limited.watch(&Topic::Group(g.clone()), &tx).unwrap());
    limited.leave(&a, &g).unwrap();
    assert_eq!(rx.recv_timeout(PATIENCE).unwrap(), members_changed(&g), "not pushed after the reconnection");
    limited.close_session(&a).unwrap();
}
