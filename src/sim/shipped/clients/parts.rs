//! Partition set members of the application (`Workload::Partitions`): a node's user thread
//! opening the run's set on its session (`Session::partitions_with`) or on its `Coordinator`
//! (`Coordinator::partitions_with`), holding it while the sampler watches it, ending revoked
//! partitions' drains early now and then (`Partition::release`), then closing or dropping it.
//!
//! Every member handle is registered with the sampler ([`PartSlot`]): each sample drains its
//! events ([`PartStep`] records), records `owned()` when it changed, and asks `token()` of every
//! term `owned()` listed until that term's `token()` fails — recorded as
//! [`Event::ValidStart`]/[`Event::ValidEnd`] of the partition's lease name, so the lease checks
//! (`exclusive-token`, `token-in-term`, `granted-only`, `no-revival`) cover the partitions.

use std::sync::Arc;
use std::time::Duration;

use super::super::backend::{below, sleep_virtual, unit, HistState, History};
use super::Client;
use crate::events::Events;
use crate::handles::coordinator::Coordinator;
use crate::handles::partitions::{Partition, PartitionEvent, PartitionOptions, Partitions};
use crate::handles::session::Session;
use crate::sim::history::{Event, PartStep};
use crate::types::{Name, Token, PARTITION_NAME_PREFIX};

/// The run's partition set.
#[derive(Debug, Clone)]
pub(crate) struct PartSetup {
    /// The set's name.
    pub(crate) set: Name,
    /// Its partition count (3–8).
    pub(crate) count: u32,
    /// Every member's drain period.
    pub(crate) drain: Duration,
    /// The node that joins and leaves (the run's last); the others stay in the set for long.
    pub(crate) churner: u8,
}

impl PartSetup {
    /// The lease name of partition `i`.
    pub(crate) fn lease(&self, i: u32) -> Name {
        crate::partitions::fence_resource(&self.set, i).unwrap_or_else(|e| unreachable!("a valid set name: {e}"))
    }

    /// The set's group.
    pub(crate) fn group(&self) -> Name {
        Name::new(format!("{PARTITION_NAME_PREFIX}{}", self.set)).unwrap_or_else(|e| unreachable!("valid: {e}"))
    }

    fn options(&self) -> PartitionOptions {
        PartitionOptions::default().drain(self.drain)
    }
}

/// A registered member handle and what the history last recorded about it.
pub(crate) struct PartSlot {
    client: u8,
    /// The member's session label (`None`: a coordinator's member, whose session changes).
    sess: Option<u32>,
    id: u64,
    handle: Arc<Partitions>,
    events: Events<PartitionEvent>,
    /// Terms `owned()` listed whose `token()` did not fail yet: the partition, its session label
    /// and what `token()` last answered.
    terms: Vec<(Partition, u32, Option<Token>)>,
    /// What `owned()` last listed.
    owned: Vec<u32>,
    /// Per partition, the session label of its last `Assigned` term (for a term assigned and lost
    /// between two samples, which `terms` never saw).
    assigned: std::collections::BTreeMap<u32, u32>,
}

/// The session label of the term of `p`: the member's session `sess`, or for a coordinator's
/// member (`None`), the session the backend granted the term to (its handle does not name it),
/// else `current`. (So `granted-only` checks a plain member's terms against its own session.)
fn term_label(h: &HistState, p: &Partition, sess: Option<u32>, current: Option<u32>) -> u32 {
    sess.or_else(|| h.grants.get(&(p.lease_name().clone(), p.granted_token())).copied()).or(current).unwrap_or(u32::MAX)
}

/// Samples every registered member (under the history lock; see the module docs).
pub(crate) fn sample_parts(hist: &History, h: &mut HistState, events: &mut Vec<Event>) {
    let mut slots = std::mem::take(&mut h.handles.parts);
    // Every member's ends before any member's starts: the answers are all of this one instant,
    // and a partition released by one member and taken by another since the last sample must not
    // read as two owners at once.
    let mut starts = Vec::new();
    for slot in &mut slots {
        sample_slot(h, slot, events, &mut starts);
    }
    events.append(&mut starts);
    h.handles.parts = slots;
    let _ = hist;
}

