//! Redis Cluster routing over plain connections, every step bounded by the call's one deadline.
//!
//! The driver's sync cluster connection cannot bound a call: a fresh one connects to and PINGs
//! node after node, and a `MOVED` or a broken connection makes it re-read the slot map and
//! re-check every node, each step with a fixed per-node timeout whatever the caller's deadline.
//! This router does the same work itself so that every blocking step (waiting for a pooled
//! connection, connecting, writing, reading) gets only the time left before the deadline:
//!
//! * a slot map read with `CLUSTER SLOTS`, re-read on the first call after a failure or a
//!   `MOVED` (with a stale map, the re-read gets at most half the time left, and the call falls
//!   back to the stale map when it fails);
//! * one small pool of plain connections per node (at most `max_connections` each, each connection
//!   reused for at most `max_connection_lifetime`);
//! * `MOVED` and `ASK` redirects followed within the same call (at most [`MAX_REDIRECTS`]);
//! * a connect gets a quarter of the time left (redis-rs applies its connect timeout to the TCP
//!   connect and again to each of up to four setup replies), and before every command the
//!   socket's read and write timeouts are set to the time left.
//!
//! So a call returns by its deadline (plus the driver's own bookkeeping) however many nodes hang.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::{Client, Cmd, ConnectionAddr, ConnectionInfo, ConnectionLike, RedisError, Value};

use super::conn::Conn;
use super::pool::{Pool, PoolLimits, Pooled};
use super::port::{connect, map_err, must_discard, retry_on_fresh};
use crate::error::{Error, ErrorKind, Result};

/// Redirects one call follows before it gives up (a slot moving twice while one call runs is
/// already unusual; more means the nodes disagree and the call fails `Unavailable`).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// A node that failed less than this long ago is asked for the slot map only after the others.
const SUSPECT_FOR: Duration = Duration::from_secs(30);

/// How long [`Router::pipelined`] still waits, past a small batch's deadline, for the replies of a
/// node whose read starts late: replies already in are read at once (a few microseconds each).
/// A node that does not answer, read first, takes the whole deadline (and its socket timeout
/// ends in whole kernel ticks, seen here up to ~35 ms late): without this the nodes
/// read after it would fail although their replies arrived long before.
const DRAIN: Duration = Duration::from_millis(2);

/// The hash slot of `key` (CRC16-XMODEM of its hash tag, or of the whole key, modulo 16384).
pub(crate) fn slot_of(key: &[u8]) -> u16 {
    let tagged = key.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = &key[open + 1..];
        let close = rest.iter().position(|b| *b == b'}')?;
        (close > 0).then(|| &rest[..close])
    });
    crc16(tagged.unwrap_or(key)) % 16384
}

/// The hash slot of the key `prefix{name}` (as [`slot_of`] of that key, without building it): the
/// name up to its first `}` is the hash tag, unless that is empty.
pub(crate) fn tagged_slot(prefix: &str, name: &str) -> u16 {
    match name.find('}') {
        Some(0) => slot_of(format!("{prefix}{{{name}}}").as_bytes()),
        Some(close) => crc16(&name.as_bytes()[..close]) % 16384,
        None if name.is_empty() => slot_of(format!("{prefix}{{}}").as_bytes()),
        None => crc16(name.as_bytes()) % 16384,
    }
}

/// CRC16-XMODEM, Redis Cluster's key hash.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for b in bytes {
        crc ^= u16::from(*b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc
}

/// The time left before `deadline`, or `Unavailable` when less than a millisecond is left.
pub(crate) fn left(deadline: Instant, what: &str) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        Err(Error::unavailable(format!("{what}: query timeout reached before the call was sent")))
    } else {
        Ok(left)
    }
}

