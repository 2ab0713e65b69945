//! Leader election on top of leases, and leader-gated work.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sync::thread::{self, JoinHandle};
use crate::sync::{self, Condvar, Mutex};

use crate::backend::{Holder, LeaseBackend};
use crate::engine::{deadline_after, later};
use crate::error::{Error, ErrorKind, Result};
use crate::events::{Events, Subscribers};
use crate::runtime::{bounded_call, CampaignSink, Logs, SessionInner};
use crate::state::LossReason;
use crate::types::{Name, SessionId, Token};

/// Why leadership ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RevokeReason {
    /// The lease was lost (taken over, or its local deadline passed).
    Lost,
    /// The session expired.
    SessionExpired,
    /// The session was closed.
    SessionClosed,
    /// [`Election::resign`] (or dropping the handle).
    Resigned,
}

impl fmt::Display for RevokeReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RevokeReason::Lost => "the lease was lost",
            RevokeReason::SessionExpired => "the session expired",
            RevokeReason::SessionClosed => "the session was closed",
            RevokeReason::Resigned => "resigned",
        })
    }
}

impl From<LossReason> for RevokeReason {
    fn from(r: LossReason) -> RevokeReason {
        match r {
            LossReason::NotOwned | LossReason::Deadline => RevokeReason::Lost,
            LossReason::SessionExpired => RevokeReason::SessionExpired,
            LossReason::SessionClosed => RevokeReason::SessionClosed,
        }
    }
}

/// What happened to an election, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ElectionEvent {
    /// This node became leader with `token`.
    Elected {
        /// The term's fencing token.
        token: Token,
    },
    /// This node stopped leading.
    Revoked {
        /// The token of the term that ended.
        token: Token,
        /// Why.
        reason: RevokeReason,
    },
    /// Another (or this) session was observed leading. Observed while contending, so it may lag.
    LeaderChanged {
        /// The observed leader: the holder of the election's lease (session, token, metadata,
        /// remaining time by the backend's clock).
        leader: Holder,
    },
    /// A durable election (from a `Coordinator`) moved to a new session after its old one expired.
    SessionReplaced {
        /// The new session.
        session: SessionId,
    },
}

#[derive(Debug)]
struct ElectionState {
    session: Weak<SessionInner>,
    session_id: Option<SessionId>,
    leading: Option<Token>,
    cancel: Arc<AtomicBool>,
    last_leader: Option<(SessionId, Token)>,
    resigned: bool,
    ended: Option<LossReason>,
    /// Campaign attempts answered (on any session): a wait gives the first one its own bound.
    attempts: u64,
    /// Why the last answered attempt failed (kind and message), if it failed.
    attempt_error: Option<(ErrorKind, String)>,
}

pub(crate) struct ElectionShared {
    name: Name,
    backend: Arc<dyn LeaseBackend>,
    query_timeout: Duration,
    durable: bool,
    st: Mutex<ElectionState>,
    cond: Condvar,
    subscribers: Subscribers<ElectionEvent>,
}

impl fmt::Debug for ElectionShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.st.lock();
        f.debug_struct("Election")
            .field("name", &self.name)
            .field("session", &st.session_id)
            .field("leading", &st.leading)
            .finish()
    }
}

impl ElectionShared {
    pub(crate) fn new(
        name: Name,
        backend: Arc<dyn LeaseBackend>,
        query_timeout: Duration,
        durable: bool,
    ) -> Arc<ElectionShared> {
        Arc::new(ElectionShared {
            name,
            backend,
            query_timeout,
            durable,
            st: Mutex::new(ElectionState {
                session: Weak::new(),
                session_id: None,
                leading: None,
                cancel: Arc::new(AtomicBool::new(true)),
                last_leader: None,
                resigned: false,
                ended: None,
                attempts: 0,
                attempt_error: None,
            }),
            cond: Condvar::new(),
            subscribers: Subscribers::new(),
        })
    }

    fn emit(&self, ev: ElectionEvent) {
        self.subscribers.emit(&ev);
    }

    /// Entries in the subscriber list, dead ones included (for leak tests).
    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    /// Reports `holder` as the leader unless a newer (or the same) term was already reported:
    /// tokens only grow, so an older observation arriving late never moves the leader backwards.
    fn report_leader(st: &mut ElectionState, holder: Holder, emit: impl FnOnce(ElectionEvent)) {
        if st.last_leader.as_ref().is_some_and(|(_, t)| *t >= holder.token) {
            return;
        }
        st.last_leader = Some((holder.session.clone(), holder.token));
        emit(ElectionEvent::LeaderChanged { leader: holder });
    }

