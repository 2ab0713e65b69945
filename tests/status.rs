//! `Session::status()` and `Coordinator::status()` through the public API: every field after a
//! scripted session (a lock, a permit, partitions, a membership, a leadership, a blocked waiter) on
//! the memory backend and on Redis, and during a hung renewal (the margin shrinking, the failures
//! counting up, `is_healthy()` turning false before the session expires); the observed clock
//! drift against a backend whose clock runs fast or slow, and on the real backends.

mod support;

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use simba::backend::{KeepAlive, LeaseBackend};
use simba::status::{LeaseKind, ObservedDrift, RenewalOutcome, SessionStatus};
use simba::{Coordinator, MemoryBackend, Session, SessionId, SessionOptions, SessionState};
use support::eventually;
use support::forward::{Forward, Hook, KeepAliveTrouble, Op};

#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper"))]
#[path = "support/real_backends.rs"]
mod real_backends;

const PATIENCE: Duration = Duration::from_secs(20);

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_millis(400))
        .build()
        .unwrap()
}

/// Everything a session holds appears in its status, named as what it is, with the token the
/// handles hold; a thread blocked in `lock` is a waiter until it got the lease.
fn everything_held_is_reported(backend: Arc<dyn LeaseBackend>) {
    let prefix = support::unique("st");
    let (a, b) =
        (Arc::new(Session::open(backend.clone(), options()).unwrap()), Session::open(backend, options()).unwrap());
    let lock = format!("{prefix}-lock");
    let lease = a.lock(lock.as_str()).unwrap();
    let permit = a.semaphore(format!("{prefix}-sem").as_str(), 2).unwrap().acquire().unwrap();
    let set = format!("{prefix}-set");
    let parts = a.partitions(set.as_str(), 2).unwrap();
    assert!(eventually(PATIENCE, || parts.owned().len() == 2), "the partitions were not assigned");
    let group = format!("{prefix}-group");
    let membership = a.join(group.as_str()).unwrap();
    let election = a.campaign(format!("{prefix}-elect").as_str()).unwrap();
    let leading = election.wait_elected_timeout(PATIENCE).unwrap();
    assert!(eventually(PATIENCE, || a.status().last_renewal.is_some()), "no renewal returned");
    let s = a.status();
    assert_eq!((&s.session, s.backend, s.state), (a.id(), a.backend_kind(), SessionState::Active));
    assert!(s.is_healthy(), "{s:#?}");
    let margin = s.margin.expect("alive");
    assert!(margin > s.renew_interval && margin <= s.lease_duration, "{s:#?}");
    assert_eq!((s.lease_duration, s.renew_interval), (Duration::from_secs(2), Duration::from_millis(500)));
    let last = s.last_renewal.expect("renewed");
    assert_eq!(last.outcome, RenewalOutcome::Renewed);
    assert!(last.latency < Duration::from_secs(2), "{last:?}");
    assert_eq!((s.consecutive_failures, s.last_error.as_deref()), (0, None));
    let find = |name: &str| {
        s.leases.iter().find(|l| l.name.as_str() == name).unwrap_or_else(|| panic!("{name} missing: {s:#?}"))
    };
    assert_eq!(find(&lock).token, lease.token().unwrap());
    assert_eq!(find(&lock).kind, LeaseKind::Lease);
    assert!(find(&lock).remaining.is_some_and(|r| r <= s.lease_duration));
    let slot = find(permit.lease_name().as_str());
    assert_eq!(slot.token, permit.token().unwrap());
    assert!(
        matches!(&slot.kind, LeaseKind::Permit { semaphore, slot } if semaphore == permit.name() && *slot == permit.slot())
    );
    for p in parts.owned() {
        let l = find(p.lease_name().as_str());
        assert_eq!(l.token, p.token().unwrap());
        assert!(matches!(&l.kind, LeaseKind::Partition { set: s, index } if s.as_str() == set && *index == p.index()));
    }
    assert_eq!(find(&format!("{prefix}-elect")).token, leading);
    assert_eq!(s.campaigns.iter().map(|n| n.as_str().to_string()).collect::<Vec<_>>(), vec![format!("{prefix}-elect")]);
    assert!(s.memberships.iter().any(|g| g.as_str() == group), "{s:#?}");
    assert!(s.waiters.is_empty(), "{s:#?}");
    // A blocked waiter on the other session.
    let b = Arc::new(b);
    let waiter = {
        let (b, lock) = (b.clone(), lock.clone());
        thread::spawn(move || b.lock(lock.as_str()).map(|l| l.token().unwrap()))
    };
    let waiting = |s: &SessionStatus| s.waiters.iter().any(|(n, c)| n.as_str() == lock && *c == 1);
    assert!(eventually(PATIENCE, || waiting(&b.status())), "the blocked lock() is not a waiter: {:#?}", b.status());
    lease.release().unwrap();
    waiter.join().unwrap().unwrap();
    assert!(b.status().waiters.is_empty(), "{:#?}", b.status());
    drop((permit, parts, membership, election));
}

