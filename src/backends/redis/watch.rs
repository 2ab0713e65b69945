//! Release and membership notifications: on standalone Redis one dedicated blocking pub/sub
//! connection per backend, on its own thread, serving one-shot registrations (on Redis Cluster,
//! sharded pub/sub on each channel's own master instead: see [`sharded`]; the registrations and
//! their rules below are the same). It subscribes only to the channels someone
//! is waiting on (`SUBSCRIBE simba:lease:{name}` / `simba:group:{name}`), so a process receives
//! the releases of the names it waits for, not every release on the server:
//!
//! * a registration for a channel that is not subscribed yet returns at once; the thread
//!   subscribes within one [`POLL`] and, once Redis confirmed the `SUBSCRIBE`, sends every
//!   registration made before that a notification (the caller re-checks), since a release may
//!   have happened between the caller's attempt and the subscription;
//! * a channel nobody waits on any more is unsubscribed after [`LINGER`] (a waiter that comes back
//!   at once finds it still subscribed);
//! * a registration its caller did not renew for [`STALE`] is sent a notification and forgotten
//!   (a caller that still waits re-registers; one that stopped waiting is gone), so a channel does
//!   not stay subscribed for a caller that left without a notification.
//!
//! The thread holds only a `Weak` to the shared state and stops within one read timeout once the
//! backend is dropped; it reconnects (rotating through the endpoints) after any failure,
//! resubscribes, and then wakes every registered watcher, since messages may have been missed. It
//! warns once per failing cause, not once per retry.
//!
//! The thread runs under the supervision rule of [`crate::backends::notifier`]: if it panics (or
//! returns while the backend lives) every registered watcher is woken, registrations fail at once
//! with `Unavailable` (saying why) until a restarted thread is connected again, and `check()` fails
//! its "notifications" item meanwhile.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use redis::{Client, Cmd, Connection, ConnectionInfo, Msg, Value};

use super::port::map_err;
use super::scripts::keys;
use crate::backend::{CheckItem, Notification, Topic};
use crate::backends::notifier::{supervise, Notifier, NotifierHealth, Supervised};
use crate::error::{Error, Result};
use crate::types::Name;

mod sharded;

/// How long one blocking read on the pub/sub connection may last: how soon a new registration's
/// channel is subscribed, and how long the thread outlives its backend.
pub(crate) const POLL: Duration = Duration::from_millis(10);
/// How long a channel stays subscribed after its last registration was served.
pub(crate) const LINGER: Duration = Duration::from_secs(1);
/// A registration not renewed for this long is notified and forgotten.
pub(crate) const STALE: Duration = Duration::from_secs(10);
/// Longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How often the thread looks for idle channels and stale registrations.
const SWEEP: Duration = Duration::from_millis(100);
/// Channels per `SUBSCRIBE` / `UNSUBSCRIBE` command.
const CHUNK: usize = 500;

/// The senders waiting on one topic.
struct Waiting {
    senders: Vec<Sender<Notification>>,
    /// When a caller last registered (renewals included).
    touched: Instant,
}

#[derive(Default)]
struct State {
    /// The pub/sub connection is up; registrations are accepted.
    up: bool,
    /// One-shot registrations.
    registry: HashMap<Topic, Waiting>,
    /// Topics whose `SUBSCRIBE` Redis confirmed on the current connection.
    subscribed: HashSet<Topic>,
    /// Subscribed topics without a registration, since when.
    idle: HashMap<Topic, Instant>,
    /// Topics registered while not subscribed, for the thread to subscribe.
    pending: HashSet<Topic>,
}

/// Registrations and the subscriber's state, shared with the thread through a `Weak`.
pub(crate) struct Watchers {
    state: Mutex<State>,
    changed: Condvar,
    /// The subscriber thread's supervision (see [`crate::backends::notifier`]).
    notifier: Arc<Notifier>,
}

