//! Real fault: a holder process paused with SIGSTOP past its lease.
//!
//! For every network backend compiled in, a child process (this binary, re-executed) takes a lock
//! and reads its token; the test pauses it with SIGSTOP; another session takes over with a larger
//! token and writes, through `simba::fence`, to a PostgreSQL table (`fence::postgres::check` in
//! the write's transaction) and a Redis key (`fence::redis::set`); the child is resumed and tries
//! the same writes with the token it read before the pause: both fences reject them (the
//! PostgreSQL write is rolled back, the Redis value is untouched), and the child's `token()` fails.
//!
//! This test binary has its own `main` (harness = false) so that it can act as the child.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use simba::fence::FenceError;
use simba::{LeaseBackend, Session, SessionOptions, Token};

mod support;

const ATTEMPT_INSERT: &str = include_str!("sql/fence-test-attempt-pg.sql");
const ATTEMPTS: &str = include_str!("sql/fence-test-attempts-pg.sql");
const TABLES: &str = include_str!("sql/fence-test-create-pg.sql");

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

fn redis_url() -> String {
    support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379")
}

/// The fenced resources: a PostgreSQL table and a Redis key.
struct Resources {
    pg: postgres::Client,
    redis: redis::Connection,
}

impl Resources {
    fn connect() -> Resources {
        let mut pg = postgres::Client::connect(&pg_url(), postgres::NoTls)
            .unwrap_or_else(|e| panic!("PostgreSQL at {}: {e} (run `scripts/services up`)", pg_url()));
        simba::fence::postgres::init(&mut pg).unwrap();
        pg.batch_execute(TABLES).unwrap();
        let redis = redis::Client::open(redis_url().as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("Redis at {}: {e} (run `scripts/services up`)", redis_url()));
        Resources { pg, redis }
    }

    /// The write of holder `who` (1 = the paused one, 2 = the new one) to both resources, each
    /// through its fence: "accepted" or "rejected" per resource.
    fn write(&mut self, name: &str, who: i64, token: Token) -> (String, String) {
        // The write first, then the check: a stale check must roll the write back.
        let mut tx = self.pg.transaction().unwrap();
        tx.execute(ATTEMPT_INSERT, &[&name, &who, &(token.get() as i64)]).unwrap();
        let pg = match simba::fence::postgres::check(&mut tx, name, token) {
            Ok(()) => {
                tx.commit().unwrap();
                "accepted"
            }
            Err(FenceError::Stale { .. }) => "rejected", // dropping tx rolls it back
            Err(e) => panic!("PostgreSQL fence: {}", simba::display_chain(&e)),
        };
        let key = format!("{{{name}}}:value");
        let redis = match simba::fence::redis::set(&mut self.redis, name, token, &key, who) {
            Ok(()) => "accepted",
            Err(FenceError::Stale { .. }) => "rejected",
            Err(e) => panic!("Redis fence: {}", simba::display_chain(&e)),
        };
        (pg.to_string(), redis.to_string())
    }
}

/// The child: take the lock, report the token, wait for "WRITE" (sent after the pause), write with
/// the token read before the pause, then report what `token()` says now.
fn child(kind: &str, name: &str) {
    let session = Session::open(backend(kind), options()).unwrap();
    let lease = session.lock(name).unwrap();
    let token = lease.token().unwrap();
    let mut resources = Resources::connect();
    println!("HELD {token}");
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "WRITE");
    let (pg, redis) = resources.write(name, 1, token);
    println!("POSTGRES {pg}");
    println!("REDIS {redis}");
    println!("TOKEN {}", if lease.token().is_ok() { "ok" } else { "err" });
    std::io::stdout().flush().unwrap();
}

fn paused_holder_is_fenced(kind: &str) {
    let name = support::unique(&format!("fence-{kind}"));
    let mut resources = Resources::connect();
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
    let t2 = lease.token().unwrap();
    assert!(t2.get() > t1, "{kind}: takeover token {t2} not > {t1}");
    let accepted = ("accepted".to_string(), "accepted".to_string());
    assert_eq!(resources.write(&name, 2, t2), accepted, "{kind}: the new holder's writes");
    kill(pid, Signal::SIGCONT).unwrap();
    writeln!(stdin, "WRITE").unwrap();
    let mut rest = String::new();
    for _ in 0..3 {
        out.read_line(&mut rest).unwrap();
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{kind}: child failed: {status}");
    assert_eq!(rest, "POSTGRES rejected\nREDIS rejected\nTOKEN err\n", "{kind}");
    // The new holder keeps writing in its term; only its writes landed.
    assert_eq!(resources.write(&name, 3, t2), accepted, "{kind}: the same term keeps writing");
    let landed: Vec<i64> = resources.pg.query(ATTEMPTS, &[&name]).unwrap().iter().map(|r| r.get(0)).collect();
    assert_eq!(landed, vec![2, 3], "{kind}: the paused holder's PostgreSQL write was rolled back");
    let value: i64 = redis::cmd("GET").arg(format!("{{{name}}}:value")).query(&mut resources.redis).unwrap();
    assert_eq!(value, 3, "{kind}: the Redis value is the new holder's");
    assert_eq!(simba::fence::redis::seen(&mut resources.redis, name.as_str()).unwrap(), Some(t2));
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
    kinds.push("redis");
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
