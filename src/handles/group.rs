//! Group membership: join/leave handles and member-change streams.

use std::fmt;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crossbeam_channel::{RecvError, RecvTimeoutError, TryRecvError};

use crate::sync::{self, select, thread, unbounded, Mutex, Receiver, Sender};

use crate::backend::{LeaseBackend, Member, Notification, Topic};
use crate::error::Result;
use crate::options::SessionOptions;
use crate::runtime::{bounded_call, jitter, MembershipSink, SessionInner};
use crate::types::{Name, SessionId};

#[derive(Debug)]
struct MembershipState {
    session: Weak<SessionInner>,
    session_id: Option<SessionId>,
    active: bool,
    left: bool,
}

pub(crate) struct MembershipShared {
    group: Name,
    durable: bool,
    st: Mutex<MembershipState>,
}

impl fmt::Debug for MembershipShared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.st.lock();
        f.debug_struct("Membership")
            .field("group", &self.group)
            .field("session", &st.session_id)
            .field("active", &st.active)
            .finish()
    }
}

impl MembershipShared {
    pub(crate) fn new(group: Name, durable: bool) -> Arc<MembershipShared> {
        Arc::new(MembershipShared {
            group,
            durable,
            st: Mutex::new(MembershipState { session: Weak::new(), session_id: None, active: false, left: false }),
        })
    }

    pub(crate) fn is_left(&self) -> bool {
        self.st.lock().left
    }

    pub(crate) fn is_durable(&self) -> bool {
        self.durable
    }

    fn leave(&self, wait: bool) -> Result<()> {
        let session = {
            let mut st = self.st.lock();
            st.left = true;
            st.active = false;
            st.session.upgrade()
        };
        match session {
            Some(s) => s.leave(&self.group, wait),
            None => Ok(()),
        }
    }
}

impl MembershipSink for MembershipShared {
    fn group(&self) -> &Name {
        &self.group
    }

    fn attach(&self, session: Weak<SessionInner>, id: SessionId) {
        let mut st = self.st.lock();
        st.session = session;
        st.session_id = Some(id);
        st.active = true;
    }

    fn session_ended(&self, id: &SessionId) {
        let mut st = self.st.lock();
        if st.session_id.as_ref() == Some(id) {
            st.active = false;
        }
    }
}

/// Membership of a group, valid while its session lives. Dropping it leaves the group (in the
/// background; nothing after the session's close, which left it); [`leave`](Membership::leave)
/// waits for the backend.
pub struct Membership {
    shared: Arc<MembershipShared>,
    left: bool,
}

impl fmt::Debug for Membership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.shared.fmt(f)
    }
}

impl Membership {
    pub(crate) fn new(shared: Arc<MembershipShared>) -> Membership {
        Membership { shared, left: false }
    }

    /// The group name.
    pub fn group(&self) -> &Name {
        &self.shared.group
    }

    /// The member session (changes after a recovery on a `Coordinator`).
    pub fn session_id(&self) -> Option<SessionId> {
        self.shared.st.lock().session_id.clone()
    }

    /// True while the membership's session is alive, it has not left, and the backend has not
    /// lost it (after a loss, reported by [`SessionEvent::MembershipLost`](crate::SessionEvent),
    /// it is false until the session re-joined).
    pub fn is_member(&self) -> bool {
        // Never hold the membership lock while taking the engine lock (the engine ends
        // memberships while holding its own lock).
        let session = {
            let st = self.shared.st.lock();
            if !st.active || st.left {
                return false;
            }
            st.session.upgrade()
        };
        session.is_some_and(|s| s.is_joined(&self.shared.group))
    }

    /// Leaves the group, waiting up to the query timeout. Once the session is closed or expired
    /// this makes no call and returns `Ok`: the session's close left the group.
    ///
    /// # Errors
    /// `Timeout` or the backend's error; the membership ends anyway when the session does.
    pub fn leave(mut self) -> Result<()> {
        self.left = true;
        self.shared.leave(true)
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if !self.left {
            let _ = self.shared.leave(false);
        }
    }
}