/// Sets the connection's read and write timeouts to the time left, then runs `cmd`; a server
/// error reply (also one nested in an array) is an `Err`.
pub(crate) fn query(con: &mut Conn, cmd: &Cmd, deadline: Instant) -> redis::RedisResult<Value> {
    let t = deadline.saturating_duration_since(Instant::now());
    if t < Duration::from_millis(1) {
        return Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "query timeout reached between two commands of one call",
        )));
    }
    con.write_within(t)?;
    con.read_within(t)?;
    con.req_command(cmd).and_then(Value::extract_error)
}

/// One cluster node: its address as the cluster names it (`host:port`), how to connect to it,
/// and its pool.
pub(crate) struct Node {
    addr: String,
    client: Client,
    pool: Pool<Conn>,
    failed: Mutex<Option<Instant>>,
}

impl Node {
    fn new(addr: String, info: ConnectionInfo, limits: PoolLimits) -> Result<Node> {
        let client = Client::open(info).map_err(|e| map_err(e, format!("redis cluster node {addr}")))?;
        Ok(Node { addr, client, pool: Pool::new(limits), failed: Mutex::new(None) })
    }

    fn suspect(&self, now: Instant) -> bool {
        self.failed.lock().is_some_and(|at| now.saturating_duration_since(at) < SUSPECT_FOR)
    }
}

/// What a call on one node came to.
pub(crate) enum Outcome<T> {
    /// The reply.
    Done(T),
    /// `MOVED` (`asking == false`) or `ASK` to the node at `addr`.
    Redirect { addr: String, asking: bool, error: Error },
}

/// Slot ranges and the master serving each, from `CLUSTER SLOTS`.
#[derive(Debug, Default)]
pub(crate) struct SlotMap {
    /// `(first slot, last slot, master address, replica addresses)`, sorted by first slot.
    ranges: Vec<(u16, u16, String, Vec<String>)>,
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply; nodes announced without a host are on `answering_host`,
    /// nodes announced as `?` are skipped.
    pub(crate) fn parse(v: &Value, answering_host: &str) -> Option<SlotMap> {
        let Value::Array(items) = v else { return None };
        let addr = |node: &Value| -> Option<String> {
            let Value::Array(parts) = node else { return None };
            let host = match parts.first()? {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                Value::Nil => String::new(),
                _ => return None,
            };
            let host = match host.as_str() {
                "?" => return None,
                "" | "0.0.0.0" | "::" => answering_host.to_string(),
                _ => host,
            };
            let Value::Int(port) = parts.get(1)? else { return None };
            let port = u16::try_from(*port).ok().filter(|p| *p > 0)?;
            Some(format!("{host}:{port}"))
        };
        let mut ranges = Vec::with_capacity(items.len());
        for item in items {
            let Value::Array(r) = item else { return None };
            let (Some(Value::Int(start)), Some(Value::Int(end))) = (r.first(), r.get(1)) else { return None };
            let (Ok(start), Ok(end)) = (u16::try_from(*start), u16::try_from(*end)) else { return None };
            if start > end || end >= 16384 {
                return None;
            }
            let Some(master) = r.get(2).and_then(addr) else { continue };
            let replicas = r.iter().skip(3).filter_map(addr).collect();
            ranges.push((start, end, master, replicas));
        }
        ranges.sort_by_key(|r| r.0);
        Some(SlotMap { ranges })
    }

    /// The master serving `slot`.
    pub(crate) fn master(&self, slot: u16) -> Option<&str> {
        let i = self.ranges.partition_point(|r| r.0 <= slot);
        let r = self.ranges.get(i.checked_sub(1)?)?;
        (slot <= r.1).then_some(r.2.as_str())
    }

    /// Every master, once each, in slot order.
    pub(crate) fn masters(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in &self.ranges {
            if !out.contains(&r.2.as_str()) {
                out.push(&r.2);
            }
        }
        out
    }

    /// Every node (masters first), once each.
    pub(crate) fn nodes(&self) -> Vec<&str> {
        let mut out = self.masters();
        for r in &self.ranges {
            for n in &r.3 {
                if !out.contains(&n.as_str()) {
                    out.push(n);
                }
            }
        }
        out
    }
}

