//! The seeded simulation of the **shipped** runtime (issue #21 item 1).
//!
//! Built only with the `sim` and `explore` features **and** `--cfg simba_explore` (the schedule
//! explorer's seam, `src/sync.rs`): the real [`Session`](crate::Session), [`Lease`](crate::Lease),
//! [`Election`](crate::Election) and [`Membership`](crate::Membership) code, its renewal thread and
//! worker pool, run on shuttle threads with a virtual clock that only this simulation moves. One
//! seed fixes everything — shuttle's random scheduler is seeded with it and every random choice
//! (the workload, each backend call's fate, the clock steps) comes from the same source — so a seed
//! replays exactly.
//!
//! What runs:
//! - **backend** ([`backend`]): the real [`MemoryBackend`](crate::MemoryBackend) on the sim's
//!   [`VirtualClock`](super::clock::VirtualClock) (the node clock runs at a per-seed rate within the
//!   sessions' `drift`), behind a layer whose calls complete, fail (request lost), stall (take
//!   effect late), lose their reply (took effect, the caller gets an error at once or after its
//!   deadline) or reply late (after the caller's deadline), chosen per call by the seeded source;
//!   plus one outage per seed in which every call fails, long enough to expire sessions; and,
//!   where the scenario asks, partitions cutting one session off, joins/leaves/releases delivered
//!   after their call ended, and the premise breakers (data loss, a node clock beyond the drift,
//!   clock jumps) — a run records which premises it broke ([`Outcome::broken`]), so the
//!   violations they cause are explained ([`Outcome::unexplained`]); or, with
//!   [`Scenario::cluster`] (feature `sim-redis`), the shipped Redis backend in Cluster mode over
//!   three simulated nodes that run the shipped Lua scripts in a real Lua 5.1 interpreter (see
//!   `sim::shipped::redis`);
//! - **clients** ([`clients`]): 2–4 user threads, each with its own session on the real API
//!   (`try_lock`, `lock_timeout`, `release`/drop, `campaign`, `resign`/drop, `join`,
//!   `leave`/drop, `members`, `leader`, `close`, reopening after expiry), concurrently with the
//!   sessions' renewal threads; leader tasks (`run_while_leader`, stopped or dropped before or after
//!   the election ends) on 30 % of the campaigns, and on 40 % of the seeds a watcher thread
//!   (`watch_members`, sometimes watching its own `join`);
//! - **history and checks**: the backend records its effects and the sampler records when
//!   `token()`, `is_leader()`, `is_member()` and `is_alive()` change, all in one total order (the
//!   history lock); the sim's checker ([`check`](super::check)) verifies its invariants (each
//!   naming its premises) over it, plus what the sampler checks directly (at most one
//!   `is_leader()` per name in a sample, `is_alive()` never true again, `leader()` never going
//!   backwards for one observer), and over the application's own records `leader-task`,
//!   `watch-live` and `watch-sees-join`.
//!
//! The run asserts nothing itself: [`run`] returns an [`Outcome`], `tests/sim_shipped.rs` sweeps
//! seeds and requires every fault class to have fired.

mod backend;
mod clients;
#[cfg(all(feature = "sim-redis", simba_explore))]
pub mod redis;

use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use backend::{below, unit, CallFaults, History, SimBackend};
use clients::Client;

use super::check::{check_renewing, Premise, Violation};
use super::history::{Event, Record};
use crate::options::SessionOptions;
use crate::sync::{self, thread, Bug};
use crate::types::Name;

