//! `lock`, `lock -n N`, `elect` and `join`: wait for the lock (permit, leadership), then run the
//! command while it is held, terminating it the moment it is lost.
//!
//! Waiting is made of whole attempts: each lock attempt is one [`Session::try_lock`] (a permit
//! attempt one [`Semaphore::try_acquire`], one round over the slots), bounded by the query
//! timeout and never cut short by `--timeout` or by the loop's own pacing, so a backend
//! whose acquire is slow can still win and a failing acquire reports its own error. Between
//! attempts simba waits for a pushed release (where the backend pushes) or the retry interval,
//! and notices signals. A session that ends while simba only *waits* (simba was stopped, the
//! backend was unreachable for longer than the lease) is replaced by a new one and the wait goes
//! on; exit 79 is reserved for a loss while the command runs.

use std::ffi::OsString;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender, TryRecvError};
use nix::sys::signal::Signal;
use serde_json::{json, Value};
use simba::backend::{Holder, LeaseBackend, Notification, Topic};
use simba::{
    display_chain, Config, Election, ElectionEvent, ErrorKind, Events, Lease, Permit, Semaphore, Session, SessionId,
};

use crate::out::{code, Fail, Out};
use crate::supervise::{self, Notice, Outcome, Signals};
use crate::{JoinArgs, LockArgs};

/// How often an election wait looks at signals and at who leads.
const ELECTION_SLICE: Duration = Duration::from_millis(500);

/// How often a persisting failure of the attempts is reported again.
const REPEAT_ERROR: Duration = Duration::from_secs(30);

/// Attempts of [`open_session`] before simba gives up at start-up.
const OPEN_ATTEMPTS: u32 = 3;

