//! Deterministic simulation of sessions and leases under faults (SPEC §8).
//!
//! No threads, no sleeps, no wall clock: simulated real time is a counter, every client and backend
//! node reads its own virtual clock (a rate and an offset, and for nodes injected steps), and every
//! random choice comes from one generator seeded by the run's `seed`, so a seed replays exactly.
//!
//! What runs:
//! - **clients**: each runs the real `Engine` (`engine::Engine`, crate-private) — the state machine the
//!   renewal thread runs — driven the way `runtime/` drives it: keep-alives when the engine says,
//!   acquires judged by their send instant (abandoned after the query timeout, late replies undone),
//!   releases, stray releases, best-effort close after expiry, reopening a session after it ends;
//!   with a random workload of locks held for random times;
//! - **backends**: [`Model::Memory`] runs the real [`MemoryBackend`](crate::MemoryBackend) on a
//!   virtual clock; [`Model::Cluster`] is a model of the Redis Cluster backend (SPEC §6.3):
//!   sessions and leases on different nodes with their own clocks, one script per node, renewal
//!   follow-ups carrying the session's remaining minus the client-measured elapsed time, the
//!   "no lease call after the session's remaining" and "a late acquire releases its term" rules;
//! - **groups, pushed notifications, elections** (memory backend, per [`Scenario`]): memberships
//!   joined, left and dropped as `runtime/`/`group.rs` do, `members` reads, `is_member()`
//!   sampled; one-shot `watch`es whose release notifications travel through the network and wake
//!   candidates (a lost one leaves them to their periodic retry); campaigns for an election and
//!   `leader()` reads (`world/groups.rs`, `world/push.rs`, `world/elections.rs`);
//! - **network and faults**: every request and reply travels with a random delay and may be lost
//!   (a lost reply means "applied on the server, reply lost"); slow messages arrive long after the
//!   caller gave up (late script delivery); hung calls; partitions; client process pauses longer
//!   than the lease; client stalls between Cluster scripts; clock-rate drift within `drift`; and,
//!   to break the premises on purpose, drift beyond `drift`, backend clock jumps and backend data
//!   loss (token counter reset).
//!
//! Every run records a history ([`Record`]s) and [`check`] verifies the [`Invariant`]s over it; each
//! invariant lists the [`Premise`]s it depends on, so a violation in a run that broke one of them is
//! *explained* and any other violation is a bug (or a deliberately [`BrokenRule`]).
//!
//! ```
//! use simba::sim::{self, Scenario};
//! let scenario = Scenario::memory().without_late_releases();
//! let outcome = sim::run(7, &scenario);
//! assert!(outcome.violations.is_empty(), "{}", outcome.report(20));
//! assert_eq!(outcome.records, sim::replay(7, &scenario).records);
//! ```
//!
//! `docs/testing.md` ("Deterministic simulation") explains how to run, replay a seed, flip a broken
//! rule, and the findings so far.

mod check;
mod clock;
mod cluster;
mod history;
/// The seeded simulation of the shipped runtime (the `explore` feature and `--cfg simba_explore`
/// too; see docs/testing.md, "Simulation of the shipped runtime").
#[cfg(all(feature = "explore", simba_explore))]
pub mod shipped;
mod world;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::{self, Write as _};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::ops::Range;
use std::time::Duration;

pub use check::{check, Invariant, Premise, Violation};
pub use history::{Event, Record, TaskStep, WatchStep};

/// Which backend the clients run against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Model {
    /// The real in-process [`MemoryBackend`](crate::MemoryBackend) on one virtual clock (node 0).
    Memory,
    /// A model of Redis Cluster with this many nodes (masters), each on its own clock.
    Cluster {
        /// Number of nodes (at least 1).
        nodes: u8,
    },
}

/// A deliberately broken engine rule, applied by the simulation's driver without editing the engine.
/// The simulation must catch it (see `docs/testing.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BrokenRule {
    /// The driver passes the *reply* instant instead of the send instant as `sent` to
    /// `Engine::on_keep_alive`, `Engine::on_acquired` and `Engine::new`: the local deadline then
    /// outlives the backend's when a reply is slow.
    DeadlineFromReplyInstant,
    /// The engine runs with `drift = 0`: the local deadline is the backend's, so a backend clock
    /// running faster (within the configured `drift`) ends the term first.
    NoDrift,
    /// Groups: the driver's `Membership::is_member()` ignores the session's local deadline (it
    /// checks only that the handle was joined, not left, and the session not yet declared
    /// expired or closed), so a paused or cut-off client still believes it is a member after the
    /// backend expired its session.
    MemberIgnoresDeadline,
    /// Groups: the driver ignores the groups a keep-alive reports (it hands the engine the groups
    /// the client holds), so a membership the backend lost (a late leave) is never detected.
    GroupReportsIgnored,
}

