//! The backend SPI: [`LeaseBackend`], implemented once per storage system and checked by the TCK.
//!
//! Every method is blocking. Implementations bound each call by their query timeout, but the
//! session engine relies on that only where a backend promises it ([`LeaseBackend::call_bound`]),
//! and only for calls made on a user's thread: keep-alives always run on worker threads that the
//! engine abandons at its own deadline, so a hung driver never delays loss detection.

use std::fmt;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::error::{Error, ErrorKind, Result};
use crate::types::{Name, SessionId, Token};

mod listing;

pub use listing::{ListRequest, ListedGroup, ListedLease, ListedSession, Listing, Truncated, MAX_LIST_LIMIT};

/// A session created by [`LeaseBackend::open_session`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionGrant {
    /// The new session's id.
    pub id: SessionId,
    /// How long the backend keeps the session without renewal, by the backend's clock.
    pub remaining: Duration,
}

/// The reply of [`LeaseBackend::keep_alive`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeepAlive {
    /// The session was renewed.
    Alive {
        /// Time until the session expires without another renewal, by the backend's clock.
        remaining: Duration,
        /// Every lease the session owns after the renewal, with its current token. A lease the
        /// client believes it holds but that is missing here is lost.
        owned: Vec<(Name, Token)>,
        /// Every group the session is a member of after the renewal, sorted. A membership the
        /// client joined before it sent this keep-alive but that is missing here was lost (e.g. a
        /// leave that reached the server late, or a failover that lost the join): the session
        /// re-joins it and reports the gap. A group listed here that the client does not hold
        /// (a join that landed after its call ended) is left again. A backend that cannot tell
        /// whether a membership survived lists it (unknown is not lost).
        groups: Vec<Name>,
        /// Leases whose ownership this renewal could not check (e.g. their Redis Cluster node did
        /// not answer), sorted. Unknown is not lost: a lease named here is neither judged nor
        /// extended by this reply (a held one keeps its deadline and is lost only when that
        /// passes), and a term the session gave up of it is still remembered, since it may still
        /// be live where it could not be checked. Most backends check everything and leave this
        /// empty.
        unknown: Vec<Name>,
        /// The time the session had left on the backend when this renewal reached it, before
        /// renewing, by the backend's clock (`None`: the backend does not say). With the
        /// `remaining` of the renewal before, it tells how far the backend's clock advanced
        /// between the two, which the session compares with its own to report the clock drift it
        /// observes ([`SessionStatus::observed_drift`](crate::status::SessionStatus)).
        remaining_before: Option<Duration>,
    },
    /// The session is expired (or unknown); it never revives.
    Expired,
}

/// The reply of [`LeaseBackend::acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The session holds the lease: a new term, or the current term when it already held it.
    Acquired {
        /// The term's fencing token.
        token: Token,
        /// How long the term is held without renewal.
        remaining: TermRemaining,
    },
    /// Another live session holds the lease.
    Busy,
}

impl Acquire {
    /// The token of an acquired term; `None` when busy.
    pub fn token(&self) -> Option<Token> {
        match self {
            Acquire::Acquired { token, .. } => Some(*token),
            Acquire::Busy => None,
        }
    }
}

/// How long an acquired term is held without renewal ([`Acquire::Acquired`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TermRemaining {
    /// This long, by the backend's clock (at most the lease duration).
    Known(Duration),
    /// Exactly as long as the session: the term ends when the session does, and the backend did
    /// not read the session's time left with this acquire. The engine then holds the term until
    /// the session's own local deadline, which the session's open and renewals set — a lower
    /// bound of the session's life, so of the term's.
    ///
    /// Only a backend whose terms never outlive their session and never end before it (unless
    /// released, taken after expiry, or reported lost by a keep-alive) may answer this. MySQL's
    /// acquire of a free or new lease does: one upsert whose only reply is the OK packet (the
    /// token travels as `LAST_INSERT_ID`), with no second statement to read the time left.
    WithSession,
}

impl From<Duration> for TermRemaining {
    fn from(d: Duration) -> TermRemaining {
        TermRemaining::Known(d)
    }
}

impl TermRemaining {
    /// The duration, when the backend measured it.
    pub fn known(self) -> Option<Duration> {
        match self {
            TermRemaining::Known(d) => Some(d),
            TermRemaining::WithSession => None,
        }
    }
}

/// The current holder of a lease, from [`LeaseBackend::holder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holder {
    /// The holding session.
    pub session: SessionId,
    /// The current term's token.
    pub token: Token,
    /// Time until the holder's session expires without renewal, by the backend's clock.
    pub remaining: Duration,
    /// The holding session's metadata.
    pub metadata: String,
}

/// A live member of a group, from [`LeaseBackend::members`].
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    /// The member's session.
    pub session: SessionId,
    /// The member session's metadata.
    pub metadata: String,
}