/// A change of a group's membership.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupChange {
    /// The live members after the change, sorted by session id.
    pub members: Vec<Member>,
    /// Members that appeared (on the first message: everyone).
    pub joined: Vec<Member>,
    /// Members that disappeared (left, closed or expired).
    pub left: Vec<Member>,
}

/// A stream of [`GroupChange`]s; the watcher thread stops when this is dropped.
pub struct MemberWatch {
    rx: Receiver<GroupChange>,
    _stop: Sender<()>,
}

impl fmt::Debug for MemberWatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemberWatch").field("queued", &self.rx.len()).finish()
    }
}

impl MemberWatch {
    /// Waits for the next change.
    ///
    /// # Errors
    /// `RecvError` when the watcher stopped (its session ended).
    pub fn recv(&self) -> std::result::Result<GroupChange, RecvError> {
        self.rx.recv()
    }

    /// Waits for the next change up to `timeout`.
    ///
    /// # Errors
    /// `Timeout` or `Disconnected` (the watcher stopped).
    pub fn recv_timeout(&self, timeout: Duration) -> std::result::Result<GroupChange, RecvTimeoutError> {
        self.rx.recv_timeout(timeout)
    }

    /// Waits for the next change until `deadline`.
    ///
    /// # Errors
    /// `Timeout` or `Disconnected` (the watcher stopped).
    pub fn recv_deadline(&self, deadline: Instant) -> std::result::Result<GroupChange, RecvTimeoutError> {
        self.rx.recv_deadline(deadline)
    }

    /// The next change if one is queued.
    ///
    /// # Errors
    /// `Empty` or `Disconnected`.
    pub fn try_recv(&self) -> std::result::Result<GroupChange, TryRecvError> {
        self.rx.try_recv()
    }

    /// The underlying receiver, e.g. for [`select!`](crate::channel::select) over several streams
    /// (a [`simba::channel::Receiver`](crate::channel::Receiver)).
    pub fn receiver(&self) -> &Receiver<GroupChange> {
        &self.rx
    }
}

fn diff(prev: &[Member], now: &[Member]) -> (Vec<Member>, Vec<Member>) {
    let joined = now.iter().filter(|m| !prev.iter().any(|p| p.session == m.session)).cloned().collect();
    let left = prev.iter().filter(|p| !now.iter().any(|m| m.session == p.session)).cloned().collect();
    (joined, left)
}

/// Starts a watcher thread for `group`.
pub(crate) fn watch(
    backend: Arc<dyn LeaseBackend>,
    group: Name,
    options: SessionOptions,
    ended: Option<Receiver<()>>,
) -> MemberWatch {
    let (tx, rx) = unbounded();
    let (stop_tx, stop_rx) = sync::bounded::<()>(0);
    let spawned = thread::Builder::new().name("simba-members".into()).spawn(move || {
        let (ntx, nrx) = crossbeam_channel::unbounded::<Notification>();
        let push = backend.capabilities().push_membership;
        let never = sync::never();
        let ended = ended.unwrap_or_else(|| never.clone());
        let mut prev: Option<Vec<Member>> = None;
        loop {
            if push {
                let topic = Topic::Group(group.clone());
                let t = ntx.clone();
                let _ = bounded_call(&backend, options.query_timeout(), move |b| b.watch(&topic, &t));
            }
            let g = group.clone();
            match bounded_call(&backend, options.query_timeout(), move |b| b.members(&g)) {
                Ok(members) => {
                    if prev.as_ref() != Some(&members) {
                        let (joined, left) = diff(prev.as_deref().unwrap_or(&[]), &members);
                        if tx.send(GroupChange { members: members.clone(), joined, left }).is_err() {
                            return;
                        }
                        prev = Some(members);
                    }
                }
                Err(e) => log::debug!("members of '{group}': {e}"),
            }
            let wait = options.retry_interval() + jitter(options.renew_interval() / 4);
            select! {
                recv(nrx) -> _ => { while nrx.try_recv().is_ok() {} },
                recv(stop_rx) -> _ => return,
                recv(ended) -> _ => return,
                default(wait) => {}
            }
        }
    });
    if let Err(e) = spawned {
        log::error!("cannot start the member watcher thread: {e}");
    }
    MemberWatch { rx, _stop: stop_tx }
}