/// Which faults a run may inject. Intensities are drawn per seed, so some seeds are quiet and some
/// are harsh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Faults {
    /// Lost requests and lost replies (applied on the server, reply lost).
    pub message_loss: bool,
    /// Slow messages (up to 1.2 lease durations, i.e. arriving after the caller gave up) and hung
    /// calls that return long after the query timeout.
    pub slow_messages: bool,
    /// Partitions between a client and one or all nodes, up to 2.5 lease durations.
    pub partitions: bool,
    /// Client process pauses (no polls, no replies handled) up to 3 lease durations.
    pub pauses: bool,
    /// Client-side stalls between the scripts of one Cluster call (up to 1.5 lease durations).
    pub client_stalls: bool,
    /// Clock rates of clients and nodes differ, within `drift`.
    pub drift_within: bool,
    /// Releases delivered after their call ended (the worker gave up; the request was still on its
    /// way, or the server was stuck). Legitimate, but the current engine is not safe against them
    /// (see `docs/testing.md`, "Known findings"); without it a release that reaches the backend
    /// after its call's deadline is dropped instead.
    pub late_releases: bool,
    /// Breaks `premise:drift`: one node's clock runs 2–8 × `drift` faster than the clients'.
    pub drift_beyond: bool,
    /// Breaks `premise:clockJump`: one or two node clock steps of 0.1–2 lease durations (mostly forward).
    pub clock_jumps: bool,
    /// Breaks `premise:tokenReset`: a node loses all its data once.
    pub data_loss: bool,
}

impl Faults {
    /// Every fault that respects the premises.
    pub fn respecting_premises() -> Faults {
        Faults {
            message_loss: true,
            slow_messages: true,
            partitions: true,
            pauses: true,
            client_stalls: true,
            drift_within: true,
            late_releases: true,
            drift_beyond: false,
            clock_jumps: false,
            data_loss: false,
        }
    }

    /// No faults at all.
    pub fn none() -> Faults {
        Faults {
            message_loss: false,
            slow_messages: false,
            partitions: false,
            pauses: false,
            client_stalls: false,
            drift_within: false,
            late_releases: false,
            drift_beyond: false,
            clock_jumps: false,
            data_loss: false,
        }
    }

    /// The premises these faults break.
    pub fn breaks(&self) -> Vec<Premise> {
        let mut v = Vec::new();
        if self.data_loss {
            v.push(Premise::TokenReset);
        }
        if self.clock_jumps {
            v.push(Premise::ClockJump);
        }
        if self.drift_beyond {
            v.push(Premise::Drift);
        }
        v
    }
}

