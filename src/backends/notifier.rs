//! The supervision rule of the notification threads (Redis pub/sub, PostgreSQL `LISTEN`,
//! ZooKeeper's watch driver), written once.
//!
//! A notification thread runs its body under [`supervise`]: when the body panics, or returns while
//! its backend still lives, the supervisor
//!
//! 1. marks the [`Notifier`] down, with the cause: every registration made from then on is
//!    answered at once as "cannot push" (`Err(Unavailable)` on Redis and ZooKeeper, `Ok(false)` on
//!    PostgreSQL, each backend's own contract) instead of a `true` nothing would ever keep;
//! 2. wakes every registered waiter ([`Supervised::died`]): a notification may have been lost;
//! 3. logs the degradation once (`error`, with the cause) — a thread that dies again before it
//!    serves is logged at debug level — and its end once (`info`, when the restarted body serves
//!    again: [`Notifier::serving`]);
//! 4. restarts the body after a backoff ([`MIN_RESTART`], doubling up to [`MAX_RESTART`]; back to
//!    the minimum once a body served), forever while the backend lives. The body runs on the
//!    supervisor's own thread, so there is never more than one, and the thread holds only a `Weak`
//!    to its backend's state: a dropped backend ends it.
//!
//! The state is readable: [`Notifier::health`] (for `Session::status`), [`Notifier::check_item`]
//! (the "notifications" item of `check()`). No log call and no channel send happens under a lock.
//!
//! Tests kill a running body with [`Notifier::kill`] (the body's loop calls
//! [`Notifier::checkpoint`] once per iteration, a no-op outside tests) and hold its restart with
//! [`Notifier::hold_restarts`].

use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

#[cfg(test)]
use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::Mutex;

use crate::backend::{CheckItem, CheckStatus};
use crate::error::{Error, Result};

/// First pause before a dead notification thread is restarted.
pub(crate) const MIN_RESTART: Duration = Duration::from_millis(50);
/// Longest pause between two restarts.
pub(crate) const MAX_RESTART: Duration = Duration::from_secs(2);
/// How often a pausing supervisor looks whether its backend was dropped.
const TICK: Duration = Duration::from_millis(20);

/// The health of a backend's notification thread (crate-private; `Session::status` may show it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NotifierHealth {
    /// Why notifications are down (the thread died and its replacement does not serve yet), or
    /// `None` while they are served.
    pub(crate) down: Option<String>,
    /// Since when they are down.
    pub(crate) down_since: Option<Instant>,
    /// How many times the thread was restarted so far.
    pub(crate) restarts: u64,
}

#[derive(Default)]
struct Health {
    down: Option<(String, Instant)>,
    restarts: u64,
    /// The body reached [`Notifier::serving`] since its last (re)start.
    served: bool,
}

/// The supervised state of one backend's notification thread.
pub(crate) struct Notifier {
    /// What the thread is, for messages ("redis pub/sub", "postgres LISTEN", ...).
    what: &'static str,
    health: Mutex<Health>,
    #[cfg(test)]
    kill: AtomicBool,
    #[cfg(test)]
    hold: AtomicBool,
    /// Makes a helper thread of the body (a Redis Cluster per-master subscriber) panic.
    #[cfg(test)]
    kill_helper: AtomicBool,
    /// How many bodies a test killed so far (counted as they panic).
    #[cfg(test)]
    killed: std::sync::atomic::AtomicUsize,
}

