//! The driver thread of one partition set member: it watches the set's members, its session's
//! events and the releases of the partitions it waits for, and after each of them runs one
//! **round** — count the members, read the partitions' owners, compute the target (the engine's
//! rule, `engine::partitions::target`), revoke what the target gives away (a drain period, then
//! release), and claim what it gives this member and nobody holds (registering for the release of
//! what someone still holds, by the runtime's one registration rule).
//!
//! The member lives on one session at a time ([`Attached`]): a plain session's member ends with
//! it; a coordinator's member reports its partitions `Lost` when the session expires and attaches
//! to the replacement session (joining the group again) as soon as there is one.
//!
//! Every backend call is bounded by the query timeout and the stop flag is checked between calls,
//! so a close returns within one bounded call plus the leave and the releases. Events are emitted
//! under the state lock (in order with [`Partitions::owned`](super::Partitions::owned)); leases are
//! released and dropped off it.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use super::{now, Owned, PartitionEvent, Shared};
use crate::backend::{Notification, Topic};
use crate::engine::{later, partitions::target};
use crate::error::{Error, ErrorKind, Result};
use crate::events::Events;
use crate::handles::group::{self, GroupChange, MemberWatch, Membership, MembershipShared};
use crate::handles::lease::Lease;
use crate::handles::semaphore::Source;
use crate::runtime::{Moment, Rule, SessionInner};
use crate::state::{LossReason, SessionEvent};
use crate::sync::{never, select, thread};
use crate::types::SessionId;
use crossbeam_channel::{Receiver, Sender};

/// The session the member lives on now, and what it watches there.
struct Attached {
    session: Arc<SessionInner>,
    events: Events<SessionEvent>,
    watch: MemberWatch,
    membership: Option<Membership>,
    rule: Rule,
}

/// Joins the set's group on `session` and watches it.
fn attach(shared: &Shared, session: &Arc<SessionInner>) -> Result<Attached> {
    // Subscribe first: an end of the session after the join is then seen.
    let events = session.subscribe();
    let member = MembershipShared::new(shared.group.clone(), false);
    session.attach_membership(&member)?;
    let watch = group::watch(
        session.backend.clone(),
        shared.group.clone(),
        session.options.clone(),
        Some(session.ended_rx.clone()),
    );
    Ok(Attached {
        session: session.clone(),
        events,
        watch,
        membership: Some(Membership::new(member)),
        rule: Rule::of(&*session.backend),
    })
}

/// Joins the set's group on `session` and starts the driver thread; its result is the close's.
pub(super) fn start(
    shared: Arc<Shared>,
    session: &Arc<SessionInner>,
    notes_tx: Sender<Notification>,
    notes_rx: Receiver<Notification>,
) -> Result<thread::JoinHandle<Result<()>>> {
    let attached = attach(&shared, session)?;
    let driver =
        Driver { shared, notes_tx, notes_rx, at: Some(attached), live: Vec::new(), seen: HashMap::new(), ended: None };
    thread::Builder::new()
        .name("simba-partitions".into())
        .spawn(move || driver.run())
        .map_err(|e| Error::new(ErrorKind::Unavailable, format!("cannot start the partition driver thread: {e}")))
}

struct Driver {
    shared: Arc<Shared>,
    notes_tx: Sender<Notification>,
    notes_rx: Receiver<Notification>,
    /// The session the member lives on; `None` between a coordinator's sessions.
    at: Option<Attached>,
    /// The members in the last member list seen.
    live: Vec<SessionId>,
    /// When each member of `live` counts (from its first sighting in its current stay).
    seen: HashMap<SessionId, Instant>,
    /// Set once the attached session ended.
    ended: Option<LossReason>,
}

