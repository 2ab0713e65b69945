//! The simulated Redis Cluster: three masters ([`Node`]s, slots split as `redis-cli --cluster
//! create` does), each with its own clock (a per-seed offset and rate within the sessions'
//! drift), behind [`RedisScripting`] — the port the shipped backend (`backends/redis/cluster.rs`)
//! runs every script through. Each call's fate is drawn from the execution's seeded source:
//! complete; request lost (no effect); stalled (takes effect later, before the deadline); **slow
//! reply** (takes effect at once, its reply arrives later, before the deadline: a slow path back
//! from one node, so the next script of the same operation goes out late); reply lost (took
//! effect); **late delivery** (the call fails at its deadline and the script lands on
//! its node later, at a seeded virtual instant, when the clock driver [`pump`](SimCluster::pump)s);
//! and one node partitioned per seed for a while (its calls fail at once).
//!
//! History: each script is applied under the history lock, and what it changed on its node
//! ([`record`](super::record)) becomes the sim's [`Event`]s, so the checker sees the backend's
//! grants, releases, renewals, expiries and memberships in one total order.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::{Cmd, ConnectionInfo, Value};

use super::keyspace::Reply;
use super::node::Node;
use super::record::{self, PendingRead};
use crate::backends::redis::port::ScriptCall;
use crate::backends::redis::scripts::LuaScript;
use crate::backends::redis::{slot_of, RedisScripting};
use crate::error::{Error, ErrorKind, Result};
use crate::sim::history::{ms as ns, Event};
use crate::sim::shipped::backend::{below, sleep_unless, unit, HistState, History};
use crate::sync::thread::{self, ThreadId};
use crate::sync::{self, Mutex};
use crate::types::Name;

/// The simulated nodes' clocks start here (µs since the Unix epoch, 2025-06-15), plus each node's
/// offset.
pub(crate) const EPOCH_US: i64 = 1_750_000_000_000_000;

/// Masters of the simulated cluster.
pub(crate) const MASTERS: usize = 3;

/// Per-call fault probabilities and the partition of one run (drawn per seed).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct ClusterFaults {
    /// The request is lost: no effect, `Unavailable`.
    pub(crate) fail: f64,
    /// The script takes effect after a stall, before the caller's deadline.
    pub(crate) stall: f64,
    /// The script takes effect, its reply is lost.
    pub(crate) lost_reply: f64,
    /// The script takes effect at once, its reply arrives later (before the caller's deadline).
    pub(crate) slow_reply: f64,
    /// The script lands after the caller's deadline (the call fails at its deadline).
    pub(crate) late: f64,
    /// One node is unreachable between these virtual instants (ns since the run started).
    pub(crate) partition: Option<(usize, u64, u64)>,
}

/// One node's clock: `b = offset + rate · t` (ns; `t` is the clients' real time).
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeClock {
    pub(crate) offset_ns: u64,
    pub(crate) rate: f64,
}

impl NodeClock {
    /// The node clock (µs since the Unix epoch) at real instant `t` (ns).
    fn us(&self, t: u64) -> i64 {
        EPOCH_US + ((self.offset_ns as f64 + t as f64 * self.rate) / 1000.0) as i64
    }
}

/// A script that will land after its caller gave up.
#[derive(Debug)]
struct Late {
    at: u64,
    /// When its call was made (real ns; its [`Event::CallFault`] is recorded when it lands).
    from: u64,
    node: usize,
    name: &'static str,
    code: String,
    keys: Vec<String>,
    args: Vec<String>,
    /// The `members` read this call was part of (its caller got an error): recorded as
    /// [`Event::MembersReadFailed`] when the script lands.
    read: Option<Name>,
}

#[derive(Debug, Clone, Copy)]
enum Fate {
    Complete,
    Fail { at_deadline: bool },
    Partitioned,
    Stall,
    SlowReply,
    LostReply { at_deadline: bool },
    Late,
}

/// The simulated cluster (see the module docs).
#[derive(Debug)]
pub(crate) struct SimCluster {
    hist: Arc<History>,
    nodes: Mutex<Vec<Node>>,
    clocks: Vec<NodeClock>,
    faults: ClusterFaults,
    query_timeout: Duration,
    late: Mutex<Vec<Late>>,
    quiet: AtomicBool,
    /// Per thread: its `members` read in progress (see [`record::follow_read`]).
    reads: Mutex<HashMap<ThreadId, PendingRead>>,
}

