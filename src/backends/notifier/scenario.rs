//! The test of the supervision rule against a real server, one scenario for every backend: the
//! notification thread is killed (it panics at its next [`Notifier::checkpoint`]) with its restart
//! held, then let go.
//!
//! Shown, in order: a waiter registered before the kill is woken; a registration while the thread
//! is dead is answered "cannot push" at once (never a silent `true`), and says why; `check()`
//! fails its "notifications" item with the cause; once restarted, `check()` passes again and a
//! release is pushed to a new registration — after the release (nothing was pending before it)
//! and before the registration could go stale (the only other wake a registration gets on the SPI:
//! no poll runs here).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};

use super::Notifier;
use crate::backend::{Acquire, CheckStatus, LeaseBackend, Notification, Topic};
use crate::error::{ErrorKind, Result};
use crate::types::Name;

/// How long a step may take before the test fails (far below nothing: these are bounds, not
/// expectations).
pub(crate) const PATIENCE: Duration = Duration::from_secs(20);
/// A registration not renewed for 10 s is woken by the stale sweep (Redis, PostgreSQL): a push
/// must arrive well before that.
pub(crate) const BEFORE_STALE: Duration = Duration::from_secs(8);

/// How a backend answers a registration it cannot serve (its `watch` contract).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CannotPush {
    /// `Err(Unavailable)` (Redis, ZooKeeper).
    Unavailable,
    /// `Ok(false)` (PostgreSQL).
    False,
}

pub(crate) struct Case<'a> {
    pub(crate) backend: &'a dyn LeaseBackend,
    pub(crate) notifier: &'a Notifier,
    /// Makes the running thread panic (sets the kill flag, and wakes the thread if it blocks).
    pub(crate) kill: &'a dyn Fn(),
    pub(crate) cannot_push: CannotPush,
    /// Redis: the first registration of a channel is woken once its subscription is confirmed.
    pub(crate) confirms: bool,
    pub(crate) name: Name,
}

pub(crate) fn until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !ok() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        thread::sleep(Duration::from_millis(5));
    }
}

impl Case<'_> {
    /// Registers `tx` for the lease and returns once the registration is served by the thread
    /// (on Redis: after the confirmation's wake, registered again), with nothing pending on `rx`:
    /// the instant of the last registration (its stale sweep comes 10 s after).
    pub(crate) fn arm(&self, tx: &Sender<Notification>, rx: &Receiver<Notification>) -> Instant {
        let topic = Topic::Lease(self.name.clone());
        let r = self.backend.watch(&topic, tx);
        assert!(matches!(r, Ok(true)), "a registration while the thread serves: {r:?}");
        if self.confirms {
            let woken = rx.recv_timeout(PATIENCE);
            assert!(woken.is_ok(), "the subscription's confirmation did not wake the registration: {woken:?}");
            let r = self.backend.watch(&topic, tx);
            assert!(matches!(r, Ok(true)), "registered again once subscribed: {r:?}");
        }
        let armed = Instant::now();
        assert!(rx.try_recv().is_err(), "nothing is pending once armed");
        armed
    }

    fn notifications(&self) -> (CheckStatus, String) {
        let items = self.backend.check();
        let item = items.iter().find(|i| i.name == "notifications");
        let item = item.unwrap_or_else(|| panic!("check() has no notifications item: {items:?}"));
        (item.status, item.detail.clone())
    }

    pub(crate) fn run(&self) {
        let b = self.backend;
        let topic = Topic::Lease(self.name.clone());
        let holder = b.open_session(Duration::from_secs(60), "notifier-test").unwrap().id;
        let token = match b.acquire(&holder, &self.name).unwrap() {
            Acquire::Acquired { token, .. } => token,
            Acquire::Busy => panic!("a fresh name is busy"),
        };

        // Killed, its restart held: the waiter registered before is woken, a registration now is
        // refused at once, and check() says why.
        let (tx, rx) = unbounded();
        let armed = self.arm(&tx, &rx);
        self.notifier.hold_restarts(true);
        (self.kill)();
        until("the thread panics at its checkpoint", || self.notifier.killed() == 1);
        // Woken by the death, not by the stale sweep.
        let woken = rx.recv_timeout(BEFORE_STALE.saturating_sub(armed.elapsed()));
        let (tx_down, _rx_down) = unbounded();
        let answer: Result<bool> = b.watch(&topic, &tx_down);
        match (self.cannot_push, &answer) {
            (CannotPush::False, Ok(false)) => {}
            (CannotPush::Unavailable, Err(e)) if e.kind() == ErrorKind::Unavailable => {
                let m = crate::display_chain(e);
                assert!(
                    m.contains("release notifications are down")
                        && m.contains("killed by a test")
                        && m.contains("poll"),
                    "the refusal says what is down, why, and that candidates poll: {m}"
                );
            }
            _ => panic!("a registration while the notification thread is dead answered {answer:?}"),
        }
        assert!(woken.is_ok(), "the waiter registered before the kill was not woken: {woken:?}");
        let (status, detail) = self.notifications();
        assert_eq!(status, CheckStatus::Fail, "check() while the thread is dead: {detail}");
        assert!(detail.contains("killed by a test"), "check() names the cause: {detail}");
        let health = self.notifier.health();
        assert!(health.down.as_deref().is_some_and(|c| c.contains("killed by a test")), "{health:?}");

        // Let go: restarted, serving, check() passes, and a release is pushed again.
        self.notifier.hold_restarts(false);
        until("the restarted thread serves", || !self.notifier.is_down());
        let (status, detail) = self.notifications();
        assert_eq!(status, CheckStatus::Ok, "check() once restarted: {detail}");
        assert!(self.notifier.health().restarts >= 1);
        let (tx2, rx2) = unbounded();
        let armed = self.arm(&tx2, &rx2);
        b.release(&holder, &self.name, token).unwrap();
        let pushed = rx2.recv_timeout(BEFORE_STALE.saturating_sub(armed.elapsed()));
        assert_eq!(
            pushed.ok(),
            Some(Notification::Released(self.name.clone())),
            "the release is pushed to a registration made after the restart, before the stale sweep"
        );
        b.close_session(&holder).unwrap();
    }
}
