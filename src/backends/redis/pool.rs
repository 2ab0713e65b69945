//! A small blocking connection pool: at most `max` connections, checked out until a deadline,
//! discarded after a transport error (a fresh connection replaces it on the next checkout).

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

pub(crate) struct Pool<C> {
    state: Mutex<State<C>>,
    freed: Condvar,
    max: usize,
}

struct State<C> {
    idle: Vec<C>,
    open: usize,
}

impl<C> Pool<C> {
    pub(crate) fn new(max: usize) -> Pool<C> {
        Pool { state: Mutex::new(State { idle: Vec::new(), open: 0 }), freed: Condvar::new(), max: max.max(1) }
    }

    /// An idle connection, a new one made by `connect(time left)`, or — when `max` are in use — the
    /// first one returned before `deadline`.
    ///
    /// # Errors
    /// `Unavailable` when none is free before `deadline`; whatever `connect` returns.
    pub(crate) fn get(
        &self,
        deadline: Instant,
        what: &str,
        connect: impl FnOnce(Duration) -> Result<C>,
    ) -> Result<Pooled<'_, C>> {
        let mut state = self.state.lock();
        loop {
            if let Some(conn) = state.idle.pop() {
                return Ok(Pooled { pool: self, conn: Some(conn), reused: true });
            }
            if state.open < self.max {
                state.open += 1;
                break;
            }
            if self.freed.wait_until(&mut state, deadline).timed_out() {
                return Err(Error::unavailable(format!(
                    "all {} connections to {what} stayed busy until the query timeout",
                    self.max
                )));
            }
        }
        drop(state);
        let left = deadline.saturating_duration_since(Instant::now());
        let made = if left.is_zero() {
            Err(Error::unavailable(format!("query timeout reached before connecting to {what}")))
        } else {
            connect(left)
        };
        match made {
            Ok(conn) => Ok(Pooled { pool: self, conn: Some(conn), reused: false }),
            Err(e) => {
                self.forget();
                Err(e)
            }
        }
    }

    fn forget(&self) {
        self.state.lock().open -= 1;
        self.freed.notify_one();
    }

    fn put(&self, conn: C) {
        self.state.lock().idle.push(conn);
        self.freed.notify_one();
    }
}

/// A checked-out connection; returns to the pool on drop unless [`Pooled::discard`]ed.
pub(crate) struct Pooled<'a, C> {
    pool: &'a Pool<C>,
    conn: Option<C>,
    reused: bool,
}

impl<C> Pooled<'_, C> {
    /// True when the connection was idle in the pool (it may have been closed by the server
    /// meanwhile), false when it was just opened.
    pub(crate) fn reused(&self) -> bool {
        self.reused
    }

    /// Closes the connection instead of returning it (after an I/O error or timeout, when a late
    /// reply could still be in flight).
    pub(crate) fn discard(mut self) {
        if self.conn.take().is_some() {
            self.pool.forget();
        }
    }
}

impl<C> Deref for Pooled<'_, C> {
    type Target = C;
    fn deref(&self) -> &C {
        // Invariant: `conn` is Some until `discard` or drop consume the guard.
        self.conn.as_ref().unwrap_or_else(|| unreachable!("pooled connection used after discard"))
    }
}

impl<C> DerefMut for Pooled<'_, C> {
    fn deref_mut(&mut self) -> &mut C {
        self.conn.as_mut().unwrap_or_else(|| unreachable!("pooled connection used after discard"))
    }
}

impl<C> Drop for Pooled<'_, C> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.put(conn);
        }
    }
}