impl Notifier {
    pub(crate) fn new(what: &'static str) -> Arc<Notifier> {
        Arc::new(Notifier {
            what,
            health: Mutex::new(Health::default()),
            #[cfg(test)]
            kill: AtomicBool::new(false),
            #[cfg(test)]
            hold: AtomicBool::new(false),
            #[cfg(test)]
            kill_helper: AtomicBool::new(false),
            #[cfg(test)]
            killed: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// The state now.
    pub(crate) fn health(&self) -> NotifierHealth {
        let h = self.health.lock();
        NotifierHealth {
            down: h.down.as_ref().map(|(c, _)| c.clone()),
            down_since: h.down.as_ref().map(|(_, t)| *t),
            restarts: h.restarts,
        }
    }

    /// True while notifications are down.
    #[cfg_attr(not(feature = "postgres"), allow(dead_code))] // PostgreSQL's listener asks it
    pub(crate) fn is_down(&self) -> bool {
        self.health.lock().down.is_some()
    }

    /// What a registration is told while notifications are down, `None` while they are served.
    #[cfg_attr(not(any(feature = "redis", feature = "zookeeper")), allow(dead_code))] // their watches ask
    pub(crate) fn refusal(&self) -> Option<String> {
        let h = self.health.lock();
        let (cause, _) = h.down.as_ref()?;
        Some(format!(
            "{}: release notifications are down ({cause}); the thread is restarted ({} restart(s) so far), \
             candidates poll meanwhile",
            self.what, h.restarts
        ))
    }

    /// `Err(Unavailable)` with the [`refusal`](Notifier::refusal) while notifications are down.
    #[cfg_attr(not(any(feature = "redis", feature = "zookeeper")), allow(dead_code))] // their watches ask
    pub(crate) fn available(&self) -> Result<()> {
        match self.refusal() {
            Some(message) => Err(Error::unavailable(message)),
            None => Ok(()),
        }
    }

    /// The "notifications" item of `check()`: failing while notifications are down.
    pub(crate) fn check_item(&self) -> CheckItem {
        let health = self.health();
        let (status, detail) = match (&health.down, health.down_since) {
            (Some(cause), since) => (
                CheckStatus::Fail,
                format!(
                    "{}: the notification thread died ({cause}){}; restarted {} time(s) so far, not serving yet: \
                     pushed releases are down, candidates poll",
                    self.what,
                    since.map(|t| format!(" {:?} ago", t.elapsed())).unwrap_or_default(),
                    health.restarts
                ),
            ),
            (None, _) if health.restarts == 0 => {
                (CheckStatus::Ok, format!("{}: the notification thread never died", self.what))
            }
            (None, _) => (
                CheckStatus::Ok,
                format!("{}: the notification thread serves again ({} restart(s) so far)", self.what, health.restarts),
            ),
        };
        CheckItem { name: "notifications".to_string(), status, detail }
    }

    /// The body serves (connected, listening): ends a degradation, logged once at info level.
    pub(crate) fn serving(&self) {
        let ended = {
            let mut h = self.health.lock();
            h.served = true;
            h.down.take().map(|(cause, since)| (cause, since, h.restarts))
        };
        if let Some((cause, since, restarts)) = ended {
            log::info!(
                "{}: release notifications are back after {:?} (the thread had died: {cause}; {restarts} restart(s) \
                 so far)",
                self.what,
                since.elapsed()
            );
        }
    }

    /// The body died with `cause`: marks notifications down. True when they were up (the
    /// degradation starts now); also whether the body had served since its last start.
    fn died(&self, cause: &str) -> (bool, bool) {
        let mut h = self.health.lock();
        let served = std::mem::take(&mut h.served);
        let first = h.down.is_none();
        if first {
            h.down = Some((cause.to_string(), Instant::now()));
        }
        (first, served)
    }

    fn restarting(&self) -> u64 {
        let mut h = self.health.lock();
        h.restarts += 1;
        h.restarts
    }

    /// One iteration of a body's loop: a no-op, except that a test's [`kill`](Notifier::kill)
    /// makes the body panic here.
    #[inline]
    pub(crate) fn checkpoint(&self) {
        #[cfg(test)]
        if self.kill.swap(false, Ordering::SeqCst) {
            self.killed.fetch_add(1, Ordering::SeqCst);
            panic!("{}: killed by a test", self.what);
        }
    }

    /// One iteration of the loop of a helper thread the body started (a Redis Cluster per-master
    /// subscriber, which the body itself watches): a no-op, except that a test's
    /// [`kill_helper`](Notifier::kill_helper) makes it panic here.
    #[inline]
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // Redis Cluster's sharded subscriber
    pub(crate) fn helper_checkpoint(&self) {
        #[cfg(test)]
        if self.kill_helper.swap(false, Ordering::SeqCst) {
            self.killed.fetch_add(1, Ordering::SeqCst);
            panic!("{}: helper killed by a test", self.what);
        }
    }

    /// Makes the next helper thread to reach its checkpoint panic.
    #[cfg(test)]
    pub(crate) fn kill_helper(&self) {
        self.kill_helper.store(true, Ordering::SeqCst);
    }

    /// Makes the running body panic at its next [`checkpoint`](Notifier::checkpoint).
    #[cfg(test)]
    pub(crate) fn kill(&self) {
        self.kill.store(true, Ordering::SeqCst);
    }

    /// How many bodies a test killed so far.
    #[cfg(test)]
    pub(crate) fn killed(&self) -> usize {
        self.killed.load(Ordering::SeqCst)
    }

    /// While held, a dead body is not restarted.
    #[cfg(test)]
    pub(crate) fn hold_restarts(&self, hold: bool) {
        self.hold.store(hold, Ordering::SeqCst);
    }

    fn held(&self) -> bool {
        #[cfg(test)]
        if self.hold.load(Ordering::SeqCst) {
            return true;
        }
        false
    }
}

/// The shared state a notification thread serves.
pub(crate) trait Supervised: Send + Sync + 'static {
    fn notifier(&self) -> &Notifier;

    /// The thread died (its notifier is already down): stop accepting registrations and wake
    /// every registered waiter, since a notification may have been lost. Sends outside any lock.
    fn died(&self);
}

/// Starts the thread `name`, running `body` under the supervision rule of the module docs. The
/// body returns when it finds its backend dropped (`weak` no longer upgrades); any other return,
/// and any panic, is a death.
///
/// # Errors
/// The thread could not be started.
pub(crate) fn supervise<T: Supervised>(
    name: &str,
    target: String,
    weak: Weak<T>,
    mut body: impl FnMut(&Weak<T>) + Send + 'static,
) -> std::io::Result<()> {
    thread::Builder::new().name(name.to_string()).spawn(move || {
        let mut backoff = MIN_RESTART;
        loop {
            let outcome = catch_unwind(AssertUnwindSafe(|| body(&weak)));
            let Some(shared) = weak.upgrade() else { return };
            let cause = match outcome {
                Ok(()) => "the thread ended".to_string(),
                Err(payload) => format!("the thread panicked: {}", panic_message(payload.as_ref())),
            };
            let notifier = shared.notifier();
            let (first, served) = notifier.died(&cause);
            shared.died();
            let what = notifier.what;
            drop(shared);
            if served {
                backoff = MIN_RESTART;
            }
            if first {
                log::error!(
                    "{what} for {target}: the notification thread died ({cause}); release notifications are down, \
                     candidates poll meanwhile; restarting it in {backoff:?}"
                );
            } else {
                log::debug!("{what} for {target}: the restarted notification thread died again ({cause})");
            }
            let until = Instant::now() + backoff;
            loop {
                let held = match weak.upgrade() {
                    Some(s) => s.notifier().held(),
                    None => return,
                };
                let left = until.saturating_duration_since(Instant::now());
                if left.is_zero() && !held {
                    break;
                }
                thread::sleep(if left.is_zero() { TICK } else { left.min(TICK) });
            }
            backoff = (backoff * 2).min(MAX_RESTART);
            let Some(shared) = weak.upgrade() else { return };
            let n = shared.notifier().restarting();
            drop(shared);
            log::debug!("{what} for {target}: restarting the notification thread (restart {n})");
        }
    })?;
    Ok(())
}

/// The message of a panic's payload.
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}

#[cfg(test)]
pub(crate) mod scenario;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::OnceLock;

