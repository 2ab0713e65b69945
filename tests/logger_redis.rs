//! The application's logger never runs under a lock of the standalone Redis backend (issue #36,
//! finding 6): its log calls ran inside `books.with`, one mutex per backend shared by all its
//! sessions, so a slow logger stalled every session and one that called back into simba
//! deadlocked. See `tests/support/logger.rs`. One binary per backend: the logger is process-global.
// The scripting port comes from the crate-internal test seam (feature `internal-testing`).
#![cfg(all(feature = "redis", feature = "internal-testing"))]

#[path = "support/logger.rs"]
mod logger;
mod support;

use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};
use simba::backend::{Acquire, KeepAlive, LeaseBackend};
use simba::backends::redis::RedisOptions;
use simba::testing::redis::{LuaScript, RedisScripting, StandaloneScripting};
use simba::{Name, SessionId};

/// The real standalone port; the next `acquire` script naming a chosen key is held after its
/// reply (the term is indexed, the acquire still in flight) until the test lets it go on.
#[derive(Debug)]
struct Holding {
    inner: StandaloneScripting,
    hold: Mutex<Option<Hold>>,
}

/// The key of the acquire to hold, where to say it arrived, where the go comes from.
type Hold = (String, Sender<()>, Receiver<()>);

impl RedisScripting for Holding {
    fn is_clustered(&self) -> bool {
        false
    }
    fn eval(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        deadline: Instant,
    ) -> simba::Result<redis::Value> {
        let r = self.inner.eval(script, keys, args, deadline);
        let held = {
            let mut hold = self.hold.lock().unwrap();
            if script.name() == "acquire" && hold.as_ref().is_some_and(|(key, _, _)| keys.contains(key)) {
                hold.take()
            } else {
                None
            }
        };
        if let Some((_, arrived, go)) = held {
            let _ = arrived.send(());
            let _ = go.recv_timeout(Duration::from_secs(30));
        }
        r
    }
    fn on_masters(&self, cmd: &redis::Cmd, deadline: Instant) -> simba::Result<Vec<(String, redis::Value)>> {
        self.inner.on_masters(cmd, deadline)
    }
    fn subscriber_endpoints(&self) -> Vec<redis::ConnectionInfo> {
        self.inner.subscriber_endpoints()
    }
    fn target(&self) -> String {
        self.inner.target()
    }
}

#[test]
fn the_logger_may_call_back_into_simba_from_any_standalone_record() {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    support::require_tcp("Redis", url.trim_start_matches("redis://").split('/').next().unwrap_or_default());
    let inner = StandaloneScripting::new(&url, 8)
        .unwrap_or_else(|e| panic!("cannot connect to Redis at {url}: {e} (run `scripts/services up redis`)"));
    let port = Arc::new(Holding { inner, hold: Mutex::new(None) });
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
    let backend: Arc<dyn LeaseBackend> =
        Arc::new(simba::testing::redis::backend_with_scripting(port.clone(), options).unwrap());
    logger::every_record_may_call_back(backend, move |backend, sid| {
        logger::lease_life(backend, sid);
        // A renewal while an acquire is in flight after its script indexed the term: the renewal
        // does not report that term yet, and says so.
        let x = Name::new(support::unique("logger-inflight")).unwrap();
        let (arrived_tx, arrived) = crossbeam_channel::bounded(1);
        let (go, go_rx) = crossbeam_channel::bounded(1);
        *port.hold.lock().unwrap() = Some((format!("simba:lease:{{{x}}}"), arrived_tx, go_rx));
        let acquire = {
            let (backend, sid, x) = (backend.clone(), sid.clone(), x.clone());
            thread::spawn(move || backend.acquire(&sid, &x))
        };
        arrived.recv_timeout(Duration::from_secs(10)).expect("the acquire ran its script");
        let owned = renew(backend, sid);
        assert!(owned.iter().all(|n| *n != x), "an acquire in flight was reported: {owned:?}");
        go.send(()).unwrap();
        let Ok(Acquire::Acquired { token, .. }) = acquire.join().unwrap() else { panic!("the acquire failed") };
        backend.release(sid, &x, token).unwrap();
    });
}

fn renew(backend: &Arc<dyn LeaseBackend>, sid: &SessionId) -> Vec<Name> {
    match backend.keep_alive(sid, Duration::from_secs(30)).unwrap() {
        KeepAlive::Alive { owned, .. } => owned.into_iter().map(|(n, _)| n).collect(),
        KeepAlive::Expired => panic!("session {sid} expired"),
    }
}
