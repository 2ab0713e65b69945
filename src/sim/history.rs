//! The recorded history of a run: what the backend did (by its own clock), what each client's
//! engine concluded, which `token()` calls would have succeeded, and the faults injected.
//!
//! Sessions are named by a run-wide label (`s0`, `s1`, …, in order of creation) instead of their
//! random ids, so two runs of one seed record identical histories.

use std::fmt;
use std::time::Duration;

use crate::state::LossReason;
use crate::types::{Name, Token};

/// One entry of the history: an [`Event`] at simulated real time `t` (ns since the run started).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Record {
    /// Simulated real time, ns since the start of the run.
    pub t: u64,
    /// What happened.
    pub event: Event,
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:>10.3}ms {:?}", self.t as f64 / 1e6, self.event)
    }
}

/// Something that happened during a run.
///
/// Backend events carry the node (`node`, 0 for the memory backend) and the node's clock reading
/// `b` (ns) when the operation took effect; `until` is a node-clock instant (ns) when what was
/// granted or renewed runs out without another renewal. Client events carry the client index and
/// the session label.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Event {
    /// The run's clocks: per-client and per-node rates in parts per million off 1.0.
    Setup {
        /// Client clock rates (ppm off 1.0).
        client_ppm: Vec<i64>,
        /// Node clock rates (ppm off 1.0).
        node_ppm: Vec<i64>,
    },
    /// The backend created session `sess`.
    Opened {
        /// Node holding the session.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Node-clock instant of expiry.
        until: u64,
    },
    /// The backend renewed session `sess` (its own record, not yet its leases).
    Renewed {
        /// Node holding the session.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// New node-clock expiry.
        until: u64,
    },
    /// The backend found session `sess` alive for an acquire (the acquire's session check).
    SessionChecked {
        /// Node holding the session.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
    },
    /// The backend refused a call because session `sess` is gone (expired or unknown).
    Refused {
        /// Node holding the session.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
    },
    /// The backend granted `name` to `sess` (a new term, or the same term again).
    Granted {
        /// Node holding the lease.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
        /// The term's token.
        token: Token,
        /// Node-clock instant the term runs out without renewal.
        until: u64,
    },
    /// An acquire found `name` held by another live session.
    Busy {
        /// Node holding the lease.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
    },
    /// The backend extended `sess`'s term of `name` (a renewal).
    Extended {
        /// Node holding the lease.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
        /// The term's token.
        token: Token,
        /// New node-clock instant the term runs out.
        until: u64,
    },
    /// A release of `name` by `sess` took effect (frees it if `sess` holds it and, when `token`
    /// is given, only that term).
    Released {
        /// Node holding the lease.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
        /// Only this term, or any term of `sess`.
        token: Option<Token>,
    },
    /// Session `sess` was deleted (closed). `frees_leases`: its leases are freed with it (memory);
    /// otherwise releases follow as separate [`Event::Released`] (Cluster).
    Deleted {
        /// Node holding the session.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Whether the deletion also freed the session's leases.
        frees_leases: bool,
    },
    /// Fault: the node lost all its data (restart without persistence, failover to a stale replica).
    DataLoss {
        /// The node.
        node: u8,
    },
    /// Fault: the node's clock stepped by `by_ns` (negative: back).
    ClockJump {
        /// The node.
        node: u8,
        /// Step in ns.
        by_ns: i64,
    },
    /// Fault: the client process stops until `until` (real time, ns): no polls, no replies handled.
    Pause {
        /// Client index.
        client: u8,
        /// Real time it resumes.
        until: u64,
    },
    /// Fault: messages between the client and `node` (all nodes when `None`) are dropped until `until`.
    Partition {
        /// Client index.
        client: u8,
        /// The node cut off, or all.
        node: Option<u8>,
        /// Real time the partition heals.
        until: u64,
    },
    /// The client's engine started on session `sess`.
    SessionStarted {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
    },
    /// The engine adopted an acquire's term.
    Adopted {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
        /// The term's token.
        token: Token,
    },
    /// A keep-alive reply was fed to the engine, listing what the backend reported owned.
    Owned {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// The reported leases and tokens.
        owned: Vec<(Name, Token)>,
    },
    /// The engine declared a lease lost.
    Lost {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
        /// The lost term's token.
        token: Token,
        /// Why.
        reason: LossReason,
    },
    /// The engine declared the session expired.
    Expired {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
    },
    /// The application is about to call `close()` on the session (recorded after a last sample,
    /// before the call). `close()` ends the session's memberships in the engine before any
    /// backend call, so from here none of them is claimed: a read that misses one after the
    /// close's delete is not a lost membership, whatever the next sample records.
    Closing {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
    },
    /// The application closed the session.
    Closed {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
    },
    /// From now on `Engine::token(name)` succeeds for this client's session (sampled).
    ValidStart {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
        /// The token `token()` returns.
        token: Token,
    },
    /// From now on `Engine::token(name)` fails for this client's session (sampled).
    ValidEnd {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Lease.
        name: Name,
    },
    /// The backend added `sess` to `group` (or found it a member already).
    Joined {
        /// Node.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
    },
    /// A leave of `group` by `sess` took effect (a no-op when it was not a member).
    Left {
        /// Node.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
    },
    /// A `members(group)` read that listed `members` returned to its caller only after the
    /// query timeout (a stalled or late reply): the caller had given up on it.
    MembersReplyLate {
        /// Group.
        group: Name,
        /// Session labels the read listed (sorted).
        members: Vec<u32>,
    },
    /// A `members(group)` read failed by an injected fault (a call of it failed, stalled past
    /// the deadline, lost its reply, or was partitioned away): its caller got an error, not an
    /// answer.
    MembersReadFailed {
        /// Group.
        group: Name,
    },
    /// The backend evaluated a `members(group)` read and returned these sessions.
    MembersRead {
        /// Node.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// The reading client.
        client: u8,
        /// Group.
        group: Name,
        /// Session labels listed (sorted).
        members: Vec<u32>,
    },
    /// The backend evaluated a `holder(name)` read (`leader()`): `(session, token, remaining ns)`.
    HolderRead {
        /// Node.
        node: u8,
        /// Node clock (ns).
        b: u64,
        /// The reading client.
        client: u8,
        /// Lease.
        name: Name,
        /// The holder reported, if any.
        holder: Option<(u32, Token, u64)>,
    },
    /// A `join` returned to the application: it now holds a `Membership`.
    JoinReturned {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
    },
    /// The application left `group` (`Membership::leave`, or dropping it when `wait` is false).
    Leaving {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
        /// `leave()` (waits for the backend) or drop (background).
        wait: bool,
    },
    /// From now on `Membership::is_member()` is true for this client's handle (sampled).
    MemberStart {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
    },
    /// The session's engine found the membership missing from a keep-alive's report
    /// (`Event::MembershipLost`); it re-joins.
    MembershipLost {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
    },
    /// From now on `Membership::is_member()` is false for this client's handle (sampled).
    MemberEnd {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Group.
        group: Name,
    },
    /// A pushed release notification reached the client.
    Notified {
        /// Client index.
        client: u8,
        /// Lease.
        name: Name,
    },
    /// A campaign made the client leader (`ElectionShared::elected`).
    Elected {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Election (lease) name.
        name: Name,
        /// The term's token.
        token: Token,
    },
    /// The application resigned its campaign.
    Resigned {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// Election (lease) name.
        name: Name,
    },
    /// What one of the application's leader tasks (`Election::run_while_leader`) did (shipped-runtime
    /// simulation only).
    LeaderTask {
        /// Client index.
        client: u8,
        /// The task (run-wide number).
        task: u64,
        /// Election (lease) name.
        name: Name,
        /// What happened.
        what: TaskStep,
    },
    /// What one of the application's member watches (`Session::watch_members`) did (shipped-runtime
    /// simulation only).
    Watch {
        /// Client index.
        client: u8,
        /// The watch (run-wide number).
        watch: u64,
        /// Group.
        group: Name,
        /// What happened.
        what: WatchStep,
    },
    /// The seed's outage: every backend call fails between these real instants (ns).
    Outage {
        /// Real time it starts.
        from: u64,
        /// Real time it ends.
        until: u64,
    },
    /// The run's teardown begins: from now on every call completes at once and the clock jumps far
    /// ahead, so bounded waits (a task's exit, a watcher's latency) are not checked past it.
    Teardown,
    /// A backend call of session `sess` met an injected fault (shipped-runtime simulation): its
    /// request was lost, refused (outage, partition), stalled, delivered late, or its reply was
    /// lost or late. Recorded under the history lock with the call's effect (if it had one),
    /// before it; `until` (real ns) is when the fault is over for the caller: the instant the
    /// call returns to it or its effect lands, whichever is later. `sess` is `None` when the
    /// call names no session the simulation knows (every session counts as touched). The
    /// liveness invariant `no-spurious-loss` excuses a session's losses from here until its next
    /// clean renewal after `until`. (The checker reads every fault before judging: one recorded
    /// late still covers the losses from `from` on.)
    CallFault {
        /// Session label, or `None`: any session.
        sess: Option<u32>,
        /// Real time (ns) the call was made (a script delivered late is recorded when it lands).
        from: u64,
        /// What happened to the call (`failed`, `outage`, `partitioned`, `stalled`,
        /// `lost-reply`, `late-reply`, `slow-reply`, `late-delivery`, `late-landed`).
        what: &'static str,
        /// Real time (ns) the fault is over for the caller.
        until: u64,
    },
    /// The application's handle on something its session holds ended without the application
    /// ending it (sampled): `token()` of a lease or an election turned from Ok to failing, or
    /// `is_member()` from true to false, while the handle was registered (held). Recorded after
    /// the same sample's `ValidEnd`/`MemberEnd`. (A session's own end is `Event::Expired`.)
    HeldLost {
        /// Client index.
        client: u8,
        /// Session label.
        sess: u32,
        /// What was lost.
        what: Held,
        /// The lease, election or group.
        name: Name,
    },
    /// What a member of a partition set (`simba::partitions`) did or was told (shipped-runtime
    /// simulation, `Workload::Partitions`). Its partitions' `token()` answers are sampled as
    /// [`Event::ValidStart`]/[`Event::ValidEnd`] of their lease names (`simba.part:<set>:<i>`),
    /// like any lease's.
    PartitionSet {
        /// Client index.
        client: u8,
        /// The member's `Partitions` handle (run-wide number).
        member: u64,
        /// Session label: the member's session (a coordinator's member: the session of the term
        /// a partition step names, else its current session).
        sess: u32,
        /// The set's name.
        set: Name,
        /// What happened.
        what: PartStep,
    },
    /// The node's clock read `b` (ns) at this point of the history: the shipped-runtime
    /// simulation records it after each clock step's sample, so `token-in-term` is judged at
    /// instants no backend call marks.
    NodeClock {
        /// The node.
        node: u8,
        /// Node clock (ns).
        b: u64,
    },
}

