//! The simulated backend the shipped runtime talks to: the real [`MemoryBackend`] on the
//! simulation's virtual clock ([`VirtualClock`], the sim's backend model), behind a layer that
//! decides each call's fate with the execution's seeded random source and records what the backend
//! did in the sim's history ([`Event`]).
//!
//! Every call takes the history lock for its effect, so the history is one total order of
//! backend effects, `token()`/`is_leader()`/`is_member()` samples and clock moves (see
//! `super::clients`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::FaultCounts;
use crossbeam_channel::{Receiver, Sender};

use crate::backend::{
    Acquire, Capabilities, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant, TermRemaining, Topic,
};
use crate::backends::memory::MemoryBackend;
use crate::error::{Error, ErrorKind, Result};
use crate::sim::clock::{NodeClock, VirtualClock};
use crate::sim::history::{ms as ns, Event, Record};
use crate::sync::{self, Condvar, Mutex, MutexGuard};
use crate::types::{Name, SessionId, Token};

/// Per-call fault probabilities of one run (drawn per seed).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CallFaults {
    /// The request is lost: no effect, the caller gets `Unavailable`.
    pub(crate) fail: f64,
    /// The call takes effect only after a stall (0–1.5 query timeouts): late delivery.
    pub(crate) stall: f64,
    /// The call takes effect, its reply is lost: the caller gets `Unavailable`, at once or after
    /// its deadline.
    pub(crate) lost_reply: f64,
    /// The call takes effect at once, its reply arrives after the caller's deadline.
    pub(crate) late_reply: f64,
    /// Every call fails (the backend is unreachable) between these virtual instants (ns).
    pub(crate) outage: Option<(u64, u64)>,
    /// The backend pushes release and membership notifications (`capabilities()`), relayed at
    /// the next clock step, each lost with probability `push_lost` or delivered twice with
    /// `push_duplicated`.
    pub(crate) push: bool,
    /// See `push`.
    pub(crate) push_lost: f64,
    /// See `push`.
    pub(crate) push_duplicated: f64,
    /// A join, leave or release request is delivered late: the caller gets `Unavailable` at once
    /// (its request timed out on the way) and the effect lands 0.2–1.5 leases later, after the
    /// call ended — a request still on its way (0 unless the scenario enables late deliveries).
    pub(crate) late_delivery: f64,
}

/// A request on its way to the backend after its call ended (see [`CallFaults::late_delivery`]),
/// applied by [`SimBackend::pump`] once the clock passed `due` (virtual ns).
#[derive(Debug, Clone)]
struct Delivery {
    due: u64,
    session: SessionId,
    op: Delivered,
}

#[derive(Debug, Clone)]
enum Delivered {
    Join(Name),
    Leave(Name),
    Release(Name, Token),
}

/// What the history lock guards.
#[derive(Debug, Default)]
pub(crate) struct HistState {
    /// The history (`t`: virtual ns since the run started).
    pub(crate) records: Vec<Record>,
    /// Session id → run-wide label (`s0`, `s1`, … in order of creation).
    pub(crate) labels: HashMap<SessionId, u32>,
    next_label: u32,
    /// The fault counters.
    pub(crate) counts: FaultCounts,
    /// The application's handles (sampled under this lock).
    pub(crate) handles: super::clients::Handles,
    /// Labels of the sessions the run's `Coordinator` used (learnt by sampling its current one).
    pub(crate) coordinator_sessions: Vec<u32>,
    /// The coordinator's campaign for a name was resigned and none started since: a grant of the
    /// name to one of its sessions well after that, by an acquire sent after it, is a zombie.
    pub(crate) resigned: Option<Resigned>,
    /// Violations the backend layer saw directly.
    pub(crate) violations: Vec<crate::sim::check::Violation>,
    /// Pushed notifications on their way: what the memory backend sent on a watch's own channel,
    /// relayed to the runtime's channel by [`SimBackend::pump`].
    relays: Vec<(Receiver<Notification>, Sender<Notification>)>,
    /// Per group: the last `members` evaluation (real ns, answer), for
    /// [`SimBackend::stale_member_reads`].
    snapshots: HashMap<Name, (u64, Vec<Member>)>,
    /// Requests on their way after their call ended ([`CallFaults::late_delivery`]).
    deliveries: Vec<Delivery>,
    /// The sessions' (and the coordinator's) events are subscribed to and their `MembershipLost`
    /// recorded (only where the scenario can lose memberships — late deliveries, the Redis Cluster
    /// model: subscribing adds scheduling points).
    pub(crate) membership_events: bool,
    /// Partitions on now: every call of the session fails until the virtual instant (ns).
    cut: Vec<(SessionId, u64)>,
    /// Renewals the backend applied, per session label, counted (and [`History::renewed`]
    /// notified) only when set: notifying adds scheduling points, so only the scenario that
    /// waits for renewals does.
    pub(crate) renewal_waiters: bool,
    /// See `renewal_waiters`.
    pub(crate) renewals: HashMap<u32, u64>,
    /// Every grant: (lease, token) → session label (the session of a coordinator member's
    /// partition term, which its handle does not name).
    pub(crate) grants: HashMap<(Name, Token), u32>,
}

