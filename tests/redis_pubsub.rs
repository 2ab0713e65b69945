//! The Redis pub/sub scope (issue 18 item 7): a process subscribes to the channels of the names
//! it waits for (and the groups it watches), not to every release on the server, and unsubscribes
//! once nobody waits; the pushed wake-up stays immediate and is never lost — not when the release
//! falls between the waiter's failed attempt and its subscription, not after the subscriber's
//! connection was killed.
//!
//! Each test runs its own `redis-server`, so Redis' own counts (`PUBLISH` returns how many
//! clients received the message, `PUBSUB NUMSUB`/`NUMPAT`) see only this process. Waiters use a
//! 60 s lease and a 20 s renew interval, so they poll for the first time after 10 s at the
//! earliest: a lease that arrives within 5 s of its release was pushed.
#![cfg(feature = "redis")]

#[path = "redis_private.rs"]
mod private;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use private::PrivateRedis;
use serial_test::serial;
use simba::backend::{LeaseBackend, Notification, Topic};
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::{Name, Session, SessionOptions};
use support::forward::{slow_polling, Granted, Hook, Op, SLOW_RENEW};

/// Well below the waiters' first poll (renew interval / 2 = 10 s): 5 s.
const PUSHED: Duration = Duration::from_secs(SLOW_RENEW.as_secs() / 4);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn backend(r: &PrivateRedis) -> RedisBackend {
    let o = RedisOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    RedisBackend::connect(&r.url(), o).unwrap_or_else(|e| panic!("private redis: {e}"))
}

fn name(prefix: &str) -> Name {
    Name::new(support::unique(prefix)).unwrap()
}

fn channel(n: &Name) -> String {
    format!("simba:lease:{{{n}}}")
}

fn numsub(r: &PrivateRedis, channel: &str) -> usize {
    r.cmd(&["PUBSUB", "NUMSUB", channel]).lines().nth(1).and_then(|n| n.parse().ok()).unwrap()
}

/// How many clients received a message published on `channel` now.
fn receivers(r: &PrivateRedis, channel: &str) -> usize {
    r.cmd(&["PUBLISH", channel, "probe"]).parse().unwrap()
}

fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

/// Counts the waiter's acquires as they start and their busy replies, and runs `on_busy(n)` right
/// after its `n`-th busy reply (before the runtime sees it).
#[derive(Default)]
struct Calls {
    acquires: AtomicUsize,
    busy: AtomicUsize,
    #[allow(clippy::type_complexity)]
    on_busy: Mutex<Option<(usize, Box<dyn FnOnce() + Send>)>>,
}

impl std::fmt::Debug for Calls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Calls({:?}, {:?})", self.acquires, self.busy)
    }
}

impl Hook for Arc<Calls> {
    fn before(&self, op: Op) {
        if op == Op::Acquire {
            self.acquires.fetch_add(1, Ordering::SeqCst);
        }
    }
    fn acquired(&self, _session: &simba::SessionId, reply: &simba::Result<simba::backend::Acquire>) {
        if !matches!(reply, Ok(simba::backend::Acquire::Busy)) {
            return;
        }
        let n = self.busy.fetch_add(1, Ordering::SeqCst) + 1;
        let mut hook = self.on_busy.lock().unwrap();
        if hook.as_ref().is_some_and(|(at, _)| *at == n) {
            let (_, f) = hook.take().unwrap();
            drop(hook);
            f();
        }
    }
}

/// A [`waiter`](support::forward::waiter) for `name` over `backend`, observed by `calls`.
fn waiter(backend: &RedisBackend, calls: &Arc<Calls>, name: &Name) -> Granted {
    support::forward::waiter(Arc::new(backend.clone()), calls.clone(), name)
}

