//! Sessions: the handle users hold, and the renewal thread that drives the [`Engine`].
//!
//! Threads and ownership:
//! - a backend call made for a user's thread (lock attempt, release, holder, join, leave, members,
//!   watch, close) runs on that thread when the backend bounds its calls itself within the caller's
//!   time ([`LeaseBackend::call_bound`]); every other call, and every call of a backend that may
//!   hang, runs on a pooled worker (`exec.rs`) that the caller abandons at its deadline, so no
//!   thread of ours ever waits on a driver longer than it chooses to;
//! - one renewal thread per session holds only a `Weak` to the shared state: it polls the engine at
//!   the engine's next wake-up (the timer, independent of I/O), dispatches keep-alives and campaign
//!   attempts, and stops when the session ends or every handle is gone;
//! - events go out through unbounded channels while the engine lock is held (so they stay in order);
//!   sending never blocks. Log records decided under a lock are queued ([`Logs`]) and written
//!   after every internal lock is released, so no user code — the application's logger
//!   included — runs under any internal lock.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex, MutexGuard};

use crate::backend::{Acquire, KeepAlive, LeaseBackend, Member, Notification, Topic};
use crate::election::{Election, ElectionShared, Leader};
use crate::engine::{
    deadline_after, later, Adoption, CampaignConflict, Engine, KeepAliveResult, LossReason, Output, SessionState,
    Timing,
};
use crate::error::{Error, ErrorKind, Result};
use crate::events::{Events, Subscribers};
use crate::exec;
use crate::group::{self, MemberWatch, Membership, MembershipShared};
use crate::lease::Lease;
use crate::options::SessionOptions;
use crate::types::{IntoName, Name, SessionId, Token};

/// Something that happened to a session. Sent in order on every receiver from
/// [`Session::events`]; receivers that fall behind never slow the session down.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SessionEvent {
    /// A lease is lost; its `token()` already fails.
    LeaseLost {
        /// The lease.
        name: Name,
        /// The lost term's token.
        token: Token,
        /// Why.
        reason: LossReason,
    },
    /// A keep-alive failed; the session retries until its local deadline.
    RenewalFailed {
        /// Consecutive failures so far.
        failures: u32,
    },
    /// A membership is missing on the backend although the session holds it (a leave that
    /// reached the server late, a failover that lost the join). The session re-joins it at once,
    /// and at every renewal until it is back; meanwhile `is_member()` is false.
    MembershipLost {
        /// The group.
        group: Name,
    },
    /// A lost membership is back on the backend.
    MembershipRestored {
        /// The group.
        group: Name,
    },
    /// The session expired. Terminal: it is never used again.
    Expired,
    /// The session was closed by the application. Terminal.
    Closed,
}

pub(crate) enum Wake {
    Poke,
}

/// Log records decided under an internal lock, written once every lock is released (the
/// application's logger may call back into the session: it must never run under a lock).
#[derive(Default)]
#[must_use = "write the records once the locks are released"]
pub(crate) struct Logs(Vec<(log::Level, String)>);

impl Logs {
    pub(crate) fn push(&mut self, level: log::Level, message: String) {
        self.0.push((level, message));
    }

    /// Writes the records; call it with no internal lock held.
    pub(crate) fn write(self) {
        for (level, message) in self.0 {
            log::log!(level, "{message}");
        }
    }
}

#[derive(Debug)]
struct CampaignSlot {
    election: Arc<ElectionShared>,
    next_attempt: Instant,
    in_flight: Option<Instant>,
    /// A release was pushed while an attempt was in flight: retry at once after it.
    woken: bool,
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
    notify_tx: Sender<Notification>,
    campaigns: Mutex<HashMap<Name, CampaignSlot>>,
    memberships: Mutex<HashMap<Name, Arc<MembershipShared>>>,
    /// Dropped when the session ends, which wakes everyone selecting on `ended_rx`.
    ended_tx: Mutex<Option<Sender<()>>>,
    pub(crate) ended_rx: Receiver<()>,
    close_started: Mutex<bool>,
    /// Why the last keep-alive failed, while they fail: a cause is warned about once, its
    /// repeats go to debug (one warning per failing cause, not one per retry).
    failing: Mutex<Option<String>>,
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

/// A live session on a backend: renewed by its own background thread; holds leases, campaigns
/// and memberships, all of which end with it.
///
/// `Session` is `Send + Sync`: share it with `Arc` between threads. Dropping it closes the session
/// on a background worker without blocking; [`close`](Session::close) does the same and reports
/// the result.
pub struct Session {
    inner: Arc<SessionInner>,
}

impl fmt::Debug for Session {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.inner.fmt(f)
    }
}

impl Session {
    /// Opens a session on `backend` with `options` and starts its renewal thread.
    ///
    /// # Errors
    /// `Timeout` when the backend does not answer within the query timeout; the backend's error
    /// (`Unavailable`, `Backend`) otherwise.
    pub fn open(backend: Arc<dyn LeaseBackend>, options: SessionOptions) -> Result<Session> {
        Ok(Session { inner: SessionInner::open(backend, options)? })
    }

    /// The session id (as the backend knows it).
    pub fn id(&self) -> &SessionId {
        &self.inner.id
    }

    /// The session metadata.
    pub fn metadata(&self) -> &str {
        self.inner.options.metadata()
    }

    /// The options the session runs with.
    pub fn options(&self) -> &SessionOptions {
        &self.inner.options
    }

