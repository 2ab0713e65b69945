//! End-to-end tests of the `simba` binary.
//!
//! Single-process commands run against `memory://` (process-local). The multi-process tests
//! (mutual exclusion between two or more `simba lock` processes, increasing tokens in the children's
//! environment, termination of the child when the lease is lost, elections, groups) need a real
//! server: they run against every network backend compiled in (Redis, PostgreSQL, MySQL/MariaDB),
//! and fail with a clear message when the server is down (`scripts/services up`).

mod support;

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::cli::{
    clean_command, code, json_result, prepare, run, simba, stderr, stdout, temp_dir, wait_output, Lines, BIN,
};

/// Waits until `path` has a non-empty first line and returns the file's content.
fn wait_for_file(path: &Path, child: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Ok(s) = fs::read_to_string(path) {
            if s.ends_with('\n') {
                return s;
            }
        }
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            if let Some(e) = child.stderr.as_mut() {
                let _ = e.read_to_string(&mut err);
            }
            panic!("simba exited with {status} before writing {}: {err}", path.display());
        }
        assert!(Instant::now() < deadline, "{} never appeared", path.display());
        thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------ memory:// (single process)

#[test]
fn lock_gives_the_command_token_lease_and_session() {
    let mut c = simba(Some("memory://"));
    c.args(["lock", "job-1", "--", "sh", "-c"]).arg(
        r#"test "$SIMBA_TOKEN" = 1 && test "$SIMBA_LEASE" = job-1 && test ${#SIMBA_SESSION} = 32 && test -z "$SIMBA_GROUP""#,
    );
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("acquired lock 'job-1' (token 1, session "), "{}", stderr(&o));
    assert!(stderr(&o).contains("memory:// is process-local"), "{}", stderr(&o));
}

/// True when `sig` is ignored in this process (e.g. SIGHUP under `nohup`): simba and its command
/// inherit that, so such a signal never reaches them.
fn ignored_here(sig: nix::sys::signal::Signal) -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    let mask = status
        .lines()
        .find_map(|l| l.strip_prefix("SigIgn:"))
        .and_then(|m| u64::from_str_radix(m.trim(), 16).ok())
        .unwrap_or(0);
    mask & (1 << (sig as i32 - 1)) != 0
}

#[test]
fn quit_and_user_signals_reach_the_command() {
    use nix::sys::signal::Signal;
    for (sig, trap, exit) in [
        (Signal::SIGUSR1, "USR1", 11),
        (Signal::SIGUSR2, "USR2", 12),
        (Signal::SIGQUIT, "QUIT", 13),
        (Signal::SIGHUP, "HUP", 14),
    ] {
        let dir = temp_dir("cli-signals");
        let ready = dir.join("ready");
        let mut child = simba(Some("memory://"))
            .env("RUST_LOG", "debug")
            .args(["lock", "sig", "--", "sh", "-c"])
            .arg(format!("trap 'exit {exit}' {trap}; echo ready > {}; while :; do sleep 0.05; done", ready.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_file(&ready, &mut child);
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(pid, sig).unwrap();
        if ignored_here(sig) {
            // Ignored signals stay ignored (`nohup simba …`): nothing is forwarded, both keep
            // running; SIGTERM still ends them.
            thread::sleep(Duration::from_millis(500));
            assert!(child.try_wait().unwrap().is_none(), "{sig} is ignored here, yet simba exited");
            nix::sys::signal::kill(pid, Signal::SIGTERM).unwrap();
            let (o, _) = wait_output(child, Duration::from_secs(20));
            assert_eq!(code(&o), 128 + Signal::SIGTERM as i32, "{sig} ignored, then SIGTERM: {}", stderr(&o));
        } else {
            let (o, _) = wait_output(child, Duration::from_secs(20));
            assert_eq!(code(&o), exit, "{sig}: {}", stderr(&o));
        }
        let _ = fs::remove_dir_all(&dir);
    }
}

#[test]
fn the_commands_exit_code_is_passed_through() {
    let mut c = simba(Some("memory://"));
    c.args(["lock", "x", "--", "sh", "-c", "exit 42"]);
    assert_eq!(code(&run(c)), 42);
    let mut c = simba(Some("memory://"));
    c.args(["lock", "x", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(code(&run(c)), 128 + 9);
    let mut c = simba(Some("memory://"));
    c.args(["--json", "elect", "e", "--", "sh", "-c", "exit 3"]);
    let o = run(c);
    assert_eq!(code(&o), 3);
    let v = json_result(&o);
    assert_eq!(v["outcome"], "exited");
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["token"], 1);
    let mut c = simba(Some("memory://"));
    c.args(["join", "g", "--", "sh", "-c", r#"test -n "$SIMBA_GROUP" && test -z "$SIMBA_TOKEN" && exit 5"#]);
    assert_eq!(code(&run(c)), 5);
}

#[test]
fn a_command_that_cannot_run() {
    let mut c = simba(Some("memory://"));
    c.args(["lock", "x", "--", "/nonexistent/simba-test-command"]);
    let o = run(c);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    assert!(stderr(&o).contains("cannot run /nonexistent/simba-test-command"), "{}", stderr(&o));
    let dir = temp_dir("cli-noexec");
    let f = dir.join("script");
    fs::write(&f, "#!/bin/sh\n").unwrap();
    let mut c = simba(Some("memory://"));
    c.args(["lock", "x", "--"]).arg(&f);
    assert_eq!(code(&run(c)), 126);
}

/// Finding 9 of issue #36: simba re-executes its running image (as the command's trampoline and
/// watcher), not the file at its path — a `simba` replaced on disk while it waits (an upgrade, a
/// rebuild) used to fail with exit 127 and a message blaming the command, or run the other
/// program. A copy of simba waits for a lock another simba holds; its file is then replaced by a
/// script that would exit 42; the lock is let go, and the waiting simba runs the command.
#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn a_simba_replaced_on_disk_while_it_waits_still_runs_the_command() {
    use std::os::unix::fs::PermissionsExt;
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    prepare(&url);
    let dir = temp_dir("cli-exe");
    let copy = dir.join("simba");
    fs::copy(BIN, &copy).unwrap();
    let name = support::unique("cli-exe");
    let mut holder = holding(&url, &name, "cli-exe-holder");
    let env = simba(Some(&url));
    let mut waiter = clean_command(copy.to_str().unwrap())
        .envs(env.get_envs().filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned()))))
        .args(["lock", &name, "--timeout", "60s", "--", "sh", "-c", "exit 0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Lines::of(&mut waiter);
    lines.wait_for(&format!("waiting for lock '{name}'"));
    fs::remove_file(&copy).unwrap();
    fs::write(&copy, "#!/bin/sh\nexit 42\n").unwrap();
    fs::set_permissions(&copy, fs::Permissions::from_mode(0o755)).unwrap();
    let _ = holder.kill();
    let _ = holder.wait();
    let (o, _) = wait_output(waiter, Duration::from_secs(90));
    assert_eq!(code(&o), 0, "stderr:\n{}", lines.rest().join("\n"));
    let _ = fs::remove_dir_all(&dir);
}

#[test]
fn configuration_errors_exit_78() {
    let o = run({
        let mut c = simba(None);
        c.args(["leader", "x"]);
        c
    });
    assert_eq!(code(&o), 78);
    assert!(stderr(&o).contains("no backend chosen"), "{}", stderr(&o));

    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["leader", "bad name"]);
        c
    });
    assert_eq!(code(&o), 78);
    assert!(stderr(&o).contains("invalid name \"bad name\""), "{}", stderr(&o));

    let o = run({
        let mut c = simba(Some("http://u:hunter2@example.com"));
        c.args(["members", "g"]);
        c
    });
    assert_eq!(code(&o), 78);
    assert!(stderr(&o).contains("unknown scheme \"http\""), "{}", stderr(&o));
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));

    let o = run({
        let mut c = simba(Some("memory://"));
        c.env("SIMBA_RENEW_INTERVAL", "soon").args(["leader", "x"]);
        c
    });
    assert_eq!(code(&o), 78);
    assert!(stderr(&o).contains("SIMBA_RENEW_INTERVAL=\"soon\" is not a duration"), "{}", stderr(&o));

    // --backend contradicting the URL; the password never shows.
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--url", "redis://u:hunter2@127.0.0.1:1", "--backend", "zookeeper", "leader", "x"]);
        c
    });
    assert_eq!(code(&o), 78);
    assert!(stderr(&o).contains("contradicts"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));

    // JSON errors on stdout.
    let o = run({
        let mut c = simba(None);
        c.args(["--json", "leader", "x"]);
        c
    });
    assert_eq!(code(&o), 78);
    let v = json_result(&o);
    assert_eq!(v["error"]["kind"], "config");
    assert_eq!(v["exit_code"], 78);
}

