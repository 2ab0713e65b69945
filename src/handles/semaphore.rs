//! Counted semaphores: at most N holders at once, each [`Permit`] carrying a fencing token.
//!
//! A semaphore `S` with `permits` = N has N *slots*, `0 ≤ i < N`. Slot `i` is an ordinary lease
//! whose name is reserved for it, `simba.sem:S:i` ([`RESERVED_NAME_PREFIX`] + `S` + `:` + `i`), and a
//! permit is a term of that lease. Every lease guarantee therefore holds for permits unchanged, on
//! every backend: at most one holder per slot (so at most N per semaphore) at any backend instant;
//! a permit lives only while its session lives and is renewed by the session's one keep-alive
//! (renewal stays O(1) per session however many permits it holds); its token is > 0, strictly
//! increases with every new term *of its slot*, is stable within the term and never resets; and
//! [`Permit::token`] is the same no-I/O guard as [`Lease::token`]. A resource fences on
//! (semaphore, slot) — [`Permit::fence_resource`] names it — and rejects a stale permit of its slot
//! exactly as it rejects a stale lease. Tokens of different slots are not comparable.
//!
//! The only state beyond the slot leases is the semaphore's **limit**, stored by the backend on
//! first use ([`LeaseBackend::semaphore_limit`]) and kept forever: a client asking for another
//! limit gets [`ErrorKind::InvalidConfig`] naming both values (never a silent second semaphore).
//!
//! - **Acquire** tries the slots one by one (one backend acquire each, starting at a random slot
//!   and skipping the slots this session already holds) and takes the first free one. Starting at
//!   a random slot spreads N + k contenders over the slots instead of queueing all of them on slot
//!   0, so a contender finds a free slot after about N / (free + 1) tries rather than after every
//!   held slot, and no one slot's row or key is the hot spot. When every slot is busy, the call
//!   waits like [`Session::lock`](crate::Session::lock): it watches every slot where the backend
//!   pushes releases ([`Capabilities::push_release`](crate::backend::Capabilities)) and wakes at once on one,
//!   and otherwise retries every [`poll_interval`](crate::SessionOptions::poll_interval) plus jitter.
//! - **Several permits per session.** Each successful acquire is a new permit on a slot the
//!   session does not hold yet, so one session (one process) may hold several permits of one
//!   semaphore, through one handle or several. Acquiring is therefore *not* idempotent: a second
//!   `acquire` on the same handle takes a second permit (or waits for one). A session holding every
//!   slot waits (or gets `None`) like anyone else.
//! - **Loss** of a permit is the loss of its slot lease: [`SessionEvent::LeaseLost`](crate::SessionEvent)
//!   reports the slot's lease name (`simba.sem:S:i`); [`slot_of`] maps it back to `(S, i)`. The
//!   permit's `token()` fails from that moment, with a message naming the semaphore and the slot.
//! - **Names.** A semaphore name follows the lease naming rule, at most [`MAX_SEMAPHORE_NAME_LEN`]
//!   characters (so every slot name fits the 128-character limit); semaphore names are their own
//!   namespace (a semaphore `S` and a lock `S` do not interfere). Lease and group names starting
//!   with [`RESERVED_NAME_PREFIX`] are rejected for users, so no lock, election or group collides
//!   with a slot.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use simba::{MemoryBackend, Session, SessionOptions};
//!
//! # fn main() -> simba::Result<()> {
//! let backend = Arc::new(MemoryBackend::new());
//! let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
//! let session = Session::open(backend, options)?;
//! let workers = session.semaphore("workers", 2)?;
//! let a = workers.acquire()?;
//! let b = workers.try_acquire()?.expect("a second permit is free");
//! assert_ne!(a.slot(), b.slot());
//! assert!(workers.try_acquire()?.is_none()); // both permits are taken
//! let token = a.token()?; // right before each write; fence on a.fence_resource()
//! assert!(token.get() > 0);
//! drop(b); // frees its slot
//! assert!(workers.try_acquire()?.is_some());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::{Holder, LeaseBackend};
use crate::cancel::{Attempt, Cancel};
use crate::engine::{deadline_after, later};
use crate::error::{Error, ErrorKind, Result};
use crate::handles::lease::Lease;
use crate::runtime::{bounded_call, Contender, SessionInner};
use crate::sync;
use crate::types::{IntoName, Name, SessionId, Token, MAX_NAME_LEN, PARTITION_NAME_PREFIX, RESERVED_NAME_PREFIX};

