//! Running the user's command while a lease, leadership or membership is held: spawning it in
//! its own process group, forwarding SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2, and
//! terminating it (SIGTERM, then SIGKILL after the grace period) the moment what it depends on is
//! lost.
//!
//! Signals are handled without `unsafe` (the crate forbids it): [`Signals::install`] blocks the
//! signals in the main thread before any other thread exists (so every thread inherits the mask)
//! and a dedicated thread receives them with `sigwait`. A spawned process inherits that mask (the
//! standard library keeps it, and resetting it in the child needs the `unsafe` `pre_exec`), so the
//! command is started through a trampoline: simba re-executes itself as `simba __exec PID -- CMD…`,
//! which unblocks the signals and `exec`s CMD in the same process (same pid and process group).
//!
//! simba itself may die without a chance to clean up (SIGKILL, the OOM killer, `timeout -s KILL`,
//! systemd's `KillMode=process`). The command must not keep running unnoticed without the lock:
//! the trampoline asks the kernel for a SIGTERM when simba dies (`PR_SET_PDEATHSIG`, Linux), and
//! a tiny watcher process (`simba __watch PGID GRACE_MS`, in its own process group) holds a pipe
//! from simba: when the pipe closes without simba's "done", the watcher sends SIGTERM to the
//! command's process group and SIGKILL after the grace period. The watcher needs the command's
//! process group, known only once the trampoline runs, so the trampoline does not `exec` the
//! command until simba says the watcher is up (an empty "armed" file simba creates; the
//! trampoline gives up if simba dies first): a simba killed in between used to leave a command
//! that ignores SIGTERM running for good.

use std::ffi::{OsStr, OsString};
use std::io::{self, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, unbounded, Receiver};
use nix::errno::Errno;
use nix::sys::signal::{killpg, SigSet, Signal};
use nix::unistd::Pid;

/// How often the supervisor checks whether the lease (leadership, membership) is still ours.
/// Checks are local (no I/O): the session engine decides, by its local deadline.
const POLL: Duration = Duration::from_millis(50);

/// The hidden first argument that makes simba act as the exec trampoline.
pub const TRAMPOLINE: &str = "__exec";

/// The hidden first argument that makes simba act as the watcher of its own death.
pub const WATCHER: &str = "__watch";

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

