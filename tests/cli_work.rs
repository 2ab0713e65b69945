//! End-to-end tests of `simba work NAME --partitions N -- CMD` and of `simba holders` on a
//! partition set.
//!
//! Bad input needs no server (exit 78 before any I/O). The multi-process tests run two `simba
//! work` processes over one set on every network backend compiled in, each command a small shell
//! script that logs `start`/`end` lines with its partition, token and member to a shared file:
//! the log is the evidence (no partition runs twice at a time, tokens grow per partition, the
//! hand-offs happen), never wall-clock speed. A server that is down fails the test with "run
//! `scripts/services up`".

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use support::cli::{code, json_result, run, simba, stderr, stdout, temp_dir, wait_output, Lines};

/// How long a condition may take on a loaded machine before the test gives up (a safety net).
const PATIENCE: Duration = Duration::from_secs(60);

// ------------------------------------------------------------------ no server

/// The network backend compiled in, at a closed port: an answer of 78 (not 69) proves that no I/O
/// happened.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
fn closed_port() -> &'static str {
    if cfg!(feature = "redis") {
        "redis://127.0.0.1:1"
    } else if cfg!(feature = "postgres") {
        "postgres://simba@127.0.0.1:1/simba"
    } else {
        "mysql://root@127.0.0.1:1/simba"
    }
}

/// A bad count or set name is a configuration error found before any I/O, naming what is
/// allowed; a count that is no number, or no command, is a usage error; a command that does not
/// exist is 127 before any I/O.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
#[test]
fn work_bad_input_exits_78_before_any_io() {
    let long = "p".repeat(simba::partitions::MAX_PARTITION_SET_NAME_LEN + 1);
    let longest = "p".repeat(simba::partitions::MAX_PARTITION_SET_NAME_LEN);
    for (n, name, expected) in [
        ("0", "orders", "--partitions 0 is out of range: a partition set has 1 to 1000 partitions"),
        ("1001", "orders", "--partitions 1001 is out of range: a partition set has 1 to 1000 partitions"),
        ("99999999999", "orders", "--partitions 99999999999 is out of range: a partition set has 1 to 1000 partitions"),
        ("4", long.as_str(), "partition set names are at most 113 characters"),
        ("4", "simba.part:orders", "reserved"),
        ("4", "simba.sem:orders", "reserved"),
        ("4", "bad name", "invalid name \"bad name\""),
    ] {
        for json in [false, true] {
            let o = run({
                let mut c = simba(Some(closed_port()));
                if json {
                    c.arg("--json");
                }
                c.args(["--query-timeout", "300ms", "work", name, "--partitions", n, "--", "true"]);
                c
            });
            assert_eq!(code(&o), 78, "--partitions {n} {name}: {}", stderr(&o));
            if json {
                assert_eq!(json_result(&o)["error"]["kind"], "config", "{}", stdout(&o));
            } else {
                assert!(stderr(&o).contains(expected), "expected {expected:?} in {}", stderr(&o));
            }
        }
    }
    // The longest name is valid: past validation, the closed port answers (69).
    let o = run({
        let mut c = simba(Some(closed_port()));
        c.args(["--query-timeout", "300ms", "work", &longest, "--partitions", "1000", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    // A command that does not exist: 127 before anything is opened.
    let o = run({
        let mut c = simba(Some(closed_port()));
        c.args(["--json", "work", "orders", "--partitions", "4", "--", "no-such-command-simba-test"]);
        c
    });
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    assert_eq!(json_result(&o)["outcome"], "spawn_failed");
    // Usage errors (2): no number, no --partitions, no command, the command not after --.
    for args in [
        &["work", "orders", "--partitions", "four", "--", "true"][..],
        &["work", "orders", "--", "true"],
        &["work", "orders", "--partitions", "4"],
    ] {
        let o = run({
            let mut c = simba(Some("memory://"));
            c.args(args);
            c
        });
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
    }
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["work", "orders", "--partitions", "4", "echo", "hi"]);
        c
    });
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("simba work orders --partitions 4 -- echo hi"), "{}", stderr(&o));
    // `holders` takes a name valid as a semaphore or a partition set name.
    let o = run({
        let mut c = simba(Some(closed_port()));
        c.args(["holders", &"p".repeat(simba::semaphore::MAX_SEMAPHORE_NAME_LEN + 1)]);
        c
    });
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["work", "--help"]);
        c
    });
    for needle in ["--partitions <N>", "--drain <D>", "--grace <D>", "SIMBA_PARTITION"] {
        assert!(stdout(&o).contains(needle), "{needle} missing in {}", stdout(&o));
    }
}