/// The master of `slot` (0–5460, 5461–10922, 10923–16383).
pub(crate) fn node_of_slot(slot: u16) -> usize {
    match slot {
        0..=5460 => 0,
        5461..=10922 => 1,
        _ => 2,
    }
}

/// The master of `key`'s slot.
pub(crate) fn node_of(key: &str) -> usize {
    node_of_slot(slot_of(key.as_bytes()))
}

fn to_value(r: Reply, script: &str) -> Result<Value> {
    r.into_value().map_err(|e| Error::backend(format!("redis script {script} (simulated node): {e}")))
}

impl SimCluster {
    pub(crate) fn new(
        hist: Arc<History>,
        clocks: Vec<NodeClock>,
        faults: ClusterFaults,
        query_timeout: Duration,
    ) -> SimCluster {
        let t = hist.t();
        let nodes = clocks
            .iter()
            .enumerate()
            .map(|(i, c)| match Node::in_cluster(c.us(t), move |key| node_of_slot(slot_of(key)) == i) {
                Ok(n) => n,
                Err(e) => panic!("cannot set up a simulated node's Lua interpreter: {e}"),
            })
            .collect();
        SimCluster {
            hist,
            nodes: Mutex::new(nodes),
            clocks,
            faults,
            query_timeout,
            late: Mutex::new(Vec::new()),
            quiet: AtomicBool::new(false),
            reads: Mutex::new(HashMap::new()),
        }
    }

    /// From now on every call completes at once and nothing more lands late (the run's teardown).
    pub(crate) fn quiet(&self) {
        self.quiet.store(true, Ordering::SeqCst);
        self.late.lock().clear();
    }

    fn draw(&self, node: usize) -> Fate {
        if self.quiet.load(Ordering::SeqCst) {
            return Fate::Complete;
        }
        let f = self.faults;
        let t = self.hist.t();
        if f.partition.is_some_and(|(n, a, b)| n == node && (a..b).contains(&t)) {
            return Fate::Partitioned;
        }
        let x = unit();
        let mut acc = f.fail;
        if x < acc {
            return Fate::Fail { at_deadline: unit() < 0.5 };
        }
        acc += f.stall;
        if x < acc {
            return Fate::Stall;
        }
        acc += f.lost_reply;
        if x < acc {
            return Fate::LostReply { at_deadline: unit() < 0.5 };
        }
        acc += f.slow_reply;
        if x < acc {
            return Fate::SlowReply;
        }
        acc += f.late;
        if x < acc {
            return Fate::Late;
        }
        Fate::Complete
    }

    /// Applies `script` on `node` now, under the history lock, recording its effects.
    fn apply(
        &self,
        h: &mut HistState,
        node: usize,
        (name, code): (&str, &str),
        keys: &[String],
        args: &[String],
        replied: bool,
    ) -> Reply {
        let t = self.hist.t();
        let mut nodes = self.nodes.lock();
        for (n, c) in nodes.iter_mut().zip(&self.clocks) {
            n.set_now_us(c.us(t));
        }
        let touched = record::touched(name, keys, args);
        let before = record::Snapshot::take(&nodes, node, &touched);
        let reply = nodes[node].eval(code, keys, args);
        if let Reply::Error(e) = &reply {
            // The shipped scripts never fail on the data the backend writes: a failure here is a
            // script using a command (or a form of one) the simulated node does not have, or a
            // broken bridge. Fail the run loudly.
            panic!("simulated redis node {node}: script {name} failed: {e}");
        }
        let after = record::Snapshot::take(&nodes, node, &touched);
        record::effects(h, &self.hist, &nodes, node, name, keys, args, &reply, &before, &after);
        if replied {
            let tid = thread::current().id();
            let mut reads = self.reads.lock();
            let mut pending = reads.remove(&tid);
            record::follow_read(h, &self.hist, &nodes, node, &mut pending, name, keys, &reply);
            if let Some(p) = pending {
                reads.insert(tid, p);
            }
        }
        reply
    }