    /// The backend's short name, e.g. `"memory"`.
    pub fn backend_kind(&self) -> &'static str {
        self.inner.backend.kind()
    }

    /// The current state. `Active` turns into `Expired` at the local deadline even when the renewal
    /// thread is stuck.
    pub fn state(&self) -> SessionState {
        self.inner.state()
    }

    /// True while the session is active and within its local deadline.
    pub fn is_alive(&self) -> bool {
        self.inner.engine.lock().is_alive(Instant::now())
    }

    /// Time left until the local deadline, if alive.
    pub fn remaining(&self) -> Option<Duration> {
        let e = self.inner.engine.lock();
        let now = Instant::now();
        e.is_alive(now).then(|| e.deadline().saturating_duration_since(now))
    }

    /// A new subscription to this session's events: every event after this call (the first is
    /// `Expired` or `Closed` if the session already ended), in order. Dropping it unsubscribes;
    /// taking one per health check and dropping it costs nothing that lasts.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use simba::{MemoryBackend, Session, SessionEvent, SessionOptions};
    ///
    /// # fn main() -> simba::Result<()> {
    /// let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
    /// let events = session.events();
    /// session.close()?;
    /// assert_eq!(events.recv_timeout(Duration::from_secs(5)).ok(), Some(SessionEvent::Closed));
    /// # Ok(())
    /// # }
    /// ```
    pub fn events(&self) -> Events<SessionEvent> {
        self.inner.subscribe()
    }

    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.inner.subscriber_count()
    }

    /// Takes the lease `name`, waiting as long as it takes (wakes at once on a pushed release,
    /// otherwise retries every `renew_interval / 2` plus jitter). Transient backend failures are
    /// retried; each attempt is bounded by the query timeout.
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed` when the session ends while waiting;
    /// `AlreadyHeld` when this session already holds or campaigns for `name` (or another thread's
    /// lock of it won the same term); `Backend` for non-transient failures.
    pub fn lock(&self, name: impl IntoName) -> Result<Lease> {
        let name = name.into_name()?;
        match self.inner.lock_until(&name, None)? {
            Some(l) => Ok(l),
            None => Err(Error::new(ErrorKind::Timeout, format!("lock '{name}' gave up"))),
        }
    }

    /// One attempt to take the lease `name`: `Ok(None)` when another live session holds it.
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed`; `AlreadyHeld`; `Timeout` when the backend did not
    /// answer within the query timeout; `Unavailable` when this session's own release of the
    /// term the backend answered with has not landed yet (retry); the backend's error otherwise
    /// (`Unavailable` when the backend's own timeout ended the call, on a backend that declares
    /// [`call_bound`](LeaseBackend::call_bound)).
    pub fn try_lock(&self, name: impl IntoName) -> Result<Option<Lease>> {
        let name = name.into_name()?;
        let bound = later(Instant::now(), self.inner.timing.query_timeout);
        self.inner.attempt_lock(&name, bound)
    }

    /// Like [`lock`](Session::lock), giving up after `timeout` with `Ok(None)`.
    ///
    /// At least one attempt is made whatever the timeout (`Duration::ZERO` tries once, as
    /// crossbeam's `recv_timeout(ZERO)` does); every attempt, the first included, runs to its own
    /// bound, the query timeout, so a call returns by `timeout` plus at most one query timeout.
    /// Later attempts are sent only before the timeout ends. `Duration::MAX` waits forever.
    ///
    /// # Errors
    /// As [`lock`](Session::lock).
    pub fn lock_timeout(&self, name: impl IntoName, timeout: Duration) -> Result<Option<Lease>> {
        let name = name.into_name()?;
        self.inner.lock_until(&name, deadline_after(Instant::now(), timeout))
    }

    /// Like [`lock`](Session::lock), giving up at `deadline` with `Ok(None)`.
    ///
    /// At least one attempt is made, even when `deadline` has passed; each attempt is bounded by
    /// the query timeout (not cut at `deadline`), and none is sent after `deadline`: the call
    /// returns by `deadline` plus at most one query timeout.
    ///
    /// # Errors
    /// As [`lock`](Session::lock).
    pub fn lock_deadline(&self, name: impl IntoName, deadline: Instant) -> Result<Option<Lease>> {
        let name = name.into_name()?;
        self.inner.lock_until(&name, Some(deadline))
    }

    /// Starts contending for leadership of `name` in the background (on the renewal thread).
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed`; `AlreadyHeld` when this session already campaigns
    /// for or holds `name`.
    pub fn campaign(&self, name: impl IntoName) -> Result<Election> {
        let name = name.into_name()?;
        let shared = ElectionShared::new(name, self.inner.backend.clone(), self.inner.timing.query_timeout, false);
        self.inner.attach_campaign(&shared)?;
        Ok(Election::new(shared))
    }

    /// The current leader (holder) of `name`, seen from any node.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn leader(&self, name: impl IntoName) -> Result<Option<Leader>> {
        let name = name.into_name()?;
        self.inner.bounded(move |b| b.holder(&name))
    }

    /// Joins `group`; the membership lasts while the session lives. Dropping the handle leaves.
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed`; `AlreadyHeld` when already a member through
    /// another handle; `Timeout`; the backend's error.
    pub fn join(&self, group: impl IntoName) -> Result<Membership> {
        let group = group.into_name()?;
        let shared = MembershipShared::new(group, false);
        self.inner.attach_membership(&shared)?;
        Ok(Membership::new(shared))
    }

    /// Live members of `group`, sorted by session id, with their metadata.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn members(&self, group: impl IntoName) -> Result<Vec<Member>> {
        let group = group.into_name()?;
        self.inner.bounded(move |b| b.members(&group))
    }

    /// A stream of membership changes of `group` (the first message lists the current members).
    /// Push backends deliver changes at once; others are polled every `renew_interval / 2`. The
    /// watcher stops when the receiver is dropped or the session ends.
    ///
    /// # Errors
    /// `InvalidName`.
    pub fn watch_members(&self, group: impl IntoName) -> Result<MemberWatch> {
        let group = group.into_name()?;
        Ok(group::watch(
            self.inner.backend.clone(),
            group,
            self.inner.options.clone(),
            Some(self.inner.ended_rx.clone()),
        ))
    }

    /// Closes the session: stops renewal, gives up every lease, campaign and membership (their
    /// `token()` fails at once), and deletes the session on the backend, which releases its leases
    /// and memberships. It takes the session, so it runs once; dropping the handle instead closes
    /// it in the background.
    ///
    /// # Errors
    /// `Timeout` or the backend's error when the backend close failed; the session is closed
    /// locally anyway and the backend frees everything when its lease runs out.
    pub fn close(self) -> Result<()> {
        self.inner.close_and_wait()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.inner.close_in_background();
    }
}