/// What to simulate.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// A name for reports.
    pub name: String,
    /// Most clients per run (2..=this).
    pub max_clients: usize,
    /// Operations per client.
    pub ops: usize,
    /// The sessions' lease duration (renew interval and query timeout are a third of it).
    pub lease: Duration,
    /// Scales the per-call fault probabilities (1.0: up to 6 % each of failed, stalled,
    /// lost-reply and late-reply calls per seed).
    pub intensity: f64,
    /// A fixed bug switched back on for the run (`simba::explore::reintroduce`), or `None`.
    pub bug: Option<Bug>,
    /// What the user threads do.
    pub workload: Workload,
    /// The backend pushes notifications on half the seeds (`true`) or never (`false`).
    pub push: bool,
    /// Emulates the old SPI in the backend layer: a release frees whatever term the session holds
    /// (the design the term-scoped-release finding showed unsafe). Off by default.
    pub old_release_any_term: bool,
    /// Breaks `leader-task` in the application layer: a leader task's closure takes
    /// `LeaderContext::granted_token()` for what `token()` answered — what a `token()` that never
    /// re-checked its term would return. Off by default.
    pub unchecked_leader_token: bool,
    /// Breaks `watch-live` in the backend layer: `members` answers come from a snapshot of the
    /// group that is evaluated (and recorded) only when it is more than ten leases old — a lagging
    /// replica. Off by default.
    pub stale_member_reads: bool,
    /// Breaks `watch-sees-join` in the backend layer: every `members` call takes effect and loses
    /// its reply, so a watcher never receives a change — what a watcher that stopped reading would
    /// deliver. Off by default.
    pub member_replies_lost: bool,
    /// Breaks `no-zombie` in the application layer: the `Coordinator` node records its election
    /// resigned but keeps it campaigning — what a resign that left the campaign running (on this
    /// or a replacement session) would do. Off by default.
    pub resign_skipped: bool,
    /// The share of seeds in which one node has a watcher thread (`watch_members`; 0.4).
    pub watchers: f64,
    /// The backend: the shipped Redis backend in Cluster mode over three simulated nodes running
    /// the shipped Lua scripts (`true`, feature `sim-redis`; see `sim::shipped::redis`), or the memory backend
    /// (`false`).
    pub cluster: bool,
    /// Premise breaker (`premise:tokenReset`): the backend loses all its data once per seed, at
    /// a seeded instant 1–5 leases into the run (a restart without persistence: sessions,
    /// leases, groups and the token counter are gone). Off by default.
    pub data_loss: bool,
    /// Premise breaker (`premise:drift`): the node clock runs 2–8 × `drift` faster than the
    /// clients' instead of within the drift. Off by default.
    pub drift_beyond: bool,
    /// Premise breaker (`premise:clockJump`): the node clock steps 1–2 times per seed, at seeded
    /// instants, by ±(a tenth to two leases) (forward in 70 % of the jumps). Off by default.
    pub clock_jumps: bool,
    /// Late deliveries: a join, leave or release request (up to 6 % of them per seed) returns
    /// `Unavailable` at once and lands 0.2–1.5 leases later, after its call ended (a request
    /// still on its way when its caller gave up). Respects every premise. Off by default.
    pub late_deliveries: bool,
    /// Partitions: 1–3 per seed, at seeded instants within the first six leases, each cutting
    /// one of the newest sessions off the backend (all its calls fail) for 0.5–2 leases while
    /// the others go on. Respects every premise. Off by default.
    pub partitions: bool,
    /// The sessions renew every half lease (the longest `renew_interval` the options allow)
    /// instead of every third, and the clock driver's steps are at most a tenth of the lease
    /// (instead of a third): a term whose local deadline a keep-alive fails to extend runs out
    /// before the next one (finding 3 of issue #36), and is seen lost steps after that
    /// keep-alive; and a user thread's idle operation mostly waits for its session's next
    /// renewal to take effect and `try_lock`s right then, while that renewal's reply may still
    /// be on its way (the interleaving of finding 3). Off by default.
    pub half_renew: bool,
    /// Breaks `no-spurious-loss` in the backend layer: a keep-alive reply leaves out the first
    /// term it lists on a quarter of the replies, while the backend renewed it (what finding 1 of
    /// issue #36, a Redis Cluster renewal that did not list a valid term, did). Off by default.
    pub owned_omitted: bool,
    /// Breaks `bounded-calls` in the application layer: a node's second user thread retries a
    /// busy `try_lock` at once, up to 64 times — what a wait loop without a pause would do.
    /// Off by default.
    pub spin_try_lock: bool,
}

/// What the user threads do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Every operation: locks (`try_lock`, `lock_timeout`), campaigns, joins, `members`,
    /// `leader`, `close`, idling; a second user thread on half the sessions.
    Everything,
    /// Mostly campaigns held briefly and resigned, with the node's second thread `try_lock`ing the
    /// election's name on the same session (the race of finding 1); a second thread everywhere.
    Elections,
    /// The first node is always a `Coordinator` that mostly campaigns briefly and resigns, and
    /// every seed has an outage (the coordinator replaces its session while the application
    /// resigns: the race of finding 5).
    Coordinator,
    /// Partition sets (`simba::partitions`): every node is a member of one set (`P`, 3–8
    /// partitions, one drain period per run: 0, a quarter or half a lease) that it opens, holds
    /// (ending revoked partitions' drains early with `Partition::release` half the time), then
    /// closes or drops: the run's last node (the churner) holds it 4–8 leases and stays out 5–8,
    /// the others hold it 12–20 leases at a time; a node also closes its session now and then,
    /// and reopens one
    /// after an expiry. The first node is a `Coordinator` member on 40 % of the seeds (its member
    /// survives the session replacements of the outage). Network partitions cut members off (a
    /// crash, as far as the others can tell). The sampler asks every partition's `token()`
    /// (`exclusive-token`, `token-in-term`, `granted-only` cover the partition leases) and records
    /// the members' events and `owned()` snapshots (`partition-*` invariants).
    Partitions,
}

impl Scenario {
    /// The default: 2–4 clients, 8 operations each, a 3 s lease, every fault class.
    pub fn default_faults() -> Scenario {
        Scenario {
            name: "shipped".into(),
            max_clients: 4,
            ops: 8,
            lease: Duration::from_secs(3),
            intensity: 1.0,
            bug: None,
            workload: Workload::Everything,
            old_release_any_term: false,
            push: true,
            unchecked_leader_token: false,
            stale_member_reads: false,
            member_replies_lost: false,
            resign_skipped: false,
            watchers: 0.4,
            cluster: false,
            data_loss: false,
            drift_beyond: false,
            clock_jumps: false,
            late_deliveries: false,
            partitions: false,
            half_renew: false,
            owned_omitted: false,
            spin_try_lock: false,
        }
    }

    /// A watcher thread (`watch_members`, reading the group all along) on every seed.
    pub fn with_watchers(self) -> Scenario {
        self.tagged("watchers", |s| s.watchers = 1.0)
    }

    /// The same with [`Scenario::partitions`].
    pub fn with_partitions(self) -> Scenario {
        self.tagged("partitions", |s| s.partitions = true)
    }

    /// The same with [`Scenario::data_loss`].
    pub fn with_data_loss(self) -> Scenario {
        self.tagged("dataLoss", |s| s.data_loss = true)
    }

    /// The same with [`Scenario::drift_beyond`].
    pub fn with_drift_beyond(self) -> Scenario {
        self.tagged("driftBeyond", |s| s.drift_beyond = true)
    }

    /// The same with [`Scenario::clock_jumps`].
    pub fn with_clock_jumps(self) -> Scenario {
        self.tagged("clockJumps", |s| s.clock_jumps = true)
    }