    fn wait_until(&self, deadline: Instant) {
        let left = deadline.saturating_duration_since(sync::now());
        sleep_unless(left, &self.quiet);
    }

    /// Lands the late scripts that are due (the clock driver calls it after each step, holding the
    /// history lock).
    pub(crate) fn pump(&self, h: &mut HistState) {
        let t = self.hist.t();
        let due: Vec<Late> = {
            let mut late = self.late.lock();
            let (due, keep) = std::mem::take(&mut *late).into_iter().partition(|l| l.at <= t);
            *late = keep;
            due
        };
        for l in due {
            h.counts.late_deliveries += 1;
            fault(h, &self.hist, (l.name, &l.keys, &l.args), "late-landed", l.from, t);
            if let Some(group) = l.read {
                self.hist.push(h, Event::MembersReadFailed { group });
            }
            self.apply(h, l.node, (l.name, &l.code), &l.keys, &l.args, false);
        }
    }

    /// `eval` once its fate is drawn. `read`: the `members` read the call is part of, when its
    /// fate fails it, recorded as [`Event::MembersReadFailed`] under the history lock the fault
    /// takes anyway (or when a late script lands): no scheduling point is added, so the seeds'
    /// schedules stay those of the model before the event existed.
    #[allow(clippy::too_many_arguments)]
    fn eval_with(
        &self,
        fate: Fate,
        node: usize,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        deadline: Instant,
        (t0, end): (u64, u64),
        read: Option<Name>,
    ) -> Result<Value> {
        let which = (script.name(), script.code());
        let read_failed = |h: &mut HistState| {
            if let Some(group) = read.clone() {
                self.hist.push(h, Event::MembersReadFailed { group });
            }
        };
        match fate {
            Fate::Complete => {
                let r = {
                    let mut h = self.hist.lock();
                    h.counts.completed += 1;
                    self.apply(&mut h, node, which, keys, args, true)
                };
                to_value(r, script.name())
            }
            Fate::Partitioned => {
                let mut h = self.hist.lock();
                h.counts.partitioned += 1;
                let t = self.hist.t();
                fault(&mut h, &self.hist, (script.name(), keys, args), "partitioned", t0, t);
                read_failed(&mut h);
                drop(h);
                Err(Error::new(ErrorKind::Unavailable, format!("simulated: node {node} is partitioned away")))
            }
            Fate::Fail { at_deadline } => {
                let mut h = self.hist.lock();
                h.counts.failed += 1;
                let t = self.hist.t();
                let until = if at_deadline { end.max(t) } else { t };
                fault(&mut h, &self.hist, (script.name(), keys, args), "failed", t0, until);
                read_failed(&mut h);
                drop(h);
                if at_deadline {
                    self.wait_until(deadline);
                    return Err(self.timed_out(script, "the request was lost; timed out"));
                }
                Err(self.timed_out(script, "the request was lost (connection reset)"))
            }
            Fate::Stall => {
                // Takes effect, and replies, before the deadline.
                let left = deadline.saturating_duration_since(sync::now());
                sleep_unless(below(left), &self.quiet);
                let r = {
                    let mut h = self.hist.lock();
                    h.counts.stalled += 1;
                    let t = self.hist.t();
                    fault(&mut h, &self.hist, (script.name(), keys, args), "stalled", t0, t);
                    self.apply(&mut h, node, which, keys, args, true)
                };
                to_value(r, script.name())
            }
            Fate::SlowReply => {
                // Takes effect now; the reply reaches the caller later, before the deadline.
                let r = {
                    let mut h = self.hist.lock();
                    h.counts.slow_replies += 1;
                    let t = self.hist.t();
                    fault(&mut h, &self.hist, (script.name(), keys, args), "slow-reply", t0, end.max(t));
                    self.apply(&mut h, node, which, keys, args, true)
                };
                let left = deadline.saturating_duration_since(sync::now());
                sleep_unless(below(left), &self.quiet);
                to_value(r, script.name())
            }
            Fate::LostReply { at_deadline } => {
                {
                    let mut h = self.hist.lock();
                    h.counts.lost_replies += 1;
                    let t = self.hist.t();
                    let until = if at_deadline { end.max(t) } else { t };
                    fault(&mut h, &self.hist, (script.name(), keys, args), "lost-reply", t0, until);
                    read_failed(&mut h);
                    self.apply(&mut h, node, which, keys, args, false);
                }
                if at_deadline {
                    self.wait_until(deadline);
                    return Err(self.timed_out(script, "took effect, its reply was lost; timed out"));
                }
                Err(self.timed_out(script, "took effect, the connection broke before its reply"))
            }
            Fate::Late => {
                let at = end + ns(below(self.query_timeout * 2));
                let late = Late {
                    at,
                    from: t0,
                    node,
                    name: script.name(),
                    code: script.code().into(),
                    keys: keys.to_vec(),
                    args: args.to_vec(),
                    read,
                };
                self.late.lock().push(late);
                self.wait_until(deadline);
                Err(self.timed_out(script, "no reply by the deadline (the script lands later)"))
            }
        }
    }

