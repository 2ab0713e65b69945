//! The application side of a run: user threads calling the real API (`Session::open`, `lock_timeout`,
//! `try_lock`, `Lease::release`, `campaign`, `Election::resign`, `Election::run_while_leader`
//! and its `LeaderTask::stop`/drop, `join`, `Membership::leave`, `members`, `watch_members`,
//! `leader`, `Session::close`, the same on a `Coordinator` with `Coordinator::watch_members`, and
//! drops), and the sampler that records when `token()`, `is_leader()`, `is_member()` and
//! `is_alive()` change their answer (and a coordinator membership's re-join on a new session, as a
//! `JoinReturned` there).
//!
//! A leader task's closure records every call ([`TaskStep::Work`]) under the history lock right
//! after a sample, so what its `LeaderContext` answered is checked against every handle's answer
//! at that very point of the history. A watcher thread records every `GroupChange` it receives
//! ([`WatchStep::Change`]) under the history lock.
//!
//! Every handle the application holds is registered here. A sample takes the history lock and
//! asks **every** registered handle, so each sample is one point of the history's total order (the
//! backend records its effects under the same lock, and the clock only moves under it): two
//! handles answering `Ok` in one sample did so with no backend effect and no clock move between
//! them.

use std::sync::Arc;
use std::time::Duration;

use super::backend::{below, sleep_virtual, unit, HistState, History, Resigned};
use crate::events::Events;
use crate::handles::coordinator::{Coordinator, CoordinatorEvent};
use crate::handles::election::Election;
use crate::handles::group::Membership;
use crate::handles::lease::Lease;
use crate::handles::session::Session;
use crate::sim::check::{Invariant, Violation};
use crate::sim::history::{Event, Held};
use crate::state::SessionEvent;
use crate::types::{Name, Token};

mod parts;
mod tasks;
mod watch;
pub(crate) use parts::PartSetup;
use tasks::{Task, TASK_P};

/// A registered handle and what the history last recorded about it.
struct Slot<T> {
    client: u8,
    sess: u32,
    id: u64,
    handle: Arc<T>,
    /// The token `token()` last returned Ok with (`None`: failing), or `is_member()`.
    valid: Option<Token>,
    member: bool,
    /// A membership moved to a new session (a `Coordinator`'s) and is not a member there yet.
    moved: bool,
}

/// The handles the application holds (guarded by the history lock).
#[derive(Default)]
pub(crate) struct Handles {
    next: u64,
    sessions: Vec<(u8, u32, Arc<Session>, bool)>,
    leases: Vec<Slot<Lease>>,
    elections: Vec<Slot<Election>>,
    members: Vec<Slot<Membership>>,
    /// Violations the sampler saw directly (not expressible as records).
    pub(crate) violations: Vec<Violation>,
    /// The run's `Coordinator`, if it has one (its current session is sampled).
    pub(crate) coordinator: Option<Arc<Coordinator>>,
    /// Sessions already reported alive again (reported once).
    revived: Vec<u32>,
    /// Per (client, election name): the last leader token `leader()` returned.
    leader_seen: Vec<(u8, Name, Token)>,
    /// Per slot taken out of the registry (its election resigned or dropped next): the session it
    /// was on when taken, for its leader task's looks until the task ends.
    taken: Vec<(u64, u32)>,
    /// Each user session's events (from its open on), drained by every sample: a
    /// `MembershipLost` is recorded and counted.
    events: Vec<(u8, u32, Events<SessionEvent>)>,
    /// The coordinator's events (its client, from its start on), drained by every sample: the
    /// `MembershipLost` of its sessions is recorded and counted, as a user session's is.
    coordinator_events: Option<(u8, Events<CoordinatorEvent>)>,
    /// Partition set members (`Workload::Partitions`), sampled by `parts::sample_parts`.
    parts: Vec<parts::PartSlot>,
}

impl std::fmt::Debug for Handles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handles").field("leases", &self.leases.len()).finish_non_exhaustive()
    }
}

