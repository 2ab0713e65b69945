//! The SIGSTOP harness of the fenced-pause tests (`fenced_pause.rs`, `semaphore_fault.rs`): a
//! child process (the test binary re-executed) takes a lease or a permit and reads its token, the
//! test pauses it past its lease, another session takes over, and the resumed child's writes
//! through `simba::fence` to a PostgreSQL table and a Redis key must be rejected.
//!
//! Each such test binary has its own `main` (harness = false) so that it can act as the child:
//! [`main`] runs the child when its variables are set, else the test once per backend.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use simba::backend::LeaseBackend;
use simba::fence::FenceError;
use simba::Token;

const ATTEMPT_INSERT: &str = include_str!("../sql/fence-test-attempt-pg.sql");
const ATTEMPTS: &str = include_str!("../sql/fence-test-attempts-pg.sql");
const TABLES: &str = include_str!("../sql/fence-test-create-pg.sql");

fn pg_url() -> String {
    super::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")
}

fn redis_url() -> String {
    super::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379")
}

/// The backends compiled in, by name: PostgreSQL and Redis always (the harness needs them for
/// the fenced resources), MySQL and ZooKeeper when their features are on.
pub fn kinds() -> Vec<&'static str> {
    let mut kinds = vec!["postgres"];
    if cfg!(feature = "mysql") {
        kinds.push("mysql");
    }
    kinds.push("redis");
    if cfg!(feature = "zookeeper") {
        kinds.push("zookeeper");
    }
    kinds
}

/// The backend `kind` (see [`kinds`]) with a 1 s query timeout, its schema initialised.
pub fn backend(kind: &str) -> Arc<dyn LeaseBackend> {
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
            let url = super::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
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
            let url = super::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
            Arc::new(
                ZookeeperBackend::from_url(&url, ZookeeperOptions::default())
                    .unwrap_or_else(|e| panic!("ZooKeeper: {e} (run `scripts/services up`)")),
            )
        }
        other => panic!("unknown backend {other}"),
    }
}

/// Both resources' verdicts accepted.
pub fn accepted() -> (String, String) {
    ("accepted".to_string(), "accepted".to_string())
}

/// The fenced resources: per resource name, a PostgreSQL table's rows and a Redis key.
pub struct Resources {
    pg: postgres::Client,
    pub redis: redis::Connection,
}

impl Resources {
    pub fn connect() -> Resources {
        let mut pg = postgres::Client::connect(&pg_url(), postgres::NoTls)
            .unwrap_or_else(|e| panic!("PostgreSQL at {}: {e} (run `scripts/services up`)", pg_url()));
        simba::fence::postgres::init(&mut pg).unwrap();
        pg.batch_execute(TABLES).unwrap();
        let redis = redis::Client::open(redis_url().as_str())
            .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
            .unwrap_or_else(|e| panic!("Redis at {}: {e} (run `scripts/services up`)", redis_url()));
        Resources { pg, redis }
    }

    /// Attempt `attempt` to write to both resources of `resource`, each through its fence:
    /// "accepted" or "rejected" per resource (PostgreSQL, Redis).
    pub fn write(&mut self, resource: &str, attempt: i64, token: Token) -> (String, String) {
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

    /// The attempts whose PostgreSQL write landed on `resource`, in order.
    pub fn landed(&mut self, resource: &str) -> Vec<i64> {
        self.pg.query(ATTEMPTS, &[&resource]).unwrap().iter().map(|r| r.get(0)).collect()
    }

    /// The Redis value of `resource` (the last accepted attempt).
    pub fn value(&mut self, resource: &str) -> i64 {
        redis::cmd("GET").arg(format!("{{{resource}}}:value")).query(&mut self.redis).unwrap()
    }
}

/// The child's side, once it holds `token` and has reported it (its first line): waits for
/// "WRITE" (sent after the pause), writes to `resource` with the token read before the pause,
/// and reports both verdicts and what `token_ok()` says now.
pub fn child_writes(resources: &mut Resources, resource: &str, token: Token, token_ok: impl FnOnce() -> bool) {
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "WRITE");
    let (pg, redis) = resources.write(resource, 1, token);
    println!("POSTGRES {pg}");
    println!("REDIS {redis}");
    println!("TOKEN {}", if token_ok() { "ok" } else { "err" });
    std::io::stdout().flush().unwrap();
}

/// Reports the child's first line (what it holds).
pub fn child_holds(what: &str) {
    println!("HELD {what}");
    std::io::stdout().flush().unwrap();
}

/// The test's side of a child process.
pub struct Paused {
    child: Child,
    pid: Pid,
    out: BufReader<ChildStdout>,
    stdin: ChildStdin,
}

impl Paused {
    /// Starts the child for `kind` and `name` (it acts on `CHILD_KIND`/`CHILD_NAME`, see
    /// [`main`]) and returns it with what it reported holding (its `HELD ...` line, without the
    /// prefix).
    pub fn spawn(kind: &str, name: &str) -> (Paused, String) {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .env(CHILD_KIND, kind)
            .env(CHILD_NAME, name)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let pid = Pid::from_raw(child.id() as i32);
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let stdin = child.stdin.take().unwrap();
        let mut line = String::new();
        out.read_line(&mut line).unwrap();
        let held =
            line.trim().strip_prefix("HELD ").unwrap_or_else(|| panic!("{kind}: child said {line:?}")).to_string();
        (Paused { child, pid, out, stdin }, held)
    }

    /// SIGSTOP: the child is paused (its renewals stop with it).
    pub fn pause(&self) {
        kill(self.pid, Signal::SIGSTOP).unwrap();
    }

    /// SIGCONT, then "WRITE": returns the child's three report lines once it exited successfully.
    pub fn resume_and_write(mut self, kind: &str) -> String {
        kill(self.pid, Signal::SIGCONT).unwrap();
        writeln!(self.stdin, "WRITE").unwrap();
        let mut rest = String::new();
        for _ in 0..3 {
            self.out.read_line(&mut rest).unwrap();
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{kind}: child failed: {status}");
        rest
    }
}

/// The child's report when both fences rejected its writes and its `token()` failed.
pub const FENCED: &str = "POSTGRES rejected\nREDIS rejected\nTOKEN err\n";

const CHILD_KIND: &str = "SIMBA_PAUSED_CHILD";
const CHILD_NAME: &str = "SIMBA_PAUSED_NAME";

/// The binary's `main`: the child (`child(kind, name)`) when started by [`Paused::spawn`], else
/// `test(kind)` per backend of [`kinds`] matching the command line's filters, printed as
/// `test <test>::<kind> ... ok|FAILED`; exits 1 when one failed.
pub fn main(test: &str, run: fn(&str), child: fn(&str, &str)) {
    if let (Ok(kind), Ok(name)) = (std::env::var(CHILD_KIND), std::env::var(CHILD_NAME)) {
        child(&kind, &name);
        return;
    }
    let filter: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    let (mut passed, mut failed) = (0, 0);
    for kind in kinds() {
        let name = format!("{test}::{kind}");
        if !filter.is_empty() && !filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        match std::panic::catch_unwind(|| run(kind)) {
            Ok(()) => {
                println!("test {name} ... ok");
                passed += 1;
            }
            Err(_) => {
                println!("test {name} ... FAILED");
                failed += 1;
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed > 0 {
        std::process::exit(1);
    }
}
