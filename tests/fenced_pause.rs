//! Real fault: a holder process paused with SIGSTOP past its lease.
//!
//! For every network backend compiled in, a child process (this binary, re-executed) takes a lock
//! and reads its token; the test pauses it with SIGSTOP; another session takes over with a larger
//! token and writes to a fenced PostgreSQL table; the child is resumed and tries its write with the
//! token it read before the pause: the table rejects it, and the child's `token()` fails.
//!
//! This test binary has its own `main` (harness = false) so that it can act as the child.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use simba::{LeaseBackend, Session, SessionOptions};

mod support;

const FENCE_CREATE: &str = include_str!("sql/fence-create.sql");
const FENCE_INIT: &str = include_str!("sql/fence-init.sql");
const FENCE_WRITE: &str = include_str!("sql/fence-write.sql");
const FENCE_READ: &str = include_str!("sql/fence-read.sql");

fn pg_url() -> String {
    support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
}

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .build()
        .unwrap()
}

fn backend(kind: &str) -> Arc<dyn LeaseBackend> {
    match kind {
        "postgres" => {
            use simba::backends::sql::{SqlBackend, SqlOptions};
            let b = SqlBackend::postgres(
                &pg_url(),
                SqlOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap(),
            )
            .unwrap_or_else(|e| panic!("PostgreSQL: {e} (run `scripts/services up`)"));
            b.init_schema().unwrap();
            Arc::new(b)
        }
        #[cfg(feature = "mysql")]
        "mysql" => {
            use simba::backends::sql::{SqlBackend, SqlOptions};
            let url = support::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
            let b =
                SqlBackend::mysql(&url, SqlOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap())
                    .unwrap_or_else(|e| panic!("MySQL: {e} (run `scripts/services up`)"));
            b.init_schema().unwrap();
            Arc::new(b)
        }
        #[cfg(feature = "redis")]
        "redis" => {
            use simba::backends::redis::{RedisBackend, RedisOptions};
            let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
            let o = RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
            Arc::new(
                RedisBackend::connect(&url, o).unwrap_or_else(|e| panic!("Redis: {e} (run `scripts/services up`)")),
            )
        }
        #[cfg(feature = "zookeeper")]
        "zookeeper" => {
            use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
            let url = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
            Arc::new(
                ZookeeperBackend::from_url(&url, ZookeeperOptions::default())
                    .unwrap_or_else(|e| panic!("ZooKeeper: {e} (run `scripts/services up`)")),
            )
        }
        other => panic!("unknown backend {other}"),
    }
}

fn fence_client() -> postgres::Client {
    let mut c = postgres::Client::connect(&pg_url(), postgres::NoTls)
        .unwrap_or_else(|e| panic!("PostgreSQL at {}: {e} (run `scripts/services up`)", pg_url()));
    c.batch_execute(FENCE_CREATE).unwrap();
    c
}

fn fenced_write(c: &mut postgres::Client, resource: &str, token: u64) -> bool {
    c.execute(FENCE_WRITE, &[&resource, &(token as i64)]).unwrap() == 1
}

/// The child: take the lock, report the token, wait for "WRITE" (sent after the pause), write with
/// the token read before the pause, then report what `token()` says now.
fn child(kind: &str, name: &str) {
    let session = Session::open(backend(kind), options()).unwrap();
    let lease = session.lock(name).unwrap();
    let token = lease.token().unwrap();
    let mut fence = fence_client();
    println!("HELD {token}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "WRITE");
    let accepted = fenced_write(&mut fence, name, token.get());
    println!("WRITE {}", if accepted { "accepted" } else { "rejected" });
    println!("TOKEN {}", if lease.token().is_ok() { "ok" } else { "err" });
    std::io::stdout().flush().unwrap();
}

fn paused_holder_is_fenced(kind: &str) {
    let name = support::unique(&format!("fence-{kind}"));
    let mut fence = fence_client();
    fence.execute(FENCE_INIT, &[&name]).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .env("SIMBA_FENCE_CHILD", kind)
        .env("SIMBA_FENCE_NAME", &name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let t1: u64 = line.trim().strip_prefix("HELD ").unwrap_or_else(|| panic!("child said {line:?}")).parse().unwrap();

    kill(pid, Signal::SIGSTOP).unwrap();
    let session = Session::open(backend(kind), options()).unwrap();
    let lease = session
        .lock_timeout(name.as_str(), Duration::from_secs(20))
        .unwrap()
        .unwrap_or_else(|| panic!("{kind}: no takeover while the holder was paused"));
    let t2 = lease.token().unwrap().get();
    assert!(t2 > t1, "{kind}: takeover token {t2} not > {t1}");
    assert!(fenced_write(&mut fence, &name, t2), "{kind}: the new holder's write was rejected");
    kill(pid, Signal::SIGCONT).unwrap();
    writeln!(stdin, "WRITE").unwrap();
    let mut rest = String::new();
    for _ in 0..2 {
        out.read_line(&mut rest).unwrap();
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{kind}: child failed: {status}");
    assert_eq!(rest, "WRITE rejected\nTOKEN err\n", "{kind}");
    let stored: i64 = fence.query_one(FENCE_READ, &[&name]).unwrap().get(0);
    assert_eq!(stored as u64, t2, "{kind}");
    lease.release().unwrap();
    session.close().unwrap();
}

fn main() {
    if let (Ok(kind), Ok(name)) = (std::env::var("SIMBA_FENCE_CHILD"), std::env::var("SIMBA_FENCE_NAME")) {
        child(&kind, &name);
        return;
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let mut kinds = vec!["postgres"];
    if cfg!(feature = "mysql") {
        kinds.push("mysql");
    }
    if cfg!(feature = "redis") {
        kinds.push("redis");
    }
    if cfg!(feature = "zookeeper") {
        kinds.push("zookeeper");
    }
    let (mut passed, mut failed) = (0, 0);
    for kind in kinds {
        let test = format!("paused_holder_is_fenced::{kind}");
        if !filter.is_empty() && !filter.iter().any(|f| test.contains(f.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(|| paused_holder_is_fenced(kind)) {
            Ok(()) => {
                println!("test {test} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {test} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