struct State {
    map: Option<Arc<SlotMap>>,
    /// The map must be re-read before it is trusted again (a node failed, a slot moved).
    stale: bool,
    nodes: HashMap<String, Arc<Node>>,
}

/// Routes calls to cluster nodes (see the module docs).
pub(crate) struct Router {
    /// The configured nodes, in order, with their addresses.
    seeds: Vec<(String, ConnectionInfo)>,
    limits: PoolLimits,
    state: Mutex<State>,
}

/// `host:port` of a TCP address.
pub(crate) fn addr_of(info: &ConnectionInfo) -> Option<String> {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => Some(format!("{host}:{port}")),
        _ => None,
    }
}

/// How to reach the node the cluster names `addr` (`host:port`): a configured node's own info, or
/// the first configured node's settings (credentials, TLS, protocol) at that address.
pub(crate) fn node_info(seeds: &[(String, ConnectionInfo)], addr: &str) -> Result<ConnectionInfo> {
    if let Some((_, info)) = seeds.iter().find(|(a, _)| a == addr) {
        return Ok(info.clone());
    }
    let (host, port) = addr
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h.trim_start_matches('[').trim_end_matches(']'), p.parse::<u16>().ok()?)))
        .ok_or_else(|| Error::backend(format!("redis cluster announced an invalid node address {addr:?}")))?;
    let template = &seeds.first().ok_or_else(|| Error::config("redis cluster: no node configured"))?.1;
    let addr = match template.addr() {
        ConnectionAddr::TcpTls { insecure, tls_params, .. } => {
            ConnectionAddr::TcpTls { host: host.to_string(), port, insecure: *insecure, tls_params: tls_params.clone() }
        }
        _ => ConnectionAddr::Tcp(host.to_string(), port),
    };
    Ok(template.clone().set_addr(addr))
}

impl Router {
    /// A router for the cluster reachable through `seeds` (TCP addresses). No I/O happens here.
    pub(crate) fn new(seeds: Vec<(String, ConnectionInfo)>, limits: PoolLimits) -> Router {
        Router {
            seeds,
            limits: PoolLimits { max: limits.max.max(1), ..limits },
            state: Mutex::new(State { map: None, stale: true, nodes: HashMap::new() }),
        }
    }

    /// The node at `addr`, made on first use with the first configured node's settings
    /// (credentials, TLS, protocol).
    fn node(&self, addr: &str) -> Result<Arc<Node>> {
        if let Some(n) = self.state.lock().nodes.get(addr) {
            return Ok(n.clone());
        }
        let info = node_info(&self.seeds, addr)?;
        let node = Arc::new(Node::new(addr.to_string(), info, self.limits)?);
        Ok(self.state.lock().nodes.entry(addr.to_string()).or_insert(node).clone())
    }

    /// Marks the slot map for a re-read by the next call.
    pub(crate) fn invalidate(&self) {
        self.state.lock().stale = true;
    }

    /// Runs `f` on a connection to `node`: a pooled one, or a new one made within the time left.
    /// An idle pooled connection the server closed is retried once on a fresh one. A connection
    /// that saw an I/O error or timeout is closed; so does the slot map (the node may have failed
    /// over) until it is re-read.
    pub(crate) fn on_node<T>(
        &self,
        node: &Node,
        deadline: Instant,
        what: &str,
        mut f: impl FnMut(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<Outcome<T>> {
        let mut retried = false;
        loop {
            let mut con = self.checkout(node, deadline, what)?;
            match f(&mut con) {
                Ok(v) => return Ok(Outcome::Done(v)),
                Err(e) => {
                    if retry_on_fresh(con, &e, &mut retried, what, &node.addr) {
                        continue;
                    }
                    return self.judged(node, e, what);
                }
            }
        }
    }

    /// A connection to `node`: a pooled one, or a new one made within the time left.
    fn checkout<'n>(&self, node: &'n Node, deadline: Instant, what: &str) -> Result<Pooled<'n, Conn>> {
        left(deadline, what)?;
        node.pool.get(deadline, &node.addr, |t| {
            connect(&node.client, t, &format!("cannot connect to redis cluster node {}", node.addr))
                .map(Conn::new)
                .inspect_err(|_| self.failed(node))
        })
    }