/// Records every handle's current answer (see the module docs). Runs under the history lock.
pub(crate) fn sample(hist: &History, h: &mut HistState) {
    let mut events = Vec::new();
    let hs = &mut h.handles;
    // Each session's `is_alive()`, asked before any `is_member()` of it (expiry is terminal, so
    // a membership true after its session answered false is one that outlived its session).
    let mut alive_of: Vec<(u32, bool)> = Vec::new();
    for (client, sess, s, dead) in &mut hs.sessions {
        let alive = s.is_alive();
        alive_of.push((*sess, alive));
        if !alive && !*dead {
            *dead = true;
            h.counts.client_expiries += 1;
            events.push(Event::Expired { client: *client, sess: *sess });
        } else if alive && *dead && !hs.revived.contains(sess) {
            hs.revived.push(*sess);
            hs.violations.push(Violation {
                invariant: Invariant::NoRevival,
                index: h.records.len(),
                t: hist.t(),
                detail: format!("client {client} s{sess}: is_alive() true again after it was false"),
            });
        }
    }
    for slot in &mut hs.leases {
        token_sample(slot, slot.handle.token().ok(), Held::Lease, &mut events);
    }
    let mut leaders: Vec<(Name, u8, u32)> = Vec::new();
    for slot in &mut hs.elections {
        let leading = slot.handle.is_leader();
        // token() first: a campaign whose token() is Ok is attached to the session read after it
        // (moving it to another session takes a backend effect, which waits for this lock).
        let token = slot.handle.token().ok();
        let sess = slot.handle.session_id().and_then(|id| h.labels.get(&id).copied()).unwrap_or(slot.sess);
        if sess != slot.sess {
            // Recovered on a new session (a `Coordinator`): what the old one answered ends.
            if slot.valid.take().is_some() {
                events.push(Event::ValidEnd { client: slot.client, sess: slot.sess, name: slot.handle.name().clone() });
            }
            slot.sess = sess;
        }
        if leading {
            leaders.push((slot.handle.name().clone(), slot.client, slot.sess));
        }
        token_sample(slot, token, Held::Leadership, &mut events);
    }
    if let Some(co) = &hs.coordinator {
        if let Some(id) = co.session_id() {
            if let Some(label) = h.labels.get(&id) {
                if !h.coordinator_sessions.contains(label) {
                    h.coordinator_sessions.push(*label);
                }
            }
        }
    }
    leaders.sort();
    for w in leaders.windows(2) {
        if w[0].0 == w[1].0 {
            hs.violations.push(Violation {
                invariant: Invariant::ExclusiveToken,
                index: h.records.len(),
                t: hist.t(),
                detail: format!(
                    "is_leader() of '{}' true at once for client {} s{} and client {} s{}",
                    w[0].0, w[0].1, w[0].2, w[1].1, w[1].2
                ),
            });
        }
    }
    for slot in &mut hs.members {
        let member = slot.handle.is_member();
        let sess = slot.handle.session_id().and_then(|id| h.labels.get(&id).copied()).unwrap_or(slot.sess);
        if sess != slot.sess {
            if slot.member {
                events.push(Event::MemberEnd {
                    client: slot.client,
                    sess: slot.sess,
                    group: slot.handle.group().clone(),
                });
                slot.member = false;
            }
            slot.sess = sess;
            slot.moved = true;
        }
        let (client, sess, group) = (slot.client, slot.sess, slot.handle.group().clone());
        if member && alive_of.iter().any(|(s, alive)| *s == sess && !*alive) {
            let detail = format!(
                "client {client} s{sess}: is_member() of '{group}' true while its session's is_alive() is false"
            );
            if !hs.violations.iter().any(|v| v.detail == detail) {
                let (index, t) = (h.records.len(), hist.t());
                hs.violations.push(Violation { invariant: Invariant::MemberListed, index, t, detail });
            }
        }
        if member != slot.member {
            slot.member = member;
            if member && std::mem::take(&mut slot.moved) {
                // The coordinator's re-join on its new session returned, as far as the application
                // can tell: watches must show it like any join (`watch-sees-join`).
                events.push(Event::JoinReturned { client, sess, group: group.clone() });
            }
            if member {
                events.push(Event::MemberStart { client, sess, group });
            } else {
                events.push(Event::MemberEnd { client, sess, group: group.clone() });
                events.push(Event::HeldLost { client, sess, what: Held::Membership, name: group });
            }
        }
    }
    for (client, sess, rx) in &h.handles.events {
        while let Ok(ev) = rx.try_recv() {
            if let SessionEvent::MembershipLost { group } = ev {
                h.counts.memberships_lost += 1;
                events.push(Event::MembershipLost { client: *client, sess: *sess, group });
            }
        }
    }
    if let Some((client, rx)) = &h.handles.coordinator_events {
        while let Ok(ev) = rx.try_recv() {
            if let CoordinatorEvent::MembershipLost { session, group } = ev {
                let sess = h.labels.get(&session).copied().unwrap_or(u32::MAX);
                h.counts.memberships_lost += 1;
                events.push(Event::MembershipLost { client: *client, sess, group });
            }
        }
    }
    parts::sample_parts(hist, h, &mut events);
    for e in events {
        hist.push(h, e);
    }
}

