//! Bounded backend calls: a blocking backend call that may not run on its caller's thread (see
//! [`LeaseBackend::call_bound`](crate::backend::LeaseBackend::call_bound)) runs on a worker thread and the
//! caller waits at most until its deadline. A hung driver call (e.g. a third-party backend whose
//! driver has no read timeout, against a paused server) then costs a parked worker thread, never
//! a missed deadline.
//!
//! Workers are pooled and **bounded**: an idle worker is reused, a new one is started while fewer
//! than the limit run, and a worker idle for a while exits. The limit is the process's (the pool
//! is shared by every session): the largest
//! [`worker_threads`](crate::options::SessionOptionsBuilder::worker_threads) of the sessions
//! opened so far, [`DEFAULT_WORKER_THREADS`] before any. When every worker is busy (a backend
//! that hangs parks one per call):
//! - a call somebody waits for ([`call_until`]: user calls, opening a session) fails at once
//!   with `Unavailable`, saying so — it would only wait for its deadline;
//! - a call nobody waits for ([`spawn`]: keep-alives, campaign attempts, background releases and
//!   leaves) is queued and runs when a worker is free. It is never dropped: the engine counts it
//!   in flight until it returns. Loss detection does not wait for it (the renewal thread's timer
//!   expires leases and the session at the local deadline).
//!
//! A worker thread that cannot be started leaves its job queued (never dropped) for the next
//! worker; a waited-for call fails at once with `Unavailable` instead.

use std::collections::VecDeque;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{self, bounded, thread, Condvar, Mutex};

use crate::error::{Error, ErrorKind, Result};
use crate::observe;
use crate::options::DEFAULT_WORKER_THREADS;

use super::guard::panic_message;

type Job = Box<dyn FnOnce() + Send + 'static>;

