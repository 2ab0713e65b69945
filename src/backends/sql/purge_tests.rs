//! The automatic purge against the real servers (PostgreSQL and MySQL/MariaDB), through a
//! crate-internal seam that adds nothing to the shipped code: the backend's own driver wrapped in
//! [`Seam`], a [`Driver`] that forwards every call and counts the purge runs (started, running at
//! once, how each ended), and can make the next run panic. Every other statement is the real
//! driver's, on the real server.
//!
//! What is checked (SPEC §6.1, "Lazy cleanup"): a run starts after `open_session` and after
//! `keep_alive`, at most once per purge interval (the tests move the last run's instant back by an
//! interval instead of sleeping one), takes at most [`PURGE_BATCH`] sessions, the oldest first,
//! and never deletes a live session, a membership of one, or any lease row (tokens never reset);
//! a run that panics stops no later run, a run that waits for a lock ends by the query timeout
//! and holds up no live session's keep-alive meanwhile, two runs never overlap, and the keep-alive
//! that started a panicking run still returns its reply.
//!
//! Each test works in a private PostgreSQL schema / MySQL database (dropped at the end): every
//! backend on the shared servers purges expired sessions in the background, which would take the
//! rows these tests count. URLs: `SIMBA_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `SIMBA_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`); start the servers with `scripts/services up`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::{
    Dialect, Driver, ListBounds, RawAcquire, RawHolder, RawKeepAlive, RawListing, SqlBackend, SqlOptions, PURGE_BATCH,
};
use crate::backend::{Acquire, CheckItem, KeepAlive, LeaseBackend, Notification, Topic};
use crate::error::Result;
use crate::types::{Name, SessionId};

/// How a purge run through the seam ended.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Purged(usize),
    Failed(String),
    Panicked,
}

/// What the seam saw of the purge runs.
#[derive(Debug, Default)]
struct Runs {
    started: AtomicUsize,
    running: AtomicUsize,
    most_at_once: AtomicUsize,
    panic_next: AtomicBool,
}

/// The real driver, with the purge runs counted (and the next one made to panic on demand).
struct Seam {
    real: Box<dyn Driver>,
    runs: Arc<Runs>,
    ended: Sender<Outcome>,
}

/// Sends how a run ended when the run's frame goes, a panic included.
struct EndOfRun<'a> {
    seam: &'a Seam,
    outcome: Option<Outcome>,
}

impl Drop for EndOfRun<'_> {
    fn drop(&mut self) {
        self.seam.runs.running.fetch_sub(1, Ordering::SeqCst);
        let _ = self.seam.ended.send(self.outcome.take().unwrap_or(Outcome::Panicked));
    }
}

