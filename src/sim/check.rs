//! Invariant checkers over a recorded history, each naming the premises it depends on.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt;

use super::history::{Event, Record};
use crate::types::{Name, Token};

mod app;
mod partitions;

pub use partitions::{partition_stats, PartStats, STABLE_LEASES};

/// An assumption the guarantees rest on. A run that breaks one may violate the invariants that
/// list it (and the simulation shows that it does).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Premise {
    /// `premise:tokenReset` — the backend never loses data (no restart without persistence, no
    /// failover to a replica missing recent writes, no eviction): token counters never reset and
    /// live sessions and terms are never forgotten.
    TokenReset,
    /// `premise:clockJump` — backend clocks never step (NTP step, VM migration); they only run.
    ClockJump,
    /// `premise:drift` — a backend clock runs at most `1 / (1 − drift)` times as fast as the
    /// client's clock.
    Drift,
}

impl Premise {
    /// The premise's tag, e.g. `premise:tokenReset`.
    pub fn tag(self) -> &'static str {
        match self {
            Premise::TokenReset => "premise:tokenReset",
            Premise::ClockJump => "premise:clockJump",
            Premise::Drift => "premise:drift",
        }
    }
}

impl fmt::Display for Premise {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.tag())
    }
}

/// A safety property checked over every history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Invariant {
    /// At most one term of a name is live at any instant of the backend's (lease node's) clock:
    /// a new term is granted only after the previous one ended (released, closed or run out). A
    /// clock stepping back makes the backend live through the same instants twice, hence the
    /// `clockJump` premise.
    OneHolder,
    /// No two sessions' `Engine::token(name)` succeed at the same simulated real instant.
    ExclusiveToken,
    /// A `token()` that succeeds names a term the backend still runs: never after the node's
    /// clock reached the term's end (the local deadline precedes the backend's expiry). Judged
    /// where the history records the node clock next to the samples (`Event::NodeClock`, the
    /// shipped-runtime simulation only). Same premises as `exclusive-token`.
    TokenInTerm,
    /// Every new term of a name has a larger token than every earlier term.
    TokenMonotonic,
    /// A session the backend let expire (by its own clock), refused or deleted is never renewed or
    /// used again, no ended or run-out lease term is extended or granted again, and an engine that
    /// expired never validates a token again. (A backend that loses data can forget a deletion, and
    /// reuses tokens, hence `tokenReset`.)
    NoRevival,
    /// Every lease a keep-alive reports owned, every term an engine adopts and every token
    /// `token()` returns was granted by the backend to that very session.
    GrantedOnly,
    /// Groups: a `members` read never lists a session the backend let expire (by its own clock),
    /// refused or deleted before the read (SPEC §2.2, §5 "members whose sessions are alive"). A
    /// backend that loses data can forget a deletion, a clock stepping back revives by its own
    /// reckoning, hence `tokenReset` and `clockJump`.
    MembersLive,
    /// Groups: a `members` read lists every session whose last join or leave of the group that
    /// the backend applied was a join, while that session is alive by the backend's clock (SPEC §5
    /// "a join that returned is visible at once"; a membership lasts while its session lives). A
    /// backend that loses data forgets joins, hence `tokenReset`.
    JoinVisible,
    /// Groups: a `members` read never lists a session whose last join or leave of the group that
    /// the backend applied was a leave, or that never joined it. (A restore from stale data can
    /// undo a leave, hence `tokenReset`.)
    LeaveFinal,
    /// Groups, as the application sees it: while `Membership::is_member()` is true (sampled), every
    /// `members` read the backend evaluates at that instant lists the member. It rests on the local
    /// deadline preceding the backend's expiry, like `exclusive-token`. One exception, bounded: a
    /// leave that the backend applied after the join it came from (a leave that landed late) is
    /// found by the session's keep-alives, which report its groups; the session must report the
    /// loss (`MembershipLost`, `is_member()` false) or stop claiming the membership within two
    /// lease durations of the first read that missed it.
    MemberListed,
    /// Elections: a `leader()` (`holder`) read reports exactly the live term of the name at the
    /// backend's instant — the holder's session alive, the term not released, closed or run out —
    /// with no more remaining time than that term has, and `None` only when no term is live (the
    /// `LeaseBackend::holder` contract). Same premises as `one-holder`.
    LeaderRead,
    /// Coordinator: once `Election::resign()` (or dropping the election) returned, no session of
    /// the coordinator is granted the name again by that campaign (no zombie campaign after a
    /// recovery re-attached it; checked by the shipped-runtime simulation, `sim::shipped`).
    NoZombie,
    /// Leader tasks (`Election::run_while_leader`; shipped-runtime simulation): whenever a task's
    /// closure finds `LeaderContext::token()` Ok (read under the history lock right after a sample of
    /// every handle), the token is the context's term (`granted_token()`), `is_cancelled()` read just
    /// before was false, the election's own `token()` answered that token in the same sample, no
    /// other handle's `token()`/`is_leader()` of the name was Ok, and the backend's live term of the
    /// name is that session's term with that token (not released, closed or run out). After the
    /// election ended (`resign()` or its drop returned, or — not durable — its session ended) or the
    /// task was dropped, `token()` fails in every call; after `stop()` returned the closure is never
    /// called again (and its thread has ended); and the task's thread ends within five lease
    /// durations of the election's end or of the drop (the runtime needs at most the closure's
    /// current call — the simulation's closures ignore cancellation for at most half a lease — plus
    /// 200 ms; the rest is the explorer's scheduling, in which a woken thread can wait several clock
    /// steps: the longest seen over 9,000 clean seeds was 2.3 leases). The token's validity rests on
    /// the local deadline preceding the backend's expiry, as `exclusive-token` does.
    LeaderTask,
    /// Member watches (`watch_members`; shipped-runtime simulation): every `GroupChange` the
    /// application receives lists exactly the members of a `members` read the backend evaluated for
    /// the group, later than the read of the watch's previous change (so `members-live` and
    /// `leave-final` hold for it, in order); its `joined`/`left` are the difference from the previous
    /// change (everyone on the first); and it lists no session that died or left the group more than
    /// five lease durations before it was received (the watcher uses a reply at most a query
    /// timeout after its call started and inline backends answer at once; the application drains
    /// the stream at once, so the rest is the explorer's scheduling: a change's read was at most 2.5
    /// leases old when received over 9,000 clean seeds). A coordinator's watch
    /// (`Coordinator::watch_members`, which outlives session replacements) never reports its
    /// watcher stopped while the coordinator runs. The reads rest on what `members-live` rests on.
    WatchLive,
    /// Member watches (shipped-runtime simulation): a join that returned (a coordinator's re-join on
    /// its new session counts once its `is_member()` answers true there) is seen — listed by a change
    /// a watch of the group delivers, or by its current view — within four lease durations of the
    /// join returning (or of the watch starting), unless the membership ended (left, or its session
    /// died) or the watch stopped first; a window that overlaps the seed's outage ends four lease
    /// durations after the outage instead. The watcher reads at least every `renew_interval / 2 +
    /// renew_interval / 4` (a quarter lease) plus two calls bounded by the query timeout, whether or
    /// not pushes are lost or duplicated, so four leases leave room for a dozen reads. A read that
    /// listed the member but returned to its caller only after the query timeout (a stalled or late
    /// reply: `MembersReplyLate`) restarts the four leases from its return, as the outage does; so
    /// does a read that failed by an injected fault (`MembersReadFailed`), since the watcher got
    /// an error, not an answer: a Cluster read is a `group_live` plus one `session_info` per
    /// member, each on its own node with its own fate, and with the harsh faults half of them
    /// fail — seen in session 22 as six failed reads in a row (seed 338 of the Cluster election
    /// sweep). A watcher that stops reading, or waits too long after an error, still runs out of
    /// time: no read restarts the bound then. A backend that loses data forgets joins, hence
    /// `tokenReset`.
    WatchSeesJoin,
    /// Liveness (SPEC §8): nothing a live session holds is reported lost in a window with no
    /// injected fault. A loss is what the application sees end without ending it: the session's
    /// `is_alive()` turning false, or, on a session still alive and not closing, a held lease's or
    /// election's `token()` failing or a membership's `is_member()` turning false
    /// ([`Event::Expired`], [`Event::HeldLost`]). It is excused only by a fault that touched the
    /// session and that no clean renewal followed: a fault of one of the session's own calls
    /// ([`Event::CallFault`]: request lost, refused by the outage or a partition, stalled, reply
    /// lost or late, delivered late) counts until the call returned or its effect landed
    /// (`until`), a fault of no known session's call, the outage, a data loss, a clock jump or a
    /// pause counts for every session; from the fault's end on, the excuse holds until the
    /// backend renews the session (`Event::Renewed`) strictly after it — a renewal recorded with
    /// no fault of the session before it, in a clock step before the one the loss was seen in
    /// (its reply reached the engine by then). The simulation's own granularity excuses two more
    /// cases, as pauses of the renewal thread: the session's next renewal was due (one renew
    /// interval after its latest renewal, or its open) and had not run when the loss was seen —
    /// the clock driver moves time in steps of up to a third of the lease, so a timer fires up to
    /// a step late; and, for the session's own end only, the latest renewal (or the open) took
    /// effect in the step before, or the same step — its reply may reach the engine only in the
    /// next step. A loss with no such excuse is spurious. Rests on the node clock
    /// (a data loss, a clock step or a node clock beyond the drift end terms early), hence every
    /// premise.
    NoSpuriousLoss,
    /// Liveness (SPEC §8): no call path makes more than a small fixed number of backend calls
    /// per renew interval without progress. Counted per session in every window of one renew
    /// interval of real time: acquires of one name the backend answered busy (a wait or a campaign
    /// polling, and the application's own `try_lock`s, at most [`BUSY_PER_RENEW`]), and renewals
    /// the backend applied or refused (at most [`RENEWALS_PER_RENEW`]: one per interval, retries
    /// back off from a quarter of it). Needs no premise: a loop that spins does so whatever the
    /// clocks do.
    BoundedCalls,
    /// Partition sets (shipped-runtime simulation, `Workload::Partitions`; definitions of the
    /// membership `M`, a partition's owner and a *stable* set in `sim::check::partitions`): at every
    /// stable instant, no session of `M` owns (has `token()` Ok on) more than ⌈count / |M|⌉ of the
    /// set's partitions (SPEC §13 "balanced"; the simulation sets no maximum per member). The
    /// owners' `token()` rests on what `exclusive-token` rests on.
    PartitionBalanced,
    /// Partition sets: at every stable instant at which `M` is not empty, every partition of the
    /// set is owned by a session of `M` (SPEC §13 "covered": within one lease duration plus the drain period plus one
    /// hand-off of membership becoming stable). "Stable" is [`STABLE_LEASES`] (4) leases plus the
    /// set's drain period after the last unsettling event; over 2,000 clean seeds the longest a
    /// set stayed uncovered or unbalanced after one was 1.9 leases plus its drain (see
    /// docs/testing.md: a join seen by a member's watch up to a retry interval plus jitter plus a
    /// query timeout late, the drain, the release's notification or the retry pause, retries of
    /// failed calls). Same premises as `exclusive-token`.
    PartitionCovered,
    /// Partition sets, judged between consecutive stable, covered instants of a set (owners as
    /// above): with no unsettling event between them, no partition changed owner (at rest); with
    /// exactly one change of `M` between them and nothing else unsettling (no fault-caused `Lost`,
    /// outage, network partition): after a leave or a crash of `l`, only `l`'s partitions moved;
    /// after a join of `j`, every partition that moved went to `j` or came from a member that
    /// owned more than the new cap ⌈count / |M|⌉ (a member at or below the new cap keeps what it
    /// has unless it gives it to the joiner). The stronger "a join moves partitions only to the
    /// joiner" of SPEC §13 does not hold for the shipped rule from every balanced assignment
    /// (docs/testing.md, "Partition sets"), nor while members disagree about the join.
    /// Premises: those of `partition-covered`.
    PartitionSticky,
    /// Partition sets, liveness (SPEC §13 "live"): no member reports a partition
    /// `PartitionEvent::Lost` unless its session is one the application closes, closed or saw
    /// expire (whose end `no-spurious-loss` judges), or a fault explains it exactly as
    /// `no-spurious-loss` excuses a loss: a fault of one of the session's calls (lost, refused by
    /// the outage or a network partition, stalled, reply lost or late), a data loss, a clock jump
    /// or the outage, with no clean renewal of the session after it; or the simulation's clock
    /// granularity (the session's renewal was due and had not run). Same premises as
    /// `no-spurious-loss`.
    PartitionLive,
}

