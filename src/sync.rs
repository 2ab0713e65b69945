//! The synchronisation primitives, threads and clock the runtime uses, in one place.
//!
//! Normal builds (every build without `--cfg simba_explore`, `--all-features` included) re-export
//! the real ones unchanged: `parking_lot`'s locks, `crossbeam-channel`'s channels and `select!`,
//! `std::thread`, `std::sync::LazyLock` and `Instant::now()`.
//!
//! With the `explore` feature **and** `--cfg simba_explore` (see docs/testing.md, "Schedule
//! explorer"), they are replaced by versions built on [shuttle](https://docs.rs/shuttle), so that
//! shuttle's scheduler decides every interleaving of the runtime's threads and can replay one
//! from its printed schedule. Shuttle does not model time (its timed waits never time out), so
//! this module adds a virtual clock: [`now`] is a fixed base plus an offset that only the test
//! moves ([`explore::advance`](crate::explore::advance)); a timed wait ends when the clock passes
//! its deadline, and an advance wakes every waiter. Interleavings therefore come from thread
//! scheduling alone, never from wall-clock speed.
//!
//! Explore-mode waiting is one "world" generation counter per execution: every condition-variable
//! notification, channel send or disconnect and clock advance bumps it, and a waiter sleeps until
//! it changes (reading it before releasing its lock, so no wake-up is lost). That costs spurious
//! wake-ups, which every caller tolerates (they re-check their condition, as with any condvar).
//! Known differences, all in explore mode only: `bounded(n)` channels never block a sender (the
//! runtime uses them only for one result or as drop signals); `select!` takes the first ready arm
//! in order, and accepts only the forms the runtime uses (two or three `recv` arms and a
//! `default(timeout)`, arms separated by commas).

#[cfg(not(all(feature = "explore", simba_explore)))]
mod real {
    use std::time::{Duration, Instant};

    pub(crate) use crossbeam_channel::{bounded, never, select, unbounded, Iter, Receiver, Sender};
    /// Named only by in-crate tests (`SessionInner::engine_for_test`).
    #[cfg(test)]
    pub(crate) use parking_lot::MutexGuard;
    pub(crate) use parking_lot::{Condvar, Mutex};
    pub(crate) use std::sync::LazyLock as Lazy;
    pub(crate) use std::thread;

    /// The current instant (the monotonic clock).
    #[inline]
    pub(crate) fn now() -> Instant {
        Instant::now()
    }

    /// How long an idle pool worker waits for a job before it exits.
    #[inline]
    pub(crate) const fn idle_exit(d: Duration) -> Duration {
        d
    }

    /// A uniformly random number in `0..max` (`max` > 0).
    #[inline]
    pub(crate) fn random_below(max: u64) -> u64 {
        rand::random_range(0..max)
    }

    /// A random 128-bit id.
    #[inline]
    pub(crate) fn random_id() -> u128 {
        rand::random()
    }
}

#[cfg(not(all(feature = "explore", simba_explore)))]
pub(crate) use real::*;

#[cfg(all(feature = "explore", simba_explore))]
pub(crate) use explore::*;