impl Driver for Seam {
    fn init_schema(&self) -> Result<()> {
        self.real.init_schema()
    }
    fn open_session(&self, id: &SessionId, lease_ms: i64, metadata: &str) -> Result<()> {
        self.real.open_session(id, lease_ms, metadata)
    }
    fn keep_alive(&self, id: &SessionId, lease_ms: i64) -> Result<RawKeepAlive> {
        self.real.keep_alive(id, lease_ms)
    }
    fn close_session(&self, id: &SessionId) -> Result<()> {
        self.real.close_session(id)
    }
    fn acquire(&self, id: &SessionId, name: &Name) -> Result<RawAcquire> {
        self.real.acquire(id, name)
    }
    fn release(&self, id: &SessionId, name: &Name, token: i64) -> Result<()> {
        self.real.release(id, name, token)
    }
    fn holder(&self, name: &Name) -> Result<Option<RawHolder>> {
        self.real.holder(name)
    }
    fn join(&self, id: &SessionId, group: &Name) -> Result<bool> {
        self.real.join(id, group)
    }
    fn leave(&self, id: &SessionId, group: &Name) -> Result<()> {
        self.real.leave(id, group)
    }
    fn members(&self, group: &Name) -> Result<Vec<(String, String)>> {
        self.real.members(group)
    }
    fn purge(&self, limit: usize) -> Result<usize> {
        assert_eq!(limit, PURGE_BATCH, "a run asks for at most {PURGE_BATCH} sessions");
        self.runs.started.fetch_add(1, Ordering::SeqCst);
        let now = self.runs.running.fetch_add(1, Ordering::SeqCst) + 1;
        self.runs.most_at_once.fetch_max(now, Ordering::SeqCst);
        let mut end = EndOfRun { seam: self, outcome: None };
        assert!(!self.runs.panic_next.swap(false, Ordering::SeqCst), "a purge run panics (injected by the test)");
        let r = self.real.purge(limit);
        end.outcome = Some(match &r {
            Ok(n) => Outcome::Purged(*n),
            Err(e) => Outcome::Failed(crate::error::display_chain(e)),
        });
        r
    }
    fn list(&self, bounds: &ListBounds) -> Result<RawListing> {
        self.real.list(bounds)
    }
    fn now_ms(&self) -> Result<i64> {
        self.real.now_ms()
    }
    fn schema_tables(&self) -> Result<i64> {
        self.real.schema_tables()
    }
    fn semaphore_limit(&self, name: &Name, permits: Option<i64>) -> Result<Option<i64>> {
        self.real.semaphore_limit(name, permits)
    }
    fn semaphore_table(&self) -> Result<bool> {
        self.real.semaphore_table()
    }
    fn missing_routine(&self) -> Result<Option<&'static str>> {
        self.real.missing_routine()
    }
    fn server_version(&self) -> Result<String> {
        self.real.server_version()
    }
    fn connection_ids(&self) -> Vec<u64> {
        self.real.connection_ids()
    }
    fn push_release(&self) -> bool {
        self.real.push_release()
    }
    fn push_membership(&self) -> bool {
        self.real.push_membership()
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        self.real.watch(topic, notify)
    }
    fn notification_connection_id(&self) -> Option<u64> {
        self.real.notification_connection_id()
    }
    fn extra_checks(&self) -> Vec<CheckItem> {
        self.real.extra_checks()
    }
    fn call_bound(&self) -> Option<Duration> {
        self.real.call_bound()
    }
    fn release_until(&self, id: &SessionId, name: &Name, token: i64, deadline: Instant) -> Result<()> {
        self.real.release_until(id, name, token, deadline)
    }
}

/// A raw connection to the test's namespace, for what the backend must not be trusted to report.
enum Raw {
    #[cfg(feature = "postgres")]
    Pg(Box<::postgres::Client>),
    #[cfg(feature = "mysql")]
    My(::mysql::Conn),
}

impl Raw {
    fn connect(dialect: Dialect, url: &str) -> Raw {
        match dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => Raw::Pg(Box::new(::postgres::Client::connect(url, ::postgres::NoTls).unwrap())),
            #[cfg(feature = "mysql")]
            Dialect::Mysql => Raw::My(::mysql::Conn::new(::mysql::Opts::from_url(url).unwrap()).unwrap()),
            #[allow(unreachable_patterns)]
            other => panic!("{other} is not compiled in"),
        }
    }

    fn exec(&mut self, sql: &str) {
        match self {
            #[cfg(feature = "postgres")]
            Raw::Pg(c) => c.batch_execute(sql).unwrap(),
            #[cfg(feature = "mysql")]
            Raw::My(c) => ::mysql::prelude::Queryable::query_drop(c, sql).unwrap(),
        }
    }

    /// The single integer `sql` returns (NULL: -1).
    fn int(&mut self, sql: &str) -> i64 {
        match self {
            #[cfg(feature = "postgres")]
            Raw::Pg(c) => c.query_one(sql, &[]).unwrap().get::<_, Option<i64>>(0).unwrap_or(-1),
            #[cfg(feature = "mysql")]
            Raw::My(c) => {
                let v: Option<Option<i64>> = ::mysql::prelude::Queryable::query_first(c, sql).unwrap();
                v.flatten().unwrap_or(-1)
            }
        }
    }
}

