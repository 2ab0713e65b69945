//! Real fault: one of N permit holders paused with SIGSTOP past its lease.
//!
//! For every network backend compiled in: this test's session holds N - 1 permits of a semaphore
//! with N = 3; a child process (this binary, re-executed) takes the last one and reads its token;
//! the test pauses the child with SIGSTOP; a third session waits for a permit and gets the
//! paused child's slot (the only one that frees) with a larger token, while the other N - 1
//! permits stay held. The new holder writes through `simba::fence` on the slot's resource
//! ([`Permit::fence_resource`](simba::Permit::fence_resource)) to a PostgreSQL table
//! (`fence::postgres::check` in the write's transaction) and a Redis key (`fence::redis::set`);
//! the child is resumed and tries the same writes with the token it read before the pause: both
//! fences reject them (the PostgreSQL write is rolled back, the Redis value is untouched), and
//! the child's `token()` fails. The slots still held by the test never see a rejection.
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

/// The semaphore's limit.
const N: u32 = 3;

fn pg_url() -> String {
    support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
}

fn redis_url() -> String {
    support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379")
}

/// Session options with `lease` (renewed every quarter of it). The paused child's lease is short,
/// so that it expires soon; the test's own sessions have long ones, so that a loaded machine never
/// makes them expire while the test waits.
fn options(lease: Duration) -> SessionOptions {
    SessionOptions::builder().lease_duration(lease).renew_interval(lease / 4).build().unwrap()
}

/// The paused child's lease.
const SHORT: Duration = Duration::from_secs(2);
/// The lease of the test's own sessions.
const LONG: Duration = Duration::from_secs(20);

