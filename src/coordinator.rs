//! A coordinator: one backend and options, a self-healing current session, and elections and
//! memberships that carry on across session expiry.
//!
//! A session that expired stays dead. The coordinator notices (through the session's events),
//! opens a new session (retrying with backoff while the backend is unreachable), re-attaches every
//! durable election and membership to it, and reports the gap through [`CoordinatorEvent`]s and
//! each election's `SessionReplaced` event. A re-elected node gets a new, larger token.

use std::fmt;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use parking_lot::Mutex;

use crate::backend::{LeaseBackend, Member};
use crate::election::{Election, ElectionShared, Leader};
use crate::error::{Error, ErrorKind, Result};
use crate::group::{self, MemberWatch, Membership, MembershipShared};
use crate::lease::Lease;
use crate::options::SessionOptions;
use crate::session::{bounded_call, jitter, SessionEvent, SessionInner};
use crate::types::{IntoName, Name, SessionId};

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

struct CoordInner {
    backend: Arc<dyn LeaseBackend>,
    options: SessionOptions,
    current: Mutex<Option<Arc<SessionInner>>>,
    elections: Mutex<Vec<Weak<ElectionShared>>>,
    memberships: Mutex<Vec<Weak<MembershipShared>>>,
    subscribers: Mutex<Vec<Sender<CoordinatorEvent>>>,
    stop_tx: Mutex<Option<Sender<()>>>,
}

impl CoordInner {
    fn emit(&self, ev: CoordinatorEvent) {
        self.subscribers.lock().retain(|tx| tx.send(ev.clone()).is_ok());
    }

    fn current(&self) -> Result<Arc<SessionInner>> {
        self.current.lock().clone().ok_or_else(|| {
            Error::new(ErrorKind::Unavailable, "the coordinator's session expired and is being replaced")
        })
    }

    fn live_elections(&self) -> Vec<Arc<ElectionShared>> {
        let mut list = self.elections.lock();
        list.retain(|w| w.upgrade().is_some_and(|e| !e.is_resigned()));
        list.iter().filter_map(Weak::upgrade).collect()
    }

    fn live_memberships(&self) -> Vec<Arc<MembershipShared>> {
        let mut list = self.memberships.lock();
        list.retain(|w| w.upgrade().is_some_and(|m| !m.is_left()));
        list.iter().filter_map(Weak::upgrade).filter(|m| m.is_durable()).collect()
    }
}