    /// The same with [`Scenario::half_renew`].
    pub fn with_half_renew(self) -> Scenario {
        self.tagged("halfRenew", |s| s.half_renew = true)
    }

    /// The same with [`Scenario::owned_omitted`].
    pub fn with_owned_omitted(self) -> Scenario {
        self.tagged("ownedOmitted", |s| s.owned_omitted = true)
    }

    /// The same with [`Scenario::spin_try_lock`].
    pub fn with_spinning_try_lock(self) -> Scenario {
        self.tagged("spinTryLock", |s| s.spin_try_lock = true)
    }

    /// The same with [`Scenario::late_deliveries`].
    pub fn with_late_deliveries(self) -> Scenario {
        self.tagged("lateDeliveries", |s| s.late_deliveries = true)
    }

    /// The premises the scenario's faults break (a violation of an invariant resting on one of
    /// them is explained).
    pub fn broken_premises(&self) -> Vec<Premise> {
        let mut p = Vec::new();
        if self.data_loss {
            p.push(Premise::TokenReset);
        }
        if self.clock_jumps {
            p.push(Premise::ClockJump);
        }
        if self.drift_beyond {
            p.push(Premise::Drift);
        }
        p
    }

    /// The shipped Redis backend in Cluster mode over simulated nodes (feature `sim-redis`; see
    /// [`Scenario::cluster`]): every fault class of the Cluster model, the default workload.
    pub fn cluster() -> Scenario {
        Scenario { name: "shipped-cluster".into(), cluster: true, ..Scenario::default_faults() }
    }

    /// The backend never pushes (candidates poll).
    pub fn without_push(self) -> Scenario {
        self.tagged("noPush", |s| s.push = false)
    }

    /// A quarter of the per-call fault probabilities (up to 1.5 % each) and no network
    /// partitions: fewer faults end stable stretches, so more joins and leaves are judged.
    pub fn gentle(self) -> Scenario {
        self.tagged("gentle", |s| {
            s.intensity = 0.25;
            s.partitions = false;
        })
    }

    /// Three times the per-call fault probabilities (up to 18 % each).
    pub fn harsh(self) -> Scenario {
        self.tagged("harsh", |s| s.intensity = 3.0)
    }

    /// The same with the old SPI's release ([`Scenario::old_release_any_term`]).
    pub fn with_old_release_any_term(self) -> Scenario {
        self.tagged("oldRelease", |s| s.old_release_any_term = true)
    }

    /// The same with [`Scenario::unchecked_leader_token`].
    pub fn with_unchecked_leader_token(self) -> Scenario {
        self.tagged("uncheckedLeaderToken", |s| s.unchecked_leader_token = true)
    }

    /// The same with [`Scenario::resign_skipped`].
    pub fn with_resign_skipped(self) -> Scenario {
        self.tagged("resignSkipped", |s| s.resign_skipped = true)
    }

    /// The same with [`Scenario::stale_member_reads`].
    pub fn with_stale_member_reads(self) -> Scenario {
        self.tagged("staleMemberReads", |s| s.stale_member_reads = true)
    }

    /// The same with [`Scenario::member_replies_lost`], and a watcher thread on every seed (a
    /// watch must outlive the invariant's bound to show the loss).
    pub fn with_member_replies_lost(self) -> Scenario {
        self.tagged("memberRepliesLost", |s| {
            s.member_replies_lost = true;
            s.watchers = 1.0;
        })
    }

    /// The coordinator-focused workload ([`Workload::Coordinator`]), every fault class.
    pub fn coordinator() -> Scenario {
        Scenario { name: "shipped-coordinator".into(), workload: Workload::Coordinator, ..Scenario::default_faults() }
    }

    /// The partition-set workload ([`Workload::Partitions`]), every fault class plus network
    /// partitions ([`Scenario::partitions`]) cutting members off; no watcher thread.
    pub fn partition_sets() -> Scenario {
        Scenario {
            name: "shipped-partition-sets".into(),
            workload: Workload::Partitions,
            // The churner's operations (the others make a third as many, each holding the set longer).
            ops: 6,
            partitions: true,
            watchers: 0.0,
            ..Scenario::default_faults()
        }
    }

    /// The election-focused workload ([`Workload::Elections`]), every fault class.
    pub fn elections() -> Scenario {
        Scenario { name: "shipped-elections".into(), workload: Workload::Elections, ..Scenario::default_faults() }
    }

    /// The same with `+tag` appended to the name and `set` applied (every builder above).
    fn tagged(mut self, tag: &str, set: impl FnOnce(&mut Scenario)) -> Scenario {
        self.name = format!("{}+{tag}", self.name);
        set(&mut self);
        self
    }

    /// The same with `bug` switched back on.
    pub fn with_bug(mut self, bug: Bug) -> Scenario {
        self.name = format!("{}+{bug:?}", self.name);
        self.bug = Some(bug);
        self
    }
}

