//! Partition sets: `count` partitions of a piece of work spread over the live members, each
//! partition owned by at most one of them at a time and carrying its own fencing token (SPEC §13;
//! the guide is `docs/partitions.md`).
//!
//! A partition set `P` with `count` = N has N partitions `0 ≤ i < N`. Partition `i` is an ordinary
//! lease whose name is reserved for it, `simba.part:P:i` ([`PARTITION_NAME_PREFIX`] + `P` + `:` +
//! `i`), and owning it is holding a term of that lease. Every lease guarantee therefore holds for a
//! partition unchanged, on every backend: at most one owner at any backend instant (**exclusive**),
//! renewed by the session's one keep-alive, a token > 0 that strictly increases with every new
//! owner and never resets, and [`Partition::token`] is the same no-I/O guard as
//! [`Lease::token`](crate::Lease::token). A resource fences on the partition's lease name
//! ([`Partition::fence_resource`]) and rejects a stale owner's writes.
//!
//! **Who owns what.** The members are the sessions that opened the set (the group `simba.part:P`),
//! each counted once it has been seen for the settle period ([`PartitionOptions::settle`]). Every
//! member computes the same target from the counted members and the partitions' current owners
//! (a sticky, bounded-load rendezvous assignment: the engine's `partitions` rule) and claims only
//! the partitions the target gives it:
//! - **balanced**: once membership is stable, no member owns more than ⌈count / members⌉ (or the
//!   [maximum per member](PartitionOptions::max_per_member));
//! - **sticky**: a join moves only partitions of members above the new cap, to the joiner first
//!   (all of them to it when the members were spread evenly, at most ⌈count / members⌉); a
//!   leave or a crash moves only the leaver's partitions;
//! - **covered**: once membership is stable, every partition is owned within one lease duration
//!   plus the drain period plus one hand-off.
//!
//! **Hand-off is release-before-claim.** An owner whose partition the target gives to another
//! member is told [`PartitionEvent::Revoking`] with a deadline (now + the
//! [drain period](PartitionOptions::drain)); it keeps the partition — its token stays valid —
//! until it calls [`Partition::release`] or the deadline passes, then the set releases it
//! ([`PartitionEvent::Revoked`]) and the next owner, registered for the release, takes it (at once
//! where the backend pushes releases). A partition lost by a fault (its lease lost, the session
//! expired) is [`PartitionEvent::Lost`]. Members that disagree about the member list for a while
//! compute different targets: that costs time, never exclusivity.
//!
//! **The count is stored** with the set on first use (like a semaphore's limit, under the name
//! `simba.part:P`); opening the set with another count is [`ErrorKind::InvalidConfig`] naming both.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use simba::partitions::PartitionEvent;
//! use simba::{MemoryBackend, Session, SessionOptions};
//!
//! # fn main() -> simba::Result<()> {
//! let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
//! let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
//! let shards = session.partitions("orders", 4)?;
//! let events = shards.events();
//! // Alone, this member is assigned every partition.
//! let mut assigned = Vec::new();
//! while assigned.len() < 4 {
//!     match events.recv_timeout(Duration::from_secs(10)) {
//!         Ok(PartitionEvent::Assigned { partition, .. }) => assigned.push(partition),
//!         Ok(_) => {}
//!         Err(e) => panic!("no assignment: {e}"),
//!     }
//! }
//! for p in shards.owned() {
//!     let token = p.token()?; // right before each write; fence on p.fence_resource()
//!     assert!(token.get() > 0);
//! }
//! shards.close()?;
//! # Ok(())
//! # }
//! ```

mod driver;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::backend::LeaseBackend;
use crate::backend::Notification;
use crate::error::{Error, ErrorKind, Result};
use crate::events::{Events, Subscribers};
use crate::handles::lease::Lease;
use crate::handles::semaphore::{digits, stored_limit, Counted, Source};
use crate::runtime::SessionInner;
use crate::state::LossReason;
use crate::status::{OwnedPartition, PartitionsStatus};
use crate::sync::{self, thread, Mutex};
use crate::types::{user_name, IntoName, Name, SessionId, Token, MAX_NAME_LEN, PARTITION_NAME_PREFIX};
use crossbeam_channel::Sender;

/// Most partitions a set may have. Every member reads the owner of each partition when the
/// membership changes, so a set is meant for tens to hundreds of partitions.
pub const MAX_PARTITIONS: u32 = 1000;

/// Longest partition set name, in characters: what leaves room in the 128-character name limit
/// for the partition lease names (`simba.part:` + name + `:` + a partition below [`MAX_PARTITIONS`]).
pub const MAX_PARTITION_SET_NAME_LEN: usize =
    MAX_NAME_LEN - PARTITION_NAME_PREFIX.len() - 1 - digits(MAX_PARTITIONS - 1);