/// What to simulate. Per seed the run draws 2..=`max_clients` clients and 1..=`max_names` lease
/// names, fault intensities, clock rates and offsets.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// A name for reports.
    pub name: String,
    /// The backend.
    pub model: Model,
    /// Most clients per run (at least 2).
    pub max_clients: usize,
    /// Most lease names per run.
    pub max_names: usize,
    /// Run length, in lease durations.
    pub leases: u32,
    /// The sessions' lease duration (renew interval and query timeout are a third of it).
    pub lease: Duration,
    /// The sessions' `drift`.
    pub drift: f64,
    /// Faults to inject.
    pub faults: Faults,
    /// Scales the largest per-message probabilities of loss, slowness, hangs and client stalls
    /// (1.0: up to 8 % loss and slow messages, 3 % hung calls, 10 % stalls per seed).
    pub intensity: f64,
    /// A deliberately broken engine rule, or `None`.
    pub broken_rule: Option<BrokenRule>,
    /// Emulates the fixes proposed for the findings (`docs/testing.md`): releases carry the token
    /// of the term they free (the backend frees only that term), the driver never adopts a term its
    /// session asked to release, the Cluster model never reports a term it abandoned as acquired
    /// (findings 1 and 2, since fixed in the code).
    pub proposed_fix: bool,
    /// Emulates `finish_acquire` before the fix of finding 4: an acquire reply the engine says to
    /// undo is released even when it is the very term the session holds (the driver otherwise
    /// keeps it, as `runtime/` does now).
    pub old_undo: bool,
    /// Emulates the old SPI, whose release freed whatever term the session held (the design the
    /// late-release finding showed unsafe). Off by default: releases are term-scoped.
    pub old_release_any_term: bool,
    /// Group membership workload (memory backend only): clients join and leave 1–2 groups the way
    /// `Session::join`, `Membership::leave` and dropping a `Membership` do, and read `members`.
    pub groups: bool,
    /// Pushed release notifications (memory backend only): candidates register one-shot
    /// `LeaseBackend::watch`es as `Session::lock` and campaigns do; the backend's notifications
    /// travel through the simulated network (delayed, lost, cut by partitions) and wake the
    /// candidate at once; a lost one leaves it to its periodic retry.
    pub push: bool,
    /// Elections (memory backend only): `lease-0` is an election; most clients campaign for it the
    /// way `Session::campaign` does (attempts on the renewal thread, late replies adopted by their
    /// send instant, resign), every client reads `leader()`.
    pub elections: bool,
    /// With `groups`: the chance (0..=1) that a client re-joins a group at once after leaving it,
    /// while its leave may still be on its way (see `docs/testing.md`, finding 3).
    pub rejoin_at_once: f64,
    /// With `groups`: emulates the join before the fix of finding 3's local part, which did not
    /// wait for the session's leave of the group still in flight (the driver otherwise does what
    /// `attach_membership` does now: wait for it up to the query timeout, then fail).
    pub old_join: bool,
}

impl Scenario {
    /// The memory backend under every premise-respecting fault.
    pub fn memory() -> Scenario {
        Scenario {
            name: "memory".into(),
            model: Model::Memory,
            max_clients: 4,
            max_names: 3,
            leases: 12,
            lease: Duration::from_secs(1),
            drift: 0.02,
            faults: Faults::respecting_premises(),
            intensity: 1.0,
            broken_rule: None,
            proposed_fix: false,
            old_release_any_term: false,
            groups: false,
            push: false,
            elections: false,
            rejoin_at_once: 0.3,
            old_join: false,
            old_undo: false,
        }
    }

    /// A three-node Redis Cluster model under every premise-respecting fault.
    pub fn cluster() -> Scenario {
        Scenario { name: "cluster".into(), model: Model::Cluster { nodes: 3 }, ..Scenario::memory() }
    }

    /// Adds backend data loss (breaks `premise:tokenReset`).
    #[must_use]
    pub fn with_data_loss(mut self) -> Scenario {
        self.faults.data_loss = true;
        self.name.push_str("+dataLoss");
        self
    }

    /// Adds a node clock running faster than `drift` allows (breaks `premise:drift`).
    #[must_use]
    pub fn with_drift_beyond(mut self) -> Scenario {
        self.faults.drift_beyond = true;
        self.name.push_str("+driftBeyond");
        self
    }

    /// Adds backend clock jumps (breaks `premise:clockJump`).
    #[must_use]
    pub fn with_clock_jumps(mut self) -> Scenario {
        self.faults.clock_jumps = true;
        self.name.push_str("+clockJump");
        self
    }

    /// The scenario a [`Scenario::name`] describes: `memory` or `cluster`, then any of
    /// `+noLateReleases`, `+fix`, `+oldRelease`, `+harsh`, `+dataLoss`, `+driftBeyond`, `+clockJump`,
    /// `+groups`, `+noQuickRejoin`, `+oldJoin`, `+oldUndo`, `+push`, `+elections`, `+broken:DeadlineFromReplyInstant`,
    /// `+broken:NoDrift`, `+broken:MemberIgnoresDeadline`, `+broken:GroupReportsIgnored` (as printed
    /// in failure reports).
    pub fn from_name(name: &str) -> Option<Scenario> {
        let mut parts = name.split('+');
        let mut s = match parts.next()? {
            "memory" => Scenario::memory(),
            "cluster" => Scenario::cluster(),
            _ => return None,
        };
        for p in parts {
            s = match p {
                "dataLoss" => s.with_data_loss(),
                "driftBeyond" => s.with_drift_beyond(),
                "clockJump" => s.with_clock_jumps(),
                "noLateReleases" => s.without_late_releases(),
                "fix" => s.with_proposed_fix(),
                "oldRelease" => s.with_old_release_any_term(),
                "harsh" => s.harsh(),
                "broken:DeadlineFromReplyInstant" => s.with_broken_rule(BrokenRule::DeadlineFromReplyInstant),
                "broken:NoDrift" => s.with_broken_rule(BrokenRule::NoDrift),
                "broken:MemberIgnoresDeadline" => s.with_broken_rule(BrokenRule::MemberIgnoresDeadline),
                "broken:GroupReportsIgnored" => s.with_broken_rule(BrokenRule::GroupReportsIgnored),
                "groups" => s.with_groups(),
                "push" => s.with_push(),
                "elections" => s.with_elections(),
                "noQuickRejoin" => s.without_quick_rejoin(),
                "oldJoin" => s.with_old_join(),
                "oldUndo" => s.with_old_undo(),
                _ => return None,
            };
        }
        Some(s)
    }