/// Most permits a semaphore may have. Every acquire visits the slots one by one, and
/// [`Semaphore::holders`] reads each, so a semaphore is meant for tens of permits, not thousands.
pub const MAX_PERMITS: u32 = 1000;

/// Longest semaphore name, in characters: what leaves room in the 128-character name limit for
/// the slot lease names (`simba.sem:` + name + `:` + a slot number below [`MAX_PERMITS`]).
pub const MAX_SEMAPHORE_NAME_LEN: usize = MAX_NAME_LEN - RESERVED_NAME_PREFIX.len() - 1 - digits(MAX_PERMITS - 1);

pub(crate) const fn digits(mut n: u32) -> usize {
    let mut d = 1;
    while n >= 10 {
        n /= 10;
        d += 1;
    }
    d
}

/// Validates a semaphore name: the lease naming rule, at most [`MAX_SEMAPHORE_NAME_LEN`] characters.
fn semaphore_name(name: impl IntoName) -> Result<Name> {
    let name = name.into_name()?;
    if name.as_str().starts_with(PARTITION_NAME_PREFIX) {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid semaphore name '{name}': names starting with '{PARTITION_NAME_PREFIX}' are reserved for \
                 partition sets (use Session::partitions)"
            ),
        ));
    }
    let len = name.as_str().chars().count();
    if len > MAX_SEMAPHORE_NAME_LEN {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid semaphore name '{name}': {len} characters is too long; semaphore names are at most \
                 {MAX_SEMAPHORE_NAME_LEN} characters of [A-Za-z0-9._:-] (room for the slot lease names \
                 '{RESERVED_NAME_PREFIX}<name>:<slot>' within {MAX_NAME_LEN})"
            ),
        ));
    }
    Ok(name)
}

/// Validates a permit count: 1 to [`MAX_PERMITS`].
fn validate_permits(name: &Name, permits: u32) -> Result<()> {
    if permits == 0 || permits > MAX_PERMITS {
        return Err(Error::config(format!(
            "semaphore '{name}': {permits} permits is out of range; a semaphore has 1 to {MAX_PERMITS} permits"
        )));
    }
    Ok(())
}

/// The lease name of slot `slot` of semaphore `name` (a validated semaphore name and slot).
fn slot_lease(name: &Name, slot: u32) -> Result<Name> {
    Name::new(format!("{RESERVED_NAME_PREFIX}{name}:{slot}"))
}

/// The fence resource (and lease name) of slot `slot` of semaphore `name`: `simba.sem:<name>:<slot>`.
/// A resource that fences on it with the slot's permit tokens rejects a stale permit of that slot.
///
/// # Errors
/// `InvalidName` when `name` is no valid semaphore name; `InvalidConfig` when `slot` is not below
/// [`MAX_PERMITS`].
pub fn fence_resource(name: impl IntoName, slot: u32) -> Result<Name> {
    let name = semaphore_name(name)?;
    if slot >= MAX_PERMITS {
        return Err(Error::config(format!(
            "semaphore '{name}': slot {slot} is out of range; slots are 0 to {}",
            MAX_PERMITS - 1
        )));
    }
    slot_lease(&name, slot)
}

/// The semaphore and slot a slot lease name belongs to (`simba.sem:S:i` → `(S, i)`), e.g. to
/// explain a [`SessionEvent::LeaseLost`](crate::SessionEvent) of a permit; `None` for any other name.
pub fn slot_of(lease: &Name) -> Option<(Name, u32)> {
    let rest = lease.as_str().strip_prefix(RESERVED_NAME_PREFIX)?;
    let (name, slot) = rest.rsplit_once(':')?;
    // Canonical decimal only (no sign, no leading zero), so the mapping is one-to-one.
    if slot.is_empty() || !slot.bytes().all(|b| b.is_ascii_digit()) || (slot.len() > 1 && slot.starts_with('0')) {
        return None;
    }
    let slot: u32 = slot.parse().ok()?;
    let name = semaphore_name(name).ok()?;
    (slot < MAX_PERMITS).then_some((name, slot))
}