    fn revoke_locked(&self, st: &mut ElectionState, token: Token, reason: RevokeReason, logs: &mut Logs) {
        if st.leading != Some(token) {
            return;
        }
        st.leading = None;
        st.cancel.store(true, Ordering::SeqCst);
        // A resign is the application's own doing: info; every other end is a warning.
        let level = if reason == RevokeReason::Resigned { log::Level::Info } else { log::Level::Warn };
        let session = st.session_id.as_ref().map_or_else(|| "(no session)".to_string(), |s| format!("session {s}"));
        logs.push(level, format!("{session}: leadership of '{}' (token {token}) ended: {reason}", self.name));
        self.emit(ElectionEvent::Revoked { token, reason });
        self.cond.notify_all();
    }

    pub(crate) fn is_durable(&self) -> bool {
        self.durable
    }

    fn token(&self) -> Result<Token> {
        let (session, leading, ended) = {
            let st = self.st.lock();
            (st.session.upgrade(), st.leading, st.ended)
        };
        match (session, leading) {
            (Some(s), Some(t)) => s.lease_token(&self.name, t),
            _ => Err(match ended {
                Some(LossReason::SessionExpired) if !self.durable => {
                    Error::new(ErrorKind::SessionExpired, format!("not leader of '{}': the session expired", self.name))
                }
                Some(LossReason::SessionClosed) if !self.durable => {
                    Error::new(ErrorKind::Closed, format!("not leader of '{}': the session is closed", self.name))
                }
                _ => Error::new(ErrorKind::NotLeader, format!("not leader of '{}'", self.name)),
            }),
        }
    }

    fn current_cancel(&self) -> Arc<AtomicBool> {
        self.st.lock().cancel.clone()
    }

    /// Waits until this node leads, or `deadline` (`None`: forever) passes. A term lost before
    /// its revoke reached the election (`LeaseLost`) is not the end: the campaign goes on. Until
    /// the campaign's first attempt has answered, the wait lasts at least that attempt's own bound
    /// (the query timeout), however short the deadline: at least one attempt, whatever the
    /// deadline.
    fn wait_elected_until(&self, deadline: Option<Instant>) -> Result<Token> {
        let first_bound = later(sync::now(), self.query_timeout);
        loop {
            match self.token() {
                Ok(t) => return Ok(t),
                Err(e) if e.kind() != ErrorKind::NotLeader && e.kind() != ErrorKind::LeaseLost => return Err(e),
                Err(_) => {}
            }
            let mut st = self.st.lock();
            if st.resigned {
                return Err(Error::new(ErrorKind::Closed, format!("election '{}' was resigned", self.name)));
            }
            let deadline = if st.attempts == 0 { deadline.map(|d| d.max(first_bound)) } else { deadline };
            // Leading a term whose local deadline passed: its revoke follows as soon as the renewal
            // thread sees the deadline; look again shortly rather than wait for a notification.
            let until = if st.leading.is_some() { Some(later(sync::now(), LOSS_RECHECK)) } else { None };
            let until = match (deadline, until) {
                (Some(d), Some(u)) => Some(d.min(u)),
                (d, u) => d.or(u),
            };
            let timed_out = match until {
                Some(u) => self.cond.wait_until(&mut st, u).timed_out(),
                None => {
                    self.cond.wait(&mut st);
                    false
                }
            };
            if timed_out && deadline.is_some_and(|d| sync::now() >= d) {
                drop(st);
                return self.token().map_err(|_| {
                    Error::new(ErrorKind::Timeout, format!("not elected leader of '{}' in time", self.name))
                });
            }
        }
    }
}

impl CampaignSink for ElectionShared {
    fn name(&self) -> &Name {
        &self.name
    }

    fn attach(&self, session: Weak<SessionInner>, id: SessionId) {
        let mut st = self.st.lock();
        let replaced = st.session_id.is_some();
        st.session = session;
        st.session_id = Some(id.clone());
        st.ended = None;
        if replaced {
            self.emit(ElectionEvent::SessionReplaced { session: id });
        }
        self.cond.notify_all();
    }