/// What the thread must change on its connection.
#[derive(Default)]
struct Changes {
    subscribe: Vec<Topic>,
    unsubscribe: Vec<Topic>,
    /// Stale registrations (notified outside the lock).
    stale: Vec<(Topic, Vec<Sender<Notification>>)>,
}

impl Watchers {
    pub(crate) fn new() -> Arc<Watchers> {
        Arc::new(Watchers {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
            notifier: Notifier::new("redis pub/sub"),
        })
    }

    /// The health of the subscriber thread.
    pub(crate) fn health(&self) -> NotifierHealth {
        self.notifier.health()
    }

    /// The "notifications" item of `check()`.
    pub(crate) fn check_item(&self) -> CheckItem {
        self.notifier.check_item()
    }

    /// Registers a one-shot interest once the subscriber is connected (waiting until `deadline`).
    /// Returns at once: a channel not subscribed yet is subscribed by the thread, which then
    /// notifies this registration (see the module docs). While the subscriber thread is dead
    /// (not restarted and serving yet), fails at once with `Unavailable`.
    pub(crate) fn register(&self, topic: &Topic, notify: &Sender<Notification>, deadline: Instant) -> Result<bool> {
        let mut state = self.state.lock();
        // Under the state lock: a thread that dies marks its notifier down before it takes the
        // lock to wake the registered, so a registration is either refused or woken.
        self.notifier.available()?;
        while !state.up {
            let timed_out = self.changed.wait_until(&mut state, deadline).timed_out();
            self.notifier.available()?;
            if timed_out {
                return Err(Error::unavailable(
                    "redis pub/sub connection is not subscribed: release notifications are unavailable, poll instead",
                ));
            }
        }
        let now = Instant::now();
        state.idle.remove(topic);
        let waiting =
            state.registry.entry(topic.clone()).or_insert_with(|| Waiting { senders: Vec::new(), touched: now });
        waiting.touched = now;
        if !waiting.senders.iter().any(|s| s.same_channel(notify)) {
            waiting.senders.push(notify.clone());
        }
        if !state.subscribed.contains(topic) {
            state.pending.insert(topic.clone());
        }
        Ok(true)
    }

    /// The thread died: registrations are refused (by the notifier) and every registered watcher
    /// is woken, since messages may have been lost.
    fn wake_all_down(&self) {
        let all: Vec<_> = {
            let mut state = self.state.lock();
            state.up = false;
            state.subscribed.clear();
            state.idle.clear();
            state.pending.clear();
            state.registry.drain().collect()
        };
        self.changed.notify_all();
        for (topic, waiting) in all {
            notify(&topic, waiting.senders);
        }
    }

    /// The connection is down: registrations wait (or fail) until it is up again.
    fn disconnected(&self) {
        let mut state = self.state.lock();
        state.up = false;
        state.subscribed.clear();
        state.idle.clear();
        state.pending.clear();
    }

    /// A message arrived on `topic`'s channel.
    fn fire(&self, topic: &Topic) {
        let senders = {
            let mut state = self.state.lock();
            let senders = state.registry.remove(topic);
            if senders.is_some() && state.subscribed.contains(topic) {
                state.idle.insert(topic.clone(), Instant::now());
            }
            senders
        };
        if let Some(waiting) = senders {
            notify(topic, waiting.senders);
        }
    }

    /// The connection is up (again): accepts registrations and wakes every watcher registered
    /// before, since messages may have been missed while it was down. One step under the lock, so
    /// a registration accepted now is not woken for nothing.
    fn connected(&self) {
        let all: Vec<_> = {
            let mut state = self.state.lock();
            state.up = true;
            let now = Instant::now();
            let all: Vec<_> = state.registry.drain().collect();
            let State { subscribed, idle, .. } = &mut *state;
            for topic in subscribed.iter() {
                idle.insert(topic.clone(), now);
            }
            all
        };
        self.changed.notify_all();
        self.notifier.serving();
        for (topic, waiting) in all {
            notify(&topic, waiting.senders);
        }
    }