/// Where a [`Semaphore`] takes its session from: a plain session, or a coordinator's current one.
#[derive(Clone)]
pub(crate) enum Source {
    Session(Arc<SessionInner>),
    Current(Arc<dyn Fn() -> Result<Arc<SessionInner>> + Send + Sync>),
}

impl Source {
    pub(crate) fn session(&self) -> Result<Arc<SessionInner>> {
        match self {
            Source::Session(s) => Ok(s.clone()),
            Source::Current(f) => f(),
        }
    }

    /// How long to wait before asking again for a session that is being replaced.
    pub(crate) fn retry_pause(&self) -> Duration {
        Duration::from_millis(50)
    }

    /// The error of a call made on [`session`](Source::session): for a coordinator's current
    /// session, its expiry under the call is `Unavailable`, as the coordinator's calls say.
    pub(crate) fn error(&self, e: Error) -> Error {
        match self {
            Source::Session(_) => e,
            Source::Current(_) => e.on_replaced_session(),
        }
    }
}

/// A counted semaphore: at most [`permits`](Semaphore::permits) [`Permit`]s held at once, over
/// all sessions. See the [module docs](crate::semaphore) for the rules.
///
/// Made by [`Session::semaphore`](crate::Session::semaphore) (permits taken by that session) or
/// [`Coordinator::semaphore`](crate::Coordinator::semaphore) (permits taken by the coordinator's
/// current session). Cheap to clone; clones share nothing but the session.
#[derive(Clone)]
pub struct Semaphore {
    source: Source,
    backend: Arc<dyn LeaseBackend>,
    query_timeout: Duration,
    name: Name,
    permits: u32,
    /// `slots[i]` is the lease name of slot `i`.
    slots: Arc<[Name]>,
}

impl fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Semaphore").field("name", &self.name).field("permits", &self.permits).finish()
    }
}

/// What a limit stored through [`LeaseBackend::semaphore_limit`] counts, for its checks and
/// messages: a semaphore's permits, or a partition set's partitions (stored under a reserved name).
pub(crate) struct Counted {
    /// What the name names: `"semaphore"`, `"partition set"`.
    pub(crate) what: &'static str,
    /// What is counted: `"permits"`, `"partitions"`.
    pub(crate) unit: &'static str,
    /// The largest valid value.
    pub(crate) max: u32,
}

const PERMITS: Counted = Counted { what: "semaphore", unit: "permits", max: MAX_PERMITS };

/// Stores (or with `asked == None` reads) the limit kept under `key` for `counted`'s `shown` name,
/// and checks it: a stored value out of range, or other than `asked`, is an error naming both.
pub(crate) fn stored_limit(
    backend: &Arc<dyn LeaseBackend>,
    query_timeout: Duration,
    key: &Name,
    shown: &Name,
    counted: &Counted,
    asked: Option<u32>,
) -> Result<Option<u32>> {
    let n = key.clone();
    let stored = bounded_call(backend, query_timeout, move |b| b.semaphore_limit(&n, asked))?;
    let Counted { what, unit, max } = *counted;
    match (stored, asked) {
        (Some(s), _) if s == 0 || s > max => Err(Error::backend(format!(
            "{}: the stored limit of {what} '{shown}' is {s}, which is no valid limit (1 to {max}): \
             the stored value was changed by something other than simba",
            backend.kind()
        ))),
        (Some(s), Some(p)) if s != p => Err(Error::config(format!(
            "{what} '{shown}' has {s} {unit} on the {} backend, but {p} were asked for: a {what}'s number of \
             {unit} is fixed by its first use; ask for {s}, or use another {what} name",
            backend.kind()
        ))),
        (None, Some(p)) => Err(Error::backend(format!(
            "{}: storing the limit {p} of {what} '{shown}' returned no limit",
            backend.kind()
        ))),
        (stored, _) => Ok(stored),
    }
}

