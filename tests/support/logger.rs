//! A process-global `log` logger that calls back into simba on every `simba` record (issue #36,
//! finding 6: no user code — the application's logger included — runs under an internal lock,
//! backends' locks too).
//!
//! While a probe is set, every record a simba thread emits runs the probe — calls into the backend
//! under test — on a helper thread, and the logger waits for it, at most [`BOUND`]. A record
//! emitted under a lock the probe needs stalls the probe: the logger then records the stall (the
//! record's text) and stops probing, so a deadlock fails the test after one bounded wait instead
//! of hanging the binary. A probe that takes the same lock on the logging thread itself would
//! deadlock for good; on another thread the wait shows the same thing. A probe that calls another
//! session (its keep-alive) is the logger that blocks while another session renews.
//!
//! Included by `#[path]` from each `tests/logger_*.rs` binary (one binary per backend: the
//! logger is process-global).
#![allow(dead_code)]

use std::cell::Cell;
use std::sync::{Arc, Mutex, Once};
use std::thread;
use std::time::Duration;

/// How long the logger waits for a probe (a backend call on a healthy server takes milliseconds).
pub const BOUND: Duration = Duration::from_secs(5);

type Probe = Arc<dyn Fn() + Send + Sync>;

struct State {
    probe: Option<Probe>,
    probed: usize,
    stalls: Vec<String>,
}

static STATE: Mutex<State> = Mutex::new(State { probe: None, probed: 0, stalls: Vec::new() });

thread_local! {
    /// Set on probe threads: their own records are not probed again.
    static PROBING: Cell<bool> = const { Cell::new(false) };
}

struct CallingBack;

impl log::Log for CallingBack {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }

    fn log(&self, record: &log::Record<'_>) {
        if !record.target().starts_with("simba") || PROBING.with(Cell::get) {
            return;
        }
        let Some(probe) = STATE.lock().unwrap().probe.clone() else { return };
        let text = format!("{} {}: {}", record.level(), record.target(), record.args());
        let (done_tx, done) = crossbeam_channel::bounded(1);
        thread::spawn(move || {
            PROBING.with(|p| p.set(true));
            probe();
            let _ = done_tx.send(());
        });
        let finished = done.recv_timeout(BOUND).is_ok();
        let mut s = STATE.lock().unwrap();
        if finished {
            s.probed += 1;
        } else {
            s.stalls.push(text);
            s.probe = None;
        }
    }

    fn flush(&self) {}
}

/// What one [`probing`] run saw.
#[derive(Debug)]
pub struct Outcome {
    /// Records whose probe finished within [`BOUND`].
    pub probed: usize,
    /// Records whose probe did not (the logger stopped probing after the first).
    pub stalls: Vec<String>,
}

/// Installs the logger (once per process).
pub fn install() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        log::set_boxed_logger(Box::new(CallingBack)).expect("no other logger in this binary");
        log::set_max_level(log::LevelFilter::Trace);
    });
}

/// Runs `scenario` with `probe` called back on every simba record (see the module docs).
pub fn probing(probe: impl Fn() + Send + Sync + 'static, scenario: impl FnOnce()) -> Outcome {
    install();
    {
        let mut s = STATE.lock().unwrap();
        s.probe = Some(Arc::new(probe));
        s.probed = 0;
        s.stalls.clear();
    }
    scenario();
    let mut s = STATE.lock().unwrap();
    s.probe = None;
    Outcome { probed: s.probed, stalls: std::mem::take(&mut s.stalls) }
}

/// Panics unless `outcome` probed at least one record and none stalled.
pub fn assert_never_stalled(what: &str, outcome: &Outcome) {
    assert!(
        outcome.stalls.is_empty(),
        "{what}: the logger's call back into simba did not finish within {BOUND:?} (a log call under a lock it \
         needs): {:?}",
        outcome.stalls
    );
    assert!(outcome.probed > 0, "{what}: no simba record was probed");
}

/// The scenario every backend runs: sessions `a` and `b`, a name `busy` another session holds.
/// First the logger calls back into `a` itself (an acquire of `busy`: Busy, nothing changes),
/// then into `b` (its keep-alive: the logger blocks while another session renews), each while
/// `trigger(backend, a)` makes the backend log what it logs (its renewals included).
pub fn every_record_may_call_back(
    backend: Arc<dyn simba::backend::LeaseBackend>,
    trigger: impl Fn(&Arc<dyn simba::backend::LeaseBackend>, &simba::SessionId),
) {
    install();
    let d = Duration::from_secs(30);
    let a = backend.open_session(d, "logger-a").expect("open a").id;
    let b = backend.open_session(d, "logger-b").expect("open b").id;
    let holder = backend.open_session(d, "logger-holder").expect("open holder").id;
    let busy = simba::Name::new(crate::support::unique("logger-busy")).unwrap();
    assert!(matches!(backend.acquire(&holder, &busy), Ok(simba::backend::Acquire::Acquired { .. })));
    let same = {
        let (backend, a, busy) = (backend.clone(), a.clone(), busy.clone());
        move || {
            let _ = backend.acquire(&a, &busy);
        }
    };
    let same = probing(same, || trigger(&backend, &a));
    let other = {
        let (backend, b) = (backend.clone(), b.clone());
        move || {
            let _ = backend.keep_alive(&b, d);
        }
    };
    let other = probing(other, || trigger(&backend, &a));
    for sid in [&a, &b, &holder] {
        let _ = backend.close_session(sid);
    }
    assert!(
        same.stalls.is_empty() && other.stalls.is_empty(),
        "the logger's call back into simba did not finish within {BOUND:?} (a log call under a lock it needs): \
         calling back into the logging session: {:?}; blocking while another session renews: {:?}",
        same.stalls,
        other.stalls
    );
    assert_never_stalled("a logger calling back into the logging session", &same);
    assert_never_stalled("a logger that blocks while another session renews", &other);
}

/// Acquires a fresh lease on `sid`, releases it and renews the session twice: the records of an
/// ordinary lease's life (on Redis Cluster the renewal after a release finds the name free).
pub fn lease_life(backend: &Arc<dyn simba::backend::LeaseBackend>, sid: &simba::SessionId) {
    let d = Duration::from_secs(30);
    let name = simba::Name::new(crate::support::unique("logger-life")).unwrap();
    let token = match backend.acquire(sid, &name) {
        Ok(simba::backend::Acquire::Acquired { token, .. }) => token,
        other => panic!("expected Acquired, got {other:?}"),
    };
    backend.release(sid, &name, token).expect("release");
    for _ in 0..2 {
        assert!(matches!(backend.keep_alive(sid, d), Ok(simba::backend::KeepAlive::Alive { .. })));
    }
}
