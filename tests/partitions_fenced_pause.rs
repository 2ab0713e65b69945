//! Real fault: a `simba work` member owning a partition is paused with SIGSTOP past its lease.
//!
//! For every network backend compiled in, a `simba work` process (member A) owns the only
//! partition of a set; its command is a loop that writes, through `simba::fence` on the
//! partition's lease name (`SIMBA_LEASE`) with its `SIMBA_TOKEN`, to a PostgreSQL table
//! (`fence::postgres::check` in the write's transaction) and a Redis key (`fence::redis::set`) —
//! each write is this test binary re-executed, appending its verdicts to a log. The test pauses
//! simba (not its command: the command runs in its own process group and keeps writing, as a
//! worker does when its supervisor stalls); A's session expires; member B (a library member)
//! takes the partition with a larger token and writes. A's command, still running with the
//! stale token, is rejected by both fences from then on (its PostgreSQL writes roll back, the
//! Redis value stays B's). When simba resumes, it cuts its command off with SIGTERM at once.
//!
//! This test binary has its own `main` (harness = false) so that it can act as the writer.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use simba::partitions::PartitionEvent;
use simba::{Session, SessionOptions, Token};
use support::cli::{code, prepare, simba, temp_dir, wait_output, Lines};
use support::paused::{self, accepted, backend, Resources};

mod support;

/// A safety net for conditions on a loaded machine; the test never waits for time to pass.
const PATIENCE: Duration = Duration::from_secs(60);

/// The variable naming the writer's log.
const LOG: &str = "PARTITION_FENCE_LOG";

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .build()
        .unwrap()
}

/// The backend `kind`'s URL for the CLI.
fn url(kind: &str) -> String {
    let (var, default) = match kind {
        "postgres" => ("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"),
        "mysql" => ("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
        "redis" => ("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
        "zookeeper" => ("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test"),
        other => panic!("unknown backend {other}"),
    };
    support::env_or(var, default)
}

/// The writer (the partition's command runs it in a loop): one fenced write with the command's
/// token to its partition's resource, its verdicts appended to the log as `TOKEN PG REDIS`.
fn writer(_kind: &str, _name: &str) {
    let var = |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set"));
    let token = Token::new(var("SIMBA_TOKEN").parse().unwrap()).unwrap();
    let attempt = i64::try_from(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_micros()).unwrap();
    let mut resources = Resources::connect();
    let (pg, redis) = resources.write(&var("SIMBA_LEASE"), attempt, token);
    let mut log = OpenOptions::new().append(true).create(true).open(var(LOG)).unwrap();
    log.write_all(format!("{token} {pg} {redis}\n").as_bytes()).unwrap();
}

/// The writer's log: (token, PostgreSQL verdict, Redis verdict) per write.
fn verdicts(log: &Path) -> Vec<(u64, String, String)> {
    fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            (w[0].parse().unwrap(), w[1].to_string(), w[2].to_string())
        })
        .collect()
}

/// A `simba work` process that gets SIGCONT and SIGTERM if the test fails before it ended.
struct Reap(Pid, bool);

impl Drop for Reap {
    fn drop(&mut self) {
        if !self.1 {
            let _ = kill(self.0, Signal::SIGCONT);
            let _ = kill(self.0, Signal::SIGTERM);
        }
    }
}

/// Polls `what` until it returns `Some` (a safety net of [`PATIENCE`]).
fn until<T>(what: &str, lines: &mut Lines, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + PATIENCE;
    loop {
        if let Some(v) = f() {
            return v;
        }
        let _ = lines.wait_within("\u{0}", Duration::ZERO);
        assert!(Instant::now() < deadline, "{what}: not reached; simba's stderr:\n{}", lines.seen.join("\n"));
        thread::sleep(Duration::from_millis(20));
    }
}

