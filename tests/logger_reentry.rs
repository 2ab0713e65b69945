//! The application's logger never runs under an internal lock (SPEC §4, issue #14 finding 4): a
//! logger that calls back into the session (`is_held()`, `{:?}` of a `Lease`, `is_leader()`,
//! `state()`) on every record must not deadlock it, while a lease is lost behind the session's
//! back (its keep-alives hang until the local deadline passes).
//!
//! One test in its own binary: the logger is process-global.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use simba::{Election, ErrorKind, Lease, Session, SessionEvent, SessionOptions};
use support::forward::{Forward, Hook, Op};

mod support;

/// The handles the logger probes on every record.
#[derive(Default)]
struct Probes {
    session: Option<Arc<Session>>,
    lease: Option<Arc<Lease>>,
    election: Option<Arc<Election>>,
}

static PROBES: Mutex<Probes> = Mutex::new(Probes { session: None, lease: None, election: None });
static PROBED: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static INSIDE: Cell<bool> = const { Cell::new(false) };
}

struct CallingBack;

impl log::Log for CallingBack {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if !record.target().starts_with("simba") || INSIDE.with(|i| i.replace(true)) {
            return;
        }
        let (session, lease, election) = {
            let p = PROBES.lock().unwrap();
            (p.session.clone(), p.lease.clone(), p.election.clone())
        };
        if let Some(s) = &session {
            let _ = s.state();
            let _ = s.is_alive();
        }
        if let Some(l) = &lease {
            let _ = l.is_held();
            let _ = format!("{l:?}");
        }
        if let Some(e) = &election {
            let _ = e.is_leader();
            let _ = format!("{e:?}");
        }
        PROBED.fetch_add(1, Ordering::SeqCst);
        INSIDE.with(|i| i.set(false));
    }
    fn flush(&self) {}
}

/// Keep-alives hang (until the process ends) once switched on; acquires wait for the gate.
#[derive(Debug)]
struct Ctl {
    hang_keep_alive: AtomicBool,
    gate_acquire: AtomicBool,
    open_tx: Sender<()>,
    open_rx: Receiver<()>,
    _never_tx: Sender<()>,
    never_rx: Receiver<()>,
}

impl Hook for Ctl {
    fn before(&self, op: Op) {
        if op == Op::KeepAlive && self.hang_keep_alive.load(Ordering::SeqCst) {
            let _ = self.never_rx.recv();
        }
        if op == Op::Acquire && self.gate_acquire.load(Ordering::SeqCst) {
            let _ = self.open_rx.recv();
        }
    }
}

#[test]
fn a_logger_calling_back_into_the_session_never_deadlocks_it() {
    log::set_boxed_logger(Box::new(CallingBack)).unwrap();
    log::set_max_level(log::LevelFilter::Trace);
    let (done_tx, done_rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        scenario();
        let _ = done_tx.send(());
    });
    // Watchdog: a deadlock fails the test instead of hanging it.
    if done_rx.recv_timeout(Duration::from_secs(30)).is_err() {
        panic!("the session deadlocked with a logger calling back into it (logger ran under an internal lock)");
    }
    assert!(PROBED.load(Ordering::SeqCst) > 0, "the logger probed the handles");
}

fn scenario() {
    let (open_tx, open_rx) = crossbeam_channel::unbounded();
    let (never_tx, never_rx) = crossbeam_channel::bounded(0);
    let ctl = Ctl {
        hang_keep_alive: AtomicBool::new(false),
        gate_acquire: AtomicBool::new(false),
        open_tx,
        open_rx,
        _never_tx: never_tx,
        never_rx,
    };
    let backend = Forward::memory("calling-back", ctl);
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap();
    let session = Arc::new(Session::open(backend.clone(), options).unwrap());
    PROBES.lock().unwrap().session = Some(session.clone());
    let events = session.events();
    let lease = Arc::new(session.lock("job").unwrap());
    PROBES.lock().unwrap().lease = Some(lease.clone());
    // The campaign's acquire waits until the logger can probe the election.
    backend.hook.gate_acquire.store(true, Ordering::SeqCst);
    let election = Arc::new(session.campaign("lead").unwrap());
    PROBES.lock().unwrap().election = Some(election.clone());
    backend.hook.gate_acquire.store(false, Ordering::SeqCst);
    backend.hook.open_tx.send(()).unwrap();
    election.wait_elected_timeout(Duration::from_secs(10)).expect("elected");
    // Lost behind the session's back: renewals hang until the local deadline passes.
    backend.hook.hang_keep_alive.store(true, Ordering::SeqCst);
    loop {
        match events.recv_timeout(Duration::from_secs(10)).expect("the session expires") {
            SessionEvent::Expired => break,
            _ => continue,
        }
    }
    assert!(!lease.is_held());
    assert!(!election.is_leader());
    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
    *PROBES.lock().unwrap() = Probes::default();
}