/// `bounded-calls`: at most this many busy acquires of one name by one session per renew
/// interval. The runtime polls a name at most every `renew_interval / 2` per waiting thread
/// (`SessionOptions::retry_interval`); the simulation's application adds at most its operations
/// (each of a node's user threads makes eight in all, some at one instant).
pub const BUSY_PER_RENEW: usize = 16;

/// `bounded-calls`: at most this many renewals of one session per renew interval (one per
/// interval; failed ones retried after a quarter, a half, then a whole interval).
pub const RENEWALS_PER_RENEW: usize = 6;

impl Invariant {
    /// Every invariant.
    pub const ALL: [Invariant; 21] = [
        Invariant::OneHolder,
        Invariant::ExclusiveToken,
        Invariant::TokenInTerm,
        Invariant::TokenMonotonic,
        Invariant::NoRevival,
        Invariant::GrantedOnly,
        Invariant::MembersLive,
        Invariant::JoinVisible,
        Invariant::LeaveFinal,
        Invariant::MemberListed,
        Invariant::LeaderRead,
        Invariant::NoZombie,
        Invariant::LeaderTask,
        Invariant::WatchLive,
        Invariant::WatchSeesJoin,
        Invariant::NoSpuriousLoss,
        Invariant::BoundedCalls,
        Invariant::PartitionBalanced,
        Invariant::PartitionCovered,
        Invariant::PartitionSticky,
        Invariant::PartitionLive,
    ];