    fn timed_out(&self, script: &LuaScript, what: &str) -> Error {
        Error::new(ErrorKind::Unavailable, format!("redis script {} (simulated): {what}", script.name()))
    }
}

impl RedisScripting for SimCluster {
    fn is_clustered(&self) -> bool {
        true
    }

    fn group_by_node(&self, slots: &[u16], _deadline: Instant) -> Vec<Vec<usize>> {
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, slot) in slots.iter().enumerate() {
            let node = node_of_slot(*slot);
            match groups.iter_mut().find(|(n, _)| *n == node) {
                Some((_, g)) => g.push(i),
                None => groups.push((node, vec![i])),
            }
        }
        groups.into_iter().map(|(_, g)| g).collect()
    }

    fn eval(&self, script: &LuaScript, keys: &[String], args: &[String], deadline: Instant) -> Result<Value> {
        let Some(first) = keys.first() else {
            return Err(Error::backend(format!("redis cluster: script {} called without keys", script.name())));
        };
        let slot = slot_of(first.as_bytes());
        if let Some(other) = keys.iter().find(|k| slot_of(k.as_bytes()) != slot) {
            return Err(Error::backend(format!(
                "redis cluster: CROSSSLOT script {} would span slots ({first} and {other})",
                script.name()
            )));
        }
        let node = node_of_slot(slot);
        let fate = self.draw(node);
        // The call's start and its caller's deadline (real ns): a fault spans the call from its
        // start, and one that makes the caller wait is over for it at the deadline.
        let (t0, end) = (self.hist.t(), ns(deadline.saturating_duration_since(self.hist.base)));
        // The caller sees no reply: a `members` read it was making (from its `group_live` on)
        // fails.
        let failed_read = if matches!(fate, Fate::Complete | Fate::Stall | Fate::SlowReply) {
            None
        } else {
            let pending = self.reads.lock().remove(&thread::current().id());
            match pending {
                Some(p) => Some(p.group().clone()),
                None if script.name() == "group_live" => record::group_of(first),
                None => None,
            }
        };
        self.eval_with(fate, node, script, keys, args, deadline, (t0, end), failed_read)
    }

    fn eval_each<'a>(
        &self,
        count: usize,
        call: &mut dyn FnMut(usize) -> Result<ScriptCall<'a>>,
        deadline: Instant,
    ) -> Vec<Result<Value>> {
        // As the real Cluster port: every call is built first, then sent, each node's calls as
        // one pipeline (in order) and the nodes' pipelines at the same time, so calls on
        // different nodes take effect in any order: the seed picks one.
        let calls: Vec<Result<ScriptCall<'a>>> = (0..count).map(&mut *call).collect();
        let node = |c: &Result<ScriptCall<'a>>| match c {
            Ok(c) => c.keys.first().map(|k| node_of_slot(slot_of(k.as_bytes()))),
            Err(_) => None,
        };
        let mut queues: Vec<(Option<usize>, Vec<usize>)> = Vec::new();
        for (i, c) in calls.iter().enumerate() {
            let n = node(c);
            match queues.iter_mut().find(|(m, _)| n.is_some() && *m == n) {
                Some((_, q)) => q.push(i),
                None => queues.push((n, vec![i])),
            }
        }
        let mut out: Vec<Option<Result<Value>>> = (0..count).map(|_| None).collect();
        let mut calls: Vec<Option<Result<ScriptCall<'a>>>> = calls.into_iter().map(Some).collect();
        while !queues.is_empty() {
            let q = usize::try_from(sync::random_below(queues.len() as u64)).unwrap_or(0);
            let i = queues[q].1.remove(0);
            if queues[q].1.is_empty() {
                queues.remove(q);
            }
            out[i] = calls[i].take().map(|c| c.and_then(|c| self.eval(c.script, &c.keys, &c.args, deadline)));
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::backend("simulated: a batched call was lost"))))
            .collect()
    }

    fn on_masters(&self, cmd: &Cmd, _deadline: Instant) -> Result<Vec<(String, Value)>> {
        let words: Vec<String> = cmd
            .args_iter()
            .filter_map(|a| match a {
                redis::Arg::Simple(b) => Some(String::from_utf8_lossy(b).to_ascii_uppercase()),
                _ => None,
            })
            .collect();
        let reply = match words.iter().map(String::as_str).collect::<Vec<_>>().as_slice() {
            ["PING"] => Value::SimpleString("PONG".into()),
            ["CONFIG", "GET", "MAXMEMORY-POLICY"] => Value::Array(vec![
                Value::BulkString(b"maxmemory-policy".to_vec()),
                Value::BulkString(b"noeviction".to_vec()),
            ]),
            other => return Err(Error::backend(format!("simulated redis: {other:?} is not simulated"))),
        };
        Ok((0..MASTERS).map(|n| (format!("sim-node-{n}"), reply.clone())).collect())
    }

    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo> {
        // No pub/sub in the simulation: the backend reports no push and candidates poll.
        Vec::new()
    }

    fn target(&self) -> String {
        "sim+cluster://3-masters".into()
    }
}