/// The default [drain period](PartitionOptions::drain).
pub const DEFAULT_DRAIN: Duration = Duration::from_secs(5);

const COUNT: Counted = Counted { what: "partition set", unit: "partitions", max: MAX_PARTITIONS };

/// Validates a partition set name: the lease naming rule, no reserved prefix, at most
/// [`MAX_PARTITION_SET_NAME_LEN`] characters.
fn set_name(name: impl IntoName) -> Result<Name> {
    let name = user_name(name)?;
    let len = name.as_str().chars().count();
    if len > MAX_PARTITION_SET_NAME_LEN {
        return Err(Error::new(
            ErrorKind::InvalidName,
            format!(
                "invalid partition set name '{name}': {len} characters is too long; partition set names are at \
                 most {MAX_PARTITION_SET_NAME_LEN} characters of [A-Za-z0-9._:-] (room for the partition lease \
                 names '{PARTITION_NAME_PREFIX}<name>:<partition>' within {MAX_NAME_LEN})"
            ),
        ));
    }
    Ok(name)
}

/// The lease name (and fence resource) of partition `index` of set `name`: `simba.part:<name>:<index>`.
///
/// # Errors
/// `InvalidName` when `name` is no valid partition set name; `InvalidConfig` when `index` is not
/// below [`MAX_PARTITIONS`].
pub fn fence_resource(name: impl IntoName, index: u32) -> Result<Name> {
    let name = set_name(name)?;
    if index >= MAX_PARTITIONS {
        return Err(Error::config(format!(
            "partition set '{name}': partition {index} is out of range; partitions are 0 to {}",
            MAX_PARTITIONS - 1
        )));
    }
    Name::new(format!("{PARTITION_NAME_PREFIX}{name}:{index}"))
}

/// The partition set and index a partition lease name belongs to (`simba.part:P:i` → `(P, i)`),
/// e.g. to explain a [`SessionEvent::LeaseLost`](crate::SessionEvent); `None` for any other name.
pub fn partition_of(lease: &Name) -> Option<(Name, u32)> {
    let rest = lease.as_str().strip_prefix(PARTITION_NAME_PREFIX)?;
    let (name, index) = rest.rsplit_once(':')?;
    if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) || (index.len() > 1 && index.starts_with('0')) {
        return None;
    }
    let index: u32 = index.parse().ok()?;
    let name = set_name(name).ok()?;
    (index < MAX_PARTITIONS).then_some((name, index))
}

/// How a member of a partition set behaves. `Default` is a drain period of [`DEFAULT_DRAIN`], no
/// settle period and no maximum per member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionOptions {
    drain: Duration,
    settle: Duration,
    max_per_member: Option<u32>,
}

impl Default for PartitionOptions {
    fn default() -> PartitionOptions {
        PartitionOptions { drain: DEFAULT_DRAIN, settle: Duration::ZERO, max_per_member: None }
    }
}

impl PartitionOptions {
    /// How long an owner told [`PartitionEvent::Revoking`] keeps the partition before the set
    /// releases it for the next owner (ended early by [`Partition::release`]). `Duration::MAX`:
    /// until released.
    #[must_use]
    pub fn drain(mut self, drain: Duration) -> PartitionOptions {
        self.drain = drain;
        self
    }

    /// How long a newly seen member must stay before it is counted (flap damping: a member that
    /// joins and leaves within it moves nothing). A member always counts itself at once, and the
    /// members already there when it joins (the first member list it sees) at once too.
    #[must_use]
    pub fn settle(mut self, settle: Duration) -> PartitionOptions {
        self.settle = settle;
        self
    }

    /// The most partitions one member is assigned (below ⌈count / members⌉ it leaves partitions
    /// unowned when there are too few members). At least 1.
    #[must_use]
    pub fn max_per_member(mut self, max: u32) -> PartitionOptions {
        self.max_per_member = Some(max);
        self
    }

    /// The drain period.
    pub fn drain_period(&self) -> Duration {
        self.drain
    }

    /// The settle period.
    pub fn settle_period(&self) -> Duration {
        self.settle
    }

    /// The maximum per member, if any.
    pub fn max_partitions_per_member(&self) -> Option<u32> {
        self.max_per_member
    }
}