    /// Never delivers a release after its call ended (see [`Faults::late_releases`]).
    #[must_use]
    pub fn without_late_releases(mut self) -> Scenario {
        self.faults.late_releases = false;
        self.name.push_str("+noLateReleases");
        self
    }

    /// Three times the usual fault intensity (see [`Scenario::intensity`]).
    #[must_use]
    pub fn harsh(mut self) -> Scenario {
        self.intensity = 3.0;
        self.name.push_str("+harsh");
        self
    }

    /// Emulates the proposed fix (see [`Scenario::proposed_fix`]).
    #[must_use]
    pub fn with_proposed_fix(mut self) -> Scenario {
        self.proposed_fix = true;
        self.name.push_str("+fix");
        self
    }

    /// Emulates the old release that freed any term of the session (see
    /// [`Scenario::old_release_any_term`]).
    #[must_use]
    pub fn with_old_release_any_term(mut self) -> Scenario {
        self.old_release_any_term = true;
        self.name.push_str("+oldRelease");
        self
    }

    /// Adds the group membership workload (see [`Scenario::groups`]; memory backend only).
    #[must_use]
    pub fn with_groups(mut self) -> Scenario {
        self.groups = true;
        self.name.push_str("+groups");
        self
    }

    /// Never re-joins a group right after leaving it (see [`Scenario::rejoin_at_once`]).
    #[must_use]
    pub fn without_quick_rejoin(mut self) -> Scenario {
        self.rejoin_at_once = 0.0;
        self.name.push_str("+noQuickRejoin");
        self
    }

    /// Emulates `finish_acquire` before the fix of finding 4 (see [`Scenario::old_undo`]).
    #[must_use]
    pub fn with_old_undo(mut self) -> Scenario {
        self.old_undo = true;
        self.name.push_str("+oldUndo");
        self
    }

    /// Emulates the join before the fix of finding 3 (see [`Scenario::old_join`]).
    #[must_use]
    pub fn with_old_join(mut self) -> Scenario {
        self.old_join = true;
        self.name.push_str("+oldJoin");
        self
    }

    /// Adds pushed release notifications (see [`Scenario::push`]; memory backend only).
    #[must_use]
    pub fn with_push(mut self) -> Scenario {
        self.push = true;
        self.name.push_str("+push");
        self
    }

    /// Adds elections (see [`Scenario::elections`]; memory backend only).
    #[must_use]
    pub fn with_elections(mut self) -> Scenario {
        self.elections = true;
        self.name.push_str("+elections");
        self
    }

    /// Runs the engine with a deliberately broken rule.
    #[must_use]
    pub fn with_broken_rule(mut self, rule: BrokenRule) -> Scenario {
        self.broken_rule = Some(rule);
        let _ = write!(self.name, "+broken:{rule:?}");
        self
    }
}