/// Starts a worker thread running `run`; replaced in tests to make it fail.
type Starter = fn(Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()>;

fn start_thread(run: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()> {
    thread::Builder::new().name("simba-call".into()).spawn(run).map(|_| ())
}

#[derive(Default)]
struct PoolState {
    /// Jobs not yet taken by a worker, with their submission number.
    queue: VecDeque<(u64, Job)>,
    next_id: u64,
    /// Worker threads alive (busy or idle), counting those being started.
    workers: usize,
    /// Workers waiting for a job.
    idle: usize,
}

struct Pool {
    st: Mutex<PoolState>,
    cond: Condvar,
    /// The largest limit asked for (0: none yet, the default applies).
    limit: AtomicUsize,
    idle_exit: Duration,
    start: Starter,
}

sync::lazy! {
    static POOL: Arc<Pool> = Pool::new(sync::idle_exit(Duration::from_secs(30)), start_thread);
}

/// How a submission may end when every worker is busy.
#[derive(Clone, Copy, PartialEq, Eq)]
enum WhenFull {
    /// Queue the job (nobody waits for it; it must not be lost).
    Queue,
    /// Refuse it (its caller would only wait for its deadline).
    Refuse,
}

/// Why a job was refused.
enum Refused {
    Exhausted(usize),
    CannotStart(std::io::Error),
}

impl Pool {
    fn new(idle_exit: Duration, start: Starter) -> Arc<Pool> {
        Arc::new(Pool {
            st: Mutex::new(PoolState::default()),
            cond: Condvar::new(),
            limit: AtomicUsize::new(0),
            idle_exit,
            start,
        })
    }

    fn limit(&self) -> usize {
        match self.limit.load(Ordering::Acquire) {
            0 => DEFAULT_WORKER_THREADS,
            n => n,
        }
    }

    fn submit(self: &Arc<Self>, job: Job, when_full: WhenFull) -> std::result::Result<(), (Job, Refused)> {
        let mut st = self.st.lock();
        let id = st.next_id;
        st.next_id += 1;
        if st.idle > st.queue.len() {
            st.queue.push_back((id, job));
            self.cond.notify_one();
            return Ok(());
        }
        let limit = self.limit();
        if st.workers >= limit {
            if when_full == WhenFull::Refuse {
                return Err((job, Refused::Exhausted(limit)));
            }
            st.queue.push_back((id, job));
            return Ok(());
        }
        // Queued before its worker starts (no other submission can take that worker): if the
        // thread cannot start, the job waits for the next worker, or is refused.
        st.workers += 1;
        st.queue.push_back((id, job));
        drop(st);
        let Err(e) = self.start_worker() else { return Ok(()) };
        if when_full == WhenFull::Queue {
            log::error!("cannot start a simba worker thread (the call waits for a free worker): {e}");
            return Ok(());
        }
        let mut st = self.st.lock();
        let ours = st.queue.iter().position(|(i, _)| *i == id).and_then(|at| st.queue.remove(at));
        match ours {
            Some((_, job)) => Err((job, Refused::CannotStart(e))),
            // A worker that finished its job took it meanwhile: it runs.
            None => Ok(()),
        }
    }

    /// Starts one worker (already counted in `workers`); uncounts it when it cannot start.
    fn start_worker(self: &Arc<Self>) -> std::io::Result<()> {
        let pool = self.clone();
        let r = (self.start)(Box::new(move || pool.work()));
        if r.is_err() {
            self.st.lock().workers -= 1;
        }
        r
    }

    fn work(&self) {
        let mut st = self.st.lock();
        loop {
            if let Some((_, job)) = st.queue.pop_front() {
                drop(st);
                // A job that panics ends; its worker goes on (the pool never shrinks by a panic).
                // Backend calls never get here panicking (`guard.rs` makes their panic their
                // error); this covers anything else a job runs.
                observe::pool_busy(1.0);
                if let Err(payload) = catch_unwind(AssertUnwindSafe(job)) {
                    log::error!("a simba worker's job panicked: {}", panic_message(&*payload));
                }
                observe::pool_busy(-1.0);
                st = self.st.lock();
                continue;
            }
            st.idle += 1;
            let timed_out = self.cond.wait_for(&mut st, self.idle_exit).timed_out();
            st.idle -= 1;
            if timed_out && st.queue.is_empty() {
                st.workers -= 1;
                return;
            }
        }
    }

    /// `(workers, idle, queued)`.
    #[cfg(test)]
    fn counts(&self) -> (usize, usize, usize) {
        let st = self.st.lock();
        (st.workers, st.idle, st.queue.len())
    }
}

/// Raises the process's worker limit to at least `n` (a session opened with
/// `worker_threads(n)`).
pub(crate) fn admit(n: usize) {
    POOL.limit.fetch_max(n, Ordering::AcqRel);
}

/// Runs `job` on a pooled worker thread, without waiting; queued while every worker is busy.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) {
    // `Queue` never refuses.
    let _ = POOL.submit(Box::new(job), WhenFull::Queue);
}

/// Runs `f` on a worker and waits for its result until `deadline`.
///
/// Returns `None` when the deadline passed first; the call then goes on in its worker and its
/// result is handed to `late` (e.g. to undo an acquire nobody waits for any more). Returns
/// `Some(Err(Unavailable))` at once, without running `f`, when every worker is busy or no worker
/// thread can be started.
pub(crate) fn call_until<T, F, L>(deadline: Instant, f: F, late: L) -> Option<Result<T>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
    L: FnOnce(Result<T>) + Send + 'static,
{
    call_until_on(&POOL, deadline, f, late)
}

fn call_until_on<T, F, L>(pool: &Arc<Pool>, deadline: Instant, f: F, late: L) -> Option<Result<T>>
where
    T: Send + 'static,
    F: FnOnce() -> Result<T> + Send + 'static,
    L: FnOnce(Result<T>) + Send + 'static,
{
    let (tx, rx) = bounded::<Result<T>>(1);
    // `waiting` is true while the caller still waits; the worker checks it under the same lock it
    // uses to hand the result over, so a result is either delivered or passed to `late`, never lost.
    let slot = Arc::new(Mutex::new(true));
    let worker_slot = slot.clone();
    let job: Job = Box::new(move || {
        // A panic is the call's error: its caller (or `late`) always gets a result.
        let value = catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|payload| {
            let message = format!("a backend call panicked: {}", panic_message(&*payload));
            log::error!("{message}");
            Err(Error::new(ErrorKind::Backend, message))
        });
        let guard = worker_slot.lock();
        if *guard {
            // The caller waits (or is just giving up: it re-checks the channel under the lock).
            if let Err(e) = tx.send(value) {
                drop(guard);
                late(e.into_inner());
            }
        } else {
            drop(guard);
            late(value);
        }
    });
    if let Err((_, why)) = pool.submit(job, WhenFull::Refuse) {
        return Some(Err(match why {
            Refused::Exhausted(n) => Error::new(
                ErrorKind::Unavailable,
                format!(
                    "the worker pool is exhausted: all {n} worker threads are busy with backend calls that have not \
                     returned (a hanging backend parks one per call); raise SessionOptions::worker_threads \
                     (SIMBA_WORKER_THREADS) or use a backend that bounds its own calls"
                ),
            ),
            Refused::CannotStart(e) => {
                Error::new(ErrorKind::Unavailable, "cannot start a worker thread for the backend call").with_source(e)
            }
        }));
    }
    match rx.recv_deadline(deadline) {
        Ok(v) => Some(v),
        Err(_) => {
            let mut guard = slot.lock();
            *guard = false;
            // The worker may have sent just before we took the lock.
            let v = rx.try_recv().ok();
            drop(guard);
            v
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicBool;

    fn pool(limit: usize) -> Arc<Pool> {
        let p = Pool::new(Duration::from_secs(30), start_thread);
        p.limit.store(limit, Ordering::SeqCst);
        p
    }

    /// A gate that hung jobs wait on; opened when dropped.
    struct Gate {
        _open_on_drop: sync::Sender<()>,
        wait: sync::Receiver<()>,
    }

    impl Gate {
        fn new() -> Gate {
            let (tx, rx) = bounded(0);
            Gate { _open_on_drop: tx, wait: rx }
        }
        fn waiter(&self) -> impl FnOnce() + Send + 'static {
            let rx = self.wait.clone();
            move || {
                let _ = rx.recv();
            }
        }
    }

    /// Waits until `cond` holds: the pool's own bookkeeping, reached without any timing assumption.
    fn until(p: &Pool, cond: impl Fn((usize, usize, usize)) -> bool) {
        let end = sync::now() + Duration::from_secs(10);
        while !cond(p.counts()) {
            assert!(sync::now() < end, "pool state {:?}", p.counts());
            thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn returns_result_in_time() {
        let r = call_until(sync::now() + Duration::from_secs(5), || Ok(42), |_| {});
        assert_eq!(r.map(|r| r.unwrap()), Some(42));
    }

    #[test]
    fn abandons_a_hung_call_and_hands_its_late_result_over() {
        let p = pool(4);
        let (release_tx, release_rx) = bounded::<()>(0);
        let late_seen = Arc::new(AtomicBool::new(false));
        let seen = late_seen.clone();
        let start = sync::now();
        let r = call_until_on(
            &p,
            start + Duration::from_millis(50),
            move || {
                let _ = release_rx.recv();
                Ok(7)
            },
            move |v| {
                assert_eq!(v.unwrap(), 7);
                seen.store(true, Ordering::SeqCst);
            },
        );
        assert!(r.is_none());
        assert!(!late_seen.load(Ordering::SeqCst));
        drop(release_tx);
        until(&p, |(_, idle, _)| idle == 1);
        assert!(late_seen.load(Ordering::SeqCst));
    }

    #[test]
    fn concurrent_calls_each_get_a_worker_up_to_the_limit() {
        let p = pool(8);
        let gate = Gate::new();
        let results: Vec<_> = (0..8)
            .map(|i| {
                let (p, wait) = (p.clone(), gate.waiter());
                thread::spawn(move || {
                    call_until_on(
                        &p,
                        sync::now() + Duration::from_secs(10),
                        move || {
                            wait();
                            Ok(i)
                        },
                        |_| {},
                    )
                })
            })
            .collect();
        until(&p, |(workers, idle, queued)| workers == 8 && idle == 0 && queued == 0);
        drop(gate);
        let mut got: Vec<_> = results.into_iter().map(|h| h.join().unwrap().unwrap().unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
    }

    #[test]
    fn an_exhausted_pool_refuses_waited_calls_at_once_and_queues_the_others() {
        let p = pool(2);
        let gate = Gate::new();
        for _ in 0..2 {
            let wait = gate.waiter();
            let hung = move || {
                wait();
                Ok(())
            };
            assert!(call_until_on(&p, sync::now(), hung, |_| {}).is_none());
        }
        until(&p, |(workers, idle, queued)| workers == 2 && idle == 0 && queued == 0);
        let refused = call_until_on(&p, sync::now() + Duration::from_secs(60), || Ok(()), |_| {});
        let err = refused.expect("refused at once").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert!(err.to_string().contains("worker pool is exhausted: all 2 worker threads"), "{err}");
        assert!(err.to_string().contains("worker_threads"), "{err}");
        // A call nobody waits for is queued, not dropped and not given a third thread.
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        p.submit(Box::new(move || r.store(true, Ordering::SeqCst)), WhenFull::Queue).ok().unwrap();
        assert_eq!(p.counts(), (2, 0, 1));
        drop(gate);
        until(&p, |(workers, idle, queued)| workers == 2 && idle == 2 && queued == 0);
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn a_job_whose_thread_cannot_start_stays_queued_for_the_next_worker() {
        fn fail(_: Box<dyn FnOnce() + Send + 'static>) -> std::io::Result<()> {
            Err(std::io::Error::other("no threads left"))
        }
        let failing = Pool::new(Duration::from_secs(30), fail);
        let ran = Arc::new(AtomicBool::new(false));
        let r = ran.clone();
        failing.submit(Box::new(move || r.store(true, Ordering::SeqCst)), WhenFull::Queue).ok().unwrap();
        // Not dropped (its pending count would leak), not counted as a worker.
        assert_eq!(failing.counts(), (0, 0, 1));
        let refused = call_until_on(&failing, sync::now() + Duration::from_secs(60), || Ok(()), |_| {});
        let err = refused.expect("refused at once").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable);
        assert_eq!(failing.counts(), (0, 0, 1));
        // A worker that starts later runs it.
        let p = Arc::new(Pool {
            st: Mutex::new(std::mem::take(&mut *failing.st.lock())),
            cond: Condvar::new(),
            limit: AtomicUsize::new(1),
            idle_exit: Duration::from_secs(30),
            start: start_thread,
        });
        p.submit(Box::new(|| {}), WhenFull::Queue).ok().unwrap();
        until(&p, |(_, idle, queued)| idle == 1 && queued == 0);
        assert!(ran.load(Ordering::SeqCst));
    }

    #[test]
    fn idle_workers_exit_and_the_pool_starts_new_ones() {
        let p = Pool::new(Duration::from_millis(20), start_thread);
        p.limit.store(2, Ordering::SeqCst);
        assert_eq!(call_until_on(&p, sync::now() + Duration::from_secs(10), || Ok(1), |_| {}).unwrap().unwrap(), 1);
        until(&p, |(workers, _, _)| workers == 0);
        assert_eq!(call_until_on(&p, sync::now() + Duration::from_secs(10), || Ok(2), |_| {}).unwrap().unwrap(), 2);
    }

    /// Finding 5 of issue #36: a call that panics is its caller's error (never a lost result
    /// taken for a timeout), and its worker stays in the pool: with a limit of one worker, the
    /// next calls still run. Before, the worker died still counted, and every later waited-for
    /// call was refused as if the pool were exhausted.
    #[test]
    fn a_panicking_call_is_its_callers_error_and_its_worker_stays() {
        let p = pool(1);
        let r =
            call_until_on(&p, sync::now() + Duration::from_secs(60), || -> Result<()> { panic!("driver bug") }, |_| {});
        let err = r.expect("the caller gets the panic as the call's result").unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Backend);
        assert!(err.to_string().contains("panicked: driver bug"), "{err}");
        p.submit(Box::new(|| panic!("a job nobody waits for")), WhenFull::Queue).ok().unwrap();
        for i in 0..3 {
            // The one worker is back waiting for a job (a call while it is busy is refused).
            until(&p, |(workers, idle, queued)| workers == 1 && idle == 1 && queued == 0);
            let r = call_until_on(&p, sync::now() + Duration::from_secs(60), move || Ok(i), |_| {});
            assert_eq!(r.expect("answered").expect("run, not refused"), i);
        }
        until(&p, |(workers, idle, queued)| workers == 1 && idle == 1 && queued == 0);
    }

    /// A panicking call whose caller gave up hands its error to `late` (which ends its engine
    /// accounting), as any late result.
    #[test]
    fn a_late_panicking_call_hands_its_error_to_late() {
        let p = pool(2);
        let (go_tx, go_rx) = bounded::<()>(0);
        let (late_tx, late_rx) = bounded::<Result<()>>(1);
        let r = call_until_on(
            &p,
            sync::now(),
            move || -> Result<()> {
                let _ = go_rx.recv();
                panic!("late driver bug")
            },
            move |v| {
                let _ = late_tx.send(v);
            },
        );
        assert!(r.is_none());
        drop(go_tx);
        let late = late_rx.recv_timeout(Duration::from_secs(10)).expect("late was told");
        assert!(late.unwrap_err().to_string().contains("panicked: late driver bug"));
    }

    #[test]
    fn the_limit_is_the_largest_asked_for() {
        let p = pool(0);
        assert_eq!(p.limit(), DEFAULT_WORKER_THREADS);
        p.limit.fetch_max(3, Ordering::SeqCst);
        p.limit.fetch_max(2, Ordering::SeqCst);
        assert_eq!(p.limit(), 3);
    }
}
