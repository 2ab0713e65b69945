//! The coordinator's bookkeeping, and every decision of a re-attach: which session is current,
//! whether the coordinator is closed, and where each durable election and membership is
//! attached. Each operation is one call here, under the coordinator's one lock; the coordinator
//! only performs what the call returns (attach, detach, close, wake the supervisor) after
//! unlocking.
//!
//! An attach is bracketed: [`Registry::begin`] (or a plan from [`Registry::plan`]) marks the item
//! busy at the generation of the session it goes to, the attach runs unlocked, and
//! [`Registry::end`] judges it. While an item is busy no one else attaches it, so two attaches
//! of one item (the application's and the supervisor's) never race; an attach that lands after
//! its session was replaced is handed to the supervisor, which moves the item to the current
//! session (finding 5c).

use std::sync::{Arc, Weak};

/// Something the application can end on its own (resign, leave) while the coordinator moves it.
pub(super) trait Durable {
    /// True once the application resigned or left.
    fn ended(&self) -> bool;
}

/// Where a durable item is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum At {
    /// Being attached to the session of this generation (by the application or the supervisor).
    Busy(u64),
    /// Attached to the session of this generation.
    Attached(u64),
    /// Waiting for the supervisor to attach it to the current session.
    Pending,
}

struct Entry<T> {
    item: Weak<T>,
    at: At,
}

/// How an attach went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Outcome {
    /// The item is attached to the session.
    Attached,
    /// The session had ended before the attach (expired or closed).
    SessionGone,
    /// Any other failure.
    Failed,
}

/// What to do after an attach.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Attached to the current session: nothing to do.
    Done,
    /// The item waits for the supervisor (its session was replaced meanwhile, or the attach is
    /// retried): wake it.
    Retry,
    /// The application ended the item while it was being attached, or the coordinator closed:
    /// undo the attach on that session (when it succeeded). The item is forgotten.
    Detach,
    /// The item is forgotten (a failure the caller reports).
    Dropped,
}

/// The durable items of one kind.
pub(super) struct Registry<T> {
    entries: Vec<Entry<T>>,
}

impl<T> Default for Registry<T> {
    fn default() -> Self {
        Registry { entries: Vec::new() }
    }
}

impl<T: Durable> Registry<T> {
    fn find(&self, item: &Arc<T>) -> Option<usize> {
        self.entries.iter().position(|e| std::ptr::eq(e.item.as_ptr(), Arc::as_ptr(item)))
    }

    /// Forgets items whose handles and sessions are gone or that the application ended.
    fn prune(&mut self) {
        self.entries.retain(|e| e.item.upgrade().is_some_and(|i| !i.ended()));
    }

    /// The application attaches a new item to the session of `generation`.
    pub(super) fn begin(&mut self, item: &Arc<T>, generation: u64) {
        self.entries.push(Entry { item: Arc::downgrade(item), at: At::Busy(generation) });
    }

    /// Items to attach to the session of `generation`, marked busy: every item not attached to
    /// it and not being attached, or (`pending_only`) only those waiting for the supervisor.
    pub(super) fn plan(&mut self, generation: u64, pending_only: bool) -> Vec<Arc<T>> {
        self.prune();
        let mut plan = Vec::new();
        for e in &mut self.entries {
            let due = match e.at {
                At::Pending => true,
                At::Attached(g) => !pending_only && g != generation,
                At::Busy(_) => false,
            };
            if let (true, Some(item)) = (due, e.item.upgrade()) {
                e.at = At::Busy(generation);
                plan.push(item);
            }
        }
        plan
    }

    /// Judges an attach of `item` to the session of `generation`. `current` is the generation of
    /// the current session (`None` while it is being replaced), `ended` whether the application
    /// ended the item (read after the attach), `retry_failures` whether a failure is retried by
    /// the supervisor (its re-attaches) or reported (the application's own call).
    pub(super) fn end(
        &mut self,
        item: &Arc<T>,
        generation: u64,
        current: Option<u64>,
        closed: bool,
        outcome: Outcome,
        retry_failures: bool,
    ) -> Verdict {
        let Some(i) = self.find(item) else {
            return if outcome == Outcome::Attached { Verdict::Detach } else { Verdict::Dropped };
        };
        if closed || item.ended() {
            self.entries.remove(i);
            return if outcome == Outcome::Attached { Verdict::Detach } else { Verdict::Dropped };
        }
        match outcome {
            Outcome::Attached if current == Some(generation) => {
                self.entries[i].at = At::Attached(generation);
                Verdict::Done
            }
            Outcome::Attached | Outcome::SessionGone => {
                self.entries[i].at = At::Pending;
                Verdict::Retry
            }
            Outcome::Failed if retry_failures => {
                self.entries[i].at = At::Pending;
                Verdict::Retry
            }
            Outcome::Failed => {
                self.entries.remove(i);
                Verdict::Dropped
            }
        }
    }