/// The trampoline: `args` is `PARENT_PID ARMED -- CMD ARGS…`. Arranges a SIGTERM for itself when simba
/// (its parent) dies, unblocks the signals simba blocked and replaces this process with CMD;
/// returns only when that fails, with the exit code (127 not found, 126 other).
pub fn trampoline(mut args: impl Iterator<Item = OsString>) -> u8 {
    let parent = args.next().and_then(|p| p.to_str().and_then(|p| p.parse::<i32>().ok()));
    let armed = args.next().map(PathBuf::from);
    let sep = args.next();
    let (parent, armed, program, rest) = match (parent, armed, sep.as_deref().and_then(|a| a.to_str()), args.next()) {
        (Some(parent), Some(armed), Some("--"), Some(p)) => (parent, armed, p, args),
        _ => {
            eprintln!("simba: internal: usage: simba {TRAMPOLINE} PARENT_PID ARMED -- CMD [ARGS…]");
            return 70;
        }
    };
    #[cfg(target_os = "linux")]
    {
        // Survives the exec (except into a set-user-ID program); sent when simba's thread that
        // started us ends, which is the main thread, which ends only with simba.
        if let Err(e) = nix::sys::prctl::set_pdeathsig(Signal::SIGTERM) {
            eprintln!("simba: cannot ask for SIGTERM on simba's death: {e} (the watcher still sends it)");
        }
    }
    // Until simba says its watcher is up, the command does not start; if simba dies meanwhile
    // (or before the death signal was armed), it does not start at all.
    while !armed.exists() {
        if nix::unistd::getppid().as_raw() != parent {
            let _ = std::fs::remove_file(&armed);
            eprintln!("simba: simba (pid {parent}) died before the command started; not starting it");
            return 128 + Signal::SIGTERM as u8;
        }
        thread::sleep(Duration::from_millis(1));
    }
    let _ = std::fs::remove_file(&armed);
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

/// The watcher: `args` is `PGID GRACE_MS JSON(0|1)`. Reads its stdin (a pipe from simba) until
/// it ends: a byte means simba finished normally (nothing to do); the end of the pipe without one
/// means simba died, and the process group `PGID` gets SIGTERM, then SIGKILL after the grace
/// period. It keeps the signals simba blocked blocked, so signals meant for simba (or its process
/// group) leave it alone.
pub fn watcher(mut args: impl Iterator<Item = OsString>) -> u8 {
    let mut num = || args.next().and_then(|a| a.to_str().and_then(|a| a.parse::<u64>().ok()));
    let (Some(pgid), Some(grace_ms), Some(json)) = (num(), num(), num()) else {
        eprintln!("simba: internal: usage: simba {WATCHER} PGID GRACE_MS JSON");
        return 70;
    };
    let Ok(pgid) = i32::try_from(pgid) else { return 70 };
    let mut byte = [0u8; 1];
    let simba_died = loop {
        match io::stdin().read(&mut byte) {
            Ok(0) => break true,
            Ok(_) => break false,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => break true,
        }
    };
    if !simba_died {
        return 0;
    }
    let group = Pid::from_raw(pgid);
    let say = |event: &str, text: String| {
        let line = if json == 1 {
            serde_json::json!({"event": event, "pid": pgid, "message": text}).to_string()
        } else {
            format!("simba: {text}")
        };
        crate::out::write_line(&format!("{line}\n"));
    };
    if killpg(group, Signal::SIGTERM) == Err(Errno::ESRCH) {
        return 0;
    }
    say("orphaned", format!("simba died while the command ran: sent SIGTERM to the command (pid {pgid})"));
    let deadline = Instant::now() + Duration::from_millis(grace_ms);
    while Instant::now() < deadline {
        if killpg(group, None) == Err(Errno::ESRCH) {
            return 0;
        }
        thread::sleep(POLL);
    }
    if killpg(group, Signal::SIGKILL).is_ok() {
        say("kill", format!("the command (pid {pgid}) outlived simba by {grace_ms} ms: sent SIGKILL"));
    }
    0
}

/// The signals simba receives and forwards.
pub struct Signals {
    rx: Receiver<Signal>,
    cancel: simba::Cancel,
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
        let cancel = simba::Cancel::new();
        let on_signal = cancel.clone();
        thread::Builder::new().name("simba-signals".into()).spawn(move || loop {
            match set.wait() {
                Ok(sig) => {
                    log::debug!("received {sig}");
                    if tx.send(sig).is_err() {
                        return;
                    }
                    // After the send: a wait the cancel ends finds the signal in the channel.
                    on_signal.cancel();
                }
                Err(e) => {
                    log::error!("sigwait failed: {e}");
                    return;
                }
            }
        })?;
        Ok(Signals { rx, cancel })
    }

    /// The receiver of signals delivered to simba.
    pub fn receiver(&self) -> &Receiver<Signal> {
        &self.rx
    }

    /// Cancelled by the first signal, once it is in [`receiver`](Signals::receiver): the token a
    /// wait for a lock or a permit gives the library, so that a signal ends it.
    pub fn cancel(&self) -> &simba::Cancel {
        &self.cancel
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

/// Finds `program` as `exec` will (a path when it contains `/`, else the first executable file
/// of that name in `PATH`), so that a typo is reported before any lock is taken.
///
/// # Errors
/// `not_found` when there is no such file; otherwise when it is not an executable file.
pub fn resolve(program: &OsStr) -> Result<PathBuf, SpawnError> {
    let shown = program.to_string_lossy();
    let executable = |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.as_encoded_bytes().contains(&b'/') {
        let p = Path::new(program);
        return match p.metadata() {
            Err(e) => Err(SpawnError {
                not_found: e.kind() == io::ErrorKind::NotFound,
                message: format!("cannot run {shown}: {e}"),
            }),
            Ok(_) if executable(p) => Ok(p.to_path_buf()),
            Ok(m) if m.is_dir() => {
                Err(SpawnError { not_found: false, message: format!("cannot run {shown}: it is a directory") })
            }
            Ok(_) => Err(SpawnError {
                not_found: false,
                message: format!("cannot run {shown}: not executable (chmod +x, or name its interpreter)"),
            }),
        };
    }
    if program.is_empty() {
        return Err(SpawnError { not_found: true, message: "the command after -- is empty".into() });
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path).map(|dir| dir.join(program)).find(|p| executable(p)).ok_or_else(|| SpawnError {
        not_found: true,
        message: format!("cannot run {shown}: command not found in PATH"),
    })
}

/// The exit code of a finished child: its code, or 128 + the signal that killed it.
pub fn exit_code(status: &ExitStatus) -> i32 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c,
        (None, Some(s)) => 128 + s,
        (None, None) => 70,
    }
}

/// The command to supervise and how.
pub struct Job<'a> {
    /// The program and its arguments.
    pub cmd: &'a [OsString],
    /// Variables added to its environment.
    pub env: &'a [(&'a str, String)],
    /// Variables removed from its environment.
    pub env_remove: &'a [&'a str],
    /// Time between SIGTERM and SIGKILL.
    pub grace: Duration,
    /// The watcher's messages as JSON lines.
    pub json: bool,
}

/// The image this process runs, to re-execute as trampoline and watcher: on Linux
/// `/proc/self/exe`, which stays this very program when its file is replaced or deleted on disk
/// (an upgrade or a rebuild while simba runs) — `current_exe()`'s path would then start another
/// version, or nothing (finding 9 of issue #36). Elsewhere, `current_exe()`.
fn running_image() -> io::Result<std::path::PathBuf> {
    let proc_exe = std::path::Path::new("/proc/self/exe");
    if cfg!(target_os = "linux") && proc_exe.exists() {
        return Ok(proc_exe.to_path_buf());
    }
    std::env::current_exe()
}