    fn is_leading(&self) -> bool {
        self.st.lock().leading.is_some()
    }

    /// The session adopted `token` for this campaign (called in the engine transition that
    /// adopted it, under the engine lock: never after the session's end or a resign).
    fn elected(&self, token: Token, remaining: Duration, session: &SessionId, metadata: &str, logs: &mut Logs) {
        let mut st = self.st.lock();
        let ended = sync::pick(sync::Bug::ElectedAfterExpiry, false, st.ended.is_some()); // old: ignored
        if st.resigned || ended || st.leading == Some(token) || st.session_id.as_ref() != Some(session) {
            return;
        }
        st.leading = Some(token);
        st.cancel = Arc::new(AtomicBool::new(false));
        logs.push(log::Level::Info, format!("session {session}: elected leader of '{}' (token {token})", self.name));
        self.emit(ElectionEvent::Elected { token });
        let holder = Holder { session: session.clone(), token, remaining, metadata: metadata.to_string() };
        Self::report_leader(&mut st, holder, |ev| self.emit(ev));
        self.cond.notify_all();
    }

    fn revoked(&self, token: Token, reason: LossReason, logs: &mut Logs) {
        let mut st = self.st.lock();
        self.revoke_locked(&mut st, token, reason.into(), logs);
    }

    fn session_ended(&self, session: &SessionId, reason: LossReason, logs: &mut Logs) {
        let mut st = self.st.lock();
        if st.session_id.as_ref() != Some(session) {
            return;
        }
        if let Some(t) = st.leading {
            self.revoke_locked(&mut st, t, reason.into(), logs);
        }
        st.ended = Some(reason);
        self.cond.notify_all();
    }

    /// A campaign attempt was answered (whatever its outcome): `failed` is its error, if any.
    fn attempt_done(&self, failed: Option<&Error>) {
        let mut st = self.st.lock();
        st.attempts += 1;
        st.attempt_error = failed.map(|e| (e.kind(), crate::error::display_chain(e)));
        self.cond.notify_all();
    }

    fn observe(&self, holder: Holder) {
        let mut st = self.st.lock();
        Self::report_leader(&mut st, holder, |ev| self.emit(ev));
    }

    /// Marks the election resigned; returns the token to release, if leading.
    fn resigned(&self, logs: &mut Logs) -> Option<Token> {
        let mut st = self.st.lock();
        st.resigned = true;
        let t = st.leading;
        if let Some(t) = t {
            self.revoke_locked(&mut st, t, RevokeReason::Resigned, logs);
        }
        self.cond.notify_all();
        t
    }

    fn is_resigned(&self) -> bool {
        self.st.lock().resigned
    }
}

/// How often a waiter looks again at a term whose local deadline passed before its revoke came.
const LOSS_RECHECK: Duration = Duration::from_millis(20);

/// A campaign for leadership of one name, contending in the background until resigned or its
/// session ends. Created by `Session::campaign` (ends with the session) or
/// `Coordinator::campaign` (carries on across sessions). Dropping it resigns.
pub struct Election {
    shared: Arc<ElectionShared>,
    resigned: bool,
}

impl fmt::Debug for Election {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}

impl Election {
    pub(crate) fn new(shared: Arc<ElectionShared>) -> Election {
        Election { shared, resigned: false }
    }

    /// The election (lease) name.
    pub fn name(&self) -> &Name {
        &self.shared.name
    }

    /// The session currently campaigning (changes after a recovery on a `Coordinator`).
    pub fn session_id(&self) -> Option<SessionId> {
        self.shared.st.lock().session_id.clone()
    }

    /// True while this node leads and its lease is valid (no I/O).
    pub fn is_leader(&self) -> bool {
        self.shared.token().is_ok()
    }

    /// The fencing token of the current term; call it before each leader-only write.
    ///
    /// # Errors
    /// `NotLeader` when not leading; `LeaseLost` when the term may be over;
    /// `SessionExpired`/`Closed` when the (non-durable) election's session ended.
    pub fn token(&self) -> Result<Token> {
        self.shared.token()
    }

