//! `lock`, `lock -n N`, `elect` and `join`: wait for the lock (permit, leadership; `wait.rs`),
//! then run the command while it is held, terminating it the moment it is lost. Exit 79 is
//! reserved for a loss while the command runs.

use std::ffi::OsString;
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use serde_json::{json, Value};
use simba::backend::{Holder, LeaseBackend};
use simba::semaphore::{Permit, Semaphore};
use simba::{display_chain, Config, Election, Lease, Session};

use crate::out::{code, Fail, Out};
use crate::supervise::{self, Notice, Outcome, Signals};
use crate::wait::{Ended, Wait, ELECT};
use crate::{JoinArgs, LockArgs};

/// Attempts of [`open_session`] before simba gives up at start-up.
const OPEN_ATTEMPTS: u32 = 3;

/// Connects and opens a session, retrying transient failures (a slow first call on a loaded
/// machine) a few times before giving up with exit 69.
pub fn open_session(config: &Config) -> Result<(Arc<dyn LeaseBackend>, Session), Fail> {
    opening(config, || open_once(config))
}

/// Runs `open` (a connect and a session's open), retrying transient failures like
/// [`open_session`]; a failure that persists is exit 69 with what a TCP connection says.
pub fn opening<T>(config: &Config, open: impl Fn() -> simba::Result<T>) -> Result<T, Fail> {
    let mut attempt = 1;
    loop {
        match open() {
            Ok(r) => return Ok(r),
            Err(e) if e.is_retryable() && attempt < OPEN_ATTEMPTS => {
                log::warn!("opening a session failed (attempt {attempt} of {OPEN_ATTEMPTS}): {}", display_chain(&e));
                thread::sleep(Duration::from_millis(250) * attempt);
                attempt += 1;
            }
            Err(e) => return Err(crate::inspect::unreachable(config, e)),
        }
    }
}

pub fn open_once(config: &Config) -> simba::Result<(Arc<dyn LeaseBackend>, Session)> {
    let backend = config.connect()?;
    let session = Session::open(Arc::clone(&backend), config.session_options())?;
    log::info!("session {} opened on {}", session.id(), config.redacted_url().unwrap_or("memory://"));
    Ok((backend, session))
}

pub fn holder_json(h: &Holder) -> Value {
    json!({
        "session": h.session.as_str(),
        "token": h.token.get(),
        "remaining_ms": u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX),
        "metadata": h.metadata,
    })
}

pub fn describe_holder(h: &Holder) -> String {
    if h.metadata.is_empty() {
        format!("{} (token {})", h.session, h.token)
    } else {
        format!("{} (token {}, {})", h.session, h.token, h.metadata)
    }
}

pub fn warn_process_local(config: &Config, out: &Out) {
    if config.backend_kind() == simba::BackendKind::Memory {
        out.progress(
            "warning",
            "memory:// is process-local: other simba processes do not see this lock, semaphore, leadership, group or partition set",
            json!({}),
        );
    }
}

/// Checks the command before anything is taken: a typo must never consume a token.
pub fn resolve_command(out: &Out, name: &str, command: &[OsString]) -> Result<(), u8> {
    let Some(program) = command.first() else { return Ok(()) };
    supervise::resolve(program).map(drop).map_err(|e| {
        let c = if e.not_found { code::NOT_FOUND } else { code::CANNOT_EXECUTE };
        out.progress("spawn_failed", &e.message, json!({"name": name}));
        out.result(
            "",
            json!({"name": name, "outcome": "spawn_failed", "message": e.message,
                   "command": program.to_string_lossy(), "exit_code": c}),
        );
        c
    })
}

/// What the wait ended with.
pub enum Held {
    Lease(Lease),
    Election(Election),
    Permit(Permit),
}

impl Held {
    fn token(&self) -> simba::Result<simba::Token> {
        match self {
            Held::Lease(l) => l.token(),
            Held::Election(e) => e.token(),
            Held::Permit(p) => p.token(),
        }
    }

    /// Gives it up after the command exited (a failure is only logged: simba exits anyway).
    fn give_up(self, name: &str) {
        let r = match self {
            Held::Lease(l) => l.release().map_err(|e| ("releasing lock", e)),
            Held::Election(e) => e.resign().map_err(|e| ("resigning", e)),
            Held::Permit(p) => p.release().map_err(|e| ("releasing the permit of semaphore", e)),
        };
        if let Err((doing, e)) = r {
            log::warn!("{doing} '{name}' failed: {}", display_chain(&e));
        }
    }
}