/// A bug fixed in issue #14 whose old behaviour the schedule explorer can switch back on, or a
/// rule of the engine the simulation can break on purpose to show it is caught (see
/// [`reintroduced`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum Bug {
    /// Finding 1: `resign()` gave up the campaign's term in one lock section and released it in a
    /// second one, and `begin_release` kept a held entry of the term being released.
    ResignSplit = 1,
    /// Finding 2: a keep-alive reply applied after the local deadline extended it (expiry undone).
    LateAliveRevives = 2,
    /// Finding 3: `elected()` ran after the engine transition that adopted the term, and ignored
    /// the session's end.
    ElectedAfterExpiry = 4,
    /// Finding 5: a re-attach that raced the application's resign or leave was kept (no detach).
    ReattachKept = 8,
    /// Finding 6 (found by the shipped-runtime simulation): a campaign attempt that started late
    /// (queued behind stalled calls) sent its acquire without asking whether its campaign was
    /// still on, after `resign()` or the election's drop had returned.
    LateAttempt = 16,
    /// Not a finding: a break the shipped-runtime simulation must see (`watch-live`). A
    /// `Coordinator`'s member watch ends with the session current when it started (as a
    /// session's watch does), although its rustdoc promises a stream that outlives session
    /// replacements.
    CoordinatorWatchEndsWithSession = 1024,
    /// Finding 2 of the old model-based simulation (removed), Redis Cluster: the backend's
    /// books let a late acquire abandon (and release) a term another acquire of the same session
    /// had already reported, and reported a term an earlier late acquire had abandoned.
    // Switched in the Redis backend only.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    AbandonConfirmed = 2048,
    /// Not a bug that ever shipped: a deliberately broken argument for the shipped simulation's
    /// Redis Cluster model to find — Cluster acquires send the lease node the lease duration in
    /// seconds where the script takes milliseconds, so the term runs out long before the holder's
    /// local deadline.
    // Switched in the Redis backend only.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    LeaseSeconds = 4096,
    /// A deliberately broken rule (never a bug that shipped): deadlines are counted from the
    /// instant a reply arrived instead of the instant its call was sent (keep-alives, acquires,
    /// the session's open), so a slow reply makes the local deadline outlive the backend's.
    DeadlineFromReplyInstant = 32,
    /// A deliberately broken rule: the engine judges deadlines with a drift of 0, so a backend
    /// clock running faster than the client's (within the configured `drift`) ends the session
    /// and its terms before the local deadline does.
    NoDrift = 64,
    /// A deliberately broken rule: `Membership::is_member()` ignores the session's local deadline
    /// (it asks only whether the engine still counts the session active and the group held), so
    /// a session past its deadline that the renewal thread has not yet expired still claims the
    /// membership.
    MemberIgnoresDeadline = 128,
    /// A deliberately broken rule: the engine ignores the groups a keep-alive reports, so a
    /// membership the backend lost (a leave that landed after a re-join) is never detected nor
    /// re-joined, and a join that landed late is never left.
    GroupReportsIgnored = 256,
    /// Finding 3 of issue #36 (the shipped simulation's `no-spurious-loss` sees it with the
    /// sessions renewing every half lease): a term that lasts with its session
    /// (`TermRemaining::WithSession`) adopted while a keep-alive was in flight, which that reply
    /// did not list, kept the deadline of the keep-alive before and was reported lost at it.
    WithSessionKeepsOldDeadline = 8192,
    /// Finding 1 of issue #36, Redis Cluster: an acquire (or join) of a name a renewal had
    /// scheduled to drop from the session's index did not unschedule it, so the renewal after
    /// removed the new term from the index and the one after that reported it lost.
    // Switched in the Redis backend only.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    DropOutlivesReacquire = 16384,
    /// A deliberately broken rule (never shipped) for the simulation's `partition-balanced`: the
    /// partition assignment has no cap (⌈count / members⌉), so a member keeps every partition
    /// it owns however many members join.
    PartitionNoCap = 32768,
    /// A deliberately broken rule (never shipped) for `partition-covered`: the assignment's fill
    /// stops one partition short (an off-by-one), so the last partition is never assigned.
    PartitionFillSkipsLast = 65536,
    /// A deliberately broken rule (never shipped) for `partition-sticky`: the assignment ignores
    /// the current owners (no keep step: plain bounded-load rendezvous from scratch), so a
    /// membership change moves partitions between members that stay.
    PartitionOwnersIgnored = 131072,
    /// A deliberately broken rule (never shipped) for `partition-live`: a planned hand-off (a
    /// release after `Revoking`, `Partition::release`, `close`) is reported `Lost` instead of
    /// `Revoked`.
    PartitionRevokedAsLost = 262144,
}

/// True when the explorer switched `bug`'s old behaviour back on. Always `false` outside the
/// explorer build (a constant the compiler folds away: no default build can turn a bug back on).
#[cfg(not(all(feature = "explore", simba_explore)))]
#[inline(always)]
pub(crate) const fn reintroduced(_bug: Bug) -> bool {
    false
}

// The one-line guards. A shipped module switches a bug back on only through these, each call on
// one line (scripts/guard-lines checks it): the choice between the old and the fixed rule is made
// here, so no shipped function grows a branch for it. In a normal build `reintroduced` is the
// constant `false` and each folds to its fixed rule.

/// `new`, or `old` when the explorer switched `bug` back on (both are evaluated: plain values).
#[inline(always)]
pub(crate) fn pick<T>(bug: Bug, old: T, new: T) -> T {
    if reintroduced(bug) {
        old
    } else {
        new
    }
}

