//! `work NAME --partitions N -- CMD`: a member of the partition set NAME that runs CMD once per
//! partition it owns (`SIMBA_PARTITION`, `SIMBA_TOKEN`, `SIMBA_LEASE`, `SIMBA_SESSION` in its
//! environment), each under the supervision of `supervise::run` on a thread of its own.
//!
//! The main thread turns the set's events into commands started and stopped:
//! - `Assigned`: the partition's command starts — once the command of an earlier term of that
//!   partition (if one is still stopping) has exited, so that a partition never runs twice here;
//! - `Revoking`: the command gets SIGTERM (SIGKILL after `--grace`); once it exited, the partition
//!   is released at once, so the hand-off does not wait for the drain's end;
//! - `Revoked`, `Lost`: the command gets SIGTERM (SIGKILL after `--grace`) if it still runs; a
//!   command also stops by itself the moment its partition's token fails (the local deadline);
//! - a command that exits on its own while its partition is still assigned is started again in a
//!   new term: after a back-off, the partition is released and claimed again (a new, larger
//!   token), so whatever the old run left behind is fenced off.
//!
//! SIGINT and SIGTERM stop every command, then the set is closed (every partition released) and
//! simba exits with 128 + the signal; SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 are forwarded to every
//! command. The member lives on a `Coordinator`: when its session expires (simba was stopped
//! longer than the lease, the backend was unreachable), its partitions are lost (their commands
//! stopped), and it joins the set again on a new session.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{after, never, select, unbounded, Receiver, Sender};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use simba::partitions::{Partition, PartitionEvent, PartitionOptions, Partitions, MAX_PARTITIONS};
use simba::{display_chain, Config, Coordinator, CoordinatorEvent, Events, LossReason, Token};

use crate::hold::{opening, resolve_command, warn_process_local};
use crate::out::{code, Fail, Out};
use crate::supervise::{self, Notice, Outcome, Signals, SpawnError};
use crate::WorkArgs;

/// The back-off before a command that exited on its own is started again: this after its first
/// exit, doubling with every further exit of a run shorter than [`RESTART_RESET`].
const RESTART_FIRST: Duration = Duration::from_secs(1);

/// The longest back-off.
const RESTART_MAX: Duration = Duration::from_secs(30);

/// A run at least this long starts the back-off afresh.
const RESTART_RESET: Duration = Duration::from_secs(60);

// `--drain`'s default ("5s" in its clap attribute) is the library's.
const _: () =
    assert!(simba::partitions::DEFAULT_DRAIN.as_secs() == 5 && simba::partitions::DEFAULT_DRAIN.subsec_nanos() == 0);

/// The term of a partition this member owns.
struct Term {
    partition: Partition,
    token: Token,
    /// `Revoking` was received: the command is stopped, then the partition released.
    revoking: bool,
    /// The command exited on its own: the partition is released (and claimed again) then.
    restart_at: Option<Instant>,
}

/// A command running (or stopping) for a partition.
struct Child {
    /// The term it runs in.
    token: Token,
    /// Set to the reason when it must stop (its supervisor sends SIGTERM, then SIGKILL).
    stop: Arc<Mutex<Option<String>>>,
    /// Signals to forward to it.
    signals: Sender<Signal>,
}

impl Child {
    fn stop(&self, reason: &str) {
        let mut stop = self.stop.lock().unwrap_or_else(PoisonError::into_inner);
        stop.get_or_insert_with(|| reason.to_string());
    }
}

/// One partition's state here: its term (if owned) and its command (if running).
#[derive(Default)]
struct Slot {
    term: Option<Term>,
    child: Option<Child>,
    /// Consecutive short runs that ended on their own (the back-off's exponent).
    quick_exits: u32,
}

/// A command's end, sent by its supervising thread.
struct Done {
    index: u32,
    token: Token,
    started: Instant,
    outcome: Result<Outcome, SpawnError>,
}