#[test]
fn status_reports_everything_held_on_memory() {
    everything_held_is_reported(Arc::new(MemoryBackend::new()));
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn status_reports_everything_held_on_redis() {
    everything_held_is_reported(real_backends::redis());
}

/// While keep-alives hang: the keep-alive in flight is reported, the margin shrinks, abandoned
/// keep-alives count as failures with a reason, `is_healthy()` turns false while the session is
/// still alive, and after the local deadline the session is expired with no margin.
fn hung_renewal_is_visible(inner: Arc<dyn LeaseBackend>) {
    let backend = Forward::inheriting(inner, KeepAliveTrouble::default());
    let session = Session::open(backend.clone(), options()).unwrap();
    assert!(eventually(PATIENCE, || session.status().last_renewal.is_some()), "no renewal returned");
    backend.hook.hang(true);
    assert!(
        eventually(PATIENCE, || session.status().renewal_in_flight.is_some()),
        "no keep-alive in flight while they hang"
    );
    let first = session.status();
    assert!(
        eventually(PATIENCE, || session.status().consecutive_failures >= 1),
        "abandoned keep-alives are not failures"
    );
    let s = session.status();
    assert!(s.margin.is_some_and(|m| Some(m) < first.margin), "the margin did not shrink: {first:#?} then {s:#?}");
    let error = s.last_error.clone().expect("a reason for the failures");
    assert!(error.contains("did not answer within the query timeout"), "{error}");
    let unhealthy = eventually(PATIENCE, || {
        let s = session.status();
        !s.is_healthy() && s.state == SessionState::Active
    });
    assert!(unhealthy, "is_healthy() stayed true until the session ended");
    let failures = session.status().consecutive_failures;
    assert!(eventually(PATIENCE, || session.status().consecutive_failures > failures
        || session.status().state != SessionState::Active));
    assert!(eventually(PATIENCE, || session.status().state == SessionState::Expired), "the session did not expire");
    let s = session.status();
    assert_eq!(s.margin, None);
    assert!(!s.is_healthy());
    backend.hook.hang(false);
}

#[test]
fn hung_renewal_is_visible_on_memory() {
    hung_renewal_is_visible(Arc::new(MemoryBackend::new()));
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn hung_renewal_is_visible_on_redis() {
    hung_renewal_is_visible(real_backends::redis());
}

/// A coordinator reports its replacements and the last gap, and its current session's status.
#[test]
fn coordinator_status_counts_replacements() {
    let backend = Arc::new(MemoryBackend::new());
    let c = Coordinator::start(backend.clone(), options()).unwrap();
    let s = c.status();
    assert_eq!((s.replacements, s.last_gap), (0, None));
    assert!(s.is_healthy());
    let old = c.session_id().unwrap();
    backend.close_session(&old).unwrap();
    assert!(eventually(PATIENCE, || c.status().replacements == 1), "no replacement counted: {:#?}", c.status());
    let s = c.status();
    assert!(s.last_gap.is_some());
    assert!(eventually(PATIENCE, || c.status().session.is_some_and(|s| s.session != old)));
    c.close().unwrap();
}

/// The statuses as JSON (feature `serde`): the versioned schema with every field, durations in
/// milliseconds, kinds tagged.
#[cfg(feature = "serde")]
#[test]
fn statuses_serialize_to_the_versioned_json_schema() {
    let backend = Arc::new(MemoryBackend::new());
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("json-lock").unwrap();
    let permit = session.semaphore("json-sem", 1).unwrap().acquire().unwrap();
    let parts = session.partitions("json-set", 1).unwrap();
    assert!(eventually(PATIENCE, || parts.owned().len() == 1));
    let v = serde_json::to_value(session.status()).unwrap();
    assert_eq!(v["schema"], simba::status::json::SCHEMA);
    assert_eq!((v["state"].as_str(), v["healthy"].as_bool()), (Some("active"), Some(true)), "{v:#}");
    assert_eq!(v["session"].as_str(), Some(session.id().as_str()));
    assert_eq!(v["backend"].as_str(), Some("memory"));
    assert!(v["margin_ms"].as_f64().is_some_and(|m| m > 500.0 && m <= 2000.0), "{v:#}");
    assert_eq!((v["lease_duration_ms"].as_f64(), v["renew_interval_ms"].as_f64()), (Some(2000.0), Some(500.0)));
    for field in [
        "drift",
        "last_renewal",
        "renewal_in_flight_ms",
        "consecutive_failures",
        "last_error",
        "campaigns",
        "memberships",
        "waiters",
    ] {
        assert!(v.get(field).is_some(), "{field} missing: {v:#}");
    }
    let leases = v["leases"].as_array().unwrap();
    let by_name =
        |n: &str| leases.iter().find(|l| l["name"].as_str() == Some(n)).unwrap_or_else(|| panic!("{n}: {v:#}"));
    let l = by_name("json-lock");
    assert_eq!((l["kind"]["type"].as_str(), l["token"].as_u64()), (Some("lease"), Some(lease.token().unwrap().get())));
    assert!(l["remaining_ms"].as_f64().is_some());
    let p = by_name(permit.lease_name().as_str());
    assert_eq!(
        (p["kind"]["type"].as_str(), p["kind"]["semaphore"].as_str(), p["kind"]["slot"].as_u64()),
        (Some("permit"), Some("json-sem"), Some(0))
    );
    let q = by_name("simba.part:json-set:0");
    assert_eq!(
        (q["kind"]["type"].as_str(), q["kind"]["set"].as_str(), q["kind"]["index"].as_u64()),
        (Some("partition"), Some("json-set"), Some(0))
    );
    let v = serde_json::to_value(parts.status()).unwrap();
    assert_eq!(
        (v["schema"].as_u64(), v["name"].as_str(), v["count"].as_u64()),
        (Some(1), Some("json-set"), Some(1)),
        "{v:#}"
    );
    assert_eq!(v["members"].as_array().map(Vec::len), Some(1));
    assert_eq!(v["owned"][0]["index"].as_u64(), Some(0));
    assert!(v["owned"][0]["revoking_ms"].is_null());
    let c = Coordinator::start(backend, options()).unwrap();
    let v = serde_json::to_value(c.status()).unwrap();
    assert_eq!(
        (v["schema"].as_u64(), v["healthy"].as_bool(), v["replacements"].as_u64()),
        (Some(1), Some(true), Some(0)),
        "{v:#}"
    );
    assert!(v["last_gap_ms"].is_null());
    assert_eq!(v["session"]["state"].as_str(), Some("active"));
    assert!(v["session"].get("schema").is_none(), "the nested session repeats the schema: {v:#}");
    c.close().unwrap();
}

/// A partition set member's status: the counted members, the generation, every owned partition
/// with its token, and the drain left while one is revoked.
#[test]
fn partitions_status_reports_owned_and_draining() {
    let backend = Arc::new(MemoryBackend::new());
    let (a, b) = (Session::open(backend.clone(), options()).unwrap(), Session::open(backend, options()).unwrap());
    let forever = simba::partitions::PartitionOptions::default().drain(Duration::MAX);
    let pa = a.partitions_with("st-set", 2, forever).unwrap();
    assert!(eventually(PATIENCE, || pa.owned().len() == 2));
    let s = pa.status();
    assert_eq!((s.name.as_str(), s.count, s.members.len()), ("st-set", 2, 1));
    assert_eq!(
        s.owned.iter().map(|o| o.token).collect::<Vec<_>>(),
        pa.owned().iter().map(|p| p.token().unwrap()).collect::<Vec<_>>()
    );
    assert!(s.owned.iter().all(|o| o.remaining.is_some() && o.revoking.is_none()));
    let _pb = b.partitions_with("st-set", 2, forever).unwrap();
    assert!(eventually(PATIENCE, || pa.status().owned.iter().any(|o| o.revoking.is_some())), "no drain reported");
    let s = pa.status();
    assert_eq!(s.members.len(), 2);
    assert!(s.generation >= 2, "{s:#?}");
}

/// The memory backend with a clock that runs `rate` times as fast as the client's: each renewal
/// finds the time the session had left shrunk by `rate` × the real time since the renewal before.
#[derive(Debug)]
struct Skewed {
    rate: f64,
}

impl Hook for Skewed {
    fn before(&self, _op: Op) {}
    fn answer_keep_alive(
        &self,
        _session: &SessionId,
        _called: Instant,
        reply: simba::Result<KeepAlive>,
    ) -> simba::Result<KeepAlive> {
        Ok(match reply? {
            KeepAlive::Alive { remaining, owned, groups, unknown, remaining_before } => {
                // The memory backend renews to exactly `remaining`, so `remaining - before` is the
                // real time since.
                let d = remaining;
                let before = remaining_before.map(|b| d.saturating_sub(d.saturating_sub(b).mul_f64(self.rate)));
                KeepAlive::Alive { remaining, owned, groups, unknown, remaining_before: before }
            }
            expired => expired,
        })
    }
}

fn fast_renewals(drift: f64) -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(50))
        .query_timeout(Duration::from_millis(400))
        .drift(drift)
        .build()
        .unwrap()
}