/// Like [`pick`], running only the chosen closure.
#[inline(always)]
pub(crate) fn pick_with<T>(bug: Bug, old: impl FnOnce() -> T, new: impl FnOnce() -> T) -> T {
    if reintroduced(bug) {
        old()
    } else {
        new()
    }
}

/// Like [`pick_with`], handing `arg` to the chosen closure (for two rules that both need
/// `&mut self`).
#[inline(always)]
pub(crate) fn pick_on<A, T>(bug: Bug, arg: A, old: impl FnOnce(A) -> T, new: impl FnOnce(A) -> T) -> T {
    if reintroduced(bug) {
        old(arg)
    } else {
        new(arg)
    }
}

/// Runs `fix`, a step the old behaviour did not take, unless the explorer switched `bug` back on.
#[inline(always)]
pub(crate) fn fixed_only<T>(bug: Bug, fix: impl FnOnce() -> T) -> Option<T> {
    pick_with(bug, || None, || Some(fix()))
}

/// Runs `old`, a step only the old behaviour took, when the explorer switched `bug` back on.
#[inline(always)]
pub(crate) fn old_only<T>(bug: Bug, old: impl FnOnce() -> T) -> Option<T> {
    pick_with(bug, || Some(old()), || None)
}

#[cfg(all(feature = "explore", simba_explore))]
pub(crate) mod explore {
    use std::collections::VecDeque;
    use std::fmt;
    use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
    use std::sync::{Arc, OnceLock};
    use std::time::{Duration, Instant};

    pub(crate) use crossbeam_channel::{RecvError, RecvTimeoutError, SendError, TryRecvError};
    pub(crate) use shuttle::thread;

    use super::Bug;

    type SMutex<T> = shuttle::sync::Mutex<T>;
    type SGuard<'a, T> = shuttle::sync::MutexGuard<'a, T>;

    /// Per-execution state (shuttle drops it at the end of each explored schedule).
    struct World {
        generation: SMutex<u64>,
        changed: shuttle::sync::Condvar,
        offset_nanos: AtomicU64,
        bugs: AtomicU32,
        ids: AtomicU64,
        progress: AtomicU64,
    }

    shuttle::lazy_static! {
        static ref WORLD: World = World {
            generation: SMutex::new(0),
            changed: shuttle::sync::Condvar::new(),
            offset_nanos: AtomicU64::new(0),
            bugs: AtomicU32::new(0),
            ids: AtomicU64::new(0),
            progress: AtomicU64::new(0),
        };
    }

    fn base() -> Instant {
        static BASE: OnceLock<Instant> = OnceLock::new();
        *BASE.get_or_init(Instant::now)
    }

    /// The virtual now: a fixed base plus what the test advanced.
    pub(crate) fn now() -> Instant {
        base() + Duration::from_nanos(WORLD.offset_nanos.load(Ordering::SeqCst))
    }

    /// Moves the virtual clock forward by `d` and wakes every waiter.
    pub(crate) fn advance(d: Duration) {
        let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        WORLD.offset_nanos.fetch_add(nanos, Ordering::SeqCst);
        bump();
    }

    pub(crate) fn reintroduce(bug: Bug) {
        WORLD.bugs.fetch_or(bug as u32, Ordering::SeqCst);
    }

    pub(crate) fn reintroduced(bug: Bug) -> bool {
        WORLD.bugs.load(Ordering::SeqCst) & bug as u32 != 0
    }

    /// Idle pool workers exit at once: an explored execution ends only when all its threads
    /// returned, and no clock advance is left to end a worker's idle wait.
    pub(crate) const fn idle_exit(_d: Duration) -> Duration {
        Duration::ZERO
    }

    /// Explorer runs are deterministic per schedule: shuttle's own random source.
    pub(crate) fn random_below(max: u64) -> u64 {
        use shuttle::rand::Rng;
        shuttle::rand::thread_rng().gen_range(0..max)
    }

