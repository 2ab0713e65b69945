//! A coordinator: one backend and options, a self-healing current session, and elections and
//! memberships that carry on across session expiry.
//!
//! A session that expired stays dead. The coordinator notices (through the session's events),
//! opens a new session (retrying with backoff while the backend is unreachable), re-attaches every
//! durable election and membership to it, and reports the gap through [`CoordinatorEvent`]s and
//! each election's `SessionReplaced` event. A re-elected node gets a new, larger token.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::sync::{self, select, thread, unbounded, Mutex, Receiver, Sender};

use crate::backend::{Holder, LeaseBackend, Member};
use crate::error::{Error, ErrorKind, Result};
use crate::events::{Events, Subscribers};
use crate::handles::election::{Election, ElectionShared};
use crate::handles::group::{self, MemberWatch, Membership, MembershipShared};
use crate::handles::lease::Lease;
use crate::handles::partitions::{PartitionOptions, Partitions};
use crate::handles::semaphore::{Semaphore, Source};
use crate::options::SessionOptions;
use crate::runtime::{bounded_call, jitter, CampaignSink, MembershipSink, SessionInner};
use crate::state::SessionEvent;
use crate::status::CoordinatorStatus;
use crate::types::{user_name, IntoName, Name, SessionId};

/// What happened to a coordinator's sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CoordinatorEvent {
    /// A session was opened (the first, or a replacement).
    SessionOpened {
        /// Its id.
        session: SessionId,
    },
    /// The current session expired; a replacement is being opened.
    SessionLost {
        /// The expired session.
        session: SessionId,
    },
    /// A replacement session is in place and durable elections and memberships were re-attached.
    Recovered {
        /// The expired session.
        old: SessionId,
        /// The new session.
        new: SessionId,
        /// Time between noticing the loss and the new session being ready.
        gap: Duration,
    },
    /// A durable membership (or any membership of the current session) went missing on the
    /// backend; the session re-joins it (see [`SessionEvent::MembershipLost`]).
    MembershipLost {
        /// The session.
        session: SessionId,
        /// The group.
        group: Name,
    },
    /// A lost membership is back on the backend.
    MembershipRestored {
        /// The session.
        session: SessionId,
        /// The group.
        group: Name,
    },
    /// Opening a replacement session failed; retrying.
    OpenFailed {
        /// The error, formatted with its source chain.
        error: String,
    },
}

mod state;
#[cfg(test)]
mod tests;

use state::{Durable, NoSession, Outcome, State, Verdict};

type Sessions = State<Arc<SessionInner>, ElectionShared, MembershipShared>;

impl Durable for ElectionShared {
    fn ended(&self) -> bool {
        self.is_resigned()
    }
}

impl Durable for MembershipShared {
    fn ended(&self) -> bool {
        // Only durable memberships are the coordinator's to move.
        self.is_left() || !self.is_durable()
    }
}

/// A durable item the coordinator attaches to its sessions.
trait Attach: Durable + Send + Sync + 'static {
    fn attach_to(self: &Arc<Self>, s: &Arc<SessionInner>) -> Result<()>;
    /// Undoes an attach that raced the application's resign/leave or the coordinator's close.
    fn detach_from(self: &Arc<Self>, s: &Arc<SessionInner>);
    fn registry(st: &mut Sessions) -> &mut state::Registry<Self>
    where
        Self: Sized;
    fn describe(&self) -> String;
}

impl Attach for ElectionShared {
    fn attach_to(self: &Arc<Self>, s: &Arc<SessionInner>) -> Result<()> {
        s.attach_campaign(self)
    }
    fn detach_from(self: &Arc<Self>, s: &Arc<SessionInner>) {
        s.detach_campaign(self);
    }
    fn registry(st: &mut Sessions) -> &mut state::Registry<Self> {
        &mut st.elections
    }
    fn describe(&self) -> String {
        format!("the campaign for '{}'", self.name())
    }
}

impl Attach for MembershipShared {
    fn attach_to(self: &Arc<Self>, s: &Arc<SessionInner>) -> Result<()> {
        s.attach_membership(self)
    }
    fn detach_from(self: &Arc<Self>, s: &Arc<SessionInner>) {
        s.detach_membership(self);
    }
    fn registry(st: &mut Sessions) -> &mut state::Registry<Self> {
        &mut st.memberships
    }
    fn describe(&self) -> String {
        format!("the membership of '{}'", self.group())
    }
}