    /// Short name.
    pub fn name(self) -> &'static str {
        match self {
            Invariant::OneHolder => "one-holder",
            Invariant::ExclusiveToken => "exclusive-token",
            Invariant::TokenInTerm => "token-in-term",
            Invariant::TokenMonotonic => "token-monotonic",
            Invariant::NoRevival => "no-revival",
            Invariant::GrantedOnly => "granted-only",
            Invariant::MembersLive => "members-live",
            Invariant::JoinVisible => "join-visible",
            Invariant::LeaveFinal => "leave-final",
            Invariant::MemberListed => "member-listed",
            Invariant::LeaderRead => "leader-read",
            Invariant::NoZombie => "no-zombie",
            Invariant::LeaderTask => "leader-task",
            Invariant::WatchLive => "watch-live",
            Invariant::WatchSeesJoin => "watch-sees-join",
            Invariant::NoSpuriousLoss => "no-spurious-loss",
            Invariant::BoundedCalls => "bounded-calls",
            Invariant::PartitionBalanced => "partition-balanced",
            Invariant::PartitionCovered => "partition-covered",
            Invariant::PartitionSticky => "partition-sticky",
            Invariant::PartitionLive => "partition-live",
        }
    }

    /// The premises the invariant depends on (beyond the engine's rules being intact).
    pub fn premises(self) -> &'static [Premise] {
        match self {
            Invariant::OneHolder => &[Premise::TokenReset, Premise::ClockJump],
            Invariant::ExclusiveToken | Invariant::TokenInTerm => {
                &[Premise::TokenReset, Premise::ClockJump, Premise::Drift]
            }
            Invariant::TokenMonotonic => &[Premise::TokenReset],
            Invariant::NoRevival => &[Premise::TokenReset, Premise::ClockJump],
            Invariant::GrantedOnly => &[],
            Invariant::MembersLive => &[Premise::TokenReset, Premise::ClockJump],
            Invariant::JoinVisible | Invariant::LeaveFinal => &[Premise::TokenReset],
            Invariant::MemberListed => &[Premise::TokenReset, Premise::ClockJump, Premise::Drift],
            Invariant::LeaderRead => &[Premise::TokenReset, Premise::ClockJump],
            Invariant::NoZombie => &[],
            Invariant::LeaderTask => &[Premise::TokenReset, Premise::ClockJump, Premise::Drift],
            Invariant::WatchLive => &[Premise::TokenReset, Premise::ClockJump],
            Invariant::WatchSeesJoin => &[Premise::TokenReset],
            Invariant::NoSpuriousLoss => &[Premise::TokenReset, Premise::ClockJump, Premise::Drift],
            Invariant::BoundedCalls => &[],
            Invariant::PartitionBalanced
            | Invariant::PartitionCovered
            | Invariant::PartitionSticky
            | Invariant::PartitionLive => &[Premise::TokenReset, Premise::ClockJump, Premise::Drift],
        }
    }
}

