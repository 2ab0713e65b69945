//! Running the `simba` binary from tests: a clean `SIMBA_*` environment and readable results.

use std::process::{Child, Command, Output};
use std::thread;
use std::time::{Duration, Instant};

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
