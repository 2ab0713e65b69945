//! Real faults that make backend calls hang: a paused PostgreSQL server process, a paused private
//! MariaDB server and a TCP proxy that
//! stalls every connection. In each case loss detection must be on time: `token()` fails at the
//! local deadline and the `LeaseLost` and `Expired` events arrive by then (plus scheduling slack),
//! whatever the driver does. User calls return by the query timeout too, on the caller's own thread
//! because the backend's own timeouts end the call (PostgreSQL, MySQL/MariaDB, Redis standalone and
//! Redis Cluster all declare `call_bound`). Redis Cluster runs on a
//! private cluster whose every node is frozen (`SIGSTOP`: connections are accepted, nothing
//! answers), since a proxy in front of the shared cluster would be bypassed by the node addresses
//! the cluster announces. etcd runs both ways: a private single member paused (`SIGSTOP`,
//! tests/support/etcd.rs) and a proxy in front of the shared member that stalls; its calls are
//! bounded on its own runtime, and once the backend is dropped no thread of that runtime is left.

#![cfg(any(feature = "postgres", feature = "mysql", feature = "redis", feature = "etcd"))]

mod support;

#[cfg(feature = "redis")]
#[path = "redis_private_cluster.rs"]
mod private_cluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backend::LeaseBackend;
use simba::{ErrorKind, Name, Session, SessionOptions};
use support::proxy::Proxy;

use support::forward::{Forward, Hook, Op};
#[cfg(any(feature = "postgres", feature = "mysql"))]
use support::server::wait_stopped;

const SLACK: Duration = Duration::from_millis(500);

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .query_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// Opens the backend's connection before anything is timed: on a loaded machine a first connect
/// may take longer than these tests' 500 ms query timeout (what failed `sql_hygiene` in CI once),
/// and no set-up call is what they test.
fn warm(backend: &dyn LeaseBackend) {
    let name = Name::new(support::unique("warm")).unwrap();
    let mut last = None;
    for _ in 0..20 {
        match backend.holder(&name) {
            Ok(_) => return,
            Err(e) => last = Some(e),
        }
    }
    panic!("the backend never answered a set-up call in 20 tries: {last:?} (run `scripts/services up`)");
}

/// Holds a lease, makes the backend hang via `hang`, and checks loss detection is on time.
fn loss_is_on_time(backend: Arc<dyn LeaseBackend>, hang: impl FnOnce()) {
    warm(&*backend);
    let session = Session::open(backend, options()).unwrap();
    let events = session.events();
    let name = Name::new(support::unique("hung")).unwrap();
    let lease = session.lock(&name).unwrap();
    let token = lease.token().unwrap();
    std::thread::sleep(Duration::from_millis(400));
    assert!(lease.token().is_ok());
    hang();
    // No renewal sent after this point can succeed, so the deadline is at most one lease away.
    let latest_deadline = Instant::now() + Duration::from_secs(1);
    support::assert_lost_by(&session, &events, &lease, (name, token), latest_deadline + SLACK);
    let start = Instant::now();
    drop(lease);
    drop(session);
    assert!(start.elapsed() < Duration::from_millis(500), "dropping blocked on the hung backend");
}

#[cfg(feature = "postgres")]
mod postgres {
    use super::*;
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use simba::backends::sql::{SqlBackend, SqlOptions};

    fn url() -> String {
        support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
    }

    #[test]
    #[serial_test::serial(postgres)]
    fn paused_server_does_not_delay_loss_detection() {
        let server = PausedPostgres::start(5491);
        loss_is_on_time(postgres_backend(&server), || server.pause());
    }