/// The resign of the coordinator's campaign for `name` (see [`HistState::resigned`]).
#[derive(Debug, Clone)]
pub(crate) struct Resigned {
    pub(crate) name: Name,
    /// When it was recorded, after `resign()` (or the drop) returned (virtual ns).
    pub(crate) at: u64,
    /// [`History::acquires_entered`] then: acquires numbered below it were on their way already.
    pub(crate) entered: u64,
    /// How the campaign ended (for the violation's text).
    pub(crate) how: &'static str,
}

/// The history shared by the backend, the samplers and the clock driver.
#[derive(Debug)]
pub(crate) struct History {
    state: Mutex<HistState>,
    /// The virtual instant the run started at.
    pub(crate) base: Instant,
    /// Acquires that entered the backend so far, each numbered by it on entry. A std atomic: no
    /// scheduling point, so the explored schedules (and every seed's history) stay as they were.
    acquires: AtomicU64,
    /// Notified at every renewal the backend applies when [`HistState::renewal_waiters`] is set
    /// (a user thread waiting to lock right after one: `Scenario::half_renew`).
    pub(crate) renewed: Condvar,
}

impl History {
    pub(crate) fn new() -> History {
        History {
            state: Mutex::new(HistState::default()),
            base: sync::now(),
            acquires: AtomicU64::new(0),
            renewed: Condvar::new(),
        }
    }

    /// How many acquires entered the backend so far.
    pub(crate) fn acquires_entered(&self) -> u64 {
        self.acquires.load(Ordering::SeqCst)
    }

