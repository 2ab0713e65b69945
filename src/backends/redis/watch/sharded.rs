//! Redis Cluster notifications with sharded pub/sub: the Cluster scripts `SPUBLISH` on the key's
//! own channel (`simba:lease:{name}`, `simba:group:{name}`), which Redis delivers only to the
//! node serving the channel's slot (and its replicas), never across the cluster bus. So the
//! subscriber `SSUBSCRIBE`s each channel on the master serving its slot:
//!
//! * one coordinating thread (the backend's pub/sub thread) reads the slot map (`CLUSTER SLOTS`
//!   from the configured nodes, re-read after a slot moved or a node failed; a `MOVED` reply to a
//!   subscribe names the new master at once) and hands each channel to the subscriber of its
//!   master;
//! * one subscriber thread per master in use, each on its own RESP3 connection (where every
//!   pub/sub event is a push the driver hands over, including the server's own `sunsubscribe`),
//!   blocking on its socket so a message wakes its watcher at once; a master no channel needs any
//!   more has its subscriber and connection closed;
//! * when Redis ends a subscription (it sends `sunsubscribe` to the subscribers of a slot that
//!   moved away from the node) or a subscriber's connection fails, the coordinator re-reads the
//!   slot map, wakes the watchers of the channels that were subscribed (messages may have been
//!   missed), and their next registration subscribes on the slot's new master; a subscribe that
//!   failed is retried (after a backoff when its node is failing) without waking anyone.
//!
//! Notifications stay hints: a waiter polls as well, so a lost one costs latency only.

use std::collections::{HashMap, HashSet};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TryRecvError};
use redis::{Client, Connection, ConnectionInfo, PushInfo, PushKind, Value};

use super::super::conn::Conn;
use super::super::port::{connect, map_err};
use super::super::router::{addr_of, node_info, query, slot_of, SlotMap};
use super::{channel, topic_of, Warned, Watchers, CHUNK, MAX_BACKOFF, POLL};
use crate::backend::Topic;
use crate::backends::notifier::panic_message;
use crate::error::{Error, Result};

/// What the coordinator asks of a master's subscriber (every topic of one order in one slot).
enum Order {
    Subscribe(Vec<Topic>),
    Unsubscribe(Vec<Topic>),
}

/// What a subscriber tells the coordinator.
enum Report {
    /// The master refused to subscribe `topics` (`MOVED` names the slot's master, when it did).
    Refused { addr: String, topics: Vec<Topic>, moved: Option<(u16, String)>, error: Error },
    /// Redis ended these subscriptions (`sunsubscribe`: their slot moved away from the master).
    Ended { addr: String, topics: Vec<Topic> },
    /// The subscriber `shard` of the master at `addr` is connected.
    Connected { addr: String, shard: u64 },
    /// The subscriber `shard` connection failed (or could not be made); its subscriptions are gone.
    Down { addr: String, shard: u64, error: Error },
}

/// The coordinator's view of one master's subscriber.
struct Shard {
    /// Tells this subscriber's reports from those of an earlier one of the same master.
    id: u64,
    orders: Sender<Order>,
    /// Topics handed to it (subscribed, or on their way).
    topics: HashSet<Topic>,
    /// Set when the coordinator lets go of this subscriber (retired, or the coordinator died): it
    /// then stops without carrying out orders still queued, so a subscriber of a dead coordinator
    /// never confirms a subscription to its successor's state.
    retired: Arc<AtomicBool>,
}

impl Drop for Shard {
    fn drop(&mut self) {
        self.retired.store(true, Ordering::SeqCst);
    }
}

/// A master whose subscriber failed: not used again before `until`.
struct Backoff {
    until: Instant,
    step: Duration,
}

/// The slot of `topic`'s channel.
fn slot(topic: &Topic) -> u16 {
    slot_of(channel(topic).as_bytes())
}