impl Semaphore {
    /// Validates, then stores or checks the limit on the backend (one bounded call).
    pub(crate) fn open(
        source: Source,
        backend: Arc<dyn LeaseBackend>,
        query_timeout: Duration,
        name: impl IntoName,
        permits: u32,
    ) -> Result<Semaphore> {
        let name = semaphore_name(name)?;
        validate_permits(&name, permits)?;
        stored_limit(&backend, query_timeout, &name, &name, &PERMITS, Some(permits))?;
        Semaphore::with_limit(source, backend, query_timeout, name, permits)
    }

    /// The semaphore `name` with its stored limit, or `None` when it has none yet (one bounded call).
    pub(crate) fn existing(
        source: Source,
        backend: Arc<dyn LeaseBackend>,
        query_timeout: Duration,
        name: impl IntoName,
    ) -> Result<Option<Semaphore>> {
        let name = semaphore_name(name)?;
        match stored_limit(&backend, query_timeout, &name, &name, &PERMITS, None)? {
            Some(permits) => Semaphore::with_limit(source, backend, query_timeout, name, permits).map(Some),
            None => Ok(None),
        }
    }

    fn with_limit(
        source: Source,
        backend: Arc<dyn LeaseBackend>,
        query_timeout: Duration,
        name: Name,
        permits: u32,
    ) -> Result<Semaphore> {
        let slots = (0..permits).map(|i| slot_lease(&name, i)).collect::<Result<Vec<_>>>()?;
        Ok(Semaphore { source, backend, query_timeout, name, permits, slots: slots.into() })
    }

    /// The semaphore's name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The limit: how many permits may be held at once.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// The fence resource of `slot` (see [`fence_resource`]).
    ///
    /// # Errors
    /// `InvalidConfig` when `slot` is not below [`permits`](Semaphore::permits).
    pub fn fence_resource(&self, slot: u32) -> Result<Name> {
        self.slots.get(slot as usize).cloned().ok_or_else(|| {
            Error::config(format!(
                "semaphore '{}': slot {slot} is out of range; it has slots 0 to {}",
                self.name,
                self.permits - 1
            ))
        })
    }

    /// Takes a permit, waiting as long as it takes (wakes at once on a pushed release of any slot,
    /// otherwise retries every [`poll_interval`](crate::SessionOptions::poll_interval) plus
    /// jitter). Transient failures are retried.
    ///
    /// # Errors
    /// `SessionExpired`/`Closed` when the session ends while waiting (for a coordinator's
    /// semaphore: `Unavailable` while its session is being replaced, `Closed` after close);
    /// `Backend` for non-transient failures.
    pub fn acquire(&self) -> Result<Permit> {
        match self.acquire_until(None, None, &mut |_| {})? {
            Some(p) => Ok(p),
            None => Err(Error::new(ErrorKind::Timeout, format!("acquire of semaphore '{}' gave up", self.name))),
        }
    }

    /// One attempt at every slot (starting at a random one, skipping the slots this session
    /// holds): `Ok(None)` when every other slot is held by another live session.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire), plus `Timeout` when the backend did not answer an
    /// attempt within the query timeout (the remaining slots are not tried), and the last
    /// transient error when no slot could be taken and some attempt failed (the answer is not
    /// known to be "all busy").
    pub fn try_acquire(&self) -> Result<Option<Permit>> {
        let s = self.source.session()?;
        self.round(&s, None, true).map_err(|e| self.source.error(e))
    }

    /// Like [`acquire`](Semaphore::acquire), giving up after `timeout` with `Ok(None)`
    /// (`Duration::MAX` waits forever). As for [`Session::lock_timeout`](crate::Session::lock_timeout),
    /// one round over the slots is made whatever the timeout, every attempt runs to its own bound
    /// (the query timeout), and later attempts are sent only before the timeout ends.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire).
    pub fn acquire_timeout(&self, timeout: Duration) -> Result<Option<Permit>> {
        self.acquire_until(deadline_after(sync::now(), timeout), None, &mut |_| {})
    }