/// How often each fault class (and each kind of outcome it is there to cause) happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Calls that completed normally.
    pub completed: u64,
    /// Calls whose request was lost (no effect, `Unavailable`).
    pub failed: u64,
    /// Calls that took effect after a stall (late delivery).
    pub stalled: u64,
    /// Calls that took effect and whose reply was lost.
    pub lost_replies: u64,
    /// Calls that took effect and replied after the caller's deadline.
    pub late_replies: u64,
    /// Calls refused by the seed's outage.
    pub outage: u64,
    /// Sessions the backend judged expired when asked.
    pub backend_expiries: u64,
    /// Sessions whose `is_alive()` turned false while the application held them.
    pub client_expiries: u64,
    /// Sessions the application reopened after one ended.
    pub reopened: u64,
    /// Sessions a `Coordinator` opened to replace one that ended (seen by sampling it).
    pub recoveries: u64,
    /// Pushed notifications delivered (on the seeds whose backend pushes).
    pub pushed: u64,
    /// Pushed notifications lost.
    pub push_lost: u64,
    /// Pushed notifications delivered twice.
    pub push_duplicated: u64,
    /// Calls of a leader task's closure whose `LeaderContext::token()` was Ok.
    pub leader_work: u64,
    /// Calls of a leader task's closure whose `LeaderContext::token()` failed (the term was over).
    pub leader_work_refused: u64,
    /// Leader tasks stopped with `LeaderTask::stop()` (it returned).
    pub tasks_stopped: u64,
    /// Member changes a watch delivered.
    pub watch_changes: u64,
    /// Member changes after a watch's first that showed a join.
    pub watch_joins: u64,
    /// Premise breaker: the backend lost its data ([`Scenario::data_loss`]).
    pub data_losses: u64,
    /// Premise breaker: the node clock stepped ([`Scenario::clock_jumps`]).
    pub clock_jumps: u64,
    /// Premise breaker: runs whose node clock ran beyond the drift ([`Scenario::drift_beyond`]).
    pub drift_beyond: u64,
    /// Joins, leaves and releases delivered after their call ended
    /// ([`Scenario::late_deliveries`]); on the Redis Cluster model, scripts that landed on their
    /// node after their caller's deadline.
    pub late_deliveries: u64,
    /// `SessionEvent::MembershipLost` events the sessions sent (a keep-alive found a membership
    /// the backend no longer lists).
    pub memberships_lost: u64,
    /// Partitions that started ([`Scenario::partitions`]).
    pub partitions: u64,
    /// Calls refused by a partition (the memory backend's [`Scenario::partitions`], or the
    /// Redis Cluster model's partitioned node).
    pub partitioned: u64,
    /// Redis Cluster model: calls that took effect at once and replied later (before the deadline).
    pub slow_replies: u64,
    /// Calls the memory layer completed at once (no fault) that still took longer than one clock
    /// step of virtual time ([`largest_step`]): their thread waited for the simulated scheduler
    /// while the clock moved. A scheduling artifact, not a modelled fault; zero since the clock
    /// driver moves time only once no other thread can run (`settle`; counted on the memory layer).
    pub starved: u64,
    /// Clock steps taken although some thread still ran: `settle` gave up after
    /// `MAX_YIELDS` yields (a thread that never waits, i.e. busy-loops). Zero in a sound run.
    pub unsettled: u64,
    /// Partition sets: `PartitionEvent::Assigned` events the members received.
    pub part_assigned: u64,
    /// Partition sets: `PartitionEvent::Revoked` events (planned hand-offs).
    pub part_revoked: u64,
    /// Partition sets: `PartitionEvent::Lost` events.
    pub part_lost: u64,
    /// Partition sets: drains the application ended early (`Partition::release` after `Revoking`).
    pub part_released_early: u64,
}

impl FaultCounts {
    /// Adds `o`'s counters to these (summing the runs of a sweep).
    pub fn add(&mut self, o: &FaultCounts) {
        self.completed += o.completed;
        self.failed += o.failed;
        self.stalled += o.stalled;
        self.lost_replies += o.lost_replies;
        self.late_replies += o.late_replies;
        self.outage += o.outage;
        self.backend_expiries += o.backend_expiries;
        self.client_expiries += o.client_expiries;
        self.reopened += o.reopened;
        self.recoveries += o.recoveries;
        self.pushed += o.pushed;
        self.push_lost += o.push_lost;
        self.push_duplicated += o.push_duplicated;
        self.leader_work += o.leader_work;
        self.leader_work_refused += o.leader_work_refused;
        self.tasks_stopped += o.tasks_stopped;
        self.watch_changes += o.watch_changes;
        self.watch_joins += o.watch_joins;
        self.data_losses += o.data_losses;
        self.clock_jumps += o.clock_jumps;
        self.drift_beyond += o.drift_beyond;
        self.late_deliveries += o.late_deliveries;
        self.memberships_lost += o.memberships_lost;
        self.partitions += o.partitions;
        self.partitioned += o.partitioned;
        self.slow_replies += o.slow_replies;
        self.starved += o.starved;
        self.unsettled += o.unsettled;
        self.part_assigned += o.part_assigned;
        self.part_revoked += o.part_revoked;
        self.part_lost += o.part_lost;
        self.part_released_early += o.part_released_early;
    }