impl fmt::Display for Invariant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())?;
        let p = self.premises();
        if !p.is_empty() {
            f.write_str(" [")?;
            for (i, p) in p.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                f.write_str(p.tag())?;
            }
            f.write_str("]")?;
        }
        Ok(())
    }
}

/// One observed violation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant.
    pub invariant: Invariant,
    /// Index of the record that revealed it.
    pub index: usize,
    /// Simulated real time of that record (ns).
    pub t: u64,
    /// What exactly went wrong.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {:.3}ms (record #{}): {}", self.invariant, self.t as f64 / 1e6, self.index, self.detail)
    }
}

#[derive(Debug)]
struct Term {
    node: u8,
    sess: u32,
    token: u64,
    until: u64,
    /// Released or closed.
    ended: bool,
    /// The node's clock was seen at or past `until` (it ran out).
    ran_out: bool,
}

#[derive(Debug)]
struct SessState {
    node: u8,
    until: u64,
    /// Why the session is known dead.
    dead: Option<String>,
    /// Real time (ns) of the record at which the history first showed it dead.
    dead_at: u64,
}

/// The `client` of a [`Event::MembersRead`] that records what a read spanning several backend calls
/// answered when its last call returned (the shipped simulation's Redis Cluster model: `group_live`
/// on the group's node, then `session_info` on each member's node). Such a read reflects no single
/// instant, so only the application-side checks (`watch-live`) compare against it; the backend-side
/// group invariants are checked on the read of the group's data at its first call's instant.
pub const COMPOSITE_READ: u8 = 254;

/// Checks every invariant over `records` of sessions renewed every third of `lease_ns`;
/// returns the violations in history order.
pub fn check(records: &[Record], lease_ns: u64) -> Vec<Violation> {
    check_renewing(records, lease_ns, lease_ns / 3)
}

/// Checks every invariant over `records` of sessions with a lease of `lease_ns` renewed every
/// `renew_ns`; returns the violations in history order.
pub fn check_renewing(records: &[Record], lease_ns: u64, renew_ns: u64) -> Vec<Violation> {
    let mut c = Checker::for_records(records, lease_ns, renew_ns);
    for (i, r) in records.iter().enumerate() {
        c.observe(i, r);
    }
    if let Some(r) = records.last() {
        c.undetected_losses(records.len() - 1, r.t);
        c.app_finish(records.len() - 1, r.t);
    }
    c.violations
}

#[derive(Default)]
struct Checker {
    /// Real time (ns) of the record being observed.
    now: u64,
    terms: HashMap<Name, Term>,
    max_token: HashMap<Name, u64>,
    grants: HashSet<(u32, Name, u64)>,
    sessions: HashMap<u32, SessState>,
    valid: HashMap<Name, BTreeSet<(u8, u32, u64)>>,
    client_expired: HashSet<(u8, u32)>,
    /// Per (group, session): whether the last join or leave the backend applied was a join.
    joined: BTreeMap<(Name, u32), bool>,
    /// Per group: the (client, session) handles whose `is_member()` is true.
    member_valid: BTreeMap<Name, BTreeSet<(u8, u32)>>,
    /// Memberships a read missed after a late leave, not yet reported lost: (group, client,
    /// session) → (record index, real time) of the first miss.
    undetected: BTreeMap<(Name, u8, u32), (usize, u64)>,
    /// How long (real ns) a session may take to report such a loss.
    detect_within: u64,
    /// Leader tasks and member watches (`app`).
    app: app::AppState,
    /// Partition sets (`partitions`).
    parts: partitions::PartState,
    /// The `token-in-term` failures reported (one per client, session, name and token).
    out_of_term: HashSet<(u8, u32, Name, u64)>,
    /// `no-spurious-loss`: every injected fault of the run as (from, until) real ns, per session
    /// it touched (`None`: every session), read from the whole history before it is checked.
    faults: HashMap<Option<u32>, Vec<(u64, u64)>>,
    /// `no-spurious-loss`: per session, the instants (real ns) of its clean renewals.
    clean_renewals: HashMap<u32, Vec<u64>>,
    /// The real time of the records before the current record's instant (the previous clock
    /// step with a record).
    prev_t: u64,
    /// `no-spurious-loss`: per session, its latest renewal or its open (real ns).
    renewed_at: HashMap<u32, u64>,
    /// Sessions the application closes or closed, and sessions it saw expire: their holdings'
    /// ends are not losses of a live session.
    ended: HashSet<u32>,
    /// The sessions' renew interval (real ns).
    renew_ns: u64,
    /// `bounded-calls`: per (session, name), the real instants of its busy acquires within the
    /// last renew interval; per session (name `None`), of its renewals.
    calls: HashMap<(u32, Option<Name>), std::collections::VecDeque<u64>>,
    /// `bounded-calls` failures reported (one per session and name).
    spinning: HashSet<(u32, Option<Name>)>,
    violations: Vec<Violation>,
}