struct CoordInner {
    /// The application's backend, `runtime::guarded` once for every session
    /// and call of the coordinator.
    backend: Arc<dyn LeaseBackend>,
    options: SessionOptions,
    /// The one lock: every decision about sessions and re-attaches is one call on it.
    state: Mutex<Sessions>,
    subscribers: Subscribers<CoordinatorEvent>,
    /// Wakes the supervisor (a re-attach handed over, or the coordinator closed).
    wake: Sender<()>,
    /// Dropped by the supervisor when it exits.
    exited: Receiver<()>,
    /// Replacements so far, and the last one's gap (loss noticed → new session ready).
    recoveries: Mutex<(u32, Option<Duration>)>,
    /// Test seam: runs once, on the supervisor, right before its next re-attach of an item — the
    /// instant an application's resign or leave racing the re-attach used to break it.
    #[cfg(test)]
    before_reattach: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl CoordInner {
    fn emit(&self, ev: CoordinatorEvent) {
        self.subscribers.emit(&ev);
    }

    /// Entries in the subscriber list, dead ones included (for leak tests).
    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.subscribers.len()
    }

    fn current(&self) -> Result<Arc<SessionInner>> {
        self.state.lock().session().map(|(s, _)| s).map_err(no_session)
    }

    /// Attaches `item` to the session of `generation` and performs the verdict. `Ok` when the
    /// item is attached or handed to the supervisor.
    fn attach<T: Attach>(&self, item: &Arc<T>, s: &Arc<SessionInner>, generation: u64, retry: bool) -> Result<()> {
        let r = item.attach_to(s);
        let outcome = match &r {
            Ok(()) => Outcome::Attached,
            Err(e) if s.state() != crate::SessionState::Active => {
                log::debug!("coordinator: {} missed session {}: {e}", item.describe(), s.id);
                Outcome::SessionGone
            }
            Err(_) => Outcome::Failed,
        };
        let verdict = {
            let mut st = self.state.lock();
            let (current, closed) = (st.current_generation(), st.is_closed());
            T::registry(&mut st).end(item, generation, current, closed, outcome, retry)
        };
        match verdict {
            Verdict::Done => Ok(()),
            Verdict::Retry => {
                if let Err(e) = &r {
                    log::warn!("coordinator: {} failed on session {}, retrying: {e}", item.describe(), s.id);
                }
                // The application's attach hands over at once; the supervisor's own retries wait
                // for its next pass (a backend that keeps failing is not hammered).
                if !retry {
                    let _ = self.wake.send(());
                }
                Ok(())
            }
            Verdict::Detach => {
                sync::fixed_only(sync::Bug::ReattachKept, || item.detach_from(s)); // old (finding 5): kept
                if self.state.lock().is_closed() {
                    Err(closed_error())
                } else {
                    Ok(())
                }
            }
            Verdict::Dropped => match r {
                Err(e) => Err(e),
                Ok(()) => Err(closed_error()),
            },
        }
    }

    /// The application's own durable attach (campaign, join).
    fn attach_new<T: Attach>(&self, item: &Arc<T>) -> Result<()> {
        let (s, generation) = {
            let mut st = self.state.lock();
            let (s, g) = st.session().map_err(no_session)?;
            T::registry(&mut st).begin(item, g);
            (s, g)
        };
        self.attach(item, &s, generation, false)
    }

    /// Re-attaches a plan to the session of `generation` (on the supervisor).
    fn reattach<T: Attach>(&self, plan: Vec<Arc<T>>, s: &Arc<SessionInner>, generation: u64) {
        for item in plan {
            #[cfg(test)]
            if let Some(hook) = self.before_reattach.lock().take() {
                hook();
            }
            if let Err(e) = self.attach(&item, s, generation, true) {
                log::debug!("coordinator: {} not re-attached: {e}", item.describe());
            }
        }
    }
}