    /// What to (un)subscribe now: registered topics not subscribed yet; with `sweep`, also
    /// subscribed topics idle for [`LINGER`] and registrations stale for [`STALE`] (removed here).
    /// An unsubscribed topic leaves `subscribed` before its `UNSUBSCRIBE` is sent, so a
    /// registration made meanwhile subscribes it again.
    fn changes(&self, now: Instant, sweep: bool) -> Changes {
        let mut state = self.state.lock();
        let State { registry, subscribed, idle, pending, .. } = &mut *state;
        let mut out = Changes::default();
        if sweep {
            registry.retain(|topic, waiting| {
                let stale = now.saturating_duration_since(waiting.touched) >= STALE;
                if stale {
                    out.stale.push((topic.clone(), std::mem::take(&mut waiting.senders)));
                    if subscribed.contains(topic) {
                        idle.entry(topic.clone()).or_insert(now);
                    }
                }
                !stale
            });
            idle.retain(|topic, since| {
                if registry.contains_key(topic) {
                    return false;
                }
                if now.saturating_duration_since(*since) >= LINGER {
                    subscribed.remove(topic);
                    out.unsubscribe.push(topic.clone());
                    return false;
                }
                true
            });
        }
        out.subscribe = pending.drain().filter(|t| registry.contains_key(t) && !subscribed.contains(t)).collect();
        out
    }

    /// One round of a subscriber thread: [`changes`](Watchers::changes) now, sweeping once
    /// [`SWEEP`] has passed since `swept` (then moved on), with the stale registrations notified.
    fn round(&self, swept: &mut Instant) -> Changes {
        let now = Instant::now();
        let sweep = now.saturating_duration_since(*swept) >= SWEEP;
        if sweep {
            *swept = now;
        }
        let mut changes = self.changes(now, sweep);
        for (topic, senders) in changes.stale.drain(..) {
            notify(&topic, senders);
        }
        changes
    }

    /// Redis confirmed the `SUBSCRIBE` of `topics`: marks them subscribed and notifies every
    /// registration made before (a release may have happened before the subscription).
    fn confirmed(&self, topics: &[Topic]) {
        let mut woken = Vec::new();
        {
            let mut state = self.state.lock();
            let now = Instant::now();
            for topic in topics {
                state.subscribed.insert(topic.clone());
                match state.registry.remove(topic) {
                    Some(waiting) => woken.push((topic, waiting.senders)),
                    None => {
                        state.idle.insert(topic.clone(), now);
                    }
                }
            }
            for (topic, _) in &woken {
                state.idle.insert((*topic).clone(), now);
            }
        }
        for (topic, senders) in woken {
            notify(topic, senders);
        }
    }

    /// Cluster: the subscriptions of `topics` ended (their slot moved away, or their master's
    /// connection failed), or their subscribe failed. A topic that was subscribed wakes its
    /// registrations (messages may have been missed; a caller that still waits registers again and
    /// so subscribes on the slot's new master); one that was not is subscribed again, without
    /// waking anyone (it was never relied on).
    fn lost(&self, topics: &[Topic]) {
        let mut woken = Vec::new();
        {
            let mut state = self.state.lock();
            for topic in topics {
                if state.subscribed.remove(topic) {
                    state.idle.remove(topic);
                    if let Some(waiting) = state.registry.remove(topic) {
                        woken.push((topic, waiting.senders));
                    }
                } else if state.registry.contains_key(topic) {
                    state.pending.insert(topic.clone());
                }
            }
        }
        for (topic, senders) in woken {
            notify(topic, senders);
        }
    }

    /// Cluster: `topics` could not be placed on a master now; the next round tries again.
    fn retry(&self, topics: &[Topic]) {
        if topics.is_empty() {
            return;
        }
        let mut state = self.state.lock();
        for topic in topics {
            if state.registry.contains_key(topic) && !state.subscribed.contains(topic) {
                state.pending.insert(topic.clone());
            }
        }
    }