impl Checker {
    /// A checker for `records` (their faults read ahead, see `faults`).
    fn for_records(records: &[Record], lease_ns: u64, renew_ns: u64) -> Checker {
        let mut c = Checker {
            detect_within: lease_ns.saturating_mul(2),
            app: app::AppState::new(lease_ns),
            parts: partitions::PartState::new(lease_ns),
            renew_ns,
            ..Checker::default()
        };
        for r in records {
            let (k, span) = match &r.event {
                Event::CallFault { sess, from, until, .. } => (*sess, (*from, *until)),
                Event::Outage { from, until } => (None, (*from, *until)),
                Event::Pause { until, .. } => (None, (r.t, *until)),
                Event::DataLoss { .. } | Event::ClockJump { .. } => (None, (r.t, r.t)),
                _ => continue,
            };
            c.faults.entry(k).or_default().push(span);
        }
        c
    }

    fn fail(&mut self, invariant: Invariant, i: usize, t: u64, detail: String) {
        self.violations.push(Violation { invariant, index: i, t, detail });
    }

    /// The node's clock reads `b`: every session of that node whose expiry it reached is dead
    /// from now on (as observed; a clock stepping back does not revive it).
    fn see(&mut self, node: u8, b: u64) {
        for s in self.sessions.values_mut() {
            if s.node == node && s.dead.is_none() && s.until <= b {
                s.dead = Some(format!("node {node} clock reached {b} ≥ its expiry {}", s.until));
                s.dead_at = self.now;
            }
        }
        for term in self.terms.values_mut() {
            if term.node == node && term.until <= b {
                term.ran_out = true;
            }
        }
    }

    fn session_live(&mut self, i: usize, t: u64, node: u8, b: u64, sess: u32, what: &str) {
        self.see(node, b);
        if let Some(why) = self.sessions.get(&sess).and_then(|s| s.dead.clone()) {
            self.fail(Invariant::NoRevival, i, t, format!("session s{sess} {what} after it died: {why}"));
        }
    }

    /// `bounded-calls`: counts a call of `sess` (on `name`, or a renewal) at `t`.
    fn count_call(&mut self, i: usize, t: u64, sess: u32, name: Option<&Name>) {
        let key = (sess, name.cloned());
        let q = self.calls.entry(key.clone()).or_default();
        while q.front().is_some_and(|t0| *t0 + self.renew_ns <= t) {
            q.pop_front();
        }
        q.push_back(t);
        let (n, bound) = (q.len(), if name.is_some() { BUSY_PER_RENEW } else { RENEWALS_PER_RENEW });
        if n > bound && self.spinning.insert(key) {
            let what = name.map_or("renewals".to_string(), |n| format!("acquires of '{n}' answered busy"));
            let msg = format!(
                "s{sess}: {n} {what} within one renew interval ({} ms) up to {:.3}ms, more than {bound}",
                self.renew_ns / 1_000_000,
                t as f64 / 1e6
            );
            self.fail(Invariant::BoundedCalls, i, t, msg);
        }
    }

    /// The latest end (real ns) of the faults that touched `sess` and had begun by real time `t`.
    fn excused_until(&self, sess: u32, t: u64) -> Option<u64> {
        [Some(sess), None]
            .iter()
            .filter_map(|k| self.faults.get(k))
            .flatten()
            .filter(|(from, _)| *from <= t)
            .map(|(_, until)| *until)
            .max()
    }

    /// `no-spurious-loss`: `what` of client `client`'s session `sess` was seen lost at `t`; fails
    /// unless excused (see [`Invariant::NoSpuriousLoss`]).
    fn judge_loss(&mut self, i: usize, t: u64, client: u8, sess: u32, what: &str, session: bool) {
        self.judge_loss_of(Invariant::NoSpuriousLoss, i, t, client, sess, what, session);
    }

    /// [`judge_loss`](Checker::judge_loss) failing `invariant`.
    #[allow(clippy::too_many_arguments)]
    fn judge_loss_of(
        &mut self,
        invariant: Invariant,
        i: usize,
        t: u64,
        client: u8,
        sess: u32,
        what: &str,
        session: bool,
    ) {
        if let Some(r) = self.renewed_at.get(&sess) {
            if t >= r.saturating_add(self.renew_ns) {
                // The next renewal was due and has not run: the clock driver moved time by a
                // whole step (up to a third of the lease) before the renewal thread could wake.
                return;
            }
            if session && *r >= self.prev_t {
                // The session ran out while its latest renewal (or its open), which took effect
                // in the clock step before this one or in this one, may not have had its reply
                // reach the engine yet (seen: the reply applied a step after the call took
                // effect). Only the session's own end: its deadline is what that reply moves;
                // a term's loss is judged below (a term the session still holds is lost by a
                // reply that fails to list or extend it, or by its own deadline).
                return;
            }
        }
        // A clean renewal counts once its reply surely reached the engine: a clock step before
        // the one the loss was seen in.
        let clean = self.clean_renewals.get(&sess).and_then(|v| v.iter().rev().find(|r| **r < self.prev_t)).copied();
        let why = match (self.excused_until(sess, t), clean) {
            (Some(end), Some(r)) if r > end => format!(
                "its last fault was over at {:.3}ms and the backend renewed it cleanly at {:.3}ms since",
                end as f64 / 1e6,
                r as f64 / 1e6
            ),
            (Some(_), _) => return,
            (None, _) => "no fault touched the session".to_string(),
        };
        let msg = format!("client {client} s{sess}: {what} lost at {:.3}ms, and {why}", t as f64 / 1e6);
        self.fail(invariant, i, t, msg);
    }