/// `work NAME --partitions N -- CMD`.
pub fn work(config: &Config, out: &Out, signals: &Signals, a: &WorkArgs) -> Result<u8, Fail> {
    // Validated before any I/O: the count, then the name (the partition lease names must fit).
    let count = match u32::try_from(a.partitions) {
        Ok(n) if (1..=MAX_PARTITIONS).contains(&n) => n,
        _ => {
            return Err(Fail::config(format!(
                "--partitions {} is out of range: a partition set has 1 to {MAX_PARTITIONS} partitions",
                a.partitions
            )))
        }
    };
    simba::partitions::fence_resource(a.name.as_str(), 0)?;
    if let Err(c) = resolve_command(out, &a.name, &a.command) {
        return Ok(c);
    }
    warn_process_local(config, out);
    let coordinator = opening(config, || Coordinator::start(config.connect()?, config.session_options()))?;
    let coordinator_events = coordinator.events();
    let options = PartitionOptions::default().drain(a.drain);
    // Stores the count on first use, or checks it against the stored one (exit 78 on a mismatch).
    let partitions = match coordinator.partitions_with(a.name.as_str(), count, options) {
        Ok(p) => p,
        Err(e) => {
            close_coordinator(coordinator);
            return Err(e.into());
        }
    };
    let sid = coordinator.session_id().map(|s| s.to_string()).unwrap_or_default();
    out.progress(
        "joined",
        &format!("joined partition set '{}' of {count} partitions (session {sid})", a.name),
        json!({"name": a.name, "partitions": count, "session": sid}),
    );
    let events = partitions.events();
    let (done_tx, done_rx) = unbounded();
    let mut w = Work { out, args: a, partitions: &partitions, slots: BTreeMap::new(), done_tx, stopping: None };
    let ended = w.run(signals, &events, &done_rx, &coordinator_events);
    drop(w);
    let tokens: BTreeMap<u32, u64> = partitions.owned().iter().map(|p| (p.index(), p.granted_token().get())).collect();
    let closed = partitions.close();
    for ev in events.try_iter() {
        if let PartitionEvent::Revoked { partition, generation, .. } = ev {
            out.progress(
                "revoked",
                &format!("released partition {partition} of '{}'", a.name),
                json!({"name": a.name, "partition": partition, "token": tokens.get(&partition), "generation": generation}),
            );
        }
    }
    if let Err(e) = closed {
        log::warn!("leaving partition set '{}' failed: {}", a.name, display_chain(&e));
    }
    close_coordinator(coordinator);
    let sig = ended?;
    let c = 128 + sig as u8;
    out.result("", json!({"name": a.name, "outcome": "interrupted", "signal": sig.as_str(), "exit_code": c}));
    Ok(c)
}

fn close_coordinator(coordinator: Coordinator) {
    if let Err(e) = coordinator.close() {
        log::warn!("closing the session failed: {}", display_chain(&e));
    }
}

/// The member at work.
struct Work<'a> {
    out: &'a Out,
    args: &'a WorkArgs,
    partitions: &'a Partitions,
    slots: BTreeMap<u32, Slot>,
    done_tx: Sender<Done>,
    /// The signal that is stopping simba.
    stopping: Option<Signal>,
}

