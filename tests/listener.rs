//! The session listener (`SessionOptionsBuilder::listener`): told of renewals, acquisitions,
//! releases, losses and every event, in order, on its own thread; a listener that blocks forever
//! never delays renewal or loss detection, and what its full queue drops is counted and reported;
//! a listener that panics is caught, logged once, and told the next things anyway.

mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};
use simba::backend::LeaseBackend;
use simba::listener::{SessionListener, QUEUE};
use simba::{LossReason, MemoryBackend, Name, Session, SessionEvent, SessionId, SessionOptions, SessionState, Token};
use support::eventually;
use support::forward::{Forward, KeepAliveTrouble};

const PATIENCE: Duration = Duration::from_secs(20);

fn options(listener: Arc<dyn SessionListener>) -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(1))
        .renew_interval(Duration::from_millis(250))
        .query_timeout(Duration::from_millis(200))
        .listener(listener)
        .build()
        .unwrap()
}

/// What a listener was told, in order.
#[derive(Debug, Clone, PartialEq)]
enum Heard {
    Renewed,
    Failed(u32),
    Acquired(Name, Token),
    Released(Name, Token),
    Lost(Name, Token, LossReason),
    Event(SessionEvent),
    Dropped(u64),
}

#[derive(Default)]
struct Recorder {
    heard: Mutex<Vec<Heard>>,
    /// Blocks every call while set.
    blocked: Mutex<bool>,
    unblocked: Condvar,
    /// Every call panics while set.
    panics: AtomicBool,
    /// Renewals' (latency, margin), checked against the options.
    margins: Mutex<Vec<(Duration, Duration)>>,
}

impl Recorder {
    fn hear(&self, h: Heard) {
        {
            let mut blocked = self.blocked.lock();
            while *blocked {
                self.unblocked.wait(&mut blocked);
            }
        }
        self.heard.lock().push(h);
        if self.panics.load(Ordering::SeqCst) {
            panic!("the test listener panics");
        }
    }

    fn heard(&self) -> Vec<Heard> {
        self.heard.lock().clone()
    }

    fn block(&self, on: bool) {
        *self.blocked.lock() = on;
        self.unblocked.notify_all();
    }
}

impl SessionListener for Recorder {
    fn renewed(&self, _s: &SessionId, latency: Duration, margin: Duration) {
        self.margins.lock().push((latency, margin));
        self.hear(Heard::Renewed);
    }
    fn renewal_failed(&self, _s: &SessionId, failures: u32, _error: Option<&str>) {
        self.hear(Heard::Failed(failures));
    }
    fn acquired(&self, _s: &SessionId, name: &Name, token: Token) {
        self.hear(Heard::Acquired(name.clone(), token));
    }
    fn released(&self, _s: &SessionId, name: &Name, token: Token) {
        self.hear(Heard::Released(name.clone(), token));
    }
    fn lost(&self, _s: &SessionId, name: &Name, token: Token, reason: LossReason) {
        self.hear(Heard::Lost(name.clone(), token, reason));
    }
    fn event(&self, _s: &SessionId, event: &SessionEvent) {
        self.hear(Heard::Event(event.clone()));
    }
    fn dropped(&self, _s: &SessionId, count: u64) {
        self.hear(Heard::Dropped(count));
    }
}

/// In order: renewals (latency and margin within the lease), the acquisition and release of a
/// lock, a lease lost behind the session's back (`lost` then the event), the close.
#[test]
fn listener_is_told_everything_in_order() {
    let rec = Arc::new(Recorder::default());
    let backend = Arc::new(MemoryBackend::new());
    let session = Session::open(backend.clone(), options(rec.clone())).unwrap();
    assert!(eventually(PATIENCE, || rec.heard().contains(&Heard::Renewed)), "no renewal told");
    let (latency, margin) = rec.margins.lock()[0];
    assert!(latency < Duration::from_secs(1) && margin <= Duration::from_secs(1) && margin > Duration::ZERO);
    let name = Name::new("listened").unwrap();
    let lease = session.lock(&name).unwrap();
    let t1 = lease.token().unwrap();
    lease.release().unwrap();
    let lost = session.lock(&name).unwrap();
    let t2 = lost.token().unwrap();
    // The session deleted behind its back: the next keep-alive says expired, the lease is lost.
    backend.close_session(session.id()).unwrap();
    assert!(eventually(PATIENCE, || session.state() != SessionState::Active), "the session did not end");
    drop(lost);
    assert!(eventually(PATIENCE, || rec.heard().iter().any(|h| matches!(h, Heard::Event(SessionEvent::Expired)))));
    let heard: Vec<Heard> = rec.heard().into_iter().filter(|h| *h != Heard::Renewed).collect();
    let pos = |h: &Heard| heard.iter().position(|x| x == h).unwrap_or_else(|| panic!("{h:?} not told: {heard:?}"));
    let acquired1 = pos(&Heard::Acquired(name.clone(), t1));
    let released1 = pos(&Heard::Released(name.clone(), t1));
    let acquired2 = pos(&Heard::Acquired(name.clone(), t2));
    assert!(acquired1 < released1 && released1 < acquired2, "{heard:?}");
    let lost_at = heard.iter().position(|h| matches!(h, Heard::Lost(n, t, _) if *n == name && *t == t2));
    let event_at = heard.iter().position(
        |h| matches!(h, Heard::Event(SessionEvent::LeaseLost { name: n, token, .. }) if *n == name && *token == t2),
    );
    assert!(matches!((lost_at, event_at), (Some(l), Some(e)) if acquired2 < l && l < e), "{heard:?}");
    let expired = pos(&Heard::Event(SessionEvent::Expired));
    assert!(event_at.is_some_and(|e| e < expired), "{heard:?}");
}

