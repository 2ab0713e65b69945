//! Release and membership notifications: one dedicated blocking pub/sub connection per backend,
//! on its own thread (`PSUBSCRIBE simba:lease:*` and `simba:group:*`), serving one-shot
//! registrations. The thread holds only a `Weak` to the shared state and stops within one read
//! timeout once the backend is dropped; it reconnects (rotating through the endpoints) after any
//! failure and then wakes every registered watcher, since messages may have been missed.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::{Condvar, Mutex};
use redis::{Client, ConnectionInfo, Value};

use super::scripts::keys;
use crate::backend::{Notification, Topic};
use crate::error::{Error, Result};
use crate::types::Name;

/// How long one blocking read on the pub/sub connection may last; bounds how long the thread
/// outlives its backend.
const POLL: Duration = Duration::from_millis(200);
/// Longest pause between reconnection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Registrations and the subscriber's state, shared with the thread through a `Weak`.
pub(crate) struct Watchers {
    registry: Mutex<HashMap<Topic, Vec<Sender<Notification>>>>,
    subscribed: Mutex<bool>,
    changed: Condvar,
}

impl Watchers {
    pub(crate) fn new() -> Arc<Watchers> {
        Arc::new(Watchers {
            registry: Mutex::new(HashMap::new()),
            subscribed: Mutex::new(false),
            changed: Condvar::new(),
        })
    }

    /// Registers a one-shot interest once the subscriber is connected (waiting until `deadline`).
    pub(crate) fn register(&self, topic: &Topic, notify: &Sender<Notification>, deadline: Instant) -> Result<bool> {
        {
            let mut up = self.subscribed.lock();
            while !*up {
                if self.changed.wait_until(&mut up, deadline).timed_out() {
                    return Err(Error::unavailable(
                        "redis pub/sub connection is not subscribed: release notifications are unavailable, poll instead",
                    ));
                }
            }
        }
        let mut reg = self.registry.lock();
        let senders = reg.entry(topic.clone()).or_default();
        if !senders.iter().any(|s| s.same_channel(notify)) {
            senders.push(notify.clone());
        }
        Ok(true)
    }

    fn set_subscribed(&self, up: bool) {
        *self.subscribed.lock() = up;
        self.changed.notify_all();
    }

    fn fire(&self, topic: &Topic) {
        let senders = self.registry.lock().remove(topic);
        for s in senders.into_iter().flatten() {
            let _ = s.try_send(notification(topic));
        }
    }

    /// Wakes every watcher (after a reconnect: messages may have been missed meanwhile).
    fn fire_all(&self) {
        let all: Vec<_> = self.registry.lock().drain().collect();
        for (topic, senders) in all {
            for s in senders {
                let _ = s.try_send(notification(&topic));
            }
        }
    }

    #[cfg(test)]
    fn registered(&self) -> usize {
        self.registry.lock().values().map(Vec::len).sum()
    }
}

fn notification(topic: &Topic) -> Notification {
    match topic {
        Topic::Lease(n) => Notification::Released(n.clone()),
        Topic::Group(n) => Notification::MembersChanged(n.clone()),
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

/// Starts the subscriber thread.
pub(crate) fn spawn(
    watchers: &Arc<Watchers>,
    endpoints: Vec<ConnectionInfo>,
    timeout: Duration,
    target: String,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(watchers);
    thread::Builder::new().name("simba-redis-pubsub".into()).spawn(move || run(&weak, &endpoints, timeout, &target))?;
    Ok(())
}

enum Stop {
    BackendDropped,
}

fn run(weak: &Weak<Watchers>, endpoints: &[ConnectionInfo], timeout: Duration, target: &str) {
    if endpoints.is_empty() {
        log::warn!("redis pub/sub for {target}: no endpoint to subscribe on; candidates will poll");
        return;
    }
    let mut next = 0usize;
    let mut backoff = Duration::from_millis(50);
    loop {
        let info = &endpoints[next % endpoints.len()];
        // The address (host:port) carries no credentials: those are in `redis_settings`.
        let shown = info.addr().to_string();
        match subscribe(weak, info, timeout) {
            Ok(Stop::BackendDropped) => {
                log::debug!("redis pub/sub for {target}: backend dropped, subscriber thread stops");
                return;
            }
            Err(e) => {
                if let Some(w) = weak.upgrade() {
                    w.set_subscribed(false);
                } else {
                    return;
                }
                log::warn!("redis pub/sub for {target}: subscription on {shown} failed ({e}); reconnecting");
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

fn subscribe(weak: &Weak<Watchers>, info: &ConnectionInfo, timeout: Duration) -> redis::RedisResult<Stop> {
    let client = Client::open(info.clone())?;
    let mut con = client.get_connection_with_timeout(timeout)?;
    con.set_write_timeout(Some(timeout))?;
    con.set_read_timeout(Some(timeout))?;
    redis::cmd("CLIENT").arg("SETNAME").arg("simba-pubsub").query::<()>(&mut con)?;
    let mut ps = con.as_pubsub();
    ps.psubscribe(&[keys::LEASE_CHANNELS, keys::GROUP_CHANNELS])?;
    ps.set_read_timeout(Some(POLL))?;
    match weak.upgrade() {
        Some(w) => {
            w.set_subscribed(true);
            w.fire_all();
        }
        None => return Ok(Stop::BackendDropped),
    }
    let mut last_traffic = Instant::now();
    loop {
        if weak.strong_count() == 0 {
            return Ok(Stop::BackendDropped);
        }
        match ps.get_message() {
            Ok(msg) => {
                last_traffic = Instant::now();
                if let (Some(topic), Some(w)) = (topic_of(msg.get_channel_name()), weak.upgrade()) {
                    w.fire(&topic);
                }
            }
            Err(e) if e.is_timeout() => {
                // A silent connection may be dead (host gone without a reset): ping it.
                if last_traffic.elapsed() >= timeout {
                    ps.set_read_timeout(Some(timeout))?;
                    let _: Value = ps.ping()?;
                    ps.set_read_timeout(Some(POLL))?;
                    last_traffic = Instant::now();
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn channels_map_to_topics() {
        assert_eq!(topic_of("simba:lease:{job-1}"), Some(Topic::Lease(Name::new("job-1").unwrap())));
        assert_eq!(topic_of("simba:group:{g.a}"), Some(Topic::Group(Name::new("g.a").unwrap())));
        assert_eq!(topic_of("simba:other:{x}"), None);
        assert_eq!(topic_of("simba:lease:{}"), None);
        assert_eq!(topic_of("simba:lease:x"), None);
    }

    #[test]
    fn registrations_are_one_shot_and_deduplicated() {
        let w = Watchers::new();
        w.set_subscribed(true);
        let (tx, rx) = crossbeam_channel::unbounded();
        let topic = Topic::Lease(Name::new("a").unwrap());
        let far = Instant::now() + Duration::from_secs(1);
        assert!(w.register(&topic, &tx, far).unwrap());
        assert!(w.register(&topic, &tx, far).unwrap());
        assert_eq!(w.registered(), 1);
        w.fire(&topic);
        assert_eq!(rx.try_recv().unwrap(), Notification::Released(Name::new("a").unwrap()));
        assert!(rx.try_recv().is_err());
        w.fire(&topic);
        assert!(rx.try_recv().is_err());
        w.set_subscribed(false);
        assert!(w.register(&topic, &tx, Instant::now()).is_err());
    }
}