    /// Items attached to the session of `generation` that the application ended meanwhile,
    /// forgotten now: their end may have gone to the previous session (an election's resign
    /// reads its session before it marks itself resigned), so the coordinator detaches them from
    /// this one.
    pub(super) fn ended_on(&mut self, generation: u64) -> Vec<Arc<T>> {
        let mut ended = Vec::new();
        self.entries.retain(|e| match e.item.upgrade() {
            Some(item) if item.ended() => {
                if e.at == At::Attached(generation) {
                    ended.push(item);
                }
                false
            }
            Some(_) => true,
            None => false,
        });
        ended
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

/// The coordinator's state: its current session `S` and its durable elections `E` and
/// memberships `M`.
pub(super) struct State<S, E, M> {
    current: Option<S>,
    /// Bumped by every installed session.
    generation: u64,
    closed: bool,
    pub(super) elections: Registry<E>,
    pub(super) memberships: Registry<M>,
}

/// Why there is no session to attach to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum NoSession {
    /// The coordinator is closed.
    Closed,
    /// The current session expired and a replacement is being opened.
    Replacing,
}

impl<S: Clone, E: Durable, M: Durable> State<S, E, M> {
    /// A coordinator whose first session is `first`.
    pub(super) fn new(first: S) -> Self {
        State {
            current: Some(first),
            generation: 1,
            closed: false,
            elections: Registry::default(),
            memberships: Registry::default(),
        }
    }

    /// The current session and its generation.
    pub(super) fn session(&self) -> Result<(S, u64), NoSession> {
        if self.closed {
            return Err(NoSession::Closed);
        }
        self.current.clone().map(|s| (s, self.generation)).ok_or(NoSession::Replacing)
    }

    pub(super) fn current(&self) -> Option<&S> {
        self.current.as_ref()
    }

    /// The generation of the current session, `None` while there is none.
    pub(super) fn current_generation(&self) -> Option<u64> {
        self.current.as_ref().map(|_| self.generation)
    }

    pub(super) fn is_closed(&self) -> bool {
        self.closed
    }

    /// The current session ended (`is_it` recognises it): forget it and return it.
    pub(super) fn lost(&mut self, is_it: impl Fn(&S) -> bool) -> Option<S> {
        if self.current.as_ref().is_some_and(is_it) {
            self.current.take()
        } else {
            None
        }
    }

    /// Installs a replacement session: its generation and what to attach to it, or `Err(s)`
    /// when the coordinator was closed meanwhile (the caller closes `s`).
    #[allow(clippy::type_complexity)]
    pub(super) fn install(&mut self, s: S) -> Result<(u64, Vec<Arc<E>>, Vec<Arc<M>>), S> {
        if self.closed {
            return Err(s);
        }
        self.current = Some(s);
        self.generation += 1;
        let g = self.generation;
        Ok((g, self.elections.plan(g, false), self.memberships.plan(g, false)))
    }