/// Waits for a drift estimate over a full window of renewals.
fn full_window(session: &Session) -> ObservedDrift {
    let full = eventually(PATIENCE, || session.status().observed_drift.is_some_and(|d| d.renewals == 16));
    let d = session.status().observed_drift;
    assert!(full, "no estimate over 16 renewals: {d:?}");
    d.unwrap()
}

/// Against a backend clock running 5% fast or slow, the observed drift is the true one
/// (`1 − 1/rate`) within the uncertainty it states; a drift above the setting makes the session
/// unhealthy, one below (or negative: the client's clock runs fast) does not.
#[test]
fn observed_drift_finds_a_backend_clock_running_fast_or_slow() {
    for (rate, setting, healthy) in [(1.05, 0.01, false), (1.05, 0.1, true), (0.95, 0.01, true), (1.0, 0.01, true)] {
        let backend = Forward::memory("skewed-memory", Skewed { rate });
        let session = Session::open(backend, fast_renewals(setting)).unwrap();
        assert_eq!(session.status().observed_drift, None, "an estimate before any renewal");
        let d = full_window(&session);
        let truth = 1.0 - 1.0 / rate;
        assert!((d.estimate - truth).abs() <= d.uncertainty + 1e-6, "rate {rate}: truth {truth}, observed {d:?}");
        assert!(d.uncertainty < 0.02, "rate {rate}: the round trips cannot be that slow: {d:?}");
        assert!(d.window > Duration::from_millis(700), "{d:?}");
        let s = session.status();
        assert_eq!(s.observed_drift.is_some_and(|d| d.exceeds(setting)), !healthy, "rate {rate}: {s:#?}");
        assert_eq!(s.is_healthy(), healthy, "rate {rate}, setting {setting}: {s:#?}");
        session.close().unwrap();
    }
}

