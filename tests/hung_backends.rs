//! Real faults that make backend calls hang: a paused PostgreSQL server process (the sync
//! `postgres` client has no read timeout) and a TCP proxy that stalls every connection. In each
//! case loss detection must be on time: `token()` fails at the local deadline and the `LeaseLost`
//! and `Expired` events arrive by then (plus scheduling slack), whatever the driver does.

#![cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::{ErrorKind, LeaseBackend, LossReason, Name, Session, SessionEvent, SessionOptions, SessionState};
use support::proxy::Proxy;

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
    let mut got = Vec::new();
    while got.len() < 2 {
        match events.recv_deadline(latest_deadline + SLACK) {
            Ok(SessionEvent::RenewalFailed { .. }) => {}
            Ok(ev) => got.push(ev),
            Err(_) => panic!("loss not detected by the local deadline; events so far: {got:?}"),
        }
    }
    assert_eq!(got[0], SessionEvent::LeaseLost { name, token, reason: LossReason::SessionExpired });
    assert_eq!(got[1], SessionEvent::Expired);
    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
    assert_eq!(session.state(), SessionState::Expired);
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
