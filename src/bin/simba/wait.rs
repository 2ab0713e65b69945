//! Waiting for a lock, a permit or leadership, and what simba shows meanwhile.
//!
//! A lock (permit) wait is the library's own: one [`Session::lock_cancellable`]
//! ([`Semaphore::acquire_cancellable`]) call, whose wait loop registers for the release where the
//! backend says and wakes on a pushed release, the retry interval or a signal (the signal thread
//! cancels the wait's token, [`Signals::cancel`]). simba only reports, from the call's observer:
//! who holds the lock after a busy attempt (for a permit, every [`HOLDERS_EVERY`]) and why an
//! attempt failed. Each attempt is bounded by the query timeout and never cut short by
//! `--timeout`. An election campaigns in the background; simba waits for it in slices and looks
//! at who leads. A session that ends while simba only *waits* (simba was stopped, the backend was
//! unreachable for longer than the lease) is replaced by a new one and the wait goes on.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{json, Value};
use simba::backend::Holder;
use simba::semaphore::Semaphore;
use simba::{display_chain, Attempt, Config, Election, ElectionEvent, ErrorKind, Events, Session, SessionId};

use crate::hold::{describe_holder, holder_json, open_once, slot_json, Held};
use crate::out::{code, Fail, Out};
use crate::supervise::Signals;
use crate::LockArgs;

/// How often an election wait looks at signals and at who leads.
const ELECTION_SLICE: Duration = Duration::from_millis(500);

/// How often a persisting failure of the attempts is reported again.
const REPEAT_ERROR: Duration = Duration::from_secs(30);

/// A slot held by another session, as a waiter last saw it: (slot, holder, token).
type SlotHeld = (u32, SessionId, u64);

/// How often a wait for a permit reads who holds the slots again (one read per slot).
const HOLDERS_EVERY: Duration = Duration::from_secs(10);

/// What a wait tells the user while it waits: the holder when it changes, failed attempts.
struct Progress<'a> {
    out: &'a Out,
    name: &'a str,
    what: &'static str,
    last_seen: Option<(SessionId, u64)>,
    /// The slot holders last reported while waiting for a permit, and when they were read.
    slots_seen: Option<(Vec<SlotHeld>, Instant)>,
    last_error: Option<String>,
    /// The last error reported (digits removed) and when.
    reported: Option<(String, Instant)>,
}

impl Progress<'_> {
    /// A holder seen while waiting: reported when it changes; never this session itself (`me`:
    /// its own attempt may hold the lease for an instant).
    fn show_holder(&mut self, me: &SessionId, h: Option<Holder>) {
        let Some(h) = h.filter(|h| &h.session != me) else { return };
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
        if self.reported.as_ref().is_none_or(|(s, at)| *s != shape || at.elapsed() >= REPEAT_ERROR) {
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
    fn show_slot_holders(&mut self, me: &SessionId, sem: &Semaphore) {
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
        let others: Vec<&(u32, Holder)> = holders.iter().filter(|(_, h)| &h.session != me).collect();
        let key: Vec<SlotHeld> = others.iter().map(|(i, h)| (*i, h.session.clone(), h.token.get())).collect();
        let changed = self.slots_seen.as_ref().is_none_or(|(k, _)| *k != key);
        self.slots_seen = Some((key, Instant::now()));
        if !changed || others.is_empty() {
            return;
        }
        let list: Vec<String> = others.iter().map(|(i, h)| format!("slot {i}: {}", describe_holder(h))).collect();
        let json: Vec<Value> = others.iter().map(|(i, h)| slot_json(*i, sem, h)).collect();
        let (n, permits) = (others.len(), sem.permits());
        self.out.progress(
            "waiting",
            &format!("waiting for {} '{}': {n} of {permits} permits held ({})", self.what, self.name, list.join("; ")),
            json!({"name": self.name, "permits": permits, "holders": json}),
        );
    }
}

/// A wait for a lock, a permit or leadership.
pub struct Wait<'a> {
    config: &'a Config,
    signals: &'a Signals,
    progress: Progress<'a>,
    pub lease: simba::Name,
    start: Instant,
    deadline: Option<Instant>,
    pub session: Session,
    pub election: Option<Election>,
    /// `lock -n N`: the semaphore whose permit is awaited (`lease` is unused then).
    pub semaphore: Option<Semaphore>,
    /// The election's events: its first attempt's outcome shows there.
    pub events: Option<Events<ElectionEvent>>,
    /// The election's first attempt's outcome is known (it shows as an event). Until then
    /// `--timeout` does not end the wait...
    answered: bool,
    /// ... unless the first attempt's own bound (the query timeout) passed.
    first_by: Instant,
}