trait Named {
    fn lease_name(&self) -> &Name;
}
impl Named for Lease {
    fn lease_name(&self) -> &Name {
        self.name()
    }
}
impl Named for Election {
    fn lease_name(&self) -> &Name {
        self.name()
    }
}

/// Records a registered handle's `token()` answer when it changed; a change from Ok to failing is
/// also a [`Event::HeldLost`] of `what` (the application still holds the handle).
fn token_sample<T: Named>(slot: &mut Slot<T>, now: Option<Token>, what: Held, events: &mut Vec<Event>) {
    let (client, sess, name) = (slot.client, slot.sess, slot.handle.lease_name().clone());
    if now == slot.valid {
        return;
    }
    if slot.valid.is_some() {
        events.push(Event::ValidEnd { client, sess, name: name.clone() });
        if now.is_none() {
            events.push(Event::HeldLost { client, sess, what, name: name.clone() });
        }
    }
    if let Some(token) = now {
        events.push(Event::ValidStart { client, sess, name, token });
    }
    slot.valid = now;
}

/// The session a node's first user thread holds, with its label, shared with its second one.
pub(crate) type SharedSession = Arc<crate::sync::Mutex<Option<(Arc<Session>, u32)>>>;

/// One client: a node of the application with its own session and a user thread.
pub(crate) struct Client {
    pub(crate) c: u8,
    pub(crate) hist: Arc<History>,
    pub(crate) backend: Arc<dyn crate::backend::LeaseBackend>,
    pub(crate) options: crate::options::SessionOptions,
    pub(crate) names: Vec<Name>,
    pub(crate) election: Name,
    pub(crate) group: Name,
    pub(crate) ops: usize,
    /// The session the user thread holds, for the node's second user thread (if any).
    pub(crate) shared: SharedSession,
    /// The election-focused workload (see [`Workload`](super::Workload)).
    pub(crate) elections: bool,
    /// A leader task records `LeaderContext::granted_token()` as if `token()` had returned it
    /// ([`Scenario::with_unchecked_leader_token`](super::Scenario::with_unchecked_leader_token)).
    pub(crate) unchecked_leader_token: bool,
    /// The coordinator's node records its election resigned but keeps it campaigning
    /// ([`Scenario::with_resign_skipped`](super::Scenario::with_resign_skipped)).
    pub(crate) resign_skipped: bool,
    /// The node's second thread retries a busy `try_lock` at once, up to 64 times
    /// ([`Scenario::with_spinning_try_lock`](super::Scenario::with_spinning_try_lock)).
    pub(crate) spin_try_lock: bool,
    /// Some idle operations wait for the session's next renewal and `try_lock` right after it
    /// took effect, while its reply may still be on its way
    /// ([`Scenario::half_renew`](super::Scenario::half_renew)).
    pub(crate) lock_after_renewal: bool,
    /// The run's partition set (`Workload::Partitions`), else `None`.
    pub(crate) parts: Option<PartSetup>,
}

fn arc_unwrap<T>(a: Arc<T>) -> Option<T> {
    Arc::into_inner(a)
}

impl Client {
    fn lease(&self) -> Duration {
        self.options.lease_duration()
    }

    fn open(&self) -> Option<(Arc<Session>, u32)> {
        let s = Session::open(self.backend.clone(), self.options.clone()).ok()?;
        let s = Arc::new(s);
        let mut h = self.hist.lock();
        let sess = h.labels.get(s.id()).copied().unwrap_or(u32::MAX);
        h.handles.sessions.push((self.c, sess, s.clone(), false));
        if h.membership_events {
            h.handles.events.push((self.c, sess, s.events()));
        }
        let c = self.c;
        self.hist.push(&mut h, Event::SessionStarted { client: c, sess });
        Some((s, sess))
    }