/// Scripts that read only (the `members`, `holder` and `leader` reads, a session's info) or
/// open a session: their faults cost no session anything it holds, so none is recorded.
const FAULTLESS: [&str; 6] = ["group_live", "holder", "lease_info", "members", "session_info", "open_session"];

/// Records an [`Event::CallFault`] of the script `name` with `keys` and `args`, from `from` to
/// `until` (real ns), for every session it names — a key or argument that is a known session's id,
/// or a key whose hash tag is — or, when it names none, for every session (`sess: None`). A
/// read-only script or an open records nothing ([`FAULTLESS`]).
fn fault(
    h: &mut HistState,
    hist: &History,
    (name, keys, args): (&'static str, &[String], &[String]),
    what: &'static str,
    from: u64,
    until: u64,
) {
    if FAULTLESS.iter().any(|n| name.trim_end_matches(".lua") == *n) {
        return;
    }
    let known = |s: &str| crate::types::SessionId::parse(s).ok().and_then(|id| h.labels.get(&id).copied());
    let tag = |k: &str| k.split_once('{').and_then(|(_, r)| r.split_once('}')).map(|(t, _)| t.to_string());
    let mut sessions: Vec<u32> = keys
        .iter()
        .filter_map(|k| tag(k).and_then(|t| known(&t)).or_else(|| known(k)))
        .chain(args.iter().filter_map(|a| known(a)))
        .collect();
    sessions.sort_unstable();
    sessions.dedup();
    if sessions.is_empty() {
        hist.push(h, Event::CallFault { sess: None, what, from, until });
    }
    for sess in sessions {
        hist.push(h, Event::CallFault { sess: Some(sess), what, from, until });
    }
}

/// A seed's clocks: offsets up to 10 s, rates within ±4 % (inside the sessions' 5 % drift).
pub(crate) fn draw_clocks() -> Vec<NodeClock> {
    (0..MASTERS)
        .map(|_| NodeClock { offset_ns: ns(below(Duration::from_secs(10))), rate: 1.0 + (unit() - 0.5) * 0.08 })
        .collect()
}

/// Records the seed's partition as its outage (the invariants that allow for one take it).
pub(crate) fn record_setup(h: &mut HistState, hist: &History, clients: usize, clocks: &[NodeClock], f: &ClusterFaults) {
    let node_ppm = clocks.iter().map(|c| ((c.rate - 1.0) * 1e6) as i64).collect();
    hist.push(h, Event::Setup { client_ppm: vec![0; clients], node_ppm });
    if let Some((_, from, until)) = f.partition {
        hist.push(h, Event::Outage { from, until });
    }
}