/// `lock NAME -- CMD` and `elect NAME -- CMD`.
pub fn lock(config: &Config, out: &Out, signals: &Signals, a: &LockArgs, elect: bool) -> Result<u8, Fail> {
    let what = if elect { ELECT } else { "lock" };
    let lease = simba::Name::new(&a.name)?;
    if let Err(c) = resolve_command(out, &a.name, &a.command) {
        return Ok(c);
    }
    warn_process_local(config, out);
    let (_, session) = open_session(config)?;
    let mut wait = Wait::new((config, out, signals), a, what, lease, session);
    if elect {
        let election = wait.session.campaign(&wait.lease)?;
        wait.events = Some(election.events());
        wait.election = Some(election);
    }
    let (session, held) = match wait.run() {
        Ok(r) => r,
        Err(Ended::Code(c)) => return Ok(c),
        Err(Ended::Fail(f)) => return Err(f),
    };
    let token = held.token()?;
    let sid = session.id().to_string();
    let verb = if elect { "elected leader of" } else { "acquired lock" };
    out.progress(
        if elect { "elected" } else { "acquired" },
        &format!("{verb} '{}' (token {token}, session {sid})", a.name),
        json!({"name": a.name, "token": token.get(), "session": sid}),
    );
    let env = [("SIMBA_TOKEN", token.to_string()), ("SIMBA_LEASE", a.name.clone()), ("SIMBA_SESSION", sid.clone())];
    let fields = json!({"name": a.name, "token": token.get(), "session": sid});
    let run = Run { out, name: &a.name, what, grace: a.grace, signals };
    run_held(&run, a, session, held, &env, &["SIMBA_GROUP", "SIMBA_SLOT"], fields)
}

/// Runs the command while `held` is held, gives it up when the command exits, closes the session.
fn run_held(
    run: &Run<'_>,
    a: &LockArgs,
    session: Session,
    held: Held,
    env: &[(&str, String)],
    env_remove: &[&str],
    fields: Value,
) -> Result<u8, Fail> {
    let lost = || held.token().err().map(|e| e.to_string());
    let outcome = run.supervise(&a.command, env, env_remove, &lost)?;
    let result = match outcome {
        Outcome::Exited(status) => {
            let c = supervise::exit_code(&status);
            held.give_up(&a.name);
            exited(run.out, fields, c)
        }
        Outcome::Lost { reason, status } => lost_result(run.out, fields, &reason, status.as_ref()),
    };
    let sid = session.id().to_string();
    close(session, &sid);
    Ok(result)
}

/// What a permit wait is called in messages: "waiting for a permit of semaphore 'X'".
const PERMIT: &str = "a permit of semaphore";

/// `lock -n N NAME -- CMD`: one of the N permits of the semaphore NAME.
pub fn semaphore(config: &Config, out: &Out, signals: &Signals, a: &LockArgs, permits: u64) -> Result<u8, Fail> {
    // Validated before any I/O: the count, then the name (the slot names must fit).
    let max = simba::semaphore::MAX_PERMITS;
    let n = match u32::try_from(permits) {
        Ok(n) if (1..=max).contains(&n) => n,
        _ => {
            return Err(Fail::config(format!(
                "-n {permits} is out of range: a semaphore has 1 to {max} permits (give -n with the number of \
                 commands that may run at once)"
            )))
        }
    };
    simba::semaphore::fence_resource(a.name.as_str(), 0)?;
    if let Err(c) = resolve_command(out, &a.name, &a.command) {
        return Ok(c);
    }
    warn_process_local(config, out);
    let (_, session) = open_session(config)?;
    // Stores the limit on first use, or checks it against the stored one (exit 78 on a mismatch).
    let sem = match session.semaphore(a.name.as_str(), n) {
        Ok(s) => s,
        Err(e) => {
            let sid = session.id().to_string();
            close(session, &sid);
            return Err(e.into());
        }
    };
    let mut wait = Wait::new((config, out, signals), a, PERMIT, sem.name().clone(), session);
    wait.semaphore = Some(sem);
    let (session, held) = match wait.run() {
        Ok(r) => r,
        Err(Ended::Code(c)) => return Ok(c),
        Err(Ended::Fail(f)) => return Err(f),
    };
    let Held::Permit(permit) = &held else {
        return Err(Fail::new(code::INTERNAL, "internal", "a semaphore wait ended with no permit"));
    };
    let token = held.token()?;
    let (slot, lease) = (permit.slot(), permit.lease_name().to_string());
    let sid = session.id().to_string();
    out.progress(
        "acquired",
        &format!("acquired permit {slot} of semaphore '{}' (token {token}, session {sid}; {n} permits)", a.name),
        json!({"name": a.name, "slot": slot, "permits": n, "lease": lease, "token": token.get(), "session": sid}),
    );
    let env = [
        ("SIMBA_TOKEN", token.to_string()),
        ("SIMBA_SLOT", slot.to_string()),
        ("SIMBA_LEASE", lease.clone()),
        ("SIMBA_SESSION", sid.clone()),
    ];
    let fields = json!({"name": a.name, "slot": slot, "lease": lease, "token": token.get(), "session": sid});
    let run = Run { out, name: &a.name, what: PERMIT, grace: a.grace, signals };
    run_held(&run, a, session, held, &env, &["SIMBA_GROUP"], fields)
}