    /// Like [`acquire`](Semaphore::acquire), giving up at `deadline` with `Ok(None)`. One round over
    /// the slots is made even when `deadline` has passed; no attempt is sent after it otherwise.
    ///
    /// # Errors
    /// As [`acquire`](Semaphore::acquire).
    pub fn acquire_deadline(&self, deadline: Instant) -> Result<Option<Permit>> {
        self.acquire_until(Some(deadline), None, &mut |_| {})
    }

    /// Like [`acquire_deadline`](Semaphore::acquire_deadline) (`deadline` `None`: no deadline),
    /// ending early when `cancel` is cancelled, and telling `on_attempt` of every round that did
    /// not take a permit — as [`Session::lock_cancellable`](crate::Session::lock_cancellable)
    /// does for a lock. A cancel is noticed between rounds and after each backend call, so the
    /// call returns within one bounded call of it; a round that takes a permit returns it even
    /// when the token was cancelled meanwhile.
    ///
    /// # Errors
    /// [`ErrorKind::Cancelled`] once `cancel` is cancelled (also when it was before the call: no
    /// round is made then); otherwise as [`acquire`](Semaphore::acquire).
    pub fn acquire_cancellable(
        &self,
        deadline: Option<Instant>,
        cancel: &Cancel,
        mut on_attempt: impl FnMut(Attempt<'_>),
    ) -> Result<Option<Permit>> {
        self.acquire_until(deadline, Some(cancel), &mut on_attempt)
    }

    /// Who holds which slot now: `(slot, holder)` for every held slot, by slot. One backend read
    /// per slot, each bounded by the query timeout (stops at the first failure).
    ///
    /// # Errors
    /// `Timeout`; the backend's error.
    pub fn holders(&self) -> Result<Vec<(u32, Holder)>> {
        let mut out = Vec::new();
        for (slot, lease) in (0u32..).zip(self.slots.iter()) {
            let lease = lease.clone();
            if let Some(h) = bounded_call(&self.backend, self.query_timeout, move |b| b.holder(&lease))? {
                out.push((slot, h));
            }
        }
        Ok(out)
    }

    /// One round: every slot once, from a random one, until one is taken. `deadline` (with `first`
    /// false) stops sending attempts once passed.
    fn round(&self, s: &Arc<SessionInner>, deadline: Option<Instant>, first: bool) -> Result<Option<Permit>> {
        let n = self.permits;
        let offset = rand::random::<u32>() % n;
        let mut failed = None;
        for k in 0..n {
            if !first && deadline.is_some_and(|d| sync::now() >= d) {
                return Ok(None);
            }
            let slot = (offset + k) % n;
            let lease_name = &self.slots[slot as usize];
            match s.attempt_lock(lease_name, later(sync::now(), self.query_timeout)) {
                Ok(Some(token)) => {
                    let lease = Lease::new(s.clone(), lease_name.clone(), token);
                    return Ok(Some(Permit { lease, semaphore: self.name.clone(), slot }));
                }
                Ok(None) => {}
                // This session holds the slot already (through another permit): not ours to take.
                Err(e) if e.kind() == ErrorKind::AlreadyHeld => {}
                // The backend does not answer: trying the other slots would only wait as long again.
                Err(e) if e.kind() == ErrorKind::Timeout => return Err(e),
                Err(e) if e.is_retryable() => failed = Some(e),
                Err(e) => return Err(e),
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(None),
        }
    }

    /// Rounds until a permit is taken or `deadline` passes (`None`: forever), through the
    /// session's one wait loop: between rounds it waits for a pushed release of any slot, the
    /// session's end, `cancel` or the retry delay.
    fn acquire_until(
        &self,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
        observe: &mut dyn FnMut(Attempt<'_>),
    ) -> Result<Option<Permit>> {
        let s = self.source.session()?;
        s.wait_for(&mut Rounds(self), deadline, cancel, observe).map_err(|e| self.source.error(e))
    }
}

/// A semaphore's contender: every slot (those this session holds aside), one round at a time.
struct Rounds<'a>(&'a Semaphore);

impl Contender for Rounds<'_> {
    type Won = Permit;

    fn what(&self) -> String {
        format!("a permit of semaphore '{}'", self.0.name)
    }

    fn waited(&self) -> &Name {
        &self.0.name
    }

    fn leases(&self) -> &[Name] {
        &self.0.slots
    }

    fn attempt(&mut self, s: &Arc<SessionInner>, deadline: Option<Instant>, first: bool) -> Result<Option<Permit>> {
        self.0.round(s, deadline, first)
    }
}

/// A held permit of a [`Semaphore`]: a term on one of its slots. Consult
/// [`token`](Permit::token) before every write to the protected resource and pass the token to
/// it, fencing on [`fence_resource`](Permit::fence_resource).
///
/// Dropping the permit releases it on a background worker without blocking the caller.
pub struct Permit {
    lease: Lease,
    semaphore: Name,
    slot: u32,
}

impl Permit {
    /// The semaphore's name.
    pub fn name(&self) -> &Name {
        &self.semaphore
    }