fn no_session(why: NoSession) -> Error {
    match why {
        NoSession::Closed => closed_error(),
        NoSession::Replacing => {
            Error::new(ErrorKind::Unavailable, "the coordinator's session expired and is being replaced")
        }
    }
}

fn closed_error() -> Error {
    Error::new(ErrorKind::Closed, "the coordinator is closed")
}

/// Owns a backend, session options and a self-healing current session. See the module docs.
///
/// Dropping the coordinator closes its session in the background (and a replacement being
/// opened, as soon as it is); [`close`](Coordinator::close) waits for both.
pub struct Coordinator {
    inner: Arc<CoordInner>,
}

impl fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinator")
            .field("backend", &self.inner.backend.kind())
            .field("session", &self.session_id())
            .finish()
    }
}

impl Coordinator {
    /// Opens the first session and starts the supervisor thread.
    ///
    /// # Errors
    /// As [`Session::open`](crate::Session::open).
    pub fn start(backend: Arc<dyn LeaseBackend>, options: SessionOptions) -> Result<Coordinator> {
        let backend = crate::runtime::guarded(backend);
        let first = SessionInner::open(backend.clone(), options.clone())?;
        let events = first.subscribe();
        let first_id = first.id.clone();
        let first_id_for_thread = first_id.clone();
        let (wake_tx, wake_rx) = unbounded::<()>();
        let (exited_tx, exited_rx) = sync::bounded::<()>(0);
        let inner = Arc::new(CoordInner {
            backend,
            options,
            state: Mutex::new(State::new(first.clone())),
            subscribers: Subscribers::new(),
            wake: wake_tx,
            exited: exited_rx,
            recoveries: Mutex::new((0, None)),
            #[cfg(test)]
            before_reattach: Mutex::new(None),
        });
        let weak = Arc::downgrade(&inner);
        let spawned = thread::Builder::new().name("simba-coordinator".into()).spawn(move || {
            supervise(weak, (first_id_for_thread, events), wake_rx);
            drop(exited_tx);
        });
        if let Err(e) = spawned {
            let _ = first.close_and_wait();
            return Err(Error::new(ErrorKind::Unavailable, "cannot start the coordinator thread").with_source(e));
        }
        log::info!("coordinator started with session {first_id}");
        Ok(Coordinator { inner })
    }

    /// Opens a separate plain session with the coordinator's backend and options (it ends with
    /// its own expiry; the coordinator does not replace it).
    ///
    /// # Errors
    /// As [`Session::open`](crate::Session::open).
    pub fn open_session(&self) -> Result<crate::Session> {
        crate::Session::open_guarded(self.inner.backend.clone(), self.inner.options.clone())
    }

    /// A new subscription to the coordinator's events (every event after this call, in order).
    /// Dropping it unsubscribes (see [`Events`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use simba::{Coordinator, MemoryBackend, SessionOptions};
    ///
    /// # fn main() -> simba::Result<()> {
    /// let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
    /// let coordinator = Coordinator::start(Arc::new(MemoryBackend::new()), options)?;
    /// let events = coordinator.events();
    /// assert!(events.try_recv().is_err()); // no session lost yet
    /// coordinator.close()
    /// # }
    /// ```
    pub fn events(&self) -> Events<CoordinatorEvent> {
        self.inner.subscribers.subscribe(None)
    }

    #[cfg(test)]
    pub(crate) fn subscriber_count(&self) -> usize {
        self.inner.subscriber_count()
    }

    /// A snapshot of the coordinator: its current session's [`SessionStatus`](crate::status::SessionStatus) (`None` while a
    /// replacement is being opened or after close), how many times the session was replaced and
    /// the last replacement's gap. No I/O.
    pub fn status(&self) -> CoordinatorStatus {
        let session = self.inner.current().ok().map(|s| crate::handles::session::status_of(&s));
        let (replacements, last_gap) = *self.inner.recoveries.lock();
        CoordinatorStatus { session, replacements, last_gap }
    }

    /// The current session's id (`None` while a replacement is being opened).
    pub fn session_id(&self) -> Option<SessionId> {
        self.inner.state.lock().current().map(|s| s.id.clone())
    }

