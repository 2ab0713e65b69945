//! The key-value form of the log lines an operator alerts on (SPEC §14): a renewal failure
//! (`session`, `error`, `margin`), a loss (`session`, `lease`, `token`, `reason`), an expiry
//! (`session`) and a partition hand-off (`set`, `partition`, `token`, `session`, `generation`).
//! One binary: the logger is process-global.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use simba::backend::LeaseBackend;
use simba::partitions::PartitionOptions;
use simba::{MemoryBackend, Session, SessionOptions, SessionState};
use support::eventually;
use support::forward::{Forward, KeepAliveTrouble};

const PATIENCE: Duration = Duration::from_secs(20);

/// A record: level, message and its key-value fields.
type Line = (log::Level, String, BTreeMap<String, String>);

struct Capture(Mutex<Vec<Line>>);

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl<'kvs> log::kv::VisitSource<'kvs> for Fields<'_> {
    fn visit_pair(&mut self, key: log::kv::Key<'kvs>, value: log::kv::Value<'kvs>) -> Result<(), log::kv::Error> {
        self.0.insert(key.to_string(), value.to_string());
        Ok(())
    }
}

impl log::Log for Capture {
    fn enabled(&self, m: &log::Metadata<'_>) -> bool {
        m.target().starts_with("simba")
    }
    fn log(&self, r: &log::Record<'_>) {
        if self.enabled(r.metadata()) {
            let mut fields = BTreeMap::new();
            let _ = r.key_values().visit(&mut Fields(&mut fields));
            self.0.lock().push((r.level(), r.args().to_string(), fields));
        }
    }
    fn flush(&self) {}
}

static CAPTURE: Capture = Capture(Mutex::new(Vec::new()));

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_millis(300))
        .build()
        .unwrap()
}

/// The first captured line whose message contains `text` and that has every key of `keys`.
fn line(text: &str, keys: &[&str]) -> Option<Line> {
    CAPTURE.0.lock().iter().find(|(_, m, f)| m.contains(text) && keys.iter().all(|k| f.contains_key(*k))).cloned()
}

#[test]
fn alert_lines_carry_their_key_values() {
    if log::set_logger(&CAPTURE).is_ok() {
        log::set_max_level(log::LevelFilter::Info);
    }
    // A renewal failure.
    let failing = Forward::memory("failing", KeepAliveTrouble::default());
    let s = Session::open(failing.clone(), options()).unwrap();
    failing.hook.fail(true);
    let found = eventually(PATIENCE, || line("keep-alive failed", &["session", "error", "margin"]).is_some());
    assert!(found, "no renewal-failure line with its fields: {:?}", CAPTURE.0.lock());
    let (level, _, f) = line("keep-alive failed", &["session"]).unwrap();
    assert_eq!((level, f["session"].as_str()), (log::Level::Warn, s.id().as_str()));
    assert!(f["error"].contains("the test's keep-alive fails"), "{f:?}");
    failing.hook.fail(false);

    // A loss and an expiry: the session deleted behind its back.
    let memory = Arc::new(MemoryBackend::new());
    let session = Session::open(memory.clone(), options()).unwrap();
    let lease = session.lock("logged").unwrap();
    let token = lease.token().unwrap();
    memory.close_session(session.id()).unwrap();
    assert!(eventually(PATIENCE, || session.state() == SessionState::Expired));
    assert!(eventually(PATIENCE, || line("lost", &["lease", "token", "reason"]).is_some()));
    let (level, _, f) = line("lost", &["lease", "token", "reason"]).unwrap();
    assert_eq!(level, log::Level::Warn);
    assert_eq!(
        (f["session"].as_str(), f["lease"].as_str(), f["token"].clone()),
        (session.id().as_str(), "logged", token.to_string())
    );
    let (_, _, f) = line("expired", &["session"]).expect("an expiry line with its session");
    assert_eq!(f["session"], session.id().as_str());
    drop(lease);

    // Partition hand-offs.
    let (a, b) = (Session::open(memory.clone(), options()).unwrap(), Session::open(memory, options()).unwrap());
    let quick = PartitionOptions::default().drain(Duration::from_millis(50));
    let pa = a.partitions_with("logged-set", 2, quick).unwrap();
    assert!(eventually(PATIENCE, || pa.owned().len() == 2));
    let pb = b.partitions_with("logged-set", 2, quick).unwrap();
    assert!(eventually(PATIENCE, || pb.owned().len() == 1));
    let keys = ["set", "partition", "token", "session", "generation"];
    for what in ["assigned", "revoking", "handed off"] {
        let (_, _, f) =
            line(what, &keys).unwrap_or_else(|| panic!("no '{what}' line with {keys:?}: {:?}", CAPTURE.0.lock()));
        assert_eq!(f["set"], "logged-set");
    }
    drop((pa, pb));
}