/// A fresh path for the trampoline's "armed" file: in the temporary directory, named after this
/// process and a per-process sequence number.
fn armed_path() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("simba-{}-{n}.armed", std::process::id()))
}

/// Test seam (the `internal-testing` feature only): sleeps for the milliseconds in the variable
/// `var`, so a test can kill simba at a point it could otherwise only hope to hit.
fn internal_pause(var: &str) {
    #[cfg(feature = "internal-testing")]
    if let Some(ms) = std::env::var(var).ok().and_then(|v| v.parse::<u64>().ok()) {
        thread::sleep(Duration::from_millis(ms));
    }
    #[cfg(not(feature = "internal-testing"))]
    let _ = var;
}

/// Runs `job.cmd` with `job.env` added (and `job.env_remove` removed) in its own process group and
/// waits for it. Every [`POLL`] it asks `lost()`; once that returns a reason the group gets SIGTERM
/// and, after the grace period, SIGKILL. The signals arriving on `signals` (simba's own, or those
/// a caller supervising several commands hands to this one) are forwarded to the group.
///
/// # Errors
/// When the command cannot be started.
pub fn run(
    job: &Job<'_>,
    signals: &Receiver<Signal>,
    lost: &dyn Fn() -> Option<String>,
    notify: &dyn Fn(Notice<'_>),
) -> Result<Outcome, SpawnError> {
    let (cmd, grace) = (job.cmd, job.grace);
    let Some(program) = cmd.first() else {
        return Err(SpawnError { not_found: true, message: "no command given after --".into() });
    };
    let me = running_image()
        .map_err(|e| SpawnError { not_found: false, message: format!("cannot find the simba executable: {e}") })?;
    let armed = armed_path();
    let mut command = Command::new(&me);
    command.arg(TRAMPOLINE).arg(std::process::id().to_string()).arg(&armed).arg("--").args(cmd).process_group(0);
    for k in job.env_remove {
        command.env_remove(k);
    }
    for (k, v) in job.env {
        command.env(k, v);
    }
    // What fails here is simba's own re-execution (the trampoline), never the user's command:
    // the trampoline reports that one itself (exit 127 or 126).
    let mut child = command.spawn().map_err(|e| SpawnError {
        not_found: false,
        message: format!("simba cannot re-execute itself ({}) to run {}: {e}", me.display(), program.to_string_lossy()),
    })?;
    let pid = child.id();
    let group = Pid::from_raw(i32::try_from(pid).unwrap_or(i32::MAX));
    log::debug!("started {} as pid {pid}", program.to_string_lossy());
    notify(Notice::Started { pid });
    internal_pause("SIMBA_INTERNAL_PAUSE_BEFORE_WATCHER_MS");
    let watcher = Watcher::start(&me, pid, grace, job.json);
    // The trampoline starts the command only now that the watcher is up (or could not start:
    // then the death signal alone remains, as `Watcher::start` logged).
    if let Err(e) = std::fs::File::create(&armed) {
        let _ = killpg(group, Signal::SIGKILL);
        let _ = child.wait();
        watcher.done();
        return Err(SpawnError {
            not_found: false,
            message: format!(
                "cannot create {} to start the command once its watcher is up: {e} (set TMPDIR to a writable directory)",
                armed.display()
            ),
        });
    }
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
                watcher.done();
                return Ok(match (lost_reason, status) {
                    (Some(reason), status) => Outcome::Lost { reason, status },
                    (None, Some(s)) => Outcome::Exited(s),
                    (None, None) => Outcome::Lost { reason: "the command could not be waited for".into(), status: None },
                });
            }
            recv(signals) -> sig => {
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

/// simba's side of the watcher: the write end of its stdin.
struct Watcher {
    child: Option<(Child, ChildStdin)>,
}

impl Watcher {
    /// Starts `simba __watch` for the process group `pgid`. When it cannot start, the pdeath
    /// signal alone remains (SIGTERM without the SIGKILL escalation): logged.
    fn start(me: &Path, pgid: u32, grace: Duration, json: bool) -> Watcher {
        let grace_ms = u64::try_from(grace.as_millis()).unwrap_or(u64::MAX);
        let spawned = Command::new(me)
            .arg(WATCHER)
            .arg(pgid.to_string())
            .arg(grace_ms.to_string())
            .arg(if json { "1" } else { "0" })
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            Ok(mut child) => match child.stdin.take() {
                Some(stdin) => Watcher { child: Some((child, stdin)) },
                None => Watcher { child: None },
            },
            Err(e) => {
                log::warn!("cannot start the watcher that stops the command if simba dies: {e}");
                Watcher { child: None }
            }
        }
    }

    /// Tells the watcher that simba finished normally, and reaps it.
    fn done(self) {
        if let Some((mut child, mut stdin)) = self.child {
            if let Err(e) = stdin.write_all(b"x") {
                log::debug!("telling the watcher simba is done failed: {e}");
            }
            drop(stdin);
            let _ = child.wait();
        }
    }
}