#[test]
#[serial(redis_pubsub)]
fn a_waiter_receives_only_the_releases_of_the_names_it_waits_for() {
    init_log();
    let r = PrivateRedis::start(&[]);
    let holder = Session::open(Arc::new(backend(&r)), SessionOptions::default()).unwrap();
    let (a, b) = (name("scope-a"), name("scope-b"));
    let held_a = holder.try_lock(&a).unwrap().unwrap();
    let held_b = holder.try_lock(&b).unwrap().unwrap();

    let waiting = backend(&r);
    let calls = Arc::new(Calls::default());
    let got = waiter(&waiting, &calls, &a);
    eventually("the waiter subscribed to a's channel", || numsub(&r, &channel(&a)) == 1);
    // Redis delivers a message on b's channel (or any other simba channel) to nobody: no process
    // subscribes to a pattern, and nobody waits for b.
    assert_eq!(r.cmd(&["PUBSUB", "NUMPAT"]), "0", "no pattern subscription");
    assert_eq!(receivers(&r, &channel(&b)), 0, "a release of b reaches no process");
    assert_eq!(receivers(&r, "simba:group:{some-group}"), 0);
    assert_eq!(numsub(&r, &channel(&b)), 0);
    held_b.release().unwrap();
    assert!(got.try_recv().is_err(), "releasing b does not hand over a");

    held_a.release().unwrap();
    let (_, lease) = got.recv_timeout(Duration::from_secs(30)).expect("the waiter never got a");
    assert_eq!(lease.unwrap().name(), &a);
    // Nobody waits any more: the channel is unsubscribed.
    eventually("a's channel is unsubscribed once nobody waits", || numsub(&r, &channel(&a)) == 0);
    assert_eq!(r.cmd(&["PUBSUB", "CHANNELS", "simba:*"]), "", "no simba channel is subscribed");

    // Groups: only the watched group's channel, and a join is still pushed.
    let (g, other) = (name("scope-g"), name("scope-other"));
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(waiting.watch(&Topic::Group(g.clone()), &tx).unwrap());
    let group_channel = format!("simba:group:{{{g}}}");
    eventually("the group channel is subscribed", || numsub(&r, &group_channel) == 1);
    assert_eq!(receivers(&r, &format!("simba:group:{{{other}}}")), 0);
    // (The subscription itself notifies the registration: the watcher re-checks.)
    assert_eq!(rx.recv_timeout(PUSHED).unwrap(), Notification::MembersChanged(g.clone()));
    assert!(waiting.watch(&Topic::Group(g.clone()), &tx).unwrap());
    let sid = waiting.open_session(Duration::from_secs(5), "").unwrap().id;
    waiting.join(&sid, &g).unwrap();
    assert_eq!(rx.recv_timeout(PUSHED).unwrap(), Notification::MembersChanged(g));
}

#[test]
#[serial(redis_pubsub)]
fn a_waiter_wakes_at_once_on_release() {
    init_log();
    let r = PrivateRedis::start(&[]);
    let holder = Session::open(Arc::new(backend(&r)), SessionOptions::default()).unwrap();
    let a = name("push-a");
    let held = holder.try_lock(&a).unwrap().unwrap();
    let waiting = backend(&r);
    // Subscribe a's channel before the waiter starts (another watcher in the same process), so
    // the waiter's registration is served by messages alone.
    let (probe, probed) = crossbeam_channel::unbounded();
    waiting.watch(&Topic::Lease(a.clone()), &probe).unwrap();
    assert_eq!(probed.recv_timeout(PUSHED).unwrap(), Notification::Released(a.clone()), "subscribed");
    waiting.watch(&Topic::Lease(a.clone()), &probe).unwrap();

    let calls = Arc::new(Calls::default());
    let got = waiter(&waiting, &calls, &a);
    // The first attempt answered busy; the watch armed before it is registered, and the channel
    // is subscribed already: the waiter now waits for the push.
    eventually("the waiter's first attempt failed", || calls.busy.load(Ordering::SeqCst) >= 1);
    let released = Instant::now();
    held.release().unwrap();
    let (at, lease) = got.recv_timeout(Duration::from_secs(30)).expect("the waiter never got the lease");
    assert_eq!(lease.unwrap().name(), &a);
    let took = at.saturating_duration_since(released);
    assert!(took < PUSHED, "woken after {took:?}: not by the push (the first poll is 10 s after the attempt)");
    assert_eq!(probed.recv_timeout(PUSHED).unwrap(), Notification::Released(a));
}