impl Work<'_> {
    /// Runs until a signal stopped simba and every command exited: the signal.
    fn run(
        &mut self,
        signals: &Signals,
        events: &Events<PartitionEvent>,
        done: &Receiver<Done>,
        coordinator: &Events<CoordinatorEvent>,
    ) -> Result<Signal, Fail> {
        loop {
            if let Some(sig) = self.stopping {
                if self.slots.values().all(|s| s.child.is_none()) {
                    return Ok(sig);
                }
            }
            let timer = match self.slots.values().filter_map(|s| s.term.as_ref()?.restart_at).min() {
                Some(at) => after(at.saturating_duration_since(Instant::now())),
                None => never(),
            };
            select! {
                recv(signals.receiver()) -> sig => if let Ok(sig) = sig { self.on_signal(sig) },
                recv(events) -> ev => match ev {
                    Ok(ev) => self.on_event(ev),
                    Err(_) => {
                        self.stop_all("the partition set's events ended");
                        self.stopping.get_or_insert(Signal::SIGTERM);
                    }
                },
                recv(done) -> d => if let Ok(d) = d { self.on_done(d) },
                recv(coordinator) -> ev => if let Ok(ev) = ev { self.on_coordinator(ev) },
                recv(timer) -> _ => self.restart_due(),
            }
        }
    }

    fn name(&self) -> &str {
        &self.args.name
    }

    fn on_signal(&mut self, sig: Signal) {
        match sig {
            Signal::SIGINT | Signal::SIGTERM => {
                if self.stopping.is_none() {
                    self.out.progress(
                        "stopping",
                        &format!("received {sig}: stopping every command, then leaving '{}'", self.name()),
                        json!({"name": self.name(), "signal": sig.as_str()}),
                    );
                    self.stopping = Some(sig);
                }
                self.stop_all(&format!("simba received {sig}"));
            }
            _ => {
                for child in self.slots.values().filter_map(|s| s.child.as_ref()) {
                    let _ = child.signals.send(sig);
                }
            }
        }
    }

    fn stop_all(&mut self, reason: &str) {
        for slot in self.slots.values_mut() {
            if let Some(term) = &mut slot.term {
                term.restart_at = None;
            }
            if let Some(child) = &slot.child {
                child.stop(reason);
            }
        }
    }

    fn on_coordinator(&mut self, ev: CoordinatorEvent) {
        match ev {
            CoordinatorEvent::SessionLost { session } => self.out.progress(
                "session_lost",
                &format!(
                    "session {session} expired: its partitions of '{}' are lost; opening a new session",
                    self.name()
                ),
                json!({"name": self.name(), "session": session.as_str()}),
            ),
            CoordinatorEvent::Recovered { old, new, .. } => self.out.progress(
                "new_session",
                &format!("opened session {new} (replacing {old}) and joined '{}' again", self.name()),
                json!({"name": self.name(), "expired_session": old.as_str(), "session": new.as_str()}),
            ),
            CoordinatorEvent::OpenFailed { error } => self.out.progress(
                "warning",
                &format!("opening a new session failed (retrying): {error}"),
                json!({"name": self.name()}),
            ),
            _ => {}
        }
    }

    fn on_event(&mut self, ev: PartitionEvent) {
        match ev {
            PartitionEvent::Assigned { partition, token, generation } => self.assigned(partition, token, generation),
            PartitionEvent::Revoking { partition, deadline, generation, .. } => {
                let drain = deadline.saturating_duration_since(Instant::now());
                let slot = self.slots.entry(partition).or_default();
                let token = slot.term.as_ref().map(|t| t.token.get());
                let running = slot.child.is_some();
                if let Some(term) = &mut slot.term {
                    term.revoking = true;
                    term.restart_at = None;
                }
                if let Some(child) = &slot.child {
                    child.stop(&format!("partition {partition} is being handed off"));
                }
                self.out.progress(
                    "revoking",
                    &format!(
                        "partition {partition} of '{}' goes to another member (generation {generation}): {}, then \
                         releasing it (at the latest in {})",
                        self.name(),
                        if running { "stopping its command" } else { "its command is not running" },
                        show(drain)
                    ),
                    json!({"name": self.name(), "partition": partition, "token": token, "generation": generation,
                           "drain_ms": millis(drain)}),
                );
                if !running {
                    self.release(partition);
                }
            }
            PartitionEvent::Revoked { partition, generation, .. } => {
                let token = self.end_term(partition, "its partition was released");
                self.out.progress(
                    "revoked",
                    &format!("released partition {partition} of '{}' (generation {generation})", self.name()),
                    json!({"name": self.name(), "partition": partition, "token": token, "generation": generation}),
                );
            }
            PartitionEvent::Lost { partition, reason, generation, .. } => {
                let token = self.end_term(partition, &format!("partition {partition} was lost: {reason}"));
                self.out.progress(
                    "lost",
                    &format!("lost partition {partition} of '{}': {reason} (generation {generation})", self.name()),
                    json!({"name": self.name(), "partition": partition, "token": token, "generation": generation,
                           "reason": reason_name(reason)}),
                );
            }
            other => log::debug!("partition set '{}': {other:?}", self.name()),
        }
    }

    /// The term of `partition` ended: its command (if any) is stopped. Returns the term's token.
    fn end_term(&mut self, partition: u32, why: &str) -> Option<u64> {
        let slot = self.slots.entry(partition).or_default();
        let term = slot.term.take();
        if let Some(child) = &slot.child {
            if term.as_ref().is_none_or(|t| t.token == child.token) {
                child.stop(why);
            }
        }
        term.map(|t| t.token.get())
    }

    fn assigned(&mut self, partition: u32, token: Token, generation: u64) {
        let Some(p) =
            self.partitions.owned().into_iter().find(|p| p.index() == partition && p.granted_token() == token)
        else {
            log::debug!("partition {partition} (token {token}) was no longer owned when its assignment arrived");
            return;
        };
        let lease = p.lease_name().to_string();
        let session = p.session_id().to_string();
        let slot = self.slots.entry(partition).or_default();
        slot.term = Some(Term { partition: p, token, revoking: false, restart_at: None });
        let waiting = slot.child.is_some();
        self.out.progress(
            "assigned",
            &format!(
                "assigned partition {partition} of '{}' (token {token}, generation {generation}, session {session}){}",
                self.name(),
                if self.stopping.is_some() {
                    ": not starting its command, simba is stopping"
                } else if waiting {
                    ": its command starts once the previous term's has exited"
                } else {
                    ""
                }
            ),
            json!({"name": self.name(), "partition": partition, "token": token.get(), "generation": generation,
                   "lease": lease, "session": session}),
        );
        self.start_if_due(partition);
    }

    /// Starts the command of `partition` when its term is owned, nothing runs for it, and no
    /// hand-off, restart back-off or stop is in progress.
    fn start_if_due(&mut self, partition: u32) {
        if self.stopping.is_some() {
            return;
        }
        let Some(slot) = self.slots.get_mut(&partition) else { return };
        let Some(term) = &slot.term else { return };
        if slot.child.is_some() || term.revoking || term.restart_at.is_some() {
            return;
        }
        let (p, token) = (term.partition.clone(), term.token);
        let session = p.session_id().to_string();
        let env = vec![
            ("SIMBA_PARTITION", partition.to_string()),
            ("SIMBA_TOKEN", token.to_string()),
            ("SIMBA_LEASE", p.lease_name().to_string()),
            ("SIMBA_SESSION", session),
        ];
        let stop = Arc::new(Mutex::new(None::<String>));
        let (sig_tx, sig_rx) = unbounded();
        let ctx = Spawn {
            out: *self.out,
            name: self.args.name.clone(),
            command: self.args.command.clone(),
            grace: self.args.grace,
            done: self.done_tx.clone(),
        };
        let thread_stop = Arc::clone(&stop);
        let spawned = thread::Builder::new()
            .name(format!("simba-work-{partition}"))
            .spawn(move || ctx.supervise(p, token, &env, &thread_stop, &sig_rx));
        match spawned {
            Ok(_) => slot.child = Some(Child { token, stop, signals: sig_tx }),
            Err(e) => {
                self.out.progress(
                    "warning",
                    &format!("cannot start a thread for the command of partition {partition}: {e}; retrying"),
                    json!({"name": self.args.name, "partition": partition}),
                );
                if let Some(term) = &mut slot.term {
                    term.restart_at = Some(Instant::now() + RESTART_FIRST);
                }
            }
        }
    }

    fn on_done(&mut self, d: Done) {
        let ran = d.started.elapsed();
        let generation = self.partitions.generation();
        let stopping = self.stopping.is_some();
        let slot = self.slots.entry(d.index).or_default();
        slot.child = None;
        let (code, stopped, message) = match &d.outcome {
            Ok(Outcome::Exited(status)) => (Some(supervise::exit_code(status)), None, None),
            Ok(Outcome::Lost { reason, status }) => {
                (status.as_ref().map(supervise::exit_code), Some(reason.clone()), None)
            }
            Err(e) => (
                Some(i32::from(if e.not_found { code::NOT_FOUND } else { code::CANNOT_EXECUTE })),
                None,
                Some(e.message.clone()),
            ),
        };
        let same_term = slot.term.as_ref().is_some_and(|t| t.token == d.token);
        let mut restart_in = None;
        let mut release = false;
        if let (true, Some(term)) = (same_term, &mut slot.term) {
            if term.revoking {
                release = true;
            } else if stopped.is_none() && !stopping {
                // Exited on its own while the partition is still ours: a new term after a back-off.
                slot.quick_exits = if ran >= RESTART_RESET { 1 } else { slot.quick_exits.saturating_add(1) };
                let delay =
                    RESTART_FIRST.saturating_mul(1 << slot.quick_exits.saturating_sub(1).min(5)).min(RESTART_MAX);
                term.restart_at = Some(Instant::now() + delay);
                restart_in = Some(delay);
            }
        }
        let partition = d.index;
        let what = match (&stopped, restart_in, &message) {
            (_, _, Some(m)) => format!("could not run: {m}"),
            (Some(reason), _, _) => format!("stopped ({reason})"),
            (None, _, None) => "exited on its own".to_string(),
        };
        let then = match restart_in {
            Some(delay) => format!("; starting it again in a new term in {}", show(delay)),
            None if release => "; releasing the partition".to_string(),
            None => String::new(),
        };
        self.out.progress(
            "exit",
            &format!(
                "the command of partition {partition} of '{}' (token {}) {what}, exit code {}{then}",
                self.args.name,
                d.token,
                code.map_or_else(|| "unknown".to_string(), |c| c.to_string())
            ),
            json!({"name": self.args.name, "partition": partition, "token": d.token.get(), "generation": generation,
                   "exit_code": code, "stopped": stopped, "restart_in_ms": restart_in.map(millis)}),
        );
        if release {
            self.release(partition);
        }
        // A newer term may be waiting for this command to end.
        self.start_if_due(partition);
    }

    /// Releases the partitions whose restart back-off ended: each is claimed again in a new term
    /// (an `Assigned` with a larger token starts its command).
    fn restart_due(&mut self) {
        let now = Instant::now();
        let due: Vec<u32> = self
            .slots
            .iter()
            .filter(|(_, s)| s.term.as_ref().and_then(|t| t.restart_at).is_some_and(|at| at <= now))
            .map(|(i, _)| *i)
            .collect();
        for partition in due {
            if let Some(term) = self.slots.get_mut(&partition).and_then(|s| s.term.as_mut()) {
                term.restart_at = None;
            }
            self.release(partition);
        }
    }

    /// Releases the owned term of `partition` (reported `Revoked` by the set).
    fn release(&mut self, partition: u32) {
        let Some(term) = self.slots.get(&partition).and_then(|s| s.term.as_ref()) else { return };
        if let Err(e) = term.partition.clone().release() {
            log::warn!("releasing partition {partition} of '{}' failed: {}", self.args.name, display_chain(&e));
        }
    }
}