    /// Waits until this node leads, however long that takes; returns the term's token. The
    /// bounded forms are [`wait_elected_timeout`](Election::wait_elected_timeout) and
    /// [`wait_elected_deadline`](Election::wait_elected_deadline); [`token`](Election::token) does
    /// not wait.
    ///
    /// # Errors
    /// `SessionExpired`/`Closed` when the session ended (non-durable elections); `Closed` when the
    /// election was resigned.
    pub fn wait_elected(&self) -> Result<Token> {
        self.shared.wait_elected_until(None)
    }

    /// Waits until this node leads, at most `timeout` (`Duration::MAX`: forever); returns the
    /// term's token. At least one campaign attempt counts, whatever the timeout: until the
    /// campaign's first attempt has answered, the wait lasts up to that attempt's own bound (the
    /// query timeout), so `Duration::ZERO` on a fresh campaign for a free name returns its token;
    /// later the timeout is the bound.
    ///
    /// # Errors
    /// `Timeout`; `SessionExpired`/`Closed` when the session ended (non-durable elections);
    /// `Closed` when the election was resigned.
    pub fn wait_elected_timeout(&self, timeout: Duration) -> Result<Token> {
        self.shared.wait_elected_until(deadline_after(sync::now(), timeout))
    }

    /// Waits until this node leads or `deadline` passes (at least one campaign attempt counts, as
    /// in [`wait_elected_timeout`](Election::wait_elected_timeout)).
    ///
    /// # Errors
    /// As [`wait_elected_timeout`](Election::wait_elected_timeout).
    pub fn wait_elected_deadline(&self, deadline: Instant) -> Result<Token> {
        self.shared.wait_elected_until(Some(deadline))
    }

    /// Why the campaign's last answered attempt failed, if it failed (a busy attempt — someone
    /// else leads — is not a failure). Campaign attempts run in the background and are retried;
    /// this is how a caller that waits (e.g. `simba elect --timeout`) reports their real error,
    /// such as "only 0 of 1 redis replicas acknowledged", instead of a bare timeout.
    pub fn last_attempt_error(&self) -> Option<Error> {
        let st = self.shared.st.lock();
        st.attempt_error.as_ref().map(|(kind, msg)| Error::new(*kind, msg.clone()))
    }

    /// Who leads now, asked of the backend (works the same on every node, leader or not).
    ///
    /// # Errors
    /// `Timeout`; the backend's error.
    pub fn leader(&self) -> Result<Option<Holder>> {
        let name = self.shared.name.clone();
        bounded_call(&self.shared.backend, self.shared.query_timeout, move |b| b.holder(&name))
    }

    /// A new receiver of this election's events (`Elected`, `Revoked`, `LeaderChanged`, ...), in
    /// order. If this node leads when called, the first event is its `Elected`. Dropping it
    /// unsubscribes (see [`Events`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use simba::{ElectionEvent, MemoryBackend, Session, SessionOptions};
    ///
    /// # fn main() -> simba::Result<()> {
    /// let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
    /// let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
    /// let election = session.campaign("scheduler")?;
    /// let events = election.events();
    /// let first = events.recv_timeout(Duration::from_secs(5));
    /// assert!(matches!(first, Ok(ElectionEvent::Elected { .. })), "{first:?}");
    /// # drop(election);
    /// # session.close()
    /// # }
    /// ```
    pub fn events(&self) -> Events<ElectionEvent> {
        // Under the election's lock, so no event can come between the read and the push.
        let st = self.shared.st.lock();
        let events = self.shared.subscribers.subscribe(st.leading.map(|token| ElectionEvent::Elected { token }));
        drop(st);
        events
    }

    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.shared.subscriber_count()
    }

    /// Stops contending and gives up leadership (releasing the lease, waiting up to the query
    /// timeout for the backend).
    ///
    /// # Errors
    /// `Timeout` or the backend's error from the release; leadership is given up locally anyway.
    pub fn resign(mut self) -> Result<()> {
        self.resigned = true;
        resign_shared(&self.shared, true)
    }

    /// Runs `work` on a new thread while this node leads: whenever elected, `work` is called
    /// (every `every`, or once per term with [`Schedule::OncePerTerm`]) with a [`LeaderContext`]
    /// carrying the term's token and a cancellation signal that fires the moment leadership is
    /// lost or the session ends. `work` should check [`LeaderContext::is_cancelled`] (or use
    /// [`LeaderContext::sleep`]) and return promptly when cancelled.
    pub fn run_while_leader<F>(&self, schedule: Schedule, work: F) -> LeaderTask
    where
        F: FnMut(&LeaderContext) + Send + 'static,
    {
        LeaderTask::spawn(self.shared.clone(), schedule, work)
    }
}