    fn granted(&mut self, i: usize, t: u64, sess: u32, name: &Name, token: u64, what: &str) {
        if !self.grants.contains(&(sess, name.clone(), token)) {
            self.fail(
                Invariant::GrantedOnly,
                i,
                t,
                format!("{what}: s{sess} with '{name}' token {token}, never granted to it by the backend"),
            );
        }
    }

    fn observe(&mut self, i: usize, r: &Record) {
        let t = r.t;
        if t != self.now {
            self.prev_t = self.now;
        }
        self.now = t;
        // The application-side checks first: they read the state as of the previous record.
        self.app_observe(i, r);
        self.parts_observe(i, r);
        match &r.event {
            Event::LeaderTask { .. }
            | Event::Watch { .. }
            | Event::MembersReplyLate { .. }
            | Event::MembersReadFailed { .. }
            | Event::Teardown
            | Event::Outage { .. } => {}
            Event::NodeClock { node, b } => {
                self.clock_read(i, t, *node, *b);
                self.parts_evaluate(i, t);
            }
            Event::PartitionSet { .. } => {}
            Event::Setup { .. } | Event::Partition { .. } | Event::SessionStarted { .. } | Event::Lost { .. } => {}
            // Read before the run (`faults`).
            Event::DataLoss { .. } | Event::ClockJump { .. } | Event::Pause { .. } | Event::CallFault { .. } => {}
            Event::HeldLost { client, sess, what, name } => {
                if !self.ended.contains(sess) {
                    let what = match what {
                        super::history::Held::Lease => format!("lease '{name}' (token() failed)"),
                        super::history::Held::Leadership => format!("leadership of '{name}' (token() failed)"),
                        super::history::Held::Membership => format!("membership of '{name}' (is_member() false)"),
                    };
                    self.judge_loss(i, t, *client, *sess, &what, false);
                }
            }
            Event::Closed { sess, .. } => {
                self.ended.insert(*sess);
            }
            Event::Closing { sess, .. } => {
                self.ended.insert(*sess);
                for set in self.member_valid.values_mut() {
                    set.retain(|(_, s)| s != sess);
                }
                self.undetected.retain(|(_, _, s), _| s != sess);
            }
            Event::Opened { node, b, sess, until } => {
                self.see(*node, *b);
                self.sessions.insert(*sess, SessState { node: *node, until: *until, dead: None, dead_at: 0 });
                self.renewed_at.insert(*sess, t);
            }
            Event::Renewed { node, b, sess, until } => {
                if self.excused_until(*sess, t).is_none_or(|end| t > end) {
                    self.clean_renewals.entry(*sess).or_default().push(t);
                }
                self.count_call(i, t, *sess, None);
                self.renewed_at.insert(*sess, t);
                self.session_live(i, t, *node, *b, *sess, "renewed");
                if let Some(s) = self.sessions.get_mut(sess) {
                    s.until = *until;
                }
            }
            Event::SessionChecked { node, b, sess } => {
                self.session_live(i, t, *node, *b, *sess, "accepted an acquire");
            }
            Event::Busy { sess, name, .. } => self.count_call(i, t, *sess, Some(name)),
            Event::Refused { node, b, sess } => {
                self.see(*node, *b);
                if let Some(s) = self.sessions.get_mut(sess).filter(|s| s.dead.is_none()) {
                    s.dead = Some(format!("node {node} refused it at {b}"));
                    s.dead_at = t;
                }
            }
            Event::Deleted { node, b, sess, frees_leases } => {
                self.see(*node, *b);
                if let Some(s) = self.sessions.get_mut(sess).filter(|s| s.dead.is_none()) {
                    s.dead = Some(format!("node {node} deleted it at {b}"));
                    s.dead_at = t;
                }
                if *frees_leases {
                    for term in self.terms.values_mut() {
                        if term.sess == *sess {
                            term.ended = true;
                        }
                    }
                }
            }
            Event::Granted { node, b, sess, name, token, until } => {
                self.see(*node, *b);
                let token = token.get();
                self.grants.insert((*sess, name.clone(), token));
                // Same session and token: the same term again (a new term always has a new token).
                if let Some(p) = self.terms.get_mut(name).filter(|p| p.sess == *sess && p.token == token) {
                    let revived = (p.ended || p.ran_out).then(|| {
                        format!(
                            "term of '{name}' (s{sess}, token {token}) granted again after it {}",
                            if p.ended { "ended".to_string() } else { format!("ran out at {}", p.until) }
                        )
                    });
                    p.until = p.until.max(*until);
                    if let Some(msg) = revived {
                        self.fail(Invariant::NoRevival, i, t, msg);
                    }
                    return;
                }
                if let Some(p) = self.terms.get(name) {
                    if !p.ended && p.until > *b {
                        let msg = format!(
                            "'{name}' granted to s{sess} (token {token}) at node {node} clock {b} while s{} still \
                             holds token {} until {}",
                            p.sess, p.token, p.until
                        );
                        self.fail(Invariant::OneHolder, i, t, msg);
                    }
                }
                let max = self.max_token.get(name).copied().unwrap_or(0);
                if token <= max {
                    let msg = format!("'{name}' new term for s{sess} has token {token}, not above {max} seen before");
                    self.fail(Invariant::TokenMonotonic, i, t, msg);
                }
                self.max_token.insert(name.clone(), max.max(token));
                let term = Term { node: *node, sess: *sess, token, until: *until, ended: false, ran_out: false };
                self.terms.insert(name.clone(), term);
            }
            Event::Extended { node, b, sess, name, token, until } => {
                self.see(*node, *b);
                let token = token.get();
                let mut failure = None;
                match self.terms.get_mut(name) {
                    Some(p) if p.sess == *sess && p.token == token => {
                        if p.ended || p.ran_out {
                            failure = Some((
                                Invariant::NoRevival,
                                format!(
                                    "term of '{name}' (s{sess}, token {token}) extended after it {}",
                                    if p.ended { "ended".to_string() } else { format!("ran out at {}", p.until) }
                                ),
                            ));
                        }
                        p.until = p.until.max(*until);
                    }
                    other => {
                        let cur = other.map_or("none".to_string(), |p| format!("s{} token {}", p.sess, p.token));
                        failure = Some((
                            Invariant::OneHolder,
                            format!("'{name}' extended for s{sess} token {token}, but the current term is {cur}"),
                        ));
                    }
                }
                if let Some((inv, msg)) = failure {
                    self.fail(inv, i, t, msg);
                }
            }
            Event::Released { node, b, sess, name, token } => {
                self.see(*node, *b);
                if let Some(p) = self.terms.get_mut(name) {
                    if p.sess == *sess && token.is_none_or(|tk| tk.get() == p.token) {
                        p.ended = true;
                    }
                }
            }
            Event::Adopted { client: _, sess, name, token } => {
                self.granted(i, t, *sess, name, token.get(), "adopted");
            }
            Event::Owned { client: _, sess, owned } => {
                for (name, token) in owned {
                    self.granted(i, t, *sess, name, token.get(), "reported owned");
                }
            }
            Event::Expired { client, sess } => {
                self.client_expired.insert((*client, *sess));
                if self.ended.insert(*sess) {
                    self.judge_loss(i, t, *client, *sess, "the session (is_alive() false)", true);
                }
            }
            Event::ValidStart { client, sess, name, token } => {
                self.granted(i, t, *sess, name, token.get(), "token() returned");
                if self.client_expired.contains(&(*client, *sess)) {
                    let msg = format!("client {client} s{sess}: token() of '{name}' succeeds after the engine expired");
                    self.fail(Invariant::NoRevival, i, t, msg);
                }
                let set = self.valid.entry(name.clone()).or_default();
                let others: Vec<(u8, u32, u64)> =
                    set.iter().filter(|(c, s, _)| (*c, *s) != (*client, *sess)).copied().collect();
                set.retain(|(c, s, _)| (*c, *s) != (*client, *sess));
                set.insert((*client, *sess, token.get()));
                for (c, s, tk) in others {
                    let msg = format!(
                        "token() of '{name}' succeeds for client {client} s{sess} (token {token}) while it still \
                         succeeds for client {c} s{s} (token {tk})"
                    );
                    self.fail(Invariant::ExclusiveToken, i, t, msg);
                }
            }
            Event::ValidEnd { client, sess, name } => {
                if let Some(set) = self.valid.get_mut(name) {
                    set.retain(|(c, s, _)| (*c, *s) != (*client, *sess));
                }
            }
            Event::JoinReturned { .. } | Event::Leaving { .. } | Event::Notified { .. } | Event::Resigned { .. } => {}
            Event::Joined { node, b, sess, group } => {
                self.session_live(i, t, *node, *b, *sess, &format!("joined '{group}'"));
                self.joined.insert((group.clone(), *sess), true);
            }
            Event::Left { node, b, sess, group } => {
                self.see(*node, *b);
                self.joined.insert((group.clone(), *sess), false);
            }
            Event::MembersRead { node, b, client, group, members } => {
                self.members_read(i, t, *node, *b, *client, group, members)
            }
            Event::MemberStart { client, sess, group } => {
                self.member_valid.entry(group.clone()).or_default().insert((*client, *sess));
            }
            Event::MemberEnd { client, sess, group } => {
                if let Some(set) = self.member_valid.get_mut(group) {
                    set.remove(&(*client, *sess));
                }
                self.undetected.remove(&(group.clone(), *client, *sess));
            }
            Event::MembershipLost { client: _, sess, group } => {
                // The session's membership of `group`, whichever handle claims it: a session has
                // one membership per group, and another thread's handle (a watcher's join) or the
                // coordinator's shares it, while the event is recorded for the session's owner.
                self.undetected.retain(|(g, _, s), _| (g, s) != (group, sess));
            }
            Event::HolderRead { node, b, client, name, holder } => {
                self.holder_read(i, t, *node, *b, *client, name, *holder)
            }
            Event::Elected { client: _, sess, name, token } => {
                self.granted(i, t, *sess, name, token.get(), "elected");
            }
        }
    }

