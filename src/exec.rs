//! Bounded backend calls: a blocking backend call that may not run on its caller's thread (see
//! [`LeaseBackend::call_bound`](crate::LeaseBackend::call_bound)) runs on a worker thread and the
//! caller waits at most until its deadline. A hung driver call (e.g. the sync `postgres` client
//! against a paused server, which has no read timeout) then costs a parked worker thread, never a
//! missed deadline.
//!
//! Workers are pooled: an idle worker is reused, a new one is started when none is idle, and a
//! worker idle for a while exits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::LazyLock;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded, Receiver, RecvTimeoutError, Sender};
use parking_lot::Mutex;

type Job = Box<dyn FnOnce() + Send + 'static>;

struct Pool {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Workers waiting for a job and not yet reserved by a submitter.
    idle: AtomicUsize,
}

static POOL: LazyLock<Pool> = LazyLock::new(|| {
    let (tx, rx) = unbounded();
    Pool { tx, rx, idle: AtomicUsize::new(0) }
});

const IDLE_EXIT: Duration = Duration::from_secs(30);

fn worker(first: Job) {
    first();
    let pool = &*POOL;
    loop {
        pool.idle.fetch_add(1, Ordering::AcqRel);
        loop {
            match pool.rx.recv_timeout(IDLE_EXIT) {
                Ok(job) => {
                    job();
                    break;
                }
                Err(RecvTimeoutError::Timeout) => {
                    // Leave only if nobody reserved this worker meanwhile.
                    let left = pool.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
                    if left.is_ok() {
                        return;
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// Runs `job` on a pooled worker thread, without waiting.
pub(crate) fn spawn(job: impl FnOnce() + Send + 'static) {
    let pool = &*POOL;
    let reserved = pool.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
    let job: Job = Box::new(job);
    if reserved {
        if let Err(e) = pool.tx.send(job) {
            // Cannot happen (the pool owns both ends); run the job on a fresh thread anyway.
            start_worker(e.into_inner());
        }
    } else {
        start_worker(job);
    }
}

fn start_worker(job: Job) {
    let spawned = thread::Builder::new().name("simba-call".into()).spawn(move || worker(job));
    if let Err(e) = spawned {
        log::error!("cannot start a simba worker thread: {e}");
    }
}

/// Runs `f` on a worker and waits for its result until `deadline`.
///
/// Returns `None` when the deadline passed first; the call then goes on in its worker and its
/// result is handed to `late` (e.g. to undo an acquire nobody waits for any more).
pub(crate) fn call_until<T, F, L>(deadline: Instant, f: F, late: L) -> Option<T>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
    L: FnOnce(T) + Send + 'static,
{
    let (tx, rx) = bounded::<T>(1);
    // `waiting` is true while the caller still waits; the worker checks it under the same lock it
    // uses to hand the result over, so a result is either delivered or passed to `late`, never lost.
    let slot = std::sync::Arc::new(Mutex::new(true));
    let worker_slot = slot.clone();
    spawn(move || {
        let value = f();
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
    use std::sync::Arc;

    #[test]
    fn returns_result_in_time() {
        let r = call_until(Instant::now() + Duration::from_secs(5), || 42, |_| {});
        assert_eq!(r, Some(42));
    }

    #[test]
    fn abandons_a_hung_call_and_hands_its_late_result_over() {
        let (release_tx, release_rx) = bounded::<()>(0);
        let late_seen = Arc::new(AtomicBool::new(false));
        let seen = late_seen.clone();
        let start = Instant::now();
        let r = call_until(
            start + Duration::from_millis(50),
            move || {
                let _ = release_rx.recv();
                7
            },
            move |v| {
                assert_eq!(v, 7);
                seen.store(true, Ordering::SeqCst);
            },
        );
        assert_eq!(r, None);
        assert!(!late_seen.load(Ordering::SeqCst));
        drop(release_tx);
        let until = Instant::now() + Duration::from_secs(10);
        while !late_seen.load(Ordering::SeqCst) && Instant::now() < until {
            thread::sleep(Duration::from_millis(5));
        }
        assert!(late_seen.load(Ordering::SeqCst));
    }

    #[test]
    fn many_concurrent_calls_each_get_a_worker() {
        let (gate_tx, gate_rx) = bounded::<()>(0);
        let results: Vec<_> = (0..8)
            .map(|i| {
                let rx = gate_rx.clone();
                thread::spawn(move || {
                    call_until(
                        Instant::now() + Duration::from_secs(10),
                        move || {
                            let _ = rx.recv();
                            i
                        },
                        |_| {},
                    )
                })
            })
            .collect();
        thread::sleep(Duration::from_millis(50));
        drop(gate_tx);
        drop(gate_rx);
        let mut got: Vec<_> = results.into_iter().map(|h| h.join().unwrap().unwrap()).collect();
        got.sort();
        assert_eq!(got, (0..8).collect::<Vec<_>>());
    }
}