fn resign_shared(shared: &Arc<ElectionShared>, wait: bool) -> Result<()> {
    // Marked resigned in the same section that reads the session: a coordinator re-attaching
    // the election to a new session meanwhile sees it resigned and detaches it again.
    let session = {
        let mut st = shared.st.lock();
        st.resigned = true;
        st.session.upgrade()
    };
    match session {
        Some(s) => s.resign(&shared.name, wait),
        None => {
            let mut logs = Logs::default();
            shared.resigned(&mut logs);
            logs.write();
            Ok(())
        }
    }
}

impl Drop for Election {
    fn drop(&mut self) {
        if !self.resigned {
            let _ = resign_shared(&self.shared, false);
        }
    }
}

/// When leader-gated work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Schedule {
    /// Call the work every given interval while leading.
    Every(Duration),
    /// Call the work once at the start of each term.
    OncePerTerm,
}

/// What leader-gated work receives: the term's token and the cancellation signal.
pub struct LeaderContext {
    token: Token,
    cancel: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    shared: Arc<ElectionShared>,
}

impl fmt::Debug for LeaderContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LeaderContext").field("token", &self.token).field("cancelled", &self.is_cancelled()).finish()
    }
}

impl LeaderContext {
    /// The term's fencing token, checked like [`Election::token`]: call it before each write and
    /// pass the token to the resource.
    ///
    /// # Errors
    /// `LeaseLost` once this term may be over (lost, past its local deadline, or a newer term
    /// leads), or the task was stopped; otherwise the election's error (`NotLeader`,
    /// `SessionExpired`/`Closed`).
    pub fn token(&self) -> Result<Token> {
        let current = self.shared.token()?;
        if current != self.token || self.cancel.load(Ordering::SeqCst) || self.stop.load(Ordering::SeqCst) {
            return Err(Error::new(
                ErrorKind::LeaseLost,
                format!("the term of '{}' with token {} is over", self.shared.name, self.token),
            ));
        }
        Ok(current)
    }

    /// The token this term was granted with, whether or not it is still held (for logs; use
    /// [`token`](LeaderContext::token) to guard writes).
    pub fn granted_token(&self) -> Token {
        self.token
    }

    /// True once leadership of this term is lost (or may be: the local deadline passed), the
    /// session ended, or the task was stopped.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
            || self.stop.load(Ordering::SeqCst)
            || self.shared.token().ok() != Some(self.token)
    }

    /// Sleeps up to `d`, waking early on cancellation; returns true if still leading afterwards.
    pub fn sleep(&self, d: Duration) -> bool {
        let deadline = later(sync::now(), d);
        while !self.is_cancelled() {
            let now = sync::now();
            if now >= deadline {
                break;
            }
            let mut st = self.shared.st.lock();
            // Wake at least every 50 ms to notice a local deadline passing.
            let until = deadline.min(now + Duration::from_millis(50));
            let _ = self.shared.cond.wait_until(&mut st, until);
        }
        !self.is_cancelled()
    }
}

/// A running leader-gated task (see [`Election::run_while_leader`]). Dropping it asks the task to
/// stop without waiting; [`stop`](LeaderTask::stop) waits for it.
#[derive(Debug)]
pub struct LeaderTask {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
}