/// Owns a backend, session options and a self-healing current session. See the module docs.
///
/// Dropping the coordinator closes its session in the background; [`close`](Coordinator::close)
/// waits for it.
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
        let first = SessionInner::open(backend.clone(), options.clone())?;
        let events = first.subscribe();
        let first_id = first.id.clone();
        let (stop_tx, stop_rx) = crossbeam_channel::bounded::<()>(0);
        let inner = Arc::new(CoordInner {
            backend,
            options,
            current: Mutex::new(Some(first)),
            elections: Mutex::new(Vec::new()),
            memberships: Mutex::new(Vec::new()),
            subscribers: Mutex::new(Vec::new()),
            stop_tx: Mutex::new(Some(stop_tx)),
        });
        let weak = Arc::downgrade(&inner);
        thread::Builder::new()
            .name("simba-coordinator".into())
            .spawn(move || supervise(weak, events, stop_rx))
            .map_err(|e| Error::new(ErrorKind::Unavailable, "cannot start the coordinator thread").with_source(e))?;
        log::info!("coordinator started with session {first_id}");
        Ok(Coordinator { inner })
    }

    /// Opens a separate plain session with the coordinator's backend and options (it ends with
    /// its own expiry; the coordinator does not replace it).
    ///
    /// # Errors
    /// As [`Session::open`](crate::Session::open).
    pub fn open_session(&self) -> Result<crate::Session> {
        crate::Session::open(self.inner.backend.clone(), self.inner.options.clone())
    }

    /// A new receiver of the coordinator's events.
    pub fn events(&self) -> Receiver<CoordinatorEvent> {
        let (tx, rx) = unbounded();
        self.inner.subscribers.lock().push(tx);
        rx
    }

    /// The current session's id (`None` while a replacement is being opened).
    pub fn session_id(&self) -> Option<SessionId> {
        self.inner.current.lock().as_ref().map(|s| s.id.clone())
    }

    /// Campaigns for `name` durably: the election carries on across session expiry (with a new,
    /// larger token after a re-election).
    ///
    /// # Errors
    /// `InvalidName`; `Unavailable` while the session is being replaced; `AlreadyHeld`.
    pub fn campaign(&self, name: impl IntoName) -> Result<Election> {
        let name = name.into_name()?;
        let session = self.inner.current()?;
        let shared = ElectionShared::new(name, self.inner.backend.clone(), self.inner.options.query_timeout(), true);
        session.attach_campaign(&shared)?;
        self.inner.elections.lock().push(Arc::downgrade(&shared));
        Ok(Election::new(shared))
    }

    /// Joins `group` durably: the membership is re-created on every replacement session.
    ///
    /// # Errors
    /// `InvalidName`; `Unavailable` while the session is being replaced; `AlreadyHeld`; the
    /// backend's error.
    pub fn join(&self, group: impl IntoName) -> Result<Membership> {
        let group = group.into_name()?;
        let session = self.inner.current()?;
        let shared = MembershipShared::new(group, true);
        session.attach_membership(&shared)?;
        self.inner.memberships.lock().push(Arc::downgrade(&shared));
        Ok(Membership::new(shared))
    }

    /// Takes a lease on the current session (leases end with their session; see
    /// [`Session::lock`](crate::Session::lock)).
    ///
    /// # Errors
    /// As [`Session::lock`](crate::Session::lock), plus `Unavailable` while the session is being replaced.
    pub fn lock(&self, name: impl IntoName) -> Result<Lease> {
        let name = name.into_name()?;
        let s = self.inner.current()?;
        s.lock_until(&name, None)?.ok_or_else(|| Error::new(ErrorKind::Timeout, format!("lock '{name}' gave up")))
    }

    /// One attempt to take a lease on the current session.
    ///
    /// # Errors
    /// As [`Session::try_lock`](crate::Session::try_lock).
    pub fn try_lock(&self, name: impl IntoName) -> Result<Option<Lease>> {
        let name = name.into_name()?;
        let s = self.inner.current()?;
        let deadline = Instant::now() + self.inner.options.query_timeout();
        s.attempt_lock(&name, deadline)
    }

    /// Takes a lease on the current session, giving up after `timeout`.
    ///
    /// # Errors
    /// As [`Session::lock_timeout`](crate::Session::lock_timeout).
    pub fn lock_timeout(&self, name: impl IntoName, timeout: Duration) -> Result<Option<Lease>> {
        let name = name.into_name()?;
        let s = self.inner.current()?;
        s.lock_until(&name, Some(Instant::now() + timeout))
    }

    /// The current leader of `name`.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn leader(&self, name: impl IntoName) -> Result<Option<Leader>> {
        let name = name.into_name()?;
        bounded_call(&self.inner.backend, self.inner.options.query_timeout(), move |b| b.holder(&name))
    }

    /// Live members of `group`.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn members(&self, group: impl IntoName) -> Result<Vec<Member>> {
        let group = group.into_name()?;
        bounded_call(&self.inner.backend, self.inner.options.query_timeout(), move |b| b.members(&group))
    }

    /// A stream of membership changes of `group` that outlives session replacements.
    ///
    /// # Errors
    /// `InvalidName`.
    pub fn watch_members(&self, group: impl IntoName) -> Result<MemberWatch> {
        let group = group.into_name()?;
        Ok(group::watch(self.inner.backend.clone(), group, self.inner.options.clone(), None))
    }

    /// Stops the supervisor and closes the current session (waiting up to the query timeout).
    ///
    /// # Errors
    /// As [`Session::close`](crate::Session::close).
    pub fn close(self) -> Result<()> {
        self.inner.stop_tx.lock().take();
        let current = self.inner.current.lock().take();
        match current {
            Some(s) => s.close_and_wait(),
            None => Ok(()),
        }
    }
}