    /// A paused server process (one connection's) costs one call, not the session: the call ends
    /// at its deadline, its connection is dropped, and the next call opens a new one (the server
    /// forks a new process for it).
    #[test]
    #[serial_test::serial(postgres)]
    fn paused_connection_process_is_replaced() {
        let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).pool_size(1).build().unwrap();
        let backend = SqlBackend::postgres(&url(), opts).unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
        backend.init_schema().unwrap();
        let name = Name::new(support::unique("replaced")).unwrap();
        assert!(backend.holder(&name).unwrap().is_none());
        let pids = backend.connection_ids();
        assert_eq!(pids.len(), 1, "one pooled connection: {pids:?}");
        struct Resume(Pid);
        impl Drop for Resume {
            fn drop(&mut self) {
                let _ = kill(self.0, Signal::SIGCONT);
            }
        }
        let pid = Pid::from_raw(pids[0] as i32);
        let _resume = Resume(pid);
        kill(pid, Signal::SIGSTOP).unwrap();
        wait_stopped(pid);
        let e = backend.holder(&name).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Timeout, "{e}");
        assert!(backend.holder(&name).unwrap().is_none(), "a new connection answers");
        let now = backend.connection_ids();
        assert!(now.len() == 1 && now[0] != pids[0], "the paused connection was replaced: {pids:?} → {now:?}");
    }

    #[test]
    #[serial_test::serial(postgres)]
    fn stalled_connection_does_not_delay_loss_detection() {
        let upstream = support::env_or("SIMBA_TEST_POSTGRES_ADDR", "127.0.0.1:5432");
        support::require_tcp("PostgreSQL", &upstream);
        let proxy = Proxy::start(&upstream);
        let url = format!("postgres://postgres@{}/test", proxy.addr());
        let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
        let backend = Arc::new(SqlBackend::postgres(&url, opts).unwrap());
        backend.init_schema().unwrap();
        loss_is_on_time(backend, || proxy.stall());
    }
}

#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_stalled_connection_does_not_delay_loss_detection() {
    use simba::backends::sql::{SqlBackend, SqlOptions};
    let upstream = support::env_or("SIMBA_TEST_MYSQL_ADDR", "127.0.0.1:3306");
    support::require_tcp("MariaDB/MySQL", &upstream);
    let proxy = Proxy::start(&upstream);
    let url = format!("mysql://root@{}/test", proxy.addr());
    let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let backend = Arc::new(SqlBackend::mysql(&url, opts).unwrap());
    backend.init_schema().unwrap();
    loss_is_on_time(backend, || proxy.stall());
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn redis_stalled_connection_does_not_delay_loss_detection() {
    use simba::backends::redis::{RedisBackend, RedisOptions};
    let upstream = support::env_or("SIMBA_TEST_REDIS_ADDR", "127.0.0.1:6379");
    support::require_tcp("Redis", &upstream);
    let proxy = Proxy::start(&upstream);
    let url = format!("redis://{}", proxy.addr());
    let opts = RedisOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let backend = Arc::new(RedisBackend::connect(&url, opts).unwrap());
    loss_is_on_time(backend, || proxy.stall());
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn redis_cluster_frozen_nodes_do_not_delay_loss_detection() {
    use simba::backends::redis::{RedisBackend, RedisOptions};
    // Every node is resumed and killed when `cluster` is dropped, also when the test fails.
    let cluster = private_cluster::PrivateCluster::start(3, 0);
    let opts = RedisOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let backend = Arc::new(RedisBackend::connect(&cluster.url(), opts).unwrap());
    loss_is_on_time(backend, || cluster.freeze());
}

/// How long a user call took against the hung backend, and whether its SPI call ran on the
/// caller's thread.
#[allow(dead_code)]
fn user_calls_return_on_time(backend: Arc<OnThread>, hang: impl FnOnce(), expect_inline: bool) {
    warm(&*backend);
    let session = Session::open(backend.clone(), options()).unwrap();
    let qt = session.options().query_timeout();
    // `lock` retries transient failures (a slow first connection on a loaded machine).
    let lease = session.lock(support::unique("hung")).unwrap();
    let me = std::thread::current().id();
    assert_eq!(backend.hook.ran_on_caller(Op::Acquire, me), expect_inline);
    hang();
    backend.hook.forget();

    let start = Instant::now();
    let e = session.try_lock(support::unique("hung")).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable), "{e}");
    assert!(took < qt + SLACK, "try_lock took {took:?} against a hung backend");
    assert_eq!(backend.hook.ran_on_caller(Op::Acquire, me), expect_inline, "where the acquire ran");

    let start = Instant::now();
    let e = lease.release().unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable), "{e}");
    assert!(took < qt + SLACK, "release took {took:?} against a hung backend");
    assert_eq!(backend.hook.ran_on_caller(Op::Release, me), expect_inline, "where the release ran");

    let start = Instant::now();
    let e = session.leader(support::unique("hung")).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable), "{e}");
    assert!(took < qt + SLACK, "leader (holder) took {took:?} against a hung backend");
    assert_eq!(backend.hook.ran_on_caller(Op::Holder, me), expect_inline, "where the holder call ran");

    let start = Instant::now();
    let e = session.members(support::unique("g")).unwrap_err();
    let took = start.elapsed();
    assert!(matches!(e.kind(), ErrorKind::Timeout | ErrorKind::Unavailable), "{e}");
    assert!(took < qt + SLACK, "members took {took:?} against a hung backend");
    assert_eq!(backend.hook.ran_on_caller(Op::Members, me), expect_inline, "where the members call ran");

    let start = Instant::now();
    drop(session);
    assert!(start.elapsed() < Duration::from_millis(500), "dropping blocked on the hung backend");
}

