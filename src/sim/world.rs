//! The discrete-event world: clients (each the real [`Engine`] plus a driver doing what
//! `runtime/` does), a network, backend nodes on virtual clocks, and the fault injector.
//!
//! The group, push-notification and election drivers live in the submodules.

mod elections;
mod groups;
mod push;

use std::cmp::{Ordering, Reverse};
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use super::clock::{ClientClock, NodeClock, VirtualClock};
use super::cluster::{Node, Script, ScriptReply};
use super::history::{ms as ns, Event, Record};
use super::{BrokenRule, Model, Premise, Scenario, Stats};
use crossbeam_channel::{Receiver, Sender};

use crate::backend::{Acquire, KeepAlive, LeaseBackend, Notification};
use crate::engine::{Adoption, Command, Engine, Event as EngineEvent, KeepAliveResult, Step, Timing};
use crate::memory::MemoryBackend;
use crate::state::SessionState;
use crate::types::{Name, SessionId, Token};

const MS: u64 = 1_000_000;
/// A run stops after this many events (a normal run has a few thousand).
const MAX_EVENTS: u64 = 2_000_000;
/// Node clocks start far from zero so backward jumps never underflow.
const NODE_EPOCH: u64 = 10_000 * 1_000_000_000;

/// The result of one backend call, as the worker hands it back.
#[derive(Debug, Clone)]
enum Res {
    Opened {
        id: SessionId,
        sess: u32,
        node: usize,
        remaining: Duration,
    },
    Alive {
        remaining: Duration,
        owned: Vec<(Name, Token)>,
        groups: Vec<Name>,
    },
    /// The session is expired or unknown.
    Gone,
    Acquired {
        token: Token,
        remaining: Duration,
    },
    Busy,
    Done,
    /// Error or timeout: outcome unknown.
    Failed,
}

#[derive(Debug, Clone)]
enum MemOp {
    Open,
    KeepAlive,
    Acquire(Name, Trigger),
    /// Release; with a token (the proposed fix) only that term.
    Release(Name, Option<Token>),
    Close,
    Join(Name),
    Leave(Name),
    Members(Name),
    Holder(Name),
    /// A one-shot watch of the lease's release, registered for the calling client.
    Watch(Name),
}

#[derive(Debug, Clone)]
enum Req {
    Mem { op: MemOp, target: Option<Target> },
    Script(Script),
}

#[derive(Debug, Clone)]
enum Rep {
    Mem(Res),
    Script(ScriptReply),
}

#[derive(Debug)]
enum Ev {
    Wake {
        c: usize,
        gen: u64,
    },
    /// `late_after`: a release that arrives after this instant arrives after its call ended.
    ToNode {
        c: usize,
        node: usize,
        call: u64,
        step: u32,
        req: Box<Req>,
        late_after: Option<u64>,
    },
    ToClient {
        c: usize,
        call: u64,
        step: u32,
        rep: Box<Rep>,
    },
    /// The worker's own bound on the call (the backend's query timeout) passed.
    CallDeadline {
        c: usize,
        call: u64,
    },
    /// The caller stops waiting (`call_until` in `runtime/`).
    GiveUp {
        c: usize,
        call: u64,
    },
    /// A Cluster call's next script is due (after a client-side stall).
    StubNext {
        c: usize,
        call: u64,
        step: u32,
    },
    Pause {
        c: usize,
        dur: u64,
    },
    Jump {
        node: usize,
        by: i64,
    },
    DataLoss {
        node: usize,
    },
    Partition {
        c: usize,
        node: Option<usize>,
        dur: u64,
    },
    /// A pushed release notification of name `name` reaches client `c`.
    Notify {
        c: usize,
        name: usize,
    },
}

impl Ev {
    /// The client whose process handles this event (deferred while it is paused).
    fn client(&self) -> Option<usize> {
        match self {
            Ev::Wake { c, .. }
            | Ev::ToClient { c, .. }
            | Ev::CallDeadline { c, .. }
            | Ev::GiveUp { c, .. }
            | Ev::StubNext { c, .. }
            | Ev::Notify { c, .. } => Some(*c),
            _ => None,
        }
    }
}

struct Item {
    t: u64,
    seq: u64,
    ev: Ev,
}

impl PartialEq for Item {
    fn eq(&self, o: &Self) -> bool {
        (self.t, self.seq) == (o.t, o.seq)
    }
}
impl Eq for Item {}
impl PartialOrd for Item {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Item {
    fn cmp(&self, o: &Self) -> Ordering {
        (self.t, self.seq).cmp(&(o.t, o.seq))
    }
}

/// Which backend session a call works on.
#[derive(Debug, Clone)]
struct Target {
    id: SessionId,
    sess: u32,
    node: usize,
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Open {
        sent: Instant,
    },
    KeepAlive {
        sent: Instant,
    },
    /// `campaign`: a campaign attempt on the renewal thread (never abandoned by its caller; a
    /// late reply is still judged by its send instant), otherwise a lock attempt (a reply after
    /// the query timeout is undone).
    Acquire {
        name: usize,
        sent: Instant,
        epoch: u64,
        trigger: Trigger,
        campaign: bool,
    },
    Release {
        name: usize,
        token: Option<Token>,
    },
    Close,
    /// `Session::join` (bounded by the query timeout).
    Join {
        group: usize,
    },
    /// A re-join of a membership the backend lost (`Command::Rejoin`, background).
    Rejoin {
        group: usize,
    },
    /// `Membership::leave` (`wait`: bounded by the query timeout) or dropping it (background).
    Leave {
        group: usize,
        wait: bool,
    },
    /// `Session::members` (bounded).
    Members {
        group: usize,
    },
    /// `Election::leader()` (bounded), or a campaign attempt's `holder` read after a busy acquire.
    Holder {
        name: usize,
        campaign: bool,
    },
    /// `LeaseBackend::watch` of a lease, then what the caller does next.
    Watch {
        name: usize,
        then: AfterWatch,
    },
}

/// What started an acquire attempt (for the push/retry hand-off counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Trigger {
    /// A new `lock` call or campaign, or the attempt right after a loss.
    First,
    /// The periodic retry timer.
    Retry,
    /// A pushed release notification.
    Push,
}

/// What follows a watch registration.
#[derive(Debug, Clone, Copy)]
enum AfterWatch {
    /// `lock_until`'s first round: the attempt.
    Acquire,
    /// `lock_until` after a busy attempt: wait for a notification or the retry timer.
    Wait,
    /// A campaign attempt's worker: the acquire (release epoch taken at dispatch).
    CampaignAcquire { epoch: u64, trigger: Trigger },
    /// A campaign attempt's worker after a busy acquire: the `holder` read.
    CampaignHolder,
}

/// Client-side memory of the Cluster backend about one session (`backends/redis/book.rs`).
#[derive(Debug, Default)]
struct Book {
    /// Terms an acquire started but reported failed: never reported owned; renewals release them.
    abandoned: BTreeMap<Name, (Token, u64)>,
    inflight: BTreeMap<Name, u32>,
    finished: BTreeMap<Name, u64>,
    failing: BTreeMap<Name, u64>,
    drop: BTreeSet<Name>,
    /// Proposed fix: the last term reported acquired per name (a late acquire never abandons it).
    reported: BTreeMap<Name, Token>,
}

impl Book {
    fn touched_since(&self, name: &Name, since: u64) -> bool {
        self.inflight.get(name).is_some_and(|n| *n > 0) || self.finished.get(name).is_some_and(|t| *t >= since)
    }

    fn live_abandoned(&mut self, now: u64) -> Vec<(Name, Token)> {
        let old: Vec<Name> = self.abandoned.iter().filter(|(_, (_, u))| now >= *u).map(|(n, _)| n.clone()).collect();
        for n in old {
            self.abandoned.remove(&n);
            self.drop.insert(n);
        }
        self.abandoned.iter().map(|(n, (t, _))| (n.clone(), *t)).collect()
    }
}

#[derive(Debug, Clone)]
enum Work {
    Renew(Name),
    Release(Name, Token),
}

#[derive(Debug)]
enum Stub {
    /// Memory backend: one request, one reply.
    Mem,
    Open,
    KaSession {
        started: u64,
        dropped: Vec<Name>,
    },
    KaFollow {
        started: u64,
        returned: u64,
        remaining: u64,
        work: VecDeque<Work>,
        cur: Option<Work>,
        owned: Vec<(Name, Token)>,
    },
    AcqSession {
        name: Name,
        sent: u64,
    },
    AcqLease {
        name: Name,
        sent: u64,
        pttl: u64,
        d: u64,
        due: bool,
    },
    Rel {
        name: Name,
        token: Option<Token>,
        phase: u8,
    },
    Close {
        phase: u8,
        list: VecDeque<(Name, Option<Token>)>,
    },
}