/// What an [`Event::HeldLost`] lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Held {
    /// A lease (`Lease::token()` fails).
    Lease,
    /// Leadership (`Election::token()` fails).
    Leadership,
    /// A membership (`Membership::is_member()` false).
    Membership,
}

/// A step of a leader task ([`Event::LeaderTask`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TaskStep {
    /// `run_while_leader` returned: the task runs for the election of session `sess` (`durable`: a
    /// `Coordinator`'s election, which moves to new sessions).
    Started {
        /// Session label.
        sess: u32,
        /// A coordinator's election.
        durable: bool,
    },
    /// The task's closure ran and, under the history lock right after a sample of every handle, read
    /// `LeaderContext::is_cancelled()` then `LeaderContext::token()`.
    Work {
        /// The election's session now (label).
        sess: u32,
        /// `LeaderContext::granted_token()`.
        granted: Token,
        /// What `is_cancelled()` answered (read first).
        cancelled: bool,
        /// What `token()` answered (read second), if Ok.
        token: Option<Token>,
        /// The election's handle is still sampled (its `token()` answer is in the same sample).
        registered: bool,
    },
    /// `Election::resign()` returned, or dropping the election did.
    ElectionEnded,
    /// Dropping the `LeaderTask` returned (it asks the task to stop, without waiting).
    Dropped,
    /// `LeaderTask::stop()` returned (it waits for the closure's current call).
    Stopped,
    /// The task's thread ended (its closure was dropped).
    Exited,
}

