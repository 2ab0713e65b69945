//! Calls driven on the caller's own thread: a few connections, each on a current-thread tokio
//! runtime of its own that only the thread running a call drives (`block_on`), taken from a pool
//! for the call and put back after it.
//!
//! Why: a call spawned on the backend's runtime costs two thread wake-ups (the runtime's worker,
//! then the caller) on top of the server's answer, about 0.14 ms per call on the benchmark's
//! machine, which made an acquire and release 1.6 times the raw primitive's
//! (docs/benchmarks.md, "etcd"). Here the caller's thread sends, waits on the socket and reads
//! the answer itself, as the raw primitive and the PostgreSQL pool do.
//!
//! The watch stream, `check`'s calls to one member and callers inside a tokio runtime (where
//! `block_on` would panic) stay on the backend's runtime, and so does a call when every slot is
//! busy: no caller ever waits for a slot. A slot's connections are driven only during calls (so
//! they send no HTTP/2 keep-alive pings): a slot goes back to the pool only after a clean call,
//! answered by the first member it was sent to; after a timeout, a failure or a hedge it is
//! dropped with its connections, and the next call makes a new one; a call that no member
//! answered within its bound also drops the idle slots, so connections that died silently
//! (half-open) cost one call, not one per slot. The bound holds as on the backend's runtime: the
//! timer that ends the call is driven by the same `block_on`. A call that panics drops its slot.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::runtime::Runtime;
use tonic::transport::Endpoint;
use tonic::Status;

use super::client::{transient, AuthToken, Clients};
use super::route::{Pin, Resend, Route};

/// The most slots of one backend (calls beyond run on the backend's runtime).
const MAX_SLOTS: usize = 4;

/// One connection per member on a runtime of its own.
struct Slot {
    /// Always `Some` until dropped.
    rt: Option<Runtime>,
    route: Route,
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Never wait for its tasks (a drop may happen on any thread).
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// The slots of one backend.
pub(crate) struct Slots {
    idle: Mutex<Vec<Slot>>,
    made: AtomicUsize,
    endpoints: Vec<Endpoint>,
    token: AuthToken,
    user: Option<Arc<(String, String)>>,
    pin: Arc<Pin>,
}

/// A slot taken for a call: put back when the call was clean, else dropped (also when the call
/// panicked).
struct Taken<'a> {
    slots: &'a Slots,
    slot: Option<Slot>,
    clean: bool,
}

impl Drop for Taken<'_> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            if self.clean && !std::thread::panicking() {
                self.slots.idle.lock().push(slot);
            } else {
                drop(slot);
                self.slots.made.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }
}

impl Slots {
    /// Slots over `endpoints` (the members in order), with the backend's token, user and pin.
    pub(crate) fn new(
        endpoints: Vec<Endpoint>,
        token: AuthToken,
        user: Option<Arc<(String, String)>>,
        pin: Arc<Pin>,
    ) -> Slots {
        Slots { idle: Mutex::new(Vec::new()), made: AtomicUsize::new(0), endpoints, token, user, pin }
    }

    /// Runs `op` routed (`route.rs`) on the caller's thread, bounded by `bound`: `None` when it
    /// cannot run here (inside a tokio runtime, every slot busy, or no runtime could be made),
    /// else `Some(None)` when it did not finish within `bound`.
    pub(crate) fn run<T, F, Fut>(
        &self,
        op: &F,
        resend: Resend,
        bound: Duration,
        last: &Mutex<Option<Status>>,
    ) -> Option<Option<Result<T, Status>>>
    where
        F: Fn(Clients) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        if tokio::runtime::Handle::try_current().is_ok() {
            return None;
        }
        let mut taken = Taken { slots: self, slot: Some(self.take()?), clean: false };
        let slot = taken.slot.as_ref()?;
        let rt = slot.rt.as_ref()?;
        let first = slot.route.pinned().0;
        // The timeout is made inside `block_on`: its timer belongs to the slot's runtime.
        let answer = rt.block_on(async { tokio::time::timeout(bound, slot.route.call(op, resend, last)).await });
        // Clean: an answer (a server's refusal included), nothing failed on the way, and the
        // member that answered is the one it was sent to first.
        let failed = matches!(&answer, Ok(Err(s)) if transient(s));
        taken.clean = answer.is_ok() && !failed && last.lock().is_none() && slot.route.pinned().0 == first;
        drop(taken);
        if answer.is_err() {
            // No member answered within the bound: the idle slots' connections, opened as long
            // ago, are likely dead the same way (half-open after a network fault); each would
            // cost a whole bound. Fresh connections for the next calls.
            self.forget_idle();
        }
        Some(answer.ok())
    }

    /// Drops every idle slot.
    fn forget_idle(&self) {
        let idle = std::mem::take(&mut *self.idle.lock());
        self.made.fetch_sub(idle.len(), Ordering::SeqCst);
        drop(idle);
    }

    fn take(&self) -> Option<Slot> {
        if let Some(slot) = self.idle.lock().pop() {
            return Some(slot);
        }
        if self.made.fetch_add(1, Ordering::SeqCst) >= MAX_SLOTS {
            self.made.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let made = tokio::runtime::Builder::new_current_thread().enable_all().build().ok().map(|rt| {
            let members = {
                let _guard = rt.enter();
                self.endpoints
                    .iter()
                    .map(|ep| Clients::over(ep.connect_lazy(), self.token.clone(), self.user.clone()))
                    .collect()
            };
            Slot { route: Route::new(members, self.pin.clone()), rt: Some(rt) }
        });
        if made.is_none() {
            self.made.fetch_sub(1, Ordering::SeqCst);
        }
        made
    }
}
