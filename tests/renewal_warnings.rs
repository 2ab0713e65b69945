//! One warning per failing cause, not one per retry (issue #18 item 5): a keep-alive that keeps
//! failing for the same reason is warned about once (its repeats go to debug), a new cause is
//! warned about again, and the first success after failures says so at info.
//!
//! One test in its own binary: the logger is process-global.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use simba::{Error, Session, SessionOptions};
use support::forward::{Forward, Hook, Op};

mod support;

static RECORDS: Mutex<Option<Sender<(log::Level, String)>>> = Mutex::new(None);

struct Capture;

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, record: &log::Record<'_>) {
        if record.target().starts_with("simba") {
            if let Some(tx) = RECORDS.lock().unwrap().as_ref() {
                let _ = tx.send((record.level(), record.args().to_string()));
            }
        }
    }
    fn flush(&self) {}
}

/// Fails the first three keep-alives with one cause, the next two with another, then forwards.
#[derive(Debug, Default)]
struct Failing {
    keep_alives: AtomicUsize,
}

impl Hook for Failing {
    fn before(&self, _: Op) {}
    fn fail(&self, op: Op) -> Option<Error> {
        if op != Op::KeepAlive {
            return None;
        }
        match self.keep_alives.fetch_add(1, Ordering::SeqCst) {
            0..=2 => Some(Error::unavailable("cause A: connection refused")),
            3..=4 => Some(Error::unavailable("cause B: password rejected")),
            _ => None,
        }
    }
}

fn records() -> Receiver<(log::Level, String)> {
    let (tx, rx) = crossbeam_channel::unbounded();
    *RECORDS.lock().unwrap() = Some(tx);
    log::set_boxed_logger(Box::new(Capture)).unwrap();
    log::set_max_level(log::LevelFilter::Debug);
    rx
}

#[test]
fn a_keep_alive_failing_for_one_cause_is_warned_about_once_per_cause() {
    let rx = records();
    let backend = Forward::memory("failing", Failing::default());
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(4))
        .renew_interval(Duration::from_millis(400))
        .build()
        .unwrap();
    let session = Session::open(Arc::clone(&backend) as Arc<dyn simba::backend::LeaseBackend>, options).unwrap();
    let mut seen = Vec::new();
    let recovered = loop {
        match rx.recv_timeout(Duration::from_secs(20)) {
            Ok((level, msg)) => {
                let done = level == log::Level::Info && msg.contains("keep-alive succeeded again");
                seen.push((level, msg));
                if done {
                    break true;
                }
            }
            Err(_) => break false,
        }
    };
    assert!(recovered, "no 'succeeded again' after the failures; records: {seen:#?}");
    assert!(backend.hook.keep_alives.load(Ordering::SeqCst) >= 6, "five failures, then a success");
    let warned =
        |cause: &str| seen.iter().filter(|(level, msg)| *level == log::Level::Warn && msg.contains(cause)).count();
    assert_eq!(warned("cause A"), 1, "three failures of cause A, one warning: {seen:#?}");
    assert_eq!(warned("cause B"), 1, "a new cause is warned about again: {seen:#?}");
    let repeats = seen
        .iter()
        .filter(|(level, msg)| *level == log::Level::Debug && msg.contains("keep-alive failed again"))
        .count();
    assert_eq!(repeats, 3, "the repeats (two of A, one of B) go to debug: {seen:#?}");
    assert!(session.is_alive(), "the failures stayed inside the lease");
    session.close().unwrap();
}