    /// Every registered topic (to subscribe after a reconnect).
    fn registered_topics(&self) -> Vec<Topic> {
        self.state.lock().registry.keys().cloned().collect()
    }

    #[cfg(test)]
    fn registered(&self) -> usize {
        self.state.lock().registry.values().map(|w| w.senders.len()).sum()
    }
}

impl Supervised for Watchers {
    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    fn died(&self) {
        self.wake_all_down();
    }
}

impl super::RedisBackend {
    /// The health of the pub/sub thread (`None` without one: candidates always poll).
    #[allow(dead_code)] // for `Session::status` (issue #39)
    pub(crate) fn notifier_health(&self) -> Option<NotifierHealth> {
        self.inner.push.then(|| self.inner.watchers.health())
    }
}

/// Sends each of `senders` the notification of `topic` (never blocking: a full or closed channel
/// has been told enough).
fn notify(topic: &Topic, senders: Vec<Sender<Notification>>) {
    for s in senders {
        let _ = s.try_send(notification(topic));
    }
}

fn notification(topic: &Topic) -> Notification {
    match topic {
        Topic::Lease(n) => Notification::Released(n.clone()),
        Topic::Group(n) => Notification::MembersChanged(n.clone()),
    }
}

fn channel(topic: &Topic) -> String {
    match topic {
        Topic::Lease(n) => keys::lease(n.as_str()),
        Topic::Group(n) => keys::group(n.as_str()),
    }
}

/// The topic a channel name belongs to (`simba:lease:{name}` or `simba:group:{name}`).
fn topic_of(channel: &str) -> Option<Topic> {
    let name = Name::new(keys::tag(channel)?).ok()?;
    if channel.starts_with("simba:lease:") {
        Some(Topic::Lease(name))
    } else if channel.starts_with("simba:group:") {
        Some(Topic::Group(name))
    } else {
        None
    }
}

/// Starts the subscriber thread: plain `SUBSCRIBE` on one of `endpoints` (standalone), or with
/// `sharded` (Redis Cluster) `SSUBSCRIBE` of each channel on its slot's master, the cluster
/// reached through `endpoints`; supervised (restarted when it dies, see
/// [`crate::backends::notifier`]).
pub(crate) fn spawn(
    watchers: &Arc<Watchers>,
    endpoints: Vec<ConnectionInfo>,
    timeout: Duration,
    target: String,
    sharded: bool,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(watchers);
    supervise("simba-redis-pubsub", format!("redis {target}"), weak, move |weak| {
        if sharded {
            sharded::run(weak, &endpoints, timeout, &target);
        } else {
            run(weak, &endpoints, timeout, &target);
        }
    })
}

enum Stop {
    BackendDropped,
}

/// The last failure that was warned about, so a cause that repeats on every retry is logged as a
/// warning once (then at debug level) and its end once (at info level).
#[derive(Default)]
struct Warned(Option<String>);

impl Warned {
    fn failed(&mut self, target: &str, shown: &str, cause: &Error) {
        let cause = crate::display_chain(cause);
        if self.0.as_deref() == Some(cause.as_str()) {
            log::debug!("redis pub/sub for {target}: subscription on {shown} failed again ({cause}); reconnecting");
        } else {
            log::warn!(
                "redis pub/sub for {target}: subscription on {shown} failed ({cause}); reconnecting (candidates \
                 poll meanwhile; a repeat of this failure is logged at debug level)"
            );
            self.0 = Some(cause);
        }
    }

    fn recovered(&mut self, target: &str, shown: &str) {
        if self.0.take().is_some() {
            log::info!("redis pub/sub for {target}: subscribed again on {shown}");
        }
    }
}