    /// Closes the coordinator: no session is installed any more; returns the current one.
    pub(super) fn close(&mut self) -> Option<S> {
        self.closed = true;
        self.current.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[derive(Default)]
    struct Item(AtomicBool);

    impl Durable for Item {
        fn ended(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    type St = State<&'static str, Item, Item>;

    #[test]
    fn an_attach_that_lands_after_a_replacement_is_handed_to_the_supervisor() {
        let mut st = St::new("s1");
        let m = Arc::new(Item::default());
        let (_, g1) = st.session().unwrap();
        st.memberships.begin(&m, g1);
        // s1 expires and s2 is installed while the attach to s1 is in flight: the plan skips it.
        assert_eq!(st.lost(|s| *s == "s1"), Some("s1"));
        let (g2, _, plan) = st.install("s2").unwrap();
        assert!(plan.is_empty());
        let v = st.memberships.end(&m, g1, st.current_generation(), false, Outcome::Attached, false);
        assert_eq!(v, Verdict::Retry);
        let plan = st.memberships.plan(g2, true);
        assert_eq!(plan.len(), 1);
        assert_eq!(st.memberships.end(&m, g2, Some(g2), false, Outcome::Attached, true), Verdict::Done);
    }

    #[test]
    fn an_attach_to_a_session_lost_before_its_replacement_is_planned_for_the_replacement() {
        let mut st = St::new("s1");
        let m = Arc::new(Item::default());
        st.memberships.begin(&m, 1);
        assert!(st.lost(|s| *s == "s1").is_some());
        assert_eq!(st.memberships.end(&m, 1, st.current_generation(), false, Outcome::Attached, false), Verdict::Retry);
        let (_, _, plan) = st.install("s2").unwrap();
        assert_eq!(plan.len(), 1);
    }

    #[test]
    fn an_item_ended_during_its_reattach_is_detached_and_forgotten() {
        let mut st = St::new("s1");
        let e = Arc::new(Item::default());
        st.elections.begin(&e, 1);
        assert_eq!(st.elections.end(&e, 1, Some(1), false, Outcome::Attached, false), Verdict::Done);
        st.lost(|_| true);
        let (g2, plan, _) = st.install("s2").unwrap();
        assert_eq!(plan.len(), 1);
        e.0.store(true, Ordering::SeqCst);
        assert_eq!(st.elections.end(&e, g2, Some(g2), false, Outcome::Attached, true), Verdict::Detach);
        assert_eq!(st.elections.len(), 0);
    }

    #[test]
    fn an_item_ended_after_its_reattach_went_elsewhere_is_swept_from_the_current_session() {
        let mut st = St::new("s1");
        let e = Arc::new(Item::default());
        st.elections.begin(&e, 1);
        st.elections.end(&e, 1, Some(1), false, Outcome::Attached, false);
        st.lost(|_| true);
        let (g2, _, _) = st.install("s2").unwrap();
        assert_eq!(st.elections.end(&e, g2, Some(g2), false, Outcome::Attached, true), Verdict::Done);
        // The application's resign read the old session before the attach, and marked the
        // election resigned after the check above.
        e.0.store(true, Ordering::SeqCst);
        let swept = st.elections.ended_on(g2);
        assert_eq!(swept.len(), 1);
        assert!(st.elections.ended_on(g2).is_empty());
    }

    #[test]
    fn no_session_is_installed_after_close() {
        let mut st = St::new("s1");
        let m = Arc::new(Item::default());
        st.memberships.begin(&m, 1);
        st.lost(|_| true);
        assert_eq!(st.close(), None);
        assert_eq!(st.install("s2").map(|_| ()), Err("s2"));
        assert_eq!(st.session().map(|_| ()), Err(NoSession::Closed));
        assert_eq!(st.memberships.end(&m, 1, None, st.is_closed(), Outcome::Attached, false), Verdict::Detach);
    }

    #[test]
    fn a_failed_application_attach_is_forgotten_and_a_failed_reattach_retried() {
        let mut st = St::new("s1");
        let (a, b) = (Arc::new(Item::default()), Arc::new(Item::default()));
        st.memberships.begin(&a, 1);
        assert_eq!(st.memberships.end(&a, 1, Some(1), false, Outcome::Failed, false), Verdict::Dropped);
        st.memberships.begin(&b, 1);
        assert_eq!(st.memberships.end(&b, 1, Some(1), false, Outcome::Failed, true), Verdict::Retry);
        assert_eq!(st.memberships.len(), 1);
        assert_eq!(st.memberships.plan(1, true).len(), 1);
    }

    #[test]
    fn dropped_handles_are_forgotten() {
        let mut st = St::new("s1");
        let m = Arc::new(Item::default());
        st.memberships.begin(&m, 1);
        st.memberships.end(&m, 1, Some(1), false, Outcome::Attached, false);
        drop(m);
        st.lost(|_| true);
        let (_, _, plan) = st.install("s2").unwrap();
        assert!(plan.is_empty());
        assert_eq!(st.memberships.len(), 0);
    }
}