/// What a command's supervising thread needs.
struct Spawn {
    out: Out,
    name: String,
    command: Vec<OsString>,
    grace: Duration,
    done: Sender<Done>,
}

impl Spawn {
    /// Runs the command of partition `p` in the term of `token` until it exits (stopped when
    /// `stop` is set or the partition's token fails), then reports it.
    fn supervise(
        self,
        p: Partition,
        token: Token,
        env: &[(&str, String)],
        stop: &Mutex<Option<String>>,
        signals: &Receiver<Signal>,
    ) {
        let (out, name, index) = (self.out, self.name.as_str(), p.index());
        let lost = || -> Option<String> {
            let stop = stop.lock().unwrap_or_else(PoisonError::into_inner).clone();
            stop.or_else(|| p.token().err().map(|e| format!("partition {index}: {e}")))
        };
        let notify = |n: Notice<'_>| match n {
            Notice::Started { pid } => log::debug!("the command of partition {index} started as pid {pid}"),
            Notice::Lost { reason, pid } => out.progress(
                "stopping",
                &format!("{reason}: sending SIGTERM to the command of partition {index} (pid {pid})"),
                json!({"name": name, "partition": index, "token": token.get(), "reason": reason, "pid": pid}),
            ),
            Notice::Killing { pid, grace } => out.progress(
                "kill",
                &format!(
                    "the command of partition {index} (pid {pid}) did not exit within {}: sending SIGKILL",
                    show(grace)
                ),
                json!({"name": name, "partition": index, "token": token.get(), "pid": pid}),
            ),
            Notice::Forwarded { signal, pid } => log::info!("forwarded {signal} to the command (pid {pid})"),
        };
        let job = supervise::Job {
            cmd: &self.command,
            env,
            env_remove: &["SIMBA_GROUP", "SIMBA_SLOT"],
            grace: self.grace,
            json: out.json,
        };
        let started = Instant::now();
        let outcome = supervise::run(&job, signals, &lost, &notify);
        let _ = self.done.send(Done { index, token, started, outcome });
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// A duration in whole milliseconds, as humans read it.
fn show(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(millis(d))).to_string()
}

/// A loss reason as a JSON value: `not_owned`, `deadline`, `session_expired`, `session_closed`.
fn reason_name(reason: LossReason) -> Value {
    let debug = format!("{reason:?}");
    let mut snake = String::new();
    for (i, c) in debug.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            snake.push('_');
        }
        snake.push(c.to_ascii_lowercase());
    }
    Value::from(snake)
}