    fn failed(&self, node: &Node) {
        *node.failed.lock() = Some(Instant::now());
        self.invalidate();
    }

    /// A failed call's outcome on `node`: a redirect, or the error the caller gets (see
    /// [`judge`](Router::judge)).
    fn judged<T>(&self, node: &Node, e: RedisError, what: &str) -> Result<Outcome<T>> {
        match self.judge(node, e, what) {
            Judged::Redirect(addr, asking, error) => Ok(Outcome::Redirect { addr, asking, error }),
            Judged::Fail(e) => Err(e),
        }
    }

    /// Sorts a failed call's error: a redirect, or the error the caller gets (after marking what
    /// the error says about the cluster).
    fn judge(&self, node: &Node, e: RedisError, what: &str) -> Judged {
        use redis::ServerErrorKind as S;
        let kind = e.kind();
        if let redis::ErrorKind::Server(k @ (S::Moved | S::Ask)) = kind {
            let to = e.redirect_node().map(|(addr, _)| addr.to_string());
            let error = map_err(e, format!("redis {what} on {}", node.addr));
            return match to {
                Some(addr) => {
                    if k == S::Moved {
                        self.invalidate();
                    }
                    Judged::Redirect(addr, k == S::Ask, error)
                }
                None => Judged::Fail(error),
            };
        }
        if must_discard(&e) || e.is_connection_refusal() {
            self.failed(node);
        } else if matches!(kind, redis::ErrorKind::Server(S::ClusterDown | S::MasterDown | S::ReadOnly)) {
            self.invalidate();
        }
        Judged::Fail(map_err(e, format!("redis {what} on {}", node.addr)))
    }

    /// Runs `f` on the master of `slot`, following redirects, all before `deadline`. `f` gets the
    /// connection and whether it must send `ASKING` first.
    pub(crate) fn on_slot<T>(
        &self,
        slot: u16,
        deadline: Instant,
        what: &str,
        mut f: impl FnMut(&mut Conn, bool) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut next: Option<(String, bool)> = None;
        let mut hops = 0;
        loop {
            let (addr, asking) = match next.take() {
                Some(redirect) => redirect,
                None => (self.master(slot, deadline, what)?, false),
            };
            let node = self.node(&addr)?;
            match self.on_node(&node, deadline, what, |con| f(con, asking))? {
                Outcome::Done(v) => return Ok(v),
                Outcome::Redirect { addr, asking, error } => {
                    hops += 1;
                    if hops > MAX_REDIRECTS {
                        return Err(Error::unavailable(format!(
                            "redis {what}: slot {slot} was redirected {hops} times within one call; giving up"
                        ))
                        .with_source(error));
                    }
                    log::debug!("redis {what}: slot {slot} redirected from {} to {addr} ({error})", node.addr);
                    next = Some((addr, asking));
                }
            }
        }
    }