fn sample_slot(h: &mut HistState, slot: &mut PartSlot, events: &mut Vec<Event>, starts: &mut Vec<Event>) {
    let set = slot.handle.name().clone();
    let (client, member) = (slot.client, slot.id);
    let current = slot.sess.or_else(|| {
        let co = h.handles.coordinator.as_ref()?;
        co.session_id().and_then(|id| h.labels.get(&id).copied())
    });
    let of_partition = |slot: &PartSlot, partition: u32| {
        let term = slot.terms.iter().rev().find(|(p, _, _)| p.index() == partition).map(|(_, s, _)| *s);
        term.or_else(|| slot.assigned.get(&partition).copied()).or(current)
    };
    while let Ok(ev) = slot.events.try_recv() {
        let (sess, what) = match ev {
            PartitionEvent::Assigned { partition, token, .. } => {
                h.counts.part_assigned += 1;
                let name = crate::partitions::fence_resource(&set, partition).ok();
                let sess = slot.sess.or_else(|| name.and_then(|n| h.grants.get(&(n, token)).copied())).or(current);
                if let Some(s) = sess {
                    slot.assigned.insert(partition, s);
                }
                (sess, PartStep::Assigned { partition, token })
            }
            PartitionEvent::Revoking { partition, .. } => {
                (of_partition(slot, partition), PartStep::Revoking { partition })
            }
            PartitionEvent::Revoked { partition, .. } => {
                h.counts.part_revoked += 1;
                (of_partition(slot, partition), PartStep::Revoked { partition })
            }
            PartitionEvent::Lost { partition, reason, .. } => {
                h.counts.part_lost += 1;
                (of_partition(slot, partition), PartStep::Lost { partition, reason })
            }
        };
        let sess = sess.unwrap_or(u32::MAX);
        events.push(Event::PartitionSet { client, member, sess, set: set.clone(), what });
    }
    let owned = slot.handle.owned();
    for p in &owned {
        let seen = slot.terms.iter().any(|(q, _, _)| q.index() == p.index() && q.granted_token() == p.granted_token());
        if !seen {
            let label = term_label(h, p, slot.sess, current);
            slot.terms.push((p.clone(), label, None));
        }
    }
    let answers: Vec<Option<Token>> = slot.terms.iter().map(|(p, _, _)| p.token().ok()).collect();
    // Ends first, then starts: a new term of a partition on the same session follows the old one.
    for ((p, sess, last), now) in slot.terms.iter().zip(&answers) {
        if last.is_some() && now.is_none() {
            events.push(Event::ValidEnd { client, sess: *sess, name: p.lease_name().clone() });
        }
    }
    for ((p, sess, last), now) in slot.terms.iter_mut().zip(&answers) {
        if let (None, Some(token)) = (*last, *now) {
            starts.push(Event::ValidStart { client, sess: *sess, name: p.lease_name().clone(), token });
        }
        *last = *now;
    }
    let listed = |p: &Partition| owned.iter().any(|q| q.index() == p.index() && q.granted_token() == p.granted_token());
    slot.terms.retain(|(p, _, last)| last.is_some() || listed(p));
    let indices: Vec<u32> = owned.iter().map(Partition::index).collect();
    if indices != slot.owned {
        slot.owned.clone_from(&indices);
        let sess = current.unwrap_or(u32::MAX);
        events.push(Event::PartitionSet { client, member, sess, set, what: PartStep::Owned { owned: indices } });
    }
}

impl Client {
    fn setup(&self) -> &PartSetup {
        match &self.parts {
            Some(p) => p,
            None => unreachable!("a partition member runs only in the partition-set workload"),
        }
    }

    /// Registers member `p` (on session `sess`, `None` for a coordinator's) and records its open;
    /// returns the slot id.
    fn register_member(&self, sess: Option<u32>, p: Partitions) -> (u64, Arc<Partitions>) {
        let handle = Arc::new(p);
        let events = handle.events();
        let setup = self.setup();
        let mut h = self.hist.lock();
        h.handles.next += 1;
        let id = h.handles.next;
        let label = sess.unwrap_or(u32::MAX);
        let what = PartStep::Opened { count: setup.count, drain: crate::sim::history::ms(setup.drain) };
        let (client, set) = (self.c, setup.set.clone());
        self.hist.push(&mut h, Event::PartitionSet { client, member: id, sess: label, set, what });
        let (terms, owned, assigned) = (Vec::new(), Vec::new(), std::collections::BTreeMap::new());
        let slot = PartSlot { client, sess, id, handle: handle.clone(), events, terms, owned, assigned };
        h.handles.parts.push(slot);
        super::sample(&self.hist, &mut h);
        (id, handle)
    }

    /// How long this node holds the set per operation, and how long it stays out after: the
    /// churner 4–8 leases, then out for 5–8 (so that the others settle between its leave and its
    /// next join: `partition-sticky` judges single joins and leaves); the others 12–20, then back
    /// at once.
    fn hold_times(&self) -> (Duration, Duration) {
        let lease = self.lease();
        if self.c == self.setup().churner {
            (lease * 4 + below(lease * 4), lease * 5 + below(lease * 3))
        } else {
            (lease * 12 + below(lease * 8), Duration::ZERO)
        }
    }