    /// Numbers an acquire entering the backend.
    fn enter_acquire(&self) -> u64 {
        self.acquires.fetch_add(1, Ordering::SeqCst)
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, HistState> {
        self.state.lock()
    }

    /// Virtual ns since the run started (the clients' real time).
    pub(crate) fn t(&self) -> u64 {
        ns(sync::now().saturating_duration_since(self.base))
    }

    /// Appends `event` at the current virtual instant.
    pub(crate) fn push(&self, h: &mut HistState, event: Event) {
        h.records.push(Record { t: self.t(), event });
    }
}

impl HistState {
    /// Gives session `id` the next run-wide label.
    pub(crate) fn new_label(&mut self, id: SessionId) -> u32 {
        let sess = self.next_label;
        self.next_label += 1;
        self.labels.insert(id, sess);
        sess
    }
}

/// Sleeps until the virtual clock passed `d` from now (only the clock driver moves it).
pub(crate) fn sleep_virtual(d: Duration) {
    sleep_unless(d, &AtomicBool::new(false));
}

/// Like [`sleep_virtual`], ending early once `stop` is set (checked on every wake-up).
pub(crate) fn sleep_unless(d: Duration, stop: &AtomicBool) {
    let Some(deadline) = sync::now().checked_add(d) else { return };
    let m = Mutex::new(());
    let cv = Condvar::new();
    let mut g = m.lock();
    while sync::now() < deadline && !stop.load(Ordering::SeqCst) {
        cv.wait_until(&mut g, deadline);
    }
}

/// A uniform draw in `0.0..1.0` from the execution's seeded source.
pub(crate) fn unit() -> f64 {
    sync::random_below(1 << 53) as f64 / (1u64 << 53) as f64
}

/// A uniform duration in `0..max`.
pub(crate) fn below(max: Duration) -> Duration {
    Duration::from_nanos(sync::random_below(ns(max).max(1)))
}

#[derive(Debug, Clone, Copy)]
enum Fate {
    Complete,
    Fail,
    Outage,
    Stall(Duration),
    LostReply(Option<Duration>),
    LateReply(Duration),
}

/// The backend of a run: see the module docs.
#[derive(Debug)]
pub(crate) struct SimBackend {
    /// The backend's data: replaced by an empty one on the same clock when the node loses its
    /// data ([`SimBackend::lose_data`]). A std lock held for no scheduling point: it adds none
    /// to the explored schedules.
    mem: std::sync::Mutex<Arc<MemoryBackend>>,
    clock: Arc<VirtualClock>,
    hist: Arc<History>,
    faults: CallFaults,
    /// The clients' query timeout (a late reply arrives after it).
    query_timeout: Duration,
    /// The node clock: real time at a rate (within the sessions' drift unless the scenario
    /// breaks it), stepped by [`SimBackend::jump`] (a std lock, like `mem`).
    node: std::sync::Mutex<NodeClock>,
    /// Set for the run's teardown: calls complete without faults (a stalled call started then
    /// would wait for a clock nobody moves any more).
    quiet: AtomicBool,
    /// Declares `call_bound() = Some(0)`: user calls run inline, and no call is delayed.
    inline: bool,
    /// The old SPI's release: frees whatever term the session holds (see
    /// [`Scenario::old_release_any_term`](super::Scenario::old_release_any_term)).
    pub(crate) old_release_any_term: bool,
    /// `members` answers a snapshot of the group, evaluated only when over ten leases old (see
    /// [`Scenario::stale_member_reads`](super::Scenario::stale_member_reads)).
    pub(crate) stale_member_reads: bool,
    /// Every `members` reply is lost (see
    /// [`Scenario::member_replies_lost`](super::Scenario::member_replies_lost)).
    pub(crate) member_replies_lost: bool,
    /// Partitions can cut sessions off ([`SimBackend::partition`]): every call naming a session
    /// looks its partitions up (only then: the look-up takes the history lock).
    pub(crate) partitions: bool,
    /// Declares `watch_checks_lease` (with push): the memory backend's lease registration
    /// answers a free lease at once, so the runtime registers after a busy attempt only.
    pub(crate) checked_watch: bool,
    /// Acquires answer [`TermRemaining::WithSession`] (as MySQL's free-lease upsert does) instead
    /// of the time left: the memory backend's terms end with their session, so the engine holds
    /// them until the session's own deadline.
    pub(crate) terms_with_session: bool,
    /// A keep-alive reply leaves out the first term it lists on a quarter of the replies (see
    /// [`Scenario::owned_omitted`](super::Scenario::owned_omitted)).
    pub(crate) owned_omitted: bool,
}

impl SimBackend {
    pub(crate) fn new(
        hist: Arc<History>,
        faults: CallFaults,
        query_timeout: Duration,
        rate: f64,
        inline: bool,
    ) -> SimBackend {
        let clock = Arc::new(VirtualClock::default());
        let mem = std::sync::Mutex::new(Arc::new(MemoryBackend::with_clock(clock.clone())));
        SimBackend {
            mem,
            clock,
            hist,
            faults,
            query_timeout,
            node: std::sync::Mutex::new(NodeClock::new(0, rate)),
            quiet: AtomicBool::new(false),
            inline,
            old_release_any_term: false,
            stale_member_reads: false,
            member_replies_lost: false,
            partitions: false,
            checked_watch: false,
            terms_with_session: false,
            owned_omitted: false,
        }
    }