    /// Campaigns for `name` durably: the election carries on across session expiry (with a new,
    /// larger token after a re-election). When the session expires during the call, the
    /// election goes to the replacement session like every other durable election.
    ///
    /// # Errors
    /// `InvalidName`; `Unavailable` while the session is being replaced; `AlreadyHeld`;
    /// `Closed` after [`close`](Coordinator::close).
    pub fn campaign(&self, name: impl IntoName) -> Result<Election> {
        let name = user_name(name)?;
        let shared = ElectionShared::new(name, self.inner.backend.clone(), self.inner.options.query_timeout(), true);
        self.inner.attach_new(&shared)?;
        Ok(Election::new(shared))
    }

    /// Joins `group` durably: the membership is re-created on every replacement session. When
    /// the session expires during the call, the membership goes to the replacement session.
    ///
    /// # Errors
    /// `InvalidName`; `Unavailable` while the session is being replaced; `AlreadyHeld`; the
    /// backend's error; `Closed` after [`close`](Coordinator::close).
    pub fn join(&self, group: impl IntoName) -> Result<Membership> {
        let group = user_name(group)?;
        let shared = MembershipShared::new(group, true);
        self.inner.attach_new(&shared)?;
        Ok(Membership::new(shared))
    }

    /// Takes a lease on the current session, waiting as long as it takes (leases end with
    /// their session; see [`Session::lock`](crate::Session::lock)).
    ///
    /// # Errors
    /// As [`Session::lock`](crate::Session::lock), plus `Unavailable` while the session is being
    /// replaced and `Closed` after [`close`](Coordinator::close).
    pub fn lock(&self, name: impl IntoName) -> Result<Lease> {
        let name = user_name(name)?;
        crate::handles::session::lock_on(&self.inner.current()?, &name).map_err(Error::on_replaced_session)
    }

    /// One attempt to take a lease on the current session: `Ok(None)` when another live
    /// session holds it.
    ///
    /// # Errors
    /// As [`Session::try_lock`](crate::Session::try_lock), plus those of [`lock`](Coordinator::lock).
    pub fn try_lock(&self, name: impl IntoName) -> Result<Option<Lease>> {
        let name = user_name(name)?;
        crate::handles::session::try_lock_on(&self.inner.current()?, &name).map_err(Error::on_replaced_session)
    }

    /// Takes a lease on the current session, giving up after `timeout` with `Ok(None)`
    /// (`Duration::MAX` waits forever).
    ///
    /// # Errors
    /// As [`lock`](Coordinator::lock).
    pub fn lock_timeout(&self, name: impl IntoName, timeout: Duration) -> Result<Option<Lease>> {
        let name = user_name(name)?;
        crate::handles::session::lock_timeout_on(&self.inner.current()?, &name, timeout)
            .map_err(Error::on_replaced_session)
    }

    /// Takes a lease on the current session, giving up at `deadline` with `Ok(None)`.
    ///
    /// # Errors
    /// As [`lock`](Coordinator::lock).
    pub fn lock_deadline(&self, name: impl IntoName, deadline: Instant) -> Result<Option<Lease>> {
        let name = user_name(name)?;
        crate::handles::session::lock_deadline_on(&self.inner.current()?, &name, Some(deadline))
            .map_err(Error::on_replaced_session)
    }

    /// The counted semaphore `name` with `permits` permits (see [`crate::semaphore`]). Each
    /// acquire takes its permit on the coordinator's current session; a permit ends with that
    /// session (it is not carried over to a replacement: acquire again), while the semaphore
    /// handle keeps working across replacements.
    ///
    /// # Errors
    /// As [`Session::semaphore`](crate::Session::semaphore). Its acquires fail with `Unavailable`
    /// while the session is being replaced and `Closed` after [`close`](Coordinator::close).
    pub fn semaphore(&self, name: impl IntoName, permits: u32) -> Result<Semaphore> {
        Semaphore::open(
            self.current_source(),
            self.inner.backend.clone(),
            self.inner.options.query_timeout(),
            name,
            permits,
        )
    }