/// A keep-alive that fails starts the window over: the next estimate pairs only renewals after it.
#[test]
fn a_failed_renewal_restarts_the_drift_window() {
    let backend = Forward::inheriting(Arc::new(MemoryBackend::new()), KeepAliveTrouble::default());
    let session = Session::open(backend.clone(), fast_renewals(0.01)).unwrap();
    full_window(&session);
    backend.hook.fail(true);
    assert!(eventually(PATIENCE, || session.status().consecutive_failures >= 1), "no failure");
    assert_eq!(session.status().observed_drift, None, "the window outlived a failed renewal");
    backend.hook.fail(false);
    let d = full_window(&session);
    assert!(d.estimate.abs() <= d.uncertainty + 1e-6, "{d:?}");
    session.close().unwrap();
}

/// On a real server (on this machine: the same clock, read as wall-clock milliseconds) the drift
/// is about zero; a backend that cannot tell (ZooKeeper) says so at
/// the SPI (`remaining_before: None`), and its sessions report no drift.
#[cfg(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper"))]
fn observed_drift_on(backend: Arc<dyn LeaseBackend>, tells: bool) {
    let lease = Duration::from_secs(2);
    let grant = backend.open_session(lease, "").unwrap();
    for _ in 0..2 {
        match backend.keep_alive(&grant.id, lease).unwrap() {
            KeepAlive::Alive { remaining_before, .. } => {
                assert_eq!(remaining_before.is_some(), tells, "{remaining_before:?}");
                assert!(remaining_before.is_none_or(|b| b > Duration::ZERO && b <= lease), "{remaining_before:?}");
            }
            KeepAlive::Expired => panic!("a fresh session expired"),
        }
    }
    backend.close_session(&grant.id).unwrap();
    if !tells {
        return;
    }
    let session = Session::open(backend, fast_renewals(0.01)).unwrap();
    let d = full_window(&session);
    // Milliseconds on the server (one, over the window) and the wall clock's slewing (NTP slews
    // at most 500 ppm) on top of the round trips.
    let slack = 0.0005 + 0.001 / d.window.as_secs_f64();
    assert!(d.estimate.abs() <= d.uncertainty + slack, "{d:?}");
    assert!(session.status().is_healthy(), "{:#?}", session.status());
    session.close().unwrap();
}

#[cfg(feature = "postgres")]
#[test]
#[serial_test::serial(postgres)]
fn observed_drift_on_postgres() {
    observed_drift_on(real_backends::postgres(), true);
}

#[cfg(feature = "mysql")]
#[test]
#[serial_test::serial(mysql)]
fn observed_drift_on_mysql() {
    observed_drift_on(real_backends::mysql(), true);
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn observed_drift_on_redis() {
    observed_drift_on(real_backends::redis(), true);
}

#[cfg(feature = "redis")]
#[test]
#[serial_test::serial(redis)]
fn observed_drift_on_redis_cluster() {
    observed_drift_on(real_backends::redis_cluster(), true);
}

#[cfg(feature = "zookeeper")]
#[test]
#[serial_test::serial(zookeeper)]
fn observed_drift_on_zookeeper_is_not_told() {
    observed_drift_on(real_backends::zookeeper(), false);
}