impl SessionInner {
    pub(crate) fn open(backend: Arc<dyn LeaseBackend>, options: SessionOptions) -> Result<Arc<SessionInner>> {
        exec::admit(options.worker_threads());
        let timing = Timing::from(&options);
        let sent = Instant::now();
        let b = backend.clone();
        let lease = timing.lease_duration;
        let metadata = options.metadata().to_string();
        let kind = backend.kind();
        let late_backend = backend.clone();
        let grant = exec::call_until(
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
        let engine = Engine::new(timing, sent, grant.remaining);
        let (wake_tx, wake_rx) = unbounded();
        let (notify_tx, notify_rx) = unbounded();
        let (ended_tx, ended_rx) = crossbeam_channel::bounded(0);
        let call_bound = backend.call_bound();
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
            failing: Mutex::new(None),
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

    /// The engine, for in-crate tests that force an engine state the runtime would reach only
    /// through a race.
    #[cfg(test)]
    pub(crate) fn engine_for_test(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock()
    }

    pub(crate) fn state(&self) -> SessionState {
        let e = self.engine.lock();
        if e.state() == SessionState::Active && !e.is_alive(Instant::now()) {
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

    fn emit(&self, ev: SessionEvent) {
        self.subscribers.emit(&ev);
    }

    /// Entries in the subscriber list, dead ones included (for leak tests).
    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    pub(crate) fn poke(&self) {
        let _ = self.wake.send(Wake::Poke);
    }

    /// Error for a session that is no longer usable, or `None` while it is alive.
    fn dead_error(&self, e: &Engine, now: Instant) -> Option<Error> {
        match e.state() {
            SessionState::Closed => Some(Error::new(ErrorKind::Closed, format!("session {} is closed", self.id))),
            SessionState::Expired => Some(Error::session_expired(&self.id)),
            SessionState::Active if !e.is_alive(now) => Some(Error::session_expired(&self.id)),
            SessionState::Active => None,
        }
    }

    /// Runs `f` on the engine and carries out its outputs. Events are emitted under the lock (in
    /// order, non-blocking); log records are written and backend calls dispatched after it is
    /// released.
    pub(crate) fn apply<T>(self: &Arc<Self>, f: impl FnOnce(&mut Engine) -> (T, Vec<Output>)) -> T {
        self.apply_logged(|e, _| f(e))
    }

    /// Like [`apply`](SessionInner::apply), for a transition that decides log records too.
    fn apply_logged<T>(self: &Arc<Self>, f: impl FnOnce(&mut Engine, &mut Logs) -> (T, Vec<Output>)) -> T {
        let mut logs = Logs::default();
        let mut e = self.engine.lock();
        let (value, outputs) = f(&mut e, &mut logs);
        let actions = self.handle_outputs(&mut e, outputs, &mut logs);
        self.cond.notify_all();
        drop(e);
        logs.write();
        self.run_actions(actions);
        value
    }

    fn handle_outputs(
        self: &Arc<Self>,
        e: &mut MutexGuard<'_, Engine>,
        outputs: Vec<Output>,
        logs: &mut Logs,
    ) -> Vec<Output> {
        use log::Level::{Debug, Info, Warn};
        let id = &self.id;
        let mut actions = Vec::new();
        for o in outputs {
            match o {
                Output::SendKeepAlive { .. } => actions.push(o),
                Output::LeaseLost { name, token, reason } => {
                    logs.push(Warn, format!("session {id}: lease '{name}' (token {token}) lost: {reason}"));
                    self.emit(SessionEvent::LeaseLost { name: name.clone(), token, reason });
                    if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                        slot.election.revoked(token, reason, logs);
                        slot.next_attempt = Instant::now();
                    }
                }
                Output::Expired => {
                    logs.push(Warn, format!("session {id} expired"));
                    self.emit(SessionEvent::Expired);
                    self.end(SessionState::Expired, logs);
                    actions.push(Output::Expired);
                }
                Output::ReleaseStray { name, token } => {
                    logs.push(
                        Info,
                        format!("session {id}: releasing '{name}' (token {token}), owned on the backend but not held"),
                    );
                    e.begin_release(&name, token);
                    actions.push(Output::ReleaseStray { name, token });
                }
                Output::RenewalFailed { failures } => {
                    self.emit(SessionEvent::RenewalFailed { failures });
                }
                Output::MembershipLost { group } => {
                    logs.push(
                        Warn,
                        format!("session {id}: membership of '{group}' is missing on the backend; re-joining"),
                    );
                    self.emit(SessionEvent::MembershipLost { group });
                }
                Output::MembershipRestored { group } => {
                    logs.push(Info, format!("session {id}: membership of '{group}' restored"));
                    self.emit(SessionEvent::MembershipRestored { group });
                }
                Output::Rejoin { .. } => actions.push(o),
                Output::LeaveStray { ref group } => {
                    logs.push(Info, format!("session {id}: leaving '{group}', listed on the backend but not held"));
                    actions.push(o);
                }
                Output::Closed => {
                    logs.push(Debug, format!("session {id} closing"));
                    self.emit(SessionEvent::Closed);
                    self.end(SessionState::Closed, logs);
                }
            }
        }
        actions
    }

    /// Marks the session ended: wakes waiters, ends campaigns and memberships (called under the
    /// engine lock, after the terminal events were emitted).
    fn end(&self, state: SessionState, logs: &mut Logs) {
        self.ended_tx.lock().take();
        let reason = if state == SessionState::Closed { LossReason::SessionClosed } else { LossReason::SessionExpired };
        for slot in self.campaigns.lock().values() {
            slot.election.session_ended(&self.id, reason, logs);
        }
        for m in self.memberships.lock().values() {
            m.session_ended(&self.id);
        }
    }

    fn run_actions(self: &Arc<Self>, actions: Vec<Output>) {
        for a in actions {
            match a {
                Output::SendKeepAlive { sent } => self.dispatch_keep_alive(sent),
                Output::ReleaseStray { name, token } => self.dispatch_release(name, token, None),
                Output::Expired => {
                    // Best effort: free everything on the backend now rather than at its expiry.
                    let backend = self.backend.clone();
                    let id = self.id.clone();
                    exec::spawn(move || {
                        if let Err(err) = backend.close_session(&id) {
                            log::debug!("session {id}: close after expiry failed: {err}");
                        }
                    });
                }
                Output::Rejoin { group } => self.dispatch_rejoin(group),
                Output::LeaveStray { group } => self.spawn_leave(group),
                Output::LeaseLost { .. }
                | Output::RenewalFailed { .. }
                | Output::Closed
                | Output::MembershipLost { .. }
                | Output::MembershipRestored { .. } => {}
            }
        }
    }

    fn dispatch_keep_alive(self: &Arc<Self>, sent: Instant) {
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let id = self.id.clone();
        let lease = self.timing.lease_duration;
        exec::spawn(move || {
            let (result, failure) = match backend.keep_alive(&id, lease) {
                Ok(r) => (KeepAliveResult::Reply(r), None),
                Err(err) if err.is_session_expired() => (KeepAliveResult::Reply(KeepAlive::Expired), None),
                Err(err) => (KeepAliveResult::Failed, Some(crate::error::display_chain(&err))),
            };
            let Some(inner) = weak.upgrade() else { return };
            // Decided under the lock, logged after it.
            let (new_cause, recovered) = {
                let mut failing = inner.failing.lock();
                match failure {
                    Some(cause) if failing.as_deref() == Some(cause.as_str()) => (None, false),
                    Some(cause) => {
                        *failing = Some(cause.clone());
                        (Some(cause), false)
                    }
                    None => (None, failing.take().is_some()),
                }
            };
            match (&new_cause, &result) {
                (Some(cause), _) => log::warn!("session {id}: keep-alive failed (retried; repeats at debug): {cause}"),
                (None, KeepAliveResult::Failed) => log::debug!("session {id}: keep-alive failed again, same cause"),
                _ if recovered => log::info!("session {id}: keep-alive succeeded again"),
                _ => {}
            }
            inner.apply(|e| ((), e.on_keep_alive(sent, Instant::now(), result)));
            inner.poke();
        });
    }

    /// Joins `group` again after the backend lost it (the engine counted the join in flight).
    fn dispatch_rejoin(self: &Arc<Self>, group: Name) {
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let id = self.id.clone();
        exec::spawn(move || {
            let r = backend.join(&id, &group);
            if let Err(err) = &r {
                log::warn!("session {id}: re-join of '{group}' failed (retried at the next renewal): {err}");
            }
            if let Some(inner) = weak.upgrade() {
                inner.apply(|e| ((), e.end_rejoin(&group, Instant::now(), r.is_ok())));
            }
        });
    }

    /// Releases the term `token` of `name` on the backend (the caller already called
    /// `begin_release`). When `done` is given, the result is sent there.
    fn dispatch_release(self: &Arc<Self>, name: Name, token: Token, done: Option<Sender<Result<()>>>) {
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let id = self.id.clone();
        exec::spawn(move || {
            let r = backend.release(&id, &name, token);
            if let Err(err) = &r {
                log::warn!("session {id}: release of '{name}' failed: {err}");
            }
            if let Some(inner) = weak.upgrade() {
                let confirmed = r.is_ok();
                inner.apply(|e| {
                    if confirmed {
                        e.end_confirmed_release(&name, token);
                    } else {
                        e.end_release(&name);
                    }
                    ((), Vec::new())
                });
            }
            if let Some(tx) = done {
                let _ = tx.send(r);
            }
        });
    }

    /// Runs a backend call for the user's thread, bounded by the query timeout (see [`bounded_call`]).
    pub(crate) fn bounded<T: Send + 'static>(
        &self,
        f: impl FnOnce(&dyn LeaseBackend) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        bounded_call(&self.backend, self.timing.query_timeout, f)
    }

    /// One attempt to acquire `name` and adopt the term, waiting at most until `bound` (the
    /// attempt's own bound: a previous release of the name still in flight and the acquire call
    /// itself both end by it).
    pub(crate) fn attempt_lock(self: &Arc<Self>, name: &Name, bound: Instant) -> Result<Option<Lease>> {
        match self.attempt_acquire(name, bound)? {
            Some(token) => Ok(Some(Lease::new(self.clone(), name.clone(), token))),
            None => Ok(None),
        }
    }

    /// Sends one acquire and adopts its result. `Ok(None)`: held by someone else (or the reply
    /// could not be adopted and was undone).
    fn attempt_acquire(self: &Arc<Self>, name: &Name, deadline: Instant) -> Result<Option<Token>> {
        let epoch = {
            let mut e = self.engine.lock();
            loop {
                let now = Instant::now();
                if let Some(err) = self.dead_error(&e, now) {
                    return Err(err);
                }
                if e.token(name, now).is_some() || e.is_campaigning(name) {
                    return Err(Error::new(
                        ErrorKind::AlreadyHeld,
                        format!("session {} already holds or campaigns for '{name}'", self.id),
                    ));
                }
                if !e.releasing(name) {
                    break;
                }
                if self.cond.wait_until(&mut e, deadline).timed_out() {
                    return Err(Error::new(
                        ErrorKind::Timeout,
                        format!("lease '{name}': a previous release is still in flight"),
                    ));
                }
            }
            e.begin_acquire(name)
        };
        let sent = Instant::now();
        let call_deadline = deadline.min(later(sent, self.timing.query_timeout)).max(sent);
        let reply = if inline(self.call_bound, call_deadline - sent) {
            // The backend returns by itself within the caller's time: call it on this thread. A
            // reply after the deadline (the backend overran its bound) is handled exactly like a
            // worker's late reply: nobody asked for the lease that late, so its term is undone.
            let r = self.backend.acquire(&self.id, name);
            if Instant::now() <= call_deadline {
                Some(r)
            } else {
                self.undo_late_acquire(name, r);
                None
            }
        } else {
            let backend = self.backend.clone();
            let (id, n) = (self.id.clone(), name.clone());
            let weak = Arc::downgrade(self);
            let late_name = name.clone();
            exec::call_until(
                call_deadline,
                move || backend.acquire(&id, &n),
                move |late: Result<Acquire>| {
                    if let Some(inner) = weak.upgrade() {
                        inner.undo_late_acquire(&late_name, late);
                    }
                },
            )
        };
        match reply {
            Some(r) => self.finish_acquire(name, sent, epoch, r, None),
            None => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "acquire of '{name}' did not answer within {}",
                    humantime::format_duration(self.timing.query_timeout)
                ),
            )),
        }
    }

    /// Adopts (or undoes) an acquire reply, and ends the operation, in one engine transition. For
    /// a campaign attempt (`campaign`), adoption is election: the election learns it in the same
    /// transition, so it can never lead a term the session no longer holds.
    pub(crate) fn finish_acquire(
        self: &Arc<Self>,
        name: &Name,
        sent: Instant,
        epoch: u64,
        reply: Result<Acquire>,
        campaign: Option<&Arc<ElectionShared>>,
    ) -> Result<Option<Token>> {
        use log::Level::{Debug, Info};
        let id = &self.id;
        let mut undo = None;
        let result = self.apply_logged(|e, logs| {
            let now = Instant::now();
            let r = match reply {
                Ok(Acquire::Acquired { token, remaining }) => {
                    let adoption = if campaign.is_some() {
                        e.on_campaign_acquired(name, token, sent, remaining, now, epoch)
                    } else {
                        e.on_acquired(name, token, sent, remaining, now, epoch)
                    };
                    match adoption {
                        Adoption::Adopted => {
                            logs.push(Debug, format!("session {id}: acquired '{name}' (token {token})"));
                            if let Some(election) = campaign {
                                let remaining = e.remaining(name, now).unwrap_or_default();
                                election.elected(token, remaining, id, self.options.metadata(), logs);
                            }
                            Ok(Some(token))
                        }
                        // Confirms the very term this session holds (an older campaign attempt,
                        // another thread's lock that won it first): releasing it would end the
                        // held term (finding 4); a second handle of it would too.
                        Adoption::Kept => {
                            logs.push(
                                Debug,
                                format!(
                                    "session {id}: a late acquire reply of '{name}' confirms the held term {token}"
                                ),
                            );
                            if campaign.is_some() {
                                Ok(None)
                            } else {
                                Err(Error::new(
                                    ErrorKind::AlreadyHeld,
                                    format!(
                                        "session {id} already holds '{name}' (token {token}) through another handle"
                                    ),
                                ))
                            }
                        }
                        Adoption::Undo => {
                            e.begin_release(name, token);
                            undo = Some(token);
                            logs.push(
                                Info,
                                format!(
                                    "session {id}: acquire of '{name}' (token {token}) came too late or raced a \
                                     release; undoing it"
                                ),
                            );
                            Ok(None)
                        }
                        Adoption::GivenUp => {
                            e.begin_release(name, token);
                            undo = Some(token);
                            Err(Error::unavailable(format!(
                                "'{name}' (token {token}) was given up by this session (released or lost) and its \
                                 release has not landed on the backend yet; retry"
                            )))
                        }
                        Adoption::SessionEnded => {
                            Err(self.dead_error(e, now).unwrap_or_else(|| Error::session_expired(&self.id)))
                        }
                    }
                }
                Ok(Acquire::Busy) => Ok(None),
                Err(err) => Err(err),
            };
            e.end_acquire(name);
            (r, Vec::new())
        });
        if let Some(token) = undo {
            self.dispatch_release(name.clone(), token, None);
        }
        result
    }

    /// An acquire nobody waits for any more returned: end the operation and undo the term unless
    /// this session holds that very term anyway.
    fn undo_late_acquire(self: &Arc<Self>, name: &Name, reply: Result<Acquire>) {
        let undo = self.apply(|e| {
            e.end_acquire(name);
            let undo = match reply {
                Ok(Acquire::Acquired { token, .. }) if e.held().all(|(n, t)| n != name || t != token) => Some(token),
                _ => None,
            };
            if let Some(token) = undo {
                e.begin_release(name, token);
            }
            (undo, Vec::new())
        });
        if let Some(token) = undo {
            log::info!(
                "session {}: acquire of '{}' (token {}) answered after its caller gave up; releasing it",
                self.id,
                name,
                token
            );
            self.dispatch_release(name.clone(), token, None);
        }
    }

    /// Attempts to take `name` until `deadline` (`None`: forever). The first attempt is always
    /// made; every attempt runs to its own bound (the query timeout) and none is sent after the
    /// deadline, so this returns by the deadline plus at most one bounded call.
    pub(crate) fn lock_until(self: &Arc<Self>, name: &Name, deadline: Option<Instant>) -> Result<Option<Lease>> {
        let push = self.backend.capabilities().push_release;
        let (tx, rx) = unbounded::<Notification>();
        let qt = self.timing.query_timeout;
        // Time left before the caller's deadline, at most a query timeout (for the watches).
        let left = |now: Instant| deadline.map_or(qt, |d| d.saturating_duration_since(now).min(qt));
        let watch = |budget: Duration| {
            if push && !budget.is_zero() {
                let topic = Topic::Lease(name.clone());
                let t = tx.clone();
                let _ = bounded_call(&self.backend, budget, move |b| b.watch(&topic, &t));
            }
        };
        let mut first = true;
        loop {
            let now = Instant::now();
            if !first && deadline.is_some_and(|d| now >= d) {
                return Ok(None);
            }
            if std::mem::take(&mut first) {
                // Register before the attempt so a release right after it is not missed (later
                // rounds registered after their busy attempt).
                watch(left(now));
            }
            let bound = later(Instant::now(), qt);
            match self.attempt_lock(name, bound) {
                Ok(Some(lease)) => return Ok(Some(lease)),
                // Watch again: a one-shot watch may have fired for an instant the lease was free.
                Ok(None) => watch(left(Instant::now())),
                Err(err) if err.is_retryable() => {
                    log::debug!("session {}: lock '{}' attempt failed, retrying: {}", self.id, name, err);
                }
                Err(err) => return Err(err),
            }
            let mut wait = self.retry_delay();
            if let Some(d) = deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            select! {
                recv(rx) -> _ => { while rx.try_recv().is_ok() {} }
                recv(self.ended_rx) -> _ => {}
                default(wait) => {}
            }
        }
    }

    /// Called by [`Lease`]: gives up `name` locally at once and releases it on the backend. Waits
    /// for the result up to the query timeout when `wait` is true.
    pub(crate) fn release_lease(self: &Arc<Self>, name: &Name, token: Token, wait: bool) -> Result<()> {
        let held = self.apply(|e| {
            let held = e.token(name, Instant::now()) == Some(token) || e.held().any(|(n, t)| n == name && t == token);
            if held {
                e.on_release(name);
            }
            // Release on the backend even when lost locally: after a deadline loss the backend may
            // still count it ours. A release of another term or by a non-holder is a no-op.
            e.begin_release(name, token);
            (held, Vec::new())
        });
        log::debug!("session {}: releasing '{}' (token {}, held: {})", self.id, name, token, held);
        self.perform_release(name, token, wait)
    }

    /// Releases the term `token` of `name` on the backend (the engine already counted the release
    /// in flight); waits for the result up to the query timeout when `wait` is true.
    fn perform_release(self: &Arc<Self>, name: &Name, token: Token, wait: bool) -> Result<()> {
        if !wait {
            self.dispatch_release(name.clone(), token, None);
            return Ok(());
        }
        if inline(self.call_bound, self.timing.query_timeout) {
            // The backend returns by itself within the query timeout: release on this thread.
            let started = Instant::now();
            let r = self.backend.release(&self.id, name, token);
            if let Err(err) = &r {
                log::warn!("session {}: release of '{}' failed: {}", self.id, name, err);
            }
            let took = started.elapsed();
            if took > self.timing.query_timeout {
                log::warn!(
                    "session {}: {} release of '{}' took {}, longer than the query timeout {}",
                    self.id,
                    self.backend.kind(),
                    name,
                    humantime::format_duration(took),
                    humantime::format_duration(self.timing.query_timeout)
                );
            }
            let confirmed = r.is_ok();
            self.apply(|e| {
                if confirmed {
                    e.end_confirmed_release(name, token);
                } else {
                    e.end_release(name);
                }
                ((), Vec::new())
            });
            return r;
        }
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.dispatch_release(name.clone(), token, Some(tx));
        match rx.recv_timeout(self.timing.query_timeout) {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "release of '{name}' did not finish within {}; it goes on in the background",
                    humantime::format_duration(self.timing.query_timeout)
                ),
            )),
        }
    }

    /// The token of `name` if this session holds that term and it is valid now.
    pub(crate) fn lease_token(&self, name: &Name, token: Token) -> Result<Token> {
        let e = self.engine.lock();
        let now = Instant::now();
        match e.token(name, now) {
            Some(t) if t == token => Ok(t),
            _ => {
                let why = match self.dead_error(&e, now) {
                    Some(err) => err.to_string(),
                    None => "lost, released or past its local deadline".to_string(),
                };
                Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("lease '{name}' (token {token}) is no longer held: {why}"),
                ))
            }
        }
    }

    pub(crate) fn lease_remaining(&self, name: &Name, token: Token) -> Option<Duration> {
        let e = self.engine.lock();
        let now = Instant::now();
        (e.token(name, now) == Some(token)).then(|| e.remaining(name, now)).flatten()
    }

    // ----- campaigns -----

    pub(crate) fn attach_campaign(self: &Arc<Self>, election: &Arc<ElectionShared>) -> Result<()> {
        let name = election.name().clone();
        {
            let mut e = self.engine.lock();
            let now = Instant::now();
            if let Some(err) = self.dead_error(&e, now) {
                return Err(err);
            }
            let mut c = self.campaigns.lock();
            if let Err(conflict) = e.start_campaign(&name, now) {
                let why = match conflict {
                    CampaignConflict::Held => "already holds",
                    CampaignConflict::Campaigning => "already campaigns for",
                    CampaignConflict::Acquiring => "has a lock in flight for",
                };
                return Err(Error::new(ErrorKind::AlreadyHeld, format!("session {} {why} '{name}'", self.id)));
            }
            election.attach(Arc::downgrade(self), self.id.clone());
            c.insert(
                name,
                CampaignSlot {
                    election: election.clone(),
                    next_attempt: Instant::now(),
                    in_flight: None,
                    woken: false,
                },
            );
        }
        self.poke();
        Ok(())
    }

    /// Stops campaigning for `name` and releases it if held; waits up to the query timeout. One
    /// engine transition ends the campaign, revokes the election and gives up its term, so no
    /// other handle can adopt that term in between (finding 1 of issue #14).
    pub(crate) fn resign(self: &Arc<Self>, name: &Name, wait: bool) -> Result<()> {
        self.stop_campaign(name, None, wait)
    }

    /// Ends the campaign for `name` (only `election`'s, when given) in one engine transition:
    /// the slot goes, the election is revoked, and the term it led or the session holds for
    /// `name` is released.
    fn stop_campaign(self: &Arc<Self>, name: &Name, election: Option<&Arc<ElectionShared>>, wait: bool) -> Result<()> {
        let (token, slot) = self.apply_logged(|e, logs| {
            let mut c = self.campaigns.lock();
            let ours = c.get(name).is_some_and(|slot| election.is_none_or(|el| Arc::ptr_eq(&slot.election, el)));
            let Some(slot) = ours.then(|| c.remove(name)).flatten() else { return ((None, None), Vec::new()) };
            drop(c);
            let leading = slot.election.resigned(logs);
            ((e.stop_campaign(name, leading), Some(slot)), Vec::new())
        });
        // Dropped with no lock held (the election's last reference may own the backend).
        drop(slot);
        match token {
            Some(t) => {
                log::debug!("session {}: resigned '{}', releasing token {}", self.id, name, t);
                self.perform_release(name, t, wait)
            }
            None => Ok(()),
        }
    }

    fn run_campaigns(self: &Arc<Self>, now: Instant) -> Option<Instant> {
        let mut due = Vec::new();
        let mut next: Option<Instant> = None;
        {
            let mut c = self.campaigns.lock();
            for (name, slot) in c.iter_mut() {
                if let Some(sent) = slot.in_flight {
                    if now >= later(sent, self.timing.query_timeout) {
                        // Abandon a hung attempt; its late reply is still adopted or undone.
                        slot.in_flight = None;
                    } else {
                        next = min_opt(next, later(sent, self.timing.query_timeout));
                        continue;
                    }
                }
                if slot.election.is_leading() {
                    continue;
                }
                if now >= slot.next_attempt {
                    slot.in_flight = Some(now);
                    due.push((name.clone(), slot.election.clone()));
                } else {
                    next = min_opt(next, slot.next_attempt);
                }
            }
        }
        for (name, election) in due {
            self.dispatch_campaign_attempt(name, election);
        }
        next
    }

    fn dispatch_campaign_attempt(self: &Arc<Self>, name: Name, election: Arc<ElectionShared>) {
        let epoch = {
            let mut e = self.engine.lock();
            if self.dead_error(&e, Instant::now()).is_some() || e.releasing(&name) {
                drop(e);
                if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                    slot.in_flight = None;
                    slot.next_attempt = later(Instant::now(), Duration::from_millis(10));
                }
                return;
            }
            e.begin_acquire(&name)
        };
        let weak = Arc::downgrade(self);
        let backend = self.backend.clone();
        let notify = self.notify_tx.clone();
        let id = self.id.clone();
        let push = backend.capabilities().push_release;
        exec::spawn(move || {
            if push {
                if let Err(err) = backend.watch(&Topic::Lease(name.clone()), &notify) {
                    log::debug!("session {id}: cannot watch '{name}', polling: {err}");
                }
            }
            let sent = Instant::now();
            let reply = backend.acquire(&id, &name);
            let busy = matches!(reply, Ok(Acquire::Busy));
            if busy && push {
                // Watch again: a one-shot watch may have fired for the instant the lease was free.
                let _ = backend.watch(&Topic::Lease(name.clone()), &notify);
            }
            let observed = if busy { backend.holder(&name).ok().flatten() } else { None };
            let Some(inner) = weak.upgrade() else { return };
            let failed = match inner.finish_acquire(&name, sent, epoch, reply, Some(&election)) {
                Ok(Some(_)) => None,
                Ok(None) => {
                    if let Some(h) = observed {
                        election.observe(h);
                    }
                    None
                }
                Err(err) => {
                    log::debug!("session {id}: campaign attempt for '{name}' failed: {err}");
                    Some(err)
                }
            };
            election.attempt_done(failed.as_ref());
            if let Some(slot) = inner.campaigns.lock().get_mut(&name) {
                slot.in_flight = None;
                slot.next_attempt = if std::mem::take(&mut slot.woken) {
                    Instant::now()
                } else {
                    later(Instant::now(), inner.retry_delay())
                };
            }
            inner.poke();
        });
    }

    fn retry_delay(&self) -> Duration {
        self.timing.renew_interval / 2 + jitter(self.timing.renew_interval / 4)
    }

    fn on_notification(self: &Arc<Self>, n: Notification) {
        if let Notification::Released(name) = n {
            if let Some(slot) = self.campaigns.lock().get_mut(&name) {
                if slot.in_flight.is_some() {
                    slot.woken = true;
                } else {
                    slot.next_attempt = Instant::now();
                }
            }
        }
    }

    // ----- memberships -----

    pub(crate) fn attach_membership(self: &Arc<Self>, m: &Arc<MembershipShared>) -> Result<()> {
        let group = m.group().clone();
        let deadline = later(Instant::now(), self.timing.query_timeout);
        {
            let mut e = self.engine.lock();
            // A leave of the group still in flight could land after this join and undo it
            // (simulation finding 3): wait for it (one that lands even later is caught by the
            // keep-alives' group reports and re-joined).
            while e.leaving(&group) {
                if self.cond.wait_until(&mut e, deadline).timed_out() && e.leaving(&group) {
                    return Err(Error::unavailable(format!(
                        "session {}: a leave of '{group}' is still in flight (its backend call has not returned); \
                         retry the join",
                        self.id
                    )));
                }
            }
            if let Some(err) = self.dead_error(&e, Instant::now()) {
                return Err(err);
            }
            let mut ms = self.memberships.lock();
            if ms.contains_key(&group) {
                return Err(Error::new(
                    ErrorKind::AlreadyHeld,
                    format!("session {} is already a member of '{group}'", self.id),
                ));
            }
            ms.insert(group.clone(), m.clone());
            e.begin_join(&group);
        }
        // Whichever comes first under the engine lock decides: the call's return (joined, if its
        // caller still waits) or the caller giving up (then a late success is a stray, left by a
        // later keep-alive).
        let gave_up = Arc::new(AtomicBool::new(false));
        let (id, g, session, late) = (self.id.clone(), group.clone(), Arc::downgrade(self), gave_up.clone());
        let call = move |b: &dyn LeaseBackend| {
            let r = b.join(&id, &g);
            if let Some(s) = session.upgrade() {
                s.apply(|e| {
                    let now = Instant::now();
                    e.end_join(&g, now);
                    let out = if r.is_ok() && !late.load(Ordering::SeqCst) { e.joined(&g, now) } else { Vec::new() };
                    ((), out)
                });
            }
            r
        };
        // One bound for the whole join: the wait for a leave above and the call share it.
        let budget = deadline.saturating_duration_since(Instant::now());
        match bounded_call(&self.backend, budget, call) {
            Ok(()) => {
                m.attach(Arc::downgrade(self), self.id.clone());
                log::debug!("session {}: joined '{}'", self.id, group);
                Ok(())
            }
            Err(err) => {
                self.apply(|e| {
                    gave_up.store(true, Ordering::SeqCst);
                    self.memberships.lock().remove(&group);
                    e.join_abandoned(&group, Instant::now());
                    ((), Vec::new())
                });
                Err(err)
            }
        }
    }

    pub(crate) fn leave(self: &Arc<Self>, group: &Name, wait: bool) -> Result<()> {
        {
            // Count the leave (under the engine lock) as the membership disappears from the map,
            // so a join that no longer finds the membership always finds the leave.
            let mut e = self.engine.lock();
            if self.memberships.lock().remove(group).is_none() {
                return Ok(());
            }
            e.begin_leave(group);
        }
        if wait {
            bounded_call(&self.backend, self.timing.query_timeout, self.leave_call(group))
        } else {
            self.spawn_leave(group.clone());
            Ok(())
        }
    }

    /// The backend call of a leave the engine counted in flight (`begin_leave`): it ends the
    /// leave only when the backend call returned, wherever it runs and even after its caller
    /// stopped waiting.
    fn leave_call(self: &Arc<Self>, group: &Name) -> impl FnOnce(&dyn LeaseBackend) -> Result<()> + Send + 'static {
        let (id, g, session) = (self.id.clone(), group.clone(), Arc::downgrade(self));
        move |b: &dyn LeaseBackend| {
            let r = b.leave(&id, &g);
            if let Some(s) = session.upgrade() {
                s.apply(|e| (e.end_leave(&g, Instant::now()), Vec::new()));
            }
            r
        }
    }

    /// A leave nobody waits for (a dropped membership, a stray), on a worker.
    fn spawn_leave(self: &Arc<Self>, group: Name) {
        let call = self.leave_call(&group);
        let (backend, id) = (self.backend.clone(), self.id.clone());
        exec::spawn(move || {
            if let Err(err) = call(&*backend) {
                log::debug!("session {id}: leave '{group}' failed: {err}");
            }
        });
    }

    /// True while the session is alive and holds `group` without a known loss.
    pub(crate) fn is_joined(&self, group: &Name) -> bool {
        let e = self.engine.lock();
        self.dead_error(&e, Instant::now()).is_none() && e.is_joined(group)
    }

    // ----- close -----

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
        exec::spawn(move || {
            if let Err(err) = backend.close_session(&id) {
                log::warn!("session {id}: close failed (the backend frees it at expiry): {err}");
            }
        });
    }

    // ----- coordinator hooks (runtime-edges): undo a durable re-attach that raced the
    // application's resign or leave. Each acts only on this very election or membership, never
    // on another handle of the same name. -----

    /// Stops `election`'s campaign on this session if it is the one campaigning here, and
    /// releases its term if this session holds one (its resign went to the previous session):
    /// the same one transition as [`resign`](Self::resign).
    pub(crate) fn detach_campaign(self: &Arc<Self>, election: &Arc<ElectionShared>) {
        let _ = self.stop_campaign(election.name(), Some(election), false);
    }

    /// Leaves `membership`'s group on this session if it is the membership held here.
    pub(crate) fn detach_membership(self: &Arc<Self>, membership: &Arc<MembershipShared>) {
        let group = membership.group();
        let ours = self.memberships.lock().get(group).is_some_and(|m| Arc::ptr_eq(m, membership));
        if ours {
            let _ = self.leave(group, false);
        }
    }
}

