//! A server process started by a test (a private database or ZooKeeper), with its data directory:
//! stopped gracefully on demand, killed and cleaned up on drop.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Child;

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