/// The coordinator: runs on the backend's pub/sub thread until the backend is dropped.
pub(super) fn run(weak: &Weak<Watchers>, endpoints: &[ConnectionInfo], timeout: Duration, target: &str) {
    let seeds: Vec<(String, ConnectionInfo)> =
        endpoints.iter().filter_map(|i| Some((addr_of(i)?, i.clone()))).collect();
    if seeds.is_empty() {
        log::warn!("redis pub/sub for {target}: no TCP node to subscribe on; candidates will poll");
        return;
    }
    let Some(w) = weak.upgrade() else { return };
    // Registrations are accepted from now on; each subscribes on its master.
    w.connected();
    drop(w);
    let (report_tx, report_rx) = crossbeam_channel::unbounded::<Report>();
    let mut shards: HashMap<String, Shard> = HashMap::new();
    let mut placed: HashMap<Topic, String> = HashMap::new();
    let mut backoff: HashMap<String, Backoff> = HashMap::new();
    let mut warned: HashMap<String, Warned> = HashMap::new();
    let mut map: Option<SlotMap> = None;
    let mut stale = true;
    // Slots a `MOVED` sent elsewhere since the map was read.
    let mut moved: HashMap<u16, String> = HashMap::new();
    let mut swept = Instant::now();
    let mut reports: Vec<Report> = Vec::new();
    let mut next_id = 0u64;
    // After a failed slot map read, the next waits (doubling up to MAX_BACKOFF), so a cluster
    // that is down is not asked again every round.
    let (mut map_retry, mut map_step) = (Instant::now(), Duration::from_millis(25));
    loop {
        let Some(w) = weak.upgrade() else {
            log::debug!("redis pub/sub for {target}: backend dropped, subscriber threads stop");
            return;
        };
        w.notifier.checkpoint();
        reports.extend(report_rx.try_iter());
        for report in reports.drain(..) {
            let (addr, topics) = match report {
                Report::Connected { addr, shard } => {
                    if shards.get(&addr).is_some_and(|s| s.id == shard) {
                        backoff.remove(&addr);
                        if let Some(w) = warned.get_mut(&addr) {
                            w.recovered(target, &addr);
                        }
                    }
                    continue;
                }
                Report::Refused { addr, topics, moved: to, error } => {
                    match to {
                        Some((slot, to)) => {
                            log::debug!("redis pub/sub for {target}: slot {slot} moved from {addr} to {to}");
                            moved.insert(slot, to);
                        }
                        None => {
                            warned.entry(addr.clone()).or_default().failed(target, &addr, &error);
                            hold_off(&mut backoff, &addr);
                        }
                    }
                    stale = true;
                    (addr, topics)
                }
                Report::Ended { addr, topics } => {
                    log::debug!(
                        "redis pub/sub for {target}: {} ended {} subscription(s) (slot moved away)",
                        addr,
                        topics.len()
                    );
                    stale = true;
                    (addr, topics)
                }
                Report::Down { addr, shard, error } => {
                    if shards.get(&addr).is_none_or(|s| s.id != shard) {
                        // A retired subscriber of this master: nothing of it is in use.
                        log::debug!("redis pub/sub for {target}: a retired subscriber of {addr} failed ({error})");
                        continue;
                    }
                    warned.entry(addr.clone()).or_default().failed(target, &addr, &error);
                    hold_off(&mut backoff, &addr);
                    stale = true;
                    let topics = shards
                        .remove(&addr)
                        .map(|mut s| std::mem::take(&mut s.topics).into_iter().collect())
                        .unwrap_or_default();
                    (addr, topics)
                }
            };
            if let Some(shard) = shards.get_mut(&addr) {
                for t in &topics {
                    shard.topics.remove(t);
                }
            }
            for t in &topics {
                if placed.get(t) == Some(&addr) {
                    placed.remove(t);
                }
            }
            w.lost(&topics);
        }

        let now = Instant::now();
        let changes = w.round(&mut swept);
        // Unsubscribe on the master that holds each topic, one order per slot.
        let mut leave: HashMap<(String, u16), Vec<Topic>> = HashMap::new();
        for t in changes.unsubscribe {
            if let Some(addr) = placed.remove(&t) {
                if let Some(shard) = shards.get_mut(&addr) {
                    shard.topics.remove(&t);
                }
                leave.entry((addr, slot(&t))).or_default().push(t);
            }
        }
        for ((addr, _), topics) in leave {
            if let Some(shard) = shards.get(&addr) {
                for chunk in topics.chunks(CHUNK) {
                    let _ = shard.orders.send(Order::Unsubscribe(chunk.to_vec()));
                }
            }
        }
        // Subscribe each new topic on the master of its slot, one order per slot.
        if !changes.subscribe.is_empty() {
            if (stale || map.is_none()) && now >= map_retry {
                match read_map(&seeds, map.as_ref(), timeout) {
                    Ok(m) => {
                        map = Some(m);
                        stale = false;
                        moved.clear();
                        map_step = Duration::from_millis(25);
                    }
                    Err(e) => {
                        log::debug!("redis pub/sub for {target}: cannot read the slot map ({e})");
                        map_step = (map_step * 2).min(MAX_BACKOFF);
                        map_retry = Instant::now() + map_step;
                    }
                }
            }
            let mut join: HashMap<(String, u16), Vec<Topic>> = HashMap::new();
            let mut later = Vec::new();
            for t in changes.subscribe {
                if placed.contains_key(&t) {
                    // On its way already (registered again before the confirmation).
                    continue;
                }
                let s = slot(&t);
                let addr =
                    moved.get(&s).cloned().or_else(|| map.as_ref().and_then(|m| m.master(s)).map(str::to_string));
                match addr {
                    Some(addr) if backoff.get(&addr).is_none_or(|b| now >= b.until) => {
                        join.entry((addr, s)).or_default().push(t);
                    }
                    _ => later.push(t),
                }
            }
            for ((addr, _), topics) in join {
                if !shards.contains_key(&addr) {
                    match start(weak, &seeds, &addr, timeout, &report_tx, next_id) {
                        Ok(s) => {
                            next_id += 1;
                            shards.insert(addr.clone(), s);
                        }
                        Err(e) => {
                            warned.entry(addr.clone()).or_default().failed(target, &addr, &e);
                            hold_off(&mut backoff, &addr);
                            later.extend(topics);
                            continue;
                        }
                    }
                }
                let Some(shard) = shards.get_mut(&addr) else { continue };
                for t in &topics {
                    shard.topics.insert(t.clone());
                    placed.insert(t.clone(), addr.clone());
                }
                for chunk in topics.chunks(CHUNK) {
                    let _ = shard.orders.send(Order::Subscribe(chunk.to_vec()));
                }
            }
            // Not placed now (no map, or the master is failing): tried again next round.
            w.retry(&later);
        }
        // A master no topic needs any more: its subscriber stops and closes its connection.
        shards.retain(|_, s| !s.topics.is_empty());
        drop(w);
        match report_rx.recv_timeout(POLL) {
            Ok(r) => reports.push(r),
            Err(RecvTimeoutError::Timeout) => {}
            // The coordinator holds a sender: never disconnected while it runs.
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Keeps a failing master out for a doubling backoff (up to [`MAX_BACKOFF`]).
fn hold_off(backoff: &mut HashMap<String, Backoff>, addr: &str) {
    let now = Instant::now();
    let b = backoff.entry(addr.to_string()).or_insert(Backoff { until: now, step: Duration::from_millis(25) });
    b.step = (b.step * 2).min(MAX_BACKOFF);
    b.until = now + b.step;
}

/// Reads the slot map from the known nodes (the previous map's, then the configured ones).
fn read_map(seeds: &[(String, ConnectionInfo)], previous: Option<&SlotMap>, timeout: Duration) -> Result<SlotMap> {
    let mut candidates: Vec<String> =
        previous.map(|m| m.nodes().into_iter().map(str::to_string).collect()).unwrap_or_default();
    for (addr, _) in seeds {
        if !candidates.contains(addr) {
            candidates.push(addr.clone());
        }
    }
    let mut last = None;
    for addr in &candidates {
        let attempt = || -> Result<SlotMap> {
            let info = node_info(seeds, addr)?;
            let context = format!("redis pub/sub: slot map from {addr}");
            let client = Client::open(info).map_err(|e| map_err(e, &context))?;
            let mut con = Conn::new(connect(&client, timeout, &context)?);
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SLOTS");
            let v = query(&mut con, &cmd, Instant::now() + timeout).map_err(|e| map_err(e, &context))?;
            let host = addr.rsplit_once(':').map_or(addr.as_str(), |(h, _)| h);
            match SlotMap::parse(&v, host) {
                Some(m) if !m.masters().is_empty() => Ok(m),
                _ => Err(Error::unavailable(format!("{context}: no usable slot map"))),
            }
        };
        match attempt() {
            Ok(m) => return Ok(m),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| Error::unavailable("redis pub/sub: no node to read the slot map from")))
}

/// Starts the subscriber of the master at `addr`.
fn start(
    weak: &Weak<Watchers>,
    seeds: &[(String, ConnectionInfo)],
    addr: &str,
    timeout: Duration,
    reports: &Sender<Report>,
    id: u64,
) -> Result<Shard> {
    let info = node_info(seeds, addr)?;
    // RESP3: every pub/sub event is a push (`smessage`, the server's `sunsubscribe`), which the
    // driver hands to a push sender; RESP2 readers of redis-rs drop `smessage` and `sunsubscribe`.
    let settings = info.redis_settings().clone().set_protocol(redis::ProtocolVersion::RESP3);
    let info = info.set_redis_settings(settings);
    let (orders_tx, orders_rx) = crossbeam_channel::unbounded();
    let retired = Arc::new(AtomicBool::new(false));
    let orders = Orders { rx: orders_rx, retired: retired.clone() };
    let (weak, addr, reports) = (weak.clone(), addr.to_string(), reports.clone());
    thread::Builder::new()
        .name("simba-redis-shardsub".into())
        .spawn(move || {
            // A subscriber that panics is down like one whose connection failed: the coordinator
            // wakes its watchers and starts another on the next registration.
            let outcome =
                catch_unwind(AssertUnwindSafe(|| subscribe(&weak, &info, &addr, timeout, &orders, &reports, id)));
            let error = match outcome {
                Ok(Ok(())) => return,
                Ok(Err(error)) => error,
                Err(p) => Error::unavailable(format!("the subscriber thread panicked: {}", panic_message(p.as_ref()))),
            };
            let _ = reports.send(Report::Down { addr, shard: id, error });
        })
        .map_err(|e| Error::unavailable("cannot start a redis pub/sub thread").with_source(e))?;
    Ok(Shard { id, orders: orders_tx, topics: HashSet::new(), retired })
}

/// A subscriber's orders from the coordinator.
struct Orders {
    rx: Receiver<Order>,
    /// [`Shard::retired`].
    retired: Arc<AtomicBool>,
}

/// The coordinator let go of this subscriber.
struct Retired;

impl Orders {
    /// The next queued order (`None`: none now); `Err` once the coordinator let go of this
    /// subscriber, even with orders still queued.
    fn next(&self) -> Option<std::result::Result<Order, Retired>> {
        if self.retired.load(Ordering::SeqCst) {
            return Some(Err(Retired));
        }
        match self.rx.try_recv() {
            Ok(o) => Some(Ok(o)),
            Err(TryRecvError::Empty) => None,
            Err(TryRecvError::Disconnected) => Some(Err(Retired)),
        }
    }
}

/// One master's subscriber connection (RESP3, pushes through `pushes`).
struct Sub {
    con: Connection,
    pushes: mpsc::Receiver<PushInfo>,
    timeout: Duration,
    /// Channels subscribed here, by name.
    mine: HashMap<String, Topic>,
    /// When the connection last carried anything.
    last_traffic: Instant,
}

impl Sub {
    /// Sends `cmd` and reads until what answers it: with `confirm = Some((kind, channels))`, a push
    /// of `kind` naming each of `channels` (Redis confirms every channel of a command with its own
    /// push; one left over from an earlier command names another channel and does not count),
    /// otherwise the plain reply. A server error reply is an `Err` (the connection stays usable).
    fn command(&mut self, cmd: &redis::Cmd, confirm: Option<(PushKind, &[String])>) -> redis::RedisResult<Value> {
        self.con.set_read_timeout(Some(self.timeout))?;
        self.con.send_packed_command(&cmd.get_packed_command())?;
        let (kind, channels) = confirm.map_or((None, &[][..]), |(k, c)| (Some(k), c));
        let mut waiting: HashSet<&str> = channels.iter().map(String::as_str).collect();
        loop {
            // A timeout here ends the connection, so the driver's skip-a-late-reply does no harm.
            match self.con.recv_response()? {
                // Every push is also handed to the push sender (read from there).
                Value::Push { kind: k, data } => {
                    if kind.as_ref() == Some(&k) {
                        if let Some(Value::BulkString(name)) = data.first() {
                            waiting.remove(String::from_utf8_lossy(name).as_ref());
                        }
                        if waiting.is_empty() {
                            return Ok(Value::Okay);
                        }
                    }
                }
                v if kind.is_none() => return v.extract_error(),
                v => {
                    v.extract_error()?;
                }
            }
        }
    }

    /// Waits up to [`POLL`] for a push (delivered to the push sender).
    fn wait(&mut self) -> redis::RedisResult<()> {
        self.con.set_read_timeout(Some(POLL))?;
        let mut ps = self.con.as_pubsub();
        let r = ps.get_message();
        // `PubSub`'s drop unsubscribes from every channel; this one only read a message.
        std::mem::forget(ps);
        match r {
            Ok(_) => Ok(()),
            Err(e) if e.is_timeout() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Handles the pushes received so far and reports the subscriptions Redis ended.
    fn drain(&mut self, w: &Watchers, addr: &str, reports: &Sender<Report>) {
        let mut ended = Vec::new();
        while let Ok(push) = self.pushes.try_recv() {
            self.last_traffic = Instant::now();
            let name = match push.data.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                _ => continue,
            };
            match push.kind {
                PushKind::SMessage | PushKind::Message => {
                    if let Some(topic) = topic_of(&name) {
                        w.fire(&topic);
                    }
                }
                // Our own unsubscribes left `mine` before they were sent: this one is Redis'.
                PushKind::SUnsubscribe => {
                    if let Some(topic) = self.mine.remove(&name) {
                        ended.push(topic);
                    }
                }
                _ => {}
            }
        }
        if !ended.is_empty() {
            let _ = reports.send(Report::Ended { addr: addr.to_string(), topics: ended });
        }
    }
}

fn subscribe(
    weak: &Weak<Watchers>,
    info: &ConnectionInfo,
    addr: &str,
    timeout: Duration,
    orders: &Orders,
    reports: &Sender<Report>,
    shard: u64,
) -> Result<()> {
    let context = format!("redis pub/sub on {addr}");
    let io = |e: redis::RedisError| map_err(e, &context);
    let client = Client::open(info.clone()).map_err(io)?;
    let mut con = connect(&client, timeout, &format!("cannot connect to redis at {addr}"))?;
    con.set_write_timeout(Some(timeout)).map_err(io)?;
    let (push_tx, pushes) = mpsc::channel();
    con.set_push_sender(push_tx);
    let mut sub = Sub { con, pushes, timeout, mine: HashMap::new(), last_traffic: Instant::now() };
    let mut setname = redis::cmd("CLIENT");
    setname.arg("SETNAME").arg("simba-pubsub");
    sub.command(&setname, None).map_err(io)?;
    let _ = reports.send(Report::Connected { addr: addr.to_string(), shard });
    loop {
        let Some(w) = weak.upgrade() else { return Ok(()) };
        w.notifier.helper_checkpoint();
        loop {
            let order = match orders.next() {
                Some(Ok(o)) => o,
                None => break,
                // The coordinator retired this master (or stopped, or died).
                Some(Err(Retired)) => return Ok(()),
            };
            sub.drain(&w, addr, reports);
            match order {
                Order::Subscribe(topics) => {
                    let names: Vec<String> = topics.iter().map(channel).collect();
                    let mut cmd = redis::cmd("SSUBSCRIBE");
                    cmd.arg(&names);
                    match sub.command(&cmd, Some((PushKind::SSubscribe, &names))) {
                        Ok(_) => {
                            for t in &topics {
                                sub.mine.insert(channel(t), t.clone());
                            }
                            w.confirmed(&topics);
                        }
                        Err(e) if e.code().is_some() => {
                            let moved = e.redirect_node().map(|(to, slot)| (slot, to.to_string()));
                            let error = io(e);
                            let _ = reports.send(Report::Refused { addr: addr.to_string(), topics, moved, error });
                        }
                        Err(e) => return Err(io(e)),
                    }
                }
                Order::Unsubscribe(topics) => {
                    let names: Vec<String> = topics.iter().map(channel).collect();
                    for n in &names {
                        sub.mine.remove(n);
                    }
                    let mut cmd = redis::cmd("SUNSUBSCRIBE");
                    cmd.arg(&names);
                    sub.command(&cmd, Some((PushKind::SUnsubscribe, &names))).map_err(io)?;
                }
            }
            sub.last_traffic = Instant::now();
        }
        sub.drain(&w, addr, reports);
        drop(w);
        sub.wait().map_err(io)?;
        let Some(w) = weak.upgrade() else { return Ok(()) };
        sub.drain(&w, addr, reports);
        drop(w);
        // A silent connection may be dead (host gone without a reset): ping it.
        if sub.last_traffic.elapsed() >= timeout {
            sub.command(&redis::cmd("PING"), None).map_err(io)?;
            sub.last_traffic = Instant::now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Name;

    #[test]
    fn a_lease_and_its_group_share_a_slot() {
        let n = Name::new("job-1").unwrap();
        assert_eq!(slot(&Topic::Lease(n.clone())), slot(&Topic::Group(n)));
        assert_eq!(slot(&Topic::Lease(Name::new("probe-a").unwrap())), 16004);
    }
}