/// `holders` on a name nobody used says so, and shows both kinds as empty in JSON.
#[test]
fn holders_of_an_unknown_partition_set() {
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["holders", "orders"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("orders: no such semaphore or partition set"), "{}", stdout(&o));
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "holders", "orders"]);
        c
    });
    let v = json_result(&o);
    assert_eq!(v["partitions"], Value::Null, "{v}");
    assert_eq!(v["owners"], serde_json::json!([]), "{v}");
    assert_eq!(v["permits"], Value::Null, "{v}");
}

// ------------------------------------------------------------------ real servers

/// One line of the shared log: `start P TOKEN MEMBER LEASE SESSION` or `end P TOKEN MEMBER`.
#[derive(Debug, Clone)]
struct Line {
    start: bool,
    partition: u32,
    token: u64,
    member: String,
    lease: String,
    session: String,
}

fn read_log(log: &Path) -> Vec<Line> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            let field = |i: usize| w.get(i).map(|s| s.to_string()).unwrap_or_default();
            Line {
                start: w[0] == "start",
                partition: w[1].parse().unwrap_or_else(|_| panic!("bad line {l:?}")),
                token: w[2].parse().unwrap_or_else(|_| panic!("bad line {l:?}")),
                member: field(3),
                lease: field(4),
                session: field(5),
            }
        })
        .collect()
}

/// Replays the log: every partition runs at most once at a time, each start has a larger token
/// than the partition's previous one, and the environment is right. Returns what runs now
/// (partition → (token, member)).
fn replay(name: &str, lines: &[Line]) -> BTreeMap<u32, (u64, String)> {
    let mut running: BTreeMap<u32, (u64, String)> = BTreeMap::new();
    let mut last_token: BTreeMap<u32, u64> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        let context = || format!("line {i} {l:?} of\n{lines:#?}");
        if l.start {
            assert!(!running.contains_key(&l.partition), "partition {} runs twice: {}", l.partition, context());
            assert!(last_token.get(&l.partition).is_none_or(|t| l.token > *t), "token not larger: {}", context());
            assert_eq!(l.lease, format!("simba.part:{name}:{}", l.partition), "SIMBA_LEASE: {}", context());
            assert!(matches!(l.session.len(), 16 | 32), "SIMBA_SESSION: {}", context());
            last_token.insert(l.partition, l.token);
            running.insert(l.partition, (l.token, l.member.clone()));
        } else {
            let run = running.remove(&l.partition);
            assert_eq!(run, Some((l.token, l.member.clone())), "an end without its start: {}", context());
        }
    }
    running
}

/// Waits until the log's replay satisfies `done`; panics with the log and the members' stderr.
fn wait_log(
    name: &str,
    log: &Path,
    members: &mut [&mut Member],
    what: &str,
    done: impl Fn(&BTreeMap<u32, (u64, String)>) -> bool,
) -> BTreeMap<u32, (u64, String)> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let running = replay(name, &read_log(log));
        if done(&running) {
            return running;
        }
        for m in members.iter_mut() {
            m.drain();
            if let Ok(Some(status)) = m.child().try_wait() {
                panic!("member {} exited with {status} while waiting for {what}:\n{}", m.tag, m.lines.seen.join("\n"));
            }
        }
        if Instant::now() > deadline {
            let stderr: Vec<String> = members.iter().map(|m| m.lines.seen.join("\n")).collect();
            panic!(
                "{what}: not reached; running {running:?}\nlog:\n{:#?}\nstderr:\n{}",
                read_log(log),
                stderr.join("\n--\n")
            );
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// A `simba --json work` process and its stderr's JSON lines. Dropped while it runs (a failed
/// assertion), it gets SIGTERM: a failing test leaves no member behind.
struct Member {
    tag: &'static str,
    child: Option<Child>,
    lines: Lines,
}

impl Drop for Member {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            if matches!(child.try_wait(), Ok(None)) {
                let _ = kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM);
            }
        }
    }
}