/// Something that happened to this member's partitions. Every event carries the assignment
/// generation it was decided in: the number of member lists this member has counted so far (it
/// grows by one whenever the counted members change).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionEvent {
    /// This member owns `partition` now, in the term of `token`.
    Assigned {
        /// The partition.
        partition: u32,
        /// The new term's token.
        token: Token,
        /// The assignment generation.
        generation: u64,
    },
    /// The assignment gives `partition` to another member: finish or hand off its work and call
    /// [`Partition::release`], or the set releases it at `deadline`. Its token stays valid until then.
    Revoking {
        /// The partition.
        partition: u32,
        /// The term being revoked.
        token: Token,
        /// When the set releases it.
        deadline: Instant,
        /// The assignment generation.
        generation: u64,
    },
    /// `partition` was handed off as planned (released after `Revoking`, or by [`Partition::release`],
    /// or by [`Partitions::close`]).
    Revoked {
        /// The partition.
        partition: u32,
        /// The term released.
        token: Token,
        /// The assignment generation.
        generation: u64,
    },
    /// `partition` was lost by a fault (its lease lost, the session expired or closed); its token
    /// already fails.
    Lost {
        /// The partition.
        partition: u32,
        /// The term lost.
        token: Token,
        /// Why.
        reason: LossReason,
        /// The assignment generation.
        generation: u64,
    },
}

/// An owned partition, in this member's driver state.
struct Owned {
    lease: Lease,
    /// The session the term was taken on (a coordinator's changes).
    session: Arc<SessionInner>,
    revoking: Option<Instant>,
}

/// What the member's driver and its handles share.
#[derive(Default)]
struct State {
    owned: BTreeMap<u32, Owned>,
    /// Partitions whose release is in flight on a caller's thread: not claimed again until it returns.
    releasing: BTreeSet<u32>,
    generation: u64,
    members: Vec<SessionId>,
    stopped: bool,
}

pub(crate) struct Shared {
    name: Name,
    leases: Arc<[Name]>,
    group: Name,
    options: PartitionOptions,
    /// Where the member's session comes from: a session, or a coordinator's current one.
    source: Source,
    st: Mutex<State>,
    events: Subscribers<PartitionEvent>,
    /// The driver's channel: pushed releases, and pokes (a release here, a stop).
    notify: Sender<Notification>,
}

impl Shared {
    /// Writes a hand-off line with its key-value fields (`set`, `partition`, `token`, `session`,
    /// `generation`); call it with no lock held.
    fn log(&self, level: log::Level, what: &str, partition: u32, token: Token, session: &SessionId, generation: u64) {
        let message = format!(
            "partition set '{}': partition {partition} (token {token}) {what} on session {session}, generation {generation}",
            self.name
        );
        crate::runtime::log_kv(
            level,
            &message,
            &[
                ("set", self.name.to_string()),
                ("partition", partition.to_string()),
                ("token", token.to_string()),
                ("session", session.to_string()),
                ("generation", generation.to_string()),
            ],
        );
    }

    fn count(&self) -> u32 {
        u32::try_from(self.leases.len()).unwrap_or(u32::MAX)
    }

    fn index_of(&self, lease: &Name) -> Option<u32> {
        let i = self.leases.iter().position(|n| n == lease)?;
        u32::try_from(i).ok()
    }

    /// Releases `index` if this member still owns it in the term of `token`, and reports it
    /// `Revoked`. The release runs on this thread, off every lock; the partition is not claimed
    /// again until it returned.
    fn release(&self, index: u32, token: Token) -> Result<()> {
        let (lease, session) = {
            let mut st = self.st.lock();
            match st.owned.get(&index) {
                Some(o) if o.lease.granted_token() == token => {}
                _ => return Ok(()),
            }
            st.releasing.insert(index);
            match st.owned.remove(&index) {
                Some(o) => (Some(o.lease), Some(o.session)),
                None => (None, None),
            }
        };
        let result = lease.map_or(Ok(()), Lease::release);
        let generation = {
            let mut st = self.st.lock();
            st.releasing.remove(&index);
            let generation = st.generation;
            let (revoked, lost) = (PartitionEvent::Revoked { partition: index, token, generation }, lost(token));
            let event = sync::pick_with(sync::Bug::PartitionRevokedAsLost, || lost(index, generation), || revoked);
            self.events.emit(&event);
            generation
        };
        if let Some(s) = session {
            self.log(log::Level::Info, "handed off (revoked)", index, token, &s.id, generation);
        }
        let _ = self.notify.send(Notification::Released(self.leases[index as usize].clone()));
        result
    }
}

/// A partition this member owns: a view of its term. Consult [`token`](Partition::token) before
/// every write to the partition's resource and pass the token to it, fencing on
/// [`fence_resource`](Partition::fence_resource). Cheap to clone; dropping it changes nothing (the
/// set owns the term).
#[derive(Clone)]
pub struct Partition {
    shared: Arc<Shared>,
    session: Arc<SessionInner>,
    index: u32,
    token: Token,
    revoking: Option<Instant>,
}