/// A private namespace of the shared server (a PostgreSQL schema or a MySQL database, dropped
/// with it): every backend on the shared servers purges expired sessions in the background, and
/// other tests' sessions are live there.
pub(super) struct Namespace {
    dialect: Dialect,
    /// The URL of the namespace (the shared server's, with the schema or database set).
    pub(super) url: String,
    admin: Raw,
    name: String,
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let drop = match self.dialect {
            Dialect::Postgres => format!("drop schema if exists {} cascade", self.name),
            Dialect::Mysql => format!("DROP DATABASE IF EXISTS {}", self.name),
        };
        self.admin.exec(&drop);
    }
}

impl Namespace {
    /// A new namespace named `<prefix>_<random>` (no tables yet).
    pub(super) fn create(dialect: Dialect, prefix: &str) -> Namespace {
        let base = base_url(dialect);
        let name = format!("{prefix}_{:012x}", rand::random::<u64>() >> 16);
        let mut admin = Raw::connect(dialect, &base);
        let url = match dialect {
            Dialect::Postgres => {
                admin.exec(&format!("create schema {name}"));
                let sep = if base.contains('?') { '&' } else { '?' };
                format!("{base}{sep}options=-c%20search_path%3D{name}")
            }
            Dialect::Mysql => {
                admin.exec(&format!("CREATE DATABASE {name}"));
                let mut u = url::Url::parse(&base).unwrap();
                u.set_path(&format!("/{name}"));
                u.to_string()
            }
        };
        Namespace { dialect, url, admin, name }
    }
}

/// A backend through the seam in a private namespace of the shared server, its schema created.
struct Fixture {
    backend: SqlBackend,
    runs: Arc<Runs>,
    ended: Receiver<Outcome>,
    raw: Raw,
    dialect: Dialect,
    url: String,
    /// Dropped last: the namespace goes after the connections into it.
    _namespace: Namespace,
}

fn base_url(dialect: Dialect) -> String {
    let (var, default) = match dialect {
        Dialect::Postgres => ("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"),
        Dialect::Mysql => ("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
    };
    let url = std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string());
    let addr = url.split("://").nth(1).unwrap_or_default().split('@').next_back().unwrap_or_default();
    let addr = addr.split(['/', '?']).next().unwrap_or_default();
    if std::net::TcpStream::connect(addr).is_err() {
        panic!("the {dialect} test server at {addr} is not reachable: run scripts/services up");
    }
    url
}

impl Fixture {
    fn new(dialect: Dialect, options: SqlOptions) -> Fixture {
        let namespace = Namespace::create(dialect, "simba_purge");
        let url = namespace.url.clone();
        let real = SqlBackend::from_url(&url, options.clone()).unwrap();
        let real = Arc::try_unwrap(real.inner).ok().expect("a fresh backend has no clones").driver;
        let runs = Arc::new(Runs::default());
        let (tx, ended) = unbounded();
        let seam = Seam { real, runs: runs.clone(), ended: tx };
        let backend = SqlBackend::with_driver(dialect, &url, options, Box::new(seam));
        let raw = Raw::connect(dialect, &url);
        let fx = Fixture { backend, runs, ended, raw, dialect, url, _namespace: namespace };
        fx.backend.init_schema().unwrap();
        fx
    }

    fn started(&self) -> usize {
        self.runs.started.load(Ordering::SeqCst)
    }

    /// How the next run ended (within `within`).
    fn next_end(&self, within: Duration) -> Outcome {
        self.ended.recv_timeout(within).unwrap_or_else(|_| panic!("no purge run ended within {within:?}"))
    }

    /// Makes the next call due: the last run started one purge interval ago.
    fn interval_passed(&self) {
        let interval = self.backend.inner.options.purge_interval;
        *self.backend.inner.purge_last.lock() = Some(Instant::now().checked_sub(interval).unwrap());
    }