    use crossbeam_channel::{unbounded, Sender};

    use super::*;

    /// Every record of this module, as (level, message).
    static RECORDS: Mutex<Vec<(log::Level, String)>> = Mutex::new(Vec::new());

    struct Capture;

    impl log::Log for Capture {
        fn enabled(&self, m: &log::Metadata<'_>) -> bool {
            m.target().starts_with(module_path!().trim_end_matches("::tests"))
        }
        fn log(&self, r: &log::Record<'_>) {
            if self.enabled(r.metadata()) {
                RECORDS.lock().push((r.level(), r.args().to_string()));
            }
        }
        fn flush(&self) {}
    }

    fn capture() {
        static ONCE: OnceLock<()> = OnceLock::new();
        ONCE.get_or_init(|| {
            if log::set_boxed_logger(Box::new(Capture)).is_ok() {
                log::set_max_level(log::LevelFilter::Trace);
            }
        });
    }

    fn records(what: &str, level: log::Level) -> Vec<String> {
        RECORDS.lock().iter().filter(|(l, m)| *l == level && m.contains(what)).map(|(_, m)| m.clone()).collect()
    }

    struct Fake {
        notifier: Arc<Notifier>,
        deaths: AtomicUsize,
        woken: Sender<()>,
    }

    impl Supervised for Fake {
        fn notifier(&self) -> &Notifier {
            &self.notifier
        }
        fn died(&self) {
            self.deaths.fetch_add(1, Ordering::SeqCst);
            let _ = self.woken.send(());
        }
    }