    fn mem(&self) -> Arc<MemoryBackend> {
        self.mem.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The node's clock reading (ns) now.
    pub(crate) fn node_now(&self) -> u64 {
        let t = self.hist.t();
        self.node.lock().unwrap_or_else(|e| e.into_inner()).value(t)
    }

    /// Premise breaker: the node loses all its data (a restart without persistence) — sessions,
    /// leases, groups and the token counter are gone; the backend starts empty on the same clock.
    pub(crate) fn lose_data(&self, h: &mut HistState) {
        *self.mem.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(MemoryBackend::with_clock(self.clock.clone()));
        h.counts.data_losses += 1;
        self.hist.push(h, Event::DataLoss { node: 0 });
    }

    /// Premise breaker: the node's clock steps by `by` ns (negative: back).
    pub(crate) fn jump(&self, h: &mut HistState, by: i64) {
        let t = self.hist.t();
        self.node.lock().unwrap_or_else(|e| e.into_inner()).jump(t, by);
        h.counts.clock_jumps += 1;
        self.hist.push(h, Event::ClockJump { node: 0, by_ns: by });
    }

    /// A partition: for `len`, every call of one session fails, as if the network between its
    /// node and the backend were cut; other sessions are unaffected. The session is picked by the
    /// seeded source among those the backend lists as a holder of one of `names` or a member of
    /// `group` (a nemesis aiming at holders), else among the four newest. Respects every premise.
    pub(crate) fn partition(&self, h: &mut HistState, len: Duration, names: &[Name], group: &Name) {
        let mem = self.mem();
        let mut targets: Vec<SessionId> =
            names.iter().filter_map(|n| mem.holder(n).ok().flatten()).map(|x| x.session).collect();
        targets.extend(mem.members(group).unwrap_or_default().into_iter().map(|m| m.session));
        // Sorted by label: the pick depends only on the seed.
        targets.sort_by_key(|id| Self::label(h, id));
        targets.dedup();
        if targets.is_empty() {
            let newest = h.next_label.saturating_sub(4)..h.next_label;
            targets = h.labels.iter().filter(|(_, l)| newest.contains(*l)).map(|(id, _)| id.clone()).collect();
            targets.sort_by_key(|id| Self::label(h, id));
        }
        if targets.is_empty() {
            return;
        }
        let id = targets[sync::random_below(targets.len() as u64) as usize].clone();
        let until = self.hist.t() + ns(len);
        h.counts.partitions += 1;
        h.cut.push((id, until));
        self.hist.push(h, Event::Partition { client: u8::MAX, node: Some(0), until });
    }

    /// Fails the call when `session` is cut off by a partition.
    fn reach(&self, session: &SessionId) -> Result<()> {
        if !self.partitions || self.quiet.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut h = self.hist.lock();
        let t = self.hist.t();
        h.cut.retain(|(_, until)| *until > t);
        if h.cut.iter().any(|(id, _)| id == session) {
            h.counts.partitioned += 1;
            let sess = Some(Self::label(&h, session)).filter(|l| *l != u32::MAX);
            self.hist.push(&mut h, Event::CallFault { sess, what: "partitioned", from: t, until: t });
            return Err(Error::new(ErrorKind::Unavailable, "simulated: the session's node is cut off (partition)"));
        }
        Ok(())
    }

    /// From now on every call completes at once (the run's teardown).
    pub(crate) fn quiet(&self) {
        self.quiet.store(true, Ordering::SeqCst);
    }

    /// Whether this join, leave or release is delivered late ([`CallFaults::late_delivery`];
    /// never during the outage nor the teardown). Draws from the seeded source only when the
    /// scenario enables late deliveries, so other scenarios' seeds replay unchanged.
    fn delivered_late(&self) -> bool {
        let f = self.faults;
        if f.late_delivery <= 0.0 || self.quiet.load(Ordering::SeqCst) {
            return false;
        }
        let t = self.hist.t();
        !f.outage.is_some_and(|(a, b)| (a..b).contains(&t)) && unit() < f.late_delivery
    }

    /// Queues `op` of `session` to land 0.2–1.5 leases from now; the caller gets `Unavailable`.
    fn deliver_late<T>(&self, session: &SessionId, op: Delivered) -> Result<T> {
        let lease = self.query_timeout * 3;
        let due = self.hist.t() + ns(lease / 5 + below(lease * 13 / 10));
        let mut h = self.hist.lock();
        h.counts.late_deliveries += 1;
        let sess = Some(Self::label(&h, session)).filter(|l| *l != u32::MAX);
        let from = self.hist.t();
        self.hist.push(&mut h, Event::CallFault { sess, what: "late-delivery", from, until: due });
        h.deliveries.push(Delivery { due, session: session.clone(), op });
        Err(Error::new(ErrorKind::Unavailable, "simulated: the request timed out on its way (it lands later)"))
    }

    fn draw(&self) -> Fate {
        if self.quiet.load(Ordering::SeqCst) {
            return Fate::Complete;
        }
        let f = self.faults;
        let t = self.hist.t();
        if f.outage.is_some_and(|(a, b)| (a..b).contains(&t)) {
            return Fate::Outage;
        }
        let x = unit();
        let qt = self.query_timeout;
        let mut acc = f.fail;
        if x < acc {
            return Fate::Fail;
        }
        acc += f.stall;
        if x < acc {
            return if self.inline { Fate::Complete } else { Fate::Stall(below(qt + qt / 2)) };
        }
        acc += f.lost_reply;
        if x < acc {
            return Fate::LostReply((!self.inline && unit() < 0.5).then(|| qt + below(qt)));
        }
        acc += f.late_reply;
        if x < acc {
            return if self.inline { Fate::Complete } else { Fate::LateReply(qt + below(qt)) };
        }
        Fate::Complete
    }

    /// Runs one backend call: its fate decides when `apply` takes effect and what the caller sees.
    /// `apply` runs under the history lock with the node clock (ns) set on the memory backend.
    /// A fault is recorded as [`Event::CallFault`] of `session` (none recorded for a call that
    /// names no session: it cannot cost a session anything it holds), under the lock that counts
    /// it, before the call's effect.
    fn call<T>(
        &self,
        session: Option<&SessionId>,
        apply: impl FnOnce(&mut HistState, &History, u64) -> Result<T>,
    ) -> Result<T> {
        let fate = self.draw();
        // The fault spans the whole call, from its start (a stalled call is recorded when it
        // lands): the checker reads every fault before judging.
        let from = self.hist.t();
        let fault = |h: &mut HistState, what: &'static str, after: Duration| {
            if let Some(id) = session {
                let sess = Some(Self::label(h, id)).filter(|l| *l != u32::MAX);
                let until = self.hist.t() + ns(after);
                self.hist.push(h, Event::CallFault { sess, what, from, until });
            }
        };
        let effect = |faulted: Option<(&'static str, Duration)>| {
            let mut h = self.hist.lock();
            let b = self.node_now();
            self.clock.set(b);
            if let Some((what, after)) = faulted {
                if what == "stalled" {
                    h.counts.stalled += 1;
                }
                fault(&mut h, what, after);
            }
            apply(&mut h, &self.hist, b)
        };
        match fate {
            Fate::Complete => {
                let started = crate::sync::now();
                let r = effect(None);
                // The query timeout is the driver's third of the lease.
                let step = super::largest_step(self.query_timeout);
                let starved = crate::sync::now().saturating_duration_since(started) > step;
                let mut h = self.hist.lock();
                h.counts.completed += 1;
                h.counts.starved += u64::from(starved);
                r
            }
            Fate::Fail => {
                let mut h = self.hist.lock();
                h.counts.failed += 1;
                fault(&mut h, "failed", Duration::ZERO);
                Err(Error::new(ErrorKind::Unavailable, "simulated: the request was lost"))
            }
            Fate::Outage => {
                let mut h = self.hist.lock();
                h.counts.outage += 1;
                fault(&mut h, "outage", Duration::ZERO);
                Err(Error::new(ErrorKind::Unavailable, "simulated: the backend is unreachable (outage)"))
            }
            Fate::Stall(d) => {
                sleep_unless(d, &self.quiet);
                effect(Some(("stalled", Duration::ZERO)))
            }
            Fate::LostReply(after) => {
                let _ = effect(Some(("lost-reply", after.unwrap_or_default())));
                self.hist.lock().counts.lost_replies += 1;
                if let Some(d) = after {
                    sleep_unless(d, &self.quiet);
                }
                Err(Error::new(ErrorKind::Unavailable, "simulated: the call took effect, its reply was lost"))
            }
            Fate::LateReply(d) => {
                let r = effect(Some(("late-reply", d)));
                self.hist.lock().counts.late_replies += 1;
                sleep_unless(d, &self.quiet);
                r
            }
        }
    }