struct Call {
    c: usize,
    /// When the worker gives up on the call (real time).
    deadline: u64,
    /// Index of the client's session whose engine the result goes to.
    si: Option<usize>,
    target: Option<Target>,
    kind: Kind,
    step: u32,
    gave_up: bool,
    stub: Stub,
}

struct Sess {
    label: u32,
    target: Target,
    engine: Engine,
    /// Last sampled `token()` per name.
    valid: Vec<Option<Token>>,
    book: Book,
    /// Per name, the largest token this session asked to release (the proposed fix refuses to adopt
    /// a term at or below it).
    released: Vec<Option<Token>>,
    /// `owned` of the keep-alive reply being fed to the engine (tokens of its strays).
    last_owned: Vec<(Name, Token)>,
    /// The groups in `SessionInner::memberships` (joining or joined, not yet left).
    groups: BTreeSet<usize>,
}

#[derive(Debug, Clone)]
struct Want {
    next_try: u64,
    hold_until: Option<u64>,
    /// The acquire (or, with push, the watch) in flight.
    acquiring: Option<u64>,
    /// The next attempt is the first of a new `lock` call.
    first: bool,
    /// Push: this `lock` call's watch was registered before its first attempt.
    watched: bool,
    /// Push: a notification arrived while a call was in flight (it waits in the channel).
    notified: bool,
    /// Push: the next attempt was started by a notification.
    push_woken: bool,
}

impl Default for Want {
    fn default() -> Want {
        Want {
            next_try: 0,
            hold_until: None,
            acquiring: None,
            first: true,
            watched: false,
            notified: false,
            push_woken: false,
        }
    }
}

struct Client {
    clock: ClientClock,
    paused_until: u64,
    sessions: Vec<Sess>,
    current: Option<usize>,
    opening: Option<u64>,
    reopen_at: u64,
    close_at: u64,
    wake: Option<u64>,
    gen: u64,
    wants: Vec<Want>,
    eager: bool,
    /// Per group: the membership workload.
    groups: Vec<groups::GroupWant>,
    /// Elections: campaigns for `lease-0` (the election) instead of locking it.
    candidate: bool,
    camp: Option<elections::Camp>,
    /// When the application (re)starts a campaign.
    camp_next: u64,
    /// The engine's id of the client's last campaign (its attempts' answers carry it).
    campaign: Option<crate::engine::CampaignId>,
    /// The next `leader()` read, and the one in flight.
    leader_next: u64,
    leader_reading: Option<u64>,
    /// Push: the channel this client's watches are registered with.
    notify: Option<(Sender<Notification>, Receiver<Notification>)>,
}

struct Net {
    loss_req: f64,
    loss_rep: f64,
    slow: f64,
    stall: f64,
    hang: f64,
    /// (client, node or all, from, until)
    partitions: Vec<(usize, Option<usize>, u64, u64)>,
}

impl Net {
    fn cut(&self, c: usize, node: usize, t: u64) -> bool {
        self.partitions
            .iter()
            .any(|&(pc, pn, from, until)| pc == c && pn.is_none_or(|n| n == node) && from <= t && t < until)
    }
}

struct MemModel {
    backend: MemoryBackend,
    clock: Arc<VirtualClock>,
    labels: HashMap<SessionId, u32>,
}

pub(crate) struct World {
    sc: Scenario,
    rng: SmallRng,
    base: Instant,
    now: u64,
    end: u64,
    seq: u64,
    queue: BinaryHeap<Reverse<Item>>,
    timing: Timing,
    engine_timing: Timing,
    pub(crate) lease: u64,
    names: Vec<Name>,
    name_node: Vec<usize>,
    clients: Vec<Client>,
    nodes: Vec<Node>,
    mem: Option<MemModel>,
    net: Net,
    calls: BTreeMap<u64, Box<Call>>,
    next_call: u64,
    next_label: u32,
    pub(crate) records: Vec<Record>,
    pub(crate) stats: Stats,
    pub(crate) broken: BTreeSet<Premise>,
    scratch: Vec<Event>,
    /// Group names (empty without the group workload).
    groups: Vec<Name>,
    /// Join and leave requests on their way to the backend, per (session label, group).
    group_ops: HashMap<(u32, usize), u32>,
    /// Client and session index of every session label.
    owners: HashMap<u32, (usize, usize)>,
    /// Per name: when the backend was last seen freeing it (for the hand-off wait counters).
    freed_at: Vec<Option<u64>>,
    /// Per name: the newest token granted (a grant with a larger one is a new term).
    last_grant: Vec<u64>,
}

impl World {
    pub(crate) fn new(seed: u64, sc: &Scenario) -> World {
        let mut rng = SmallRng::seed_from_u64(seed);
        let lease = ns(sc.lease);
        let renew = sc.lease / 3;
        let timing = Timing { lease_duration: sc.lease, renew_interval: renew, drift: sc.drift, query_timeout: renew };
        let mut engine_timing = timing;
        if sc.broken_rule == Some(BrokenRule::NoDrift) {
            engine_timing.drift = 0.0;
        }
        let f = sc.faults;
        let n_clients = rng.random_range(2..=sc.max_clients.max(2));
        let n_names = rng.random_range(1..=sc.max_names.max(1));
        let n_nodes = match sc.model {
            Model::Memory => 1,
            Model::Cluster { nodes } => usize::from(nodes.max(1)),
        };
        let names: Vec<Name> = (0..n_names).filter_map(|i| Name::new(format!("lease-{i}")).ok()).collect();
        let name_node: Vec<usize> = names.iter().map(|_| rng.random_range(0..n_nodes)).collect();
        // Rates within the premise keep every backend/client ratio below 1 / (1 - drift).
        let within = if f.drift_within { sc.drift * 0.45 } else { 0.0 };
        let rate = |rng: &mut SmallRng| if within > 0.0 { 1.0 + rng.random_range(-within..within) } else { 1.0 };
        let memory = sc.model == Model::Memory;
        let (with_groups, with_push, with_elections) = (memory && sc.groups, memory && sc.push, memory && sc.elections);
        let clients: Vec<Client> = (0..n_clients)
            .map(|_| {
                let clock = ClientClock { offset: rng.random_range(0..1_000_000) * MS, rate: rate(&mut rng) };
                // With push, candidates retry at the real interval (the notification wakes them).
                let eager = rng.random_bool(0.5) && !with_push;
                let candidate = with_elections && rng.random_bool(0.75);
                Client {
                    clock,
                    paused_until: 0,
                    sessions: Vec::new(),
                    current: None,
                    opening: None,
                    reopen_at: 0,
                    close_at: u64::MAX,
                    wake: None,
                    gen: 0,
                    wants: vec![Want::default(); names.len()],
                    eager,
                    groups: Vec::new(),
                    candidate,
                    camp: None,
                    camp_next: 0,
                    campaign: None,
                    leader_next: 0,
                    leader_reading: None,
                    notify: with_push.then(crossbeam_channel::unbounded),
                }
            })
            .collect();
        let mut broken = BTreeSet::new();
        let mut nodes: Vec<Node> = (0..n_nodes)
            .map(|_| {
                let offset = rng.random_range(0..100_000) * MS;
                Node::new(NodeClock::new(NODE_EPOCH + offset, rate(&mut rng)))
            })
            .collect();
        if f.drift_beyond {
            // One node runs fast, 2–8 × drift beyond the client clocks.
            let k = rng.random_range(2.0..8.0);
            let i = rng.random_range(0..n_nodes);
            nodes[i].clock.rate = 1.0 + within + k * sc.drift;
            broken.insert(Premise::Drift);
        }
        let mem = match sc.model {
            Model::Memory => {
                let clock = Arc::new(VirtualClock::default());
                let backend = MemoryBackend::with_clock(clock.clone());
                Some(MemModel { backend, clock, labels: HashMap::new() })
            }
            Model::Cluster { .. } => None,
        };
        let k = sc.intensity.clamp(0.0, 10.0);
        let p =
            |rng: &mut SmallRng, on: bool, max: f64| if on && k > 0.0 { rng.random_range(0.0..max * k) } else { 0.0 };
        let net = Net {
            loss_req: p(&mut rng, f.message_loss, 0.08),
            loss_rep: p(&mut rng, f.message_loss, 0.08),
            slow: p(&mut rng, f.slow_messages, 0.08),
            stall: p(&mut rng, f.client_stalls, 0.1),
            hang: p(&mut rng, f.slow_messages, 0.03),
            partitions: Vec::new(),
        };
        let end = lease * u64::from(sc.leases);
        let groups: Vec<Name> = if with_groups {
            let n = rng.random_range(1..=2);
            (0..n).filter_map(|i| Name::new(format!("group-{i}")).ok()).collect()
        } else {
            Vec::new()
        };
        let n_names = names.len();
        let mut w = World {
            sc: sc.clone(),
            rng,
            base: Instant::now(),
            now: 0,
            end,
            seq: 0,
            queue: BinaryHeap::new(),
            timing,
            engine_timing,
            lease,
            names,
            name_node,
            clients,
            nodes,
            mem,
            net,
            calls: BTreeMap::new(),
            next_call: 1,
            next_label: 0,
            records: Vec::new(),
            stats: Stats::default(),
            broken,
            scratch: Vec::new(),
            groups,
            group_ops: HashMap::new(),
            owners: HashMap::new(),
            freed_at: vec![None; n_names],
            last_grant: vec![0; n_names],
        };
        for c in 0..n_clients {
            w.init_groups(c);
            w.init_elections(c);
        }
        let drifting = w.clients.iter().map(|c| c.clock.rate).chain(w.nodes.iter().map(|n| n.clock.rate));
        w.stats.fired.drifting_clocks = drifting.filter(|r| *r != 1.0).count() as u64;
        w.stats.fired.drift_beyond = u64::from(f.drift_beyond);
        let ppm = |r: f64| ((r - 1.0) * 1e6).round() as i64;
        let client_ppm = w.clients.iter().map(|c| ppm(c.clock.rate)).collect();
        let node_ppm = w.nodes.iter().map(|n| ppm(n.clock.rate)).collect();
        w.record(Event::Setup { client_ppm, node_ppm });
        for c in 0..n_clients {
            let t = w.rng.random_range(0..lease / 20);
            w.push(t, Ev::Wake { c, gen: 0 });
            w.clients[c].wake = Some(t);
        }
        w.schedule_faults();
        w
    }

