//! The one wait loop: how a contender for a lease (a lock, a semaphore's slots) registers for its
//! release and waits between attempts, and where a campaign attempt registers.
//!
//! The rule, written once here: a waiter registers for the release *before each attempt* where
//! the backend's registration does not look at the lease (Redis, PostgreSQL), so that a release
//! during or right after a busy attempt is pushed; where the registration itself answers a lease
//! freed meanwhile (`Capabilities::watch_checks_lease`: memory, ZooKeeper) it registers *after an
//! attempt that did not win* instead, so a free lease costs no registration; without push it never
//! registers ([`Rule`], from [`Capabilities::lease_registration`](crate::backend::Capabilities)).
//! Between attempts a blocking waiter (`SessionInner::wait_for`) waits for whichever comes first: a pushed
//! release, the session's end, its [`Cancel`] token, or the retry delay (capped by its deadline).
//!
//! Users (through `SessionInner::wait_for`): `SessionInner::lock_until` (every `lock*` of a session or coordinator), the semaphore's
//! `acquire*`, both `*_cancellable` calls (which `simba lock` waits through), and campaign
//! attempts, which run on workers scheduled by the renewal thread and do not block: they call
//! [`register_attempt`] before and after their one attempt, and the renewal thread is their wait.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::calls::inline;
use super::status::Waiting;
use super::{pool, SessionInner};
use crate::backend::{LeaseBackend, Notification, Registration, Topic};
use crate::cancel::{Attempt, Cancel};
use crate::engine::later;
use crate::error::{Error, ErrorKind, Result};
use crate::observe;
use crate::sync::{self, select, Receiver};
use crate::types::{Name, SessionId};
use crossbeam_channel::{RecvTimeoutError, TryRecvError};

/// When, relative to an attempt, a registration may be due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Moment {
    /// Right before an attempt.
    BeforeAttempt,
    /// Right after an attempt that did not take the lease: busy or failed for a blocking waiter
    /// (both are followed by its wait), busy for a campaign attempt.
    AfterMiss,
}

/// Where a contender registers for a lease's release on one backend: the one reading of
/// [`Capabilities::lease_registration`](crate::backend::Capabilities::lease_registration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rule(Registration);

impl Rule {
    /// The rule of `backend` (its capabilities, read now).
    pub(crate) fn of(backend: &dyn LeaseBackend) -> Rule {
        Rule(backend.capabilities().lease_registration())
    }

    /// True when a registration is due at `at`.
    pub(crate) fn registers(self, at: Moment) -> bool {
        match at {
            Moment::BeforeAttempt => self.0.before_attempt(),
            Moment::AfterMiss => self.0.after_busy(),
        }
    }
}

/// Registers a campaign attempt of `name` (on its worker) for the release of its lease at `at`,
/// when `rule` says so; a pushed release goes to `notify`, the renewal thread's channel, which
/// schedules the next attempt at once. A failed registration is logged: the attempts' retry
/// delay covers it.
pub(crate) fn register_attempt(
    rule: Rule,
    at: Moment,
    backend: &dyn LeaseBackend,
    id: &SessionId,
    name: &Name,
    notify: &crossbeam_channel::Sender<Notification>,
) {
    if rule.registers(at) {
        if let Err(err) = backend.watch(&Topic::Lease(name.clone()), notify) {
            log::debug!("session {id}: cannot watch '{name}', polling: {err}");
        }
    }
}

/// Something a blocking waiter contends for: the leases whose release may let it win, and one
/// attempt.
pub(crate) trait Contender {
    /// What an attempt that wins returns.
    type Won;

    /// What is waited for, in log records: `lock 'x'`, `a permit of semaphore 'x'`.
    fn what(&self) -> String;

    /// The name waited for, in the session's status: the lock's, the semaphore's.
    fn waited(&self) -> &Name;

    /// The leases whose release may let the next attempt win. The wait leaves out those this
    /// session holds: an attempt skips them anyway, and if the backend freed one behind the
    /// session's back, its registration would answer "free" at once, every round — a busy loop
    /// until the next keep-alive corrects the local view.
    fn leases(&self) -> &[Name];