    /// A grant of the coordinator's resigned election name to one of its sessions by an acquire
    /// that entered the backend after the resign, more than three query timeouts after it, is a
    /// campaign that outlived its resign. An acquire that was on its way already when the resign
    /// returned is not: the runtime sent it while the campaign went on and cannot recall it (its
    /// late reply is undone), however long the simulation holds it (a stalled call; until the
    /// clock driver waited for every thread to wait, also the scheduler over many clock steps).
    fn zombie_check(&self, h: &mut HistState, hist: &History, entered: u64, sess: u32, name: &Name, token: Token) {
        let Some(Resigned { name: n, at, entered: then, how }) = &h.resigned else { return };
        let t = hist.t();
        let after = entered >= *then;
        if n == name && after && h.coordinator_sessions.contains(&sess) && t > at + 3 * ns(self.query_timeout) {
            let detail = format!(
                "'{name}' granted (token {token}) to the coordinator's session s{sess} {} ms after its campaign \
                 was resigned ({how}): a zombie campaign",
                (t - at) / 1_000_000
            );
            let index = h.records.len();
            h.violations.push(crate::sim::check::Violation {
                invariant: crate::sim::check::Invariant::NoZombie,
                index,
                t,
                detail,
            });
        }
    }

    /// Relays the pushed notifications on their way (the clock driver calls it after each step):
    /// each is lost, delivered twice or delivered, by the seeded source.
    pub(crate) fn pump(&self, h: &mut HistState) {
        let t = self.hist.t();
        let (due, later): (Vec<Delivery>, Vec<Delivery>) =
            std::mem::take(&mut h.deliveries).into_iter().partition(|d| d.due <= t);
        h.deliveries = later;
        for d in due {
            self.land(h, d);
        }
        let f = self.faults;
        let mut relays = std::mem::take(&mut h.relays);
        relays.retain(|(rx, to)| loop {
            match rx.try_recv() {
                Ok(n) => {
                    let x = unit();
                    if x < f.push_lost {
                        h.counts.push_lost += 1;
                    } else {
                        if x < f.push_lost + f.push_duplicated {
                            h.counts.push_duplicated += 1;
                            let _ = to.try_send(n.clone());
                        }
                        h.counts.pushed += 1;
                        let _ = to.try_send(n);
                    }
                }
                Err(crossbeam_channel::TryRecvError::Empty) => return true,
                Err(crossbeam_channel::TryRecvError::Disconnected) => return false,
            }
        });
        h.relays = relays;
    }