impl Driver {
    fn run(mut self) -> Result<()> {
        loop {
            if self.stopped() {
                return self.leave();
            }
            if let Some(reason) = self.ended.take() {
                self.lose_all(reason);
                self.at = None;
                self.live.clear();
                self.seen.clear();
            }
            if self.at.is_none() && !self.reattach() {
                return Ok(());
            }
            let Some(next) = self.round() else { continue };
            if self.stopped() || self.ended.is_some() {
                continue;
            }
            let wait = next.saturating_duration_since(now());
            let (events, changes) = match &self.at {
                Some(at) => ((*at.events).clone(), at.watch.receiver().clone()),
                None => (never(), never()),
            };
            select! {
                recv(self.notes_rx) -> _ => {},
                recv(events) -> ev => if let Ok(ev) = ev { self.on_session_event(ev) },
                recv(changes) -> change => if let Ok(change) = change { self.on_members(change) },
                default(wait) => {},
            }
        }
    }

    /// Attaches to the source's next live session: `false` when there is none to come (a plain
    /// session ended, the coordinator closed). Waits between tries for the replacement.
    fn reattach(&mut self) -> bool {
        let Source::Current(_) = &self.shared.source else { return false };
        loop {
            if self.stopped() {
                return true;
            }
            match self.shared.source.session() {
                Ok(s) if s.is_alive() => match attach(&self.shared, &s) {
                    Ok(at) => {
                        self.at = Some(at);
                        return true;
                    }
                    Err(e) => log::debug!("partition set '{}': cannot join on session {}: {e}", self.shared.name, s.id),
                },
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Closed => return false,
                Err(e) => log::debug!("partition set '{}': no session yet: {e}", self.shared.name),
            }
            // On the runtime's clock (the `sync` seam), as the driver's other waits: a plain
            // `recv_timeout` would wait on the wall clock in the explorer and the simulation.
            let idle = never::<()>();
            select! {
                recv(self.notes_rx) -> _ => {},
                recv(idle) -> _ => {},
                default(self.shared.source.retry_pause()) => {},
            }
        }
    }

    fn stopped(&self) -> bool {
        self.shared.st.lock().stopped
    }

    /// Takes in a member list. The members of the first list seen on a session are counted at
    /// once (they were there before this member); a member that appears later is counted after
    /// the settle period (`seen` holds when each one counts).
    fn on_members(&mut self, change: GroupChange) {
        let t = now();
        let counts_at = if self.live.is_empty() { t } else { later(t, self.shared.options.settle) };
        self.live = change.members.into_iter().map(|m| m.session).collect();
        self.seen.retain(|id, _| self.live.contains(id));
        for id in &self.live {
            self.seen.entry(id.clone()).or_insert(counts_at);
        }
    }

    fn on_session_event(&mut self, ev: SessionEvent) {
        match ev {
            SessionEvent::LeaseLost { name, token, reason } => {
                let Some(index) = self.shared.index_of(&name) else { return };
                let (lost, generation) = {
                    let mut st = self.shared.st.lock();
                    if st.owned.get(&index).is_none_or(|o| o.lease.granted_token() != token) {
                        return;
                    }
                    let generation = st.generation;
                    self.shared.events.emit(&PartitionEvent::Lost { partition: index, token, reason, generation });
                    (st.owned.remove(&index), generation)
                };
                if let Some(o) = &lost {
                    self.shared.log(
                        log::Level::Warn,
                        &format!("lost ({reason})"),
                        index,
                        token,
                        &o.session.id,
                        generation,
                    );
                }
                drop(lost);
            }
            SessionEvent::Expired => self.ended = Some(LossReason::SessionExpired),
            SessionEvent::Closed => self.ended = Some(LossReason::SessionClosed),
            _ => {}
        }
    }

    /// Takes in everything queued, so that a round sees the latest member list and events.
    fn absorb(&mut self) {
        let Some(at) = &self.at else { return };
        let (events, changes) = ((*at.events).clone(), at.watch.receiver().clone());
        while let Ok(ev) = events.try_recv() {
            self.on_session_event(ev);
        }
        while let Ok(change) = changes.try_recv() {
            self.on_members(change);
        }
        while self.notes_rx.try_recv().is_ok() {}
    }