    /// Runs one pipeline per master for the calls bound for it: `calls` are `(index, slot)` pairs;
    /// `send` writes the pipeline of the given indices on a connection to their master and `recv`
    /// reads its replies. Every node's pipeline is written before any reply is read, so the nodes
    /// work at the same time and a batch costs about the slowest node's round trip, not their sum.
    /// With `concurrent` each node's pipeline is also written and read on a thread of its own (one
    /// thread per node beyond the first), for batches large enough that reading the replies costs
    /// more than a thread (tens of microseconds). Every step is bounded by `deadline`.
    /// Returns what the pipelines settled: `(index, Ok(reply))`, or for every call of a node whose
    /// pipeline failed the node's error (`Err`). Calls `recv` left unsettled (`None`) and calls
    /// whose node was redirected or unknown are not returned: the caller runs them alone.
    pub(crate) fn pipelined(
        &self,
        calls: &[(usize, u16)],
        deadline: Instant,
        what: &str,
        concurrent: bool,
        send: impl Fn(&mut Conn, &[usize]) -> redis::RedisResult<()> + Sync,
        recv: impl Fn(&mut Conn, &[usize], Instant) -> redis::RedisResult<Vec<Option<Value>>> + Sync,
    ) -> Vec<(usize, Result<Value>)> {
        let Ok(map) = self.map(deadline, what) else { return Vec::new() };
        let (by_node, _) = by_master(&map, calls.iter().copied());
        let one = |addr: &str, idx: &[usize]| -> Vec<(usize, Result<Value>)> {
            let Ok(node) = self.node(addr) else { return Vec::new() };
            let outcome = self.on_node(&node, deadline, what, |con| {
                send(con, idx)?;
                recv(con, idx, deadline)
            });
            settled(idx, outcome)
        };
        if !concurrent {
            return self.written_then_read(&by_node, deadline, what, &send, &recv, &one);
        }
        let Some(((first, first_idx), rest)) = by_node.split_first() else { return Vec::new() };
        std::thread::scope(|scope| {
            // A node whose thread cannot be started runs on this thread, after the others.
            let mut inline = Vec::new();
            let mut threads = Vec::new();
            for (addr, idx) in rest {
                let one = &one;
                match std::thread::Builder::new()
                    .name("simba-redis-pipeline".into())
                    .spawn_scoped(scope, move || one(addr, idx))
                {
                    Ok(t) => threads.push(t),
                    Err(e) => {
                        log::debug!("redis {what}: no thread for the pipeline to {addr} ({e}); running it inline");
                        inline.push((*addr, idx));
                    }
                }
            }
            let mut out = one(first, first_idx);
            for (addr, idx) in inline {
                out.extend(one(addr, idx));
            }
            for t in threads {
                match t.join() {
                    Ok(settled) => out.extend(settled),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            out
        })
    }

    /// The nodes' pipelines of [`pipelined`](Router::pipelined) on this thread: each written
    /// first, then each read. A node whose pipeline could not be written runs alone afterwards
    /// (`one`, with the usual retry on a fresh connection); so does one whose pooled connection
    /// turns out to have been closed by the server.
    fn written_then_read(
        &self,
        by_node: &[(&str, Vec<usize>)],
        deadline: Instant,
        what: &str,
        send: &dyn Fn(&mut Conn, &[usize]) -> redis::RedisResult<()>,
        recv: &dyn Fn(&mut Conn, &[usize], Instant) -> PipelineReplies,
        one: &dyn Fn(&str, &[usize]) -> Settled,
    ) -> Settled {
        let nodes: Vec<_> = by_node.iter().map(|(addr, idx)| (*addr, idx.as_slice(), self.node(addr).ok())).collect();
        let mut out = Vec::new();
        let mut again: Vec<(&str, &[usize])> = Vec::new();
        let mut written = Vec::with_capacity(nodes.len());
        for (addr, idx, node) in &nodes {
            let Some(node) = node else { continue };
            match self.checkout(node, deadline, what) {
                Ok(mut con) => match send(&mut con, idx) {
                    Ok(()) => written.push((node, *idx, con)),
                    Err(e) => {
                        if must_discard(&e) {
                            con.discard();
                        }
                        again.push((addr, idx));
                    }
                },
                Err(e) => out.extend(settled(idx, Err::<Outcome<Vec<Option<Value>>>, _>(e))),
            }
        }
        for (node, idx, mut con) in written {
            let by = deadline.max(Instant::now() + DRAIN);
            match recv(&mut con, idx, by) {
                Ok(replies) => out.extend(settled(idx, Ok(Outcome::Done(replies)))),
                Err(e) => {
                    let mut retried = false;
                    if retry_on_fresh(con, &e, &mut retried, what, &node.addr) {
                        again.push((&node.addr, idx));
                        continue;
                    }
                    out.extend(settled(idx, self.judged(node, e, what)));
                }
            }
        }
        for (addr, idx) in again {
            out.extend(one(addr, idx));
        }
        out
    }
    /// `slots` (slot of call `i` at `i`) grouped by the master that serves them by the current
    /// slot map (re-read first when stale); a slot no master serves, or every slot when the map
    /// cannot be read, is a group of its own.
    pub(crate) fn group_by_node(&self, slots: &[u16], deadline: Instant, what: &str) -> Vec<Vec<usize>> {
        let Ok(map) = self.map(deadline, what) else { return (0..slots.len()).map(|i| vec![i]).collect() };
        let (by_node, unserved) = by_master(&map, slots.iter().copied().enumerate());
        let mut groups: Vec<Vec<usize>> = by_node.into_iter().map(|(_, idx)| idx).collect();
        groups.extend(unserved.into_iter().map(|i| vec![i]));
        groups
    }

    /// Runs `cmd` on every master, before `deadline`: each master's address and reply.
    pub(crate) fn on_masters(&self, cmd: &Cmd, deadline: Instant, what: &str) -> Result<Vec<(String, Value)>> {
        self.on_each_master(deadline, what, |con| query(con, cmd, deadline))
    }

    /// Runs `f` on a connection to every master in turn, before `deadline`: each master's address
    /// and what `f` returned there.
    pub(crate) fn on_each_master<T>(
        &self,
        deadline: Instant,
        what: &str,
        mut f: impl FnMut(&mut Conn) -> redis::RedisResult<T>,
    ) -> Result<Vec<(String, T)>> {
        let map = self.map(deadline, what)?;
        let mut out = Vec::new();
        for addr in map.masters() {
            let node = self.node(addr)?;
            match self.on_node(&node, deadline, what, &mut f)? {
                Outcome::Done(v) => out.push((addr.to_string(), v)),
                Outcome::Redirect { error, .. } => return Err(error),
            }
        }
        if out.is_empty() {
            self.invalidate();
            return Err(Error::unavailable(format!("redis {what}: the cluster reported no master")));
        }
        Ok(out)
    }

    /// The address of the master of `slot` by the current slot map (re-read first when stale).
    fn master(&self, slot: u16, deadline: Instant, what: &str) -> Result<String> {
        let map = self.map(deadline, what)?;
        match map.master(slot) {
            Some(addr) => Ok(addr.to_string()),
            None => {
                self.invalidate();
                Err(Error::unavailable(format!("redis {what}: no master serves slot {slot} (cluster down?)")))
            }
        }
    }

    /// The slot map; re-read when missing (with all the time left) or stale (with at most half of
    /// it, falling back to the stale map).
    fn map(&self, deadline: Instant, what: &str) -> Result<Arc<SlotMap>> {
        let (map, stale) = {
            let s = self.state.lock();
            (s.map.clone(), s.stale)
        };
        match map {
            Some(map) if !stale => Ok(map),
            Some(map) => {
                let share = deadline.min(Instant::now() + left(deadline, what)? / 2);
                match self.refresh(share) {
                    Ok(fresh) => Ok(fresh),
                    Err(e) => {
                        log::debug!("redis cluster: slot map re-read failed ({e}); using the previous one");
                        Ok(map)
                    }
                }
            }
            None => self.refresh(deadline),
        }
    }

    /// Reads the slot map from one node after another (known nodes first, masters before
    /// replicas, nodes that failed recently last, then the configured ones); each attempt but the
    /// last gets half the time left.
    fn refresh(&self, deadline: Instant) -> Result<Arc<SlotMap>> {
        let what = "CLUSTER SLOTS";
        let mut candidates: Vec<String> = {
            let s = self.state.lock();
            s.map.as_ref().map(|m| m.nodes().into_iter().map(str::to_string).collect()).unwrap_or_default()
        };
        for (addr, _) in &self.seeds {
            if !candidates.contains(addr) {
                candidates.push(addr.clone());
            }
        }
        let now = Instant::now();
        let mut nodes = Vec::with_capacity(candidates.len());
        for addr in &candidates {
            nodes.push(self.node(addr)?);
        }
        nodes.sort_by_key(|n| n.suspect(now));
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let mut last_error = None;
        for (i, node) in nodes.iter().enumerate() {
            let Ok(t) = left(deadline, what) else { break };
            let attempt = if i + 1 == nodes.len() { deadline } else { Instant::now() + t / 2 };
            let host = node.addr.rsplit_once(':').map_or(node.addr.as_str(), |(h, _)| h).to_string();
            let reply = self.on_node(node, attempt, what, |con| query(con, &cmd, attempt));
            match reply {
                Ok(Outcome::Done(v)) => match SlotMap::parse(&v, &host) {
                    Some(map) if !map.ranges.is_empty() => {
                        let map = Arc::new(map);
                        let mut s = self.state.lock();
                        let keep: Vec<String> = map.nodes().into_iter().map(str::to_string).collect();
                        s.nodes.retain(|a, _| keep.contains(a) || self.seeds.iter().any(|(s, _)| s == a));
                        s.map = Some(map.clone());
                        s.stale = false;
                        return Ok(map);
                    }
                    _ => {
                        last_error = Some(Error::unavailable(format!(
                            "redis cluster node {} answered CLUSTER SLOTS without a usable slot map",
                            node.addr
                        )));
                    }
                },
                Ok(Outcome::Redirect { error, .. }) => last_error = Some(error),
                // A refusal (credentials, ACL) or a server that is no cluster node does not heal
                // by asking another node or by retrying: it fails at once, in the server's words.
                Err(e) if e.kind() == ErrorKind::Backend => return Err(not_a_cluster(&node.addr, e)),
                Err(e) => last_error = Some(e),
            }
        }
        let e = Error::unavailable(format!(
            "cannot read the redis cluster slot map from any of {} node(s) before the query timeout",
            nodes.len()
        ));
        Err(match last_error {
            Some(last) => e.with_source(last),
            None => e,
        })
    }
}

/// `(index, slot)` pairs grouped by the master of the slot in `map`, in order of first use; the
/// indices of slots no master serves come second.
/// The replies a node's pipeline settled (`None`: settle that call alone), or its transport error.
type PipelineReplies = redis::RedisResult<Vec<Option<Value>>>;

/// `(index, reply or error)` of the calls some pipelines settled.
type Settled = Vec<(usize, Result<Value>)>;

/// What one node's pipeline settled, as [`Router::pipelined`] returns it.
fn settled(idx: &[usize], outcome: Result<Outcome<Vec<Option<Value>>>>) -> Vec<(usize, Result<Value>)> {
    match outcome {
        Ok(Outcome::Done(replies)) => idx.iter().zip(replies).filter_map(|(i, r)| r.map(|v| (*i, Ok(v)))).collect(),
        Ok(Outcome::Redirect { .. }) => Vec::new(),
        Err(e) => {
            let message = crate::display_chain(&e);
            idx.iter().map(|i| (*i, Err(Error::new(e.kind(), message.clone())))).collect()
        }
    }
}

fn by_master(map: &SlotMap, calls: impl Iterator<Item = (usize, u16)>) -> (Vec<(&str, Vec<usize>)>, Vec<usize>) {
    let mut by_node: Vec<(&str, Vec<usize>)> = Vec::new();
    let mut unserved = Vec::new();
    for (i, slot) in calls {
        let Some(addr) = map.master(slot) else {
            unserved.push(i);
            continue;
        };
        match by_node.iter_mut().find(|(a, _)| *a == addr) {
            Some((_, idx)) => idx.push(i),
            None => by_node.push((addr, vec![i])),
        }
    }
    (by_node, unserved)
}

/// `e` from `CLUSTER SLOTS` on `addr`; when the server has cluster support disabled (a standalone
/// server given as a cluster node), an `InvalidConfig` saying which URL to use instead.
fn not_a_cluster(addr: &str, e: Error) -> Error {
    if e.to_string().contains("cluster support disabled") {
        Error::config(format!(
            "redis at {addr} is not a Redis Cluster node (it answered: ERR This instance has cluster support \
             disabled): use redis://{addr} to connect to a standalone server"
        ))
    } else {
        e
    }
}

enum Judged {
    Redirect(String, bool, Error),
    Fail(Error),
}

impl fmt::Debug for Router {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("Router")
            .field("seeds", &self.seeds.iter().map(|(a, _)| a).collect::<Vec<_>>())
            .field("map", &s.map)
            .field("stale", &s.stale)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    #[test]
    fn tagged_slots_are_the_slots_of_the_built_keys() {
        for name in ["job", "a}b", "}a", "", "{x}", "x{y}z", "ü-7", "}", "a}}b"] {
            for prefix in ["simba:lease:", "simba:group:"] {
                let key = format!("{prefix}{{{name}}}");
                assert_eq!(tagged_slot(prefix, name), slot_of(key.as_bytes()), "{key}");
            }
        }
        // Redis's own examples (cluster spec): `{user1000}.following` hashes `user1000`.
        assert_eq!(slot_of(b"{user1000}.following"), slot_of(b"user1000"));
        assert_eq!(slot_of(b"123456789"), 12739);
    }

    #[test]
    fn slot_maps_parse_and_route() {
        let v = Value::Array(vec![
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("10.0.0.2", 7001), node("", 7004)]),
            Value::Array(vec![Value::Int(0), Value::Int(5460), node("10.0.0.1", 7000), node("?", 7003)]),
        ]);
        let m = SlotMap::parse(&v, "10.0.0.9").unwrap();
        assert_eq!(m.master(0), Some("10.0.0.1:7000"));
        assert_eq!(m.master(5460), Some("10.0.0.1:7000"));
        assert_eq!(m.master(5461), Some("10.0.0.2:7001"));
        assert_eq!(m.master(16383), Some("10.0.0.2:7001"));
        assert_eq!(m.masters(), vec!["10.0.0.1:7000", "10.0.0.2:7001"]);
        assert_eq!(m.nodes(), vec!["10.0.0.1:7000", "10.0.0.2:7001", "10.0.0.9:7004"]);
    }

