//! The session runtime: the state behind a [`Session`](crate::Session) handle, and the threads that
//! carry out what the [`Engine`] decides.
//!
//! Threads and ownership:
//! - a backend call made for a user's thread (lock attempt, release, holder, join, leave, members,
//!   watch, close) runs on that thread when the backend bounds its calls itself within the caller's
//!   time ([`LeaseBackend::call_bound`]); every other call, and every call of a backend that may
//!   hang, runs on a pooled worker (`pool.rs`) that the caller abandons at its deadline, so no
//!   thread of ours ever waits on a driver longer than it chooses to;
//! - one renewal thread per session holds only a `Weak` to the shared state: it polls the engine at
//!   the engine's next wake-up (the timer, independent of I/O), dispatches keep-alives and campaign
//!   attempts, and stops when the session ends or every handle is gone;
//! - events go out through unbounded channels while the engine lock is held (so they stay in order);
//!   sending never blocks. Log records decided under a lock are queued ([`Logs`]) and written
//!   after every internal lock is released, so no user code — the application's logger
//!   included — runs under any internal lock.
//!
//! The files of this module are one `impl SessionInner` each, by job:
//! - `mod.rs`: the shared state ([`SessionInner`]), opening, the one engine lock (`apply`), state,
//!   events, and closing;
//! - `renewal.rs`: the renewal thread, keep-alives, and carrying out the engine's steps (events
//!   forwarded, commands performed);
//! - `leases.rs`: lock attempts, adoption of acquire replies, releases, tokens;
//! - `campaigns.rs`: elections' campaigns (attempts on workers, resign);
//! - `memberships.rs`: joins, leaves and re-joins of groups;
//! - `sinks.rs`: what the runtime tells the handles' shared state ([`CampaignSink`],
//!   [`MembershipSink`]): the runtime names no handle type;
//! - `wait.rs`: the one wait loop — where a contender registers for a release, and the blocking
//!   wait between attempts (locks, semaphores, the cancellable calls; campaigns' registrations);
//! - `status.rs`: the session's snapshot (`Session::status`), its renewal record and waiters;
//! - `listen.rs`: the listener's queue and thread (`SessionListener` calls off every lock);
//! - `calls.rs`: bounded backend calls for a user's thread, the deferred [`Logs`], jitter;
//! - `pool.rs`: the worker pool every backend call that may hang runs on.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{self, thread, unbounded, Condvar, Mutex, Receiver, Sender};

use crate::backend::{LeaseBackend, Notification};
use crate::engine::{Engine, Step, Timing};
use crate::error::{Error, ErrorKind, Result};
use crate::events::{Events, Subscribers};
use crate::listener::Told;
use crate::options::SessionOptions;
use crate::state::SessionEvent;
use crate::state::{LossReason, SessionState};
use crate::types::{Name, SessionId};

mod calls;
mod campaigns;
mod guard;
mod leases;
mod listen;
mod memberships;
mod pool;
mod renewal;
mod sinks;
mod status;
mod wait;

pub(crate) use calls::{bounded_call, jitter, log_kv, Logs};
use campaigns::CampaignSlot;
pub(crate) use guard::guarded;
use renewal::renewal_thread;
pub(crate) use sinks::{CampaignSink, MembershipSink};
pub(crate) use wait::{Contender, Moment, Rule};

enum Wake {
    Poke,
}

pub(crate) struct SessionInner {
    pub(crate) id: SessionId,
    pub(crate) backend: Arc<dyn LeaseBackend>,
    /// `backend.call_bound()`, read once.
    call_bound: Option<Duration>,
    pub(crate) options: SessionOptions,
    pub(crate) timing: Timing,
    engine: Mutex<Engine>,
    /// Signalled whenever an operation ends or the state changes.
    cond: Condvar,
    subscribers: Subscribers<SessionEvent>,
    wake: Sender<Wake>,
    notify_tx: crossbeam_channel::Sender<Notification>,
    campaigns: Mutex<HashMap<Name, CampaignSlot>>,
    memberships: Mutex<HashMap<Name, Arc<dyn MembershipSink>>>,
    /// Dropped when the session ends, which wakes everyone selecting on `ended_rx`.
    ended_tx: Mutex<Option<Sender<()>>>,
    pub(crate) ended_rx: Receiver<()>,
    close_started: Mutex<bool>,
    /// The last keep-alive that returned, and why they fail while they fail (a cause is warned
    /// about once, its repeats go to debug: one warning per failing cause, not one per retry).
    renewals: Mutex<status::Renewals>,
    /// Blocking waits going on (`wait_for`), by the name waited for.
    waiters: Mutex<HashMap<Name, u32>>,
    /// The queue to the application's listener, if it set one.
    listener: Option<listen::ListenerQueue>,
}