    /// The counted members (sorted, this member included) and when the next one settles.
    fn counted(&self, me: &SessionId, t: Instant) -> (Vec<SessionId>, Option<Instant>) {
        let mut counted = vec![me.clone()];
        let mut next = None::<Instant>;
        for id in &self.live {
            if id == me {
                continue;
            }
            let at = self.seen.get(id).copied().unwrap_or(t);
            if at <= t {
                counted.push(id.clone());
            } else {
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        counted.sort();
        (counted, next)
    }

    /// One round; the instant the next is due (`None`: the session ended meanwhile).
    fn round(&mut self) -> Option<Instant> {
        self.absorb();
        let session = self.at.as_ref()?.session.clone();
        if self.ended.is_some() {
            return None;
        }
        let me = session.id.clone();
        let t = now();
        let (counted, settles) = self.counted(&me, t);
        let generation = {
            let mut st = self.shared.st.lock();
            if st.members != counted || st.generation == 0 {
                st.members = counted.clone();
                st.generation += 1;
            }
            st.generation
        };
        let (owners, unknown) = self.read_owners(&session);
        let goal = target(&counted, &owners, self.shared.options.max_per_member);
        let mine: BTreeSet<u32> =
            (0u32..).zip(&goal).filter(|(_, owner)| owner.is_some_and(|i| counted[i] == me)).map(|(p, _)| p).collect();
        let drains = self.revoke(&mine, generation);
        // Claim even when some owner read failed: a partition whose read failed shows free, and
        // its acquire answers busy if someone holds it (exclusivity never rests on the reads);
        // skipping the claims would let one failed read in a round cost every partition.
        let claimed = self.claim(&session, &mine, &owners, generation);
        let pending = unknown || claimed;
        let uncovered = owners.iter().any(Option::is_none);
        // While partitions are free, the owners change with every claim, and the target computed
        // from a partly claimed state may give a free partition to another member than the one
        // computed before it (the fill is not a fixed point of its own partial application): a
        // member told nothing by the others' claims re-reads soon, at a fifth of the retry
        // interval, instead of waiting for its retry delay (issue #38's benchmark: a graceful
        // leave waited 2.5-3.75 s for it).
        let pause = if uncovered {
            session.options.retry_interval() / 5
        } else if pending {
            session.retry_delay()
        } else {
            session.timing.lease_duration
        };
        let mut next = later(now(), pause);
        for at in drains.into_iter().chain(settles) {
            next = next.min(at);
        }
        Some(next)
    }

    /// The owner of every partition (this member's own from its state, the others read from the
    /// backend), and whether some read failed (its partition is shown free).
    fn read_owners(&self, session: &Arc<SessionInner>) -> (Vec<Option<SessionId>>, bool) {
        let (owned, releasing) = {
            let st = self.shared.st.lock();
            (st.owned.keys().copied().collect::<BTreeSet<u32>>(), st.releasing.clone())
        };
        let mut owners = Vec::with_capacity(self.shared.leases.len());
        let mut unknown = false;
        for (p, lease) in (0u32..).zip(self.shared.leases.iter()) {
            if owned.contains(&p) {
                owners.push(Some(session.id.clone()));
                continue;
            }
            if releasing.contains(&p) || self.stopped() {
                owners.push(None);
                unknown = true;
                continue;
            }
            let name = lease.clone();
            match session.bounded(move |b| b.holder(&name)) {
                Ok(h) => owners.push(h.map(|h| h.session)),
                Err(e) => {
                    log::debug!("partition set '{}': owner of partition {p}: {e}", self.shared.name);
                    owners.push(None);
                    unknown = true;
                }
            }
        }
        (owners, unknown)
    }

    /// Starts a drain for every owned partition the target gives away, and releases those whose
    /// drain ended. Returns the drains still running (their deadlines).
    fn revoke(&mut self, mine: &BTreeSet<u32>, generation: u64) -> Vec<Instant> {
        let t = now();
        let drain = self.shared.options.drain;
        let mut due = Vec::new();
        let mut running = Vec::new();
        let mut started = Vec::new();
        {
            let mut st = self.shared.st.lock();
            for (&partition, o) in &mut st.owned {
                if mine.contains(&partition) && o.revoking.is_none() {
                    continue;
                }
                let token = o.lease.granted_token();
                let deadline = *o.revoking.get_or_insert_with(|| {
                    let deadline = later(t, drain);
                    self.shared.events.emit(&PartitionEvent::Revoking { partition, token, deadline, generation });
                    started.push((partition, token, o.session.id.clone()));
                    deadline
                });
                if deadline <= t {
                    due.push((partition, o.lease.granted_token()));
                } else {
                    running.push(deadline);
                }
            }
        }
        for (partition, token, session) in started {
            self.shared.log(log::Level::Info, "revoking (draining)", partition, token, &session, generation);
        }
        for (partition, token) in due {
            if let Err(e) = self.shared.release(partition, token) {
                log::warn!("partition set '{}': release of partition {partition}: {e}", self.shared.name);
            }
        }
        running
    }

    /// Claims every partition of `mine` this member does not own; returns whether some is still
    /// to be taken (held by someone else, or the attempt failed).
    fn claim(
        &mut self,
        session: &Arc<SessionInner>,
        mine: &BTreeSet<u32>,
        owners: &[Option<SessionId>],
        generation: u64,
    ) -> bool {
        let mut pending = false;
        for &p in mine {
            if self.stopped() {
                return true;
            }
            {
                let st = self.shared.st.lock();
                if st.owned.contains_key(&p) || st.releasing.contains(&p) {
                    continue;
                }
            }
            let name = &self.shared.leases[p as usize];
            let held = owners[p as usize].is_some();
            if held {
                self.register(session, Moment::BeforeAttempt, p);
            }
            match session.attempt_lock(name, later(now(), session.timing.query_timeout)) {
                Ok(Some(token)) => {
                    let lease = Lease::new(session.clone(), name.clone(), token);
                    {
                        let mut st = self.shared.st.lock();
                        self.shared.events.emit(&PartitionEvent::Assigned { partition: p, token, generation });
                        st.owned.insert(p, Owned { lease, session: session.clone(), revoking: None });
                    }
                    self.shared.log(log::Level::Info, "assigned", p, token, &session.id, generation);
                }
                Ok(None) => {
                    pending = true;
                    self.register(session, Moment::AfterMiss, p);
                }
                Err(e) => {
                    pending = true;
                    match e.kind() {
                        ErrorKind::SessionExpired | ErrorKind::Closed => return true,
                        _ => log::debug!("partition set '{}': claim of partition {p}: {e}", self.shared.name),
                    }
                }
            }
        }
        pending
    }

    /// Registers for the release of partition `p` when the backend's rule says so at `at`.
    fn register(&self, session: &Arc<SessionInner>, at: Moment, p: u32) {
        if !self.at.as_ref().is_some_and(|a| a.rule.registers(at)) {
            return;
        }
        let topic = Topic::Lease(self.shared.leases[p as usize].clone());
        let tx = self.notes_tx.clone();
        if let Err(e) = session.bounded(move |b| b.watch(&topic, &tx)) {
            log::debug!("partition set '{}': cannot watch partition {p}, polling: {e}", self.shared.name);
        }
    }

    /// The session ended: every owned partition is lost.
    fn lose_all(&mut self, reason: LossReason) {
        let (lost, generation) = {
            let mut st = self.shared.st.lock();
            let generation = st.generation;
            for (&partition, o) in &st.owned {
                let token = o.lease.granted_token();
                self.shared.events.emit(&PartitionEvent::Lost { partition, token, reason, generation });
            }
            (std::mem::take(&mut st.owned), generation)
        };
        for (&partition, o) in &lost {
            let what = format!("lost ({reason})");
            self.shared.log(log::Level::Warn, &what, partition, o.lease.granted_token(), &o.session.id, generation);
        }
        drop(lost);
    }

    /// Leaves the group, then releases every owned partition (`Revoked`), so that the others take
    /// them over at once; the first failure is the result.
    fn leave(&mut self) -> Result<()> {
        let membership = self.at.as_mut().and_then(|a| a.membership.take());
        let mut first = membership.map_or(Ok(()), Membership::leave).err();
        let owned: Vec<u32> = self.shared.st.lock().owned.keys().copied().collect();
        for partition in owned {
            let token = {
                let st = self.shared.st.lock();
                st.owned.get(&partition).map(|o| o.lease.granted_token())
            };
            if let Some(token) = token {
                if let Err(e) = self.shared.release(partition, token) {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }
}