    /// The fault classes `scenario` enables beyond the default ones (premise breakers, late
    /// deliveries) that never fired.
    pub fn unfired_of(&self, scenario: &Scenario) -> Vec<&'static str> {
        let mut v = self.unfired();
        let extra = [
            ("data_losses", scenario.data_loss, self.data_losses),
            ("clock_jumps", scenario.clock_jumps, self.clock_jumps),
            ("drift_beyond", scenario.drift_beyond, self.drift_beyond),
            ("late_deliveries", scenario.late_deliveries, self.late_deliveries),
            ("partitions", scenario.partitions, self.partitions),
            ("partitioned", scenario.partitions, self.partitioned),
        ];
        v.extend(extra.iter().filter(|(_, on, n)| *on && *n == 0).map(|(k, _, _)| *k));
        if scenario.workload == Workload::Partitions {
            // No leader tasks nor watcher threads there; the partition sets' own classes instead.
            v.retain(|k| {
                !matches!(*k, "leader_work" | "leader_work_refused" | "tasks_stopped" | "watch_changes" | "watch_joins")
            });
            let parts = [
                ("part_assigned", self.part_assigned),
                ("part_revoked", self.part_revoked),
                ("part_lost", self.part_lost),
                ("part_released_early", self.part_released_early),
            ];
            v.extend(parts.iter().filter(|(_, n)| *n == 0).map(|(k, _)| *k));
        }
        v
    }

    /// The classes of the Redis Cluster model (no outage, no push) that never fired.
    pub fn cluster_unfired(&self) -> Vec<&'static str> {
        let all = [
            ("completed", self.completed),
            ("failed", self.failed),
            ("stalled", self.stalled),
            ("lost_replies", self.lost_replies),
            ("late_deliveries", self.late_deliveries),
            ("partitioned", self.partitioned),
            ("slow_replies", self.slow_replies),
            ("backend_expiries", self.backend_expiries),
            ("client_expiries", self.client_expiries),
            ("reopened", self.reopened),
            ("leader_work", self.leader_work),
            ("leader_work_refused", self.leader_work_refused),
            ("tasks_stopped", self.tasks_stopped),
            ("watch_changes", self.watch_changes),
            ("watch_joins", self.watch_joins),
        ];
        all.iter().filter(|(_, n)| *n == 0).map(|(k, _)| *k).collect()
    }

    /// The default classes (every scenario fires them) that never fired.
    pub fn unfired(&self) -> Vec<&'static str> {
        let all = [
            ("completed", self.completed),
            ("failed", self.failed),
            ("stalled", self.stalled),
            ("lost_replies", self.lost_replies),
            ("late_replies", self.late_replies),
            ("outage", self.outage),
            ("backend_expiries", self.backend_expiries),
            ("client_expiries", self.client_expiries),
            ("reopened", self.reopened),
            ("recoveries", self.recoveries),
            ("pushed", self.pushed),
            ("push_lost", self.push_lost),
            ("push_duplicated", self.push_duplicated),
            ("leader_work", self.leader_work),
            ("leader_work_refused", self.leader_work_refused),
            ("tasks_stopped", self.tasks_stopped),
            ("watch_changes", self.watch_changes),
            ("watch_joins", self.watch_joins),
        ];
        all.iter().filter(|(_, n)| *n == 0).map(|(k, _)| *k).collect()
    }
}

impl fmt::Display for FaultCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "completed {} failed {} stalled {} lost-reply {} late-reply {} outage {} backend-expiries {} \
             client-expiries {} reopened {} recoveries {} pushed {} push-lost {} push-duplicated {} leader-work {} \
             leader-work-refused {} tasks-stopped {} watch-changes {} watch-joins {} data-losses {} clock-jumps {} \
             drift-beyond {} late-deliveries {} memberships-lost {} partitions {} partitioned {} slow-replies {} starved {} \
             unsettled {} part-assigned {} part-revoked {} part-lost {} part-released-early {}",
            self.completed,
            self.failed,
            self.stalled,
            self.lost_replies,
            self.late_replies,
            self.outage,
            self.backend_expiries,
            self.client_expiries,
            self.reopened,
            self.recoveries,
            self.pushed,
            self.push_lost,
            self.push_duplicated,
            self.leader_work,
            self.leader_work_refused,
            self.tasks_stopped,
            self.watch_changes,
            self.watch_joins,
            self.data_losses,
            self.clock_jumps,
            self.drift_beyond,
            self.late_deliveries,
            self.memberships_lost,
            self.partitions,
            self.partitioned,
            self.slow_replies,
            self.starved,
            self.unsettled,
            self.part_assigned,
            self.part_revoked,
            self.part_lost,
            self.part_released_early
        )
    }
}

/// The result of one seed.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The history.
    pub records: Vec<Record>,
    /// Invariant violations (the checker's over the history, then the sampler's).
    pub violations: Vec<Violation>,
    /// The fault counters.
    pub counts: FaultCounts,
    /// The execution panicked (an assertion inside the runtime, a deadlock or a thread that never
    /// ended, as shuttle reports them).
    pub panic: Option<String>,
    /// The premises the run broke (its premise breakers fired).
    pub broken: Vec<Premise>,
}

impl Outcome {
    /// True when the run found nothing.
    pub fn clean(&self) -> bool {
        self.violations.is_empty() && self.panic.is_none()
    }

    /// The violations no broken premise of the run explains (none of the invariant's premises
    /// was broken): what the runtime got wrong.
    pub fn unexplained(&self) -> Vec<&Violation> {
        self.violations.iter().filter(|v| !v.invariant.premises().iter().any(|p| self.broken.contains(p))).collect()
    }

    /// The violations and the records before the first one.
    pub fn report(&self, context: usize) -> String {
        let mut s = format!("seed {}: {}\n", self.seed, self.counts);
        if let Some(p) = &self.panic {
            s += &format!("  panicked: {p}\n");
        }
        if !self.broken.is_empty() {
            let tags: Vec<&str> = self.broken.iter().map(|p| p.tag()).collect();
            s += &format!("  broken premises: {}\n", tags.join(", "));
        }
        for v in &self.violations {
            s += &format!("  {v}\n");
        }
        if let Some(v) = self.violations.first() {
            let from = v.index.saturating_sub(context);
            for (i, r) in self.records.iter().enumerate().take(v.index + 1).skip(from) {
                s += &format!("  #{i} {r}\n");
            }
        }
        s
    }
}

/// Yields in a row this many times with no other thread taking a step before the clock driver
/// concludes that every other thread waits (shuttle's random scheduler picks among the runnable
/// threads: with one other runnable thread, 16 picks of the driver in a row happen once in 65,536).
const QUIET_YIELDS: u32 = 16;

