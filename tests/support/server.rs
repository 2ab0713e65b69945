//! A server process started by a test (a private database or ZooKeeper), with its data directory:
//! stopped gracefully on demand, killed and cleaned up on drop.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Child;
use std::time::{Duration, Instant};

/// The child process of a private server and the directory it owns.
pub struct ServerProcess {
    /// The server's data directory (removed on drop).
    pub dir: PathBuf,
    child: Option<Child>,
}

impl ServerProcess {
    /// Owns `dir`; no process yet.
    pub fn new(dir: PathBuf) -> ServerProcess {
        ServerProcess { dir, child: None }
    }

    /// Records the running process (after a start or a restart).
    pub fn running(&mut self, child: Child) {
        self.child = Some(child);
    }

    /// True once the recorded process has exited (a server that failed to start).
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))))
    }

    /// The recorded process's id, while there is one.
    pub fn pid(&self) -> Option<nix::unistd::Pid> {
        self.child.as_ref().map(|c| nix::unistd::Pid::from_raw(c.id() as i32))
    }

    /// Sends `signal` to the recorded process (`SIGSTOP`, `SIGCONT`); false when there is none.
    pub fn signal(&self, signal: nix::sys::signal::Signal) -> bool {
        self.pid().is_some_and(|p| nix::sys::signal::kill(p, signal).is_ok())
    }

    /// Kills the process (`SIGKILL`, a crash: nothing flushed, no goodbye) and waits for it; the
    /// directory stays, for a restart.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops the process gracefully (SIGTERM) and waits for it.
    pub fn terminate(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ =
                nix::sys::signal::kill(nix::unistd::Pid::from_raw(c.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let _ = c.wait();
        }
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Returns once every thread of process `pid` is stopped: `kill(SIGSTOP)` returns before a
/// running thread has stopped, and such a thread could still answer a request sent right after it.
pub fn wait_stopped(pid: nix::unistd::Pid) {
    let tasks = format!("/proc/{pid}/task");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let states: Vec<String> = std::fs::read_dir(&tasks)
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("stat")).ok())
            // The state is the field after the parenthesised command name.
            .filter_map(|stat| stat.rsplit_once(") ").map(|(_, rest)| rest.chars().take(1).collect()))
            .collect();
        if !states.is_empty() && states.iter().all(|s| s == "T") {
            return;
        }
        assert!(Instant::now() < deadline, "the threads of {pid} did not all stop: {states:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}