    /// One attempt: `Ok(Some)` won, `Ok(None)` busy. `first` is the wait's first attempt, made
    /// even when `deadline` has passed; no attempt sends anything after `deadline` otherwise.
    fn attempt(&mut self, s: &Arc<SessionInner>, deadline: Option<Instant>, first: bool) -> Result<Option<Self::Won>>;
}

impl SessionInner {
    /// Attempts until `contender` wins, `deadline` passes (`Ok(None)`; `None`: never), `cancel` is
    /// cancelled (`Cancelled`), or an attempt fails with an error that is not transient (returned).
    /// The first attempt is always made; every attempt runs to its own bound and none is sent after
    /// the deadline, registrations are bounded by the time left (and the query timeout), so this
    /// returns by the deadline plus at most one bounded call. `observe` hears of every attempt that
    /// did not win, before the registration that may follow it and the wait.
    pub(crate) fn wait_for<C: Contender>(
        self: &Arc<Self>,
        contender: &mut C,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
        observe: &mut dyn FnMut(Attempt<'_>),
    ) -> Result<Option<C::Won>> {
        let s = self;
        let _waiting = Waiting::new(s, contender.waited().clone());
        let started = sync::now();
        let rule = Rule::of(&*s.backend);
        let mut registrar = Registrar::new(s);
        let never = sync::never();
        let cancelled = cancel.map_or(&never, Cancel::receiver);
        let is_cancelled = || cancel.is_some_and(Cancel::is_cancelled);
        let passed = || deadline.is_some_and(|d| sync::now() >= d);
        let mut first = true;
        loop {
            if is_cancelled() {
                return Err(Error::new(
                    ErrorKind::Cancelled,
                    format!("waiting for {} was cancelled", contender.what()),
                ));
            }
            if !first && passed() {
                return Ok(None);
            }
            if rule.registers(Moment::BeforeAttempt) {
                registrar.register(contender, deadline);
            }
            match contender.attempt(s, deadline, std::mem::take(&mut first)) {
                Ok(Some(won)) => {
                    observe::waited(s.backend.kind(), started.elapsed());
                    return Ok(Some(won));
                }
                Ok(None) => observe(Attempt::Busy),
                Err(err) if err.is_retryable() => {
                    log::debug!("session {}: an attempt at {} failed, retrying: {err}", s.id, contender.what());
                    observe(Attempt::Failed(&err));
                }
                Err(err) => return Err(err),
            }
            // No wait follows a passed deadline or a cancel, so no registration either.
            if passed() || is_cancelled() {
                continue;
            }
            if rule.registers(Moment::AfterMiss) {
                registrar.register(contender, deadline);
            }
            let mut pause = s.pause(registrar.armed);
            if let Some(d) = deadline {
                pause = pause.min(d.saturating_duration_since(sync::now()));
            }
            let woke = select! {
                recv(registrar.rx) -> _ => { registrar.drain(); Some(true) },
                recv(s.ended_rx) -> _ => None,
                recv(cancelled) -> _ => None,
                default(pause) => Some(false),
            };
            if let Some(pushed) = woke {
                observe::wakeup(s.backend.kind(), pushed);
            }
        }
    }
}

/// A blocking waiter's registrations: the channel its pushed releases arrive on, and at most one
/// registration in flight.
struct Registrar<'a> {
    s: &'a SessionInner,
    tx: crossbeam_channel::Sender<Notification>,
    rx: crossbeam_channel::Receiver<Notification>,
    /// A registration that outlived its wait on a worker: the next rounds wait for it again
    /// instead of starting another beside it, so a backend whose registrations hang has one in
    /// flight per waiter, not one more per round. It sends whether every lease was registered.
    pending: Option<Receiver<bool>>,
    /// The last registration registered every lease: a release is pushed, so the retry delay
    /// only covers a lost push. Otherwise the waiter polls.
    armed: bool,
}