/// At most this many yields per clock step, in case a thread never waits (it would be a
/// busy-looping bug; the clock then moves on rather than hang the run, and the step is counted in
/// [`FaultCounts::unsettled`]).
const MAX_YIELDS: u32 = 20_000;

/// The clock driver's smallest step; a step is this plus up to a third of the lease (below).
const MIN_STEP: Duration = Duration::from_millis(1);

/// One clock step: [`MIN_STEP`] plus a random part below `third` (a third of the lease, the
/// query timeout of the simulated backends).
fn clock_step(third: Duration) -> Duration {
    MIN_STEP + below(third)
}

/// The longest clock step when a third of the lease is `third`: a call that takes longer than
/// this waited more than one step ([`FaultCounts::starved`]).
pub(crate) fn largest_step(third: Duration) -> Duration {
    MIN_STEP + third
}

/// Lets every other thread run until all of them wait (on a lock, a channel, a condition or the
/// clock), before the driver moves the clock again. Virtual time passes only when nothing can
/// run, as on a machine with a core for every thread: a call whose backend answered at once
/// returns at once, not a clock step or many later because the scheduler picked other threads.
/// (The driver used to yield four times per step: a thread among ~30 runnable ones then waited
/// for ~8 steps, up to seconds of virtual time, and calls took longer than their query timeout.)
/// Returns whether every other thread waits (false: `MAX_YIELDS` ran out first).
fn settle() -> bool {
    let (mut quiet, mut yields) = (0, 0);
    while quiet < QUIET_YIELDS && yields < MAX_YIELDS {
        let before = sync::progress();
        thread::yield_now();
        yields += 1;
        quiet = if sync::progress() == before { quiet + 1 } else { 0 };
    }
    quiet >= QUIET_YIELDS
}

/// Runs `seed`: see the module docs.
pub fn run(seed: u64, scenario: &Scenario) -> Outcome {
    let result = Arc::new(std::sync::Mutex::new(None));
    let (out, sc) = (result.clone(), scenario.clone());
    let mut config = shuttle::Config::new();
    config.silence_warnings = true;
    config.failure_persistence = shuttle::FailurePersistence::None;
    let ran = catch_unwind(AssertUnwindSafe(|| {
        let runner = shuttle::Runner::new(shuttle::scheduler::RandomScheduler::new_from_seed(seed, 1), config);
        runner.run(move || {
            let o = execution(seed, &sc);
            if let Ok(mut g) = out.lock() {
                *g = Some(o);
            }
        });
    }));
    let stored = result.lock().ok().and_then(|mut g| g.take());
    match (ran, stored) {
        (Ok(()), Some(o)) => o,
        (r, o) => {
            let panic = match r {
                Err(p) => p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_else(|| "a panic".into()),
                Ok(()) => "the execution ended without an outcome".into(),
            };
            let mut o = o.unwrap_or(Outcome {
                seed,
                records: Vec::new(),
                violations: Vec::new(),
                counts: FaultCounts::default(),
                panic: None,
                broken: Vec::new(),
            });
            o.panic = Some(panic);
            o
        }
    }
}

/// The results of many seeds.
#[derive(Debug, Default)]
pub struct Sweep {
    /// Seeds run.
    pub runs: u64,
    /// The fault counters, summed.
    pub counts: FaultCounts,
    /// Every seed that found something.
    pub failures: Vec<Outcome>,
}

/// Runs every seed of `seeds`.
pub fn sweep(scenario: &Scenario, seeds: std::ops::Range<u64>) -> Sweep {
    let mut s = Sweep::default();
    for seed in seeds {
        let o = run(seed, scenario);
        s.runs += 1;
        s.counts.add(&o.counts);
        if !o.clean() {
            s.failures.push(o);
        }
    }
    s
}

fn name(s: &str) -> Name {
    match Name::new(s) {
        Ok(n) => n,
        Err(e) => unreachable!("constant names are valid: {e}"),
    }
}

/// The name of the partition set of the `Workload::Partitions` runs.
pub const PART_SET: &str = "P";

/// A fault the clock driver injects at a seeded instant.
#[derive(Debug, Clone, Copy)]
enum Timed {
    /// [`Scenario::data_loss`].
    DataLoss,
    /// [`Scenario::clock_jumps`]: the node clock steps by this many ns.
    Jump(i64),
    /// [`Scenario::partitions`]: one session is cut off for this long.
    Partition(Duration),
}

