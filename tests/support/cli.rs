//! Running the `simba` binary from tests: a clean `SIMBA_*` environment and readable results.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

/// The `simba` binary under test.
pub const BIN: &str = env!("CARGO_BIN_EXE_simba");

/// A `simba` command with a clean `SIMBA_*` environment, 2 s leases and `url`.
pub fn simba(url: Option<&str>) -> Command {
    let mut c = clean_command(BIN);
    // Short leases, but a query timeout that tolerates a loaded machine.
    c.env("SIMBA_LEASE_DURATION", "2s").env("SIMBA_RENEW_INTERVAL", "500ms").env("SIMBA_QUERY_TIMEOUT", "1500ms");
    if let Some(u) = url {
        c.env("SIMBA_URL", u);
    }
    c
}

/// Runs `c` to its end with no stdin.
pub fn run(mut c: Command) -> Output {
    c.stdin(Stdio::null()).output().expect("run simba")
}

/// The last line of stdout, as JSON.
pub fn json_result(o: &Output) -> Value {
    let out = stdout(o);
    let line = out.lines().last().unwrap_or_else(|| panic!("no stdout; stderr: {}", stderr(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

/// A fresh directory in the temporary directory.
pub fn temp_dir(prefix: &str) -> PathBuf {
    let d = std::env::temp_dir().join(super::unique(prefix));
    fs::create_dir_all(&d).unwrap();
    d
}

/// Waits at most `limit` for `child` to end; kills it and panics with its stderr otherwise.
pub fn wait_output(child: Child, limit: Duration) -> (Output, Duration) {
    let start = Instant::now();
    let pid = child.id();
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    match rx.recv_timeout(limit) {
        Ok(o) => (o.expect("wait for simba"), start.elapsed()),
        Err(_) => {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            // What simba wrote until then (its command may still hold the pipe: do not wait long).
            let err = match rx.recv_timeout(Duration::from_secs(5)) {
                Ok(Ok(o)) => String::from_utf8_lossy(&o.stderr).into_owned(),
                _ => "(stderr not available: the command still holds it)".to_string(),
            };
            panic!("simba (pid {pid}) did not exit within {limit:?}; its stderr:\n{err}");
        }
    }
}

/// Fails clearly unless the server of `url` listens; applies the schema on SQL backends.
pub fn prepare(url: &str) {
    let config = simba::Config::from_url(url).unwrap_or_else(|e| panic!("bad test URL: {e}"));
    let host = config.hosts().first().cloned().expect("URL host");
    let default_port = match config.backend_kind() {
        simba::BackendKind::Postgres => 5432,
        simba::BackendKind::Mysql => 3306,
        simba::BackendKind::Zookeeper => 2181,
        _ => 6379,
    };
    let addr = if host.contains(':') { host } else { format!("{host}:{default_port}") };
    super::require_tcp(&format!("{} (for the CLI tests)", config.backend_kind()), &addr);
    if config.backend_kind().is_sql() {
        let o = run({
            let mut c = simba(Some(url));
            c.args(["schema", "apply"]);
            c
        });
        assert_eq!(code(&o), 0, "schema apply: {}", stderr(&o));
    }
}

/// `bin` as a command with every `SIMBA_*` variable of the test's own environment removed and
/// `RUST_LOG=warn`, so a developer's settings never leak into a test.
pub fn clean_command(bin: &str) -> Command {
    let mut c = Command::new(bin);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SIMBA_") {
            c.env_remove(k);
        }
    }
    c.env("RUST_LOG", "warn");
    c
}

/// The exit code, or -1 when the process was killed by a signal.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// Reads a child's stderr line by line on a thread: the lines so far, and a wait for a line.
pub struct Lines {
    rx: crossbeam_channel::Receiver<String>,
    /// Every line read so far.
    pub seen: Vec<String>,
}

#[allow(dead_code)]
impl Lines {
    /// Starts reading `child`'s piped stderr.
    pub fn of(child: &mut Child) -> Lines {
        let err = child.stderr.take().expect("stderr piped");
        let (tx, rx) = crossbeam_channel::unbounded();
        thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(err).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        Lines { rx, seen: Vec::new() }
    }

    /// A reader of nothing (its lines end at once).
    pub fn empty() -> Lines {
        let (_, rx) = crossbeam_channel::unbounded();
        Lines { rx, seen: Vec::new() }
    }

    /// Waits (at most 60 s, a safety net) for a line containing `needle`; panics with the lines
    /// seen when stderr ends first.
    pub fn wait_for(&mut self, needle: &str) -> String {
        match self.wait_within(needle, Duration::from_secs(60)) {
            Some(line) => line,
            None => panic!("no line with {needle:?} on stderr; lines:\n{}", self.seen.join("\n")),
        }
    }

    /// Waits at most `within` for a line containing `needle`: `None` when none came by then (or
    /// stderr ended).
    pub fn wait_within(&mut self, needle: &str, within: Duration) -> Option<String> {
        let until = Instant::now() + within;
        loop {
            let line = self.rx.recv_timeout(until.saturating_duration_since(Instant::now())).ok()?;
            self.seen.push(line.clone());
            if line.contains(needle) {
                return Some(line);
            }
        }
    }

    /// Every line until stderr closes.
    pub fn rest(mut self) -> Vec<String> {
        while let Ok(line) = self.rx.recv_timeout(Duration::from_secs(60)) {
            self.seen.push(line);
        }
        self.seen
    }
}