#[test]
#[serial(redis_pubsub)]
fn a_release_between_the_failed_attempt_and_the_subscription_still_wakes_the_waiter() {
    init_log();
    for round in 0..3 {
        let r = PrivateRedis::start(&[]);
        let holder = Session::open(Arc::new(backend(&r)), SessionOptions::default()).unwrap();
        let a = name("gap");
        let held = Arc::new(Mutex::new(Some(holder.try_lock(&a).unwrap().unwrap())));
        // A fresh backend: nothing subscribed yet. The release runs on the waiter's thread right
        // after its first attempt answered busy (before the runtime sees the reply), so it
        // normally lands before the subscriber thread has subscribed.
        let waiting = backend(&r);
        let calls = Arc::new(Calls::default());
        let released = Arc::new(Mutex::new(None));
        let (held2, released2) = (held.clone(), released.clone());
        *calls.on_busy.lock().unwrap() = Some((
            1,
            Box::new(move || {
                let lease = held2.lock().unwrap().take().unwrap();
                lease.release().unwrap();
                *released2.lock().unwrap() = Some(Instant::now());
            }),
        ));
        let got = waiter(&waiting, &calls, &a);
        let (at, lease) = got.recv_timeout(Duration::from_secs(30)).expect("the waiter never got the lease");
        assert_eq!(lease.unwrap().name(), &a);
        let released = released.lock().unwrap().expect("the release did not run between the attempts");
        let took = at.saturating_duration_since(released);
        assert!(took < PUSHED, "round {round}: woken after {took:?}, not by the subscription's re-check");
    }
}

#[test]
#[serial(redis_pubsub)]
fn the_subscriber_resubscribes_after_its_connection_is_killed() {
    init_log();
    let r = PrivateRedis::start(&[]);
    let b = backend(&r);
    let a = name("killed");
    let (tx, rx) = crossbeam_channel::unbounded();
    b.watch(&Topic::Lease(a.clone()), &tx).unwrap();
    assert_eq!(rx.recv_timeout(PUSHED).unwrap(), Notification::Released(a.clone()), "subscribed");
    b.watch(&Topic::Lease(a.clone()), &tx).unwrap();
    assert_eq!(numsub(&r, &channel(&a)), 1);

    let killed: usize = r.cmd(&["CLIENT", "KILL", "TYPE", "pubsub"]).parse().unwrap();
    assert_eq!(killed, 1, "the subscriber's connection");
    // The subscriber reconnects, subscribes again what is registered and wakes its watchers
    // (a release may have been missed meanwhile).
    assert_eq!(rx.recv_timeout(PUSHED).unwrap(), Notification::Released(a.clone()), "woken after the reconnect");
    assert_eq!(numsub(&r, &channel(&a)), 1, "subscribed again");
    b.watch(&Topic::Lease(a.clone()), &tx).unwrap();
    let sid = b.open_session(Duration::from_secs(5), "").unwrap().id;
    let t = match b.acquire(&sid, &a).unwrap() {
        simba::backend::Acquire::Acquired { token, .. } => token,
        other => panic!("{other:?}"),
    };
    b.release(&sid, &a, t).unwrap();
    assert_eq!(rx.recv_timeout(PUSHED).unwrap(), Notification::Released(a), "pushed on the new connection");
}

/// Once its sessions are closed and the last handle on the backend is dropped, the backend's
/// pub/sub thread stops (it holds only a `Weak`), also after a waiter had subscribed a channel.
#[test]
#[serial(redis_pubsub)]
fn the_pubsub_thread_stops_once_the_sessions_and_the_backend_are_gone() {
    init_log();
    let r = PrivateRedis::start(&[]);
    // Backends of earlier tests may still be winding down; no other test holds one now (serial).
    eventually("earlier backends' pub/sub threads to stop", || support::threads_named("simba-redis-pub") == 0);
    let b: Arc<dyn LeaseBackend> = Arc::new(backend(&r));
    let holder = Session::open(b.clone(), slow_polling()).unwrap();
    let waiter = Session::open(b.clone(), slow_polling()).unwrap();
    let n = name("gone");
    let lease = holder.try_lock(&n).unwrap().expect("a free name");
    assert!(waiter.lock_timeout(&n, Duration::from_millis(300)).unwrap().is_none());
    assert_eq!(support::threads_named("simba-redis-pub"), 1, "one pub/sub thread per backend");
    lease.release().unwrap();
    holder.close().unwrap();
    waiter.close().unwrap();
    drop(b);
    eventually("the dropped backend's pub/sub thread to stop", || support::threads_named("simba-redis-pub") == 0);
}