impl fmt::Debug for Partition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Partition")
            .field("set", &self.shared.name)
            .field("index", &self.index)
            .field("token", &self.token)
            .field("revoking", &self.revoking)
            .finish()
    }
}

impl Partition {
    /// The partition's index, `0..count`.
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The lease name of the partition (`simba.part:<set>:<index>`).
    pub fn lease_name(&self) -> &Name {
        &self.shared.leases[self.index as usize]
    }

    /// The resource name to fence the partition's writes on: its lease name.
    pub fn fence_resource(&self) -> &Name {
        self.lease_name()
    }

    /// The fencing token of this term, if the partition is still owned (no I/O; the same guard as
    /// [`Lease::token`](crate::Lease::token)).
    ///
    /// # Errors
    /// `LeaseLost` once the partition may no longer be ours (lost, released, or past its local deadline).
    pub fn token(&self) -> Result<Token> {
        self.session.lease_token(self.lease_name(), self.token)
    }

    /// The session the term was taken on (a coordinator's member changes sessions).
    pub fn session_id(&self) -> &SessionId {
        &self.session.id
    }

    /// The token this term was granted with, held or not (for logs).
    pub fn granted_token(&self) -> Token {
        self.token
    }

    /// When the snapshot was taken: the deadline of a [`Revoking`](PartitionEvent::Revoking) in
    /// progress, if any.
    pub fn revoking_deadline(&self) -> Option<Instant> {
        self.revoking
    }

    /// Hands the partition on now: ends a drain early (after `Revoking`), or gives up a partition
    /// still assigned to this member (which claims it again, in a new term). Reported
    /// [`Revoked`](PartitionEvent::Revoked); the token fails from this call on. Nothing happens when
    /// this term is no longer owned. Waits at most the query timeout, as [`Lease::release`](crate::Lease::release).
    ///
    /// # Errors
    /// `Timeout` or the backend's error; the partition is no longer ours locally either way.
    pub fn release(self) -> Result<()> {
        self.shared.release(self.index, self.token)
    }
}

/// This member of a partition set: the partitions it owns, the events of their assignment, and a
/// driver thread that claims, drains and releases them. See the [module docs](crate::partitions).
///
/// Made by [`Session::partitions`](crate::Session::partitions) (a member for that session's life)
/// or [`Coordinator::partitions`](crate::Coordinator::partitions) (a member across session
/// replacements: the partitions of an expired session are reported `Lost`, then the member joins
/// again on the replacement and is assigned partitions anew). Dropping it releases every
/// partition it owns and leaves the set in the background; [`close`](Partitions::close) waits.
pub struct Partitions {
    shared: Arc<Shared>,
    driver: Option<thread::JoinHandle<Result<()>>>,
}

impl fmt::Debug for Partitions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let st = self.shared.st.lock();
        f.debug_struct("Partitions")
            .field("name", &self.shared.name)
            .field("count", &self.shared.count())
            .field("owned", &st.owned.keys().collect::<Vec<_>>())
            .field("generation", &st.generation)
            .finish()
    }
}

impl Partitions {
    /// Validates, stores or checks the count, joins the set's group on `source`'s session and
    /// starts the driver.
    pub(crate) fn open(
        source: Source,
        backend: &Arc<dyn LeaseBackend>,
        query_timeout: Duration,
        name: impl IntoName,
        count: u32,
        options: PartitionOptions,
    ) -> Result<Partitions> {
        let name = set_name(name)?;
        validate(&name, count, &options)?;
        let leases = (0..count).map(|i| fence_resource(&name, i)).collect::<Result<Vec<_>>>()?;
        let group = Name::new(format!("{PARTITION_NAME_PREFIX}{name}"))?;
        let session = source.session()?;
        stored_limit(backend, query_timeout, &group, &name, &COUNT, Some(count))?;
        let (notify, notes) = crossbeam_channel::unbounded();
        let shared = Arc::new(Shared {
            name,
            leases: leases.into(),
            group,
            options,
            source: source.clone(),
            st: Mutex::new(State::default()),
            events: Subscribers::new(),
            notify: notify.clone(),
        });
        let driver = driver::start(shared.clone(), &session, notify, notes).map_err(|e| source.error(e))?;
        Ok(Partitions { shared, driver: Some(driver) })
    }

    /// The set's name.
    pub fn name(&self) -> &Name {
        &self.shared.name
    }

    /// The number of partitions.
    pub fn count(&self) -> u32 {
        self.shared.count()
    }