#[test]
fn usage_errors_exit_2_and_help_hides_the_url() {
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["lock", "x"]);
        c
    });
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["lock", "x", "--timeout", "soon", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    let o = run({
        let mut c = simba(Some("redis://u:hunter2@127.0.0.1:6379"));
        c.arg("--help");
        c
    });
    assert_eq!(code(&o), 0);
    let help = stdout(&o);
    assert!(help.contains("Exit codes:") && help.contains("79"), "{help}");
    assert!(!help.contains("hunter2"), "{help}");
}

#[test]
fn leader_members_check_on_memory() {
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["leader", "x"]);
        c
    });
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o).trim(), "x: no holder");
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "leader", "x"]);
        c
    });
    assert_eq!(json_result(&o)["leader"], Value::Null);
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "members", "g"]);
        c
    });
    assert_eq!(json_result(&o)["members"], serde_json::json!([]));
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["check"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("ok    reachable"), "{}", stdout(&o));
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "check"]);
        c
    });
    let v = json_result(&o);
    assert_eq!(v["ok"], true);
    assert_eq!(v["backend"], "memory");
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["purge"]);
        c
    });
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).contains("purged 0 expired sessions"));
}

#[test]
fn schema_print() {
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["schema", "print"]);
        c
    });
    assert_eq!(code(&o), 78);
    assert!(stderr(&o).contains("SQL backends only"), "{}", stderr(&o));
    for (dialect, feature) in [("postgres", cfg!(feature = "postgres")), ("mysql", cfg!(feature = "mysql"))] {
        let o = run({
            let mut c = simba(None);
            c.args(["schema", "print", "--dialect", dialect]);
            c
        });
        if feature {
            assert_eq!(code(&o), 0, "{}", stderr(&o));
            let sql = stdout(&o);
            for t in ["simba_session", "simba_lease", "simba_member", "simba_semaphore"] {
                assert!(sql.contains(t), "{sql}");
            }
        } else {
            assert_eq!(code(&o), 78);
            assert!(stderr(&o).contains(&format!("--features {dialect}")), "{}", stderr(&o));
        }
    }
}

#[cfg(feature = "redis")]
#[test]
fn unreachable_backend_exits_69_without_the_password() {
    let o = leader_at_a_closed_port("redis://default:hunter2@127.0.0.1:1");
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
    let o = run({
        let mut c = simba(Some("redis://default:hunter2@127.0.0.1:1"));
        c.args(["--query-timeout", "300ms", "check"]);
        c
    });
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("fail") && !stdout(&o).contains("hunter2"), "{}", stdout(&o));
}

/// `--json` is a contract: every line simba writes is JSON, log lines and configuration warnings
/// included (`warning` events); usage errors too; `name` names the lock, election or group.
#[test]
fn json_mode_writes_only_json() {
    let all_json = |o: &Output| {
        for l in stderr(o).lines().chain(stdout(o).lines()) {
            serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        }
    };
    let o = run({
        let mut c = simba(Some("memory://"));
        c.env("RUST_LOG", "debug").env("SIMBA_NO_SUCH_SETTING", "1");
        c.args(["--json", "lock", "j", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    all_json(&o);
    assert!(
        stderr(&o).lines().any(|l| l.contains(r#""event":"warning""#) && l.contains("SIMBA_NO_SUCH_SETTING")),
        "{}",
        stderr(&o)
    );
    assert!(stderr(&o).lines().any(|l| l.contains(r#""event":"log""#)), "{}", stderr(&o));
    for args in [&["--json", "lock", "x"][..], &["--json", "lock", "x", "echo", "hi"], &["--json", "nonsense"]] {
        let o = run({
            let mut c = simba(Some("memory://"));
            c.args(args);
            c
        });
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
        all_json(&o);
        let v = json_result(&o);
        assert_eq!(v["error"]["kind"], "usage", "{v}");
        assert_eq!(v["exit_code"], 2, "{v}");
    }
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "join", "g", "--", "true"]);
        c
    });
    all_json(&o);
    assert_eq!(json_result(&o)["name"], "g");
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "members", "g"]);
        c
    });
    assert_eq!(json_result(&o)["name"], "g");
    // A command that cannot be started is its own outcome, before any lock is taken.
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "lock", "x", "--", "/nonexistent/simba-test-command"]);
        c
    });
    assert_eq!(code(&o), 127);
    all_json(&o);
    assert_eq!(json_result(&o)["outcome"], "spawn_failed");
}

/// Flags and variables parse alike, and the common mistakes get a hint.
#[test]
fn flags_and_variables_parse_alike() {
    let leader = |env: &[(&str, &str)], args: &[&str]| {
        let mut c = simba(Some("memory://"));
        for (k, v) in env {
            c.env(k, v);
        }
        c.args(args).args(["leader", "x"]);
        run(c)
    };
    for d in ["5%", "0.05"] {
        let o = leader(&[], &["--drift", d]);
        assert_eq!(code(&o), 0, "--drift {d}: {}", stderr(&o));
        let o = leader(&[("SIMBA_DRIFT", d)], &[]);
        assert_eq!(code(&o), 0, "SIMBA_DRIFT={d}: {}", stderr(&o));
    }
    let o = leader(&[], &["--drift", "5x"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("a percentage like 1%"), "{}", stderr(&o));
    let o = leader(&[("SIMBA_DRIFT", "5x")], &[]);
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    assert!(stderr(&o).contains("a percentage like 1%"), "{}", stderr(&o));

    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["lock", "x", "echo", "hi"]);
        c
    });
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("simba lock x -- echo hi"), "{}", stderr(&o));

    let o = run({
        let mut c = simba(None);
        c.args(["--url", "", "leader", "x"]);
        c
    });
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    assert!(stderr(&o).contains("--url is empty"), "{}", stderr(&o));

    let o = run({
        let mut c = simba(Some("postgres://postgres@127.0.0.1:1/test"));
        c.args(["schema", "print", "--dialect", "mysql"]);
        c
    });
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    assert!(stderr(&o).contains("--dialect mysql contradicts"), "{}", stderr(&o));

    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["members", "nobody-here"]);
        c
    });
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o).trim(), "nobody-here: no members");
}

/// `leader` against `url`, whose port 1 is closed: exit 69, and the message says what a TCP
/// connection says (not just "timeout").
#[allow(dead_code)]
fn leader_at_a_closed_port(url: &str) -> Output {
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--query-timeout", "300ms", "leader", "x"]);
        c
    });
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    assert!(stderr(&o).contains("127.0.0.1:1: connection refused"), "{}", stderr(&o));
    o
}

#[cfg(feature = "zookeeper")]
#[test]
fn a_wrong_zookeeper_port_says_why() {
    leader_at_a_closed_port("zookeeper://127.0.0.1:1/simba-test");
}

// ------------------------------------------------------------------ real servers (multi-process)