/// Time the engine may spend between a caller's entry (where its deadline was set) and the backend
/// call, without that costing the call its inline run: a bound equal to the query timeout still
/// counts as fitting a `try_lock`'s query timeout.
const INLINE_GRACE: Duration = Duration::from_millis(10);

/// True when a call may run on the caller's thread: the backend bounds its calls itself
/// (`call_bound`), within `budget`, the time the caller may wait.
fn inline(call_bound: Option<Duration>, budget: Duration) -> bool {
    call_bound.is_some_and(|bound| bound <= budget + INLINE_GRACE)
}

/// Runs `f` and waits up to `timeout`: on this thread when the backend bounds its calls within
/// `timeout` itself (its result is returned even if it overran), otherwise on a worker that is
/// abandoned at `timeout`.
pub(crate) fn bounded_call<T: Send + 'static>(
    backend: &Arc<dyn LeaseBackend>,
    timeout: Duration,
    f: impl FnOnce(&dyn LeaseBackend) -> Result<T> + Send + 'static,
) -> Result<T> {
    if inline(backend.call_bound(), timeout) {
        return f(&**backend);
    }
    let b = backend.clone();
    let kind = backend.kind();
    match exec::call_until(Instant::now() + timeout, move || f(&*b), |_| {}) {
        Some(r) => r,
        None => Err(Error::new(
            ErrorKind::Timeout,
            format!("{kind} did not answer within {}", humantime::format_duration(timeout)),
        )),
    }
}