fn paused_member_is_fenced(kind: &str) {
    let url = url(kind);
    prepare(&url);
    let name = support::unique(&format!("part-fence-{kind}"));
    let resource = simba::partitions::fence_resource(name.as_str(), 0).unwrap().to_string();
    let dir = temp_dir("part-fence");
    let (log, term) = (dir.join("log"), dir.join("term"));
    let mut resources = Resources::connect();
    let exe = std::env::current_exe().unwrap();
    let script = format!(
        r#"trap 'echo "TERM $SIMBA_TOKEN" >> {term}; exit 0' TERM
while :; do SIMBA_PAUSED_CHILD={kind} SIMBA_PAUSED_NAME={name} {LOG}={log} {exe}; sleep 0.1; done"#,
        term = term.display(),
        log = log.display(),
        exe = exe.display()
    );
    let mut a = simba(Some(&url))
        .env("SIMBA_LEASE_DURATION", "1s")
        .env("SIMBA_RENEW_INTERVAL", "250ms")
        .env("SIMBA_QUERY_TIMEOUT", "1s")
        .args(["--json", "work", &name, "--partitions", "1", "--grace", "20s", "--", "sh", "-c", &script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Lines::of(&mut a);
    let mut reap = Reap(Pid::from_raw(a.id() as i32), false);
    let t1 = until("A's command writes", &mut lines, || {
        verdicts(&log).iter().find(|(_, pg, redis)| pg == "accepted" && redis == "accepted").map(|v| v.0)
    });

    // Pause simba; its command keeps running (its own process group) and keeps writing.
    let pid = Pid::from_raw(a.id() as i32);
    kill(pid, Signal::SIGSTOP).unwrap();
    let session = Session::open(backend(kind), options()).unwrap();
    let b = session.partitions(name.as_str(), 1).unwrap();
    let events = b.events();
    let deadline = Instant::now() + PATIENCE;
    let t2 = loop {
        match events.recv_deadline(deadline) {
            Ok(PartitionEvent::Assigned { partition: 0, token, .. }) => break token,
            Ok(_) => {}
            Err(e) => panic!("{kind}: no takeover while A was paused: {e}"),
        }
    };
    assert!(t2.get() > t1, "{kind}: takeover token {t2} not > {t1}");
    assert_eq!(resources.write(&resource, 1, t2), accepted(), "{kind}: the new owner's write");

    // A's command, still writing with its stale token, is rejected by both fences.
    until("a stale write rejected", &mut lines, || {
        let v = verdicts(&log);
        v.iter().any(|(t, pg, redis)| *t == t1 && pg == "rejected" && redis == "rejected").then_some(())
    });

    // Resumed, simba cuts its command off at once (its term is over).
    kill(pid, Signal::SIGCONT).unwrap();
    let stopped =
        until("the command's SIGTERM", &mut lines, || fs::read_to_string(&term).ok().filter(|s| s.ends_with('\n')));
    assert_eq!(stopped.trim(), format!("TERM {t1}"), "{kind}");
    let is_exit = |l: &String| l.contains("\"event\":\"exit\"");
    let stop_line = match lines.seen.iter().find(|l| is_exit(l)) {
        Some(l) => l.clone(),
        None => lines.wait_for("\"event\":\"exit\""),
    };
    let exit: Value = serde_json::from_str(&stop_line).unwrap();
    assert_eq!(exit["partition"], 0, "{exit}");
    assert_eq!(exit["token"], t1, "{exit}");
    assert!(exit["stopped"].is_string(), "{kind}: the command was stopped by simba: {exit}");
    kill(pid, Signal::SIGTERM).unwrap();
    let (o, _) = wait_output(a, PATIENCE);
    reap.1 = true;
    let rest = lines.rest();
    assert_eq!(code(&o), 143, "{kind}: {}", rest.join("\n"));

    // B keeps writing in its term; of A's writes only those before the takeover landed.
    let p = b.owned().into_iter().find(|p| p.index() == 0).expect("B still owns partition 0");
    assert_eq!(p.token().unwrap(), t2, "{kind}");
    assert_eq!(resources.write(&resource, 2, t2), accepted(), "{kind}: the same term keeps writing");
    let v = verdicts(&log);
    assert!(v.iter().all(|(t, _, _)| *t == t1), "{kind}: A ran only its first term: {v:?}");
    // Once both fences rejected a write, every later one is rejected by both.
    let first_rejected = v.iter().position(|(_, pg, redis)| pg == "rejected" && redis == "rejected").unwrap();
    assert!(v[first_rejected..].iter().all(|(_, pg, redis)| pg == "rejected" && redis == "rejected"), "{kind}: {v:?}");
    let landed_a = v.iter().filter(|(_, pg, _)| pg == "accepted").count();
    let landed = resources.landed(&resource);
    assert_eq!(landed.len(), landed_a + 2, "{kind}: a rejected write landed: {landed:?} {v:?}");
    assert!(landed.contains(&1) && landed.contains(&2), "{kind}: {landed:?}");
    assert_eq!(resources.value(&resource), 2, "{kind}: the Redis value is the new owner's");
    assert_eq!(simba::fence::redis::seen(&mut resources.redis, &resource).unwrap(), Some(t2));
    b.close().unwrap();
    session.close().unwrap();
    let _ = fs::remove_dir_all(&dir);
}

fn main() {
    paused::main("paused_member_is_fenced", paused_member_is_fenced, writer);
}