/// A step of a partition set member ([`Event::PartitionSet`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum PartStep {
    /// `partitions_with` returned: the member joined the set of `count` partitions, with this drain
    /// period (ns).
    Opened {
        /// The set's partition count.
        count: u32,
        /// The member's drain period (ns).
        drain: u64,
    },
    /// `PartitionEvent::Assigned`.
    Assigned {
        /// The partition.
        partition: u32,
        /// The term's token.
        token: Token,
    },
    /// `PartitionEvent::Revoking`.
    Revoking {
        /// The partition.
        partition: u32,
    },
    /// `PartitionEvent::Revoked`.
    Revoked {
        /// The partition.
        partition: u32,
    },
    /// `PartitionEvent::Lost`.
    Lost {
        /// The partition.
        partition: u32,
        /// Why.
        reason: LossReason,
    },
    /// `Partitions::owned()` changed: the partitions it lists now (sampled).
    Owned {
        /// Partition indices, ascending.
        owned: Vec<u32>,
    },
    /// The application called `Partition::release()` on a partition being revoked (its drain
    /// ended early).
    ReleaseEarly {
        /// The partition.
        partition: u32,
    },
    /// The application is about to `close()` the member (`wait`) or drop it (recorded after a
    /// last sample, before the call).
    Closing {
        /// `close()` (waits for the leave and the releases) or drop (background).
        wait: bool,
    },
}

/// A step of a member watch ([`Event::Watch`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WatchStep {
    /// `watch_members` returned, on session `sess` (`None`: a `Coordinator`'s watch).
    Started {
        /// Session label.
        sess: Option<u32>,
    },
    /// The application received a `GroupChange` (session labels, sorted).
    Change {
        /// `GroupChange::members`.
        members: Vec<u32>,
        /// `GroupChange::joined`.
        joined: Vec<u32>,
        /// `GroupChange::left`.
        left: Vec<u32>,
    },
    /// A receive reported the watcher stopped (its session ended).
    Disconnected,
    /// The application dropped the watch.
    Dropped,
}

pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX / 4)
}