    fn register<T>(&self, sess: u32, pick: impl Fn(&mut Handles) -> &mut Vec<Slot<T>>, handle: T) -> (u64, Arc<T>) {
        let handle = Arc::new(handle);
        let mut h = self.hist.lock();
        h.handles.next += 1;
        let id = h.handles.next;
        let slot = Slot { client: self.c, sess, id, handle: handle.clone(), valid: None, member: false, moved: false };
        pick(&mut h.handles).push(slot);
        sample(&self.hist, &mut h);
        (id, handle)
    }

    fn sample(&self) {
        let mut h = self.hist.lock();
        sample(&self.hist, &mut h);
    }

    /// Holds a handle for a random time, sampling it now and then.
    fn hold(&self) {
        let total = if self.elections { below(self.lease() / 2) } else { below(self.lease() * 2) };
        self.hold_for(total);
    }

    /// Holds a membership: like [`hold`](Client::hold), a quarter of the time for 3–5 leases (long
    /// enough for `watch-sees-join` to wait out its bound).
    fn hold_membership(&self) {
        if unit() < 0.25 {
            self.hold_for(self.lease() * 3 + below(self.lease() * 2));
        } else {
            self.hold();
        }
    }

    fn hold_for(&self, total: Duration) {
        let step = self.lease() / 4;
        let mut left = total;
        while !left.is_zero() {
            let d = left.min(step);
            sleep_virtual(d);
            left -= d;
            self.sample();
        }
    }

    /// The user thread: `ops` random operations on the real API, then close.
    pub(crate) fn run(&self) {
        let mut session: Option<(Arc<Session>, u32)> = None;
        for _ in 0..self.ops {
            let (s, sess) = match &session {
                Some((s, sess)) if s.is_alive() => (s.clone(), *sess),
                Some(_) => {
                    self.shared.lock().take();
                    // Expired (or closed): drop it and open a new one.
                    if let Some((s, _)) = session.take() {
                        self.unregister_session(&s, None);
                        drop(s);
                    }
                    self.hist.lock().counts.reopened += 1;
                    continue;
                }
                None => match self.open() {
                    Some(x) => {
                        session = Some(x.clone());
                        *self.shared.lock() = Some(x.clone());
                        x
                    }
                    None => {
                        sleep_virtual(self.lease() / 4);
                        continue;
                    }
                },
            };
            let name = &self.names[crate::sync::random_below(self.names.len() as u64) as usize];
            // The op mix: `x` picks an op of the general mix; the election-focused workload moves
            // most draws onto campaigns and same-name try_locks.
            let mut x = unit();
            if self.elections {
                x = if x < 0.5 {
                    0.40 + (x / 0.5) * 0.15
                } else if x < 0.65 {
                    0.80 + (x - 0.5)
                } else {
                    x * 0.4
                };
            }
            if x < 0.25 {
                if let Ok(Some(l)) = s.try_lock(name) {
                    self.with_lease(sess, l);
                }
            } else if x < 0.40 {
                if let Ok(Some(l)) = s.lock_timeout(name, below(self.lease())) {
                    self.with_lease(sess, l);
                }
            } else if x < 0.55 {
                if let Ok(e) = s.campaign(&self.election) {
                    let (id, e) = self.register(sess, |h| &mut h.elections, e);
                    let task = (unit() < TASK_P).then(|| self.start_task(id, &e, sess, false));
                    self.hold();
                    self.end_election(id, e, task);
                }
            } else if x < 0.70 {
                if let Ok(m) = s.join(&self.group) {
                    let c = self.c;
                    {
                        let mut h = self.hist.lock();
                        self.hist.push(&mut h, Event::JoinReturned { client: c, sess, group: self.group.clone() });
                    }
                    let (id, m) = self.register(sess, |h| &mut h.members, m);
                    self.hold_membership();
                    self.end_membership(sess, id, m);
                }
            } else if x < 0.78 {
                let _ = s.members(&self.group);
            } else if x < 0.88 {
                if let Ok(l) = s.leader(&self.election) {
                    self.leader_seen(l.map(|l| l.token));
                }
            } else if x < 0.93 {
                self.shared.lock().take();
                if let Some((s, sess)) = session.take() {
                    self.unregister_session(&s, Some(sess));
                    if let Some(s) = arc_unwrap(s) {
                        let _ = s.close();
                        let c = self.c;
                        let mut h = self.hist.lock();
                        self.hist.push(&mut h, Event::Closed { client: c, sess });
                    }
                }
            } else if self.lock_after_renewal && unit() < 0.8 {
                // Lock during a keep-alive in flight: right after the backend renewed the
                // session, before its reply may have reached the engine (finding 3 of issue #36).
                if self.wait_for_renewal(sess) {
                    if unit() < 0.5 {
                        // Or a clock step later: the renewal's reply, which a worker handed over,
                        // may reach the engine only then (and after this acquire's reply).
                        sleep_virtual(Duration::from_nanos(1));
                    }
                    if let Ok(Some(l)) = s.try_lock(name) {
                        self.with_lease(sess, l);
                    }
                }
            } else {
                // Idle: the session renews in the background.
                sleep_virtual(below(self.lease()));
            }
            self.sample();
        }
        self.shared.lock().take();
        if let Some((s, sess)) = session.take() {
            self.unregister_session(&s, Some(sess));
            if let Some(s) = arc_unwrap(s) {
                let _ = s.close();
                let c = self.c;
                let mut h = self.hist.lock();
                self.hist.push(&mut h, Event::Closed { client: c, sess });
            }
        }
    }

