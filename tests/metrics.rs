//! The `metrics` feature: after a scripted session — locks taken, contended (a pushed wake-up and
//! a polled one) and released, a permit and a partition, a keep-alive that fails, one that hangs
//! past the query timeout, a session expired behind its back, a coordinator's replacement — every
//! metric of the documented table (src/observe.rs, docs/observability.md) was recorded, with
//! exactly its documented labels. One binary: the recorder is process-global.
#![cfg(feature = "metrics")]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use metrics_util::debugging::DebuggingRecorder;
use simba::backend::{Acquire, LeaseBackend};
use simba::{Coordinator, MemoryBackend, Session, SessionId, SessionOptions, SessionState};
use support::eventually;
use support::forward::{Forward, Hook, KeepAliveTrouble, Op};

/// Every documented metric and its label keys.
const PATIENCE: Duration = Duration::from_secs(20);

const TABLE: &[(&str, &[&str])] = &[
    ("simba_renewal_latency_seconds", &["backend"]),
    ("simba_renewal_margin_seconds", &["backend"]),
    ("simba_observed_drift", &["backend"]),
    ("simba_renewal_failures_total", &["backend", "kind"]),
    ("simba_acquired_total", &["backend", "kind"]),
    ("simba_acquire_wait_seconds", &["backend"]),
    ("simba_released_total", &["backend", "kind"]),
    ("simba_lost_total", &["backend", "kind", "reason"]),
    ("simba_held", &["backend", "kind"]),
    ("simba_wakeups_total", &["backend", "how"]),
    ("simba_spi_call_seconds", &["backend", "call"]),
    ("simba_spi_errors_total", &["backend", "call", "kind"]),
    ("simba_pool_busy_workers", &[]),
    ("simba_coordinator_replacements_total", &["backend"]),
];

/// Keep-alive trouble on command, and a count of `Busy` acquire replies: a waiter counted busy
/// has made its attempt, so the release that follows wakes it (rather than finding it before its
/// first attempt, which then takes the lease without any wake-up).
#[derive(Debug, Default)]
struct Counted {
    trouble: KeepAliveTrouble,
    busy: AtomicU64,
}

impl Hook for Counted {
    fn before(&self, op: Op) {
        Hook::before(&self.trouble, op);
    }
    fn fail(&self, op: Op) -> Option<simba::Error> {
        Hook::fail(&self.trouble, op)
    }
    fn acquired(&self, _session: &SessionId, reply: &simba::Result<Acquire>) {
        if matches!(reply, Ok(Acquire::Busy)) {
            self.busy.fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn options(lease: Duration) -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(lease)
        .renew_interval(lease / 4)
        .query_timeout(Duration::from_millis(200))
        .poll_interval(Duration::from_millis(50))
        .build()
        .unwrap()
}

#[test]
fn every_documented_metric_is_recorded_with_its_labels() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    recorder.install().expect("the only recorder of this binary");

    // Locks: taken, contended (woken by a push on memory), released.
    let memory = Arc::new(MemoryBackend::new());
    let pushed = Forward::inheriting(memory.clone(), Counted::default());
    let (a, b) = (
        Session::open(memory.clone(), options(Duration::from_secs(2))).unwrap(),
        Arc::new(Session::open(pushed.clone(), options(Duration::from_secs(2))).unwrap()),
    );
    let held = a.lock("metered").unwrap();
    let waiter = {
        let b = b.clone();
        thread::spawn(move || b.lock("metered").map(drop))
    };
    assert!(eventually(PATIENCE, || pushed.hook.busy.load(Ordering::SeqCst) >= 1));
    held.release().unwrap();
    waiter.join().unwrap().unwrap();
    // A polled wake-up: a backend that does not push.
    let polled = Forward::memory("polled", Counted::default());
    let (c, d) = (
        Session::open(polled.clone(), options(Duration::from_secs(2))).unwrap(),
        Arc::new(Session::open(polled.clone(), options(Duration::from_secs(2))).unwrap()),
    );
    let held = c.lock("polled").unwrap();
    let waiter = {
        let d = d.clone();
        thread::spawn(move || d.lock("polled").map(drop))
    };
    assert!(eventually(PATIENCE, || polled.hook.busy.load(Ordering::SeqCst) >= 1));
    held.release().unwrap();
    waiter.join().unwrap().unwrap();
    // A permit and a partition.
    let permit = a.semaphore("metered-sem", 1).unwrap().acquire().unwrap();
    let parts = a.partitions("metered-set", 1).unwrap();
    assert!(eventually(PATIENCE, || parts.owned().len() == 1));
    // Keep-alives that fail, then hang past the query timeout.
    polled.hook.trouble.fail(true);
    assert!(eventually(PATIENCE, || c.status().consecutive_failures >= 1));
    polled.hook.trouble.fail(false);
    polled.hook.trouble.hang(true);
    assert!(eventually(PATIENCE, || c.status().consecutive_failures >= 1
        && c.status().last_error.is_some_and(|e| e.contains("did not answer"))));
    polled.hook.trouble.hang(false);
    // A session expired behind its back: its lease lost.
    let lost = b.lock("lost").unwrap();
    memory.close_session(b.id()).unwrap();
    assert!(eventually(PATIENCE, || b.state() == SessionState::Expired));
    drop(lost);
    // A coordinator's replacement.
    let coordinator = Coordinator::start(memory.clone(), options(Duration::from_secs(2))).unwrap();
    let first = coordinator.session_id().unwrap();
    memory.close_session(&first).unwrap();
    assert!(eventually(PATIENCE, || coordinator.status().replacements == 1));
    coordinator.close().unwrap();
    drop((permit, parts));

    let mut seen: BTreeMap<String, BTreeSet<Vec<(String, String)>>> = BTreeMap::new();
    for (key, _, _, _) in snapshotter.snapshot().into_vec() {
        let (_, key) = key.into_parts();
        let labels: Vec<(String, String)> =
            key.labels().map(|l| (l.key().to_string(), l.value().to_string())).collect();
        seen.entry(key.name().to_string()).or_default().insert(labels);
    }
    for (name, keys) in TABLE {
        let series =
            seen.get(*name).unwrap_or_else(|| panic!("{name} was never recorded; recorded: {:?}", seen.keys()));
        for labels in series {
            let got: Vec<&str> = labels.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(&got, keys, "{name}: labels {labels:?}");
        }
    }
    let values = |name: &str, key: &str| -> BTreeSet<String> {
        seen[name].iter().flat_map(|ls| ls.iter().filter(|(k, _)| k == key).map(|(_, v)| v.clone())).collect()
    };
    assert!(values("simba_renewal_failures_total", "kind")
        .is_superset(&["error", "timeout", "expired"].map(String::from).into()));
    assert!(
        values("simba_acquired_total", "kind").is_superset(&["lease", "permit", "partition"].map(String::from).into())
    );
    assert!(values("simba_wakeups_total", "how").is_superset(&["pushed", "polled"].map(String::from).into()));
    assert!(values("simba_lost_total", "reason").contains("session_expired"));
    assert!(values("simba_spi_errors_total", "call").contains("keep_alive"));
    assert!(values("simba_spi_call_seconds", "call")
        .is_superset(&["open_session", "keep_alive", "acquire", "release"].map(String::from).into()));
    let documented: BTreeSet<&str> = TABLE.iter().map(|(n, _)| *n).collect();
    let extra: Vec<&String> =
        seen.keys().filter(|n| n.starts_with("simba_") && !documented.contains(n.as_str())).collect();
    assert!(extra.is_empty(), "recorded but not documented: {extra:?}");
}