    /// The options this member runs with.
    pub fn options(&self) -> &PartitionOptions {
        &self.shared.options
    }

    /// The partitions this member owns now (a snapshot, by index), those being revoked included.
    /// A partition whose token already fails (its term lost, past its local deadline) is not
    /// listed, even before its [`Lost`](PartitionEvent::Lost) event is out.
    pub fn owned(&self) -> Vec<Partition> {
        let st = self.shared.st.lock();
        st.owned
            .iter()
            .filter(|(_, o)| o.lease.is_held())
            .map(|(&index, o)| Partition {
                shared: self.shared.clone(),
                session: o.session.clone(),
                index,
                token: o.lease.granted_token(),
                revoking: o.revoking,
            })
            .collect()
    }

    /// The members this member counts now (sorted by session id, itself included).
    pub fn members(&self) -> Vec<SessionId> {
        self.shared.st.lock().members.clone()
    }

    /// A snapshot of this member (no I/O): the counted members, the generation, and every owned
    /// partition with its token, time to its local deadline and, while revoked, the drain left.
    pub fn status(&self) -> PartitionsStatus {
        let t = now();
        let st = self.shared.st.lock();
        let owned = st
            .owned
            .iter()
            .map(|(&index, o)| OwnedPartition {
                index,
                token: o.lease.granted_token(),
                remaining: o.lease.remaining(),
                revoking: o.revoking.map(|d| d.saturating_duration_since(t)),
            })
            .collect();
        PartitionsStatus {
            name: self.shared.name.clone(),
            count: self.shared.count(),
            generation: st.generation,
            members: st.members.clone(),
            owned,
        }
    }

    /// The current assignment generation (see [`PartitionEvent`]).
    pub fn generation(&self) -> u64 {
        self.shared.st.lock().generation
    }

    /// A new subscription to this member's partition events: first an
    /// [`Assigned`](PartitionEvent::Assigned) for every partition owned now, then every event after
    /// this call, in order.
    pub fn events(&self) -> Events<PartitionEvent> {
        let st = self.shared.st.lock();
        let now: Vec<PartitionEvent> = st
            .owned
            .iter()
            .map(|(&partition, o)| PartitionEvent::Assigned {
                partition,
                token: o.lease.granted_token(),
                generation: st.generation,
            })
            .collect();
        self.shared.events.subscribe(now)
    }

    /// Leaves the set: stops the driver (within one bounded backend call), leaves the group, then
    /// releases every partition this member owns (each reported [`Revoked`](PartitionEvent::Revoked)),
    /// so that the other members take them over at once.
    ///
    /// # Errors
    /// The first failure of the leave or a release (`Timeout`, the backend's error); everything is
    /// given up locally anyway, and what the backend still holds ends with the session.
    pub fn close(mut self) -> Result<()> {
        self.stop_and_release(true)
    }

    fn stop_and_release(&mut self, wait: bool) -> Result<()> {
        self.shared.st.lock().stopped = true;
        let _ = self.shared.notify.send(Notification::MembersChanged(self.shared.group.clone()));
        match self.driver.take() {
            // Dropped: the driver leaves and releases everything as it exits.
            Some(_) if !wait => Ok(()),
            Some(driver) => driver.join().unwrap_or_else(|_| {
                Err(Error::new(
                    ErrorKind::Unavailable,
                    format!("partition set '{}': the driver thread panicked", self.shared.name),
                ))
            }),
            None => Ok(()),
        }
    }
}

impl Drop for Partitions {
    fn drop(&mut self) {
        let _ = self.stop_and_release(false);
    }
}

/// Checks `count` and `options` before any I/O.
fn validate(name: &Name, count: u32, options: &PartitionOptions) -> Result<()> {
    if count == 0 || count > MAX_PARTITIONS {
        return Err(Error::config(format!(
            "partition set '{name}': {count} partitions is out of range; a partition set has 1 to {MAX_PARTITIONS} partitions"
        )));
    }
    if options.max_per_member == Some(0) {
        return Err(Error::config(format!(
            "partition set '{name}': a maximum of 0 partitions per member would own nothing; the maximum is at least 1"
        )));
    }
    Ok(())
}

/// The broken rule `Bug::PartitionRevokedAsLost` (never shipped; the simulation's
/// `partition-live` must see it): a planned hand-off reported as a loss.
fn lost(token: Token) -> impl FnOnce(u32, u64) -> PartitionEvent {
    move |partition, generation| PartitionEvent::Lost { partition, token, reason: LossReason::NotOwned, generation }
}

/// Now, for the driver and the handles (one clock).
fn now() -> Instant {
    sync::now()
}