    /// Ids that repeat in every execution (the n-th id of each is the same, mixed so that they
    /// spread over Redis Cluster slots), drawing nothing from shuttle's random source.
    pub(crate) fn random_id() -> u128 {
        let mix = |n: u64| {
            let mut z = n.wrapping_add(0x9E37_79B9_7F4A_7C15);
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        let n = WORLD.ids.fetch_add(1, Ordering::SeqCst);
        (u128::from(mix(2 * n)) << 64) | u128::from(mix(2 * n + 1))
    }

    /// Counts a step taken by an explored thread through this module (a lock taken, a channel
    /// used, a wait entered or woken): see [`progress`].
    fn step() {
        WORLD.progress.fetch_add(1, Ordering::Relaxed);
    }

    /// How many steps this execution's threads have taken so far: a clock driver that yields and
    /// sees it unchanged knows the others had nothing to do (every thread the scheduler could
    /// pick was the driver itself), so moving time then starves nobody. A plain atomic, not one
    /// of shuttle's, so reading and bumping it is no scheduling point.
    pub(crate) fn progress() -> u64 {
        WORLD.progress.load(Ordering::Relaxed)
    }

    fn generation() -> u64 {
        *WORLD.generation.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn bump() {
        let mut g = WORLD.generation.lock().unwrap_or_else(|e| e.into_inner());
        *g += 1;
        WORLD.changed.notify_all();
    }

    /// Sleeps until the world changed since `seen` or the clock reached `deadline`; true when the
    /// deadline passed.
    fn wait_change(seen: u64, deadline: Option<Instant>) -> bool {
        let mut g = WORLD.generation.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            step();
            if deadline.is_some_and(|d| now() >= d) {
                return true;
            }
            if *g != seen {
                return false;
            }
            g = WORLD.changed.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A lazily initialised static, one value per explored execution.
    macro_rules! lazy {
        ($(#[$m:meta])* static $name:ident: $t:ty = $init:expr;) => {
            shuttle::lazy_static! { $(#[$m])* static ref $name: $t = $init; }
        };
    }
    pub(crate) use lazy;

    // ----- locks -----

    /// `parking_lot::Mutex`'s interface over shuttle's mutex (poisoning ignored).
    #[derive(Default)]
    pub struct Mutex<T: ?Sized> {
        inner: SMutex<T>,
    }

    impl<T> Mutex<T> {
        pub(crate) const fn new(value: T) -> Mutex<T> {
            Mutex { inner: SMutex::new(value) }
        }
    }

    impl<T: ?Sized> Mutex<T> {
        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            step();
            MutexGuard { lock: &self.inner, guard: Some(self.inner.lock().unwrap_or_else(|e| e.into_inner())) }
        }
    }

    impl<T: ?Sized + fmt::Debug> fmt::Debug for Mutex<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Mutex")
        }
    }

    pub struct MutexGuard<'a, T: ?Sized> {
        lock: &'a SMutex<T>,
        /// `None` only inside a condition-variable wait.
        guard: Option<SGuard<'a, T>>,
    }

    impl<T: ?Sized> std::ops::Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.guard.as_ref().expect("a MutexGuard is held outside condvar waits")
        }
    }

