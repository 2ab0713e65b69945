//! The partition-set checks of the shipped-runtime simulation (`Workload::Partitions`):
//! `partition-balanced`, `partition-covered`, `partition-sticky` and `partition-live`, over the
//! records the members add ([`Event::PartitionSet`]), the sampled `token()` answers of the
//! partition leases ([`Event::ValidStart`]/[`Event::ValidEnd`]) and the backend's own records of
//! the set's group (`Joined`, `Left`, session deaths).
//!
//! **Membership** `M(t)`: the sessions whose last join or leave of the set's group
//! (`simba.part:<set>`) that the backend applied was a join and that the backend has not let
//! expire, refused or deleted — the backend's truth, not any member's view.
//!
//! **Owner** of partition `i` at `t`: the session whose sampled `token()` of `simba.part:<set>:<i>`
//! is Ok (the sampler asks every term a member's `owned()` listed, until it fails).
//!
//! **Stable** at `t` (judged after each clock step's sample, at the `NodeClock` record): the
//! run is not torn down and nothing *unsettling* happened within the last
//! [`STABLE_LEASES`] leases plus the set's drain period. Unsettling: `M` changed; a member of the
//! set opened, began closing (close or drop) or reported a partition `Lost`; a member's session
//! was seen expired by its application; the seed's outage, a network partition (a session cut
//! off), a data loss or a clock jump was under way. (Call faults — lost, stalled, late requests
//! and replies — are not: they cost retries, which the bound absorbs.)

use std::collections::{BTreeMap, BTreeSet};

use super::{Checker, Invariant};
use crate::sim::history::{Event, PartStep, Record};
use crate::state::LossReason;
use crate::types::Name;

/// A set is stable this many leases (plus its drain period) after the last unsettling event
/// (see the module docs and `Invariant::PartitionCovered` for the measurement behind it).
pub const STABLE_LEASES: u64 = 4;

/// What the partition checks measured over one history (`partition_stats`): how often they
/// judged, and how long the sets took to settle.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartStats {
    /// Evaluations at which a set was stable (balanced and covered were judged).
    pub stable_points: u64,
    /// Stable evaluations compared with the previous one across no unsettling event (nothing may move).
    pub rest_checked: u64,
    /// Stable evaluations compared with the previous stable one across exactly one join.
    pub joins_checked: u64,
    /// Stable evaluations compared with the previous stable one across exactly one leave or crash.
    pub leaves_checked: u64,
    /// The longest time (ns) after the last unsettling event, over every evaluation, at which a
    /// set was not yet both balanced and covered (whatever the bound).
    pub max_unsettled_ns: u64,
    /// Its drain period then (ns).
    pub max_unsettled_drain_ns: u64,
}

impl PartStats {
    /// Adds `o` (summing a sweep; the maximum of the maxima).
    pub fn add(&mut self, o: &PartStats) {
        self.stable_points += o.stable_points;
        self.rest_checked += o.rest_checked;
        self.joins_checked += o.joins_checked;
        self.leaves_checked += o.leaves_checked;
        if o.max_unsettled_ns > self.max_unsettled_ns {
            self.max_unsettled_ns = o.max_unsettled_ns;
            self.max_unsettled_drain_ns = o.max_unsettled_drain_ns;
        }
    }
}

#[derive(Debug, Default)]
pub(super) struct PartState {
    lease_ns: u64,
    sets: BTreeMap<Name, SetState>,
    /// Unsettling intervals (real ns): the outage, network partitions, data losses, clock jumps.
    breaks: Vec<(u64, u64)>,
    /// Real time of the previous evaluation.
    prev_eval: u64,
    torn_down: bool,
    pub(super) stats: PartStats,
}