    /// A late delivery lands (under the history lock, at the node clock's now).
    fn land(&self, h: &mut HistState, d: Delivery) {
        let b = self.node_now();
        self.clock.set(b);
        let sess = Some(Self::label(h, &d.session)).filter(|l| *l != u32::MAX);
        let t = self.hist.t();
        self.hist.push(h, Event::CallFault { sess, what: "late-landed", from: t, until: t });
        let _ = match &d.op {
            Delivered::Join(group) => self.join_effect(h, b, &d.session, group),
            Delivered::Leave(group) => self.leave_effect(h, b, &d.session, group),
            Delivered::Release(name, token) => self.release_effect(h, b, &d.session, name, *token),
        };
    }

    fn join_effect(&self, h: &mut HistState, b: u64, session: &SessionId, group: &Name) -> Result<()> {
        let sess = Self::label(h, session);
        match self.mem().join(session, group) {
            Ok(()) => {
                self.hist.push(h, Event::Joined { node: 0, b, sess, group: group.clone() });
                Ok(())
            }
            Err(e) => {
                if e.is_session_expired() {
                    h.counts.backend_expiries += 1;
                    self.hist.push(h, Event::Refused { node: 0, b, sess });
                }
                Err(e)
            }
        }
    }

    fn leave_effect(&self, h: &mut HistState, b: u64, session: &SessionId, group: &Name) -> Result<()> {
        let sess = Self::label(h, session);
        self.mem().leave(session, group)?;
        self.hist.push(h, Event::Left { node: 0, b, sess, group: group.clone() });
        Ok(())
    }