/// One explored execution of `scenario` (runs inside shuttle).
fn execution(seed: u64, sc: &Scenario) -> Outcome {
    if let Some(bug) = sc.bug {
        sync::reintroduce(bug);
    }
    let lease = sc.lease;
    let third = lease / 3;
    let options = match SessionOptions::builder()
        .lease_duration(lease)
        .renew_interval(if sc.half_renew { lease / 2 } else { third })
        .query_timeout(third)
        .drift(0.05)
        .worker_threads(8)
        .build()
    {
        Ok(o) => o,
        Err(e) => unreachable!("the simulation's options are valid: {e}"),
    };
    let p = |max: f64| unit() * max * sc.intensity;
    let mut faults = CallFaults {
        fail: p(0.06),
        stall: p(0.06),
        lost_reply: p(0.06),
        late_reply: p(0.06),
        outage: None,
        push: unit() < 0.5 && sc.push,
        push_lost: p(0.2),
        push_duplicated: p(0.2),
        late_delivery: if sc.late_deliveries { p(0.06) } else { 0.0 },
    };
    // One outage per seed (most seeds), 0.5–2.5 leases long, somewhere in the run.
    if unit() < 0.7 || sc.workload == Workload::Coordinator {
        let start = below(lease * 4);
        let len = lease / 2 + below(lease * 2);
        faults.outage = Some((history::ms(start), history::ms(start + len)));
    }
    // The node clock runs within the sessions' drift of real time (premise breaker: 2–8 ×
    // the drift faster).
    let drift = options.drift();
    let rate = if sc.drift_beyond { 1.0 + (2.0 + unit() * 6.0) * drift } else { 1.0 + (unit() - 0.5) * 0.08 };
    // Faults at seeded instants (virtual ns): a data loss 1–5 leases in, 1–2 clock jumps and 1–3
    // partitions within the first six leases.
    let mut breakers: Vec<(u64, Timed)> = Vec::new();
    if sc.data_loss {
        breakers.push((history::ms(lease + below(lease * 4)), Timed::DataLoss));
    }
    if sc.partitions {
        for _ in 0..1 + sync::random_below(3) {
            let at = history::ms(below(lease * 6));
            breakers.push((at, Timed::Partition(lease / 2 + below(lease * 3 / 2))));
        }
    }
    if sc.clock_jumps {
        for _ in 0..1 + sync::random_below(2) {
            let at = history::ms(below(lease * 6));
            let by = history::ms(lease / 10 + below(lease * 19 / 10)) as i64;
            breakers.push((at, Timed::Jump(if unit() < 0.7 { by } else { -by })));
        }
    }
    breakers.sort_by_key(|(at, _)| *at);
    let hist = Arc::new(History::new());
    // Half the seeds declare `call_bound() = Some(0)` (as the memory backend does): user-thread
    // calls then run inline on the caller's thread, and calls are never delayed (a backend that
    // declares a bound keeps it).
    let inline = unit() < 0.5;
    let clients = 2 + sync::random_below((sc.max_clients.max(2) - 1) as u64) as usize;
    let backend = if sc.cluster {
        Backend::cluster(&hist, sc, clients, lease)
    } else {
        let mut backend = SimBackend::new(hist.clone(), faults, third, rate, inline);
        backend.old_release_any_term = sc.old_release_any_term;
        backend.stale_member_reads = sc.stale_member_reads;
        backend.member_replies_lost = sc.member_replies_lost;
        backend.partitions = sc.partitions;
        backend.owned_omitted = sc.owned_omitted;
        // Half the seeds let the runtime register after a busy attempt (the memory backend's
        // registration checks the lease), half before every attempt (as on Redis, PostgreSQL).
        backend.checked_watch = unit() < 0.5;
        // Half the seeds answer acquires with "as long as the session" (as MySQL's free-lease
        // upsert does), half with the time left.
        backend.terms_with_session = unit() < 0.5;
        let mut h = hist.lock();
        h.membership_events = sc.late_deliveries;
        h.renewal_waiters = sc.half_renew;
        let setup = Event::Setup { client_ppm: vec![0; clients], node_ppm: vec![((rate - 1.0) * 1e6) as i64] };
        hist.push(&mut h, setup);
        if let Some((from, until)) = faults.outage {
            hist.push(&mut h, Event::Outage { from, until });
        }
        Backend::Memory(Arc::new(backend))
    };
    // One node in 40 % of the seeds has a watcher thread (`watch_members` on its session).
    let watcher = (unit() < sc.watchers).then(|| sync::random_below(clients as u64) as usize);
    let names = vec![name("L0"), name("L1")];
    // The partition set of the run (`Workload::Partitions`): 3–8 partitions, one drain period.
    let parts = (sc.workload == Workload::Partitions).then(|| clients::PartSetup {
        set: name(PART_SET),
        count: 3 + sync::random_below(6) as u32,
        drain: [Duration::ZERO, lease / 4, lease / 2][sync::random_below(3) as usize],
        churner: (clients - 1) as u8,
    });
    // What a partition aims at: the holders of these names and the members of `group` (the
    // partition set's members, where the run has one).
    let (targets, group) = match &parts {
        Some(p) => ([name("L0"), p.lease(0), p.lease(1)], p.group()),
        None => ([name("L0"), name("L1"), name("E")], name("G")),
    };
    let mut threads = Vec::new();
    let mut users = 0;
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for c in 0..clients {
        let client = Client {
            c: c as u8,
            hist: hist.clone(),
            backend: backend.lease_backend(),
            options: options.clone(),
            names: names.clone(),
            election: name("E"),
            group: name("G"),
            ops: sc.ops,
            shared: Arc::new(sync::Mutex::new(None)),
            elections: sc.workload != Workload::Everything,
            unchecked_leader_token: sc.unchecked_leader_token,
            resign_skipped: sc.resign_skipped,
            spin_try_lock: sc.spin_try_lock,
            lock_after_renewal: sc.half_renew,
            parts: parts.clone(),
        };
        if parts.is_some() {
            // Partition sets: one user thread per node, a `Coordinator` member on 40 % of the
            // seeds' first node.
            let coordinator = c == 0 && unit() < 0.4;
            let done = done.clone();
            users += 1;
            threads.push(thread::spawn(move || {
                if coordinator {
                    client.run_coordinator_member();
                } else {
                    client.run_member();
                }
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
            continue;
        }
        if c == 0 && (unit() < 0.4 || sc.workload == Workload::Coordinator) {
            // The first node runs a `Coordinator` on 40 % of the seeds.
            let done = done.clone();
            users += 1;
            threads.push(thread::spawn(move || {
                client.run_coordinator();
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
            continue;
        }
        if watcher == Some(c) {
            let w = client.clone_parts();
            let done = done.clone();
            users += 1;
            threads.push(thread::spawn(move || {
                w.run_watcher();
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        if sc.workload == Workload::Elections || unit() < 0.5 {
            // A second user thread on the same session.
            let helper = client.clone_parts();
            let done = done.clone();
            users += 1;
            threads.push(thread::spawn(move || {
                helper.run_helper();
                done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }));
        }
        let done = done.clone();
        users += 1;
        threads.push(thread::spawn(move || {
            client.run();
            done.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }));
    }
    // The clock driver: moves virtual time in random steps, sampling after each, until every
    // user thread finished.
    let mut steps = 0u32;
    while done.load(std::sync::atomic::Ordering::SeqCst) < users {
        steps += 1;
        assert!(steps < 100_000, "the user threads did not finish within 100,000 clock steps");
        // Finer steps where the sessions renew every half lease: a term lost a step after the
        // keep-alive whose reply should have saved it is excused by `no-spurious-loss` (that
        // reply may still be on its way), so the steps must be short next to the renew interval.
        let d = clock_step(if sc.half_renew { lease / 10 } else { third });
        {
            let mut h = hist.lock();
            sync::advance(d);
            while let Some(&(_, what)) = breakers.first().filter(|(at, _)| *at <= hist.t()) {
                breakers.remove(0);
                // The premise breakers and partitions of the memory layer (the Cluster model
                // draws its own faults).
                let Some(mem) = backend.memory() else { continue };
                match what {
                    Timed::DataLoss => mem.lose_data(&mut h),
                    Timed::Jump(by) => mem.jump(&mut h, by),
                    Timed::Partition(len) => mem.partition(&mut h, len, &targets, &group),
                }
            }
            clients::sample(&hist, &mut h);
            // `token-in-term` judges terms by the node clock after each sample (the memory
            // backend's one node; the Cluster model records each node's clock with its events).
            if let Some(mem) = backend.memory() {
                let b = mem.node_now();
                hist.push(&mut h, Event::NodeClock { node: 0, b });
            }
            backend.pump(&mut h);
            // Wake the receivers of what was relayed (the explorer's select polls on a change).
            sync::advance(Duration::ZERO);
        }
        if !settle() {
            hist.lock().counts.unsettled += 1;
        }
    }
    for t in threads {
        if t.join().is_err() {
            panic!("a user thread panicked");
        }
    }
    // Far past every timer: renewal threads and idle workers end.
    {
        let mut h = hist.lock();
        hist.push(&mut h, Event::Teardown);
    }
    backend.quiet();
    sync::advance(Duration::from_secs(3_600));
    let mut h = hist.lock();
    h.counts.recoveries = h.coordinator_sessions.len().saturating_sub(1) as u64;
    h.counts.drift_beyond = u64::from(sc.drift_beyond);
    let mut broken = sc.broken_premises();
    broken.retain(|p| match p {
        Premise::TokenReset => h.counts.data_losses > 0,
        Premise::ClockJump => h.counts.clock_jumps > 0,
        Premise::Drift => true,
    });
    let mut violations = check_renewing(&h.records, history::ms(lease), history::ms(options.renew_interval()));
    violations.extend(h.handles.violations.iter().cloned());
    violations.extend(h.violations.iter().cloned());
    Outcome { seed, records: h.records.clone(), violations, counts: h.counts, panic: None, broken }
}

use super::history;

/// The backend of a run.
enum Backend {
    Memory(Arc<SimBackend>),
    #[cfg(all(feature = "sim-redis", simba_explore))]
    Cluster(Arc<redis::cluster::SimCluster>, Arc<dyn crate::backend::LeaseBackend>),
}

impl Backend {
    /// The shipped Redis backend in Cluster mode over simulated nodes (see `redis`).
    #[cfg(all(feature = "sim-redis", simba_explore))]
    fn cluster(hist: &Arc<History>, sc: &Scenario, clients: usize, lease: Duration) -> Backend {
        let (cluster, backend) = redis::run_backend(hist, sc.intensity, clients, lease);
        // The model loses memberships (a group's node that missed renewals expires them, a late
        // leave): the sessions' `MembershipLost` is what `member-listed` accepts as the report.
        hist.lock().membership_events = true;
        Backend::Cluster(cluster, backend)
    }

    #[cfg(not(all(feature = "sim-redis", simba_explore)))]
    fn cluster(_: &Arc<History>, _: &Scenario, _: usize, _: Duration) -> Backend {
        panic!("Scenario::cluster needs the sim-redis feature (and --cfg simba_explore)")
    }

    /// The memory backend's layer, or `None` on the Cluster model.
    fn memory(&self) -> Option<&Arc<SimBackend>> {
        match self {
            Backend::Memory(b) => Some(b),
            #[cfg(all(feature = "sim-redis", simba_explore))]
            Backend::Cluster(..) => None,
        }
    }

    fn lease_backend(&self) -> Arc<dyn crate::backend::LeaseBackend> {
        match self {
            Backend::Memory(b) => b.clone(),
            #[cfg(all(feature = "sim-redis", simba_explore))]
            Backend::Cluster(_, b) => b.clone(),
        }
    }

    /// After each clock step: relays pushed notifications (memory) or lands late scripts (Cluster).
    fn pump(&self, h: &mut backend::HistState) {
        match self {
            Backend::Memory(b) => b.pump(h),
            #[cfg(all(feature = "sim-redis", simba_explore))]
            Backend::Cluster(c, _) => c.pump(h),
        }
    }

    /// The run's teardown: every call completes at once.
    fn quiet(&self) {
        match self {
            Backend::Memory(b) => b.quiet(),
            #[cfg(all(feature = "sim-redis", simba_explore))]
            Backend::Cluster(c, _) => c.quiet(),
        }
    }
}