/// Records the threads user calls (acquire, release, holder, members) run on.
#[derive(Debug, Default)]
struct CallThreads(parking_lot::Mutex<Vec<(Op, std::thread::ThreadId)>>);

impl Hook for CallThreads {
    fn before(&self, op: Op) {
        if matches!(op, Op::Acquire | Op::Release | Op::Holder | Op::Members) {
            self.0.lock().push((op, std::thread::current().id()));
        }
    }
}

#[allow(dead_code)]
impl CallThreads {
    fn forget(&self) {
        self.0.lock().clear();
    }
    /// True when every recorded `op` ran on `caller`, false when none did (panics when mixed or
    /// none was recorded).
    fn ran_on_caller(&self, op: Op, caller: std::thread::ThreadId) -> bool {
        let t = self.0.lock();
        let threads: Vec<_> = t.iter().filter(|(o, _)| *o == op).map(|(_, t)| *t).collect();
        assert!(!threads.is_empty(), "no {op:?} call recorded");
        let on = threads.iter().filter(|x| **x == caller).count();
        assert!(on == 0 || on == threads.len(), "{op:?} calls ran on mixed threads");
        on == threads.len()
    }
}

/// A real backend (its call bound, capabilities and watches included) whose user calls' threads
/// are recorded.
type OnThread = Forward<CallThreads>;

#[allow(dead_code)]
fn on_thread(backend: Arc<dyn LeaseBackend>) -> Arc<OnThread> {
    Forward::inheriting(backend, CallThreads::default())
}

/// A private MariaDB server that a test pauses (`SIGSTOP`: connections are accepted, nothing
/// answers), resumed on drop (before the server itself is killed and removed), also when the test
/// fails.
#[cfg(feature = "mysql")]
struct PausedMariadb {
    pid: nix::unistd::Pid,
    // Dropped after `Drop::drop` resumed it.
    server: support::sql::PrivateMariadb,
}

#[cfg(feature = "mysql")]
impl PausedMariadb {
    fn start(port: u16) -> PausedMariadb {
        let server = support::sql::PrivateMariadb::start(port);
        let pid_file = server.proc.dir.join("pid");
        let deadline = Instant::now() + Duration::from_secs(30);
        let pid = loop {
            if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|s| s.trim().parse::<i32>().ok()) {
                break pid;
            }
            assert!(Instant::now() < deadline, "{} never appeared", pid_file.display());
            std::thread::sleep(Duration::from_millis(20));
        };
        PausedMariadb { pid: nix::unistd::Pid::from_raw(pid), server }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    /// Stops the server; returns once every one of its threads is stopped.
    fn pause(&self) {
        nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        wait_stopped(self.pid);
    }
}

#[cfg(feature = "mysql")]
impl Drop for PausedMariadb {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGCONT);
    }
}

/// A MySQL backend (query timeout 500 ms) on `server`, its schema created first with the default
/// query timeout.
#[cfg(feature = "mysql")]
fn mysql_backend(server: &PausedMariadb) -> Arc<simba::backends::sql::SqlBackend> {
    use simba::backends::sql::{SqlBackend, SqlOptions};
    let setup = SqlBackend::mysql(&server.url(), SqlOptions::default()).unwrap();
    setup.init_schema().unwrap();
    drop(setup);
    let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    Arc::new(SqlBackend::mysql(&server.url(), opts).unwrap())
}

/// A private PostgreSQL cluster that a test pauses (`SIGSTOP` of the postmaster and of every
/// server process: connections are accepted by the kernel, nothing answers), resumed on drop
/// (before the cluster itself is stopped and removed), also when the test fails.
#[cfg(feature = "postgres")]
struct PausedPostgres {
    paused: parking_lot::Mutex<Vec<nix::unistd::Pid>>,
    // Dropped after `Drop::drop` resumed it.
    server: support::sql::PrivatePostgres,
}

