//! A soak run on every backend (issue #36, "A soak run"; docs/testing.md, "Soak"): several
//! sessions, one thread each, lock, try-lock, take semaphore permits, campaign and join through the
//! public API for a bounded time with no injected fault. Asserted: no `LeaseLost`, no
//! `MembershipLost`, no `RenewalFailed`, no `Expired` (nor anything else but `Closed` after the
//! close), no revoked leadership but by resignation, every `token()` Ok while held; and after every
//! session is closed nothing leaked: no holder of any lock, election or semaphore slot, no member
//! of any group, and every permit of every semaphore can be taken again.
//!
//! `SIMBA_SOAK_SECS` (default 3) sets each backend's run, `SIMBA_SOAK_SEED` replays the threads'
//! choices (the timings are real, so a replay is not exact). On a failure the test prints every
//! session's events and the renewal history (each keep-alive's start, duration and reply), which
//! it records through a forwarding backend.

mod support;

#[path = "support/real_backends.rs"]
mod real_backends;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use simba::backend::{KeepAlive, LeaseBackend};
use simba::{ElectionEvent, Name, RevokeReason, Session, SessionEvent, SessionId, SessionOptions};
use support::forward::{Forward, Hook, Op};

/// Sessions (threads) per backend.
const THREADS: usize = 4;
/// Names of each kind the threads share (so they contend).
const LOCKS: usize = 3;
const GROUPS: usize = 2;
const ELECTIONS: usize = 2;
const SEMAPHORES: usize = 2;
const PERMITS: u32 = 2;

/// One keep-alive as the recorder saw it.
#[derive(Debug)]
struct Renewal {
    session: SessionId,
    started: Duration,
    took: Duration,
    reply: String,
}

/// A hook that records every keep-alive (the renewal history of a failure).
#[derive(Debug)]
struct Recorder {
    origin: Instant,
    renewals: Mutex<Vec<Renewal>>,
}

impl Hook for Recorder {
    fn before(&self, _op: Op) {}
    fn answer_keep_alive(
        &self,
        session: &SessionId,
        called: Instant,
        reply: simba::Result<KeepAlive>,
    ) -> simba::Result<KeepAlive> {
        let took = called.elapsed();
        let shown = match &reply {
            Ok(KeepAlive::Alive { remaining, owned, groups, .. }) => {
                format!("Alive {{ remaining: {remaining:?}, owned: {owned:?}, groups: {groups:?} }}")
            }
            other => format!("{other:?}"),
        };
        self.renewals.lock().push(Renewal {
            session: session.clone(),
            started: called.duration_since(self.origin),
            took,
            reply: shown,
        });
        reply
    }
}

/// The shared names of one run.
struct Names {
    locks: Vec<String>,
    groups: Vec<String>,
    elections: Vec<String>,
    semaphores: Vec<String>,
}

/// What one thread did, and what went wrong.
#[derive(Default, Debug)]
struct Tally {
    ops: [u64; 5],
    timeouts: u64,
    problems: Vec<String>,
}

fn options() -> SessionOptions {
    // Many renewals (every 500 ms) but room for a loaded 2-core machine: a keep-alive may take up
    // to 1 s and still leave the lease a retry before it ends.
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(1))
        .build()
        .unwrap()
}

fn hold(rng: &mut StdRng) {
    // Holding time of a lock, permit, leadership or membership (work, not synchronisation).
    std::thread::sleep(Duration::from_millis(rng.random_range(0..20)));
}