impl fmt::Debug for SessionInner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.id)
            .field("backend", &self.backend.kind())
            .field("state", &self.engine.lock().state())
            .finish()
    }
}

impl SessionInner {
    /// Opens a session on `backend`, which its opener already wrapped in [`guarded`] (once: a
    /// coordinator opens every session of its own on its one guarded backend).
    pub(crate) fn open(backend: Arc<dyn LeaseBackend>, options: SessionOptions) -> Result<Arc<SessionInner>> {
        pool::admit(options.worker_threads());
        let timing = Timing::from(&options);
        let sent = sync::now();
        let b = backend.clone();
        let lease = timing.lease_duration;
        let metadata = options.metadata().to_string();
        let kind = backend.kind();
        let late_backend = backend.clone();
        let grant = pool::call_until(
            sent + timing.query_timeout,
            move || b.open_session(lease, &metadata),
            move |late| {
                // Nobody waits for this session any more: close it so it holds nothing.
                if let Ok(g) = late {
                    log::warn!("{kind}: session {} opened too late, closing it", g.id);
                    if let Err(err) = late_backend.close_session(&g.id) {
                        log::debug!("session {}: close failed (it expires on its own): {err}", g.id);
                    }
                }
            },
        );
        let grant = match grant {
            Some(r) => r?,
            None => {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{kind}: opening a session took longer than the query timeout {}",
                        humantime::format_duration(timing.query_timeout)
                    ),
                ))
            }
        };
        let engine = Engine::new(timing, crate::engine::deadline_basis(sent, sync::now()), grant.remaining);
        let (wake_tx, wake_rx) = unbounded();
        let (notify_tx, notify_rx) = crossbeam_channel::unbounded();
        let (ended_tx, ended_rx) = sync::bounded(0);
        let call_bound = backend.call_bound();
        let listener = options.listener().and_then(|l| listen::ListenerQueue::start(l, grant.id.clone()));
        let inner = Arc::new(SessionInner {
            id: grant.id,
            backend,
            call_bound,
            options,
            timing,
            engine: Mutex::new(engine),
            cond: Condvar::new(),
            subscribers: Subscribers::new(),
            wake: wake_tx,
            notify_tx,
            campaigns: Mutex::new(HashMap::new()),
            memberships: Mutex::new(HashMap::new()),
            ended_tx: Mutex::new(Some(ended_tx)),
            ended_rx,
            close_started: Mutex::new(false),
            renewals: Mutex::new(status::Renewals::default()),
            waiters: Mutex::new(HashMap::new()),
            listener,
        });
        log::debug!("session {} opened on {}", inner.id, inner.backend.kind());
        let weak = Arc::downgrade(&inner);
        let spawned = thread::Builder::new()
            .name(format!("simba-renew-{}", &inner.id.as_str()[..8.min(inner.id.as_str().len())]))
            .spawn(move || renewal_thread(weak, wake_rx, notify_rx));
        if let Err(e) = spawned {
            let _ = inner.backend.close_session(&inner.id);
            return Err(Error::new(ErrorKind::Unavailable, "cannot start the renewal thread").with_source(e));
        }
        Ok(inner)
    }

    /// True while the session is active and within its local deadline.
    pub(crate) fn is_alive(&self) -> bool {
        self.engine.lock().is_alive(sync::now())
    }

    /// Time left until the local deadline, if alive.
    pub(crate) fn remaining(&self) -> Option<Duration> {
        let e = self.engine.lock();
        let now = sync::now();
        e.is_alive(now).then(|| e.deadline().saturating_duration_since(now))
    }

    /// The engine, for in-crate tests that force an engine state the runtime would reach only
    /// through a race.
    #[cfg(test)]
    pub(crate) fn engine_for_test(&self) -> sync::MutexGuard<'_, Engine> {
        self.engine.lock()
    }

    pub(crate) fn state(&self) -> SessionState {
        let e = self.engine.lock();
        if e.state() == SessionState::Active && !e.is_alive(sync::now()) {
            SessionState::Expired
        } else {
            e.state()
        }
    }

    pub(crate) fn subscribe(&self) -> Events<SessionEvent> {
        // Under the engine lock, so no event can come between the state read and the push.
        let e = self.engine.lock();
        let initial = match e.state() {
            SessionState::Expired => Some(SessionEvent::Expired),
            SessionState::Closed => Some(SessionEvent::Closed),
            SessionState::Active => None,
        };
        let events = self.subscribers.subscribe(initial);
        drop(e);
        events
    }

    pub(super) fn emit(&self, ev: &SessionEvent) {
        self.subscribers.emit(ev);
        if self.listener.is_some() {
            let error = match ev {
                SessionEvent::RenewalFailed { .. } => self.renewals.lock().failing(),
                _ => None,
            };
            self.tell(Told::Event { event: ev.clone(), error });
        }
    }

    /// Queues `told` for the application's listener, if any (never blocks, runs no user code).
    pub(super) fn tell(&self, told: Told) {
        if let Some(l) = &self.listener {
            l.tell(told);
        }
    }

    /// Entries in the subscriber list, dead ones included (for leak tests).
    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    pub(super) fn poke(&self) {
        let _ = self.wake.send(Wake::Poke);
    }

    /// Error for a session that is no longer usable, or `None` while it is alive.
    pub(super) fn dead_error(&self, e: &Engine, now: Instant) -> Option<Error> {
        match e.state() {
            SessionState::Closed => Some(Error::new(ErrorKind::Closed, format!("session {} is closed", self.id))),
            SessionState::Expired => Some(Error::session_expired(&self.id)),
            SessionState::Active if !e.is_alive(now) => Some(Error::session_expired(&self.id)),
            SessionState::Active => None,
        }
    }

    /// Runs one engine transition `f` and carries out its [`Step`]: the events are forwarded under
    /// the lock (in order, non-blocking), the log records written and the commands performed
    /// after it is released. The only place a step is carried out.
    pub(super) fn apply<T>(self: &Arc<Self>, f: impl FnOnce(&mut Engine) -> (T, Step)) -> T {
        self.apply_logged(|e, _| f(e))
    }

    /// Like [`apply`](SessionInner::apply), for a transition that decides log records too.
    pub(super) fn apply_logged<T>(self: &Arc<Self>, f: impl FnOnce(&mut Engine, &mut Logs) -> (T, Step)) -> T {
        let mut logs = Logs::default();
        let mut e = self.engine.lock();
        let (value, step) = f(&mut e, &mut logs);
        self.forward(step.events, &mut logs);
        self.cond.notify_all();
        drop(e);
        logs.write();
        self.perform(step.commands);
        value
    }

    /// Marks the session ended: wakes waiters, ends campaigns and memberships (called under the
    /// engine lock, after the terminal events were emitted).
    pub(super) fn end(&self, state: SessionState, logs: &mut Logs) {
        self.ended_tx.lock().take();
        let reason = if state == SessionState::Closed { LossReason::SessionClosed } else { LossReason::SessionExpired };
        for slot in self.campaigns.lock().values() {
            slot.election.session_ended(&self.id, reason, logs);
        }
        for m in self.memberships.lock().values() {
            m.session_ended(&self.id);
        }
    }

    fn begin_close(self: &Arc<Self>) -> bool {
        {
            let mut started = self.close_started.lock();
            if *started {
                return false;
            }
            *started = true;
        }
        self.apply(|e| ((), e.close()));
        self.poke();
        true
    }

    pub(crate) fn close_and_wait(self: &Arc<Self>) -> Result<()> {
        self.begin_close();
        let id = self.id.clone();
        let r = self.bounded(move |b| b.close_session(&id));
        match &r {
            Ok(()) => log::debug!("session {} closed", self.id),
            Err(err) => log::warn!("session {}: close failed (the backend frees it at expiry): {err}", self.id),
        }
        r
    }

    pub(crate) fn close_in_background(self: &Arc<Self>) {
        if !self.begin_close() {
            return;
        }
        let backend = self.backend.clone();
        let id = self.id.clone();
        pool::spawn(move || {
            if let Err(err) = backend.close_session(&id) {
                log::warn!("session {id}: close failed (the backend frees it at expiry): {err}");
            }
        });
    }
}