    /// The instant the last run started (set when the call that started it decided to).
    fn last_start(&self) -> Option<Instant> {
        *self.backend.inner.purge_last.lock()
    }

    fn purging(&self) -> bool {
        self.backend.inner.purging.load(Ordering::SeqCst)
    }

    /// Inserts sessions (metadata `tag`) that expired long ago, the i-th one `ages[i]` ms before
    /// an hour ago (so distinct ages give distinct expiries); returns their ids.
    fn insert_expired(&mut self, tag: &str, ages: &[i64]) -> Vec<SessionId> {
        let ids: Vec<SessionId> = ages.iter().map(|_| SessionId::random()).collect();
        // One "now" for every statement: the expiries' order is the ages' order.
        let now = self.backend.database_now_ms().unwrap();
        for chunk in ids.iter().zip(ages).collect::<Vec<_>>().chunks(500) {
            let rows: Vec<String> =
                chunk.iter().map(|(id, age)| format!("('{id}', {now} - 3600000 - {age}, '{tag}')")).collect();
            self.raw.exec(&format!(
                "insert into simba_session (session_id, expires_at, metadata) values {}",
                rows.join(", ")
            ));
        }
        ids
    }

    fn sessions_tagged(&mut self, tag: &str) -> i64 {
        self.raw.int(&format!("select count(*) from simba_session where metadata = '{tag}'"))
    }

    fn session_exists(&mut self, id: &SessionId) -> bool {
        self.raw.int(&format!("select count(*) from simba_session where session_id = '{id}'")) == 1
    }

    fn token_of(&mut self, lease: &str) -> i64 {
        self.raw.int(&format!("select max(token) from simba_lease where name = '{lease}'"))
    }

    /// Statements waiting for a row lock now on the backend's pool's connections (PostgreSQL
    /// `pg_stat_activity`) or in the test's database (MySQL/MariaDB `information_schema`).
    fn lock_waits(&mut self) -> i64 {
        match self.dialect {
            Dialect::Postgres => {
                let ids: Vec<String> = self.backend.connection_ids().iter().map(u64::to_string).collect();
                if ids.is_empty() {
                    return 0;
                }
                let ids = ids.join(", ");
                self.raw.int(&format!(
                    "select count(*) from pg_stat_activity where wait_event_type = 'Lock' and pid in ({ids})"
                ))
            }
            Dialect::Mysql => self.raw.int(
                "select count(*) from information_schema.innodb_trx t \
                 join information_schema.processlist p on p.id = t.trx_mysql_thread_id \
                 where t.trx_state = 'LOCK WAIT' and p.db = database()",
            ),
        }
    }

    fn members_of(&mut self, id: &SessionId) -> i64 {
        self.raw.int(&format!("select count(*) from simba_member where session_id = '{id}'"))
    }
}

fn options(query_timeout: Duration, purge_interval: Duration) -> SqlOptions {
    SqlOptions::builder().query_timeout(query_timeout).purge_interval(purge_interval).build().unwrap()
}

const LONG: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
/// How long a test waits for a run that must end (the runs' own bound is the query timeout).
const PATIENCE: Duration = Duration::from_secs(20);

fn alive(k: KeepAlive) -> KeepAlive {
    assert!(matches!(k, KeepAlive::Alive { .. }), "expected Alive, got {k:?}");
    k
}

fn token(a: Acquire) -> u64 {
    match a {
        Acquire::Acquired { token, .. } => token.get(),
        Acquire::Busy => panic!("expected Acquired, got Busy"),
    }
}