    #[test]
    fn slots_match_the_drivers() {
        use redis::cluster_routing::Slot;
        for key in ["", "a", "foo", "{user1000}.following", "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{}x"] {
            assert_eq!(Slot::new(slot_of(key.as_bytes())), Some(Slot::for_key(key)), "{key:?}");
        }
        // The CRC16-XMODEM check value.
        assert_eq!(slot_of(b"123456789"), 0x31c3);
        for i in 0..2000 {
            let key = format!("simba:lease:{{n{i}}}");
            assert_eq!(Slot::new(slot_of(key.as_bytes())), Some(Slot::for_key(&key)), "{key}");
        }
    }

    #[test]
    fn uncovered_slots_have_no_master() {
        let v = Value::Array(vec![Value::Array(vec![Value::Int(100), Value::Int(200), node("h", 1)])]);
        let m = SlotMap::parse(&v, "x").unwrap();
        assert_eq!(m.master(99), None);
        assert_eq!(m.master(100), Some("h:1"));
        assert_eq!(m.master(201), None);
        assert!(SlotMap::parse(&Value::Int(1), "x").is_none());
        let bad = Value::Array(vec![Value::Array(vec![Value::Int(5), Value::Int(1), node("h", 1)])]);
        assert!(SlotMap::parse(&bad, "x").is_none());
    }
}