    /// The node's second user thread: `try_lock`s on the same session as the first, on the lock
    /// names and on the election's name (the first thread may be campaigning for it, or resigning).
    pub(crate) fn run_helper(&self) {
        let me = Client { c: self.c + 64, ..self.clone_parts() };
        for _ in 0..self.ops {
            let cur = self.shared.lock().clone();
            let Some((s, sess)) = cur else {
                sleep_virtual(below(self.lease() / 2));
                continue;
            };
            let x = unit();
            let name = if x < 0.5 { self.election.clone() } else { self.names[0].clone() };
            if x < 0.85 {
                let mut got = s.try_lock(&name);
                // A wait loop without a pause (`spin_try_lock`): what `bounded-calls` must see.
                let mut spins = 0;
                while self.spin_try_lock && matches!(got, Ok(None)) && spins < 64 {
                    spins += 1;
                    got = s.try_lock(&name);
                }
                if let Ok(Some(l)) = got {
                    drop(s);
                    me.with_lease(sess, l);
                }
            } else {
                drop(s);
                sleep_virtual(below(self.lease() / 2));
            }
            me.sample();
        }
    }

    fn label_of(&self, id: &crate::types::SessionId) -> u32 {
        self.hist.lock().labels.get(id).copied().unwrap_or(u32::MAX)
    }