/// A run starts after `open_session` and after `keep_alive`, and never twice in one purge
/// interval: the calls in between start none (decided in the call itself, so checked right after
/// it returns), and the expired sessions inserted meanwhile stay until the next run.
fn once_per_interval_after_open_and_keep_alive(dialect: Dialect) {
    let mut fx = Fixture::new(dialect, options(Duration::from_secs(5), HOUR));
    fx.insert_expired("first", &[1, 2, 3]);
    let s = fx.backend.open_session(LONG, "live").unwrap().id;
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(3), "the run after open_session");
    assert_eq!((fx.started(), fx.sessions_tagged("first")), (1, 0));
    let first = fx.last_start().expect("the open started a run");

    fx.insert_expired("second", &[1, 2, 3]);
    for _ in 0..5 {
        alive(fx.backend.keep_alive(&s, LONG).unwrap());
        let other = fx.backend.open_session(LONG, "live").unwrap().id;
        fx.backend.close_session(&other).unwrap();
        assert_eq!(fx.last_start(), Some(first), "no call within the interval starts a run");
        assert!(!fx.purging());
    }
    assert_eq!((fx.started(), fx.sessions_tagged("second")), (1, 3), "nothing purged within the interval");

    fx.interval_passed();
    alive(fx.backend.keep_alive(&s, LONG).unwrap());
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(3), "the run after keep_alive");
    assert_eq!((fx.started(), fx.sessions_tagged("second")), (2, 0));
    assert!(fx.session_exists(&s), "the live session stays");
    fx.backend.close_session(&s).unwrap();
}

/// One automatic run deletes [`PURGE_BATCH`] sessions of 1,500 expired ones, the oldest (inserted
/// in shuffled order with distinct expiries); the next run the other 500. No live session, no
/// membership of one and no lease row goes; tokens continue after the purge.
fn one_run_takes_the_oldest_batch(dialect: Dialect) {
    let mut fx = Fixture::new(dialect, options(Duration::from_secs(10), HOUR));
    let s = fx.backend.open_session(LONG, "live").unwrap().id;
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(0));
    let prefix = format!("purge-{:08x}", rand::random::<u32>());
    let (mine, group) = (Name::new(format!("{prefix}-mine")).unwrap(), Name::new(format!("{prefix}-g")).unwrap());
    assert_eq!(token(fx.backend.acquire(&s, &mine).unwrap()), 1);
    fx.backend.join(&s, &group).unwrap();

    // Ages 0..1500 in a shuffled order: the insertion order says nothing about the expiry order.
    let mut ages: Vec<i64> = (0..1500).collect();
    for i in (1..ages.len()).rev() {
        ages.swap(i, rand::random_range(0..=i));
    }
    let ids = fx.insert_expired("fodder", &ages);
    // The dead sessions' leases and memberships: the oldest and the youngest few.
    let by_age = |a: i64| ids[ages.iter().position(|&x| x == a).unwrap()].clone();
    let dead: Vec<(SessionId, String)> =
        [1499, 1498, 0, 1].iter().map(|&a| (by_age(a), format!("{prefix}-dead-{a}"))).collect();
    for (id, lease) in &dead {
        fx.raw.exec(&format!("insert into simba_lease (name, session_id, token) values ('{lease}', '{id}', 7)"));
        fx.raw.exec(&format!("insert into simba_member (group_name, session_id) values ('{group}', '{id}')"));
    }

    fx.interval_passed();
    alive(fx.backend.keep_alive(&s, LONG).unwrap());
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(PURGE_BATCH), "one run takes {PURGE_BATCH}");
    assert_eq!(fx.sessions_tagged("fodder"), 500);
    for (age, id) in ages.iter().zip(&ids) {
        let oldest = *age >= 500; // the 1,000 largest ages expired first
        assert_eq!(fx.session_exists(id), !oldest, "session aged {age}: the run takes the oldest");
    }
    for (id, lease) in &dead {
        assert_eq!(fx.token_of(lease), 7, "lease rows of purged sessions stay, tokens untouched");
        let purged = !fx.session_exists(id);
        assert_eq!(fx.members_of(id), if purged { 0 } else { 1 }, "memberships go with their session");
    }
    assert!(fx.session_exists(&s), "the live session stays");
    assert_eq!((fx.token_of(mine.as_str()), fx.members_of(&s)), (1, 1), "the live session's lease and membership");

    fx.interval_passed();
    alive(fx.backend.keep_alive(&s, LONG).unwrap());
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(500), "the next run takes the rest");
    assert_eq!(fx.sessions_tagged("fodder"), 0);
    for (_, lease) in &dead {
        let lease = Name::new(lease).unwrap();
        assert_eq!(token(fx.backend.acquire(&s, &lease).unwrap()), 8, "tokens continue after the purge");
    }
    match fx.backend.keep_alive(&s, LONG).unwrap() {
        KeepAlive::Alive { owned, groups, .. } => {
            assert_eq!(owned.len(), 5);
            assert_eq!(groups, vec![group]);
        }
        other => panic!("expected Alive, got {other:?}"),
    }
    fx.backend.close_session(&s).unwrap();
}