    /// The node's clock reads `b`: every `token()` still succeeding on a current term of that
    /// node that ran out by it fails `token-in-term`.
    fn clock_read(&mut self, i: usize, t: u64, node: u8, b: u64) {
        self.see(node, b);
        let mut fails = Vec::new();
        for (name, set) in &self.valid {
            let Some(p) = self.terms.get(name).filter(|p| p.node == node && p.ran_out && !p.ended) else { continue };
            for (c, s, tk) in set {
                if *s == p.sess && *tk == p.token && self.out_of_term.insert((*c, *s, name.clone(), *tk)) {
                    fails.push(format!(
                        "token() of '{name}' succeeds for client {c} s{s} (token {tk}) at node {node} clock {b}, past \
                         the term's end {}",
                        p.until
                    ));
                }
            }
        }
        for msg in fails {
            self.fail(Invariant::TokenInTerm, i, t, msg);
        }
    }

    fn dead(&self, sess: u32) -> Option<&str> {
        self.sessions.get(&sess).and_then(|s| s.dead.as_deref())
    }

    #[allow(clippy::too_many_arguments)]
    fn members_read(&mut self, i: usize, t: u64, node: u8, b: u64, client: u8, group: &Name, members: &[u32]) {
        self.see(node, b);
        if client == COMPOSITE_READ {
            // The answer of a read that spans calls (see `COMPOSITE_READ`): for the watch checks only.
            return;
        }
        let mut fails = Vec::new();
        for s in members {
            if let Some(why) = self.dead(*s) {
                fails.push((
                    Invariant::MembersLive,
                    format!("members('{group}') read by client {client} at {b} lists s{s}, which died: {why}"),
                ));
            }
            match self.joined.get(&(group.clone(), *s)) {
                Some(true) => {}
                Some(false) => fails.push((
                    Invariant::LeaveFinal,
                    format!("members('{group}') read by client {client} at {b} lists s{s}, whose last applied op was a leave"),
                )),
                None => fails.push((
                    Invariant::LeaveFinal,
                    format!("members('{group}') read by client {client} at {b} lists s{s}, which never joined"),
                )),
            }
        }
        for ((g, s), joined) in &self.joined {
            if g == group && *joined && self.dead(*s).is_none() && !members.contains(s) {
                fails.push((
                    Invariant::JoinVisible,
                    format!(
                        "members('{group}') read by client {client} at {b} misses s{s}: joined, not left, session alive"
                    ),
                ));
            }
        }
        if let Some(valid) = self.member_valid.get(group) {
            for (c, s) in valid {
                if !members.contains(s) {
                    if self.joined.get(&(group.clone(), *s)) == Some(&false) && self.dead(*s).is_none() {
                        // A late leave: the session's keep-alives must find it (checked below).
                        self.undetected.entry((group.clone(), *c, *s)).or_insert((i, t));
                        continue;
                    }
                    let why = match (self.joined.get(&(group.clone(), *s)), self.dead(*s)) {
                        (_, Some(why)) => format!("the session died: {why}"),
                        (Some(false), _) => "the backend applied a leave after the join it came from".to_string(),
                        _ => "the backend lost it".to_string(),
                    };
                    fails.push((
                        Invariant::MemberListed,
                        format!(
                            "members('{group}') read by client {client} at {b} misses s{s} while client {c}'s \
                             is_member() is true ({why})"
                        ),
                    ));
                }
            }
        }
        for (inv, msg) in fails {
            self.fail(inv, i, t, msg);
        }
        self.undetected_losses(i, t);
    }