    /// Holds member `id` (see [`hold_times`](Client::hold_times); while `alive` says its session
    /// lives), sampling every quarter lease and ending half of the drains early; then takes it out
    /// of the sampler (ending the recorded validity of its terms), closes (80 %) or drops it, and
    /// stays out for a while.
    fn hold_member(&self, id: u64, m: Arc<Partitions>, alive: &dyn Fn() -> bool) {
        let lease = self.lease();
        let (hold, rest) = self.hold_times();
        let mut left = hold;
        let step = lease / 4;
        while !left.is_zero() && alive() {
            let d = left.min(step);
            sleep_virtual(d);
            left -= d;
            self.sample();
            for p in m.owned() {
                if p.revoking_deadline().is_some() && unit() < 0.5 {
                    {
                        let mut h = self.hist.lock();
                        h.counts.part_released_early += 1;
                        let (client, set, partition) = (self.c, m.name().clone(), p.index());
                        let what = PartStep::ReleaseEarly { partition };
                        let sess =
                            h.grants.get(&(p.lease_name().clone(), p.granted_token())).copied().unwrap_or(u32::MAX);
                        self.hist.push(&mut h, Event::PartitionSet { client, member: id, sess, set, what });
                    }
                    let _ = p.release();
                }
            }
        }
        let wait = unit() < 0.8;
        {
            let mut h = self.hist.lock();
            super::sample(&self.hist, &mut h);
            let list = &mut h.handles.parts;
            if let Some(slot) = list.iter().position(|s| s.id == id).map(|i| list.remove(i)) {
                let (client, set) = (self.c, m.name().clone());
                let sess = slot.sess.unwrap_or(u32::MAX);
                self.hist.push(
                    &mut h,
                    Event::PartitionSet { client, member: id, sess, set, what: PartStep::Closing { wait } },
                );
                for (p, sess, last) in &slot.terms {
                    if last.is_some() {
                        let ev = Event::ValidEnd { client: slot.client, sess: *sess, name: p.lease_name().clone() };
                        self.hist.push(&mut h, ev);
                    }
                }
            }
        }
        if let Some(m) = Arc::into_inner(m) {
            if wait {
                let _ = m.close();
            } else {
                drop(m);
            }
        }
        {
            let mut left = rest;
            while !left.is_zero() {
                let d = left.min(step);
                sleep_virtual(d);
                left -= d;
                self.sample();
            }
        }
    }

    /// The node's user thread in the partition-set workload: `ops` operations (the churner; a
    /// third as many for the others, which hold longer) — join the set and hold it (70 %), close
    /// the session (10 %), idle — on a session reopened after it ends.
    pub(crate) fn run_member(&self) {
        let mut session: Option<(Arc<Session>, u32)> = None;
        let ops = if self.c == self.setup().churner { self.ops } else { self.ops.div_ceil(3) };
        for _ in 0..ops {
            let (s, sess) = match &session {
                Some((s, sess)) if s.is_alive() => (s.clone(), *sess),
                Some(_) => {
                    if let Some((s, _)) = session.take() {
                        self.unregister_session(&s, None);
                    }
                    self.hist.lock().counts.reopened += 1;
                    continue;
                }
                None => match self.open() {
                    Some(x) => {
                        session = Some(x.clone());
                        x
                    }
                    None => {
                        sleep_virtual(self.lease() / 4);
                        continue;
                    }
                },
            };
            let x = unit();
            if x < 0.7 {
                let setup = self.setup();
                if let Ok(m) = s.partitions_with(&setup.set, setup.count, setup.options()) {
                    let (id, m) = self.register_member(Some(sess), m);
                    let s2 = s.clone();
                    self.hold_member(id, m, &move || s2.is_alive());
                }
            } else if x < 0.8 {
                drop(s);
                self.close_session(&mut session);
            } else {
                drop(s);
                sleep_virtual(below(self.lease()));
            }
            self.sample();
        }
        self.close_session(&mut session);
    }

    fn close_session(&self, session: &mut Option<(Arc<Session>, u32)>) {
        if let Some((s, sess)) = session.take() {
            self.unregister_session(&s, Some(sess));
            if let Some(s) = Arc::into_inner(s) {
                let _ = s.close();
                let c = self.c;
                let mut h = self.hist.lock();
                self.hist.push(&mut h, Event::Closed { client: c, sess });
            }
        }
    }

    /// The node as a `Coordinator` member of the set: joins it on the coordinator and holds it
    /// (across the session replacements of the outage), `ops` times, then closes the coordinator.
    pub(crate) fn run_coordinator_member(&self) {
        let co = loop {
            match Coordinator::start(self.backend.clone(), self.options.clone()) {
                Ok(co) => break Arc::new(co),
                Err(_) => sleep_virtual(self.lease() / 4),
            }
        };
        self.hist.lock().handles.coordinator = Some(co.clone());
        for _ in 0..self.ops.div_ceil(3) {
            if unit() < 0.75 {
                let setup = self.setup();
                if let Ok(m) = co.partitions_with(&setup.set, setup.count, setup.options()) {
                    let (id, m) = self.register_member(None, m);
                    self.hold_member(id, m, &|| true);
                }
            } else {
                sleep_virtual(below(self.lease()));
            }
            self.sample();
        }
        let current = co.session_id();
        {
            let mut h = self.hist.lock();
            super::sample(&self.hist, &mut h);
            h.handles.coordinator.take();
            if let Some(sess) = current.and_then(|id| h.labels.get(&id).copied()) {
                let client = self.c;
                self.hist.push(&mut h, Event::Closing { client, sess });
            }
        }
        if let Some(co) = Arc::into_inner(co) {
            let _ = co.close();
        }
    }
}