/// A run that panics: the keep-alive that started it still returns its reply, and a later
/// keep-alive, an interval later, starts the next run (which purges what the panicked one left).
fn a_panicking_run_stops_no_later_run(dialect: Dialect) {
    let mut fx = Fixture::new(dialect, options(Duration::from_secs(5), HOUR));
    let s = fx.backend.open_session(LONG, "live").unwrap().id;
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(0));
    fx.insert_expired("left", &[1, 2]);

    fx.runs.panic_next.store(true, Ordering::SeqCst);
    fx.interval_passed();
    alive(fx.backend.keep_alive(&s, LONG).expect("the keep-alive that started a panicking run still replies"));
    assert_eq!(fx.next_end(PATIENCE), Outcome::Panicked);
    assert_eq!(fx.sessions_tagged("left"), 2);

    // The panicked run's thread is unwinding now; the next due call starts a run once it is gone.
    let deadline = Instant::now() + PATIENCE;
    while fx.started() < 3 {
        assert!(
            Instant::now() < deadline,
            "no purge ran again in {PATIENCE:?} of due keep-alives after a run panicked (purging stays {})",
            fx.purging()
        );
        fx.interval_passed();
        alive(fx.backend.keep_alive(&s, LONG).unwrap());
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(2), "the run after the panicked one purges");
    assert_eq!(fx.sessions_tagged("left"), 0);
    assert_eq!(fx.runs.most_at_once.load(Ordering::SeqCst), 1);
    fx.backend.close_session(&s).unwrap();
}

/// A raw transaction holding `session`'s membership rows `FOR UPDATE` (in a thread) until
/// released: the purge's `DELETE` of them waits.
struct HeldMembers {
    release: Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl HeldMembers {
    fn lock(dialect: Dialect, url: &str, session: &SessionId) -> HeldMembers {
        let (url, session) = (url.to_string(), session.to_string());
        let (locked_tx, locked) = unbounded();
        let (release, release_rx) = unbounded::<()>();
        let thread = std::thread::spawn(move || {
            let mut raw = Raw::connect(dialect, &url);
            if dialect == Dialect::Mysql {
                // No gap locks: the membership row is all this transaction holds.
                raw.exec("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED");
            }
            raw.exec("begin");
            let n = raw.int(&match dialect {
                // PostgreSQL takes no row lock under an aggregate; MySQL counts the locked rows.
                Dialect::Postgres => format!(
                    "select count(*) from (select 1 from simba_member where session_id = '{session}' for update) l"
                ),
                Dialect::Mysql => {
                    format!("select count(*) from simba_member where session_id = '{session}' for update")
                }
            });
            assert_eq!(n, 1, "the membership row is locked");
            locked_tx.send(()).unwrap();
            let _ = release_rx.recv();
            raw.exec("rollback");
        });
        locked.recv_timeout(PATIENCE).expect("the raw connection locked the membership row");
        HeldMembers { release, thread }
    }

    fn release(self) {
        let _ = self.release.send(());
        self.thread.join().unwrap();
    }
}

/// A run that hangs on a lock its `DELETE` needs (a raw transaction holds an expired session's
/// membership row) ends by the query timeout, with an error, while the lock is still held; the
/// live session's keep-alives meanwhile return without waiting for it (the run is still waiting
/// when each returns) and start no second run although due; once the lock is gone the next due
/// call purges the session.
fn a_hung_run_is_bounded_and_holds_up_no_keep_alive(dialect: Dialect) {
    let mut fx = Fixture::new(dialect, options(Duration::from_secs(5), HOUR));
    let s = fx.backend.open_session(LONG, "live").unwrap().id;
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(0));
    let stuck = fx.insert_expired("stuck", &[1]).remove(0);
    let group = format!("purge-{:08x}", rand::random::<u32>());
    fx.raw.exec(&format!("insert into simba_member (group_name, session_id) values ('{group}', '{stuck}')"));
    let held = HeldMembers::lock(dialect, &fx.url, &stuck);