    /// The slot this permit holds (`0 ≤ slot < permits`).
    pub fn slot(&self) -> u32 {
        self.slot
    }

    /// The slot's lease name, `simba.sem:<name>:<slot>` (what [`SessionEvent::LeaseLost`](crate::SessionEvent)
    /// and lease tools show).
    pub fn lease_name(&self) -> &Name {
        self.lease.name()
    }

    /// The resource name to fence on: the slot's lease name. Tokens of one slot are comparable
    /// with each other only, so a resource written under a semaphore fences per slot.
    pub fn fence_resource(&self) -> &Name {
        self.lease.name()
    }

    /// The holding session's id.
    pub fn session_id(&self) -> &SessionId {
        self.lease.session_id()
    }

    /// The fencing token of this term, if the permit is still held. No I/O: the same guard as
    /// [`Lease::token`].
    ///
    /// # Errors
    /// `LeaseLost` once the permit may no longer be ours (the message names the semaphore, the
    /// slot and why).
    pub fn token(&self) -> Result<Token> {
        self.lease.token().map_err(|e| self.explain(e))
    }

    /// The token this term was granted with, whether or not it is still held (for logs; use
    /// [`token`](Permit::token) to guard writes).
    pub fn granted_token(&self) -> Token {
        self.lease.granted_token()
    }

    /// Time until the permit's local deadline, or `None` once it is no longer held.
    pub fn remaining(&self) -> Option<Duration> {
        self.lease.remaining()
    }

    /// True while [`token`](Permit::token) would succeed.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// Releases the permit, freeing its slot (the slot's token is kept for its next term).
    /// `token()` fails from the moment this is called. Waits at most the query timeout, as
    /// [`Lease::release`].
    ///
    /// # Errors
    /// As [`Lease::release`]; either way the permit is no longer ours locally.
    pub fn release(self) -> Result<()> {
        let (semaphore, slot) = (self.semaphore, self.slot);
        self.lease.release().map_err(|e| {
            Error::new(e.kind(), format!("release of permit {slot} of semaphore '{semaphore}': {e}")).with_source(e)
        })
    }