impl LeaderTask {
    fn spawn<F>(shared: Arc<ElectionShared>, schedule: Schedule, mut work: F) -> LeaderTask
    where
        F: FnMut(&LeaderContext) + Send + 'static,
    {
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let weak = Arc::downgrade(&shared);
        drop(shared);
        let handle = thread::Builder::new()
            .name("simba-leader-task".into())
            .spawn(move || loop {
                if stop2.load(Ordering::SeqCst) {
                    return;
                }
                let Some(shared) = weak.upgrade() else { return };
                if shared.is_resigned() {
                    return;
                }
                let token = match shared.wait_elected_until(Some(later(sync::now(), Duration::from_millis(200)))) {
                    Ok(t) => t,
                    Err(e) if matches!(e.kind(), ErrorKind::Timeout | ErrorKind::NotLeader | ErrorKind::LeaseLost) => {
                        continue
                    }
                    Err(e) if shared.is_durable() && e.kind() != ErrorKind::Closed => {
                        drop(shared);
                        thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    Err(_) => return,
                };
                let ctx = LeaderContext { token, cancel: shared.current_cancel(), stop: stop2.clone(), shared };
                if ctx.is_cancelled() {
                    continue;
                }
                match schedule {
                    Schedule::OncePerTerm => {
                        work(&ctx);
                        while ctx.sleep(Duration::from_millis(200)) {}
                    }
                    Schedule::Every(every) => {
                        while !ctx.is_cancelled() {
                            work(&ctx);
                            if !ctx.sleep(every) {
                                break;
                            }
                        }
                    }
                }
            })
            .ok();
        if handle.is_none() {
            log::error!("cannot start the leader task thread");
        }
        LeaderTask { stop, handle }
    }

    /// Asks the task to stop and waits for the current call of the work to return.
    pub fn stop(mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for LeaderTask {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::memory::MemoryBackend;
    use crate::handles::session::Session;
    use crate::options::SessionOptions;

    fn holder(session: u64, token: u64) -> Holder {
        Holder {
            session: SessionId::from_u64(session),
            token: Token::new(token).unwrap(),
            remaining: Duration::from_secs(1),
            metadata: String::new(),
        }
    }

    #[test]
    fn observe_never_reports_leaders_going_backwards() {
        // Finding 9: a Busy attempt's holder() read, made outside any lock, can land after a newer
        // leader was already reported.
        let shared =
            ElectionShared::new(Name::new("e").unwrap(), Arc::new(MemoryBackend::new()), Duration::ZERO, false);
        let rx = shared.subscribers.subscribe(None);
        shared.observe(holder(2, 5));
        shared.observe(holder(1, 4));
        shared.observe(holder(3, 6));
        let seen: Vec<u64> = rx
            .try_iter()
            .map(|e| match e {
                ElectionEvent::LeaderChanged { leader } => leader.token.get(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(seen, vec![5, 6]);
    }

    #[test]
    fn wait_elected_keeps_waiting_when_the_term_is_lost_before_its_revoke() {
        // Finding 3: between a term's loss (token() fails: LeaseLost) and its Revoked, a waiter
        // took the loss as terminal, and a non-durable LeaderTask exited for good.
        let options = SessionOptions::builder().lease_duration(Duration::from_secs(4)).build().unwrap();
        let session = Session::open(Arc::new(MemoryBackend::new()), options).unwrap();
        let election = session.campaign("e").unwrap();
        election.wait_elected_timeout(Duration::from_secs(10)).unwrap();
        // The engine drops the term without the revoke having reached the election yet.
        let name = Name::new("e").unwrap();
        let inner = election.shared.st.lock().session.upgrade().unwrap();
        inner.engine_for_test().on_release(&name);
        assert_eq!(election.token().unwrap_err().kind(), ErrorKind::LeaseLost);
        let r = election.shared.wait_elected_until(Some(sync::now() + Duration::from_millis(100)));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Timeout, "a loss is not the end of the election");
    }

    #[test]
    fn a_term_elected_after_its_sessions_expiry_is_not_led_and_the_reattached_election_campaigns() {
        // Finding 3: an attempt adopted just before the expiry told the election after it
        // (`elected` after `session_ended`): the election led a term its session no longer held,
        // no Revoked followed, and a durable re-attach kept `leading`, so the new session never
        // campaigned again.
        let shared = ElectionShared::new(Name::new("e").unwrap(), Arc::new(MemoryBackend::new()), Duration::ZERO, true);
        let rx = shared.subscribers.subscribe(None);
        let (old, new) = (SessionId::from_u64(1), SessionId::from_u64(2));
        let mut logs = Logs::default();
        shared.attach(Weak::new(), old.clone());
        shared.session_ended(&old, LossReason::SessionExpired, &mut logs);
        shared.elected(Token::new(7).unwrap(), Duration::from_secs(1), &old, "", &mut logs);
        logs.write();
        assert!(!shared.is_leading(), "an election never leads a term of an ended session");
        shared.attach(Weak::new(), new);
        assert!(!shared.is_leading(), "the re-attached election campaigns on the new session");
        let events: Vec<ElectionEvent> = rx.try_iter().collect();
        assert!(
            !events.iter().any(|e| matches!(e, ElectionEvent::Elected { .. })),
            "no Elected after the session's end: {events:?}"
        );
    }
}