/// What a backend can push instead of making candidates poll, and so where waiters register for
/// a lease's release ([`lease_registration`](Capabilities::lease_registration)).
///
/// # The registration order (for SPI implementors)
///
/// Every waiter of the crate follows one rule, from one place (the runtime's wait loop): `lock`
/// and its `_timeout`/`_deadline`/`_cancellable` forms, a semaphore's `acquire*` rounds, campaign
/// attempts, and so `simba lock`. The TCK checks it on every backend
/// (`lock_registers_where_it_cannot_miss_a_release`, `campaign_…`, `permit_waiter_…`):
/// - without `push_release` ([`Registration::Never`]) a waiter never registers; it retries every
///   poll interval;
/// - with `push_release` alone ([`Registration::BeforeEachAttempt`]) it registers
///   ([`LeaseBackend::watch`] of [`Topic::Lease`]) before every attempt, and waits for the
///   registration to return, so that a release during or right after a busy attempt is pushed;
///   a one-shot registration consumed meanwhile (a release another waiter won, a "subscribed
///   now, re-check" hint) has left a message and is made again before the next attempt;
/// - with `watch_checks_lease` too ([`Registration::AfterBusy`]) it registers only right after
///   an attempt that did not take the lease, so a free lease costs no registration. A release
///   between that attempt and the registration is then seen by the registration alone: claim
///   `watch_checks_lease` only if a registration of a lease that is free sends
///   [`Notification::Released`] at once.
///
/// A registration that is declined (`Ok(false)`), fails, or does not return within the waiter's
/// bound (the query timeout and its deadline) leaves that waiter polling at the poll interval
/// until a later one succeeds; a registration that outlived its bound is waited for again by the
/// waiter's next round rather than started anew, so a backend whose registrations hang has one
/// in flight per waiter. [`Registration`] lives here, in `simba::backend`, for implementors and
/// for callers that wait on the SPI directly; applications use the waiting calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Capabilities {
    /// The backend sends [`Notification::Released`] when a lease is freed (Redis pub/sub,
    /// ZooKeeper and etcd watches, PostgreSQL `LISTEN`/`NOTIFY`, memory). Without it candidates
    /// retry at `renew_interval / 2` + jitter.
    pub push_release: bool,
    /// The backend sends [`Notification::MembersChanged`] on joins and leaves (a member's close
    /// included: it leaves its groups) to a registration ([`LeaseBackend::watch`] of
    /// [`Topic::Group`]) made before them (memory, Redis, ZooKeeper, PostgreSQL, etcd). A member whose
    /// session *expires* need not be announced at its expiry (Redis and PostgreSQL filter members
    /// by liveness and nothing runs then; the memory backend notices at its next call; ZooKeeper
    /// pushes the ephemeral node's deletion): member watches re-read the list every poll interval
    /// whatever this says, which is how they see a crashed member there.
    pub push_membership: bool,
    /// A lease registration checks the lease: [`watch`](LeaseBackend::watch) of
    /// [`Topic::Lease`] sends [`Notification::Released`] at once when the lease is free at
    /// registration (memory; ZooKeeper, whose registration is an `exists` watch; etcd, which
    /// reads the key first). Waiters then register only after a busy attempt — a release
    /// between the two is still pushed — so a `lock()` that finds the lease free makes no
    /// registration at all, and a woken waiter's next attempt is its only call. Without it (a subscription that does not look at the
    /// lease: Redis, PostgreSQL) waiters register before every attempt.
    pub watch_checks_lease: bool,
    /// The backend implements [`LeaseBackend::list`] (`simba status`); without it `list` answers
    /// `Unsupported` (the TCK area `listing` checks the claim either way).
    pub list: bool,
}

/// Where a waiter registers for a lease's release, relative to its attempts (from
/// [`Capabilities::lease_registration`]; the contract is documented on [`Capabilities`]): what
/// `lock()`, a semaphore's rounds, campaigns and `simba lock` follow, and what a caller waiting on
/// the SPI directly should follow too. Part of the SPI (`simba::backend`), not re-exported at the
/// crate root.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Registration {
    /// No push ([`Capabilities::push_release`] is false): the waiter polls.
    Never,
    /// Before every attempt, so that a release during or after it is pushed (a subscription
    /// that does not look at the lease).
    BeforeEachAttempt,
    /// After a busy attempt only: the registration itself answers a lease freed in between
    /// ([`Capabilities::watch_checks_lease`]), and an attempt that finds the lease free needs none.
    AfterBusy,
}

impl Registration {
    /// Register before the next attempt.
    pub fn before_attempt(self) -> bool {
        self == Registration::BeforeEachAttempt
    }