    fx.interval_passed();
    alive(fx.backend.keep_alive(&s, LONG).unwrap());
    // The server shows the run waiting for the held row (a lock wait on one of the pool's
    // connections): its first statement, which locks the batch, is behind it.
    let deadline = Instant::now() + PATIENCE;
    while fx.lock_waits() == 0 {
        assert!(Instant::now() < deadline, "the purge run never waited for the held membership row");
        assert!(fx.ended.is_empty(), "the run ended before it waited for the held row: {:?}", fx.ended.try_recv());
        // MariaDB refreshes its information_schema InnoDB tables only after 100 ms without a read.
        std::thread::sleep(Duration::from_millis(150));
    }
    for i in 0..5 {
        fx.interval_passed();
        alive(fx.backend.keep_alive(&s, LONG).unwrap());
        assert!(
            fx.ended.is_empty() && fx.runs.running.load(Ordering::SeqCst) == 1,
            "keep-alive {i} returned only after the waiting purge run ended: it waited for the purge"
        );
    }
    assert_eq!(fx.started(), 2, "a due keep-alive started a second run while one was running");
    match fx.next_end(PATIENCE) {
        Outcome::Failed(e) => log::info!("{dialect}: the hung run ended with: {e}"),
        other => panic!("the run waiting for the held lock ended with {other:?}"),
    }
    assert!(fx.session_exists(&stuck), "the held session is still there");
    held.release();

    fx.interval_passed();
    alive(fx.backend.keep_alive(&s, LONG).unwrap());
    assert_eq!(fx.next_end(PATIENCE), Outcome::Purged(1), "the next run purges the released session");
    assert!(!fx.session_exists(&stuck));
    assert_eq!((fx.started(), fx.runs.most_at_once.load(Ordering::SeqCst)), (3, 1));
    fx.backend.close_session(&s).unwrap();
}

macro_rules! per_dialect {
    ($module:ident, $feature:literal, $dialect:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            #[test]
            #[serial_test::serial($module)]
            fn auto_purge_once_per_interval_after_open_and_keep_alive() {
                once_per_interval_after_open_and_keep_alive($dialect);
            }

            #[test]
            #[serial_test::serial($module)]
            fn auto_purge_takes_the_oldest_batch() {
                one_run_takes_the_oldest_batch($dialect);
            }

            #[test]
            #[serial_test::serial($module)]
            fn auto_purge_survives_a_panicking_run() {
                a_panicking_run_stops_no_later_run($dialect);
            }

            #[test]
            #[serial_test::serial($module)]
            fn auto_purge_bounds_a_hung_run() {
                a_hung_run_is_bounded_and_holds_up_no_keep_alive($dialect);
            }
        }
    };
}

per_dialect!(postgres, "postgres", Dialect::Postgres);
per_dialect!(mysql, "mysql", Dialect::Mysql);