/// Counters of one run (or a sweep).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Simulation events processed.
    pub events: u64,
    /// Messages sent (requests and replies).
    pub messages: u64,
    /// Messages lost or cut by a partition.
    pub dropped: u64,
    /// `Engine::token()` evaluations sampled.
    pub token_samples: u64,
    /// Keep-alive calls started.
    pub keep_alives: u64,
    /// Terms adopted by engines.
    pub adoptions: u64,
    /// Sessions opened by clients.
    pub sessions: u64,
    /// History records checked.
    pub records: u64,
    /// Runs stopped early because they exceeded the event budget (a simulator bug; expected 0).
    pub truncated: u64,
    /// Groups: joins that returned to their caller (a `Membership` handle was made).
    pub joins: u64,
    /// Groups: `members` reads evaluated by the backend.
    pub members_reads: u64,
    /// Groups: joins the backend applied after their caller had given up (timed out): a later
    /// keep-alive reports the group, which the session does not hold, and the session leaves it.
    pub late_joins: u64,
    /// Groups: memberships a keep-alive reported missing (a leave that landed after a re-join):
    /// re-joined by the session.
    pub memberships_lost: u64,
    /// Groups: stray memberships (reported, not held) the session left again.
    pub strays_left: u64,
    /// Groups: members listed by a read while their client's session was alive but held no valid
    /// `Membership` for the group and had no join or leave of it on its way (a join that timed out
    /// but landed, or a leave that was lost: they last until the session ends).
    pub stray_members: u64,
    /// Push: release notifications the backend sent to a watching client.
    pub notifications: u64,
    /// Push: notifications lost in the network (or cut by a partition).
    pub notifications_lost: u64,
    /// New terms granted to an attempt woken by a pushed notification.
    pub handoffs_push: u64,
    /// New terms granted to an attempt started by the periodic retry timer.
    pub handoffs_retry: u64,
    /// New terms granted to a first attempt (a new `lock` call, a new campaign, or right after a loss).
    pub handoffs_first: u64,
    /// Sum over push hand-offs of the simulated time from the backend freeing the name to the new
    /// grant (ns).
    pub handoff_wait_push_ns: u64,
    /// Sum over retry hand-offs of the same (ns).
    pub handoff_wait_retry_ns: u64,
    /// Elections: terms a campaign made this client leader of (`elected`).
    pub elected: u64,
    /// Elections: `leader()` reads evaluated by the backend.
    pub leader_reads: u64,
    /// How often each injected fault class fired.
    pub fired: FaultsFired,
}

/// How often each fault class fired (summed over a sweep): a sweep that claims to exercise a
/// fault checks that it really happened ([`FaultsFired::unfired`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultsFired {
    /// Requests lost on their way to a node.
    pub lost_requests: u64,
    /// Replies lost on their way back (applied on the server).
    pub lost_replies: u64,
    /// Slow messages (up to 1.2 lease durations).
    pub slow_messages: u64,
    /// Hung calls (returning up to 3 lease durations late).
    pub hung_calls: u64,
    /// Partitions started.
    pub partitions: u64,
    /// Client process pauses started.
    pub pauses: u64,
    /// Client stalls between the scripts of one Cluster call.
    pub client_stalls: u64,
    /// Clocks (clients' and nodes') running at a rate other than 1, within `drift`.
    pub drifting_clocks: u64,
    /// Releases and leaves applied after their call ended.
    pub late_releases: u64,
    /// Nodes running faster than `drift` allows.
    pub drift_beyond: u64,
    /// Backend clock jumps.
    pub clock_jumps: u64,
    /// Backend data losses.
    pub data_losses: u64,
}

impl FaultsFired {
    fn add(&mut self, o: &FaultsFired) {
        self.lost_requests += o.lost_requests;
        self.lost_replies += o.lost_replies;
        self.slow_messages += o.slow_messages;
        self.hung_calls += o.hung_calls;
        self.partitions += o.partitions;
        self.pauses += o.pauses;
        self.client_stalls += o.client_stalls;
        self.drifting_clocks += o.drifting_clocks;
        self.late_releases += o.late_releases;
        self.drift_beyond += o.drift_beyond;
        self.clock_jumps += o.clock_jumps;
        self.data_losses += o.data_losses;
    }