#[cfg(feature = "postgres")]
impl PausedPostgres {
    fn start(port: u16) -> PausedPostgres {
        PausedPostgres {
            paused: parking_lot::Mutex::new(Vec::new()),
            server: support::sql::PrivatePostgres::start(port),
        }
    }

    fn url(&self) -> String {
        self.server.url()
    }

    /// Stops the postmaster first (no new server process after it), then every process it
    /// started; returns once all of them are stopped.
    fn pause(&self) {
        use nix::sys::signal::{kill, Signal};
        let pid_file = self.server.dir.join("data").join("postmaster.pid");
        let text = std::fs::read_to_string(&pid_file).unwrap();
        let postmaster: i32 = text.lines().next().and_then(|l| l.trim().parse().ok()).unwrap();
        let postmaster = nix::unistd::Pid::from_raw(postmaster);
        kill(postmaster, Signal::SIGSTOP).unwrap();
        wait_stopped(postmaster);
        let mut paused = vec![postmaster];
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else { continue };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { continue };
            // Fields after the parenthesised command name: state, ppid, ...
            let ppid = stat.rsplit_once(") ").and_then(|(_, rest)| rest.split(' ').nth(1)?.parse::<i32>().ok());
            if ppid == Some(postmaster.as_raw()) {
                let child = nix::unistd::Pid::from_raw(pid);
                if kill(child, Signal::SIGSTOP).is_ok() {
                    paused.push(child);
                }
            }
        }
        for pid in &paused[1..] {
            wait_stopped(*pid);
        }
        *self.paused.lock() = paused;
    }
}

#[cfg(feature = "postgres")]
impl Drop for PausedPostgres {
    fn drop(&mut self) {
        for pid in self.paused.lock().iter() {
            let _ = nix::sys::signal::kill(*pid, nix::sys::signal::Signal::SIGCONT);
        }
    }
}

/// A PostgreSQL backend (query timeout 500 ms) on `server`, its schema created first with the
/// default query timeout.
#[cfg(feature = "postgres")]
fn postgres_backend(server: &PausedPostgres) -> Arc<simba::backends::sql::SqlBackend> {
    use simba::backends::sql::{SqlBackend, SqlOptions};
    let setup = SqlBackend::postgres(&server.url(), SqlOptions::default()).unwrap();
    setup.init_schema().unwrap();
    drop(setup);
    let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    Arc::new(SqlBackend::postgres(&server.url(), opts).unwrap())
}

#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_paused_server_user_calls_run_inline_and_return_by_themselves() {
    // MySQL/MariaDB bounds every call by its query timeout (a watchdog shuts down the socket of a
    // statement still unanswered at the deadline), so user calls run on the caller's thread;
    // against a paused server they end by themselves within the query timeout.
    let server = PausedMariadb::start(3393);
    let backend = mysql_backend(&server);
    assert_eq!(backend.call_bound(), Some(Duration::from_millis(500)));
    user_calls_return_on_time(on_thread(backend), || server.pause(), true);
}

#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn mysql_paused_server_does_not_delay_loss_detection() {
    let server = PausedMariadb::start(3394);
    loss_is_on_time(mysql_backend(&server), || server.pause());
}