/// Connects and opens a session, retrying transient failures (a slow first call on a loaded
/// machine) a few times before giving up with exit 69.
pub fn open_session(config: &Config) -> Result<(Arc<dyn LeaseBackend>, Session), Fail> {
    let mut attempt = 1;
    loop {
        match open_once(config) {
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

fn open_once(config: &Config) -> simba::Result<(Arc<dyn LeaseBackend>, Session)> {
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

fn describe_holder(h: &Holder) -> String {
    if h.metadata.is_empty() {
        format!("{} (token {})", h.session, h.token)
    } else {
        format!("{} (token {}, {})", h.session, h.token, h.metadata)
    }
}

fn warn_process_local(config: &Config, out: &Out) {
    if config.backend_kind() == simba::BackendKind::Memory {
        out.progress(
            "warning",
            "memory:// is process-local: other simba processes do not see this lock, semaphore, leadership or group",
            json!({}),
        );
    }
}

/// Checks the command before anything is taken: a typo must never consume a token.
fn resolve_command(out: &Out, name: &str, command: &[OsString]) -> Result<(), u8> {
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
enum Held {
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

/// A slot held by another session, as a waiter last saw it: (slot, holder, token).
type SlotHeld = (u32, SessionId, u64);

/// How often a wait for a permit reads who holds the slots again (one read per slot).
const HOLDERS_EVERY: Duration = Duration::from_secs(10);

/// A wait for a lock or leadership.
struct Wait<'a> {
    config: &'a Config,
    out: &'a Out,
    signals: &'a Signals,
    name: &'a str,
    lease: simba::Name,
    what: &'static str,
    start: Instant,
    deadline: Option<Instant>,
    backend: Arc<dyn LeaseBackend>,
    session: Session,
    election: Option<Election>,
    /// `lock -n N`: the semaphore whose permit is awaited (`lease` is unused then).
    semaphore: Option<Semaphore>,
    /// The slot holders last reported while waiting for a permit, and when they were read.
    slots_seen: Option<(Vec<SlotHeld>, Instant)>,
    /// The election's events: its first attempt's outcome shows there.
    events: Option<Events<ElectionEvent>>,
    /// The first attempt's outcome is known (a lock attempt returns it; a campaign attempt shows
    /// it as an event). Until then `--timeout` does not end the wait...
    answered: bool,
    /// ... unless the first attempt's own bound (the query timeout) passed.
    first_by: Instant,
    last_seen: Option<(SessionId, u64)>,
    last_error: Option<String>,
    /// The last error reported (digits removed) and when.
    reported: Option<(String, Instant)>,
    /// The release registration still running from an earlier round (its wait timed out): the
    /// next rounds wait for it instead of starting another.
    registering: Option<Registration>,
}

/// A release registration running on its own thread: `done` gets a message when it finished.
struct Registration {
    done: Receiver<()>,
    thread: thread::JoinHandle<()>,
}

impl Registration {
    /// Waits for the (finished) thread, so that it is gone before another one starts.
    fn join(self) {
        if self.thread.join().is_err() {
            log::debug!("the thread registering for releases panicked (polling covers it)");
        }
    }
}

/// How a wait ended without the lock.
enum Ended {
    /// The result is printed; exit with this code.
    Code(u8),
    Fail(Fail),
}

impl From<Fail> for Ended {
    fn from(f: Fail) -> Ended {
        Ended::Fail(f)
    }
}

impl From<simba::Error> for Ended {
    fn from(e: simba::Error) -> Ended {
        Ended::Fail(e.into())
    }
}

impl Wait<'_> {
    /// A holder seen while waiting: reported when it changes; never this session itself (its own
    /// attempt may hold the lease for an instant).
    fn show_holder(&mut self, h: Option<Holder>) {
        let Some(h) = h else { return };
        if &h.session == self.session.id() {
            return;
        }
        let key = Some((h.session.clone(), h.token.get()));
        if key != self.last_seen {
            self.out.progress(
                "waiting",
                &format!("waiting for {} '{}' held by {}", self.what, self.name, describe_holder(&h)),
                json!({"name": self.name, "holder": holder_json(&h)}),
            );
            self.last_seen = key;
        }
    }

    /// A failed attempt: reported when its error differs from the last one reported (tokens and
    /// times aside), and every [`REPEAT_ERROR`] while it persists.
    fn show_error(&mut self, e: &simba::Error) {
        let msg = display_chain(e);
        let shape: String = msg.chars().filter(|c| !c.is_ascii_digit()).collect();
        let repeat = match &self.reported {
            Some((s, at)) => *s != shape || at.elapsed() >= REPEAT_ERROR,
            None => true,
        };
        if repeat {
            self.out.progress(
                "warning",
                &format!("attempt to take {} '{}' failed (retrying): {msg}", self.what, self.name),
                json!({"name": self.name}),
            );
            self.reported = Some((shape, Instant::now()));
        }
        self.last_error = Some(msg);
    }

    /// Every slot held by others while waiting for a permit: reported when the holders change,
    /// read at most every [`HOLDERS_EVERY`] (one backend read per slot).
    fn show_slot_holders(&mut self, sem: &Semaphore) {
        if self.slots_seen.as_ref().is_some_and(|(_, at)| at.elapsed() < HOLDERS_EVERY) {
            return;
        }
        let holders = match sem.holders() {
            Ok(h) => h,
            Err(e) => {
                log::debug!("reading the holders of semaphore '{}' failed: {}", self.name, display_chain(&e));
                return;
            }
        };
        let others: Vec<&(u32, Holder)> = holders.iter().filter(|(_, h)| &h.session != self.session.id()).collect();
        let key: Vec<SlotHeld> = others.iter().map(|(i, h)| (*i, h.session.clone(), h.token.get())).collect();
        let changed = self.slots_seen.as_ref().is_none_or(|(k, _)| *k != key);
        self.slots_seen = Some((key, Instant::now()));
        if !changed || others.is_empty() {
            return;
        }
        let list: Vec<String> = others.iter().map(|(i, h)| format!("slot {i}: {}", describe_holder(h))).collect();
        let json: Vec<Value> = others.iter().map(|(i, h)| slot_json(*i, sem, h)).collect();
        self.out.progress(
            "waiting",
            &format!(
                "waiting for {} '{}': {} of {} permits held ({})",
                self.what,
                self.name,
                others.len(),
                sem.permits(),
                list.join("; ")
            ),
            json!({"name": self.name, "permits": sem.permits(), "holders": json}),
        );
    }

    fn waited(&self) -> String {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        humantime::format_duration(Duration::from_millis(ms)).to_string()
    }

    /// Ends the wait: gives up the campaign and closes the session.
    fn close(self) {
        drop(self.election);
        if let Err(e) = self.session.close() {
            log::debug!("closing the session failed: {}", display_chain(&e));
        }
    }

    fn interrupted(self, sig: Signal) -> Ended {
        let (out, name, what) = (*self.out, self.name.to_string(), self.what);
        self.close();
        interrupted(&out, &name, what, sig)
    }

    fn timed_out(self) -> Ended {
        let (out, name, what, waited) = (*self.out, self.name.to_string(), self.what, self.waited());
        let last_error = self.last_error.clone();
        self.close();
        if let Some(err) = last_error {
            // The backend failed every attempt lately: that is the reason, not a busy lock.
            return Ended::Fail(Fail::new(
                code::UNAVAILABLE,
                "unavailable",
                format!("gave up on {what} '{name}' after {waited}: the last attempt failed: {err}"),
            ));
        }
        out.progress("timeout", &format!("gave up on {what} '{name}' after {waited}"), json!({"name": name}));
        out.result("", json!({"name": name, "outcome": "timeout", "exit_code": code::TIMEOUT}));
        Ended::Code(code::TIMEOUT)
    }

    /// The session ended while waiting: open a new one (retrying until the deadline or a signal)
    /// and campaign again.
    fn replace_session(&mut self, why: &simba::Error) -> Result<(), Ended> {
        let expired = self.session.id().clone();
        let retry = self.config.session_options().retry_interval();
        let (backend, session) = loop {
            match open_once(self.config) {
                Ok(r) => break r,
                Err(e) if e.is_retryable() => self.show_error(&e),
                Err(e) => return Err(e.into()),
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                return Err(Ended::Fail(Fail::new(
                    code::UNAVAILABLE,
                    "unavailable",
                    format!(
                        "gave up on {} '{}' after {}: session {expired} ended ({why}) and a new one could not be \
                         opened: {}",
                        self.what,
                        self.name,
                        self.waited(),
                        self.last_error.as_deref().unwrap_or("")
                    ),
                )));
            }
            if let Ok(sig) = self.signals.receiver().recv_timeout(retry) {
                return Err(interrupted(self.out, self.name, self.what, sig));
            }
        };
        let old = std::mem::replace(&mut self.session, session);
        self.backend = backend;
        drop(self.election.take());
        drop(old);
        if let Some(sem) = &self.semaphore {
            self.semaphore = Some(self.session.semaphore(sem.name().clone(), sem.permits())?);
        }
        if self.what == ELECT {
            let e = self.session.campaign(&self.lease)?;
            self.events = Some(e.events());
            self.election = Some(e);
        }
        self.last_seen = None;
        self.slots_seen = None;
        self.out.progress(
            "new_session",
            &format!(
                "the session ended while waiting for {} '{}' ({why}); opened session {} and kept waiting",
                self.what,
                self.name,
                self.session.id()
            ),
            json!({"name": self.name, "expired_session": expired.as_str(), "session": self.session.id().as_str()}),
        );
        Ok(())
    }

    /// When `--timeout` ends the wait: never before the first attempt answered (or its bound
    /// passed), so `--timeout 0s` is one attempt.
    fn give_up_at(&self) -> Option<Instant> {
        if self.answered {
            self.deadline
        } else {
            self.deadline.map(|d| d.max(self.first_by))
        }
    }

    /// One attempt: `Ok(Some)` when taken, `Ok(None)` when busy or failed transiently.
    fn attempt(&mut self) -> Result<Option<Held>, Ended> {
        let r = match &self.election {
            Some(e) => {
                let now = Instant::now();
                let until = self.give_up_at().map_or(now + ELECTION_SLICE, |d| d.min(now + ELECTION_SLICE));
                let r = e.wait_elected_deadline(until);
                if let Some(events) = &self.events {
                    let attempted = |ev: ElectionEvent| matches!(ev, ElectionEvent::LeaderChanged { .. });
                    self.answered |= events.try_iter().any(attempted);
                }
                match r {
                    Ok(_) => return Ok(self.election.take().map(Held::Election)),
                    Err(err) if err.is_timeout() => {
                        // The campaign's own attempts, bounded by the query timeout, report
                        // their real error (e.g. too few replicas acknowledged).
                        if let Some(failed) = e.last_attempt_error() {
                            self.answered = true;
                            self.show_error(&failed);
                            return Ok(None);
                        }
                        self.last_error = None;
                        let leader = e.leader().ok().flatten();
                        // Another live leader: the attempt is busy, whenever it runs.
                        self.answered |= leader.as_ref().is_some_and(|h| &h.session != self.session.id());
                        self.show_holder(leader);
                        return Ok(None);
                    }
                    Err(err) => Err(err),
                }
            }
            None => {
                let r = match &self.semaphore {
                    Some(sem) => sem.try_acquire().map(|p| p.map(Held::Permit)),
                    None => self.session.try_lock(&self.lease).map(|l| l.map(Held::Lease)),
                };
                self.answered = true;
                r
            }
        };
        match r {
            Ok(Some(h)) => Ok(Some(h)),
            Ok(None) => {
                self.last_error = None;
                if let Some(sem) = self.semaphore.clone() {
                    self.show_slot_holders(&sem);
                } else {
                    let holder = self.session.leader(&self.lease).ok().flatten();
                    self.show_holder(holder);
                }
                Ok(None)
            }
            Err(e) if matches!(e.kind(), ErrorKind::SessionExpired | ErrorKind::Closed) => {
                self.replace_session(&e)?;
                Ok(None)
            }
            Err(e) if e.is_retryable() => {
                self.show_error(&e);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Registers a one-shot interest in the release of the lock (of any slot, for a permit) and
    /// waits for the registration to complete, so that a release landing right after the next
    /// attempt found the lock busy is pushed to `wake`. (Registering without waiting lets the
    /// attempt overtake it: the backend's first registration may have to open its notification
    /// connection, and a release between the busy attempt and the registration woke nobody.)
    /// The registration runs on a thread, as it is a backend call and may hang: the wait for it
    /// is bounded by the query timeout, after which the attempt goes ahead and the poll covers
    /// a missed release. A registration still running from an earlier round is waited for again
    /// (with the same bound) instead of starting another beside it, so a backend whose
    /// registrations hang has at most one in flight, not one more per round. `Some(signal)` when
    /// a signal came meanwhile.
    fn register(&mut self, wake: &Sender<Notification>) -> Option<Signal> {
        let pending = match self.registering.take() {
            Some(r) if matches!(r.done.try_recv(), Err(TryRecvError::Empty)) => Some(r),
            Some(r) => {
                r.join();
                None
            }
            None => None,
        };
        let (registration, earlier) = match pending {
            Some(r) => (r, true),
            None => match self.start_registration(wake) {
                Some(r) => (r, false),
                None => return None,
            },
        };
        let bound = self.config.query_timeout();
        select! {
            recv(registration.done) -> _ => {
                registration.join();
                None
            }
            recv(self.signals.receiver()) -> sig => {
                self.registering = Some(registration);
                sig.ok()
            }
            default(bound) => {
                let since = if earlier { " (still the one of an earlier attempt)" } else { "" };
                log::debug!(
                    "registering for the release of {} '{}' took longer than {}{since}: attempting anyway (polling covers it)",
                    self.what,
                    self.name,
                    humantime::format_duration(bound)
                );
                self.registering = Some(registration);
                None
            }
        }
    }

    /// Starts a registration for the release of the lock (of every slot, for a permit) on its own
    /// thread; `None` when no thread can be started (the wait polls).
    fn start_registration(&self, wake: &Sender<Notification>) -> Option<Registration> {
        let topics: Vec<Topic> = match &self.semaphore {
            Some(sem) => (0..sem.permits()).filter_map(|i| sem.fence_resource(i).ok()).map(Topic::Lease).collect(),
            None => vec![Topic::Lease(self.lease.clone())],
        };
        log::debug!("registering for the release of {} '{}'", self.what, self.name);
        let (backend, tx) = (Arc::clone(&self.backend), wake.clone());
        let (done_tx, done) = bounded::<()>(1);
        let spawned = thread::Builder::new().name("simba-watch".into()).spawn(move || {
            for topic in topics {
                if let Err(e) = backend.watch(&topic, &tx) {
                    log::debug!("watching {topic:?} failed (polling instead): {e}");
                }
            }
            let _ = done_tx.send(());
        });
        match spawned {
            Ok(thread) => Some(Registration { done, thread }),
            Err(e) => {
                log::debug!("cannot start a thread to watch for releases (polling instead): {e}");
                None
            }
        }
    }

    /// Waits for the lock (leadership): at least one attempt, however short `--timeout` is.
    fn run(mut self) -> Result<(Session, Held), Ended> {
        // Before every attempt, or — where the registration checks the lease itself — after a
        // busy one only (a lock found free then needs no registration at all).
        let registration = self.backend.capabilities().lease_registration();
        let (wake_tx, wake_rx) = unbounded();
        let retry = self.config.session_options().retry_interval();
        loop {
            if let Ok(sig) = self.signals.receiver().try_recv() {
                return Err(self.interrupted(sig));
            }
            if registration.before_attempt() && self.election.is_none() {
                if let Some(sig) = self.register(&wake_tx) {
                    return Err(self.interrupted(sig));
                }
            }
            if let Some(held) = self.attempt()? {
                return Ok((self.session, held));
            }
            let now = Instant::now();
            if self.give_up_at().is_some_and(|d| now >= d) {
                return Err(self.timed_out());
            }
            if self.election.is_some() {
                continue;
            }
            if registration.after_busy() {
                if let Some(sig) = self.register(&wake_tx) {
                    return Err(self.interrupted(sig));
                }
            }
            let jitter = retry.mul_f64(rand::random::<f64>() / 2.0);
            let pause = self.give_up_at().map_or(retry + jitter, |d| (retry + jitter).min(d - now));
            select! {
                recv(wake_rx) -> _ => while wake_rx.try_recv().is_ok() {},
                recv(self.signals.receiver()) -> sig => {
                    if let Ok(sig) = sig {
                        return Err(self.interrupted(sig));
                    }
                }
                default(pause) => {}
            }
        }
    }
}

const ELECT: &str = "leadership of";

/// The end of a wait interrupted by `sig`: exit 128 + N, with a result line.
fn interrupted(out: &Out, name: &str, what: &str, sig: Signal) -> Ended {
    let c = 128 + sig as u8;
    out.progress(
        "interrupted",
        &format!("interrupted by {sig} while waiting for {what} '{name}'"),
        json!({"name": name, "signal": sig.as_str()}),
    );
    out.result("", json!({"name": name, "outcome": "interrupted", "signal": sig.as_str(), "exit_code": c}));
    Ended::Code(c)
}

/// `lock NAME -- CMD` and `elect NAME -- CMD`.
pub fn lock(config: &Config, out: &Out, signals: &Signals, a: &LockArgs, elect: bool) -> Result<u8, Fail> {
    let what = if elect { ELECT } else { "lock" };
    let lease = simba::Name::new(&a.name)?;
    if let Err(c) = resolve_command(out, &a.name, &a.command) {
        return Ok(c);
    }
    warn_process_local(config, out);
    let (backend, session) = open_session(config)?;
    let start = Instant::now();
    let election = if elect { Some(session.campaign(&lease)?) } else { None };
    let events = election.as_ref().map(Election::events);
    let wait = Wait {
        config,
        out,
        signals,
        name: &a.name,
        lease,
        what,
        start,
        deadline: a.timeout.and_then(|t| start.checked_add(t)),
        backend,
        session,
        election,
        semaphore: None,
        slots_seen: None,
        events,
        answered: false,
        // A campaign attempt is bounded by the query timeout; a little more for its dispatch.
        first_by: start + config.query_timeout() + ELECTION_SLICE,
        last_seen: None,
        last_error: None,
        reported: None,
        registering: None,
    };
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
    let (backend, session) = open_session(config)?;
    // Stores the limit on first use, or checks it against the stored one (exit 78 on a mismatch).
    let sem = match session.semaphore(a.name.as_str(), n) {
        Ok(s) => s,
        Err(e) => {
            let sid = session.id().to_string();
            close(session, &sid);
            return Err(e.into());
        }
    };
    let start = Instant::now();
    let wait = Wait {
        config,
        out,
        signals,
        name: &a.name,
        lease: sem.name().clone(),
        what: PERMIT,
        start,
        deadline: a.timeout.and_then(|t| start.checked_add(t)),
        backend,
        session,
        election: None,
        semaphore: Some(sem),
        slots_seen: None,
        events: None,
        answered: false,
        first_by: start + config.query_timeout() + ELECTION_SLICE,
        last_seen: None,
        last_error: None,
        reported: None,
        registering: None,
    };
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

/// A slot holder as JSON: the holder's fields, the slot and its lease name.
pub fn slot_json(slot: u32, sem: &Semaphore, h: &Holder) -> Value {
    let lease = sem.fence_resource(slot).map(|n| n.to_string()).unwrap_or_default();
    with(json!({"slot": slot, "lease": lease}), holder_json(h))
}

fn close(session: Session, sid: &str) {
    if let Err(e) = session.close() {
        log::warn!("closing session {sid} failed: {}", display_chain(&e));
    }
}

fn with(mut fields: Value, more: Value) -> Value {
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
        supervise::run(&job, self.signals, lost, &notify).map_err(|e| {
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