    /// Register after an attempt that found the lease busy.
    pub fn after_busy(self) -> bool {
        self == Registration::AfterBusy
    }
}

impl Capabilities {
    /// Where waiters on this backend register for a lease's release.
    pub fn lease_registration(&self) -> Registration {
        match (self.push_release, self.watch_checks_lease) {
            (false, _) => Registration::Never,
            (true, false) => Registration::BeforeEachAttempt,
            (true, true) => Registration::AfterBusy,
        }
    }
}

/// What a watcher asks to be told about (see [`LeaseBackend::watch`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Topic {
    /// The lease `name` becomes free (released, or its holder's node deleted).
    Lease(Name),
    /// The member list of group `name` changes (including the group being created).
    Group(Name),
}

/// A pushed hint. Hints may be spurious or coalesced; receivers re-check the backend.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Notification {
    /// The lease may be free now.
    Released(Name),
    /// The group's members may have changed.
    MembersChanged(Name),
}

/// The result of one startup/operations check (used by `simba check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckItem {
    /// What was checked, e.g. `"reachable"`, `"schema"`, `"maxmemory-policy"`.
    pub name: String,
    /// The outcome.
    pub status: CheckStatus,
    /// A human explanation, e.g. the policy found and what to change.
    pub detail: String,
}

/// Outcome of a [`CheckItem`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// All good.
    Ok,
    /// Works, but something is unsafe or unusual.
    Warn,
    /// Broken.
    Fail,
}