    fn release_effect(&self, h: &mut HistState, b: u64, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        let sess = Self::label(h, session);
        let mem = self.mem();
        if self.old_release_any_term {
            if let Some(held) = mem.holder(name)?.filter(|x| &x.session == session) {
                mem.release(session, name, held.token)?;
                self.hist.push(h, Event::Released { node: 0, b, sess, name: name.clone(), token: None });
            }
            return Ok(());
        }
        mem.release(session, name, token)?;
        self.hist.push(h, Event::Released { node: 0, b, sess, name: name.clone(), token: Some(token) });
        Ok(())
    }

    fn label(h: &HistState, id: &SessionId) -> u32 {
        h.labels.get(id).copied().unwrap_or(u32::MAX)
    }
}

impl LeaseBackend for SimBackend {
    fn kind(&self) -> &'static str {
        "sim"
    }

    fn call_bound(&self) -> Option<Duration> {
        self.inline.then_some(Duration::ZERO)
    }

    fn capabilities(&self) -> Capabilities {
        let push = self.faults.push;
        Capabilities {
            push_release: push,
            push_membership: push,
            watch_checks_lease: push && self.checked_watch,
            list: false,
        }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        if !self.faults.push {
            return Ok(false);
        }
        self.call(None, |h, _, _| {
            // The memory backend pushes on the watch's own channel; the relay decides its fate.
            let (tx, rx) = crossbeam_channel::unbounded();
            let r = self.mem().watch(topic, &tx)?;
            h.relays.push((rx, notify.clone()));
            Ok(r)
        })
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        self.call(None, |h, hist, b| {
            let g = self.mem().open_session(lease_duration, metadata)?;
            let sess = h.new_label(g.id.clone());
            hist.push(h, Event::Opened { node: 0, b, sess, until: b + ns(g.remaining) });
            Ok(g)
        })
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        self.reach(session)?;
        self.call(Some(session), |h, hist, b| {
            let sess = Self::label(h, session);
            let mut r = self.mem().keep_alive(session, lease_duration)?;
            match &r {
                KeepAlive::Alive { remaining, owned, .. } => {
                    let until = b + ns(*remaining);
                    hist.push(h, Event::Renewed { node: 0, b, sess, until });
                    if h.renewal_waiters {
                        *h.renewals.entry(sess).or_default() += 1;
                        hist.renewed.notify_all();
                    }
                    for (name, token) in owned {
                        hist.push(h, Event::Extended { node: 0, b, sess, name: name.clone(), token: *token, until });
                    }
                }
                KeepAlive::Expired => {
                    h.counts.backend_expiries += 1;
                    hist.push(h, Event::Refused { node: 0, b, sess });
                }
            }
            if let KeepAlive::Alive { owned, .. } = &mut r {
                // The broken listing draws only where the scenario asks for it.
                if self.owned_omitted && !owned.is_empty() && unit() < 0.25 {
                    owned.remove(0);
                }
            }
            Ok(r)
        })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.reach(session)?;
        self.call(Some(session), |h, hist, b| {
            let sess = Self::label(h, session);
            self.mem().close_session(session)?;
            hist.push(h, Event::Deleted { node: 0, b, sess, frees_leases: true });
            Ok(())
        })
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        let entered = self.hist.enter_acquire();
        self.reach(session)?;
        self.call(Some(session), |h, hist, b| {
            let sess = Self::label(h, session);
            match self.mem().acquire(session, name) {
                Ok(a) => {
                    hist.push(h, Event::SessionChecked { node: 0, b, sess });
                    match a {
                        Acquire::Acquired { token, remaining } => {
                            self.zombie_check(h, hist, entered, sess, name, token);
                            // The memory backend measures the time left: the term's end on the
                            // backend, whatever the reply says.
                            let until = b + ns(remaining.known().unwrap_or_default());
                            h.grants.insert((name.clone(), token), sess);
                            hist.push(h, Event::Granted { node: 0, b, sess, name: name.clone(), token, until });
                            let remaining =
                                if self.terms_with_session { TermRemaining::WithSession } else { remaining };
                            Ok(Acquire::Acquired { token, remaining })
                        }
                        Acquire::Busy => {
                            hist.push(h, Event::Busy { node: 0, b, sess, name: name.clone() });
                            Ok(Acquire::Busy)
                        }
                    }
                }
                Err(e) => {
                    if e.is_session_expired() {
                        h.counts.backend_expiries += 1;
                        hist.push(h, Event::Refused { node: 0, b, sess });
                    }
                    Err(e)
                }
            }
        })
    }

    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        self.reach(session)?;
        if self.delivered_late() {
            return self.deliver_late(session, Delivered::Release(name.clone(), token));
        }
        self.call(Some(session), |h, _, b| self.release_effect(h, b, session, name, token))
    }

    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        self.call(None, |h, hist, b| {
            let r = self.mem().holder(name)?;
            let holder = r.as_ref().map(|x| (Self::label(h, &x.session), x.token, ns(x.remaining)));
            // The reading client is not known to the backend; `u8::MAX` marks "some client".
            hist.push(h, Event::HolderRead { node: 0, b, client: u8::MAX, name: name.clone(), holder });
            Ok(r)
        })
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.reach(session)?;
        if self.delivered_late() {
            return self.deliver_late(session, Delivered::Join(group.clone()));
        }
        self.call(Some(session), |h, _, b| self.join_effect(h, b, session, group))
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.reach(session)?;
        if self.delivered_late() {
            return self.deliver_late(session, Delivered::Leave(group.clone()));
        }
        self.call(Some(session), |h, _, b| self.leave_effect(h, b, session, group))
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        // No workload uses semaphores: forwarded with the call's fate, recorded nowhere.
        self.call(None, |_, _, _| self.mem().semaphore_limit(name, permits))
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        let quiet = self.quiet.load(Ordering::SeqCst);
        let started = crate::sync::now();
        let listed = std::cell::RefCell::new(Vec::new());
        let r = self.call(None, |h, hist, b| {
            if self.stale_member_reads && !quiet {
                // A lagging replica: the snapshot, while it is under ten leases old.
                let lag = ns(self.query_timeout) * 30;
                if let Some((at, r)) = h.snapshots.get(group).filter(|(at, _)| hist.t() < at + lag) {
                    let _ = at;
                    return Ok(r.clone());
                }
            }
            let r = self.mem().members(group)?;
            let mut members: Vec<u32> = r.iter().map(|m| Self::label(h, &m.session)).collect();
            members.sort_unstable();
            listed.borrow_mut().clone_from(&members);
            hist.push(h, Event::MembersRead { node: 0, b, client: u8::MAX, group: group.clone(), members });
            if self.stale_member_reads {
                let t = hist.t();
                h.snapshots.insert(group.clone(), (t, r.clone()));
            }
            Ok(r)
        });
        if r.is_err() {
            // An injected fault: the watcher's chance to show a join starts again.
            let mut h = self.hist.lock();
            self.hist.push(&mut h, Event::MembersReadFailed { group: group.clone() });
        } else if crate::sync::now().saturating_duration_since(started) >= self.query_timeout {
            // Its caller gave up on it (the checker's `watch-sees-join` bound restarts here).
            let mut h = self.hist.lock();
            self.hist.push(&mut h, Event::MembersReplyLate { group: group.clone(), members: listed.take() });
        }
        if self.member_replies_lost && !quiet && r.is_ok() {
            return Err(Error::new(
                ErrorKind::Unavailable,
                "simulated: the members call took effect, its reply was lost",
            ));
        }
        r
    }
}