    /// The fault classes `scenario` enables that never fired (client stalls only apply to the
    /// Cluster model, whose calls are several scripts).
    pub fn unfired(&self, scenario: &Scenario) -> Vec<&'static str> {
        let f = scenario.faults;
        let cluster = matches!(scenario.model, Model::Cluster { .. });
        let classes = [
            (f.message_loss, self.lost_requests, "lost requests"),
            (f.message_loss, self.lost_replies, "lost replies"),
            (f.slow_messages, self.slow_messages, "slow messages"),
            (f.slow_messages, self.hung_calls, "hung calls"),
            (f.partitions, self.partitions, "partitions"),
            (f.pauses, self.pauses, "pauses"),
            (f.client_stalls && cluster, self.client_stalls, "client stalls"),
            (f.drift_within, self.drifting_clocks, "drift within the bound"),
            (f.late_releases, self.late_releases, "late releases"),
            (f.drift_beyond, self.drift_beyond, "drift beyond the bound"),
            (f.clock_jumps, self.clock_jumps, "clock jumps"),
            (f.data_loss, self.data_losses, "data loss"),
        ];
        classes.iter().filter(|(on, n, _)| *on && *n == 0).map(|(_, _, name)| *name).collect()
    }
}

impl fmt::Display for FaultsFired {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "faults fired: {} lost requests, {} lost replies, {} slow messages, {} hung calls, {} partitions, {} \
             pauses, {} client stalls, {} drifting clocks, {} late releases, {} fast nodes, {} clock jumps, {} data \
             losses",
            self.lost_requests,
            self.lost_replies,
            self.slow_messages,
            self.hung_calls,
            self.partitions,
            self.pauses,
            self.client_stalls,
            self.drifting_clocks,
            self.late_releases,
            self.drift_beyond,
            self.clock_jumps,
            self.data_losses
        )
    }
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.events += o.events;
        self.messages += o.messages;
        self.dropped += o.dropped;
        self.token_samples += o.token_samples;
        self.keep_alives += o.keep_alives;
        self.adoptions += o.adoptions;
        self.sessions += o.sessions;
        self.records += o.records;
        self.truncated += o.truncated;
        self.joins += o.joins;
        self.members_reads += o.members_reads;
        self.late_joins += o.late_joins;
        self.memberships_lost += o.memberships_lost;
        self.strays_left += o.strays_left;
        self.stray_members += o.stray_members;
        self.notifications += o.notifications;
        self.notifications_lost += o.notifications_lost;
        self.handoffs_push += o.handoffs_push;
        self.handoffs_retry += o.handoffs_retry;
        self.handoffs_first += o.handoffs_first;
        self.handoff_wait_push_ns += o.handoff_wait_push_ns;
        self.handoff_wait_retry_ns += o.handoff_wait_retry_ns;
        self.elected += o.elected;
        self.leader_reads += o.leader_reads;
        self.fired.add(&o.fired);
    }

    /// The group, push and election counters, when any is non-zero.
    pub fn extra(&self) -> String {
        let mut s = String::new();
        if self.joins + self.members_reads > 0 {
            let _ = write!(
                s,
                "; groups: {} joins, {} members reads, {} late joins, {} stray member listings, {} memberships \
                 lost and re-joined, {} strays left",
                self.joins,
                self.members_reads,
                self.late_joins,
                self.stray_members,
                self.memberships_lost,
                self.strays_left
            );
        }
        if self.notifications > 0 {
            let avg = |sum: u64, n: u64| if n == 0 { 0.0 } else { sum as f64 / n as f64 / 1e6 };
            let _ = write!(
                s,
                "; push: {} notifications ({} lost), new terms by push {} (avg wait {:.1}ms) / retry {} (avg wait \
                 {:.1}ms) / first attempt {}",
                self.notifications,
                self.notifications_lost,
                self.handoffs_push,
                avg(self.handoff_wait_push_ns, self.handoffs_push),
                self.handoffs_retry,
                avg(self.handoff_wait_retry_ns, self.handoffs_retry),
                self.handoffs_first
            );
        }
        if self.elected + self.leader_reads > 0 {
            let _ = write!(s, "; elections: {} elected, {} leader() reads", self.elected, self.leader_reads);
        }
        s
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The seed.
    pub seed: u64,
    /// The scenario.
    pub scenario: Scenario,
    /// The history.
    pub records: Vec<Record>,
    /// Invariant violations found in the history.
    pub violations: Vec<Violation>,
    /// Premises the run's injected faults actually broke.
    pub broken: BTreeSet<Premise>,
    /// Counters.
    pub stats: Stats,
}

impl Outcome {
    /// Violations not explained by a broken premise (a bug, or the scenario's [`BrokenRule`]).
    pub fn unexplained(&self) -> Vec<&Violation> {
        self.violations.iter().filter(|v| !v.invariant.premises().iter().any(|p| self.broken.contains(p))).collect()
    }