fn run(weak: &Weak<Watchers>, endpoints: &[ConnectionInfo], timeout: Duration, target: &str) {
    if endpoints.is_empty() {
        log::warn!("redis pub/sub for {target}: no endpoint to subscribe on; candidates will poll");
        return;
    }
    let mut next = 0usize;
    let mut backoff = Duration::from_millis(50);
    let mut warned = Warned::default();
    loop {
        let info = &endpoints[next % endpoints.len()];
        // The address (host:port) carries no credentials: those are in `redis_settings`.
        let shown = info.addr().to_string();
        match subscribe(weak, info, timeout, &shown, &mut || warned.recovered(target, &shown)) {
            Ok(Stop::BackendDropped) => {
                log::debug!("redis pub/sub for {target}: backend dropped, subscriber thread stops");
                return;
            }
            Err(e) => {
                if let Some(w) = weak.upgrade() {
                    w.disconnected();
                } else {
                    return;
                }
                warned.failed(target, &shown, &e);
            }
        }
        next += 1;
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if weak.strong_count() == 0 {
                return;
            }
            thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// The subscriber's connection. Commands go out with `send_packed_command` and their replies are
/// checked (redis-rs' `PubSub::subscribe` drops a refused `SUBSCRIBE`'s error, e.g. `NOPERM`);
/// messages are read through a short-lived `PubSub`, whose read does not count a timed-out poll
/// as a reply to skip.
struct Subscriber {
    con: Connection,
    timeout: Duration,
}

impl Subscriber {
    /// Sends `cmd` and reads until its reply (waiting up to the timeout), passing the messages that
    /// arrive meanwhile to `on_message`. A server error reply is an `Err`.
    fn command(&mut self, cmd: &Cmd, on_message: &mut dyn FnMut(&Msg)) -> redis::RedisResult<Value> {
        self.con.set_read_timeout(Some(self.timeout))?;
        self.con.send_packed_command(&cmd.get_packed_command())?;
        loop {
            // A timeout here ends the connection, so the driver's skip-a-late-reply does no harm.
            let v = self.con.recv_response()?;
            match Msg::from_value(&v) {
                Some(msg) => on_message(&msg),
                None => return v.extract_error(),
            }
        }
    }

    /// The next message, or a timeout after [`POLL`].
    fn message(&mut self) -> redis::RedisResult<Msg> {
        self.con.set_read_timeout(Some(POLL))?;
        let mut ps = self.con.as_pubsub();
        let msg = ps.get_message();
        // `PubSub`'s drop unsubscribes from every channel; this one only read a message.
        std::mem::forget(ps);
        msg
    }
}

fn on_message(w: &Watchers, msg: &Msg) {
    if let Some(topic) = topic_of(msg.get_channel_name()) {
        w.fire(&topic);
    }
}

fn subscribe(
    weak: &Weak<Watchers>,
    info: &ConnectionInfo,
    timeout: Duration,
    shown: &str,
    connected: &mut dyn FnMut(),
) -> Result<Stop> {
    let context = format!("redis pub/sub on {shown}");
    let io = |e: redis::RedisError| map_err(e, &context);
    let client = Client::open(info.clone()).map_err(io)?;
    let con = super::port::connect(&client, timeout, &format!("cannot connect to redis at {shown}"))?;
    con.set_write_timeout(Some(timeout)).map_err(io)?;
    let mut sub = Subscriber { con, timeout };
    let mut setname = redis::cmd("CLIENT");
    setname.arg("SETNAME").arg("simba-pubsub");
    sub.command(&setname, &mut |_| {}).map_err(io)?;
    let subscribe = |sub: &mut Subscriber, w: &Watchers, topics: &[Topic]| -> redis::RedisResult<()> {
        for chunk in topics.chunks(CHUNK) {
            let mut cmd = redis::cmd("SUBSCRIBE");
            cmd.arg(chunk.iter().map(channel).collect::<Vec<_>>());
            // Redis runs one SUBSCRIBE for all its channels before it replies, so its first
            // confirmation covers the whole chunk (the others are skipped as non-messages).
            sub.command(&cmd, &mut |m| on_message(w, m))?;
            w.confirmed(chunk);
        }
        Ok(())
    };
    // Resubscribe to what is registered, then wake every watcher: messages may have been missed
    // while the connection was down.
    let Some(w) = weak.upgrade() else { return Ok(Stop::BackendDropped) };
    subscribe(&mut sub, &w, &w.registered_topics()).map_err(io)?;
    w.connected();
    drop(w);
    connected();
    let mut last_traffic = Instant::now();
    let mut swept = Instant::now();
    loop {
        let Some(w) = weak.upgrade() else { return Ok(Stop::BackendDropped) };
        w.notifier.checkpoint();
        let changes = w.round(&mut swept);
        if !changes.subscribe.is_empty() || !changes.unsubscribe.is_empty() {
            subscribe(&mut sub, &w, &changes.subscribe).map_err(io)?;
            for chunk in changes.unsubscribe.chunks(CHUNK) {
                let mut cmd = redis::cmd("UNSUBSCRIBE");
                cmd.arg(chunk.iter().map(channel).collect::<Vec<_>>());
                sub.command(&cmd, &mut |m| on_message(&w, m)).map_err(io)?;
            }
            last_traffic = Instant::now();
        }
        match sub.message() {
            Ok(msg) => {
                last_traffic = Instant::now();
                on_message(&w, &msg);
            }
            Err(e) if e.is_timeout() => {
                // A silent connection may be dead (host gone without a reset): ping it.
                if last_traffic.elapsed() >= timeout {
                    sub.command(&redis::cmd("PING"), &mut |m| on_message(&w, m)).map_err(io)?;
                    last_traffic = Instant::now();
                }
            }
            Err(e) => return Err(io(e)),
        }
        drop(w);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(n: &str) -> Topic {
        Topic::Lease(Name::new(n).unwrap())
    }

    #[test]
    fn channels_map_to_topics() {
        assert_eq!(topic_of("simba:lease:{job-1}"), Some(lease("job-1")));
        assert_eq!(topic_of("simba:group:{g.a}"), Some(Topic::Group(Name::new("g.a").unwrap())));
        assert_eq!(topic_of("simba:other:{x}"), None);
        assert_eq!(topic_of("simba:lease:{}"), None);
        assert_eq!(topic_of("simba:lease:x"), None);
        assert_eq!(topic_of(&channel(&lease("job-1"))), Some(lease("job-1")));
    }

    #[test]
    fn registrations_are_one_shot_and_deduplicated() {
        let w = Watchers::new();
        w.connected();
        let (tx, rx) = crossbeam_channel::unbounded();
        let topic = lease("a");
        let far = Instant::now() + Duration::from_secs(1);
        assert!(w.register(&topic, &tx, far).unwrap());
        assert!(w.register(&topic, &tx, far).unwrap());
        assert_eq!(w.registered(), 1);
        w.fire(&topic);
        assert_eq!(rx.try_recv().unwrap(), Notification::Released(Name::new("a").unwrap()));
        assert!(rx.try_recv().is_err());
        w.fire(&topic);
        assert!(rx.try_recv().is_err());
        w.disconnected();
        assert!(w.register(&topic, &tx, Instant::now()).is_err());
    }

    #[test]
    fn only_registered_topics_are_subscribed_and_idle_ones_leave_after_the_linger() {
        let w = Watchers::new();
        w.connected();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (a, b) = (lease("a"), lease("b"));
        let t0 = Instant::now();
        assert!(w.changes(t0, true).subscribe.is_empty(), "nothing registered, nothing subscribed");
        w.register(&a, &tx, t0).unwrap();
        let c = w.changes(t0, true);
        assert_eq!(c.subscribe, vec![a.clone()]);
        // Confirmation notifies the registrations made before it (the caller re-checks).
        w.confirmed(&c.subscribe);
        assert_eq!(rx.try_recv().unwrap(), Notification::Released(Name::new("a").unwrap()));
        assert!(w.changes(t0, true).subscribe.is_empty(), "subscribed once");
        // Registered again while subscribed: served by messages only.
        w.register(&a, &tx, t0).unwrap();
        w.register(&b, &tx, t0).unwrap();
        let c = w.changes(t0, true);
        assert_eq!(c.subscribe, vec![b.clone()], "only b is new");
        assert!(c.unsubscribe.is_empty());
        w.confirmed(&c.subscribe);
        assert_eq!(rx.try_recv().unwrap(), Notification::Released(Name::new("b").unwrap()));
        assert!(rx.try_recv().is_err(), "a was registered after its subscription: not notified");
        w.fire(&a);
        assert_eq!(rx.try_recv().unwrap(), Notification::Released(Name::new("a").unwrap()));
        // a and b are idle now; they stay subscribed for the linger, then leave.
        let now = Instant::now();
        assert!(w.changes(now, true).unsubscribe.is_empty());
        let mut gone = w.changes(now + LINGER, true).unsubscribe;
        gone.sort_by_key(|t| format!("{t:?}"));
        assert_eq!(gone, vec![a.clone(), b.clone()]);
        // A registration after the unsubscribe subscribes again.
        w.register(&a, &tx, now).unwrap();
        assert_eq!(w.changes(now + LINGER, true).subscribe, vec![a.clone()]);
    }

    #[test]
    fn lost_subscriptions_wake_their_watchers_and_refused_subscribes_retry_silently() {
        let w = Watchers::new();
        w.connected();
        let (tx, rx) = crossbeam_channel::unbounded();
        let (a, b) = (lease("a"), lease("b"));
        let t0 = Instant::now();
        w.register(&a, &tx, t0).unwrap();
        assert_eq!(w.changes(t0, false).subscribe, vec![a.clone()]);
        w.confirmed(std::slice::from_ref(&a));
        assert!(rx.try_recv().is_ok());
        w.register(&a, &tx, t0).unwrap();
        w.register(&b, &tx, t0).unwrap();
        assert_eq!(w.changes(t0, false).subscribe, vec![b.clone()]);
        // b's subscribe was refused (MOVED, a failed master): tried again, nobody woken.
        w.lost(std::slice::from_ref(&b));
        assert!(rx.try_recv().is_err());
        assert_eq!(w.changes(t0, false).subscribe, vec![b.clone()]);
        // a's subscription ended (its slot moved): woken, forgotten, and subscribed again only
        // once it registers again.
        w.lost(std::slice::from_ref(&a));
        assert_eq!(rx.try_recv().unwrap(), Notification::Released(Name::new("a").unwrap()));
        assert!(w.changes(t0, false).subscribe.is_empty());
        w.register(&a, &tx, t0).unwrap();
        assert_eq!(w.changes(t0, false).subscribe, vec![a.clone()]);
        // A topic that could not be placed is offered again; one nobody waits on is not.
        w.retry(std::slice::from_ref(&a));
        assert_eq!(w.changes(t0, false).subscribe, vec![a.clone()]);
        w.retry(&[lease("nobody")]);
        assert!(w.changes(t0, false).subscribe.is_empty());
    }

    #[test]
    fn stale_registrations_are_notified_and_forgotten() {
        let w = Watchers::new();
        w.connected();
        let (tx, rx) = crossbeam_channel::unbounded();
        let a = lease("a");
        let t0 = Instant::now();
        w.register(&a, &tx, t0).unwrap();
        w.confirmed(std::slice::from_ref(&a));
        assert!(rx.try_recv().is_ok());
        w.register(&a, &tx, t0).unwrap();
        assert!(w.changes(t0 + STALE / 2, true).stale.is_empty());
        let c = w.changes(Instant::now() + STALE, true);
        assert_eq!(c.stale.len(), 1);
        assert_eq!(w.registered(), 0);
        // ... and its channel leaves after the linger.
        assert_eq!(w.changes(Instant::now() + STALE + LINGER, true).unsubscribe, vec![a]);
    }
}

#[cfg(test)]
mod notify_tests;