    fn explain(&self, e: Error) -> Error {
        Error::new(e.kind(), format!("permit {} of semaphore '{}': {e}", self.slot, self.semaphore))
    }
}

impl fmt::Debug for Permit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Permit")
            .field("semaphore", &self.semaphore)
            .field("slot", &self.slot)
            .field("token", &self.lease.granted_token())
            .field("session", self.lease.session_id())
            .field("held", &self.is_held())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_names_fit_and_map_back() {
        assert_eq!(MAX_SEMAPHORE_NAME_LEN, 128 - 10 - 1 - 3);
        let longest = "s".repeat(MAX_SEMAPHORE_NAME_LEN);
        let r = fence_resource(longest.as_str(), MAX_PERMITS - 1).unwrap();
        assert_eq!(r.as_str().len(), MAX_NAME_LEN);
        assert_eq!(slot_of(&r), Some((Name::new(&longest).unwrap(), MAX_PERMITS - 1)));
        let e = fence_resource("s".repeat(MAX_SEMAPHORE_NAME_LEN + 1), 0).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName);
        assert!(e.to_string().contains(&MAX_SEMAPHORE_NAME_LEN.to_string()), "{e}");
        assert_eq!(fence_resource("a:1", 0).unwrap().as_str(), "simba.sem:a:1:0");
        assert_eq!(slot_of(&Name::new("simba.sem:a:1:0").unwrap()), Some((Name::new("a:1").unwrap(), 0)));
        for other in ["a", "simba.sem:a", "simba.sem:a:01", "simba.sem:a:x", "simba.sem::1", "simba.sem:a:1000"] {
            assert_eq!(slot_of(&Name::new(other).unwrap()), None, "{other}");
        }
        assert_eq!(fence_resource("a", MAX_PERMITS).unwrap_err().kind(), ErrorKind::InvalidConfig);
    }

    #[test]
    fn permits_are_validated() {
        let n = Name::new("s").unwrap();
        assert!(validate_permits(&n, 1).is_ok() && validate_permits(&n, MAX_PERMITS).is_ok());
        for bad in [0, MAX_PERMITS + 1, u32::MAX] {
            let e = validate_permits(&n, bad).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidConfig);
            assert!(e.to_string().contains(&bad.to_string()) && e.to_string().contains("1 to 1000"), "{e}");
        }
    }
}

/// A waiter must not miss a release that lands right after its busy attempt, on a backend whose
/// watches are one-shot subscriptions that do not look at the lease (Redis): a "now subscribed"
/// hint consumes the registrations, so the waiter has to re-arm them *before* its next attempts.
#[cfg(test)]
mod push_race {
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

    use parking_lot::Mutex;

    use crossbeam_channel::Sender;

    use super::*;
    use crate::backend::{Acquire, Capabilities, KeepAlive, Member, Notification, SessionGrant, Topic};
    use crate::backends::memory::MemoryBackend;
    use crate::handles::session::Session;
    use crate::options::SessionOptions;

    /// The registrations of a topic, each sender with how often it registered.
    type Registrations = Vec<(Sender<Notification>, u32)>;

    /// Registrations and whether the hint was given.
    #[derive(Debug, Default)]
    struct Watchers {
        registered: Mutex<HashMap<Topic, Registrations>>,
        hinted: AtomicBool,
    }

    impl Watchers {
        fn hint(&self, name: &Name) {
            if !self.hinted.swap(true, Ordering::SeqCst) {
                self.publish(name);
            }
        }
        fn publish(&self, name: &Name) {
            let senders = self.registered.lock().get_mut(&Topic::Lease(name.clone())).map(std::mem::take);
            for (s, _) in senders.unwrap_or_default() {
                let _ = s.try_send(Notification::Released(name.clone()));
            }
        }
    }

    /// Memory underneath; watches as Redis serves them: one-shot, never fired because the lease
    /// is free already, and once a "now subscribed" hint that consumes every registration of the
    /// target (Redis' SUBSCRIBE confirmation, which comes a moment after a registration): at a
    /// watcher's second registration of it, or 200 ms after the first `Busy` answer on it,
    /// whichever is first. After the second `Busy` answer on the target, the holder's term is
    /// released (and published) before the answer returns: a release that lands between the
    /// waiter's attempt and whatever it does next.
    #[derive(Debug)]
    struct OneShot {
        inner: MemoryBackend,
        watchers: Arc<Watchers>,
        target: Mutex<Option<(Name, SessionId, Token)>>,
        busy_on_target: AtomicU32,
    }