pub fn slot_json(slot: u32, sem: &Semaphore, h: &Holder) -> Value {
    let lease = sem.fence_resource(slot).map(|n| n.to_string()).unwrap_or_default();
    with(json!({"slot": slot, "lease": lease}), holder_json(h))
}

pub fn close(session: Session, sid: &str) {
    if let Err(e) = session.close() {
        log::warn!("closing session {sid} failed: {}", display_chain(&e));
    }
}

pub fn with(mut fields: Value, more: Value) -> Value {
    if let (Value::Object(m), Value::Object(more)) = (&mut fields, more) {
        m.extend(more);
    }
    fields
}

fn exited(out: &Out, fields: Value, c: i32) -> u8 {
    let c = u8::try_from(c).unwrap_or(code::INTERNAL);
    out.result("", with(fields, json!({"outcome": "exited", "exit_code": c})));
    c
}

fn lost_result(out: &Out, fields: Value, reason: &str, status: Option<&std::process::ExitStatus>) -> u8 {
    let child = status.map(supervise::exit_code);
    out.result(
        "",
        with(fields, json!({"outcome": "lost", "reason": reason, "command_exit_code": child, "exit_code": code::LOST})),
    );
    code::LOST
}

/// Running the command under supervision, with progress messages.
struct Run<'a> {
    out: &'a Out,
    name: &'a str,
    what: &'a str,
    grace: Duration,
    signals: &'a Signals,
}

impl Run<'_> {
    fn supervise(
        &self,
        command: &[OsString],
        env: &[(&str, String)],
        env_remove: &[&str],
        lost: &dyn Fn() -> Option<String>,
    ) -> Result<Outcome, Fail> {
        let (out, name, what) = (self.out, self.name, self.what);
        let notify = |n: Notice<'_>| match n {
            Notice::Started { pid } => log::debug!("command started as pid {pid}"),
            Notice::Lost { reason, pid } => out.progress(
                "lost",
                &format!("lost {what} '{name}' ({reason}): sending SIGTERM to the command (pid {pid})"),
                json!({"name": name, "reason": reason, "pid": pid}),
            ),
            Notice::Killing { pid, grace } => out.progress(
                "kill",
                &format!(
                    "the command (pid {pid}) did not exit within {}: sending SIGKILL",
                    humantime::format_duration(grace)
                ),
                json!({"name": name, "pid": pid}),
            ),
            Notice::Forwarded { signal, pid } => {
                log::info!("forwarded {signal} to the command (pid {pid})");
            }
        };
        let job = supervise::Job { cmd: command, env, env_remove, grace: self.grace, json: out.json };
        supervise::run(&job, self.signals.receiver(), lost, &notify).map_err(|e| {
            let code = if e.not_found { code::NOT_FOUND } else { code::CANNOT_EXECUTE };
            Fail::new(code, "command", e.message)
        })
    }
}

/// `join GROUP -- CMD`.
pub fn join(config: &Config, out: &Out, signals: &Signals, a: &JoinArgs) -> Result<u8, Fail> {
    simba::Name::new(&a.group)?;
    if let Err(c) = resolve_command(out, &a.group, &a.command) {
        return Ok(c);
    }
    warn_process_local(config, out);
    let (_backend, session) = open_session(config)?;
    let membership = session.join(a.group.as_str())?;
    let sid = session.id().to_string();
    out.progress(
        "joined",
        &format!("joined group '{}' (session {sid})", a.group),
        json!({"name": a.group, "session": sid}),
    );
    let env = [("SIMBA_GROUP", a.group.clone()), ("SIMBA_SESSION", sid.clone())];
    // The command runs while the session lives. A membership the backend loses meanwhile (a
    // late leave, a failover) is re-joined by the session at its next renewal (logged), so a
    // transient `is_member() == false` does not stop the command.
    let lost = || -> Option<String> {
        if session.is_alive() {
            None
        } else {
            Some(format!("session {} is {:?}", session.id(), session.state()))
        }
    };
    let run = Run { out, name: &a.group, what: "membership of", grace: a.grace, signals };
    let outcome = run.supervise(&a.command, &env, &["SIMBA_TOKEN", "SIMBA_LEASE", "SIMBA_SLOT"], &lost)?;
    let fields = json!({"name": a.group, "session": sid});
    let result = match outcome {
        Outcome::Exited(status) => {
            if let Err(e) = membership.leave() {
                log::warn!("leaving '{}' failed: {}", a.group, display_chain(&e));
            }
            exited(out, fields, supervise::exit_code(&status))
        }
        Outcome::Lost { reason, status } => lost_result(out, fields, &reason, status.as_ref()),
    };
    close(session, &sid);
    Ok(result)
}
