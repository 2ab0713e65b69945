//! Real faults that make backend calls hang: a paused PostgreSQL server process (the sync
//! `postgres` client has no read timeout), a paused private MariaDB server and a TCP proxy that
//! stalls every connection. In each case loss detection must be on time: `token()` fails at the
//! local deadline and the `LeaseLost` and `Expired` events arrive by then (plus scheduling slack),
//! whatever the driver does. User calls return by the query timeout too: on a worker the caller
//! abandons (PostgreSQL, which does not bound its calls), or on the caller's own thread because
//! the backend's own timeouts end the call (MySQL/MariaDB, Redis standalone and Redis Cluster,
//! which declare `call_bound`). Redis Cluster runs on a
//! private cluster whose every node is frozen (`SIGSTOP`: connections are accepted, nothing
//! answers), since a proxy in front of the shared cluster would be bypassed by the node addresses
//! the cluster announces.

#![cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]

mod support;

#[cfg(feature = "redis")]
#[path = "redis_private_cluster.rs"]
mod private_cluster;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::{ErrorKind, LeaseBackend, Name, Session, SessionOptions};
use support::proxy::Proxy;

use support::forward::{Forward, Hook, Op};

const SLACK: Duration = Duration::from_millis(500);

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .query_timeout(Duration::from_millis(500))
        .build()
        .unwrap()
}

/// Holds a lease, makes the backend hang via `hang`, and checks loss detection is on time.
fn loss_is_on_time(backend: Arc<dyn LeaseBackend>, hang: impl FnOnce()) {
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
    fn paused_server_process_does_not_delay_loss_detection() {
        // One pooled connection, so every call goes through the paused server process.
        let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).pool_size(1).build().unwrap();
        let backend =
            Arc::new(SqlBackend::postgres(&url(), opts).unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)")));
        backend.init_schema().unwrap();
        let probe = backend.clone();
        /// Resumes the paused server processes even when the test fails.
        struct Resume(Vec<u64>);
        impl Drop for Resume {
            fn drop(&mut self) {
                for pid in &self.0 {
                    let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGCONT);
                }
            }
        }
        let pids = probe.connection_ids();
        assert!(!pids.is_empty(), "no pooled connection to pause");
        let _resume = Resume(pids.clone());
        loss_is_on_time(backend, || {
            for pid in &pids {
                kill(Pid::from_raw(*pid as i32), Signal::SIGSTOP).unwrap();
            }
        });
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

    /// Stops the server and returns once every one of its threads is stopped: `kill` returns
    /// before a running thread has stopped, and such a thread could still answer a request sent
    /// right after it.
    fn pause(&self) {
        nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        let tasks = format!("/proc/{}/task", self.pid);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let states: Vec<String> = std::fs::read_dir(&tasks)
                .unwrap()
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
                // The state is the field after the parenthesised command name.
                .filter_map(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.chars().take(1).collect()))
                .collect();
            if !states.is_empty() && states.iter().all(|s| s == "T") {
                return;
            }
            assert!(Instant::now() < deadline, "the server's threads did not all stop: {states:?}");
            std::thread::sleep(Duration::from_millis(1));
        }
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
fn postgres_paused_server_user_calls_are_abandoned_at_the_query_timeout() {
    // The sync `postgres` client has no read timeout, so the backend declares no call bound and
    // every user call runs on a worker the caller abandons at its deadline.
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use simba::backends::sql::{SqlBackend, SqlOptions};
    let url = support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
    // The schema first, with the default query timeout (DDL may wait for other tests' locks).
    let setup =
        SqlBackend::postgres(&url, SqlOptions::default()).unwrap_or_else(|e| panic!("{e} (run `scripts/services up`)"));
    setup.init_schema().unwrap();
    drop(setup);
    let opts = SqlOptions::builder().query_timeout(Duration::from_millis(500)).pool_size(1).build().unwrap();
    let backend = Arc::new(SqlBackend::postgres(&url, opts).unwrap());
    assert_eq!(backend.call_bound(), None);
    struct Resume(Vec<u64>);
    impl Drop for Resume {
        fn drop(&mut self) {
            for pid in &self.0 {
                let _ = kill(Pid::from_raw(*pid as i32), Signal::SIGCONT);
            }
        }
    }
    let probe = backend.clone();
    let wrapped = on_thread(backend);
    let mut resume = Resume(Vec::new());
    user_calls_return_on_time(
        wrapped,
        || {
            // The pool's one connection exists now (the session opened and took a lease through it).
            let pids = probe.connection_ids();
            assert!(!pids.is_empty(), "no pooled connection to pause");
            for pid in &pids {
                kill(Pid::from_raw(*pid as i32), Signal::SIGSTOP).unwrap();
            }
            resume.0 = pids;
        },
        false,
    );
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