    impl LeaseBackend for OneShot {
        fn kind(&self) -> &'static str {
            "one-shot"
        }
        fn open_session(&self, d: Duration, m: &str) -> Result<SessionGrant> {
            self.inner.open_session(d, m)
        }
        fn keep_alive(&self, s: &SessionId, d: Duration) -> Result<KeepAlive> {
            self.inner.keep_alive(s, d)
        }
        fn close_session(&self, s: &SessionId) -> Result<()> {
            self.inner.close_session(s)
        }
        fn acquire(&self, s: &SessionId, n: &Name) -> Result<Acquire> {
            let r = self.inner.acquire(s, n)?;
            let target = self.target.lock().clone();
            if let (Acquire::Busy, Some((name, holder, token))) = (&r, target) {
                if &name == n {
                    match self.busy_on_target.fetch_add(1, Ordering::SeqCst) + 1 {
                        1 => {
                            let watchers = self.watchers.clone();
                            std::thread::spawn(move || {
                                std::thread::sleep(Duration::from_millis(200));
                                watchers.hint(&name);
                            });
                        }
                        2 => {
                            self.inner.release(&holder, &name, token)?;
                            self.watchers.publish(&name);
                        }
                        _ => {}
                    }
                }
            }
            Ok(r)
        }
        fn release(&self, s: &SessionId, n: &Name, t: Token) -> Result<()> {
            self.inner.release(s, n, t)?;
            self.watchers.publish(n);
            Ok(())
        }
        fn holder(&self, n: &Name) -> Result<Option<Holder>> {
            self.inner.holder(n)
        }
        fn join(&self, s: &SessionId, g: &Name) -> Result<()> {
            self.inner.join(s, g)
        }
        fn leave(&self, s: &SessionId, g: &Name) -> Result<()> {
            self.inner.leave(s, g)
        }
        fn members(&self, g: &Name) -> Result<Vec<Member>> {
            self.inner.members(g)
        }
        fn semaphore_limit(&self, n: &Name, p: Option<u32>) -> Result<Option<u32>> {
            self.inner.semaphore_limit(n, p)
        }
        fn call_bound(&self) -> Option<Duration> {
            self.inner.call_bound()
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities { push_release: true, push_membership: false, watch_checks_lease: false, list: false }
        }
        fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
            let second = {
                let mut w = self.watchers.registered.lock();
                let list = w.entry(topic.clone()).or_default();
                let count = match list.iter_mut().find(|(s, _)| s.same_channel(notify)) {
                    Some((_, n)) => {
                        *n += 1;
                        *n
                    }
                    None => {
                        list.push((notify.clone(), 1));
                        1
                    }
                };
                count == 2
            };
            let target = self.target.lock().as_ref().map(|t| t.0.clone());
            if let (true, Topic::Lease(name), Some(t)) = (second, topic, target) {
                if name == &t {
                    self.watchers.hint(name);
                }
            }
            Ok(true)
        }
    }

    #[test]
    fn a_release_right_after_a_busy_attempt_is_not_missed() {
        let backend = Arc::new(OneShot {
            inner: MemoryBackend::new(),
            watchers: Arc::new(Watchers::default()),
            target: Mutex::new(None),
            busy_on_target: AtomicU32::new(0),
        });
        // A poll would retry after at least 3 s (renew_interval / 2).
        let options = SessionOptions::builder()
            .lease_duration(Duration::from_secs(12))
            .renew_interval(Duration::from_secs(6))
            .query_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        let holder = Session::open(backend.clone(), options.clone()).unwrap();
        let waiter = Session::open(backend.clone(), options).unwrap();
        let p = holder.semaphore("s", 1).unwrap().acquire().unwrap();
        *backend.target.lock() = Some((p.lease_name().clone(), holder.id().clone(), p.granted_token()));
        let started = Instant::now();
        let got = waiter.semaphore("s", 1).unwrap().acquire_timeout(Duration::from_secs(10)).unwrap();
        let took = started.elapsed();
        let got = got.expect("the waiter never got the permit");
        assert!(backend.busy_on_target.load(Ordering::SeqCst) >= 2, "the race was not forced");
        assert!(got.granted_token() > p.granted_token());
        assert!(took < Duration::from_millis(1500), "the pushed release was missed: the waiter polled ({took:?})");
    }
}