    /// Joins the partition set `name` of `count` partitions as a member that lives across session
    /// replacements: when the session expires, its partitions are reported
    /// [`Lost`](crate::partitions::PartitionEvent::Lost), and the member joins again on the
    /// replacement session and is assigned partitions anew (see [`crate::partitions`]).
    ///
    /// # Errors
    /// As [`Session::partitions`](crate::Session::partitions), plus `Unavailable` while the
    /// session is being replaced and `Closed` after [`close`](Coordinator::close).
    pub fn partitions(&self, name: impl IntoName, count: u32) -> Result<Partitions> {
        self.partitions_with(name, count, PartitionOptions::default())
    }

    /// [`partitions`](Coordinator::partitions) with `options`.
    ///
    /// # Errors
    /// As [`partitions`](Coordinator::partitions), plus `InvalidConfig` for a maximum per member of 0.
    pub fn partitions_with(&self, name: impl IntoName, count: u32, options: PartitionOptions) -> Result<Partitions> {
        Partitions::open(
            self.current_source(),
            &self.inner.backend,
            self.inner.options.query_timeout(),
            name,
            count,
            options,
        )
    }

    /// The semaphore `name` with its stored limit, or `None` when it was never used (see
    /// [`Session::existing_semaphore`](crate::Session::existing_semaphore)).
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn existing_semaphore(&self, name: impl IntoName) -> Result<Option<Semaphore>> {
        Semaphore::existing(self.current_source(), self.inner.backend.clone(), self.inner.options.query_timeout(), name)
    }

    /// The coordinator's current session, for handles that outlive one session.
    fn current_source(&self) -> Source {
        let weak = Arc::downgrade(&self.inner);
        Source::Current(Arc::new(move || weak.upgrade().ok_or_else(closed_error)?.current()))
    }

    /// The current leader of `name`.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn leader(&self, name: impl IntoName) -> Result<Option<Holder>> {
        let name = user_name(name)?;
        bounded_call(&self.inner.backend, self.inner.options.query_timeout(), move |b| b.holder(&name))
    }

    /// Live members of `group`.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn members(&self, group: impl IntoName) -> Result<Vec<Member>> {
        let group = user_name(group)?;
        bounded_call(&self.inner.backend, self.inner.options.query_timeout(), move |b| b.members(&group))
    }

    /// A stream of membership changes of `group` that outlives session replacements.
    ///
    /// # Errors
    /// `InvalidName`.
    pub fn watch_members(&self, group: impl IntoName) -> Result<MemberWatch> {
        let group = user_name(group)?;
        // The break the simulation must see: the watch stops with the session of the moment.
        let of_the_session = || self.inner.current().ok().map(|s| s.ended_rx.clone());
        let ended = sync::pick_with(sync::Bug::CoordinatorWatchEndsWithSession, of_the_session, || None);
        Ok(group::watch(self.inner.backend.clone(), group, self.inner.options.clone(), ended))
    }

    /// Stops the supervisor and closes the current session. A replacement session being
    /// opened meanwhile is closed as soon as its open returns, and `close` waits for that too:
    /// up to the query timeout for the close, plus up to twice the query timeout for a
    /// replacement in flight.
    ///
    /// # Errors
    /// As [`Session::close`](crate::Session::close); `Timeout` when the supervisor did not
    /// finish a replacement in time (it closes the session it opens anyway).
    pub fn close(self) -> Result<()> {
        let current = self.inner.state.lock().close();
        let _ = self.inner.wake.send(());
        let r = match current {
            Some(s) => s.close_and_wait(),
            None => Ok(()),
        };
        let wait = self.inner.options.query_timeout().saturating_mul(2);
        match self.inner.exited.recv_timeout(wait) {
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => r.and(Err(Error::new(
                ErrorKind::Timeout,
                format!("the coordinator's supervisor did not finish a session replacement within {wait:?}"),
            ))),
            _ => r,
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        let current = self.inner.state.lock().close();
        let _ = self.inner.wake.send(());
        if let Some(s) = current {
            s.close_in_background();
        }
    }
}