#[derive(Debug, Default)]
struct SetState {
    count: u32,
    /// The longest drain period of its members (ns).
    drain: u64,
    group: Option<Name>,
    leases: Vec<Name>,
    /// `M` at the previous evaluation.
    m: Vec<u32>,
    /// The last unsettling instant.
    quiet_since: u64,
    /// Something other than a membership change unsettled the set since the last stable point.
    tainted: bool,
    /// The membership changes since the last stable point, in order: (session, joined) — a join
    /// or leave the backend applied, or a member's death.
    steps: Vec<(u32, bool)>,
    /// (client, partition) whose current term its member gives up as planned (`Revoking`,
    /// `ReleaseEarly`, or `Closing` of the member): its `token()` turning off is no loss.
    planned: BTreeSet<(u8, u32)>,
    last_stable: Option<Stable>,
    /// Balanced or covered failures reported, once per invariant and quiet period.
    reported: BTreeSet<(Invariant, u64)>,
}

#[derive(Debug)]
struct Stable {
    m: Vec<u32>,
    owners: Vec<Option<u32>>,
    quiet_since: u64,
    index: usize,
}

impl PartState {
    pub(super) fn new(lease_ns: u64) -> PartState {
        PartState { lease_ns, ..PartState::default() }
    }
}

/// ⌈count / members⌉ (0 without members), the engine's cap without a maximum per member.
fn cap(count: u32, members: usize) -> usize {
    if members == 0 {
        0
    } else {
        (count as usize).div_ceil(members)
    }
}

impl Checker {
    /// Reads `r` for the partition checks (before the backend-side checks see it).
    pub(super) fn parts_observe(&mut self, i: usize, r: &Record) {
        let t = r.t;
        match &r.event {
            Event::Teardown => self.parts.torn_down = true,
            Event::Outage { from, until } => self.parts.breaks.push((*from, *until)),
            Event::Partition { until, .. } => self.parts.breaks.push((t, *until)),
            Event::DataLoss { .. } | Event::ClockJump { .. } => self.parts.breaks.push((t, t)),
            Event::Expired { sess, .. } => {
                for set in self.parts.sets.values_mut() {
                    if set.group.as_ref().is_some_and(|g| self.joined.contains_key(&(g.clone(), *sess))) {
                        set.quiet_since = t;
                    }
                }
            }
            Event::Joined { sess, group, .. } | Event::Left { sess, group, .. } => {
                // Read before the main match applies it to `joined`.
                let join = matches!(r.event, Event::Joined { .. });
                let was = self.joined.get(&(group.clone(), *sess)) == Some(&true);
                for set in self.parts.sets.values_mut() {
                    if set.group.as_ref() == Some(group) && was != join {
                        set.steps.push((*sess, join));
                    }
                }
            }
            Event::ValidEnd { client, name, .. } => {
                // A partition's `token()` turned off although its member did not give it up as
                // planned: a loss (its lease lost, its session past its local deadline — a
                // coordinator's session, whose end no `Expired` records): unsettling.
                let Some((set, p)) = crate::partitions::partition_of(name) else { return };
                if let Some(st) = self.parts.sets.get_mut(&set) {
                    if !st.planned.remove(&(*client, p)) {
                        st.quiet_since = t;
                        st.tainted = true;
                    }
                }
            }
            Event::PartitionSet { client, sess, set, what, .. } => {
                let st = self.parts.sets.entry(set.clone()).or_default();
                match what {
                    PartStep::Opened { count, drain } => {
                        if st.group.is_none() {
                            st.count = *count;
                            st.group = Name::new(format!("{}{set}", crate::types::PARTITION_NAME_PREFIX)).ok();
                            st.leases =
                                (0..*count).filter_map(|p| crate::partitions::fence_resource(set, p).ok()).collect();
                        }
                        st.drain = st.drain.max(*drain);
                        st.quiet_since = t;
                    }
                    PartStep::Closing { .. } => {
                        st.quiet_since = t;
                        for p in 0..st.count {
                            st.planned.insert((*client, p));
                        }
                    }
                    PartStep::Revoking { partition } | PartStep::ReleaseEarly { partition } => {
                        st.planned.insert((*client, *partition));
                    }
                    PartStep::Assigned { partition, .. } => {
                        st.planned.remove(&(*client, *partition));
                    }
                    PartStep::Lost { partition, reason } => {
                        st.quiet_since = t;
                        let session = matches!(reason, LossReason::SessionExpired | LossReason::SessionClosed);
                        if !session {
                            st.tainted = true;
                        }
                        if !self.ended.contains(sess) {
                            let what = format!("partition {partition} of '{set}' (Lost: {reason})");
                            self.judge_loss_of(Invariant::PartitionLive, i, t, *client, *sess, &what, session);
                        }
                    }
                    _ => {}
                }
            }
            _ => {}
        }
    }

