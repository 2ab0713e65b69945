//! Running the user's command while a lease, leadership or membership is held: spawning it in
//! its own process group, forwarding SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2, and
//! terminating it (SIGTERM, then SIGKILL after the grace period) the moment what it depends on is
//! lost.
//!
//! Signals are handled without `unsafe` (the crate forbids it): [`Signals::install`] blocks the
//! signals in the main thread before any other thread exists (so every thread inherits the mask)
//! and a dedicated thread receives them with `sigwait`. A spawned process inherits that mask (the
//! standard library keeps it, and resetting it in the child needs the `unsafe` `pre_exec`), so the
//! command is started through a trampoline: simba re-executes itself as `simba __exec -- CMD…`,
//! which unblocks the signals and `exec`s CMD in the same process (same pid and process group).

use std::ffi::OsString;
use std::io;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, unbounded, Receiver};
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

/// How often the supervisor checks whether the lease (leadership, membership) is still ours.
/// Checks are local (no I/O): the session engine decides, by its local deadline.
const POLL: Duration = Duration::from_millis(50);

/// The hidden first argument that makes simba act as the exec trampoline.
pub const TRAMPOLINE: &str = "__exec";

/// The signals simba blocks, receives and forwards: those whose default action would end simba
/// (and with it the supervision and the session) and that commands commonly act on — stop,
/// reload, thread dump (SIGQUIT), log rotation (SIGUSR1/2).
const FORWARDED: [Signal; 6] =
    [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP, Signal::SIGQUIT, Signal::SIGUSR1, Signal::SIGUSR2];

fn handled() -> SigSet {
    let mut set = SigSet::empty();
    for s in FORWARDED {
        set.add(s);
    }
    set
}

/// The trampoline: `args` is `-- CMD ARGS…`. Unblocks the signals simba blocked and replaces this
/// process with CMD; returns only when that fails, with the exit code (127 not found, 126 other).
pub fn trampoline(mut args: impl Iterator<Item = OsString>) -> u8 {
    let first = args.next();
    let (program, rest) = match (first.as_deref().and_then(|a| a.to_str()), args.next()) {
        (Some("--"), Some(p)) => (p, args),
        _ => {
            eprintln!("simba: internal: usage: simba {TRAMPOLINE} -- CMD [ARGS…]");
            return 70;
        }
    };
    if let Err(e) = handled().thread_unblock() {
        eprintln!("simba: cannot unblock signals for the command: {e}");
        return 126;
    }
    let err = Command::new(&program).args(rest).exec();
    eprintln!("simba: cannot run {}: {err}", program.to_string_lossy());
    if err.kind() == io::ErrorKind::NotFound {
        127
    } else {
        126
    }
}

/// The signals simba receives and forwards.
pub struct Signals {
    rx: Receiver<Signal>,
}

impl Signals {
    /// Blocks the [`FORWARDED`] signals in the calling thread (call it first thing in `main`, before
    /// any thread is started) and starts the thread that receives them.
    ///
    /// # Errors
    /// When the mask cannot be set or the thread cannot start.
    pub fn install() -> io::Result<Signals> {
        let set = handled();
        set.thread_block().map_err(io::Error::from)?;
        let (tx, rx) = unbounded();
        thread::Builder::new().name("simba-signals".into()).spawn(move || loop {
            match set.wait() {
                Ok(sig) => {
                    log::debug!("received {sig}");
                    if tx.send(sig).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    log::error!("sigwait failed: {e}");
                    return;
                }
            }
        })?;
        Ok(Signals { rx })
    }

    /// The receiver of signals delivered to simba.
    pub fn receiver(&self) -> &Receiver<Signal> {
        &self.rx
    }
}

/// How a supervised command ended.
#[derive(Debug)]
pub enum Outcome {
    /// The command exited by itself (or after a forwarded signal) while we still held on.
    Exited(ExitStatus),
    /// What the command depended on was lost; it was terminated. `status` is how it ended.
    Lost { reason: String, status: Option<ExitStatus> },
}