fn min_opt(a: Option<Instant>, b: Instant) -> Option<Instant> {
    Some(a.map_or(b, |a| a.min(b)))
}

pub(crate) fn jitter(max: Duration) -> Duration {
    if max.is_zero() {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::random_range(0..max.as_nanos().min(u64::MAX as u128) as u64))
}

fn renewal_thread(weak: Weak<SessionInner>, wake: Receiver<Wake>, notify: Receiver<Notification>) {
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let now = Instant::now();
        let next = inner.apply(|e| {
            let out = e.poll(now);
            (e.next_wakeup(), out)
        });
        let Some(mut next) = next else {
            log::debug!("session {}: renewal thread stops ({})", inner.id, inner.state());
            return;
        };
        if let Some(c) = inner.run_campaigns(now) {
            next = next.min(c);
        }
        drop(inner);
        let timeout = next.saturating_duration_since(Instant::now());
        select! {
            recv(wake) -> m => if m.is_err() { return },
            recv(notify) -> n => {
                if let (Ok(n), Some(inner)) = (n, weak.upgrade()) {
                    inner.on_notification(n);
                    while let Ok(n) = notify.try_recv() {
                        inner.on_notification(n);
                    }
                }
            }
            default(timeout) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_are_send_and_sync() {
        assert_send_sync::<Session>();
        assert_send_sync::<Lease>();
        assert_send_sync::<Election>();
        assert_send_sync::<Membership>();
        assert_send_sync::<crate::Error>();
    }
}