impl Member {
    fn start(url: &str, name: &str, count: u32, tag: &'static str, script: &str) -> Member {
        let mut c = simba(Some(url));
        c.env("MEMBER", tag)
            .args(["--json", "work", name, "--partitions", &count.to_string(), "--grace", "20s", "--drain", "30s"])
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().unwrap();
        let lines = Lines::of(&mut child);
        Member { tag, child: Some(child), lines }
    }

    /// Takes in the stderr lines that arrived.
    fn drain(&mut self) {
        let _ = self.lines.wait_within("\u{0}", Duration::ZERO);
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("running")
    }

    /// The JSON events seen so far of kind `event`.
    fn events(&mut self, event: &str) -> Vec<Value> {
        self.drain();
        self.lines
            .seen
            .iter()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|v| v["event"] == event)
            .collect()
    }

    /// SIGTERM, then the exit: 128 + 15 with a JSON result, and every JSON event.
    fn stop(mut self) -> Vec<Value> {
        let child = self.child.take().expect("running");
        kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
        let (tag, lines) = (self.tag, std::mem::replace(&mut self.lines, Lines::empty()));
        let (o, _) = wait_output(child, PATIENCE);
        let mut seen = lines.rest();
        assert_eq!(code(&o), 143, "member {tag}: {}", seen.join("\n"));
        let result = json_result(&o);
        assert_eq!(result["outcome"], "interrupted", "{result}");
        assert_eq!(result["signal"], "SIGTERM", "{result}");
        // The commands share simba's stderr (`sh` says "Terminated" about a killed `sleep`).
        seen.retain(|l| l.starts_with('{'));
        seen.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
    }
}

/// The command of every partition: logs its start (with its environment) and, on SIGTERM, its end.
fn script(log: &Path) -> String {
    format!(
        r#"trap 'echo "end $SIMBA_PARTITION $SIMBA_TOKEN $MEMBER" >> {log}; exit 0' TERM
echo "start $SIMBA_PARTITION $SIMBA_TOKEN $MEMBER $SIMBA_LEASE $SIMBA_SESSION" >> {log}
while :; do sleep 0.05; done"#,
        log = log.display()
    )
}

fn owned_by<'a>(running: &'a BTreeMap<u32, (u64, String)>, tag: &str) -> Vec<(&'a u32, &'a u64)> {
    running.iter().filter(|(_, (_, m))| m == tag).map(|(p, (t, _))| (p, t)).collect()
}

/// `simba --json holders NAME`: partition → (session, token).
fn holders(url: &str, name: &str) -> BTreeMap<u64, (String, u64)> {
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "holders", name]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json_result(&o);
    assert_eq!(v["partitions"], 4, "{v}");
    assert_eq!(v["permits"], Value::Null, "{v}");
    v["owners"]
        .as_array()
        .unwrap_or_else(|| panic!("no owners: {v}"))
        .iter()
        .map(|o| {
            assert_eq!(o["lease"], format!("simba.part:{name}:{}", o["partition"]), "{v}");
            (
                o["partition"].as_u64().unwrap(),
                (o["session"].as_str().unwrap().to_string(), o["token"].as_u64().unwrap()),
            )
        })
        .collect()
}