    fn schedule_faults(&mut self) {
        let f = self.sc.faults;
        let (l, end) = (self.lease, self.end);
        let n_clients = self.clients.len();
        let n_nodes = self.nodes.len();
        let window = |rng: &mut SmallRng| rng.random_range(end / 20..end * 9 / 10);
        if f.partitions {
            for _ in 0..self.rng.random_range(0..=4) {
                let t = window(&mut self.rng);
                let c = self.rng.random_range(0..n_clients);
                let node = if self.rng.random_bool(0.5) { None } else { Some(self.rng.random_range(0..n_nodes)) };
                let dur = self.rng.random_range(l / 10..l * 5 / 2);
                self.push(t, Ev::Partition { c, node, dur });
            }
        }
        if f.pauses {
            for _ in 0..self.rng.random_range(0..=3) {
                let t = window(&mut self.rng);
                let c = self.rng.random_range(0..n_clients);
                let dur = self.rng.random_range(l / 5..l * 3);
                self.push(t, Ev::Pause { c, dur });
            }
        }
        if f.clock_jumps {
            for _ in 0..self.rng.random_range(1..=2) {
                let t = window(&mut self.rng);
                let node = self.rng.random_range(0..n_nodes);
                let by = self.rng.random_range(l / 10..l * 2) as i64;
                let by = if self.rng.random_bool(0.7) { by } else { -by };
                self.push(t, Ev::Jump { node, by });
            }
        }
        if f.data_loss {
            let t = self.rng.random_range(end * 3 / 10..end * 7 / 10);
            let node = self.rng.random_range(0..n_nodes);
            self.push(t, Ev::DataLoss { node });
        }
    }

    // ----- plumbing -----

    fn push(&mut self, t: u64, ev: Ev) {
        self.seq += 1;
        self.queue.push(Reverse(Item { t, seq: self.seq, ev }));
    }

    fn record(&mut self, event: Event) {
        self.records.push(Record { t: self.now, event });
    }

    fn flush_scratch(&mut self) {
        let now = self.now;
        self.records.extend(self.scratch.drain(..).map(|event| Record { t: now, event }));
    }

    fn inst(&self, c: usize) -> Instant {
        self.clients[c].clock.instant(self.base, self.now)
    }

    fn local(&self, c: usize) -> u64 {
        self.clients[c].clock.local(self.now)
    }

    fn retry_delay(&mut self, c: usize) -> u64 {
        if self.clients[c].eager {
            self.rng.random_range(MS..self.lease / 20)
        } else {
            // runtime/: renew_interval / 2 + jitter(renew_interval / 4)
            let r = ns(self.timing.renew_interval);
            r / 2 + self.rng.random_range(0..r / 4)
        }
    }

    fn delay(&mut self) -> u64 {
        if self.net.slow > 0.0 && self.rng.random_bool(self.net.slow) {
            self.stats.fired.slow_messages += 1;
            self.rng.random_range(self.lease / 20..self.lease * 6 / 5)
        } else {
            self.rng.random_range(MS / 10..4 * MS)
        }
    }