impl<'a> Registrar<'a> {
    fn new(s: &'a SessionInner) -> Registrar<'a> {
        let (tx, rx) = crossbeam_channel::unbounded();
        Registrar { s, tx, rx, pending: None, armed: false }
    }

    /// Empties the channel after a wake-up (pushes may be coalesced; the attempt re-checks).
    fn drain(&self) {
        while self.rx.try_recv().is_ok() {}
    }

    /// Registers for the release of `contender`'s leases and waits for the registration, at
    /// most the query timeout and the time left before `deadline`. A one-shot registration
    /// consumed since the last one (by a release, or a backend's "subscribed now, re-check"
    /// hint) left a message in the channel, and is re-armed here.
    fn register<C: Contender>(&mut self, contender: &C, deadline: Option<Instant>) {
        self.armed = false;
        let now = sync::now();
        let qt = self.s.timing.query_timeout;
        let bound = deadline.map_or(qt, |d| d.saturating_duration_since(now).min(qt));
        if bound.is_zero() {
            return;
        }
        let end = later(now, bound);
        let what = || contender.what();
        let id = &self.s.id;
        if let Some(pending) = self.pending.take() {
            if matches!(pending.try_recv(), Err(TryRecvError::Empty)) {
                match pending.recv_deadline(end) {
                    Ok(armed) => self.armed = armed,
                    Err(RecvTimeoutError::Timeout) => {
                        log::debug!(
                            "session {id}: registering for the release of {} took longer than {} (still the one of \
                             an earlier attempt): attempting anyway (polling covers it)",
                            what(),
                            humantime::format_duration(bound)
                        );
                        self.pending = Some(pending);
                    }
                    Err(RecvTimeoutError::Disconnected) => {}
                }
                return;
            }
        }
        let leases: Vec<Name> = contender.leases().iter().filter(|lease| !self.s.holds(lease)).cloned().collect();
        if leases.is_empty() {
            return;
        }
        log::debug!("session {id}: registering for the release of {}", what());
        let backend = &self.s.backend;
        let mut armed = true;
        let mut rest = leases.into_iter();
        while let Some(lease) = rest.next() {
            let budget = end.saturating_duration_since(sync::now());
            if budget.is_zero() {
                log::debug!(
                    "session {id}: registering for the release of {} took longer than {}: attempting anyway (polling \
                     covers it)",
                    what(),
                    humantime::format_duration(bound)
                );
                return;
            }
            if inline(self.s.call_bound, budget) {
                // The backend returns by itself within the time left: register on this thread.
                armed &= watched(&**backend, id, &Topic::Lease(lease), &self.tx);
                continue;
            }
            // The rest on a worker, waited for until `end`; a late answer is kept as pending.
            let topics: Vec<Topic> = std::iter::once(lease).chain(rest).map(Topic::Lease).collect();
            let (b, tx, sid) = (backend.clone(), self.tx.clone(), id.clone());
            let (late_tx, late_rx) = sync::bounded(1);
            let job = move || {
                let mut all = true;
                for topic in &topics {
                    all &= watched(&*b, &sid, topic, &tx);
                }
                Ok(all)
            };
            match pool::call_until(end, job, move |late: Result<bool>| {
                let _ = late_tx.send(late.unwrap_or(false));
            }) {
                Some(Ok(all)) => armed &= all,
                Some(Err(err)) => {
                    log::debug!("session {id}: cannot register for the release of {}, polling: {err}", what());
                    armed = false;
                }
                None => {
                    log::debug!(
                        "session {id}: registering for the release of {} took longer than {}: attempting anyway \
                         (polling covers it)",
                        what(),
                        humantime::format_duration(bound)
                    );
                    self.pending = Some(late_rx);
                    return;
                }
            }
            break;
        }
        self.armed = armed;
    }
}

/// One registration; true when the backend accepted it (a declined or failed one is polled for).
fn watched(
    backend: &dyn LeaseBackend,
    id: &SessionId,
    topic: &Topic,
    tx: &crossbeam_channel::Sender<Notification>,
) -> bool {
    match backend.watch(topic, tx) {
        Ok(accepted) => accepted,
        Err(err) => {
            log::debug!("session {id}: watching {topic:?} failed, polling: {err}");
            false
        }
    }
}

impl SessionInner {
    /// The time before a waiter's next attempt: with a registration in place (`pushed`), the
    /// push retry interval (`renew_interval / 2`: it only covers a lost push), otherwise the
    /// poll interval; plus jitter up to half of it.
    pub(crate) fn pause(&self, pushed: bool) -> Duration {
        let base = if pushed { self.options.push_retry_interval() } else { self.options.retry_interval() };
        base + super::jitter(base / 2)
    }
}