    impl<T: ?Sized> std::ops::DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.guard.as_mut().expect("a MutexGuard is held outside condvar waits")
        }
    }

    /// Whether a timed wait ended at its deadline.
    #[derive(Debug, Clone, Copy)]
    pub struct WaitTimeoutResult(bool);

    impl WaitTimeoutResult {
        pub(crate) fn timed_out(&self) -> bool {
            self.0
        }
    }

    /// `parking_lot::Condvar`'s interface: waits on the world generation (see the module docs).
    #[derive(Debug, Default)]
    pub struct Condvar;

    impl Condvar {
        pub(crate) const fn new() -> Condvar {
            Condvar
        }

        pub(crate) fn notify_all(&self) -> usize {
            bump();
            0
        }

        pub(crate) fn notify_one(&self) -> bool {
            bump();
            false
        }

        fn wait_inner<T: ?Sized>(&self, g: &mut MutexGuard<'_, T>, deadline: Option<Instant>) -> bool {
            // Read before unlocking: a notification after the caller's check changes it.
            let seen = generation();
            drop(g.guard.take());
            let timed_out = wait_change(seen, deadline);
            g.guard = Some(g.lock.lock().unwrap_or_else(|e| e.into_inner()));
            timed_out
        }

        pub(crate) fn wait<T: ?Sized>(&self, g: &mut MutexGuard<'_, T>) {
            self.wait_inner(g, None);
        }

        pub(crate) fn wait_until<T: ?Sized>(&self, g: &mut MutexGuard<'_, T>, deadline: Instant) -> WaitTimeoutResult {
            WaitTimeoutResult(self.wait_inner(g, Some(deadline)))
        }

        pub(crate) fn wait_for<T: ?Sized>(&self, g: &mut MutexGuard<'_, T>, timeout: Duration) -> WaitTimeoutResult {
            WaitTimeoutResult(self.wait_inner(g, now().checked_add(timeout)))
        }
    }

    // ----- channels -----

    struct ChanState<T> {
        queue: VecDeque<T>,
        senders: usize,
        receivers: usize,
    }

    struct Chan<T> {
        st: SMutex<ChanState<T>>,
    }

    impl<T> Chan<T> {
        fn lock(&self) -> SGuard<'_, ChanState<T>> {
            step();
            self.st.lock().unwrap_or_else(|e| e.into_inner())
        }
    }

    fn chan<T>(senders: usize) -> Arc<Chan<T>> {
        Arc::new(Chan { st: SMutex::new(ChanState { queue: VecDeque::new(), senders, receivers: 1 }) })
    }

    /// A channel (unbounded: see the module docs for `bounded`).
    pub(crate) fn unbounded<T>() -> (Sender<T>, Receiver<T>) {
        let c = chan(1);
        (Sender(c.clone()), Receiver(c))
    }

    /// Like [`unbounded`]: a sender never blocks in explore mode.
    pub(crate) fn bounded<T>(_cap: usize) -> (Sender<T>, Receiver<T>) {
        unbounded()
    }

    /// A receiver that never receives and never disconnects.
    pub(crate) fn never<T>() -> Receiver<T> {
        Receiver(chan(1))
    }

    pub struct Sender<T>(Arc<Chan<T>>);

    impl<T> Sender<T> {
        pub fn send(&self, v: T) -> Result<(), SendError<T>> {
            {
                let mut st = self.0.lock();
                if st.receivers == 0 {
                    return Err(SendError(v));
                }
                st.queue.push_back(v);
            }
            bump();
            Ok(())
        }
    }

    impl<T> Clone for Sender<T> {
        fn clone(&self) -> Self {
            self.0.lock().senders += 1;
            Sender(self.0.clone())
        }
    }

    impl<T> Drop for Sender<T> {
        fn drop(&mut self) {
            self.0.lock().senders -= 1;
            bump();
        }
    }

    impl<T> fmt::Debug for Sender<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Sender")
        }
    }

    pub struct Receiver<T>(Arc<Chan<T>>);

    impl<T> Receiver<T> {
        /// `Some(Ok)`: a message; `Some(Err)`: empty and disconnected; `None`: empty.
        pub fn poll(&self) -> Option<Result<T, RecvError>> {
            let mut st = self.0.lock();
            match st.queue.pop_front() {
                Some(v) => Some(Ok(v)),
                None if st.senders == 0 => Some(Err(RecvError)),
                None => None,
            }
        }

        pub fn recv_deadline(&self, deadline: Instant) -> Result<T, RecvTimeoutError> {
            self.recv_until(Some(deadline))
        }

        fn recv_until(&self, deadline: Option<Instant>) -> Result<T, RecvTimeoutError> {
            loop {
                let seen = generation();
                match self.poll() {
                    Some(Ok(v)) => return Ok(v),
                    Some(Err(_)) => return Err(RecvTimeoutError::Disconnected),
                    None => {}
                }
                if wait_change(seen, deadline) {
                    return match self.poll() {
                        Some(Ok(v)) => Ok(v),
                        Some(Err(_)) => Err(RecvTimeoutError::Disconnected),
                        None => Err(RecvTimeoutError::Timeout),
                    };
                }
            }
        }

        pub fn recv_timeout(&self, timeout: Duration) -> Result<T, RecvTimeoutError> {
            self.recv_until(now().checked_add(timeout))
        }

        pub fn recv(&self) -> Result<T, RecvError> {
            self.recv_until(None).map_err(|_| RecvError)
        }

        pub fn try_recv(&self) -> Result<T, TryRecvError> {
            match self.poll() {
                Some(Ok(v)) => Ok(v),
                Some(Err(_)) => Err(TryRecvError::Disconnected),
                None => Err(TryRecvError::Empty),
            }
        }

        pub fn try_iter(&self) -> impl Iterator<Item = T> + '_ {
            std::iter::from_fn(move || self.try_recv().ok())
        }

        pub fn iter(&self) -> Iter<'_, T> {
            Iter(self)
        }

        pub fn len(&self) -> usize {
            self.0.lock().queue.len()
        }

        pub fn is_empty(&self) -> bool {
            self.len() == 0
        }
    }

    impl<T> Clone for Receiver<T> {
        fn clone(&self) -> Self {
            self.0.lock().receivers += 1;
            Receiver(self.0.clone())
        }
    }

    impl<T> Drop for Receiver<T> {
        fn drop(&mut self) {
            self.0.lock().receivers -= 1;
        }
    }

    impl<T> fmt::Debug for Receiver<T> {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("Receiver")
        }
    }

    /// Blocking iterator over a receiver's messages.
    pub struct Iter<'a, T>(&'a Receiver<T>);

    impl<T> Iterator for Iter<'_, T> {
        type Item = T;
        fn next(&mut self) -> Option<T> {
            self.0.recv().ok()
        }
    }

    /// A receiver `select!` can poll: the explorer's own, or a crossbeam one (the backend's
    /// notification channel, whose type is in the public `LeaseBackend::watch`; the explorer's
    /// backend pushes nothing, so polling it on each world change is enough).
    pub trait Selectable<T> {
        fn poll_select(&self) -> Option<Result<T, RecvError>>;
    }

    impl<T> Selectable<T> for Receiver<T> {
        fn poll_select(&self) -> Option<Result<T, RecvError>> {
            self.poll()
        }
    }

    impl<T> Selectable<T> for crossbeam_channel::Receiver<T> {
        fn poll_select(&self) -> Option<Result<T, RecvError>> {
            match self.try_recv() {
                Ok(v) => Some(Ok(v)),
                Err(TryRecvError::Disconnected) => Some(Err(RecvError)),
                Err(TryRecvError::Empty) => None,
            }
        }
    }

    /// Runs `ready` on every world change until it returns true (an arm fired) or `timeout`
    /// passed (false).
    pub(crate) fn select_loop(timeout: Duration, mut ready: impl FnMut() -> bool) -> bool {
        let deadline = now().checked_add(timeout);
        loop {
            let seen = generation();
            if ready() {
                return true;
            }
            if wait_change(seen, deadline) {
                return ready();
            }
        }
    }

    /// `crossbeam_channel::select!` for the forms the runtime uses (see the module docs).
    macro_rules! explore_select {
        (recv($r1:expr) -> $p1:pat => $b1:expr, recv($r2:expr) -> $p2:pat => $b2:expr, default($t:expr) => $bd:expr $(,)?) => {{
            use $crate::sync::Selectable as _;
            let (r1, r2) = (&$r1, &$r2);
            let (mut v1, mut v2) = (None, None);
            $crate::sync::select_loop($t, || {
                v1 = r1.poll_select();
                if v1.is_some() {
                    return true;
                }
                v2 = r2.poll_select();
                v2.is_some()
            });
            match (v1, v2) {
                (Some($p1), _) => $b1,
                (None, Some($p2)) => $b2,
                (None, None) => $bd,
            }
        }};
        (recv($r1:expr) -> $p1:pat => $b1:expr, recv($r2:expr) -> $p2:pat => $b2:expr, recv($r3:expr) -> $p3:pat => $b3:expr, default($t:expr) => $bd:expr $(,)?) => {{
            use $crate::sync::Selectable as _;
            let (r1, r2, r3) = (&$r1, &$r2, &$r3);
            let (mut v1, mut v2, mut v3) = (None, None, None);
            $crate::sync::select_loop($t, || {
                v1 = r1.poll_select();
                if v1.is_some() {
                    return true;
                }
                v2 = r2.poll_select();
                if v2.is_some() {
                    return true;
                }
                v3 = r3.poll_select();
                v3.is_some()
            });
            match (v1, v2, v3) {
                (Some($p1), _, _) => $b1,
                (None, Some($p2), _) => $b2,
                (None, None, Some($p3)) => $b3,
                (None, None, None) => $bd,
            }
        }};
    }
    pub(crate) use explore_select as select;
}

/// A lazily initialised static (`std::sync::LazyLock`; one value per explored execution in the
/// explorer build).
#[cfg(not(all(feature = "explore", simba_explore)))]
macro_rules! lazy {
    ($(#[$m:meta])* static $name:ident: $t:ty = $init:expr;) => {
        $(#[$m])* static $name: $crate::sync::Lazy<$t> = $crate::sync::Lazy::new(|| $init);
    };
}
#[cfg(not(all(feature = "explore", simba_explore)))]
pub(crate) use lazy;