impl Drop for Coordinator {
    fn drop(&mut self) {
        self.inner.stop_tx.lock().take();
        if let Some(s) = self.inner.current.lock().take() {
            s.close_in_background();
        }
    }
}

fn supervise(weak: Weak<CoordInner>, first: Receiver<SessionEvent>, stop: Receiver<()>) {
    let never = crossbeam_channel::never();
    // `events` is `None` while there is no current session (a replacement is being opened).
    let mut events = Some(first);
    let mut lost: Option<(SessionId, Instant)> = None;
    let mut pending_joins: Vec<Arc<MembershipShared>> = Vec::new();
    loop {
        let Some(coord) = weak.upgrade() else { return };
        if events.is_none() {
            match SessionInner::open(coord.backend.clone(), coord.options.clone()) {
                Ok(new) => {
                    events = Some(new.subscribe());
                    *coord.current.lock() = Some(new.clone());
                    coord.emit(CoordinatorEvent::SessionOpened { session: new.id.clone() });
                    for e in coord.live_elections() {
                        if let Err(err) = new.attach_campaign(&e) {
                            log::warn!("coordinator: cannot re-campaign for '{}': {err}", e.name());
                        }
                    }
                    pending_joins = coord.live_memberships();
                    pending_joins.retain(|m| match new.attach_membership(m) {
                        Ok(()) => false,
                        Err(err) => {
                            log::warn!("coordinator: cannot re-join '{}', will retry: {err}", m.group());
                            true
                        }
                    });
                    if let Some((old, at)) = lost.take() {
                        log::info!("coordinator: session {old} replaced by {}", new.id);
                        coord.emit(CoordinatorEvent::Recovered { old, new: new.id.clone(), gap: at.elapsed() });
                    }
                }
                Err(e) => coord.emit(CoordinatorEvent::OpenFailed { error: crate::error::display_chain(&e) }),
            }
        } else if !pending_joins.is_empty() {
            if let Ok(s) = coord.current() {
                pending_joins.retain(|m| !m.is_left() && s.attach_membership(m).is_err());
            }
        }
        let wait = coord.options.retry_interval() + jitter(coord.options.renew_interval() / 4);
        drop(coord);
        let rx = events.as_ref().unwrap_or(&never);
        select! {
            recv(rx) -> ev => match ev {
                Ok(SessionEvent::Expired) => {
                    let Some(coord) = weak.upgrade() else { return };
                    let old = coord.current.lock().take();
                    if let Some(old) = old {
                        log::warn!("coordinator: session {} expired; opening a replacement", old.id);
                        coord.emit(CoordinatorEvent::SessionLost { session: old.id.clone() });
                        lost = Some((old.id.clone(), Instant::now()));
                    }
                    events = None;
                }
                Ok(SessionEvent::Closed) | Err(_) => return,
                Ok(SessionEvent::MembershipLost { group }) => {
                    forward(&weak, |session| CoordinatorEvent::MembershipLost { session, group });
                }
                Ok(SessionEvent::MembershipRestored { group }) => {
                    forward(&weak, |session| CoordinatorEvent::MembershipRestored { session, group });
                }
                Ok(_) => {}
            },
            recv(stop) -> _ => return,
            default(wait) => {}
        }
    }
}

/// Emits an event about the current session (none while it is being replaced).
fn forward(weak: &Weak<CoordInner>, make: impl FnOnce(SessionId) -> CoordinatorEvent) {
    let Some(coord) = weak.upgrade() else { return };
    let session = coord.current.lock().as_ref().map(|s| s.id.clone());
    if let Some(session) = session {
        coord.emit(make(session));
    }
}
