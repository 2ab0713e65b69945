//! The session handle users hold; its state and threads live in the crate-private `runtime` module.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Holder, LeaseBackend, Member};
use crate::cancel::{Attempt, Cancel};
use crate::engine::{deadline_after, later};
use crate::error::{Error, ErrorKind, Result};
use crate::events::Events;
use crate::handles::election::{Election, ElectionShared};
use crate::handles::group::{self, MemberWatch, Membership, MembershipShared};
use crate::handles::lease::Lease;
use crate::handles::partitions::{PartitionOptions, Partitions};
use crate::handles::semaphore::{Semaphore, Source};
use crate::options::SessionOptions;
use crate::runtime::SessionInner;
use crate::state::{SessionEvent, SessionState};
use crate::status::{LeaseKind, SessionStatus};
use crate::sync;
use crate::types::{user_name, IntoName, Name, SessionId};

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
        Session::open_guarded(crate::runtime::guarded(backend), options)
    }

    /// [`open`](Session::open) on a backend already wrapped in `runtime::guarded`.
    pub(crate) fn open_guarded(backend: Arc<dyn LeaseBackend>, options: SessionOptions) -> Result<Session> {
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
        self.inner.is_alive()
    }

    /// Time left until the local deadline, if alive.
    pub fn remaining(&self) -> Option<Duration> {
        self.inner.remaining()
    }

    /// A snapshot of the session for operators and health checks: its state, the margin left
    /// before its local deadline, its last renewal, consecutive failures and the last error,
    /// every lease, permit and partition it holds with its token and time left, its campaigns,
    /// memberships and blocking waits (see [`crate::status`]). No I/O: cheap enough for every
    /// health check, and it answers while the backend hangs (the margin shrinking, the failures
    /// counting up). [`SessionStatus::is_healthy`] is the readiness answer.
    pub fn status(&self) -> SessionStatus {
        status_of(&self.inner)
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
    /// otherwise retries every [`poll_interval`](SessionOptions::poll_interval) plus jitter). Transient backend failures are
    /// retried; each attempt is bounded by the query timeout.
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed` when the session ends while waiting;
    /// `AlreadyHeld` when this session already holds or campaigns for `name` (or another thread's
    /// lock of it won the same term); `Backend` for non-transient failures.
    pub fn lock(&self, name: impl IntoName) -> Result<Lease> {
        let name = user_name(name)?;
        lock_on(&self.inner, &name)
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
        let name = user_name(name)?;
        try_lock_on(&self.inner, &name)
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
        let name = user_name(name)?;
        lock_timeout_on(&self.inner, &name, timeout)
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
        let name = user_name(name)?;
        lock_deadline_on(&self.inner, &name, Some(deadline))
    }

    /// Like [`lock_deadline`](Session::lock_deadline) (`deadline` `None`: no deadline), ending
    /// early when `cancel` is cancelled, and telling `on_attempt` of every attempt that did not
    /// take the lease ([`Attempt::Busy`], [`Attempt::Failed`] with a transient error the wait goes
    /// on after) — on this thread, right after the attempt and before the wait registers for the
    /// release and waits, so that a caller can show who holds the lease or why attempts fail
    /// (`simba lock` does). The wait is [`lock`](Session::lock)'s: it registers for the release
    /// where the backend says ([`Capabilities`](crate::backend::Capabilities)) and wakes on a pushed
    /// release, the session's end, the cancel or the retry delay. A cancel is noticed between
    /// attempts and after each backend call, so the call returns within one bounded call (the
    /// query timeout) of it; an attempt that takes the lease returns it even when the token was
    /// cancelled meanwhile.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::{Duration, Instant};
    /// use simba::{Attempt, Cancel, MemoryBackend, Session, SessionOptions};
    ///
    /// # fn main() -> simba::Result<()> {
    /// let backend = Arc::new(MemoryBackend::new());
    /// let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
    /// let (a, b) = (Session::open(backend.clone(), options.clone())?, Session::open(backend, options)?);
    /// let held = a.lock("report")?;
    /// let cancel = Cancel::new(); // cancel() it from a signal handler's thread, a UI…
    /// let mut busy = 0;
    /// let deadline = Instant::now() + Duration::from_millis(100);
    /// let got = b.lock_cancellable("report", Some(deadline), &cancel, |attempt| {
    ///     if let Attempt::Busy = attempt {
    ///         busy += 1; // e.g. show b.leader("report")
    ///     }
    /// })?;
    /// assert!(got.is_none() && busy >= 1);
    /// # drop(held);
    /// # Ok(())
    /// # }
    /// ```
    ///
    /// # Errors
    /// [`ErrorKind::Cancelled`] once `cancel` is cancelled (also when it was before the call: no
    /// attempt is made then); otherwise as [`lock`](Session::lock).
    pub fn lock_cancellable(
        &self,
        name: impl IntoName,
        deadline: Option<Instant>,
        cancel: &Cancel,
        mut on_attempt: impl FnMut(Attempt<'_>),
    ) -> Result<Option<Lease>> {
        let name = user_name(name)?;
        let won = self.inner.lock_waiting(&name, deadline, Some(cancel), &mut on_attempt);
        won.map(|t| Lease::of_term(&self.inner, &name, t))
    }

    /// The counted semaphore `name` with `permits` permits, whose permits this session takes (see
    /// [`crate::semaphore`]). Stores the limit on the backend when the semaphore is new; a stored
    /// limit that differs is an error (one bounded call).
    ///
    /// # Errors
    /// `InvalidName` (semaphore names are at most
    /// [`MAX_SEMAPHORE_NAME_LEN`](crate::semaphore::MAX_SEMAPHORE_NAME_LEN) characters);
    /// `InvalidConfig` when `permits` is 0 or above [`MAX_PERMITS`](crate::semaphore::MAX_PERMITS),
    /// or when the backend stores another limit for `name` (the message names both); `Timeout`;
    /// the backend's error.
    pub fn semaphore(&self, name: impl IntoName, permits: u32) -> Result<Semaphore> {
        let inner = &self.inner;
        Semaphore::open(
            Source::Session(inner.clone()),
            inner.backend.clone(),
            inner.timing.query_timeout,
            name,
            permits,
        )
    }

    /// The semaphore `name` with the limit stored on the backend, or `None` when it was never
    /// used (nothing is stored). For tools that show a semaphore without knowing its limit.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn existing_semaphore(&self, name: impl IntoName) -> Result<Option<Semaphore>> {
        let inner = &self.inner;
        Semaphore::existing(Source::Session(inner.clone()), inner.backend.clone(), inner.timing.query_timeout, name)
    }

    /// Joins the partition set `name` of `count` partitions with the default
    /// [`PartitionOptions`]: this session becomes one of the members the partitions are spread
    /// over (see [`crate::partitions`]). Stores the count on the backend when the set is new; a
    /// stored count that differs is an error (one bounded call).
    ///
    /// # Errors
    /// `InvalidName` (set names are at most
    /// [`MAX_PARTITION_SET_NAME_LEN`](crate::partitions::MAX_PARTITION_SET_NAME_LEN) characters);
    /// `InvalidConfig` when `count` is 0 or above [`MAX_PARTITIONS`](crate::partitions::MAX_PARTITIONS),
    /// or when the backend stores another count for `name` (the message names both);
    /// `SessionExpired`/`Closed`; `AlreadyHeld` when this session is a member of the set already;
    /// `Timeout`; the backend's error.
    pub fn partitions(&self, name: impl IntoName, count: u32) -> Result<Partitions> {
        self.partitions_with(name, count, PartitionOptions::default())
    }

    /// [`partitions`](Session::partitions) with `options` (drain and settle periods, a maximum per member).
    ///
    /// # Errors
    /// As [`partitions`](Session::partitions), plus `InvalidConfig` for a maximum per member of 0.
    pub fn partitions_with(&self, name: impl IntoName, count: u32, options: PartitionOptions) -> Result<Partitions> {
        let inner = &self.inner;
        Partitions::open(
            Source::Session(inner.clone()),
            &inner.backend,
            inner.timing.query_timeout,
            name,
            count,
            options,
        )
    }

    /// Starts contending for leadership of `name` in the background (on the renewal thread).
    ///
    /// An acquire of `name` still in flight on this session (a lock, or the last attempt of a
    /// campaign just resigned) is waited for, up to the query timeout: its outcome decides.
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed`; `AlreadyHeld` when this session already campaigns
    /// for or holds `name`; `Unavailable` when an acquire of `name` in flight has not returned
    /// within the query timeout.
    pub fn campaign(&self, name: impl IntoName) -> Result<Election> {
        let name = user_name(name)?;
        let shared = ElectionShared::new(name, self.inner.backend.clone(), self.inner.timing.query_timeout, false);
        self.inner.attach_campaign(&shared)?;
        Ok(Election::new(shared))
    }

    /// The current leader (holder) of `name`, seen from any node.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn leader(&self, name: impl IntoName) -> Result<Option<Holder>> {
        let name = user_name(name)?;
        self.inner.bounded(move |b| b.holder(&name))
    }

    /// Joins `group`; the membership lasts while the session lives. Dropping the handle leaves.
    ///
    /// # Errors
    /// `InvalidName`; `SessionExpired`/`Closed`; `AlreadyHeld` when already a member through
    /// another handle; `Timeout`; the backend's error.
    pub fn join(&self, group: impl IntoName) -> Result<Membership> {
        let group = user_name(group)?;
        let shared = MembershipShared::new(group, false);
        self.inner.attach_membership(&shared)?;
        Ok(Membership::new(shared))
    }

    /// Live members of `group`, sorted by session id, with their metadata.
    ///
    /// # Errors
    /// `InvalidName`; `Timeout`; the backend's error.
    pub fn members(&self, group: impl IntoName) -> Result<Vec<Member>> {
        let group = user_name(group)?;
        self.inner.bounded(move |b| b.members(&group))
    }

    /// A stream of membership changes of `group` (the first message lists the current members).
    /// Push backends deliver changes at once; others are polled every `renew_interval / 2`. The
    /// watcher stops when the receiver is dropped or the session ends.
    ///
    /// # Errors
    /// `InvalidName`.
    pub fn watch_members(&self, group: impl IntoName) -> Result<MemberWatch> {
        let group = user_name(group)?;
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

/// The status of `inner`, each held lease named as what it is (a lock, a permit, a partition).
pub(crate) fn status_of(inner: &Arc<SessionInner>) -> SessionStatus {
    let mut status = inner.status();
    for lease in &mut status.leases {
        lease.kind = kind_of(&lease.name);
    }
    status
}

/// What the lease `name` is, from its name.
fn kind_of(name: &Name) -> LeaseKind {
    if let Some((semaphore, slot)) = crate::handles::semaphore::slot_of(name) {
        return LeaseKind::Permit { semaphore, slot };
    }
    if let Some((set, index)) = crate::handles::partitions::partition_of(name) {
        return LeaseKind::Partition { set, index };
    }
    LeaseKind::Lease
}

// The lease calls' deadline arithmetic, one copy for `Session` and `Coordinator` (which adds only
// what a session replacement changes: `Error::on_replaced_session`).

/// [`Session::lock`] on `inner`.
pub(crate) fn lock_on(inner: &Arc<SessionInner>, name: &Name) -> Result<Lease> {
    match Lease::of_term(inner, name, inner.lock_until(name, None)?) {
        Some(l) => Ok(l),
        None => Err(Error::new(ErrorKind::Timeout, format!("lock '{name}' gave up"))),
    }
}

/// [`Session::try_lock`] on `inner`: one attempt bounded by the query timeout (a bound past what
/// an `Instant` holds saturates: `Duration::MAX` is forever).
pub(crate) fn try_lock_on(inner: &Arc<SessionInner>, name: &Name) -> Result<Option<Lease>> {
    let won = inner.attempt_lock(name, later(sync::now(), inner.timing.query_timeout));
    won.map(|t| Lease::of_term(inner, name, t))
}

/// [`Session::lock_timeout`] on `inner` (`Duration::MAX` waits forever).
pub(crate) fn lock_timeout_on(inner: &Arc<SessionInner>, name: &Name, timeout: Duration) -> Result<Option<Lease>> {
    lock_deadline_on(inner, name, deadline_after(sync::now(), timeout))
}

/// [`Session::lock_deadline`] on `inner` (`None`: forever).
pub(crate) fn lock_deadline_on(
    inner: &Arc<SessionInner>,
    name: &Name,
    deadline: Option<Instant>,
) -> Result<Option<Lease>> {
    inner.lock_until(name, deadline).map(|t| Lease::of_term(inner, name, t))
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
        assert_send_sync::<Semaphore>();
        assert_send_sync::<crate::handles::semaphore::Permit>();
        assert_send_sync::<crate::Error>();
    }
}