/// A listener blocked forever: renewals go on (the lease stays valid over many lease durations),
/// a lost lease is still detected on time, the overflow is counted, and once unblocked the
/// listener is told how many were dropped.
#[test]
fn blocked_listener_never_delays_renewal_or_loss_detection() {
    let rec = Arc::new(Recorder::default());
    rec.block(true);
    let hang = Forward::memory("hang", KeepAliveTrouble::default());
    let session = Session::open(hang.clone(), options(rec.clone())).unwrap();
    let lease = session.lock("blocked").unwrap();
    // Four lease durations of renewals with the listener blocked from its first call.
    let end = Instant::now() + Duration::from_secs(4);
    while Instant::now() < end {
        assert!(lease.token().is_ok(), "the lease was lost while the listener blocked");
        thread::sleep(Duration::from_millis(20));
    }
    // Fill the queue past its size: acquisitions and releases of many locks.
    for i in 0..(QUEUE / 2 + 10) {
        drop(session.lock(format!("fill-{i}").as_str()).unwrap());
    }
    // Loss detection with the listener still blocked: keep-alives hang, the lease ends by its deadline.
    hang.hook.hang(true);
    let hung_at = Instant::now();
    assert!(eventually(PATIENCE, || lease.token().is_err()), "the lease never failed while keep-alives hung");
    assert!(hung_at.elapsed() < Duration::from_secs(3), "loss detection waited for the listener");
    hang.hook.hang(false);
    rec.block(false);
    assert!(
        eventually(PATIENCE, || rec.heard().iter().any(|h| matches!(h, Heard::Dropped(n) if *n > 0))),
        "the listener was never told of the dropped calls"
    );
}

/// Every `simba` record, for the panicking listener's check (the binary's one logger).
struct Capture(Mutex<Vec<(log::Level, String)>>);

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("simba")
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            self.0.lock().push((r.level(), r.args().to_string()));
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

/// A listener that panics on every call: the session keeps renewing (its lease valid over several
/// lease durations), the listener is still called, and the panic is logged once at error (the
/// repeats at debug).
#[test]
fn panicking_listener_is_caught_and_logged_once() {
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Debug);
    }
    let rec = Arc::new(Recorder::default());
    rec.panics.store(true, Ordering::SeqCst);
    let session = Session::open(Arc::new(MemoryBackend::new()), options(rec.clone())).unwrap();
    let lease = session.lock("panics").unwrap();
    let end = Instant::now() + Duration::from_secs(3);
    while Instant::now() < end {
        assert!(lease.token().is_ok(), "the lease was lost while the listener panicked");
        thread::sleep(Duration::from_millis(20));
    }
    let renewals = rec.heard().iter().filter(|h| **h == Heard::Renewed).count();
    assert!(renewals >= 5, "the listener was not called again after panicking: {renewals} renewals told");
    let id = session.id().to_string();
    let ours: Vec<(log::Level, String)> =
        CAPTURE.0.lock().iter().filter(|(_, m)| m.contains(&id) && m.contains("listener panicked")).cloned().collect();
    let errors = ours.iter().filter(|(l, _)| *l == log::Level::Error).count();
    assert_eq!(errors, 1, "the panic is logged once at error: {ours:?}");
    assert!(ours.len() >= 5, "the repeats are logged (at debug): {ours:?}");
    assert!(ours[0].1.contains("the test listener panics"), "the panic's message is logged: {ours:?}");
    drop(lease);
    session.close().unwrap();
}