fn backend(kind: &str) -> Arc<dyn LeaseBackend> {
    let timeout = Duration::from_secs(1);
    match kind {
        "postgres" => {
            use simba::backends::sql::{SqlBackend, SqlOptions};
            let b = SqlBackend::postgres(&pg_url(), SqlOptions::builder().query_timeout(timeout).build().unwrap())
                .unwrap_or_else(|e| panic!("PostgreSQL: {e} (run `scripts/services up`)"));
            b.init_schema().unwrap();
            Arc::new(b)
        }
        #[cfg(feature = "mysql")]
        "mysql" => {
            use simba::backends::sql::{SqlBackend, SqlOptions};
            let url = support::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
            let b = SqlBackend::mysql(&url, SqlOptions::builder().query_timeout(timeout).build().unwrap())
                .unwrap_or_else(|e| panic!("MySQL: {e} (run `scripts/services up`)"));
            b.init_schema().unwrap();
            Arc::new(b)
        }
        "redis" => {
            use simba::backends::redis::{RedisBackend, RedisOptions};
            let o = RedisOptions::builder().query_timeout(timeout).build().unwrap();
            Arc::new(
                RedisBackend::connect(&redis_url(), o)
                    .unwrap_or_else(|e| panic!("Redis: {e} (run `scripts/services up`)")),
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

/// The fenced resources: a PostgreSQL table and a Redis key, one of each per slot.
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

    /// Attempt `attempt` to write to both resources of `resource` (a slot's fence resource), each
    /// through its fence: "accepted" or "rejected" per resource.
    fn write(&mut self, resource: &str, attempt: i64, token: Token) -> (String, String) {
        // The write first, then the check: a stale check must roll the write back.
        let mut tx = self.pg.transaction().unwrap();
        tx.execute(ATTEMPT_INSERT, &[&resource, &attempt, &(token.get() as i64)]).unwrap();
        let pg = match simba::fence::postgres::check(&mut tx, resource, token) {
            Ok(()) => {
                tx.commit().unwrap();
                "accepted"
            }
            Err(FenceError::Stale { .. }) => "rejected", // dropping tx rolls it back
            Err(e) => panic!("PostgreSQL fence: {}", simba::display_chain(&e)),
        };
        let key = format!("{{{resource}}}:value");
        let redis = match simba::fence::redis::set(&mut self.redis, resource, token, &key, attempt) {
            Ok(()) => "accepted",
            Err(FenceError::Stale { .. }) => "rejected",
            Err(e) => panic!("Redis fence: {}", simba::display_chain(&e)),
        };
        (pg.to_string(), redis.to_string())
    }

    fn landed(&mut self, resource: &str) -> Vec<i64> {
        self.pg.query(ATTEMPTS, &[&resource]).unwrap().iter().map(|r| r.get(0)).collect()
    }

    fn value(&mut self, resource: &str) -> i64 {
        redis::cmd("GET").arg(format!("{{{resource}}}:value")).query(&mut self.redis).unwrap()
    }
}

fn accepted() -> (String, String) {
    ("accepted".to_string(), "accepted".to_string())
}

/// The child: take a permit, report its slot and token, wait for "WRITE" (sent after the pause),
/// write with the token read before the pause, then report what `token()` says now.
fn child(kind: &str, name: &str) {
    let session = Session::open(backend(kind), options(SHORT)).unwrap();
    let permit = session.semaphore(name, N).unwrap().acquire().unwrap();
    let token = permit.token().unwrap();
    let resource = permit.fence_resource().to_string();
    let mut resources = Resources::connect();
    println!("HELD {} {token}", permit.slot());
    std::io::stdout().flush().unwrap();
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "WRITE");
    let (pg, redis) = resources.write(&resource, 1, token);
    println!("POSTGRES {pg}");
    println!("REDIS {redis}");
    println!("TOKEN {}", if permit.token().is_ok() { "ok" } else { "err" });
    std::io::stdout().flush().unwrap();
}

fn paused_permit_is_fenced(kind: &str) {
    let name = support::unique(&format!("semfence-{kind}"));
    let mut resources = Resources::connect();
    // N - 1 permits held here, for the whole test.
    let holder = Session::open(backend(kind), options(LONG)).unwrap();
    let sem = holder.semaphore(name.as_str(), N).unwrap();
    let kept: Vec<_> = (1..N).map(|_| sem.try_acquire().unwrap().expect("a free permit")).collect();
    for (i, p) in kept.iter().enumerate() {
        let attempt = 10 + i as i64;
        assert_eq!(resources.write(p.fence_resource().as_str(), attempt, p.token().unwrap()), accepted(), "{kind}");
    }

    let exe = std::env::current_exe().unwrap();
    let mut child = Command::new(exe)
        .env("SIMBA_SEMFENCE_CHILD", kind)
        .env("SIMBA_SEMFENCE_NAME", &name)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32);
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut stdin = child.stdin.take().unwrap();
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let held = line.trim().strip_prefix("HELD ").unwrap_or_else(|| panic!("{kind}: child said {line:?}"));
    let (slot, t1) = held.split_once(' ').unwrap_or_else(|| panic!("{kind}: child said {line:?}"));
    let (slot, t1): (u32, u64) = (slot.parse().unwrap(), t1.parse().unwrap());
    assert!(kept.iter().all(|p| p.slot() != slot), "{kind}: the child got a held slot {slot}");
    let resource = sem.fence_resource(slot).unwrap().to_string();
    assert_eq!(resource, format!("simba.sem:{name}:{slot}"));

    kill(pid, Signal::SIGSTOP).unwrap();
    let taker = Session::open(backend(kind), options(LONG)).unwrap();
    let permit = taker
        .semaphore(name.as_str(), N)
        .unwrap()
        .acquire_timeout(Duration::from_secs(30))
        .unwrap()
        .unwrap_or_else(|| panic!("{kind}: no permit freed while the holder was paused"));
    assert_eq!(permit.slot(), slot, "{kind}: the paused holder's slot is the one that frees");
    let t2 = permit.token().unwrap();
    assert!(t2.get() > t1, "{kind}: takeover token {t2} not > {t1} on slot {slot}");
    // The other permits were never lost, and there are still at most N holders.
    for p in &kept {
        p.token().unwrap_or_else(|e| panic!("{kind}: a kept permit was lost: {e}"));
    }
    let holders = sem.holders().unwrap();
    assert_eq!(holders.len(), N as usize, "{kind}: {holders:?}");
    assert!(holders.iter().any(|(s, h)| *s == slot && &h.session == taker.id() && h.token == t2), "{holders:?}");
    assert_eq!(resources.write(&resource, 2, t2), accepted(), "{kind}: the new holder's writes");

    kill(pid, Signal::SIGCONT).unwrap();
    writeln!(stdin, "WRITE").unwrap();
    let mut rest = String::new();
    for _ in 0..3 {
        out.read_line(&mut rest).unwrap();
    }
    let status = child.wait().unwrap();
    assert!(status.success(), "{kind}: child failed: {status}");
    assert_eq!(rest, "POSTGRES rejected\nREDIS rejected\nTOKEN err\n", "{kind}");
    // The new holder keeps writing in its term; only its writes landed on the slot.
    assert_eq!(resources.write(&resource, 3, t2), accepted(), "{kind}: the same term keeps writing");
    assert_eq!(resources.landed(&resource), vec![2, 3], "{kind}: the paused holder's PostgreSQL write was rolled back");
    assert_eq!(resources.value(&resource), 3, "{kind}: the Redis value is the new holder's");
    assert_eq!(simba::fence::redis::seen(&mut resources.redis, resource.as_str()).unwrap(), Some(t2));
    // The kept slots' resources are their own: still writable with their tokens.
    for (i, p) in kept.iter().enumerate() {
        let attempt = 20 + i as i64;
        assert_eq!(resources.write(p.fence_resource().as_str(), attempt, p.token().unwrap()), accepted(), "{kind}");
    }
    permit.release().unwrap();
    taker.close().unwrap();
    for p in kept {
        p.release().unwrap();
    }
    holder.close().unwrap();
}

fn main() {
    if let (Ok(kind), Ok(name)) = (std::env::var("SIMBA_SEMFENCE_CHILD"), std::env::var("SIMBA_SEMFENCE_NAME")) {
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
        let test = format!("paused_permit_is_fenced::{kind}");
        if !filter.is_empty() && !filter.iter().any(|f| test.contains(f.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(|| paused_permit_is_fenced(kind)) {
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