/// One thread's loop until `until`.
fn worker(session: &Session, names: &Names, seed: u64, until: Instant) -> Tally {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut t = Tally::default();
    let wait = Duration::from_secs(5);
    while Instant::now() < until {
        let op = rng.random_range(0..5);
        t.ops[op] += 1;
        let result: simba::Result<()> = (|| {
            match op {
                0 => {
                    let name = &names.locks[rng.random_range(0..LOCKS)];
                    match session.lock_timeout(name.as_str(), wait)? {
                        Some(lease) => {
                            let token = lease.token()?;
                            hold(&mut rng);
                            if lease.token()? != token {
                                t.problems.push(format!("lock {name}: token changed while held"));
                            }
                            lease.release()?;
                        }
                        None => t.timeouts += 1,
                    }
                }
                1 => {
                    let name = &names.locks[rng.random_range(0..LOCKS)];
                    if let Some(lease) = session.try_lock(name.as_str())? {
                        lease.token()?;
                        hold(&mut rng);
                        lease.release()?;
                    }
                }
                2 => {
                    let sem = session.semaphore(names.semaphores[rng.random_range(0..SEMAPHORES)].as_str(), PERMITS)?;
                    match sem.acquire_timeout(wait)? {
                        Some(permit) => {
                            permit.token()?;
                            hold(&mut rng);
                            permit.token()?;
                            permit.release()?;
                        }
                        None => t.timeouts += 1,
                    }
                }
                3 => {
                    let group = &names.groups[rng.random_range(0..GROUPS)];
                    let m = session.join(group.as_str())?;
                    hold(&mut rng);
                    if !m.is_member() {
                        t.problems.push(format!("group {group}: is_member() false while joined"));
                    }
                    m.leave()?;
                }
                _ => {
                    let name = &names.elections[rng.random_range(0..ELECTIONS)];
                    let e = session.campaign(name.as_str())?;
                    let events = e.events();
                    match e.wait_elected_timeout(wait) {
                        Ok(_) => {
                            e.token()?;
                            hold(&mut rng);
                            e.token()?;
                        }
                        Err(err) if err.kind() == simba::ErrorKind::Timeout => t.timeouts += 1,
                        Err(err) => return Err(err),
                    }
                    e.resign()?;
                    for ev in events.try_iter() {
                        if let ElectionEvent::Revoked { reason, .. } = &ev {
                            if !matches!(reason, RevokeReason::Resigned) {
                                t.problems.push(format!("election {name}: {ev:?}"));
                            }
                        }
                    }
                }
            }
            Ok(())
        })();
        if let Err(e) = result {
            t.problems.push(format!("op {op}: {}", simba::display_chain(&e)));
        }
    }
    t
}

