//! The etcd backend's watch stream resynchronises without losing a release (docs/backends/etcd.md,
//! "Watches"): a waiter's registration is notified after its stream was cut and the revision it
//! watched from was compacted meanwhile, and after its watch was created at a revision already
//! compacted. The waiter talks to the shared etcd (`scripts/services up etcd`) through a TCP proxy
//! (tests/support/proxy.rs); the holder talks to it directly. Waiters use a 60 s lease and a 20 s
//! renew interval, so they poll for the first time 10 s after their busy attempt at the earliest:
//! a lease that arrives within `RENEW / 4` of the moment the path is restored was pushed.
#![cfg(feature = "etcd")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simba::backend::{LeaseBackend, Notification, Topic};
use simba::backends::etcd::{EtcdBackend, EtcdOptions};
use simba::{Name, Session, SessionOptions};
use support::etcd::etcdctl_ok;
use support::forward::{Granted, Hook, Op, SLOW_RENEW};
use support::proxy::Proxy;

const ETCD: &str = "127.0.0.1:2379";
const RENEW: Duration = SLOW_RENEW;

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn backend(member: &str, prefix: &str) -> EtcdBackend {
    support::require_tcp("etcd", ETCD);
    let o = EtcdOptions::default().prefix(prefix).query_timeout(Duration::from_secs(2));
    EtcdBackend::connect(&[member], o)
        .unwrap_or_else(|e| panic!("etcd at {member}: {e} (run `scripts/services up etcd`)"))
}

/// Compacts the shared member's history up to its current revision.
fn compact_now() {
    let v: serde_json::Value =
        serde_json::from_str(&etcdctl_ok(ETCD, &["get", "simba-watch-test-probe", "-w", "json"])).unwrap();
    let rev = v["header"]["revision"].as_i64().unwrap();
    etcdctl_ok(ETCD, &["compact", &rev.to_string()]);
}

/// Tells the test each time the waiter's lease registration returned `Ok(true)`.
#[derive(Debug)]
struct Registered {
    backend: EtcdBackend,
    tx: Sender<()>,
}

impl Hook for Registered {
    fn before(&self, _op: Op) {}
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Option<simba::Result<bool>> {
        let r = self.backend.watch(topic, notify);
        if matches!(r, Ok(true)) {
            let _ = self.tx.send(());
        }
        Some(r)
    }
}

/// Waits until `backend`'s watch stream is established: a registration on a held lease is
/// notified of its release (by the event, or by the stream's establishment, after which it is up).
fn stream_is_up(backend: &EtcdBackend, holder: &Session) {
    let warm = Name::new(support::unique("warm")).unwrap();
    let lease = holder.lock(&warm).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(backend.watch(&Topic::Lease(warm.clone()), &tx).unwrap());
    lease.release().unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(10)), Ok(Notification::Released(warm)), "the stream never came up");
}

/// A [`waiter`](support::forward::waiter) for `name` over `backend`, its registrations reported
/// on the first receiver.
fn waiter(backend: &EtcdBackend, name: &Name) -> (Receiver<()>, Granted) {
    let (tx, registered) = crossbeam_channel::unbounded();
    let hook = Registered { backend: backend.clone(), tx };
    (registered, support::forward::waiter(Arc::new(backend.clone()), hook, name))
}

fn pushed(rx: &Granted, since: Instant, what: &str) {
    let (at, lease) = rx.recv_timeout(RENEW).unwrap_or_else(|_| panic!("{what}: the waiter never got the lease"));
    lease.unwrap_or_else(|e| panic!("{what}: the waiter's lock failed: {e}"));
    let took = at.saturating_duration_since(since);
    assert!(took < RENEW / 4, "{what}: the waiter got the lease {took:?} after, not pushed (its poll is due 10 s in)");
}

/// The waiter's stream is cut (its proxy stalled, so no new one opens) while it waits; the lease
/// is released and the history compacted past the watch's start revision meanwhile; once the
/// proxy forwards again, the new stream notifies the registration and the waiter takes the lease
/// at once. Without the resync the registration stays silent and the waiter polls 10 s later.
#[test]
#[serial_test::serial(etcd)]
fn a_release_during_a_cut_stream_and_a_compaction_is_still_pushed() {
    init_log();
    let prefix = support::unique("watch");
    let proxy = Proxy::start(ETCD);
    let w = backend(&proxy.addr(), &prefix);
    let h = Arc::new(backend(ETCD, &prefix));
    let holder = Session::open(h.clone(), SessionOptions::default()).unwrap();
    stream_is_up(&w, &holder);
    let name = Name::new(support::unique("l")).unwrap();
    let lease = holder.lock(&name).unwrap();
    let (registered, got) = waiter(&w, &name);
    registered.recv_timeout(Duration::from_secs(10)).expect("the waiter never registered");
    proxy.stall();
    proxy.cut();
    lease.release().unwrap();
    assert!(h.holder(&name).unwrap().is_none(), "the lease was not released");
    compact_now();
    assert!(got.try_recv().is_err(), "the waiter got the lease through a stalled proxy");
    let resumed = Instant::now();
    proxy.resume();
    pushed(&got, resumed, "after the cut");
}

/// The waiter's watch reaches the server only after the history was compacted past its start
/// revision (the proxy holds the create back): etcd cancels it with `compact_revision` set, and
/// the registration is notified. Without that the waiter polls 10 s later.
#[test]
#[serial_test::serial(etcd)]
fn a_watch_created_at_a_compacted_revision_notifies() {
    init_log();
    let prefix = support::unique("watch");
    let proxy = Proxy::start(ETCD);
    let w = backend(&proxy.addr(), &prefix);
    let h = Arc::new(backend(ETCD, &prefix));
    let holder = Session::open(h.clone(), SessionOptions::default()).unwrap();
    stream_is_up(&w, &holder);
    let name = Name::new(support::unique("l")).unwrap();
    let key = format!("/{prefix}/l/{name}");
    let lease = holder.lock(&name).unwrap();
    // The create's encoding: the key, then field 3 (start_revision); a range or transaction has
    // another field after the key.
    let mut create = key.into_bytes();
    create.push(0x18);
    proxy.hold_on(&create);
    let (registered, got) = waiter(&w, &name);
    registered.recv_timeout(Duration::from_secs(10)).expect("the waiter never registered");
    assert!(support::eventually(Duration::from_secs(10), || proxy.holding()), "the watch's create was never sent");
    lease.release().unwrap();
    assert!(h.holder(&name).unwrap().is_none(), "the lease was not released");
    compact_now();
    let released = Instant::now();
    proxy.let_through();
    pushed(&got, released, "after the compaction");
}