/// The storage SPI. Object-safe; every backend passes the TCK (`simba::tck`).
///
/// Rules every implementation keeps (SPEC §2): a session expires when not renewed within its
/// lease duration and never revives; a lease belongs to a session only while that session is alive;
/// a lease's token is > 0, strictly increases with every new term, is stable within a term and
/// never resets; all remaining times are measured by the backend's clock and returned as durations.
///
/// Names passed in are already validated. Methods return [`ErrorKind::Unavailable`](crate::ErrorKind)
/// for transient failures and [`ErrorKind::SessionExpired`](crate::ErrorKind) where stated.
pub trait LeaseBackend: Send + Sync + fmt::Debug + 'static {
    /// A short name for logs and errors, e.g. `"postgres"`, `"redis"`, `"memory"`.
    fn kind(&self) -> &'static str;

    /// Creates a live session that expires after `lease_duration` without renewal.
    ///
    /// # Errors
    /// `Unavailable` when the backend cannot be reached; `Backend` for other failures.
    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant>;

    /// Renews the session and with it every lease and membership it holds (in O(1) round trips
    /// where the backend allows), and reports which leases it still owns.
    ///
    /// Returns [`KeepAlive::Expired`] (not an error) when the session is expired or unknown; a
    /// backend may delete the expired session's row as a side effect.
    ///
    /// # Errors
    /// `Unavailable`/`Backend` when the renewal could not be performed; the outcome is unknown.
    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive>;

    /// Deletes the session, then releases its leases (tokens kept) and memberships. Idempotent: a
    /// repeated close after a partial failure finishes the work; closing an unknown session is Ok.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`; the caller may retry.
    fn close_session(&self, session: &SessionId) -> Result<()>;

    /// Takes `name` when it is free or its holder's session has expired (new term: token + 1, or
    /// a larger token on backends whose tokens are not contiguous). When this session already
    /// holds it, returns the same token (idempotent). Otherwise returns [`Acquire::Busy`].
    ///
    /// The term's time left is the backend's measurement ([`TermRemaining::Known`]), or — where
    /// the term ends exactly with its session and the acquire did not read the session's time
    /// left — [`TermRemaining::WithSession`].
    ///
    /// # Errors
    /// `SessionExpired` when `session` is not alive; `Unavailable`/`Backend` otherwise.
    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire>;

    /// Frees `name` if `session` holds it **in the term of `token`**, keeping the token for the
    /// next term. A no-op otherwise (another holder, another term, or free).
    ///
    /// Term-scoped so that a release that lands late (a timed-out call the server still executes)
    /// can never free a newer term of the same session.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`.
    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()>;

    /// The live holder of `name`, or `None` when free (or held by an expired session).
    ///
    /// # Errors
    /// `Unavailable`/`Backend`.
    fn holder(&self, name: &Name) -> Result<Option<Holder>>;

    /// Adds `session` to `group`; valid only while the session lives. Idempotent.
    ///
    /// # Errors
    /// `SessionExpired` when `session` is not alive; `Unavailable`/`Backend` otherwise.
    fn join(&self, session: &SessionId, group: &Name) -> Result<()>;

    /// Removes `session` from `group`. Idempotent.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`.
    fn leave(&self, session: &SessionId, group: &Name) -> Result<()>;

    /// Members of `group` whose sessions are alive, sorted by session id. A join that returned is
    /// visible at once.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`.
    fn members(&self, group: &Name) -> Result<Vec<Member>>;

    /// The limit (number of permits) of semaphore `name`: with `Some(permits)`, stores `permits`
    /// as its limit when none is stored yet; with `None`, stores nothing. Returns the stored limit
    /// (always `Some` after a `Some(permits)` call that succeeded), whatever was asked: the caller
    /// compares. Atomic: of two first calls racing with different limits, exactly one is stored and
    /// both are told that one. A stored limit is kept forever (like lease tokens).
    ///
    /// Semaphore names are a namespace of their own (not lease or group names); `permits` is
    /// already validated (1 to [`MAX_PERMITS`](crate::semaphore::MAX_PERMITS)). The permits
    /// themselves are ordinary leases on the semaphore's slot names (see [`crate::semaphore`]).
    ///
    /// The default (for backends written before semaphores existed) stores nothing and fails
    /// with `Unsupported`, so [`Session::semaphore`](crate::Session::semaphore) on such a backend
    /// says so instead of the backend failing to compile; every backend of this crate implements
    /// it.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`; `Backend` when the stored value is corrupt (not a valid limit);
    /// `Unsupported` from the default.
    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        let _ = permits;
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the {} backend does not implement semaphores (LeaseBackend::semaphore_limit), so semaphore '{name}' \
                 cannot be used on it",
                self.kind()
            ),
        ))
    }

    /// How long any call of this backend (other than [`open_session`](LeaseBackend::open_session))
    /// can take, when the backend bounds its calls itself.
    ///
    /// `Some(t)` promises that every call returns, with its result or an error, within `t` (plus
    /// thread scheduling) even when the server or the network stops answering, because the backend
    /// puts its own timeout on every blocking step (connection checkout, connect, write, read). The
    /// session engine then runs the calls it makes for a user's thread (`try_lock`/`lock` attempts,
    /// `Lease::release`, `holder`, `join`, `leave`, `members`, `watch`, `close`) on that thread
    /// whenever the caller may wait at least `t`, instead of handing each to a worker thread. Keep-alives,
    /// campaign attempts and background releases run on workers whatever this returns, so loss
    /// detection never depends on a backend keeping this promise.
    ///
    /// `None` (the default, and the only right answer for a wrapper that may block): a call may block
    /// indefinitely (e.g. a driver without read timeouts against a paused server); the engine then
    /// runs every call on a worker and abandons it at its own deadline.
    fn call_bound(&self) -> Option<Duration> {
        None
    }

    /// What this backend pushes.
    fn capabilities(&self) -> Capabilities {
        Capabilities::default()
    }

    /// Registers a one-shot interest in `topic`: the backend sends at most one [`Notification`]
    /// for it to `notify` and then forgets the registration (register again to keep watching).
    /// Registering the same channel twice for a topic is allowed and must not duplicate it
    /// unboundedly. Returns `false` when the backend cannot push this topic (callers poll).
    /// `notify` is a [`simba::channel::Sender`](crate::channel::Sender) (crossbeam's, re-exported
    /// on purpose).
    ///
    /// # Errors
    /// `Unavailable` when the registration could not be made (callers fall back to polling).
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let _ = (topic, notify);
        Ok(false)
    }

    /// Deletes expired sessions left behind by crashed processes (and their memberships), at most
    /// one batch; returns how many sessions were deleted. Lease rows and tokens stay.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`.
    fn purge_expired(&self) -> Result<usize> {
        Ok(0)
    }

    /// What the backend holds right now, for operators (`simba status`): held leases and groups
    /// with live members whose names start with the request's prefix, and live sessions, with
    /// holders, tokens, members, metadata and time left by the backend's clock; at most the
    /// request's limit of each, saying which sections were cut ([`Listing::finish`] does the
    /// sorting and cutting for an implementation that gathers `limit + 1` of each).
    ///
    /// Bounded: never a full scan without a cap, and never on a hot path (no session calls it).
    /// Each backend documents what it reads and at what cost (docs/observability.md). A snapshot,
    /// not a transaction: an entry may change while the listing is read.
    ///
    /// The default (for backends that cannot list) fails with `Unsupported`.
    ///
    /// # Errors
    /// `Unavailable`/`Backend`; `Unsupported` from the default.
    fn list(&self, request: &ListRequest) -> Result<Listing> {
        let _ = request;
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the {} backend cannot list what it holds (LeaseBackend::list is not implemented for it)",
                self.kind()
            ),
        ))
    }

    /// Operational checks: reachability, schema, eviction policy, ACLs, clock. Never fails: a
    /// failed check is reported as [`CheckStatus::Fail`].
    fn check(&self) -> Vec<CheckItem> {
        Vec::new()
    }
}
