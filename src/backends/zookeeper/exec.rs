//! Driving `zookeeper-client` futures from blocking code, with a deadline.
//!
//! The client's own tasks run on `async-global-executor` (its runtime feature); this module only
//! waits for their replies on the calling thread. It is the backend's single bridge from async to
//! blocking code, so the async runtime stays an internal detail.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, Thread};
use std::time::Instant;

struct ThreadWaker(Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

/// Polls `fut` on this thread until it completes or `deadline` passes (`None`). On `None` the
/// future is dropped; a request it had already sent may still take effect on the server.
pub(crate) fn run_until<F: Future>(fut: F, deadline: Instant) -> Option<F::Output> {
    let waker = Waker::from(Arc::new(ThreadWaker(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut fut = pin!(fut);
    loop {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return Some(v);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        thread::park_timeout(deadline - now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn ready_and_timeout() {
        let far = Instant::now() + Duration::from_secs(5);
        assert_eq!(run_until(async { 7 }, far), Some(7));
        let t0 = Instant::now();
        let r = run_until(std::future::pending::<()>(), t0 + Duration::from_millis(50));
        assert!(r.is_none());
        assert!(t0.elapsed() >= Duration::from_millis(50));
    }

    #[test]
    fn woken_from_another_thread() {
        let (tx, rx) = futures::channel::oneshot::channel::<u32>();
        let h = thread::spawn(move || {
            thread::sleep(Duration::from_millis(20));
            let _ = tx.send(3);
        });
        let r = run_until(rx, Instant::now() + Duration::from_secs(5));
        assert_eq!(r, Some(Ok(3)));
        h.join().unwrap();
    }
}