/// What the supervisor tells the user about.
#[derive(Debug)]
pub enum Notice<'a> {
    /// The command started.
    Started { pid: u32 },
    /// What the command depends on was lost; SIGTERM goes out now.
    Lost { reason: &'a str, pid: u32 },
    /// The grace period passed; SIGKILL goes out now.
    Killing { pid: u32, grace: Duration },
    /// A signal received by simba was forwarded.
    Forwarded { signal: Signal, pid: u32 },
}

/// Why the command could not be started.
#[derive(Debug)]
pub struct SpawnError {
    pub not_found: bool,
    pub message: String,
}

/// The exit code of a finished child: its code, or 128 + the signal that killed it.
pub fn exit_code(status: &ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 70,
    }
}

/// Runs `cmd` with `env` added (and `env_remove` removed) in its own process group and waits for
/// it. Every [`POLL`] it asks `lost()`; once that returns a reason the group gets SIGTERM and,
/// after `grace`, SIGKILL. Signals received by simba are forwarded to the group.
///
/// # Errors
/// When the command cannot be started.
pub fn run(
    cmd: &[OsString],
    env: &[(&str, String)],
    env_remove: &[&str],
    grace: Duration,
    signals: &Signals,
    lost: &dyn Fn() -> Option<String>,
    notify: &dyn Fn(Notice<'_>),
) -> Result<Outcome, SpawnError> {
    let Some(program) = cmd.first() else {
        return Err(SpawnError { not_found: true, message: "no command given after --".into() });
    };
    let me = std::env::current_exe()
        .map_err(|e| SpawnError { not_found: false, message: format!("cannot find the simba executable: {e}") })?;
    let mut command = Command::new(me);
    command.arg(TRAMPOLINE).arg("--").args(cmd).process_group(0);
    for k in env_remove {
        command.env_remove(k);
    }
    for (k, v) in env {
        command.env(k, v);
    }
    let mut child = command.spawn().map_err(|e| SpawnError {
        not_found: e.kind() == io::ErrorKind::NotFound,
        message: format!("cannot run {}: {e}", program.to_string_lossy()),
    })?;
    let pid = child.id();
    let group = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    log::debug!("started {} as pid {pid}", program.to_string_lossy());
    notify(Notice::Started { pid });
    let (exit_tx, exit_rx) = unbounded();
    thread::Builder::new()
        .name("simba-child-wait".into())
        .spawn(move || {
            let _ = exit_tx.send(child.wait());
        })
        .map_err(|e| SpawnError { not_found: false, message: format!("cannot start the wait thread: {e}") })?;

    let signal_group = |sig: Signal| {
        if let Err(e) = killpg(group, sig) {
            log::debug!("killpg({pid}, {sig}) failed: {e}");
        }
    };
    let mut lost_reason: Option<String> = None;
    let mut kill_at: Option<Instant> = None;
    loop {
        let kill_timer = match kill_at {
            Some(t) => after(t.saturating_duration_since(Instant::now())),
            None => never(),
        };
        select! {
            recv(exit_rx) -> r => {
                let status = match r {
                    Ok(Ok(s)) => Some(s),
                    Ok(Err(e)) => {
                        log::error!("waiting for pid {pid} failed: {e}");
                        None
                    }
                    Err(_) => None,
                };
                return Ok(match (lost_reason, status) {
                    (Some(reason), status) => Outcome::Lost { reason, status },
                    (None, Some(s)) => Outcome::Exited(s),
                    (None, None) => Outcome::Lost { reason: "the command could not be waited for".into(), status: None },
                });
            }
            recv(signals.receiver()) -> sig => {
                if let Ok(sig) = sig {
                    notify(Notice::Forwarded { signal: sig, pid });
                    signal_group(sig);
                }
            }
            recv(kill_timer) -> _ => {
                notify(Notice::Killing { pid, grace });
                signal_group(Signal::SIGKILL);
                kill_at = None;
            }
            default(POLL) => {}
        }
        if lost_reason.is_none() {
            if let Some(reason) = lost() {
                notify(Notice::Lost { reason: &reason, pid });
                signal_group(Signal::SIGTERM);
                kill_at = Some(Instant::now() + grace);
                lost_reason = Some(reason);
            }
        }
    }
}