#[cfg(not(any(feature = "redis", feature = "postgres", feature = "mysql")))]
#[test]
fn a_network_backend_is_compiled_for_the_multi_process_tests() {
    panic!(
        "the multi-process CLI tests need a network backend: run with --features cli,redis (and/or postgres, mysql)"
    );
}

/// Closes `sid` on the backend behind its simba process's back.
#[allow(dead_code)]
fn close_behind_its_back(url: &str, sid: &str) {
    let backend = simba::Config::from_url(url).unwrap().connect().unwrap();
    backend.close_session(&simba::SessionId::parse(sid.trim()).unwrap()).unwrap();
}

/// Four `simba lock` processes on one name: their commands never overlap, each sees a larger token.
#[allow(dead_code)]
fn mutual_exclusion_and_increasing_tokens(url: &str) {
    let name = support::unique("cli-mutex");
    let dir = temp_dir("cli-mutex");
    let log = dir.join("log");
    let script = format!(
        r#"echo "start $SIMBA_TOKEN $SIMBA_SESSION" >> {log}; sleep 0.3; echo "end $SIMBA_TOKEN $SIMBA_SESSION" >> {log}"#,
        log = log.display()
    );
    let children: Vec<Child> = (0..4)
        .map(|_| {
            let mut c = simba(Some(url));
            c.args(["lock", &name, "--", "sh", "-c", &script]).stdout(Stdio::null()).stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for ch in children {
        let (o, _) = wait_output(ch, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let text = fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 8, "{text}");
    let mut last_token = 0u64;
    let mut sessions = std::collections::HashSet::new();
    for pair in lines.chunks(2) {
        // Each start is followed by its own end: no two commands ever ran at the same time.
        assert_eq!(pair[0][0], "start", "{text}");
        assert_eq!(pair[1][0], "end", "overlapping critical sections:\n{text}");
        assert_eq!(pair[0][1..], pair[1][1..], "{text}");
        let token: u64 = pair[0][1].parse().unwrap();
        assert!(token > last_token, "tokens must increase:\n{text}");
        last_token = token;
        assert!(matches!(pair[0][2].len(), 16 | 32), "session ids are 16 or 32 hex digits:\n{text}");
        assert!(sessions.insert(pair[0][2].to_string()), "one session per process:\n{text}");
    }
}

/// A second `simba lock` gives up after `--timeout` (exit 75) and says who holds the lock; the
/// holder's simba forwards SIGTERM to its command.
#[allow(dead_code)]
fn timeout_names_the_holder_and_sigterm_is_forwarded(url: &str) {
    let name = support::unique("cli-timeout");
    let dir = temp_dir("cli-timeout");
    let info = dir.join("info");
    let mut holder = simba(Some(url))
        .args(["lock", &name, "--", "sh", "-c"])
        .arg(format!(r#"echo "$SIMBA_SESSION $SIMBA_TOKEN" > {}; exec sleep 30"#, info.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = wait_for_file(&info, &mut holder);
    let (sid, token) = text.trim().split_once(' ').unwrap();
    let o = run({
        let mut c = simba(Some(url));
        c.args(["lock", &name, "--timeout", "1s", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 75, "{}", stderr(&o));
    let expected = format!("waiting for lock '{name}' held by {sid} (token {token}, simba lock pid=");
    assert!(stderr(&o).contains(&expected), "expected {expected:?} in {}", stderr(&o));
    assert!(stderr(&o).contains(&format!("gave up on lock '{name}' after")), "{}", stderr(&o));
    // `leader` sees the same holder.
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "leader", &name]);
        c
    });
    let v = json_result(&o);
    assert_eq!(v["leader"]["session"], sid);
    assert_eq!(v["leader"]["token"].as_u64().unwrap().to_string(), token);
    // SIGINT while waiting ends the wait: exit 128 + 2, and the command never runs.
    let ran = dir.join("ran");
    let waiter = simba(Some(url))
        .args(["lock", &name, "--", "sh", "-c"])
        .arg(format!("touch {}", ran.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    thread::sleep(Duration::from_millis(1500));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(waiter.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let (o, _) = wait_output(waiter, Duration::from_secs(20));
    assert_eq!(code(&o), 128 + 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("interrupted by SIGINT while waiting"), "{}", stderr(&o));
    assert!(!ran.exists());
    // SIGTERM to simba reaches the command (sleep dies of it: 128 + 15).
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let (o, _) = wait_output(holder, Duration::from_secs(20));
    assert_eq!(code(&o), 128 + 15, "{}", stderr(&o));
    // The lock was released on the way out.
    let o = run({
        let mut c = simba(Some(url));
        c.args(["lock", &name, "--timeout", "5s", "--", "sh", "-c", "echo $SIMBA_TOKEN"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).trim().parse::<u64>().unwrap() > token.parse::<u64>().unwrap());
}

/// When the lease is lost, the command gets SIGTERM; simba exits 79.
#[allow(dead_code)]
fn lost_lease_terminates_the_command(url: &str) {
    lost_terminates_the_command(url, "lock");
}

/// When leadership is lost, the command gets SIGTERM; simba exits 79.
#[allow(dead_code)]
fn lost_leadership_terminates_the_command(url: &str) {
    lost_terminates_the_command(url, "elect");
}

/// When the membership's session ends, the command gets SIGTERM; simba exits 79.
#[allow(dead_code)]
fn lost_membership_terminates_the_command(url: &str) {
    lost_terminates_the_command(url, "join");
}

#[allow(dead_code)]
fn lost_terminates_the_command(url: &str, sub: &str) {
    let name = support::unique("cli-lost");
    let dir = temp_dir("cli-lost");
    let (sidf, termf) = (dir.join("sid"), dir.join("term"));
    let mut child = simba(Some(url))
        .args(["--json", sub, &name, "--grace", "10s", "--", "sh", "-c"])
        .arg(format!(
            r#"trap 'echo term > {term}; exit 0' TERM; echo $SIMBA_SESSION > {sid}; while :; do sleep 0.1; done"#,
            term = termf.display(),
            sid = sidf.display()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sid = wait_for_file(&sidf, &mut child);
    close_behind_its_back(url, &sid);
    let (o, elapsed) = wait_output(child, Duration::from_secs(30));
    assert_eq!(code(&o), 79, "{sub}: {}", stderr(&o));
    assert!(elapsed < Duration::from_secs(10), "terminated only after {elapsed:?} (grace is 10s): {}", stderr(&o));
    assert_eq!(fs::read_to_string(&termf).unwrap().trim(), "term", "the command did not get SIGTERM");
    let v = json_result(&o);
    assert_eq!(v["outcome"], "lost");
    assert_eq!(v["command_exit_code"], 0);
    assert!(stderr(&o).contains(r#""event":"lost""#), "{}", stderr(&o));
}

/// A command that ignores SIGTERM is killed with SIGKILL after the grace period.
#[allow(dead_code)]
fn a_command_ignoring_sigterm_is_killed(url: &str) {
    let name = support::unique("cli-kill");
    let dir = temp_dir("cli-kill");
    let sidf = dir.join("sid");
    let mut child = simba(Some(url))
        .args(["--json", "lock", &name, "--grace", "1s", "--", "sh", "-c"])
        .arg(format!(r#"trap '' TERM; echo $SIMBA_SESSION > {sid}; exec sleep 60"#, sid = sidf.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sid = wait_for_file(&sidf, &mut child);
    let closed = Instant::now();
    close_behind_its_back(url, &sid);
    let (o, _) = wait_output(child, Duration::from_secs(30));
    assert!(closed.elapsed() >= Duration::from_secs(1), "SIGKILL came before the grace period");
    assert_eq!(code(&o), 79, "{}", stderr(&o));
    let v = json_result(&o);
    assert_eq!(v["outcome"], "lost");
    assert_eq!(v["command_exit_code"], 128 + 9, "{v}");
    assert!(stderr(&o).contains("sending SIGKILL"), "{}", stderr(&o));
}

/// Two `simba elect` processes: the second leads after the first's command ends, with a larger token.
#[allow(dead_code)]
fn elect_takes_turns(url: &str) {
    let name = support::unique("cli-elect");
    let dir = temp_dir("cli-elect");
    let log = dir.join("log");
    let script = format!(r#"echo "$SIMBA_TOKEN $SIMBA_SESSION" >> {}; sleep 2"#, log.display());
    let spawn = || {
        simba(Some(url))
            .args(["elect", &name, "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut first = spawn();
    let text = wait_for_file(&log, &mut first);
    let second = spawn();
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "leader", &name]);
        c
    });
    let first_sid = text.split_whitespace().nth(1).unwrap().to_string();
    assert_eq!(json_result(&o)["leader"]["session"], first_sid.as_str());
    let (o1, _) = wait_output(first, Duration::from_secs(30));
    let (o2, _) = wait_output(second, Duration::from_secs(30));
    assert_eq!((code(&o1), code(&o2)), (0, 0), "{} / {}", stderr(&o1), stderr(&o2));
    for o in [&o1, &o2] {
        let err = stderr(o);
        // Issue #20 item 7: a normal elect resigns at the end, which is no warning, and no
        // message shows Rust debug formatting.
        assert!(
            !err.contains("WARN") && !err.contains("SessionId(") && !err.contains("Some("),
            "a normal elect ends without a warning: {err}"
        );
    }
    assert!(
        stderr(&o2).contains(&format!("waiting for leadership of '{name}' held by {first_sid}")),
        "{}",
        stderr(&o2)
    );
    let text = fs::read_to_string(&log).unwrap();
    let rows: Vec<(u64, String)> = text
        .lines()
        .map(|l| {
            let (t, s) = l.split_once(' ').unwrap();
            (t.parse().unwrap(), s.to_string())
        })
        .collect();
    assert_eq!(rows.len(), 2, "{text}");
    assert!(rows[1].0 > rows[0].0 && rows[1].1 != rows[0].1, "{text}");
}

/// `simba join` makes the session a member while the command runs; `simba members` lists it.
#[allow(dead_code)]
fn join_and_members(url: &str) {
    let group = support::unique("cli-group");
    let dir = temp_dir("cli-group");
    let spawn = |i: usize| {
        let f = dir.join(format!("sid{i}"));
        let child = simba(Some(url))
            .args(["join", &group, "--", "sh", "-c"])
            .arg(format!(r#"echo $SIMBA_SESSION > {}; sleep 2"#, f.display()))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        (child, f)
    };
    let (mut a, fa) = spawn(1);
    let (mut b, fb) = spawn(2);
    let sa = wait_for_file(&fa, &mut a).trim().to_string();
    let sb = wait_for_file(&fb, &mut b).trim().to_string();
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "members", &group]);
        c
    });
    let v = json_result(&o);
    let listed: Vec<&str> = v["members"].as_array().unwrap().iter().map(|m| m["session"].as_str().unwrap()).collect();
    let mut expected = vec![sa.as_str(), sb.as_str()];
    expected.sort_unstable();
    assert_eq!(listed, expected, "{v}");
    assert!(v["members"][0]["metadata"].as_str().unwrap().starts_with("simba join pid="), "{v}");
    for ch in [a, b] {
        let (o, _) = wait_output(ch, Duration::from_secs(30));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
    }
    let o = run({
        let mut c = simba(Some(url));
        c.args(["members", &group]);
        c
    });
    assert_eq!(stdout(&o).trim(), format!("{group}: no members"), "members left behind");
}

/// True once `pid` no longer runs (gone, or a zombie nobody reaped yet).
#[allow(dead_code)]
fn process_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

/// `simba` dies by SIGKILL while its command runs: the command gets SIGTERM (pdeath signal and
/// the watcher), and one that ignores SIGTERM is killed after the grace period.
#[allow(dead_code)]
fn a_killed_simba_takes_its_command_down(url: &str) {
    use nix::sys::signal::{kill, killpg, Signal};
    use nix::unistd::Pid;
    for ignore_term in [false, true] {
        let name = support::unique("cli-orphan");
        let dir = temp_dir("cli-orphan");
        let (pidf, termf) = (dir.join("pid"), dir.join("term"));
        let script = if ignore_term {
            format!("trap '' TERM; echo $$ > {pid}; exec sleep 120", pid = pidf.display())
        } else {
            format!(
                "trap 'echo term > {term}; exit 0' TERM; echo $$ > {pid}; while :; do sleep 0.05; done",
                term = termf.display(),
                pid = pidf.display()
            )
        };
        // simba pauses between starting the command's process and its watcher (the test seam of
        // the internal-testing feature): a command that ran before its watcher was up outlived a
        // simba killed then, when it ignores SIGTERM.
        let mut child = simba(Some(url))
            .env("SIMBA_INTERNAL_PAUSE_BEFORE_WATCHER_MS", "300")
            .args(["lock", &name, "--grace", "1s", "--", "sh", "-c", &script])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let pid: i32 = wait_for_file(&pidf, &mut child).trim().parse().unwrap();
        kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
        child.wait().unwrap();
        // Safety net only: the assertions are on what the command saw, not on speed.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !process_gone(pid) && Instant::now() < deadline {
            thread::sleep(Duration::from_millis(20));
        }
        let gone = process_gone(pid);
        if !gone {
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
        }
        assert!(gone, "the command (pid {pid}, ignoring SIGTERM: {ignore_term}) outlived the killed simba");
        if !ignore_term {
            assert_eq!(
                fs::read_to_string(&termf).unwrap_or_default().trim(),
                "term",
                "the command did not get SIGTERM"
            );
        }
        let _ = fs::remove_dir_all(&dir);
    }
}

/// A SIGSTOP longer than the lease while *waiting* is no loss: simba opens a new session, keeps
/// waiting and runs the command once the lock (leadership) is free.
#[allow(dead_code)]
fn a_wait_survives_a_stop_longer_than_the_lease(url: &str) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    for sub in ["lock", "elect"] {
        let name = support::unique("cli-stop");
        let dir = temp_dir("cli-stop");
        let (ready, release, ran) = (dir.join("ready"), dir.join("release"), dir.join("ran"));
        let mut holder = simba(Some(url))
            .args([sub, &name, "--", "sh", "-c"])
            .arg(format!(
                "echo $SIMBA_SESSION > {ready}; while [ ! -e {release} ]; do sleep 0.05; done",
                ready = ready.display(),
                release = release.display()
            ))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for_file(&ready, &mut holder);
        let mut waiter = simba(Some(url))
            .args(["--json", sub, &name, "--", "sh", "-c"])
            .arg(format!("echo $SIMBA_SESSION > {}", ran.display()))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = Lines::of(&mut waiter);
        lines.wait_for(r#""event":"waiting""#);
        let wpid = Pid::from_raw(waiter.id() as i32);
        kill(wpid, Signal::SIGSTOP).unwrap();
        // Stopped for longer than the 2 s lease: the session's local deadline passes meanwhile.
        thread::sleep(Duration::from_secs(3));
        kill(wpid, Signal::SIGCONT).unwrap();
        let line = lines.wait_for(r#""event":"new_session""#);
        let ev: Value = serde_json::from_str(&line).unwrap();
        assert!(ran.metadata().is_err(), "the command ran while the lock was held");
        fs::write(&release, "").unwrap();
        let (o, _) = wait_output(holder, Duration::from_secs(30));
        assert_eq!(code(&o), 0, "holder: {}", stderr(&o));
        let (o, _) = wait_output(waiter, Duration::from_secs(30));
        let rest = lines.rest();
        assert_eq!(code(&o), 0, "{sub} waiter: {}", rest.join("\n"));
        assert_eq!(fs::read_to_string(&ran).unwrap().trim(), ev["session"].as_str().unwrap(), "{line}");
        assert_ne!(ev["session"], ev["expired_session"], "{line}");
        assert_eq!(json_result(&o)["outcome"], "exited");
        let _ = fs::remove_dir_all(&dir);
    }
}

/// `--timeout 0s` on a free lock is one attempt, and it succeeds.
#[allow(dead_code)]
fn a_zero_timeout_takes_a_free_lock(url: &str) {
    zero_timeout_on_a_free_name(url, "lock");
}

/// `--timeout 0s` on a free election is one attempt, and it wins (needs `wait_elected` to make at
/// least one attempt whatever the deadline).
#[allow(dead_code)]
fn a_zero_timeout_wins_a_free_election(url: &str) {
    zero_timeout_on_a_free_name(url, "elect");
}

/// `simba SUB NAME --timeout 0s` on a free name: one attempt, and it succeeds; on a held name the
/// one attempt finds the holder and gives up (exit 75).
#[allow(dead_code)]
fn zero_timeout_on_a_free_name(url: &str, sub: &str) {
    let name = support::unique("cli-zero");
    let zero = || {
        let mut c = simba(Some(url));
        c.args(["--json", sub, &name, "--timeout", "0s", "--", "true"]);
        run(c)
    };
    let o = zero();
    assert_eq!(code(&o), 0, "{sub}: {}", stderr(&o));
    let dir = temp_dir("cli-zero");
    let sidf = dir.join("sid");
    let mut holder = simba(Some(url))
        .args([sub, &name, "--", "sh", "-c"])
        .arg(format!("echo $SIMBA_SESSION > {}; exec sleep 30", sidf.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let sid = wait_for_file(&sidf, &mut holder);
    let o = zero();
    assert_eq!(code(&o), 75, "{sub}: {}", stderr(&o));
    assert_eq!(json_result(&o)["outcome"], "timeout");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = wait_output(holder, Duration::from_secs(20));
    assert!(stderr(&o).contains(sid.trim()), "{sub}: the holder is not named: {}", stderr(&o));
    let _ = fs::remove_dir_all(&dir);
}

/// A command that cannot be started is `spawn_failed`, found before the lock is taken: the lock's
/// token does not move. A command that exits 127 by itself is `exited`.
#[allow(dead_code)]
fn a_command_typo_never_takes_the_lock(url: &str) {
    let name = support::unique("cli-typo");
    let lock = |cmd: &[&str]| {
        let mut c = simba(Some(url));
        c.args(["--json", "lock", &name, "--"]).args(cmd);
        run(c)
    };
    let o = lock(&["true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let first = json_result(&o)["token"].as_u64().unwrap();
    let o = lock(&["/nonexistent/simba-typo"]);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    let v = json_result(&o);
    assert_eq!(v["outcome"], "spawn_failed", "{v}");
    let o = lock(&["simba-no-such-command-anywhere"]);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    assert_eq!(json_result(&o)["outcome"], "spawn_failed");
    let o = lock(&["sh", "-c", "exit 127"]);
    assert_eq!(code(&o), 127, "{}", stderr(&o));
    let v = json_result(&o);
    assert_eq!(v["outcome"], "exited", "{v}");
    // ZooKeeper tokens come from the ensemble's transaction ids: they grow, but not one by one.
    if !url.starts_with("zookeeper") {
        assert_eq!(v["token"].as_u64().unwrap(), first + 1, "a command typo consumed a token: {v}");
    }
}

/// A `simba lock` that holds `name` (it has the lock when this returns) until it is killed.
fn holding(url: &str, name: &str, tag: &str) -> Child {
    let dir = temp_dir(tag);
    let ready = dir.join("ready");
    let mut holder = simba(Some(url))
        .args(["lock", name, "--", "sh", "-c"])
        .arg(format!("echo > {}; exec sleep 30", ready.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ready, &mut holder);
    // The holder wrote its file and never looks at it again.
    let _ = fs::remove_dir_all(&dir);
    holder
}

/// `simba lock` registers for the release where its backend's `lease_registration` says: where
/// the registration checks the lease itself (ZooKeeper), a lock found free makes none and a
/// busy attempt is followed by one; where it does not (Redis, PostgreSQL), one goes before every
/// attempt; without push (MySQL), none. Seen in the order of the wait's own stderr (its debug
/// log and its progress lines, written by one thread).
#[allow(dead_code)]
fn a_wait_registers_where_its_backend_says(url: &str) {
    const REGISTERING: &str = "registering for the release of lock";
    let registration = simba::Config::from_url(url).unwrap().connect().unwrap().capabilities().lease_registration();
    let logged = |args: &[&str]| {
        run({
            let mut c = simba(Some(url));
            c.env("RUST_LOG", "warn,simba=debug").args(args);
            c
        })
    };
    let name = support::unique("cli-reg");
    let o = logged(&["lock", &name, "--", "true"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(
        stderr(&o).matches(REGISTERING).count(),
        usize::from(registration.before_attempt()),
        "{registration:?}: registrations of an uncontended lock:\n{}",
        stderr(&o)
    );
    let mut holder = holding(url, &name, "cli-reg");
    let o = logged(&["lock", &name, "--timeout", "1s", "--", "true"]);
    let _ = holder.kill();
    let _ = holder.wait();
    assert_eq!(code(&o), 75, "{}", stderr(&o));
    let err = stderr(&o);
    let busy = err.find(&format!("waiting for lock '{name}'")).expect("the busy attempt's progress line");
    let registered = err.find(REGISTERING);
    match registered {
        None => assert!(
            !registration.before_attempt() && !registration.after_busy(),
            "{registration:?}: no registration:\n{err}"
        ),
        Some(at) if registration.before_attempt() => {
            assert!(at < busy, "{registration:?}: registered after the attempt:\n{err}")
        }
        Some(at) => assert!(
            registration.after_busy() && at > busy,
            "{registration:?}: registered before the busy attempt:\n{err}"
        ),
    }
}

/// `--json`: a wait interrupted by a signal still ends with a result line.
#[allow(dead_code)]
fn an_interrupted_wait_ends_with_a_json_result(url: &str) {
    let name = support::unique("cli-int");
    let holder = holding(url, &name, "cli-int");
    let mut waiter = simba(Some(url))
        .args(["--json", "lock", &name, "--", "true"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Lines::of(&mut waiter);
    lines.wait_for(r#""event":"waiting""#);
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(waiter.id() as i32), nix::sys::signal::Signal::SIGINT).unwrap();
    let (o, _) = wait_output(waiter, Duration::from_secs(20));
    assert_eq!(code(&o), 130);
    for l in lines.rest() {
        serde_json::from_str::<Value>(&l).unwrap_or_else(|e| panic!("stderr line not JSON ({e}): {l}"));
    }
    let v = json_result(&o);
    assert_eq!(v["outcome"], "interrupted", "{v}");
    assert_eq!(v["signal"], "SIGINT", "{v}");
    assert_eq!(v["exit_code"], 130, "{v}");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let _ = wait_output(holder, Duration::from_secs(20));
}

/// Redis `WAIT` for a replica that does not exist: every acquire takes the whole query timeout
/// and fails. simba lets each attempt run to its bound and reports the real error (not a
/// timeout), and never names its own session as the holder it waits for.
#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn a_slow_failing_acquire_reports_its_own_error() {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    prepare(&url);
    let name = support::unique("cli-wait-replicas");
    let marker = support::unique("me");
    let o = run({
        let mut c = simba(Some(&url));
        c.env("SIMBA_REDIS_WAIT_REPLICAS", "1");
        c.args(["--metadata", &marker, "lock", &name, "--timeout", "2s", "--", "true"]);
        c
    });
    let err = stderr(&o);
    assert_eq!(code(&o), 69, "{err}");
    assert!(err.contains("of 1 redis replicas acknowledged"), "{err}");
    assert!(!err.contains(&marker), "simba named itself as the holder: {err}");
    // The same for an election: its background attempts report their real error.
    let o = run({
        let mut c = simba(Some(&url));
        c.env("SIMBA_REDIS_WAIT_REPLICAS", "1");
        c.args(["--metadata", &marker, "elect", &name, "--timeout", "2s", "--", "true"]);
        c
    });
    let err = stderr(&o);
    assert_eq!(code(&o), 69, "elect: {err}");
    assert!(err.contains("of 1 redis replicas acknowledged"), "elect: {err}");
    assert!(!err.contains(&marker), "simba named itself as the leader: {err}");
}

// ------------------------------------------------------------------ semaphores: `lock -n N`, `holders`

/// `lock -n N` gives the command its permit (token, slot, the slot's lease name, session) and
/// reports it; a plain `lock` (and `join`) never passes on a SIMBA_SLOT from its own environment.
#[test]
fn lock_n_gives_the_command_token_slot_lease_and_session() {
    let mut c = simba(Some("memory://"));
    c.args(["--json", "lock", "-n", "3", "pool", "--", "sh", "-c"]).arg(
        r#"test "$SIMBA_TOKEN" = 1 && test "$SIMBA_LEASE" = "simba.sem:pool:$SIMBA_SLOT" && test "$SIMBA_SLOT" -ge 0 && test "$SIMBA_SLOT" -lt 3 && test ${#SIMBA_SESSION} = 32 && test -z "$SIMBA_GROUP""#,
    );
    c.env("SIMBA_GROUP", "outer");
    let o = run(c);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json_result(&o);
    assert_eq!(v["outcome"], "exited", "{v}");
    assert_eq!(v["name"], "pool", "{v}");
    assert_eq!(v["token"], 1, "{v}");
    let slot = v["slot"].as_u64().unwrap_or_else(|| panic!("no slot: {v}"));
    assert_eq!(v["lease"], format!("simba.sem:pool:{slot}"), "{v}");
    let acquired = stderr(&o).lines().find(|l| l.contains(r#""event":"acquired""#)).map(str::to_string);
    let acquired: Value = serde_json::from_str(&acquired.unwrap_or_else(|| panic!("{}", stderr(&o)))).unwrap();
    assert_eq!(acquired["permits"], 3, "{acquired}");
    assert_eq!(acquired["slot"], slot, "{acquired}");

    for args in [&["lock", "plain"][..], &["join", "g"]] {
        let o = run({
            let mut c = simba(Some("memory://"));
            c.env("SIMBA_SLOT", "7").args(args).args(["--", "sh", "-c", r#"test -z "$SIMBA_SLOT""#]);
            c
        });
        assert_eq!(code(&o), 0, "{args:?} passed SIMBA_SLOT on: {}", stderr(&o));
    }
    let o = run({
        let mut c = simba(Some("memory://"));
        c.env("SIMBA_TOKEN", "9").args([
            "lock",
            "-n",
            "1",
            "one",
            "--",
            "sh",
            "-c",
            r#"test "$SIMBA_SLOT" = 0 && test "$SIMBA_TOKEN" = 1"#,
        ]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("acquired permit 0 of semaphore 'one' (token 1, session "), "{}", stderr(&o));
}

/// A bad permit count or semaphore name is a configuration error found before any I/O: the URL
/// points at a closed port, yet the answer is 78 (not 69) and names what is allowed. `-n` is
/// `lock`'s only; a count that is no number is a usage error.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql"))]
#[test]
fn lock_n_bad_input_exits_78_before_any_io() {
    // A compiled-in network backend at a closed port.
    let closed = if cfg!(feature = "redis") {
        "redis://127.0.0.1:1"
    } else if cfg!(feature = "postgres") {
        "postgres://simba@127.0.0.1:1/simba"
    } else {
        "mysql://root@127.0.0.1:1/simba"
    };
    let long = "s".repeat(simba::semaphore::MAX_SEMAPHORE_NAME_LEN + 1);
    for (n, name, expected) in [
        ("0", "pool", "-n 0 is out of range: a semaphore has 1 to 1000 permits"),
        ("1001", "pool", "-n 1001 is out of range: a semaphore has 1 to 1000 permits"),
        ("99999999999", "pool", "-n 99999999999 is out of range: a semaphore has 1 to 1000 permits"),
        ("2", long.as_str(), "semaphore names are at most 114 characters"),
        ("2", "bad name", "invalid name \"bad name\""),
    ] {
        let o = run({
            let mut c = simba(Some(closed));
            c.args(["--query-timeout", "300ms", "lock", "-n", n, name, "--", "true"]);
            c
        });
        assert_eq!(code(&o), 78, "-n {n} {name}: {}", stderr(&o));
        assert!(stderr(&o).contains(expected), "expected {expected:?} in {}", stderr(&o));
        let o = run({
            let mut c = simba(Some(closed));
            c.args(["--json", "--query-timeout", "300ms", "lock", "--permits", n, name, "--", "true"]);
            c
        });
        assert_eq!(code(&o), 78, "--permits {n} {name}: {}", stderr(&o));
        assert_eq!(json_result(&o)["error"]["kind"], "config");
    }
    let o = run({
        let mut c = simba(Some(closed));
        c.args(["holders", &long]);
        c
    });
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    for args in [&["lock", "-n", "two", "pool", "--", "true"][..], &["elect", "-n", "2", "pool", "--", "true"]] {
        let o = run({
            let mut c = simba(Some("memory://"));
            c.args(args);
            c
        });
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
    }
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["lock", "--help"]);
        c
    });
    assert!(stdout(&o).contains("--permits <N>") && stdout(&o).contains("SIMBA_SLOT"), "{}", stdout(&o));
}

/// `holders` on a semaphore nobody used says so, in both output formats.
#[test]
fn holders_of_an_unknown_semaphore() {
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["holders", "pool"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).starts_with("pool: no such semaphore"), "{}", stdout(&o));
    let o = run({
        let mut c = simba(Some("memory://"));
        c.args(["--json", "holders", "pool"]);
        c
    });
    let v = json_result(&o);
    assert_eq!(v["permits"], Value::Null, "{v}");
    assert_eq!(v["holders"], serde_json::json!([]), "{v}");
}

/// One line of a shared log: `start|end SLOT TOKEN SESSION [LEASE]`.
#[allow(dead_code)]
#[derive(Debug, Clone, PartialEq)]
struct Entry {
    start: bool,
    slot: u32,
    token: u64,
    session: String,
    lease: Option<String>,
}

#[allow(dead_code)]
fn read_entries(log: &Path) -> Vec<Entry> {
    let text = fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| {
            let w: Vec<&str> = l.split(' ').collect();
            assert!(w.len() >= 4, "bad log line {l:?} in:\n{text}");
            Entry {
                start: w[0] == "start",
                slot: w[1].parse().unwrap_or_else(|e| panic!("slot {:?}: {e}\n{text}", w[1])),
                token: w[2].parse().unwrap_or_else(|e| panic!("token {:?}: {e}\n{text}", w[2])),
                session: w[3].to_string(),
                lease: w.get(4).map(|s| s.to_string()),
            }
        })
        .collect()
}

/// Waits until `log` has `starts` start lines (the processes in `children` still run).
#[allow(dead_code)]
fn wait_for_starts(log: &Path, starts: usize, children: &mut [Child]) -> Vec<Entry> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let e = read_entries(log);
        if e.iter().filter(|e| e.start).count() >= starts {
            return e;
        }
        for c in children.iter_mut() {
            if let Ok(Some(status)) = c.try_wait() {
                panic!("a simba process exited with {status} before {starts} commands started: {e:?}");
            }
        }
        assert!(Instant::now() < deadline, "{starts} commands never started: {e:?}");
        thread::sleep(Duration::from_millis(20));
    }
}

/// The stderr lines of a child, collected by a thread as they come.
#[allow(dead_code)]
fn collect_stderr(child: &mut Child) -> std::sync::Arc<std::sync::Mutex<Vec<String>>> {
    use std::io::BufRead;
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let err = child.stderr.take().expect("stderr piped");
    let l = lines.clone();
    thread::spawn(move || {
        for line in std::io::BufReader::new(err).lines().map_while(Result::ok) {
            l.lock().unwrap().push(line);
        }
    });
    lines
}

/// N + 1 `simba lock -n N` processes: N commands run at once on distinct slots while the last
/// process waits (it reports every slot held by the other two); it runs only after one of them
/// ended, on that one's slot with a larger token. The commands end only when the test lets them,
/// so the order in the shared log is causal.
#[allow(dead_code)]
fn semaphore_admits_n_at_once(url: &str) {
    const N: usize = 2;
    let name = support::unique("cli-sem");
    let dir = temp_dir("cli-sem");
    let log = dir.join("log");
    let script = format!(
        r#"echo "start $SIMBA_SLOT $SIMBA_TOKEN $SIMBA_SESSION $SIMBA_LEASE" >> {log}
           while [ ! -e {dir}/go-$SIMBA_SESSION ]; do sleep 0.05; done
           echo "end $SIMBA_SLOT $SIMBA_TOKEN $SIMBA_SESSION" >> {log}"#,
        log = log.display(),
        dir = dir.display()
    );
    let mut children: Vec<Child> = (0..=N)
        .map(|_| {
            let mut c = simba(Some(url));
            c.args(["--json", "lock", "-n", &N.to_string(), &name, "--", "sh", "-c", &script])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    let errs: Vec<_> = children.iter_mut().map(collect_stderr).collect();
    let first = wait_for_starts(&log, N, &mut children);
    assert_eq!(first.len(), N, "more than {N} commands started at once: {first:?}");
    let mut slots: Vec<u32> = first.iter().map(|e| e.slot).collect();
    slots.sort_unstable();
    assert_eq!(slots, (0..N as u32).collect::<Vec<_>>(), "distinct slots: {first:?}");
    for e in &first {
        assert!(e.token > 0, "{e:?}");
        assert_eq!(e.lease.as_deref(), Some(format!("simba.sem:{name}:{}", e.slot).as_str()), "{e:?}");
    }
    // The third process tried while both slots were held: it reports both holders as it waits.
    let deadline = Instant::now() + Duration::from_secs(60);
    let waiting = loop {
        let seen = errs.iter().flat_map(|e| e.lock().unwrap().clone()).find(|l| {
            l.contains(r#""event":"waiting""#)
                && first.iter().all(|e| l.contains(&format!(r#""session":"{}""#, e.session)))
        });
        if let Some(l) = seen {
            break l;
        }
        assert!(Instant::now() < deadline, "no process reported waiting for both holders: {:?}", errs);
        thread::sleep(Duration::from_millis(20));
    };
    let w: Value = serde_json::from_str(&waiting).unwrap();
    assert_eq!(w["permits"], N, "{w}");
    // `holders` shows the same two.
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "holders", &name]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let h = json_result(&o);
    assert_eq!(h["permits"], N, "{h}");
    let shown: Vec<(u64, String, u64)> = h["holders"]
        .as_array()
        .unwrap_or_else(|| panic!("{h}"))
        .iter()
        .map(|x| {
            (x["slot"].as_u64().unwrap(), x["session"].as_str().unwrap().to_string(), x["token"].as_u64().unwrap())
        })
        .collect();
    let mut expected: Vec<(u64, String, u64)> =
        first.iter().map(|e| (u64::from(e.slot), e.session.clone(), e.token)).collect();
    expected.sort();
    assert_eq!(shown, expected, "{h}");
    let human = run({
        let mut c = simba(Some(url));
        c.args(["holders", &name]);
        c
    });
    let text = stdout(&human);
    assert!(text.starts_with(&format!("{name}: {N} of {N} permits held")), "{text}");
    for e in &first {
        assert!(text.contains(&format!("slot {}: session {} (token {}", e.slot, e.session, e.token)), "{text}");
    }
    // Let the first one end: the waiting process takes its slot, with a larger token.
    let freed = first[0].clone();
    fs::write(dir.join(format!("go-{}", freed.session)), "").unwrap();
    let all = wait_for_starts(&log, N + 1, &mut []);
    let third = all.iter().filter(|e| e.start).nth(N).cloned().unwrap();
    let freed_end = all.iter().position(|e| !e.start && e.session == freed.session);
    let third_start = all.iter().position(|e| *e == third).unwrap();
    assert!(freed_end.is_some_and(|end| end < third_start), "the third command started before one ended: {all:?}");
    assert_eq!(third.slot, freed.slot, "the third took the freed slot: {all:?}");
    assert!(third.token > freed.token, "a new term of slot {} has a larger token: {all:?}", third.slot);
    assert!(first.iter().all(|e| e.session != third.session), "{all:?}");
    for e in first.iter().skip(1).chain([&third]) {
        fs::write(dir.join(format!("go-{}", e.session)), "").unwrap();
    }
    for ch in children {
        let (o, _) = wait_output(ch, Duration::from_secs(60));
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        assert_eq!(json_result(&o)["outcome"], "exited");
    }
    // Never more than N between a start and its end, in the order the commands wrote.
    let mut running = 0usize;
    for e in read_entries(&log) {
        running = if e.start { running + 1 } else { running - 1 };
        assert!(running <= N, "more than {N} commands ran at once:\n{}", fs::read_to_string(&log).unwrap());
    }
    let _ = fs::remove_dir_all(&dir);
}

/// The limit is the semaphore's: a second process asking for another one gets 78 naming both
/// values; `--timeout` on a full semaphore is 75 and names the holders.
#[allow(dead_code)]
fn semaphore_limit_mismatch_and_timeout(url: &str) {
    let name = support::unique("cli-sem-limit");
    let dir = temp_dir("cli-sem-limit");
    let info = dir.join("info");
    let mut holder = simba(Some(url))
        .args(["lock", "-n", "1", &name, "--", "sh", "-c"])
        .arg(format!(r#"echo "$SIMBA_SESSION $SIMBA_TOKEN" > {}; exec sleep 30"#, info.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = wait_for_file(&info, &mut holder);
    let (sid, token) = text.trim().split_once(' ').unwrap();
    let o = run({
        let mut c = simba(Some(url));
        c.args(["lock", "-n", "3", &name, "--", "true"]);
        c
    });
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    let expected = format!("semaphore '{name}' has 1 permits on the");
    assert!(stderr(&o).contains(&expected) && stderr(&o).contains("but 3 were asked for"), "{}", stderr(&o));
    let o = run({
        let mut c = simba(Some(url));
        c.args(["lock", "-n", "1", &name, "--timeout", "1s", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 75, "{}", stderr(&o));
    let expected = format!(
        "waiting for a permit of semaphore '{name}': 1 of 1 permits held (slot 0: {sid} (token {token}, simba lock pid="
    );
    assert!(stderr(&o).contains(&expected), "expected {expected:?} in {}", stderr(&o));
    assert!(stderr(&o).contains(&format!("gave up on a permit of semaphore '{name}' after")), "{}", stderr(&o));
    // The lock of the same name is another namespace: free.
    let o = run({
        let mut c = simba(Some(url));
        c.args(["lock", &name, "--timeout", "5s", "--", "true"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.id() as i32), nix::sys::signal::Signal::SIGTERM).unwrap();
    let (o, _) = wait_output(holder, Duration::from_secs(20));
    assert_eq!(code(&o), 128 + 15, "{}", stderr(&o));
    // Released on the way out: the next permit of slot 0 has a larger token.
    let o = run({
        let mut c = simba(Some(url));
        c.args(["lock", "-n", "1", &name, "--timeout", "5s", "--", "sh", "-c", "echo $SIMBA_SLOT $SIMBA_TOKEN"]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let (slot, t) = stdout(&o).trim().split_once(' ').map(|(a, b)| (a.to_string(), b.to_string())).unwrap();
    assert_eq!(slot, "0");
    assert!(t.parse::<u64>().unwrap() > token.parse::<u64>().unwrap(), "{t} after {token}");
    let _ = fs::remove_dir_all(&dir);
}

/// A permit lost while the command runs (its session closed behind simba's back) terminates the
/// command: exit 79, and the reason names the semaphore and the slot.
#[allow(dead_code)]
fn lost_permit_terminates_the_command(url: &str) {
    let name = support::unique("cli-sem-lost");
    let dir = temp_dir("cli-sem-lost");
    let (sidf, termf) = (dir.join("sid"), dir.join("term"));
    let mut child = simba(Some(url))
        .args(["--json", "lock", "-n", "2", &name, "--grace", "10s", "--", "sh", "-c"])
        .arg(format!(
            r#"trap 'echo term > {term}; exit 0' TERM; echo "$SIMBA_SESSION $SIMBA_SLOT" > {sid}; while :; do sleep 0.1; done"#,
            term = termf.display(),
            sid = sidf.display()
        ))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let text = wait_for_file(&sidf, &mut child);
    let (sid, slot) = text.trim().split_once(' ').unwrap();
    close_behind_its_back(url, sid);
    let (o, _) = wait_output(child, Duration::from_secs(30));
    assert_eq!(code(&o), 79, "{}", stderr(&o));
    assert_eq!(fs::read_to_string(&termf).unwrap().trim(), "term", "the command did not get SIGTERM");
    let v = json_result(&o);
    assert_eq!(v["outcome"], "lost", "{v}");
    assert_eq!(v["slot"].as_u64().map(|s| s.to_string()).as_deref(), Some(slot), "{v}");
    let reason = v["reason"].as_str().unwrap_or_default();
    assert!(reason.contains(&format!("permit {slot} of semaphore '{name}'")), "{v}");
    let _ = fs::remove_dir_all(&dir);
}

/// A `lock -n` waiter stopped for longer than its lease: its session ends while it only waits, so
/// simba opens a new one, takes the semaphore again on it (same limit) and keeps waiting; its
/// command runs on the new session once the permit frees, with a larger token of that slot.
#[allow(dead_code)]
fn a_permit_wait_survives_a_stop_longer_than_the_lease(url: &str) {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let name = support::unique("cli-sem-stop");
    let dir = temp_dir("cli-sem-stop");
    let (ready, release, ran) = (dir.join("ready"), dir.join("release"), dir.join("ran"));
    let mut holder = simba(Some(url))
        .args(["lock", "-n", "1", &name, "--", "sh", "-c"])
        .arg(format!(
            "echo $SIMBA_TOKEN > {ready}; while [ ! -e {release} ]; do sleep 0.05; done",
            ready = ready.display(),
            release = release.display()
        ))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let first_token: u64 = wait_for_file(&ready, &mut holder).trim().parse().unwrap();
    let mut waiter = simba(Some(url))
        .args(["--json", "lock", "-n", "1", &name, "--", "sh", "-c"])
        .arg(format!("echo $SIMBA_SESSION $SIMBA_SLOT $SIMBA_TOKEN > {}", ran.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = Lines::of(&mut waiter);
    lines.wait_for(r#""event":"waiting""#);
    let wpid = Pid::from_raw(waiter.id() as i32);
    kill(wpid, Signal::SIGSTOP).unwrap();
    // Stopped for longer than the 2 s lease: the session's local deadline passes meanwhile.
    thread::sleep(Duration::from_secs(3));
    kill(wpid, Signal::SIGCONT).unwrap();
    let line = lines.wait_for(r#""event":"new_session""#);
    let ev: Value = serde_json::from_str(&line).unwrap();
    assert!(ran.metadata().is_err(), "the command ran while the only permit was held");
    fs::write(&release, "").unwrap();
    let (o, _) = wait_output(holder, Duration::from_secs(30));
    assert_eq!(code(&o), 0, "holder: {}", stderr(&o));
    let (o, _) = wait_output(waiter, Duration::from_secs(30));
    let rest = lines.rest();
    assert_eq!(code(&o), 0, "waiter: {}", rest.join("\n"));
    let text = fs::read_to_string(&ran).unwrap();
    let w: Vec<&str> = text.split_whitespace().collect();
    assert_eq!(w[0], ev["session"].as_str().unwrap(), "{line}");
    assert_ne!(ev["session"], ev["expired_session"], "{line}");
    assert_eq!(w[1], "0", "{text}");
    assert!(w[2].parse::<u64>().unwrap() > first_token, "{text} after token {first_token}");
    assert_eq!(json_result(&o)["outcome"], "exited");
    let _ = fs::remove_dir_all(&dir);
}

macro_rules! backend_tests {
    ($m:ident, $feature:literal, $var:literal, $default:literal $(, $extra:ident)*) => {
        #[cfg(feature = $feature)]
        mod $m {
            use serial_test::serial;

            fn url() -> String {
                let url = crate::support::env_or($var, $default);
                crate::prepare(&url);
                url
            }

            backend_tests!(@tests $m, mutual_exclusion_and_increasing_tokens, timeout_names_the_holder_and_sigterm_is_forwarded,
                elect_takes_turns, join_and_members, a_killed_simba_takes_its_command_down, a_zero_timeout_takes_a_free_lock,
                a_zero_timeout_wins_a_free_election, a_command_typo_never_takes_the_lock, an_interrupted_wait_ends_with_a_json_result,
                a_wait_registers_where_its_backend_says,
                semaphore_admits_n_at_once, semaphore_limit_mismatch_and_timeout $(, $extra)*);
        }
    };
    (@tests $m:ident $(, $t:ident)*) => {
        $(
            #[test]
            #[serial($m)]
            fn $t() {
                crate::$t(&url());
            }
        )*
    };
}

// Losing the lease "behind its back" closes the session from another process, which the
// ZooKeeper backend cannot do (a ZooKeeper session is closed by its own client only).
backend_tests!(
    redis,
    "redis",
    "SIMBA_TEST_REDIS_URL",
    "redis://127.0.0.1:6379",
    lost_lease_terminates_the_command,
    lost_leadership_terminates_the_command,
    lost_membership_terminates_the_command,
    a_command_ignoring_sigterm_is_killed,
    a_wait_survives_a_stop_longer_than_the_lease,
    lost_permit_terminates_the_command,
    a_permit_wait_survives_a_stop_longer_than_the_lease
);
backend_tests!(
    postgres,
    "postgres",
    "SIMBA_TEST_POSTGRES_URL",
    "postgres://postgres@127.0.0.1:5432/test",
    lost_lease_terminates_the_command,
    lost_leadership_terminates_the_command,
    lost_membership_terminates_the_command,
    a_command_ignoring_sigterm_is_killed,
    a_wait_survives_a_stop_longer_than_the_lease,
    lost_permit_terminates_the_command,
    a_permit_wait_survives_a_stop_longer_than_the_lease
);
backend_tests!(
    mysql,
    "mysql",
    "SIMBA_TEST_MYSQL_URL",
    "mysql://root@127.0.0.1:3306/test",
    lost_lease_terminates_the_command,
    lost_leadership_terminates_the_command,
    lost_membership_terminates_the_command,
    a_command_ignoring_sigterm_is_killed,
    a_wait_survives_a_stop_longer_than_the_lease,
    lost_permit_terminates_the_command,
    a_permit_wait_survives_a_stop_longer_than_the_lease
);
backend_tests!(zookeeper, "zookeeper", "SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