    pub(crate) fn run(&mut self) {
        while let Some(Reverse(item)) = self.queue.pop() {
            if item.t > self.end {
                break;
            }
            if self.stats.events >= MAX_EVENTS {
                // A driver bug that keeps waking a client at the same instant: stop, and say so.
                self.stats.truncated += 1;
                break;
            }
            self.now = item.t;
            if let Some(c) = item.ev.client() {
                let until = self.clients[c].paused_until;
                if until > self.now {
                    // The process is stopped: it handles this when it resumes, in order.
                    self.push(until, item.ev);
                    continue;
                }
            }
            self.stats.events += 1;
            self.dispatch(item.ev);
        }
    }

    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::Wake { c, gen } => {
                if gen == self.clients[c].gen {
                    self.clients[c].wake = None;
                    self.step(c);
                }
            }
            Ev::ToNode { c, node, call, step, req, late_after } => {
                self.group_op_arrived(&req);
                if late_after.is_some_and(|t| self.now > t) {
                    if !self.sc.faults.late_releases {
                        // Without late releases a release never takes effect after its call ended.
                        self.stats.dropped += 1;
                        return;
                    }
                    self.stats.fired.late_releases += 1;
                }
                self.at_node(c, node, call, step, *req)
            }
            Ev::ToClient { c, call, step, rep } => {
                let current = self.calls.get(&call).is_some_and(|k| k.step == step);
                if current {
                    match *rep {
                        Rep::Mem(res) => self.complete(call, res),
                        Rep::Script(r) => self.stub_reply(call, r),
                    }
                }
                self.step(c);
            }
            Ev::CallDeadline { c, call } => {
                if self.calls.contains_key(&call) {
                    self.stub_deadline(call);
                }
                self.step(c);
            }
            Ev::GiveUp { c, call } => {
                self.give_up(call);
                self.step(c);
            }
            Ev::StubNext { c, call, step } => {
                if self.calls.get(&call).is_some_and(|k| k.step == step) {
                    self.stub_next(call);
                }
                self.step(c);
            }
            Ev::Pause { c, dur } => {
                self.stats.fired.pauses += 1;
                let until = self.now + dur;
                let cl = &mut self.clients[c];
                cl.paused_until = cl.paused_until.max(until);
                self.record(Event::Pause { client: c as u8, until });
            }
            Ev::Partition { c, node, dur } => {
                self.stats.fired.partitions += 1;
                let until = self.now + dur;
                self.net.partitions.push((c, node, self.now, until));
                self.record(Event::Partition { client: c as u8, node: node.map(|n| n as u8), until });
            }
            Ev::Jump { node, by } => {
                self.stats.fired.clock_jumps += 1;
                self.nodes[node].clock.jump(self.now, by);
                self.broken.insert(Premise::ClockJump);
                self.record(Event::ClockJump { node: node as u8, by_ns: by });
            }
            Ev::Notify { c, name } => {
                self.notified(c, name);
                self.step(c);
            }
            Ev::DataLoss { node } => {
                self.stats.fired.data_losses += 1;
                self.nodes[node].lose_data();
                if let Some(m) = &mut self.mem {
                    m.backend = MemoryBackend::with_clock(m.clock.clone());
                }
                self.broken.insert(Premise::TokenReset);
                self.record(Event::DataLoss { node: node as u8 });
            }
        }
    }

    // ----- network -----

    fn send(&mut self, c: usize, node: usize, call: u64, step: u32, req: Req) {
        self.stats.messages += 1;
        let lost = self.net.loss_req > 0.0 && self.rng.random_bool(self.net.loss_req);
        self.stats.fired.lost_requests += u64::from(lost);
        if lost || self.net.cut(c, node, self.now) {
            self.stats.dropped += 1;
            return;
        }
        let releases = match &req {
            Req::Mem { op: MemOp::Release(..) | MemOp::Leave(..), .. } | Req::Script(Script::ReleaseSlot { .. }) => {
                true
            }
            Req::Script(Script::RenewSlot { release, .. }) => !release.is_empty(),
            _ => false,
        };
        let late_after = if releases {
            Some(self.calls.get(&call).map_or(self.now + ns(self.timing.query_timeout), |k| k.deadline))
        } else {
            None
        };
        self.group_op_sent(&req);
        let t = self.now + self.delay();
        self.push(t, Ev::ToNode { c, node, call, step, req: Box::new(req), late_after });
    }

    fn reply(&mut self, c: usize, node: usize, call: u64, step: u32, rep: Rep) {
        self.stats.messages += 1;
        // Applied on the server, reply lost.
        let lost = self.net.loss_rep > 0.0 && self.rng.random_bool(self.net.loss_rep);
        self.stats.fired.lost_replies += u64::from(lost);
        if lost || self.net.cut(c, node, self.now) {
            self.stats.dropped += 1;
            return;
        }
        let t = self.now + self.delay();
        self.push(t, Ev::ToClient { c, call, step, rep: Box::new(rep) });
    }

    fn at_node(&mut self, c: usize, node: usize, call: u64, step: u32, req: Req) {
        if self.net.cut(c, node, self.now) {
            self.stats.dropped += 1;
            return;
        }
        let b = self.nodes[node].clock.value(self.now);
        let rep = match req {
            Req::Mem { op, target } => {
                let r = self.mem_apply(c, call, b, op, target);
                self.flush_scratch();
                self.drain_notifications();
                Rep::Mem(r)
            }
            Req::Script(s) => {
                let mut out = std::mem::take(&mut self.scratch);
                let r = self.nodes[node].apply(node as u8, b, s, &mut out);
                self.scratch = out;
                Rep::Script(r)
            }
        };
        self.flush_scratch();
        self.reply(c, node, call, step, rep);
    }

    fn mem_apply(&mut self, c: usize, call: u64, b: u64, op: MemOp, target: Option<Target>) -> Res {
        match op {
            MemOp::Join(group) => return self.mem_join(call, b, group, target),
            MemOp::Leave(group) => return self.mem_leave(b, group, target),
            MemOp::Members(group) => return self.mem_members(c, b, group),
            MemOp::Holder(name) => return self.mem_holder(c, b, name),
            MemOp::Watch(name) => return self.mem_watch(c, b, name),
            _ => {}
        }
        let Some(m) = &mut self.mem else { return Res::Failed };
        m.clock.set(b);
        let lease = self.timing.lease_duration;
        let out = &mut self.scratch;
        let (id, sess) = match &target {
            Some(t) => (t.id.clone(), t.sess),
            None => (SessionId::from_u64(0), u32::MAX),
        };
        match op {
            MemOp::Open => match m.backend.open_session(lease, "") {
                Ok(g) => {
                    let sess = self.next_label;
                    self.next_label += 1;
                    m.labels.insert(g.id.clone(), sess);
                    out.push(Event::Opened { node: 0, b, sess, until: b + ns(g.remaining) });
                    Res::Opened { id: g.id, sess, node: 0, remaining: g.remaining }
                }
                Err(_) => Res::Failed,
            },
            MemOp::KeepAlive => match m.backend.keep_alive(&id, lease) {
                Ok(KeepAlive::Alive { remaining, owned, groups }) => {
                    let until = b + ns(remaining);
                    out.push(Event::Renewed { node: 0, b, sess, until });
                    for (name, token) in &owned {
                        out.push(Event::Extended { node: 0, b, sess, name: name.clone(), token: *token, until });
                    }
                    Res::Alive { remaining, owned, groups }
                }
                Ok(KeepAlive::Expired) => {
                    out.push(Event::Refused { node: 0, b, sess });
                    Res::Gone
                }
                Err(_) => Res::Failed,
            },
            MemOp::Acquire(name, trigger) => match m.backend.acquire(&id, &name) {
                Ok(Acquire::Acquired { token, remaining }) => {
                    out.push(Event::SessionChecked { node: 0, b, sess });
                    out.push(Event::Granted { node: 0, b, sess, name: name.clone(), token, until: b + ns(remaining) });
                    self.count_grant(trigger, &name, token);
                    Res::Acquired { token, remaining }
                }
                Ok(Acquire::Busy) => {
                    out.push(Event::SessionChecked { node: 0, b, sess });
                    out.push(Event::Busy { node: 0, b, sess, name });
                    Res::Busy
                }
                Err(e) if e.is_session_expired() => {
                    out.push(Event::Refused { node: 0, b, sess });
                    Res::Gone
                }
                Err(_) => Res::Failed,
            },
            MemOp::Release(name, token) => {
                // The SPI's release is term-scoped. `None` emulates the old design (free whatever
                // term the session holds) for the findings that show why it had to go.
                let term = match token {
                    Some(t) => t,
                    None => match m.backend.holder(&name) {
                        Ok(Some(h)) if h.session == id => h.token,
                        Ok(_) => return Res::Done,
                        Err(_) => return Res::Failed,
                    },
                };
                match m.backend.release(&id, &name, term) {
                    Ok(()) => {
                        out.push(Event::Released { node: 0, b, sess, name, token });
                        Res::Done
                    }
                    Err(_) => Res::Failed,
                }
            }
            MemOp::Close => match m.backend.close_session(&id) {
                Ok(()) => {
                    out.push(Event::Deleted { node: 0, b, sess, frees_leases: true });
                    Res::Done
                }
                Err(_) => Res::Failed,
            },
            MemOp::Join(_) | MemOp::Leave(_) | MemOp::Members(_) | MemOp::Holder(_) | MemOp::Watch(_) => Res::Failed,
        }
    }

    // ----- calls -----

    fn start_call(&mut self, c: usize, si: Option<usize>, target: Option<Target>, kind: Kind) -> u64 {
        let id = self.next_call;
        self.next_call += 1;
        let bound = if self.net.hang > 0.0 && self.rng.random_bool(self.net.hang) {
            // A hung driver call: returns (with an error) long after the query timeout.
            self.stats.fired.hung_calls += 1;
            self.rng.random_range(self.lease..self.lease * 3)
        } else {
            let qt = ns(self.timing.query_timeout);
            self.rng.random_range(qt..qt * 3 / 2)
        };
        self.push(self.now + bound, Ev::CallDeadline { c, call: id });
        // Calls a user's thread waits for at most the query timeout (`call_until`, `bounded_call`).
        let waited = match kind {
            Kind::Open { sent } | Kind::Acquire { sent, campaign: false, .. } => Some(sent),
            Kind::Join { .. }
            | Kind::Leave { wait: true, .. }
            | Kind::Members { .. }
            | Kind::Holder { campaign: false, .. }
            | Kind::Watch { then: AfterWatch::Acquire | AfterWatch::Wait, .. } => Some(self.inst(c)),
            _ => None,
        };
        if let Some(sent) = waited {
            let give_up = self.clients[c].clock.real_at_instant(self.base, sent + self.timing.query_timeout);
            self.push(give_up.max(self.now), Ev::GiveUp { c, call: id });
        }
        if let Kind::KeepAlive { .. } = kind {
            self.stats.keep_alives += 1;
        }
        let deadline = self.now + bound;
        let call = Call { c, deadline, si, target: target.clone(), kind, step: 0, gave_up: false, stub: Stub::Mem };
        self.calls.insert(id, Box::new(call));
        match self.sc.model {
            Model::Memory => {
                let op = match kind {
                    Kind::Open { .. } => MemOp::Open,
                    Kind::KeepAlive { .. } => MemOp::KeepAlive,
                    Kind::Acquire { name, trigger, .. } => MemOp::Acquire(self.names[name].clone(), trigger),
                    Kind::Release { name, token } => MemOp::Release(self.names[name].clone(), token),
                    Kind::Close => MemOp::Close,
                    Kind::Join { group } | Kind::Rejoin { group } => MemOp::Join(self.groups[group].clone()),
                    Kind::Leave { group, .. } => MemOp::Leave(self.groups[group].clone()),
                    Kind::Members { group } => MemOp::Members(self.groups[group].clone()),
                    Kind::Holder { name, .. } => MemOp::Holder(self.names[name].clone()),
                    Kind::Watch { name, .. } => MemOp::Watch(self.names[name].clone()),
                };
                self.send(c, 0, id, 0, Req::Mem { op, target });
            }
            Model::Cluster { .. } => self.stub_start(id),
        }
        id
    }

    /// The worker returned `res`: feed it to the engine as `runtime/` does.
    fn complete(&mut self, id: u64, res: Res) {
        let Some(call) = self.calls.remove(&id) else { return };
        let c = call.c;
        match call.kind {
            Kind::Open { sent } => self.opened(c, id, call.gave_up, sent, res),
            Kind::KeepAlive { sent } => {
                let Some(si) = call.si else { return };
                let now = self.inst(c);
                let result = match res {
                    Res::Alive { remaining, owned, mut groups } => {
                        if self.sc.broken_rule == Some(BrokenRule::GroupReportsIgnored) {
                            // Pretend the backend has exactly what the client holds: no loss is seen.
                            let held = &self.clients[c].sessions[si].groups;
                            groups = held.iter().map(|g| self.groups[*g].clone()).collect();
                            groups.sort();
                        }
                        let label = self.clients[c].sessions[si].label;
                        self.record(Event::Owned { client: c as u8, sess: label, owned: owned.clone() });
                        self.clients[c].sessions[si].last_owned = owned.clone();
                        KeepAliveResult::Reply(KeepAlive::Alive { remaining, owned, groups })
                    }
                    Res::Gone => KeepAliveResult::Reply(KeepAlive::Expired),
                    _ => KeepAliveResult::Failed,
                };
                let sent = if self.sc.broken_rule == Some(BrokenRule::DeadlineFromReplyInstant) { now } else { sent };
                let outs = self.clients[c].sessions[si].engine.on_keep_alive(sent, now, result);
                self.handle_step(c, si, outs);
            }
            Kind::Acquire { name, sent, epoch, campaign: true, .. } => {
                let Some(si) = call.si else { return };
                self.campaign_acquired(c, si, name, sent, epoch, res);
            }
            Kind::Acquire { name, sent, epoch, .. } => {
                let Some(si) = call.si else { return };
                if call.gave_up {
                    self.undo_late_acquire(c, si, name, res);
                } else {
                    self.finish_acquire(c, si, name, sent, epoch, res, id);
                }
            }
            Kind::Release { name, token } => {
                if let Some(si) = call.si {
                    let n = self.names[name].clone();
                    let engine = &mut self.clients[c].sessions[si].engine;
                    // As runtime/: a release the backend confirmed forgets the term; the old
                    // any-term release (`token` None) never confirms a particular term.
                    match (res, token) {
                        (Res::Done, Some(t)) => engine.end_confirmed_release(&n, t),
                        _ => engine.end_release(&n),
                    }
                }
            }
            Kind::Close => {}
            Kind::Join { group } => {
                self.join_call_ended(c, call.si, group, call.gave_up, &res);
                if !call.gave_up {
                    self.join_returned(c, call.si, group, id, res);
                }
            }
            Kind::Rejoin { group } => self.rejoin_ended(c, call.si, group, &res),
            Kind::Leave { group, wait } => {
                self.leave_ended(c, call.si, group, id);
                if wait && !call.gave_up {
                    self.leave_returned(c, group, id);
                }
            }
            Kind::Members { group } => {
                if !call.gave_up {
                    self.members_returned(c, group, id);
                }
            }
            Kind::Holder { campaign: false, .. } => {
                if !call.gave_up && self.clients[c].leader_reading == Some(id) {
                    self.clients[c].leader_reading = None;
                    self.clients[c].leader_next = self.now + self.rng.random_range(self.lease / 5..self.lease);
                }
            }
            Kind::Holder { name, campaign: true } => {
                if let Some(si) = call.si {
                    self.campaign_attempt_done(c, si, name);
                }
            }
            Kind::Watch { name, then } => {
                if !call.gave_up {
                    self.watched(c, call.si, name, then, id);
                }
            }
        }
    }

    fn give_up(&mut self, id: u64) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        call.gave_up = true;
        let c = call.c;
        match call.kind {
            Kind::Open { .. } if self.clients[c].opening == Some(id) => {
                self.clients[c].opening = None;
                let d = self.rng.random_range(self.lease / 20..self.lease / 2);
                self.clients[c].reopen_at = self.now + d;
            }
            Kind::Acquire { name, campaign: false, .. } if self.clients[c].wants[name].acquiring == Some(id) => {
                self.clients[c].wants[name].acquiring = None;
                self.wait_retry(c, name);
            }
            Kind::Join { group } => {
                let si = call.si;
                self.join_abandoned(c, si, group);
                self.join_returned(c, si, group, id, Res::Failed);
            }
            Kind::Leave { group, wait: true } => self.leave_returned(c, group, id),
            Kind::Members { group } => self.members_returned(c, group, id),
            Kind::Holder { campaign: false, .. } if self.clients[c].leader_reading == Some(id) => {
                self.clients[c].leader_reading = None;
                self.clients[c].leader_next = self.now + self.rng.random_range(self.lease / 5..self.lease);
            }
            Kind::Watch { name, then } => {
                let si = call.si;
                self.watched(c, si, name, then, id);
            }
            _ => {}
        }
    }

    /// `lock_until` after an attempt that did not take the lease: wait for the retry timer, or
    /// go at once when a pushed notification arrived meanwhile (it is waiting in the channel).
    fn wait_retry(&mut self, c: usize, k: usize) {
        if self.clients[c].notify.is_some() && std::mem::take(&mut self.clients[c].wants[k].notified) {
            let w = &mut self.clients[c].wants[k];
            w.next_try = self.now;
            w.push_woken = true;
            return;
        }
        let d = self.retry_delay(c);
        self.clients[c].wants[k].next_try = self.now + d;
    }

    fn opened(&mut self, c: usize, id: u64, gave_up: bool, sent: Instant, res: Res) {
        if gave_up || self.clients[c].opening != Some(id) {
            // runtime/: a session opened too late is closed at once.
            if let Res::Opened { id: sid, sess, node, .. } = res {
                self.start_call(c, None, Some(Target { id: sid, sess, node }), Kind::Close);
            }
            return;
        }
        self.clients[c].opening = None;
        match res {
            Res::Opened { id: sid, sess, node, remaining } => {
                let sent =
                    if self.sc.broken_rule == Some(BrokenRule::DeadlineFromReplyInstant) { self.inst(c) } else { sent };
                let engine = Engine::new(self.engine_timing, sent, remaining);
                let n = self.names.len();
                let cl = &mut self.clients[c];
                cl.sessions.push(Sess {
                    label: sess,
                    target: Target { id: sid, sess, node },
                    engine,
                    valid: vec![None; n],
                    book: Book::default(),
                    released: vec![None; n],
                    last_owned: Vec::new(),
                    groups: BTreeSet::new(),
                });
                cl.current = Some(cl.sessions.len() - 1);
                self.owners.insert(sess, (c, cl.sessions.len() - 1));
                self.stats.sessions += 1;
                for k in 0..n {
                    let d = self.rng.random_range(0..self.lease / 4);
                    let w = &mut self.clients[c].wants[k];
                    w.next_try = self.now + d;
                    w.hold_until = None;
                    w.acquiring = None;
                    w.first = true;
                    w.watched = false;
                    w.notified = false;
                    w.push_woken = false;
                }
                let close = self.rng.random_range(self.lease * 4..self.lease * 40);
                self.clients[c].close_at = self.now + close;
                self.record(Event::SessionStarted { client: c as u8, sess });
            }
            _ => {
                let d = self.rng.random_range(self.lease / 20..self.lease / 2);
                self.clients[c].reopen_at = self.now + d;
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn finish_acquire(&mut self, c: usize, si: usize, k: usize, sent: Instant, epoch: u64, res: Res, id: u64) {
        let now = self.inst(c);
        let name = self.names[k].clone();
        let label = self.clients[c].sessions[si].label;
        let mut undo = None;
        let mut adopted = None;
        let busy = matches!(res, Res::Busy);
        {
            let refused = self.clients[c].sessions[si].released[k];
            let e = &mut self.clients[c].sessions[si].engine;
            if let Res::Acquired { token, remaining } = res {
                let sent = if self.sc.broken_rule == Some(BrokenRule::DeadlineFromReplyInstant) { now } else { sent };
                if self.sc.proposed_fix && refused.is_some_and(|r| token <= r) {
                    // The engine's own rule (a term once released is never adopted again), kept
                    // here as a cross-check of the engine.
                    e.begin_release(&name, token);
                    undo = Some(token);
                } else {
                    match e.on_acquired(&name, token, sent, remaining, now, epoch) {
                        Adoption::Adopted => adopted = Some(token),
                        // The fix of finding 4: a reply confirming the held term is kept (`+oldUndo`: released).
                        Adoption::Kept if !self.sc.old_undo => {}
                        Adoption::Kept | Adoption::Undo | Adoption::GivenUp => {
                            e.begin_release(&name, token);
                            undo = Some(token);
                        }
                        Adoption::SessionEnded => {}
                    }
                }
            }
            e.end_acquire(&name);
        }
        let current = self.clients[c].wants[k].acquiring == Some(id);
        if current {
            self.clients[c].wants[k].acquiring = None;
        }
        if let Some(token) = adopted {
            self.stats.adoptions += 1;
            self.record(Event::Adopted { client: c as u8, sess: label, name, token });
            let hold = self.rng.random_range(self.lease / 10..self.lease * 3);
            self.clients[c].wants[k].hold_until = Some(self.now + hold);
        } else if busy && current && self.clients[c].notify.is_some() {
            // lock_until: watch again (a one-shot watch may have fired while the lease was free),
            // then wait.
            let target = self.clients[c].sessions[si].target.clone();
            let id = self.start_call(c, Some(si), Some(target), Kind::Watch { name: k, then: AfterWatch::Wait });
            self.clients[c].wants[k].acquiring = Some(id);
        } else {
            self.wait_retry(c, k);
        }
        if let Some(token) = undo {
            self.release_call(c, si, k, token);
        }
    }

    /// Starts a release of `name` `k` (term `token`) whose `begin_release` the engine already saw.
    fn release_call(&mut self, c: usize, si: usize, k: usize, token: Token) {
        let s = &mut self.clients[c].sessions[si];
        s.released[k] = s.released[k].max(Some(token));
        let target = s.target.clone();
        // Term-scoped, as the SPI is; `old_release_any_term` emulates the design it replaced.
        let token = (!self.sc.old_release_any_term).then_some(token);
        self.start_call(c, Some(si), Some(target), Kind::Release { name: k, token });
    }

    fn undo_late_acquire(&mut self, c: usize, si: usize, k: usize, res: Res) {
        let name = self.names[k].clone();
        let e = &mut self.clients[c].sessions[si].engine;
        e.end_acquire(&name);
        let undo = match res {
            Res::Acquired { token, .. } if e.held().all(|(n, t)| *n != name || t != token) => Some(token),
            _ => None,
        };
        if let Some(token) = undo {
            e.begin_release(&name, token);
            self.release_call(c, si, k, token);
        }
    }

    /// Carries out an engine step as `runtime/` does: the events first (the runtime forwards them
    /// under the engine lock), then the commands.
    fn handle_step(&mut self, c: usize, si: usize, step: Step) {
        let label = self.clients[c].sessions[si].label;
        let target = self.clients[c].sessions[si].target.clone();
        for ev in step.events {
            match ev {
                EngineEvent::LeaseLost { name, token, reason } => {
                    if let Some(k) = self.names.iter().position(|n| *n == name) {
                        let w = &mut self.clients[c].wants[k];
                        w.hold_until = None;
                        w.next_try = w.next_try.min(self.now);
                        w.first = true;
                        self.campaign_lost(c, si, k, token);
                    }
                    self.record(Event::Lost { client: c as u8, sess: label, name, token, reason });
                }
                EngineEvent::Expired => {
                    self.record(Event::Expired { client: c as u8, sess: label });
                    self.session_ended(c, si);
                    if self.clients[c].current == Some(si) {
                        self.clients[c].current = None;
                        let d = self.rng.random_range(0..self.lease / 2);
                        self.clients[c].reopen_at = self.now + d;
                    }
                }
                EngineEvent::RenewalFailed { .. } => {}
                EngineEvent::MembershipLost { group } => {
                    self.stats.memberships_lost += 1;
                    self.record(Event::MembershipLost { client: c as u8, sess: label, group });
                }
                EngineEvent::MembershipRestored { .. } => {}
                EngineEvent::Closed => {
                    self.record(Event::Closed { client: c as u8, sess: label });
                    self.session_ended(c, si);
                }
            }
        }
        for cmd in step.commands {
            match cmd {
                Command::SendKeepAlive { sent } => {
                    self.start_call(c, Some(si), Some(target.clone()), Kind::KeepAlive { sent });
                }
                // runtime/: best-effort close after expiry.
                Command::CloseSession => {
                    self.start_call(c, Some(si), Some(target.clone()), Kind::Close);
                }
                // The engine already counted the release in flight.
                Command::ReleaseStray { name, token } | Command::Undo { name, token } => {
                    if let Some(k) = self.names.iter().position(|n| *n == name) {
                        self.release_call(c, si, k, token);
                    }
                }
                Command::Rejoin { group } => {
                    if let Some(g) = self.groups.iter().position(|x| *x == group) {
                        self.start_call(c, Some(si), Some(target.clone()), Kind::Rejoin { group: g });
                    }
                }
                Command::LeaveStray { group } => {
                    if let Some(g) = self.groups.iter().position(|x| *x == group) {
                        self.stats.strays_left += 1;
                        self.leave_stray(c, si, g);
                    }
                }
            }
        }
    }

    // ----- the client's process -----

    fn step(&mut self, c: usize) {
        if let Some(si) = self.clients[c].current {
            let now = self.inst(c);
            let outs = self.clients[c].sessions[si].engine.poll(now);
            self.handle_step(c, si, outs);
        }
        self.workload(c);
        self.sample(c);
        self.schedule_wake(c);
    }

    fn workload(&mut self, c: usize) {
        let now_t = self.now;
        self.reads(c);
        let Some(si) = self.clients[c].current else {
            if self.clients[c].opening.is_none() && now_t >= self.clients[c].reopen_at {
                let sent = self.inst(c);
                let id = self.start_call(c, None, None, Kind::Open { sent });
                self.clients[c].opening = Some(id);
            }
            return;
        };
        if now_t >= self.clients[c].close_at {
            // The application closes its session.
            let outs = self.clients[c].sessions[si].engine.close();
            self.handle_step(c, si, outs);
            self.clients[c].current = None;
            let d = self.rng.random_range(0..self.lease);
            self.clients[c].reopen_at = now_t + d;
            let target = self.clients[c].sessions[si].target.clone();
            self.start_call(c, Some(si), Some(target), Kind::Close);
            return;
        }
        self.campaign_workload(c, si);
        self.group_workload(c, si);
        let now = self.inst(c);
        for k in 0..self.names.len() {
            if self.is_election(k) {
                continue;
            }
            let name = self.names[k].clone();
            let held = self.clients[c].sessions[si].engine.token(&name, now);
            if held.is_none() {
                self.clients[c].wants[k].hold_until = None;
            }
            if let Some(token) = held {
                let hold_until = self.clients[c].wants[k].hold_until;
                match hold_until {
                    None => {
                        let hold = self.rng.random_range(self.lease / 10..self.lease * 3);
                        self.clients[c].wants[k].hold_until = Some(now_t + hold);
                    }
                    Some(h) if now_t >= h => self.release(c, si, k, token),
                    Some(_) => {}
                }
                continue;
            }
            let w = &self.clients[c].wants[k];
            if w.acquiring.is_some() || now_t < w.next_try {
                continue;
            }
            let e = &mut self.clients[c].sessions[si].engine;
            if !e.is_alive(now) {
                continue;
            }
            if e.releasing(&name) {
                // runtime/ waits for the release to finish; its end wakes this client again.
                self.clients[c].wants[k].next_try = now_t + MS;
                continue;
            }
            let target = self.clients[c].sessions[si].target.clone();
            let push = self.clients[c].notify.is_some();
            let w = &mut self.clients[c].wants[k];
            if push && w.first && !w.watched {
                // lock_until registers its watch before the first attempt.
                w.watched = true;
                w.notified = false;
                let id = self.start_call(c, Some(si), Some(target), Kind::Watch { name: k, then: AfterWatch::Acquire });
                self.clients[c].wants[k].acquiring = Some(id);
                continue;
            }
            let trigger = if w.first {
                Trigger::First
            } else if w.push_woken {
                Trigger::Push
            } else {
                Trigger::Retry
            };
            if !w.first {
                // The attempt follows a wait that drained the notification channel.
                w.notified = false;
            }
            w.first = false;
            w.watched = false;
            w.push_woken = false;
            let epoch = self.clients[c].sessions[si].engine.begin_acquire(&name);
            let kind = Kind::Acquire { name: k, sent: now, epoch, trigger, campaign: false };
            let id = self.start_call(c, Some(si), Some(target), kind);
            self.clients[c].wants[k].acquiring = Some(id);
        }
    }

    /// `Lease::release` → `release_lease`: gives the name up locally, then releases on the backend.
    fn release(&mut self, c: usize, si: usize, k: usize, token: Token) {
        let now = self.inst(c);
        let name = self.names[k].clone();
        let e = &mut self.clients[c].sessions[si].engine;
        let held = e.token(&name, now) == Some(token) || e.held().any(|(n, t)| *n == name && t == token);
        if held {
            e.on_release(&name);
        }
        e.begin_release(&name, token);
        let w = &mut self.clients[c].wants[k];
        w.hold_until = None;
        w.first = true;
        let d = self.rng.random_range(0..self.lease * 3 / 2);
        self.clients[c].wants[k].next_try = self.now + d;
        self.release_call(c, si, k, token);
    }

    /// Samples `token()` of every name for client `c`; a new validity first re-samples the others.
    fn sample(&mut self, c: usize) {
        let now = self.inst(c);
        for si in 0..self.clients[c].sessions.len() {
            let active = self.clients[c].sessions[si].engine.state() == SessionState::Active;
            let any = self.clients[c].sessions[si].valid.iter().any(Option::is_some);
            if !active && !any {
                continue;
            }
            for k in 0..self.names.len() {
                self.stats.token_samples += 1;
                let s = &self.clients[c].sessions[si];
                let tok = s.engine.token(&self.names[k], now);
                let prev = s.valid[k];
                if tok == prev {
                    continue;
                }
                let label = s.label;
                if prev.is_some() {
                    self.record(Event::ValidEnd { client: c as u8, sess: label, name: self.names[k].clone() });
                }
                if let Some(token) = tok {
                    for oc in 0..self.clients.len() {
                        if oc != c {
                            self.resample(oc, k);
                        }
                    }
                    let name = self.names[k].clone();
                    self.record(Event::ValidStart { client: c as u8, sess: label, name, token });
                }
                self.clients[c].sessions[si].valid[k] = tok;
            }
        }
        self.sample_members(c);
    }

    /// Re-samples client `c`'s validity of name `k` now, recording its end if it ended.
    fn resample(&mut self, c: usize, k: usize) {
        let now = self.inst(c);
        for si in 0..self.clients[c].sessions.len() {
            let s = &self.clients[c].sessions[si];
            let Some(prev) = s.valid[k] else { continue };
            self.stats.token_samples += 1;
            if s.engine.token(&self.names[k], now) != Some(prev) {
                let label = s.label;
                self.record(Event::ValidEnd { client: c as u8, sess: label, name: self.names[k].clone() });
                self.clients[c].sessions[si].valid[k] = None;
            }
        }
    }

    fn schedule_wake(&mut self, c: usize) {
        let now_t = self.now;
        let cl = &self.clients[c];
        let mut next = u64::MAX;
        match cl.current {
            Some(si) => {
                if let Some(at) = cl.sessions[si].engine.next_wakeup() {
                    next = next.min(cl.clock.real_at_instant(self.base, at));
                }
                next = next.min(cl.close_at);
                for (k, w) in cl.wants.iter().enumerate() {
                    if self.is_election(k) {
                        continue;
                    }
                    if let Some(h) = w.hold_until {
                        next = next.min(h);
                    } else if w.acquiring.is_none() {
                        next = next.min(w.next_try);
                    }
                }
            }
            None => {
                if cl.opening.is_none() {
                    next = next.min(cl.reopen_at);
                }
            }
        }
        next = next.min(self.extra_wake(c));
        if next == u64::MAX {
            return;
        }
        let next = next.max(now_t + 1);
        if cl.wake == Some(next) {
            return;
        }
        if let Some(w) = cl.wake {
            if w <= next && w > now_t {
                return;
            }
        }
        let cl = &mut self.clients[c];
        cl.gen += 1;
        cl.wake = Some(next);
        let gen = cl.gen;
        self.push(next, Ev::Wake { c, gen });
    }

    // ----- the Redis Cluster client side (backends/redis/cluster.rs) -----

    fn script(&mut self, id: u64, node: usize, script: Script) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        call.step += 1;
        let (c, step) = (call.c, call.step);
        self.send(c, node, id, step, Req::Script(script));
    }

    /// A script nobody waits for (cleanup).
    fn script_detached(&mut self, c: usize, node: usize, script: Script) {
        self.send(c, node, 0, 0, Req::Script(script));
    }

    fn book(&mut self, id: u64) -> Option<&mut Book> {
        let call = self.calls.get(&id)?;
        let (c, si) = (call.c, call.si?);
        Some(&mut self.clients[c].sessions.get_mut(si)?.book)
    }

    fn stall(&mut self) -> u64 {
        if self.net.stall > 0.0 && self.rng.random_bool(self.net.stall) {
            self.stats.fired.client_stalls += 1;
            self.rng.random_range(self.lease / 20..self.lease * 3 / 2)
        } else {
            0
        }
    }

    fn stub_start(&mut self, id: u64) {
        let Some(call) = self.calls.get(&id) else { return };
        let (c, kind) = (call.c, call.kind);
        let local = self.local(c);
        let d = self.lease;
        let target = call.target.clone();
        match kind {
            Kind::Open { .. } => {
                let sid = SessionId::parse(&format!("{:032x}", self.rng.random::<u128>()))
                    .unwrap_or_else(|_| SessionId::from_u64(id));
                let sess = self.next_label;
                self.next_label += 1;
                let node = self.rng.random_range(0..self.nodes.len());
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::Open;
                    call.target = Some(Target { id: sid.clone(), sess, node });
                }
                self.script(id, node, Script::OpenSession { sid, sess, d });
            }
            Kind::KeepAlive { .. } => {
                let Some(t) = target else { return };
                let dropped: Vec<Name> =
                    self.book(id).map(|b| std::mem::take(&mut b.drop).into_iter().collect()).unwrap_or_default();
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::KaSession { started: local, dropped: dropped.clone() };
                }
                self.script(id, t.node, Script::KeepAliveSession { sid: t.id, sess: t.sess, d, drop: dropped });
            }
            Kind::Acquire { name, .. } => {
                let Some(t) = target else { return };
                let name = self.names[name].clone();
                if let Some(b) = self.book(id) {
                    *b.inflight.entry(name.clone()).or_insert(0) += 1;
                }
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::AcqSession { name: name.clone(), sent: local };
                }
                self.script(id, t.node, Script::AcquireSession { sid: t.id, sess: t.sess, name });
            }
            Kind::Release { name, token } => {
                let Some(t) = target else { return };
                let name = self.names[name].clone();
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::Rel { name: name.clone(), token, phase: 0 };
                }
                self.script(id, t.node, Script::IndexRemove { sid: t.id, names: vec![name] });
            }
            Kind::Close => {
                let Some(t) = target else { return };
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::Close { phase: 0, list: VecDeque::new() };
                }
                self.script(id, t.node, Script::CloseBegin { sid: t.id, sess: t.sess });
            }
            // Groups, push and elections run on the memory backend only; the call fails at its deadline.
            Kind::Join { .. }
            | Kind::Rejoin { .. }
            | Kind::Leave { .. }
            | Kind::Members { .. }
            | Kind::Holder { .. }
            | Kind::Watch { .. } => {}
        }
    }

    fn guard_done(&mut self, id: u64, name: &Name) {
        let Some(call) = self.calls.get(&id) else { return };
        let local = self.local(call.c);
        if let Some(b) = self.book(id) {
            if let Some(n) = b.inflight.get_mut(name) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    b.inflight.remove(name);
                }
            }
            b.finished.insert(name.clone(), local);
        }
    }

    fn stub_reply(&mut self, id: u64, r: ScriptReply) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        if matches!(r, ScriptReply::Error) {
            self.stub_deadline(id);
            return;
        }
        let c = call.c;
        let local = self.clients[c].clock.local(self.now);
        let target = call.target.clone();
        let stub = std::mem::replace(&mut call.stub, Stub::Mem);
        match (stub, r) {
            (Stub::Open, ScriptReply::Opened { remaining }) => {
                if let Some(t) = target {
                    let res = Res::Opened {
                        id: t.id,
                        sess: t.sess,
                        node: t.node,
                        remaining: Duration::from_nanos(remaining),
                    };
                    self.complete(id, res);
                }
            }
            (Stub::KaSession { .. }, ScriptReply::Gone) => {
                if let Some(b) = self.book(id) {
                    *b = Book::default();
                }
                self.complete(id, Res::Gone);
            }
            (Stub::KaSession { started, .. }, ScriptReply::Session { remaining, leases }) => {
                let lease = self.lease;
                let abandoned = match self.book(id) {
                    Some(b) => {
                        b.finished.retain(|_, t| *t + 2 * lease >= started);
                        b.live_abandoned(local)
                    }
                    None => Vec::new(),
                };
                let mut work: VecDeque<Work> =
                    leases.into_iter().filter(|n| !abandoned.iter().any(|(a, _)| a == n)).map(Work::Renew).collect();
                work.extend(abandoned.into_iter().map(|(n, t)| Work::Release(n, t)));
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub =
                        Stub::KaFollow { started, returned: local, remaining, work, cur: None, owned: Vec::new() };
                }
                self.next_work(id);
            }
            (
                Stub::KaFollow { started, returned, remaining, work, cur, mut owned },
                ScriptReply::Renewed { tokens },
            ) => {
                if let Some(Work::Renew(name)) = &cur {
                    let token = tokens.first().copied().flatten();
                    if let Some(b) = self.book(id) {
                        b.failing.remove(name);
                        match token {
                            Some(t) => owned.push((name.clone(), t)),
                            None => {
                                if !b.touched_since(name, started) {
                                    b.drop.insert(name.clone());
                                }
                            }
                        }
                    }
                }
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::KaFollow { started, returned, remaining, work, cur: None, owned };
                }
                self.next_work(id);
            }
            (Stub::AcqSession { name, .. }, ScriptReply::Gone) => {
                self.guard_done(id, &name);
                self.complete(id, Res::Gone);
            }
            (Stub::AcqSession { name, sent }, ScriptReply::SessionOk { remaining: pttl, d }) => {
                if local - sent >= pttl {
                    // No lease call is sent: the session may be dead by now.
                    self.guard_done(id, &name);
                    self.complete(id, Res::Failed);
                    return;
                }
                let delay = self.stall();
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::AcqLease { name, sent, pttl, d, due: true };
                    call.step += 1;
                    let (c, step) = (call.c, call.step);
                    self.push(self.now + delay, Ev::StubNext { c, call: id, step });
                }
            }
            (Stub::AcqLease { name, .. }, ScriptReply::LeaseBusy) => {
                let alone = self.book(id).is_some_and(|b| b.inflight.get(&name).copied().unwrap_or(0) <= 1);
                if alone {
                    if let Some(t) = target.clone() {
                        self.script_detached(c, t.node, Script::IndexRemove { sid: t.id, names: vec![name.clone()] });
                    }
                }
                self.guard_done(id, &name);
                self.complete(id, Res::Busy);
            }
            (Stub::AcqLease { name, sent, pttl, d, .. }, ScriptReply::LeaseOk { token, new }) => {
                if local - sent >= pttl {
                    // Returned later than the session's remaining: release the term it started
                    // (with the proposed fix: unless another acquire already reported that term).
                    let reported =
                        self.sc.proposed_fix && self.book(id).is_some_and(|b| b.reported.get(&name) == Some(&token));
                    if new && !reported {
                        if let Some(b) = self.book(id) {
                            b.abandoned.insert(name.clone(), (token, local + d));
                        }
                        if let Some(t) = target {
                            let node = self.name_node[self.names.iter().position(|n| *n == name).unwrap_or(0)];
                            let leases = vec![(name.clone(), Some(token))];
                            self.script_detached(c, node, Script::ReleaseSlot { sid: t.id, sess: t.sess, leases });
                        }
                    }
                    self.guard_done(id, &name);
                    self.complete(id, Res::Failed);
                    return;
                }
                let fix = self.sc.proposed_fix;
                let mut refused = false;
                if let Some(b) = self.book(id) {
                    if fix && b.abandoned.get(&name).is_some_and(|(t, _)| *t == token) {
                        // Proposed backend rule: a term this session abandoned (its release may
                        // still be on its way) is never reported acquired; renewals release it.
                        refused = true;
                    } else {
                        b.abandoned.remove(&name);
                        b.reported.insert(name.clone(), token);
                    }
                }
                self.guard_done(id, &name);
                let res =
                    if refused { Res::Failed } else { Res::Acquired { token, remaining: Duration::from_nanos(pttl) } };
                self.complete(id, res);
            }
            (Stub::Rel { name, token, phase: 0 }, ScriptReply::Done) => {
                let Some(t) = target else { return };
                let node = self.node_of(&name);
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::Rel { name: name.clone(), token, phase: 1 };
                }
                let leases = vec![(name, token)];
                self.script(id, node, Script::ReleaseSlot { sid: t.id, sess: t.sess, leases });
            }
            (Stub::Rel { name, .. }, ScriptReply::Done) => {
                if let Some(b) = self.book(id) {
                    b.abandoned.remove(&name);
                }
                self.complete(id, Res::Done);
            }
            (Stub::Close { phase: 0, .. }, ScriptReply::Index { leases }) => {
                let mut list: VecDeque<(Name, Option<Token>)> = leases.into_iter().map(|n| (n, None)).collect();
                let abandoned: Vec<(Name, Token)> = self
                    .book(id)
                    .map(|b| b.abandoned.iter().map(|(n, (t, _))| (n.clone(), *t)).collect())
                    .unwrap_or_default();
                for (n, t) in abandoned {
                    if !list.iter().any(|(m, _)| *m == n) {
                        list.push_back((n, Some(t)));
                    }
                }
                self.close_next(id, list);
            }
            (Stub::Close { phase: 1, list }, ScriptReply::Done) => self.close_next(id, list),
            (Stub::Close { phase: 2, .. }, ScriptReply::Done) => {
                if let Some(b) = self.book(id) {
                    *b = Book::default();
                }
                self.complete(id, Res::Done);
            }
            (stub, _) => {
                // An unexpected reply: the call fails.
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = stub;
                }
                self.stub_deadline(id);
            }
        }
    }

    fn node_of(&self, name: &Name) -> usize {
        self.names.iter().position(|n| n == name).map_or(0, |k| self.name_node[k])
    }

    fn close_next(&mut self, id: u64, mut list: VecDeque<(Name, Option<Token>)>) {
        let Some(t) = self.calls.get(&id).and_then(|c| c.target.clone()) else { return };
        match list.pop_front() {
            Some((name, token)) => {
                let node = self.node_of(&name);
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::Close { phase: 1, list };
                }
                self.script(id, node, Script::ReleaseSlot { sid: t.id, sess: t.sess, leases: vec![(name, token)] });
            }
            None => {
                if let Some(call) = self.calls.get_mut(&id) {
                    call.stub = Stub::Close { phase: 2, list };
                }
                self.script(id, t.node, Script::CloseEnd { sid: t.id });
            }
        }
    }

    /// Takes the next renewal follow-up (after a possible client-side stall), or completes.
    fn next_work(&mut self, id: u64) {
        let delay = self.stall();
        let Some(call) = self.calls.get_mut(&id) else { return };
        let Stub::KaFollow { work, remaining, owned, .. } = &mut call.stub else { return };
        if work.is_empty() {
            // The cluster model has no groups (memberships are simulated on the memory backend).
            let res = Res::Alive {
                remaining: Duration::from_nanos(*remaining),
                owned: std::mem::take(owned),
                groups: Vec::new(),
            };
            self.complete(id, res);
            return;
        }
        call.step += 1;
        let (c, step) = (call.c, call.step);
        self.push(self.now + delay, Ev::StubNext { c, call: id, step });
    }

    fn fail_work(&mut self, id: u64, w: &Work) {
        let Some(call) = self.calls.get(&id) else { return };
        let local = self.local(call.c);
        let lease = self.lease;
        if let (Work::Renew(name), Some(b)) = (w, self.book(id)) {
            let since = *b.failing.entry(name.clone()).or_insert(local);
            if local - since >= lease {
                b.failing.remove(name);
                b.drop.insert(name.clone());
            }
        }
    }

    fn stub_next(&mut self, id: u64) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        let c = call.c;
        let local = self.clients[c].clock.local(self.now);
        let Some(t) = call.target.clone() else { return };
        match &mut call.stub {
            Stub::AcqLease { name, due, d, .. } if *due => {
                *due = false;
                let (name, d) = (name.clone(), *d);
                let node = self.node_of(&name);
                self.script(id, node, Script::AcquireLease { sid: t.id, sess: t.sess, name, d });
            }
            Stub::KaFollow { returned, remaining, work, cur, .. } => {
                let Some(w) = work.pop_front() else { return };
                let elapsed = local - *returned;
                if elapsed >= *remaining {
                    // Not sent: the session may be dead by now.
                    self.fail_work(id, &w);
                    self.next_work(id);
                    return;
                }
                let carry = *remaining - elapsed;
                *cur = Some(w.clone());
                let script = match w {
                    Work::Renew(name) => {
                        let node = self.node_of(&name);
                        (
                            node,
                            Script::RenewSlot {
                                sid: t.id,
                                sess: t.sess,
                                carry,
                                renew: vec![name],
                                release: Vec::new(),
                            },
                        )
                    }
                    Work::Release(name, token) => {
                        let node = self.node_of(&name);
                        (
                            node,
                            Script::RenewSlot {
                                sid: t.id,
                                sess: t.sess,
                                carry,
                                renew: Vec::new(),
                                release: vec![(name, token)],
                            },
                        )
                    }
                };
                self.script(id, script.0, script.1);
            }
            _ => {}
        }
    }

    /// The call's deadline passed (or it got an unusable reply).
    fn stub_deadline(&mut self, id: u64) {
        let Some(call) = self.calls.get_mut(&id) else { return };
        let stub = std::mem::replace(&mut call.stub, Stub::Mem);
        match stub {
            Stub::KaSession { dropped, .. } => {
                if let Some(b) = self.book(id) {
                    b.drop.extend(dropped);
                }
                self.complete(id, Res::Failed);
            }
            Stub::KaFollow { mut work, cur, remaining, owned, .. } => {
                // Every follow-up not answered by now fails; the renewal reports what it confirmed.
                let mut failed: Vec<Work> = cur.into_iter().collect();
                failed.extend(work.drain(..));
                for w in &failed {
                    self.fail_work(id, w);
                }
                let groups = Vec::new(); // no groups in the cluster model
                self.complete(id, Res::Alive { remaining: Duration::from_nanos(remaining), owned, groups });
            }
            Stub::AcqSession { name, .. } | Stub::AcqLease { name, .. } => {
                self.guard_done(id, &name);
                self.complete(id, Res::Failed);
            }
            _ => self.complete(id, Res::Failed),
        }
    }
}