/// Two `simba work` processes over a set of 4 partitions: the first runs all 4, the second joins
/// and takes 2 (each handed off after its command ended), the first is stopped with SIGTERM and
/// the second takes its 2; every partition runs once at a time, with growing tokens, the right
/// environment and JSON events; `holders` shows who owns what; another count is exit 78.
#[allow(dead_code)]
fn two_members_share_the_partitions(url: &str) {
    let name = support::unique("cli-work");
    let dir = temp_dir("cli-work");
    let log = dir.join("log");
    let script = script(&log);
    let mut a = Member::start(url, &name, 4, "A", &script);
    let first = wait_log(&name, &log, &mut [&mut a], "A runs all 4", |r| owned_by(r, "A").len() == 4);
    let sid_a = read_log(&log)[0].session.clone();
    let h = holders(url, &name);
    assert_eq!(h.len(), 4, "{h:?}");
    for (p, (session, token)) in &h {
        assert_eq!(session, &sid_a, "partition {p}: {h:?}");
        assert_eq!(*token, first[&(*p as u32)].0, "partition {p}: {h:?}");
    }
    let o = run({
        let mut c = simba(Some(url));
        c.args(["work", &name, "--partitions", "5", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    assert!(stderr(&o).contains(&format!("partition set '{name}' has 4 partitions")), "{}", stderr(&o));

    let mut b = Member::start(url, &name, 4, "B", &script);
    let balanced = wait_log(&name, &log, &mut [&mut a, &mut b], "2 each", |r| {
        owned_by(r, "A").len() == 2 && owned_by(r, "B").len() == 2
    });
    for (p, (token, member)) in &balanced {
        if member == "B" {
            assert!(*token > first[p].0, "partition {p}: token {token} after the hand-off: {balanced:?} {first:?}");
        } else {
            assert_eq!(*token, first[p].0, "partition {p} stayed with A: {balanced:?} {first:?}");
        }
    }
    let h = holders(url, &name);
    let sid_b = read_log(&log).iter().rfind(|l| l.member == "B" && l.start).unwrap().session.clone();
    assert_ne!(sid_a, sid_b);
    for (p, (token, member)) in &balanced {
        let want = if member == "A" { &sid_a } else { &sid_b };
        assert_eq!(h[&u64::from(*p)], (want.clone(), *token), "partition {p}: {h:?}");
    }
    // A's hand-offs: each Revoking ended with its command's exit and a release, before B started it.
    let revoking = a.events("revoking");
    assert_eq!(revoking.len(), 2, "{revoking:?}");

    let events_a = a.stop();
    let after = wait_log(&name, &log, &mut [&mut b], "B runs all 4", |r| owned_by(r, "B").len() == 4);
    for (p, (token, _)) in &after {
        assert!(*token >= balanced[p].0, "partition {p}: {after:?} after {balanced:?}");
        if balanced[p].1 == "A" {
            assert!(*token > balanced[p].0, "partition {p}: token after A left: {after:?} {balanced:?}");
        }
    }
    let events_b = b.stop();
    let running = replay(&name, &read_log(&log));
    assert!(running.is_empty(), "commands still running after both members stopped: {running:?}");

    // The JSON events agree with the log: A was assigned all 4 (tokens as logged), revoked 2 in
    // generation 2, and released its last 2 when stopped; every event names the partition.
    let of = |events: &[Value], kind: &str| -> Vec<Value> {
        events.iter().filter(|e| e["event"] == kind).cloned().collect()
    };
    let assigned_a = of(&events_a, "assigned");
    assert_eq!(assigned_a.len(), 4, "{events_a:#?}");
    for e in &assigned_a {
        let p = e["partition"].as_u64().unwrap() as u32;
        assert_eq!(e["token"], first[&p].0, "{e}");
        assert_eq!(e["lease"], format!("simba.part:{name}:{p}"), "{e}");
        assert!(e["generation"].as_u64().is_some(), "{e}");
    }
    for e in of(&events_a, "revoking") {
        let p = e["partition"].as_u64().unwrap() as u32;
        assert_eq!(balanced[&p].1, "B", "A revoked a partition it kept: {e}");
        assert_eq!(e["token"], first[&p].0, "{e}");
        assert!(e["generation"].as_u64().unwrap() >= 2, "{e}");
    }
    let revoked: Vec<u64> = of(&events_a, "revoked").iter().map(|e| e["partition"].as_u64().unwrap()).collect();
    assert_eq!(revoked.len(), 4, "A released each partition once: {events_a:#?}");
    let exits = of(&events_a, "exit");
    assert_eq!(exits.len(), 4, "{events_a:#?}");
    for e in &exits {
        assert!(e["stopped"].is_string(), "A's commands were all stopped: {e}");
        assert_eq!(e["restart_in_ms"], Value::Null, "{e}");
    }
    assert!(of(&events_a, "lost").is_empty(), "planned hand-offs are never lost: {events_a:#?}");
    assert!(of(&events_b, "lost").is_empty(), "planned hand-offs are never lost: {events_b:#?}");
    assert_eq!(of(&events_b, "assigned").len(), 4, "{events_b:#?}");
    let _ = fs::remove_dir_all(&dir);
}

/// A command that exits on its own while its partition is still assigned is started again, in a
/// new term (a larger token), after a back-off; the exit event says so.
#[allow(dead_code)]
fn an_exited_command_restarts_in_a_new_term(url: &str) {
    let name = support::unique("cli-work-restart");
    let dir = temp_dir("cli-work-restart");
    let log = dir.join("log");
    let script = format!(
        r#"echo "start $SIMBA_PARTITION $SIMBA_TOKEN $MEMBER $SIMBA_LEASE $SIMBA_SESSION" >> {log}
echo "end $SIMBA_PARTITION $SIMBA_TOKEN $MEMBER" >> {log}; exit 3"#,
        log = log.display()
    );
    let mut a = Member::start(url, &name, 1, "A", &script);
    let deadline = Instant::now() + PATIENCE;
    // Three runs ended and simba decided about each (stopping simba sooner would race the third).
    while a.events("exit").len() < 3 {
        assert!(Instant::now() < deadline, "fewer than 3 runs: {:#?}\n{}", read_log(&log), a.lines.seen.join("\n"));
        thread::sleep(Duration::from_millis(20));
    }
    let events = a.stop();
    let lines = read_log(&log);
    replay(&name, &lines);
    let exits: Vec<&Value> = events.iter().filter(|e| e["event"] == "exit").collect();
    assert!(exits.len() >= 3, "{events:#?}");
    for (e, l) in exits.iter().zip(lines.iter().filter(|l| l.start)).take(3) {
        assert_eq!(e["exit_code"], 3, "{e}\n{events:#?}");
        assert_eq!(e["token"], l.token, "{e}\n{events:#?}");
        assert_eq!(e["stopped"], Value::Null, "{e}\n{events:#?}");
        assert!(e["restart_in_ms"].as_u64().is_some_and(|ms| ms >= 1000), "{e}\n{events:#?}");
    }
    let _ = fs::remove_dir_all(&dir);
}

macro_rules! backend_tests {
    ($m:ident, $feature:literal, $var:literal, $default:literal) => {
        #[cfg(feature = $feature)]
        mod $m {
            use serial_test::serial;

            fn url() -> String {
                let url = crate::support::env_or($var, $default);
                crate::support::cli::prepare(&url);
                url
            }

            #[test]
            #[serial($m)]
            fn two_members_share_the_partitions() {
                crate::two_members_share_the_partitions(&url());
            }

            #[test]
            #[serial($m)]
            fn an_exited_command_restarts_in_a_new_term() {
                crate::an_exited_command_restarts_in_a_new_term(&url());
            }
        }
    };
}

backend_tests!(redis, "redis", "SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
backend_tests!(
    redis_cluster,
    "redis",
    "SIMBA_TEST_REDIS_CLUSTER_URL",
    "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"
);
backend_tests!(postgres, "postgres", "SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
backend_tests!(mysql, "mysql", "SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
backend_tests!(zookeeper, "zookeeper", "SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