    /// A hash of the whole history: equal for two runs of one seed.
    pub fn fingerprint(&self) -> u64 {
        let mut h = DefaultHasher::new();
        self.records.hash(&mut h);
        h.finish()
    }

    /// A readable report: seed, how to replay, violations, and the history around the first one
    /// (`context` records before it).
    pub fn report(&self, context: usize) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "seed {} of scenario '{}': {} violation(s), premises broken: {:?}; replay with \
             SIMBA_SIM_SCENARIO='{}' SIMBA_SIM_SEED={} cargo test --test sim replay -- --nocapture",
            self.seed,
            self.scenario.name,
            self.violations.len(),
            self.broken.iter().map(|p| p.tag()).collect::<Vec<_>>(),
            self.scenario.name,
            self.seed
        );
        for v in self.violations.iter().take(5) {
            let _ = writeln!(s, "  {v}");
        }
        if let Some(first) = self.violations.first() {
            let from = first.index.saturating_sub(context);
            let _ = writeln!(s, "history #{from}..=#{}:", first.index);
            for (i, r) in self.records.iter().enumerate().take(first.index + 1).skip(from) {
                let _ = writeln!(s, "  #{i:<5} {r}");
            }
        }
        s
    }
}

/// Runs `scenario` with `seed` and checks the history.
pub fn run(seed: u64, scenario: &Scenario) -> Outcome {
    let mut w = world::World::new(seed, scenario);
    w.run();
    let records = std::mem::take(&mut w.records);
    let violations = check(&records, w.lease);
    let mut stats = w.stats.clone();
    stats.records = records.len() as u64;
    Outcome { seed, scenario: scenario.clone(), records, violations, broken: w.broken.clone(), stats }
}

/// Replays a seed: the same as [`run`] (a run depends only on its seed and scenario), named for
/// reproducing a reported failure.
pub fn replay(seed: u64, scenario: &Scenario) -> Outcome {
    run(seed, scenario)
}

/// The result of running many seeds.
#[derive(Debug, Clone, Default)]
pub struct Sweep {
    /// Seeds run.
    pub seeds: u64,
    /// Summed counters.
    pub stats: Stats,
    /// Runs with at least one violation: (seed, violations, premises broken).
    pub failures: Vec<(u64, Vec<Violation>, BTreeSet<Premise>)>,
    /// Runs with a violation no broken premise explains.
    pub unexplained: Vec<u64>,
    /// Violations per invariant.
    pub by_invariant: BTreeMap<Invariant, u64>,
    /// Runs per premise actually broken.
    pub premise_broken_runs: BTreeMap<Premise, u64>,
}

impl Sweep {
    /// One line per failing seed (at most `max`).
    pub fn summary(&self, max: usize) -> String {
        let mut s = format!(
            "{} seeds, {} events, {} records, {} token() samples, {} keep-alives, {} adoptions{}; violations by \
             invariant: {:?}; failing seeds: {}; unexplained: {}",
            self.seeds,
            self.stats.events,
            self.stats.records,
            self.stats.token_samples,
            self.stats.keep_alives,
            self.stats.adoptions,
            self.stats.extra(),
            self.by_invariant.iter().map(|(i, n)| (i.name(), *n)).collect::<Vec<_>>(),
            self.failures.len(),
            self.unexplained.len()
        );
        for (seed, v, broken) in self.failures.iter().take(max) {
            let _ = write!(
                s,
                "\n  seed {seed} (broken {:?}): {}",
                broken.iter().map(|p| p.tag()).collect::<Vec<_>>(),
                v[0]
            );
        }
        s
    }
}

impl fmt::Display for Sweep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary(5))
    }
}

/// Runs `scenario` for every seed in `seeds`.
pub fn sweep(scenario: &Scenario, seeds: Range<u64>) -> Sweep {
    let mut s = Sweep::default();
    for seed in seeds {
        let o = run(seed, scenario);
        s.seeds += 1;
        s.stats.add(&o.stats);
        for p in &o.broken {
            *s.premise_broken_runs.entry(*p).or_insert(0) += 1;
        }
        if !o.violations.is_empty() {
            for v in &o.violations {
                *s.by_invariant.entry(v.invariant).or_insert(0) += 1;
            }
            if !o.unexplained().is_empty() {
                s.unexplained.push(seed);
            }
            s.failures.push((seed, o.violations, o.broken));
        }
    }
    s
}