    /// Fails every membership lost to a late leave that its session has not reported within
    /// `detect_within` of the first read that missed it.
    fn undetected_losses(&mut self, i: usize, t: u64) {
        let overdue: Vec<_> = self
            .undetected
            .iter()
            .filter(|(_, (_, t0))| t.saturating_sub(*t0) > self.detect_within)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        for ((group, c, s), (i0, t0)) in overdue {
            self.undetected.remove(&(group.clone(), c, s));
            self.fail(
                Invariant::MemberListed,
                i,
                t,
                format!(
                    "client {c}'s is_member() of '{group}' (s{s}) stayed true for {} ms after read #{i0} missed it (a \
                     leave the backend applied after the join): the loss was never reported",
                    (t - t0) / 1_000_000
                ),
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn holder_read(
        &mut self,
        i: usize,
        t: u64,
        node: u8,
        b: u64,
        client: u8,
        name: &Name,
        holder: Option<(u32, Token, u64)>,
    ) {
        self.see(node, b);
        let live = self
            .terms
            .get(name)
            .filter(|p| !p.ended && !p.ran_out && self.dead(p.sess).is_none())
            .map(|p| (p.sess, p.token, p.until));
        let msg = match (holder, live) {
            (None, None) => None,
            (Some((s, tk, rem)), Some((ls, ltk, until))) if s == ls && tk.get() == ltk => (b.saturating_add(rem) > until)
                .then(|| format!("leader('{name}') read by client {client} at {b}: s{s} token {tk} with {rem} ns left, past the term's end {until}")),
            (h, l) => Some(format!(
                "leader('{name}') read by client {client} at {b} reports {} but the live term is {}",
                h.map_or("none".into(), |(s, tk, _)| format!("s{s} token {tk}")),
                l.map_or("none".into(), |(s, tk, u)| format!("s{s} token {tk} until {u}"))
            )),
        };
        if let Some(msg) = msg {
            self.fail(Invariant::LeaderRead, i, t, msg);
        }
    }
}