#[cfg(feature = "postgres")]
#[test]
#[serial_test::serial(postgres)]
fn postgres_paused_server_user_calls_run_inline_and_return_by_themselves() {
    // The pool's tokio-postgres connections bound every request by its call's deadline, so the
    // backend declares the query timeout as its call bound and user calls run on the caller's
    // thread; against a paused server they end by themselves within the query timeout.
    let server = PausedPostgres::start(5492);
    let backend = postgres_backend(&server);
    assert_eq!(backend.call_bound(), Some(Duration::from_millis(500)));
    user_calls_return_on_time(on_thread(backend), || server.pause(), true);
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn redis_stalled_connection_user_calls_run_inline_and_return_by_themselves() {
    // Redis standalone bounds every call by its own query timeout, so user calls run on the
    // caller's thread; against a stalled connection the driver's read timeout ends them.
    use simba::backends::redis::{RedisBackend, RedisOptions};
    let upstream = support::env_or("SIMBA_TEST_REDIS_ADDR", "127.0.0.1:6379");
    support::require_tcp("Redis", &upstream);
    let proxy = Proxy::start(&upstream);
    let url = format!("redis://{}", proxy.addr());
    let opts = RedisOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let backend = Arc::new(RedisBackend::connect(&url, opts).unwrap());
    assert_eq!(backend.call_bound(), Some(Duration::from_millis(500)));
    user_calls_return_on_time(on_thread(backend), || proxy.stall(), true);
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn redis_cluster_frozen_nodes_user_calls_run_inline_and_return_by_themselves() {
    // Redis Cluster carries one deadline through every script of an operation and gives every
    // step (slot map re-read, connect, each command, redirects) only the time left, so user calls
    // run on the caller's thread; against frozen nodes they end by themselves within the query
    // timeout: the first on a pooled connection's read timeout, the later ones while re-reading
    // the slot map and connecting afresh to frozen nodes.
    use simba::backends::redis::{RedisBackend, RedisOptions};
    // Every node is resumed and killed when `cluster` is dropped, also when the test fails.
    let cluster = private_cluster::PrivateCluster::start(3, 0);
    let opts = RedisOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
    let backend = Arc::new(RedisBackend::connect(&cluster.url(), opts).unwrap());
    assert!(backend.is_clustered());
    assert_eq!(backend.call_bound(), Some(Duration::from_millis(500)));
    user_calls_return_on_time(on_thread(backend), || cluster.freeze(), true);
}

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use simba::backends::etcd::{EtcdBackend, EtcdOptions};
    use support::etcd::EtcdCluster;

    /// A backend whose call bound (its query timeout) is the sessions' 500 ms query timeout, so
    /// that user calls run on the caller's thread.
    fn backend(url: &str) -> Arc<EtcdBackend> {
        let opts = EtcdOptions::default().query_timeout(Duration::from_millis(500));
        Arc::new(EtcdBackend::from_url(url, opts).unwrap_or_else(|e| panic!("{e} (run `scripts/services up etcd`)")))
    }

    /// Once the backends of a test are dropped, their runtimes' threads end: no call left behind
    /// on the hung server keeps a worker.
    fn no_worker_left() {
        let gone = support::eventually(Duration::from_secs(5), || support::threads_named("simba-etcd") == 0);
        assert!(gone, "{} etcd runtime threads outlived their backends", support::threads_named("simba-etcd"));
    }

    fn shared() -> String {
        let url = support::env_or("SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379/simba-test");
        let addr = url.trim_start_matches("etcd://").split('/').next().unwrap_or_default().to_string();
        support::require_tcp("etcd", &addr);
        addr
    }

    #[test]
    #[serial_test::serial(etcd)]
    fn paused_member_does_not_delay_loss_detection() {
        let mut member = EtcdCluster::start(2790, 1);
        loss_is_on_time(backend(&member.url(&[0], "simba-hung")), || member.pause(0));
        no_worker_left();
    }

    #[test]
    #[serial_test::serial(etcd)]
    fn paused_member_user_calls_run_inline_and_return_by_themselves() {
        // Every call is bounded by the query timeout (run on the caller's thread by a timer of its
        // own, or on the backend's runtime and waited for only that long): the backend declares a
        // call bound and user calls run on the caller's thread; against a paused member they end
        // within the query timeout.
        let mut member = EtcdCluster::start(2792, 1);
        let b = backend(&member.url(&[0], "simba-hung"));
        assert_eq!(b.call_bound(), Some(Duration::from_millis(500)));
        user_calls_return_on_time(on_thread(b), || member.pause(0), true);
        no_worker_left();
    }

    #[test]
    #[serial_test::serial(etcd)]
    fn stalled_connection_does_not_delay_loss_detection() {
        let proxy = Proxy::start(&shared());
        loss_is_on_time(backend(&format!("etcd://{}/simba-hung", proxy.addr())), || proxy.stall());
        no_worker_left();
    }

    #[test]
    #[serial_test::serial(etcd)]
    fn stalled_connection_user_calls_run_inline_and_return_by_themselves() {
        let proxy = Proxy::start(&shared());
        let b = backend(&format!("etcd://{}/simba-hung", proxy.addr()));
        assert_eq!(b.call_bound(), Some(Duration::from_millis(500)));
        user_calls_return_on_time(on_thread(b), || proxy.stall(), true);
        no_worker_left();
    }
}