impl<'a> Wait<'a> {
    /// A wait for `lease` (a semaphore's name for a permit) on `session`, started now.
    pub fn new(ctx: Ctx<'a>, a: &'a LockArgs, what: &'static str, lease: simba::Name, session: Session) -> Self {
        let (config, out, signals) = ctx;
        let start = Instant::now();
        let (last_seen, slots_seen, last_error, reported) = (None, None, None, None);
        Wait {
            config,
            signals,
            progress: Progress { out, name: &a.name, what, last_seen, slots_seen, last_error, reported },
            lease,
            start,
            deadline: a.timeout.and_then(|t| start.checked_add(t)),
            session,
            election: None,
            semaphore: None,
            events: None,
            answered: false,
            // A campaign attempt is bounded by the query timeout; a little more for its dispatch.
            first_by: start + config.query_timeout() + ELECTION_SLICE,
        }
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
        let (out, name, what) = (*self.progress.out, self.progress.name.to_string(), self.progress.what);
        self.close();
        interrupted(&out, &name, what, sig)
    }

    fn timed_out(self) -> Ended {
        let (out, name, what, waited) =
            (*self.progress.out, self.progress.name.to_string(), self.progress.what, self.waited());
        let last_error = self.progress.last_error.clone();
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
        let (what, name) = (self.progress.what, self.progress.name);
        let session = loop {
            match open_once(self.config) {
                Ok((_, s)) => break s,
                Err(e) if e.is_retryable() => self.progress.show_error(&e),
                Err(e) => return Err(e.into()),
            }
            if self.deadline.is_some_and(|d| Instant::now() >= d) {
                let (waited, last) = (self.waited(), self.progress.last_error.as_deref().unwrap_or(""));
                let message = format!(
                    "gave up on {what} '{name}' after {waited}: session {expired} ended ({why}) and a new one could \
                     not be opened: {last}"
                );
                return Err(Ended::Fail(Fail::new(code::UNAVAILABLE, "unavailable", message)));
            }
            if let Ok(sig) = self.signals.receiver().recv_timeout(retry) {
                return Err(interrupted(self.progress.out, name, what, sig));
            }
        };
        let old = std::mem::replace(&mut self.session, session);
        drop(self.election.take());
        drop(old);
        if let Some(sem) = &self.semaphore {
            self.semaphore = Some(self.session.semaphore(sem.name().clone(), sem.permits())?);
        }
        if what == ELECT {
            let e = self.session.campaign(&self.lease)?;
            self.events = Some(e.events());
            self.election = Some(e);
        }
        (self.progress.last_seen, self.progress.slots_seen) = (None, None);
        let sid = self.session.id();
        self.progress.out.progress(
            "new_session",
            &format!(
                "the session ended while waiting for {what} '{name}' ({why}); opened session {sid} and kept waiting"
            ),
            json!({"name": name, "expired_session": expired.as_str(), "session": sid.as_str()}),
        );
        Ok(())
    }

    /// When `--timeout` ends an election's wait: never before its first attempt answered (or
    /// its bound passed), so `--timeout 0s` is one attempt.
    fn give_up_at(&self) -> Option<Instant> {
        if self.answered {
            self.deadline
        } else {
            self.deadline.map(|d| d.max(self.first_by))
        }
    }