/// The soak run on `backend`.
fn soak(label: &str, backend: Arc<dyn LeaseBackend>) {
    let secs: f64 = support::env_or("SIMBA_SOAK_SECS", "3").parse().expect("SIMBA_SOAK_SECS: seconds");
    let seed: u64 = std::env::var("SIMBA_SOAK_SEED")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().expect("SIMBA_SOAK_SEED: a number"))
        .unwrap_or_else(|| rand::random::<u32>() as u64);
    let recorder =
        Forward::inheriting(backend.clone(), Recorder { origin: Instant::now(), renewals: Mutex::new(Vec::new()) });
    let p = support::unique("soak");
    let names = Arc::new(Names {
        locks: (0..LOCKS).map(|i| format!("{p}.lock{i}")).collect(),
        groups: (0..GROUPS).map(|i| format!("{p}.group{i}")).collect(),
        elections: (0..ELECTIONS).map(|i| format!("{p}.elect{i}")).collect(),
        semaphores: (0..SEMAPHORES).map(|i| format!("{p}.sem{i}")).collect(),
    });
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(secs);
    let sessions: Vec<Session> = (0..THREADS)
        .map(|i| {
            let o = options().with_metadata(format!("soak-{i}")).unwrap();
            Session::open(recorder.clone() as Arc<dyn LeaseBackend>, o)
                .unwrap_or_else(|e| panic!("soak {label}: open: {e} (run `scripts/services up`)"))
        })
        .collect();
    let events: Vec<_> = sessions.iter().map(|s| s.events()).collect();
    let ids: Vec<SessionId> = sessions.iter().map(|s| s.id().clone()).collect();
    let tallies: Vec<Tally> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let names = names.clone();
                scope.spawn(move || worker(s, &names, seed.wrapping_add(i as u64), until))
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("a soak thread panicked")).collect()
    });
    let ran = started.elapsed();
    let mut report = String::new();
    for (i, s) in sessions.into_iter().enumerate() {
        if let Err(e) = s.close() {
            let _ = writeln!(report, "session {i}: close: {}", simba::display_chain(&e));
        }
    }
    // Events: everything up to the close; the close's Closed must come, and nothing else.
    let mut all_events = Vec::new();
    for (i, rx) in events.iter().enumerate() {
        let mut got = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(10)) {
                Ok(SessionEvent::Closed) => {
                    got.push(SessionEvent::Closed);
                    break;
                }
                Ok(ev) => got.push(ev),
                Err(_) => {
                    let _ = writeln!(report, "session {i}: no Closed event within 10 s of its close");
                    break;
                }
            }
        }
        if got.iter().any(|e| *e != SessionEvent::Closed) {
            let _ = writeln!(report, "session {i} ({}): unexpected events {got:?}", ids[i]);
        }
        all_events.push(got);
    }
    for (i, t) in tallies.iter().enumerate() {
        for p in &t.problems {
            let _ = writeln!(report, "session {i}: {p}");
        }
    }
    // Nothing leaked: no holder, no member, every permit free again.
    for name in names.locks.iter().chain(&names.elections) {
        match backend.holder(&Name::new(name).unwrap()) {
            Ok(None) => {}
            other => {
                let _ = writeln!(report, "{name}: holder after every session closed: {other:?}");
            }
        }
    }
    for sem in &names.semaphores {
        for slot in 0..PERMITS {
            let lease = simba::semaphore::fence_resource(sem.as_str(), slot).unwrap();
            match backend.holder(&lease) {
                Ok(None) => {}
                other => {
                    let _ = writeln!(report, "{lease}: holder after every session closed: {other:?}");
                }
            }
        }
    }
    for group in &names.groups {
        match backend.members(&Name::new(group).unwrap()) {
            Ok(m) if m.is_empty() => {}
            other => {
                let _ = writeln!(report, "{group}: members after every session closed: {other:?}");
            }
        }
    }
    let check = Session::open(backend.clone(), options()).expect("a session for the leak check");
    for sem in &names.semaphores {
        let s = check.semaphore(sem.as_str(), PERMITS).unwrap();
        let permits: Vec<_> = (0..PERMITS).filter_map(|_| s.try_acquire().unwrap()).collect();
        if permits.len() != PERMITS as usize {
            let _ =
                writeln!(report, "{sem}: only {} of {PERMITS} permits free after every session closed", permits.len());
        }
    }
    check.close().unwrap();
    let renewals = recorder.hook.renewals.lock();
    let ops: u64 = tallies.iter().flat_map(|t| t.ops).sum();
    let timeouts: u64 = tallies.iter().map(|t| t.timeouts).sum();
    let mut by_kind = [0u64; 5];
    for t in &tallies {
        for (k, n) in t.ops.iter().enumerate() {
            by_kind[k] += n;
        }
    }
    let slowest = renewals.iter().map(|r| r.took).max().unwrap_or_default();
    let summary = format!(
        "soak {label}: seed {seed}, {THREADS} sessions for {ran:.1?}: {ops} operations (lock {}, try_lock {}, \
         permit {}, join {}, campaign {}), {timeouts} waits timed out, {} keep-alives (slowest {slowest:?})",
        by_kind[0],
        by_kind[1],
        by_kind[2],
        by_kind[3],
        by_kind[4],
        renewals.len()
    );
    if !report.is_empty() {
        let mut history = String::new();
        for r in renewals.iter() {
            let who = ids.iter().position(|id| *id == r.session).map_or("?".to_string(), |i| i.to_string());
            let _ = writeln!(history, "  {:>9.3?} session {who}: took {:?} -> {}", r.started, r.took, r.reply);
        }
        panic!(
            "{summary}\nFAILED (replay the choices with SIMBA_SOAK_SEED={seed}):\n{report}\nevents per session: \
             {all_events:#?}\nrenewal history:\n{history}"
        );
    }
    eprintln!("{summary}");
}

#[test]
fn memory() {
    soak("memory", Arc::new(simba::MemoryBackend::new()));
}

/// One test per real backend, serial with that backend's TCK (same key).
macro_rules! soak_tests {
    ($($feature:literal $name:ident;)*) => {$(
        #[cfg(feature = $feature)]
        #[test]
        #[serial_test::serial($name)]
        fn $name() {
            soak(stringify!($name), real_backends::$name());
        }
    )*};
}

soak_tests! {
    "postgres" postgres;
    "mysql" mysql;
    "redis" redis;
    "redis" redis_cluster;
    "zookeeper" zookeeper;
}