fn supervise(weak: Weak<CoordInner>, first: (SessionId, Events<SessionEvent>), wake: Receiver<()>) {
    let never = sync::never();
    // `events` is `None` while there is no current session (a replacement is being opened);
    // `watched` is the session they come from.
    let (first_id, first_rx) = first;
    let mut watched = Some(first_id);
    let mut events = Some(first_rx);
    let mut lost: Option<(SessionId, Instant)> = None;
    loop {
        let Some(coord) = weak.upgrade() else { return };
        if coord.state.lock().is_closed() {
            return;
        }
        if events.is_none() {
            match SessionInner::open(coord.backend.clone(), coord.options.clone()) {
                Ok(new) => {
                    let rx = new.subscribe();
                    let installed = coord.state.lock().install(new.clone());
                    let Ok((generation, elections, memberships)) = installed else {
                        // Closed while opening: the session must not outlive the coordinator.
                        log::debug!("coordinator: closed while opening session {}; closing it", new.id);
                        let _ = new.close_and_wait();
                        return;
                    };
                    events = Some(rx);
                    watched = Some(new.id.clone());
                    coord.emit(CoordinatorEvent::SessionOpened { session: new.id.clone() });
                    coord.reattach(elections, &new, generation);
                    coord.reattach(memberships, &new, generation);
                    if let Some((old, at)) = lost.take() {
                        log::info!("coordinator: session {old} replaced by {}", new.id);
                        let gap = sync::now().saturating_duration_since(at);
                        {
                            let mut r = coord.recoveries.lock();
                            *r = (r.0 + 1, Some(gap));
                        }
                        crate::observe::replaced(coord.backend.kind());
                        coord.emit(CoordinatorEvent::Recovered { old, new: new.id.clone(), gap });
                    }
                }
                Err(e) => coord.emit(CoordinatorEvent::OpenFailed { error: crate::error::display_chain(&e) }),
            }
        } else {
            // Hand-overs and retries, and items the application ended after their re-attach.
            let due = {
                let mut st = coord.state.lock();
                st.session().ok().map(|(s, g)| {
                    let plan = (st.elections.plan(g, true), st.memberships.plan(g, true));
                    let ended = (st.elections.ended_on(g), st.memberships.ended_on(g));
                    (s, g, plan, ended)
                })
            };
            if let Some((s, g, (elections, memberships), (ended_e, ended_m))) = due {
                coord.reattach(elections, &s, g);
                coord.reattach(memberships, &s, g);
                sync::fixed_only(sync::Bug::ReattachKept, || ended_e.iter().for_each(|e| e.detach_from(&s)));
                ended_m.iter().for_each(|m| m.detach_from(&s));
            }
        }
        let wait = coord.options.retry_interval() + jitter(coord.options.renew_interval() / 4);
        drop(coord);
        let rx = events.as_deref().unwrap_or(&never);
        select! {
            recv(rx) -> ev => match ev {
                Ok(SessionEvent::Expired) => {
                    let Some(coord) = weak.upgrade() else { return };
                    // The events are those of the current session (installed with them) unless
                    // close() took it already.
                    let id = watched.take();
                    let old = coord.state.lock().lost(|s| Some(&s.id) == id.as_ref());
                    if let Some(old) = old {
                        log::warn!("coordinator: session {} expired; opening a replacement", old.id);
                        coord.emit(CoordinatorEvent::SessionLost { session: old.id.clone() });
                        lost = Some((old.id.clone(), sync::now()));
                    }
                    events = None;
                }
                Ok(SessionEvent::Closed) | Err(_) => {
                    // Closed by `close()`/drop (or every sender gone): nothing left to supervise.
                    return;
                }
                Ok(SessionEvent::MembershipLost { group }) => {
                    forward(&weak, |session| CoordinatorEvent::MembershipLost { session, group });
                }
                Ok(SessionEvent::MembershipRestored { group }) => {
                    forward(&weak, |session| CoordinatorEvent::MembershipRestored { session, group });
                }
                Ok(_) => {}
            },
            recv(wake) -> m => if m.is_err() { return },
            default(wait) => {}
        }
    }
}

/// Emits an event about the current session (none while it is being replaced).
fn forward(weak: &Weak<CoordInner>, make: impl FnOnce(SessionId) -> CoordinatorEvent) {
    let Some(coord) = weak.upgrade() else { return };
    let session = coord.state.lock().current().map(|s| s.id.clone());
    if let Some(session) = session {
        coord.emit(make(session));
    }
}