    /// The library's wait for the lock (permit), until `--timeout` (`Ok(None)`) or a signal
    /// (`Cancelled`); the observer reports the holders and failed attempts.
    fn wait_lease(&mut self) -> simba::Result<Option<Held>> {
        let (session, progress, lease) = (&self.session, &mut self.progress, &self.lease);
        let (me, cancel) = (session.id(), self.signals.cancel());
        match &self.semaphore {
            Some(sem) => sem
                .acquire_cancellable(self.deadline, cancel, |attempt| match attempt {
                    Attempt::Busy => {
                        progress.last_error = None;
                        progress.show_slot_holders(me, sem);
                    }
                    Attempt::Failed(e) => progress.show_error(e),
                    _ => {}
                })
                .map(|p| p.map(Held::Permit)),
            None => session
                .lock_cancellable(lease, self.deadline, cancel, |attempt| match attempt {
                    Attempt::Busy => {
                        progress.last_error = None;
                        progress.show_holder(me, session.leader(lease).ok().flatten());
                    }
                    Attempt::Failed(e) => progress.show_error(e),
                    _ => {}
                })
                .map(|l| l.map(Held::Lease)),
        }
    }

    /// One slice of an election's wait: `Ok(None)` while not elected.
    fn wait_elected(&mut self) -> simba::Result<Option<Held>> {
        let Some(e) = &self.election else { return Ok(None) };
        let now = Instant::now();
        let r =
            e.wait_elected_deadline(self.give_up_at().map_or(now + ELECTION_SLICE, |d| d.min(now + ELECTION_SLICE)));
        if let Some(events) = &self.events {
            self.answered |= events.try_iter().any(|ev| matches!(ev, ElectionEvent::LeaderChanged { .. }));
        }
        match r {
            Ok(_) => Ok(self.election.take().map(Held::Election)),
            Err(err) if err.is_timeout() => {
                // The campaign's own attempts, bounded by the query timeout, report their real
                // error (e.g. too few replicas acknowledged).
                if let Some(failed) = e.last_attempt_error() {
                    self.answered = true;
                    self.progress.show_error(&failed);
                    return Ok(None);
                }
                self.progress.last_error = None;
                let leader = e.leader().ok().flatten();
                // Another live leader: the attempt is busy, whenever it runs.
                self.answered |= leader.as_ref().is_some_and(|h| &h.session != self.session.id());
                self.progress.show_holder(self.session.id(), leader);
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }

    /// Waits for the lock (permit, leadership): at least one attempt, however short `--timeout` is.
    pub fn run(mut self) -> Result<(Session, Held), Ended> {
        loop {
            if let Ok(sig) = self.signals.receiver().try_recv() {
                return Err(self.interrupted(sig));
            }
            let r = if self.election.is_some() { self.wait_elected() } else { self.wait_lease() };
            match r {
                Ok(Some(held)) => return Ok((self.session, held)),
                Ok(None) if self.election.is_none() || self.give_up_at().is_some_and(|d| Instant::now() >= d) => {
                    return Err(self.timed_out())
                }
                Ok(None) => {}
                // The signal that cancelled the wait is in the channel already.
                Err(e) if e.kind() == ErrorKind::Cancelled => match self.signals.receiver().try_recv() {
                    Ok(sig) => return Err(self.interrupted(sig)),
                    Err(_) => return Err(e.into()),
                },
                Err(e) if matches!(e.kind(), ErrorKind::SessionExpired | ErrorKind::Closed) => {
                    self.replace_session(&e)?
                }
                Err(e) if e.is_retryable() => self.progress.show_error(&e),
                Err(e) => return Err(e.into()),
            }
        }
    }
}

/// What every wait needs from its command: the configuration, the output, the signals.
pub type Ctx<'a> = (&'a Config, &'a Out, &'a Signals);

/// How a wait ended without the lock.
pub enum Ended {
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

pub const ELECT: &str = "leadership of";

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