    /// Sends on drop: tells when the supervisor's closure (and so its thread) is gone.
    struct Gone(Sender<()>);

    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = self.0.send(());
        }
    }

    fn until(what: &str, mut ok: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ok() {
            assert!(Instant::now() < deadline, "{what}");
            thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn a_body_that_keeps_dying_is_restarted_with_a_growing_backoff_and_logged_once() {
        capture();
        let what = "fake notifier (keeps dying)";
        let (woken, wakes) = unbounded();
        let fake = Arc::new(Fake { notifier: Notifier::new(what), deaths: AtomicUsize::new(0), woken });
        let starts = Arc::new(Mutex::new(Vec::<Instant>::new()));
        let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (s, r, m) = (starts.clone(), running.clone(), most.clone());
        supervise("simba-test-notifier", "test".into(), Arc::downgrade(&fake), move |weak: &Weak<Fake>| {
            let now_running = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now_running, Ordering::SeqCst);
            let n = {
                let mut s = s.lock();
                s.push(Instant::now());
                s.len()
            };
            if n <= 4 {
                r.fetch_sub(1, Ordering::SeqCst);
                panic!("boom {n}");
            }
            let Some(f) = weak.upgrade() else { return };
            f.notifier.serving();
            drop(f);
            while weak.strong_count() > 0 {
                thread::sleep(Duration::from_millis(5));
            }
            r.fetch_sub(1, Ordering::SeqCst);
        })
        .unwrap();
        until("the fifth start serves", || starts.lock().len() == 5 && !fake.notifier.is_down());
        assert_eq!(fake.deaths.load(Ordering::SeqCst), 4, "each death woke the waiters");
        assert_eq!(wakes.try_iter().count(), 4);
        assert_eq!(fake.notifier.health().restarts, 4);
        assert_eq!(most.load(Ordering::SeqCst), 1, "never two bodies at once");
        let starts = starts.lock().clone();
        for (i, pair) in starts.windows(2).enumerate() {
            let least = MIN_RESTART * (1 << i);
            assert!(pair[1] - pair[0] >= least, "restart {} came after {:?} (< {least:?})", i + 1, pair[1] - pair[0]);
        }
        let errors = records(what, log::Level::Error);
        assert_eq!(errors.len(), 1, "the degradation is logged once: {errors:?}");
        assert!(errors[0].contains("boom 1") && errors[0].contains("candidates poll"), "{errors:?}");
        let back = records(what, log::Level::Info);
        assert_eq!(back.len(), 1, "its end is logged once: {back:?}");
        assert!(back[0].contains("are back"), "{back:?}");
        assert!(records(what, log::Level::Warn).is_empty());
    }

    #[test]
    fn a_dropped_backend_ends_its_supervisor_even_with_its_restart_held() {
        let (woken, _wakes) = unbounded();
        let fake =
            Arc::new(Fake { notifier: Notifier::new("fake notifier (dropped)"), deaths: AtomicUsize::new(0), woken });
        fake.notifier.hold_restarts(true);
        let (gone_tx, gone) = unbounded();
        let guard = Gone(gone_tx);
        supervise("simba-test-notifier", "test".into(), Arc::downgrade(&fake), move |_: &Weak<Fake>| {
            let _keep = &guard;
            panic!("dies at once");
        })
        .unwrap();
        until("down", || fake.notifier.is_down());
        assert!(fake.notifier.refusal().unwrap().contains("dies at once"));
        let weak = Arc::downgrade(&fake);
        drop(fake);
        assert!(gone.recv_timeout(Duration::from_secs(5)).is_ok(), "the supervisor thread ended with its backend");
        assert!(weak.upgrade().is_none(), "nothing kept the backend alive");
    }
}