    /// The node as a [`Coordinator`]: its operations on the real `Coordinator` API while the
    /// coordinator replaces sessions that expire (the outage), then `close`.
    pub(crate) fn run_coordinator(&self) {
        let co = loop {
            match Coordinator::start(self.backend.clone(), self.options.clone()) {
                Ok(co) => break Arc::new(co),
                Err(_) => sleep_virtual(self.lease() / 4),
            }
        };
        {
            let mut h = self.hist.lock();
            h.handles.coordinator = Some(co.clone());
            if h.membership_events {
                h.handles.coordinator_events = Some((self.c, co.events()));
            }
        }
        // Half the coordinators have a watcher thread (`Coordinator::watch_members`).
        let watcher = (unit() < 0.5).then(|| {
            let (w, co) = (self.clone_parts(), co.clone());
            crate::sync::thread::spawn(move || w.run_coordinator_watcher(&co))
        });
        // Elections recorded resigned but left campaigning (`resign_skipped`), dropped at the end.
        let mut kept = Vec::new();
        for _ in 0..self.ops {
            let x = unit();
            // The focused workloads campaign most of the time.
            let x = if self.elections && x < 0.5 { x * 0.7 } else { x };
            if x < 0.35 {
                if !self.resign_skipped {
                    self.hist.lock().resigned = None;
                }
                if let Ok(e) = co.campaign(&self.election) {
                    if self.resign_skipped {
                        // Only a campaign that started ends the watch (a kept one refuses others).
                        self.hist.lock().resigned = None;
                    }
                    let sess = e.session_id().map_or(u32::MAX, |id| self.label_of(&id));
                    let (id, e) = self.register(sess, |h| &mut h.elections, e);
                    let mut task = (unit() < TASK_P).then(|| self.start_task(id, &e, sess, true));
                    self.hold();
                    let name = e.name().clone();
                    drop(e);
                    let (first, wait) = (unit() < 0.4, unit() < 0.5);
                    if first {
                        self.stop_task(task.take(), wait);
                    }
                    let slot = self.take_token_slot(|h| &mut h.elections, id, name.clone());
                    if let Some(e) = slot.and_then(arc_unwrap) {
                        let how = if self.resign_skipped {
                            kept.push(e);
                            "its resign was skipped (resignSkipped)"
                        } else if unit() < 0.8 {
                            match e.resign() {
                                Ok(()) => "resign() returned Ok",
                                Err(_) => "resign() returned an error",
                            }
                        } else {
                            drop(e);
                            "the election was dropped"
                        };
                        let c = self.c;
                        let mut h = self.hist.lock();
                        let t = self.hist.t();
                        let entered = self.hist.acquires_entered();
                        h.resigned = Some(Resigned { name: name.clone(), at: t, entered, how });
                        self.hist.push(&mut h, Event::Resigned { client: c, sess, name });
                        drop(h);
                        self.end_task_election(&task);
                    }
                    self.stop_task(task, wait);
                }
            } else if x < 0.60 {
                let name = &self.names[crate::sync::random_below(self.names.len() as u64) as usize];
                if let Ok(Some(l)) = co.try_lock(name) {
                    let sess = self.label_of(l.session_id());
                    self.with_lease(sess, l);
                }
            } else if x < 0.80 {
                if let Some((id, m, sess)) = self.coordinator_join(&co) {
                    self.hold_membership();
                    self.end_membership(sess, id, m);
                }
            } else if x < 0.90 {
                if let Ok(l) = co.leader(&self.election) {
                    self.leader_seen(l.map(|l| l.token));
                }
            } else {
                sleep_virtual(below(self.lease()));
            }
            self.sample();
        }
        if watcher.is_some_and(|t| t.join().is_err()) {
            panic!("the coordinator's watcher thread panicked");
        }
        drop(kept);
        // `Coordinator::close` closes its current session as `Session::close` does (its
        // memberships end in the engine before any backend call): recorded as `Closing`, like a
        // plain session's close. Read before the history lock (the coordinator's own lock is
        // never taken under it); a replacement opened in between is not labelled, as before.
        let current = co.session_id();
        {
            let mut h = self.hist.lock();
            sample(&self.hist, &mut h);
            h.handles.coordinator.take();
            h.handles.coordinator_events.take();
            if let Some(sess) = current.and_then(|id| h.labels.get(&id).copied()) {
                let client = self.c;
                self.hist.push(&mut h, Event::Closing { client, sess });
            }
        }
        if let Some(co) = arc_unwrap(co) {
            let _ = co.close();
        }
    }

    pub(crate) fn clone_parts(&self) -> Client {
        Client {
            c: self.c,
            hist: self.hist.clone(),
            backend: self.backend.clone(),
            options: self.options.clone(),
            names: self.names.clone(),
            election: self.election.clone(),
            group: self.group.clone(),
            ops: self.ops,
            shared: self.shared.clone(),
            elections: self.elections,
            unchecked_leader_token: self.unchecked_leader_token,
            resign_skipped: self.resign_skipped,
            spin_try_lock: self.spin_try_lock,
            lock_after_renewal: self.lock_after_renewal,
            parts: self.parts.clone(),
        }
    }

    /// The session out of the sampled handles, after a last sample. `closing`: the session's
    /// label when the caller closes it next (`Closing` is recorded); `None` for an ended session
    /// the caller drops.
    fn unregister_session(&self, s: &Arc<Session>, closing: Option<u32>) {
        let mut h = self.hist.lock();
        sample(&self.hist, &mut h);
        h.handles.sessions.retain(|(_, _, x, _)| !Arc::ptr_eq(x, s));
        if let Some(sess) = closing {
            let client = self.c;
            self.hist.push(&mut h, Event::Closing { client, sess });
        }
    }