    /// Judges every set at `t` (see the module docs).
    pub(super) fn parts_evaluate(&mut self, i: usize, t: u64) {
        let prev = self.parts.prev_eval;
        self.parts.prev_eval = t;
        let broken = self.parts.breaks.iter().filter(|(a, z)| *a <= t && *z >= prev).map(|(_, z)| (*z).min(t)).max();
        let names: Vec<Name> = self.parts.sets.keys().cloned().collect();
        for name in names {
            let Some(group) = self.parts.sets.get(&name).and_then(|s| s.group.clone()) else { continue };
            let m: Vec<u32> = self
                .joined
                .iter()
                .filter(|((g, s), joined)| *g == group && **joined && self.dead(*s).is_none())
                .map(|((_, s), _)| *s)
                .collect();
            let lease_ns = self.parts.lease_ns;
            let torn_down = self.parts.torn_down;
            let (owners, count, stable, quiet_since, drain) = {
                let st = self.parts.sets.get_mut(&name).unwrap_or_else(|| unreachable!("listed"));
                if st.m != m {
                    // Deaths (and anything the `Joined`/`Left` records did not show) as steps too.
                    for s in st.m.iter().filter(|s| !m.contains(s)) {
                        if st.steps.iter().rev().find(|(x, _)| x == s) != Some(&(*s, false)) {
                            st.steps.push((*s, false));
                        }
                    }
                    for s in m.iter().filter(|s| !st.m.contains(s)) {
                        if st.steps.iter().rev().find(|(x, _)| x == s) != Some(&(*s, true)) {
                            st.steps.push((*s, true));
                        }
                    }
                    st.m.clone_from(&m);
                    st.quiet_since = t;
                }
                if let Some(z) = broken {
                    st.quiet_since = st.quiet_since.max(z);
                    st.tainted = true;
                }
                let owners: Vec<Option<u32>> = st
                    .leases
                    .iter()
                    .map(|n| self.valid.get(n).and_then(|v| v.iter().next()).map(|(_, s, _)| *s))
                    .collect();
                let bound = lease_ns.saturating_mul(STABLE_LEASES).saturating_add(st.drain);
                let stable = !torn_down && t.saturating_sub(st.quiet_since) >= bound;
                (owners, st.count, stable, st.quiet_since, st.drain)
            };
            let cap = cap(count, m.len());
            let mut fails: Vec<(Invariant, String)> = Vec::new();
            for s in &m {
                let load = owners.iter().filter(|o| **o == Some(*s)).count();
                if load > cap {
                    fails.push((
                        Invariant::PartitionBalanced,
                        format!("'{name}': s{s} owns {load} partitions, above ⌈{count}/{}⌉ = {cap}", m.len()),
                    ));
                }
            }
            let uncovered: Vec<usize> =
                (0..owners.len()).filter(|p| !owners[*p].is_some_and(|o| m.contains(&o))).collect();
            // With no member at all, nobody is to own anything.
            if !uncovered.is_empty() && !m.is_empty() {
                let list: Vec<String> = uncovered
                    .iter()
                    .map(|p| owners[*p].map_or(format!("{p} (no owner)"), |o| format!("{p} (s{o}, no member)")))
                    .collect();
                fails.push((
                    Invariant::PartitionCovered,
                    format!("'{name}' partitions {} not owned by a member {m:?}", list.join(", ")),
                ));
            }
            if !fails.is_empty() && !torn_down {
                let since = t.saturating_sub(quiet_since);
                if since > self.parts.stats.max_unsettled_ns {
                    self.parts.stats.max_unsettled_ns = since;
                    self.parts.stats.max_unsettled_drain_ns = drain;
                }
            }
            if !stable {
                continue;
            }
            self.parts.stats.stable_points += 1;
            let since = (t - quiet_since) as f64 / 1e6;
            for (inv, msg) in fails {
                let st = self.parts.sets.get_mut(&name).unwrap_or_else(|| unreachable!("listed"));
                if st.reported.insert((inv, quiet_since)) {
                    self.fail(inv, i, t, format!("{msg}, {since:.0} ms after the set last changed (stable)"));
                }
            }
            if !uncovered.is_empty() {
                // Sticky is judged between covered points only.
                continue;
            }
            let st = self.parts.sets.get_mut(&name).unwrap_or_else(|| unreachable!("listed"));
            let tainted = std::mem::take(&mut st.tainted);
            let steps = std::mem::take(&mut st.steps);
            let last = st.last_stable.replace(Stable { m: m.clone(), owners: owners.clone(), quiet_since, index: i });
            let Some(prev) = last else { continue };
            let moved: Vec<usize> = (0..owners.len()).filter(|p| owners[*p] != prev.owners[*p]).collect();
            let show = |p: usize| {
                format!(
                    "{p}: s{} → s{}",
                    prev.owners[p].map_or("?".into(), |s| s.to_string()),
                    owners[p].map_or("?".into(), |s| s.to_string())
                )
            };
            let mut sticky = Vec::new();
            if prev.quiet_since == quiet_since {
                self.parts.stats.rest_checked += 1;
                if !moved.is_empty() {
                    let list: Vec<String> = moved.iter().map(|p| show(*p)).collect();
                    sticky.push(format!(
                        "'{name}': partitions moved while the membership {m:?} stayed stable (since record #{}): {}",
                        prev.index,
                        list.join(", ")
                    ));
                }
            } else if !tainted {
                let load = |s: u32| prev.owners.iter().filter(|o| **o == Some(s)).count();
                match steps.as_slice() {
                    [(j, true)] => {
                        self.parts.stats.joins_checked += 1;
                        let bad: Vec<String> = moved
                            .iter()
                            .filter(|p| owners[**p] != Some(*j) && prev.owners[**p].is_none_or(|a| load(a) <= cap))
                            .map(|p| show(*p))
                            .collect();
                        if !bad.is_empty() {
                            sticky.push(format!(
                                "'{name}': after s{j} joined {:?} (cap {cap}), partitions moved to another member than \
                                 the joiner from members at or below the new cap: {}",
                                prev.m,
                                bad.join(", ")
                            ));
                        }
                    }
                    [(l, false)] => {
                        self.parts.stats.leaves_checked += 1;
                        let bad: Vec<String> =
                            moved.iter().filter(|p| prev.owners[**p] != Some(*l)).map(|p| show(*p)).collect();
                        if !bad.is_empty() {
                            sticky.push(format!(
                                "'{name}': after s{l} left {:?}, partitions of members that stayed moved: {}",
                                prev.m,
                                bad.join(", ")
                            ));
                        }
                    }
                    _ => {}
                }
            }
            for msg in sticky {
                self.fail(Invariant::PartitionSticky, i, t, msg);
            }
        }
    }
}

/// The partition sets' measurements over `records` of sessions with a lease of `lease_ns`
/// renewed every `renew_ns` (see [`PartStats`]).
pub fn partition_stats(records: &[Record], lease_ns: u64, renew_ns: u64) -> PartStats {
    let mut c = Checker::for_records(records, lease_ns, renew_ns);
    for (i, r) in records.iter().enumerate() {
        c.observe(i, r);
    }
    c.parts.stats
}