    /// Waits (at most a lease) until the backend applies a renewal of `sess`; true once it did.
    fn wait_for_renewal(&self, sess: u32) -> bool {
        let deadline = crate::sync::now() + self.lease();
        let mut h = self.hist.lock();
        let before = h.renewals.get(&sess).copied().unwrap_or(0);
        while h.renewals.get(&sess).copied().unwrap_or(0) == before {
            if crate::sync::now() >= deadline {
                return false;
            }
            self.hist.renewed.wait_until(&mut h, deadline);
        }
        true
    }

    fn with_lease(&self, sess: u32, l: Lease) {
        let (id, l) = self.register(sess, |h| &mut h.leases, l);
        self.hold();
        let name = l.name().clone();
        drop(l);
        let l = self.take_token_slot(|h| &mut h.leases, id, name);
        if let Some(l) = l.and_then(arc_unwrap) {
            if unit() < 0.8 {
                let _ = l.release();
            } else {
                drop(l);
            }
        }
    }

    /// Ends a campaign (resign or drop) and its leader task, if it has one: the task is stopped
    /// (`stop()` or drop) before the election ends, or after, while it runs on.
    fn end_election(&self, id: u64, e: Arc<Election>, mut task: Option<Task>) {
        let name = e.name().clone();
        drop(e);
        let (first, wait) = (unit() < 0.4, unit() < 0.5);
        if first {
            self.stop_task(task.take(), wait);
        }
        if let Some(e) = self.take_token_slot(|h| &mut h.elections, id, name).and_then(arc_unwrap) {
            if unit() < 0.8 {
                let _ = e.resign();
            } else {
                drop(e);
            }
            self.end_task_election(&task);
        }
        self.stop_task(task, wait);
    }

    fn end_membership(&self, sess: u32, id: u64, m: Arc<Membership>) {
        let group = m.group().clone();
        drop(m);
        let taken = {
            let mut h = self.hist.lock();
            sample(&self.hist, &mut h);
            let list = &mut h.handles.members;
            let slot = list.iter().position(|s| s.id == id).map(|i| list.remove(i));
            if let Some(slot) = &slot {
                // The slot's session: a coordinator's membership may have moved to a new one.
                if slot.member {
                    let (client, sess) = (slot.client, slot.sess);
                    self.hist.push(&mut h, Event::MemberEnd { client, sess, group: group.clone() });
                }
            }
            slot.map(|s| (s.handle, s.sess))
        };
        let (taken, sess) = match taken {
            Some((m, s)) => (Some(m), s),
            None => (None, sess),
        };
        if let Some(m) = taken.and_then(arc_unwrap) {
            let wait = unit() < 0.8;
            {
                let c = self.c;
                let mut h = self.hist.lock();
                self.hist.push(&mut h, Event::Leaving { client: c, sess, group, wait });
            }
            if wait {
                let _ = m.leave();
            } else {
                drop(m);
            }
        }
    }

    /// Takes a lease or election slot out of the registry, ending its recorded validity.
    fn take_token_slot<T>(
        &self,
        pick: impl Fn(&mut Handles) -> &mut Vec<Slot<T>>,
        id: u64,
        name: Name,
    ) -> Option<Arc<T>> {
        let mut h = self.hist.lock();
        sample(&self.hist, &mut h);
        let list = pick(&mut h.handles);
        let i = list.iter().position(|s| s.id == id)?;
        let slot = list.remove(i);
        h.handles.taken.push((id, slot.sess));
        if slot.valid.is_some() {
            let (client, sess) = (slot.client, slot.sess);
            self.hist.push(&mut h, Event::ValidEnd { client, sess, name });
        }
        Some(slot.handle)
    }

    /// `leader()` returned `token` to this client: it must never go backwards.
    fn leader_seen(&self, token: Option<Token>) {
        let Some(token) = token else { return };
        let mut h = self.hist.lock();
        let c = self.c;
        let name = self.election.clone();
        let t = self.hist.t();
        let index = h.records.len();
        let hs = &mut h.handles;
        match hs.leader_seen.iter_mut().find(|(cc, n, _)| *cc == c && *n == name) {
            Some((_, _, last)) => {
                if token < *last {
                    hs.violations.push(Violation {
                        invariant: Invariant::TokenMonotonic,
                        index,
                        t,
                        detail: format!("client {c}: leader('{name}') returned token {token} after token {last}"),
                    });
                }
                *last = (*last).max(token);
            }
            None => hs.leader_seen.push((c, name, token)),
        }
    }
}
