//! A small blocking connection pool: at most `max` connections, checked out until a deadline,
//! discarded after a transport error (a fresh connection replaces it on the next checkout) or once
//! older than the pool's connection lifetime.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};

/// The size and connection lifetime of a pool (from `RedisOptions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolLimits {
    /// Most connections open at once.
    pub(crate) max: usize,
    /// A connection this old is closed instead of reused (`Duration::MAX`: never).
    pub(crate) lifetime: Duration,
}

impl PoolLimits {
    /// `max` connections that live forever.
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub(crate) fn max(max: usize) -> PoolLimits {
        PoolLimits { max, lifetime: Duration::MAX }
    }
}

pub(crate) struct Pool<C> {
    state: Mutex<State<C>>,
    freed: Condvar,
    max: usize,
    lifetime: Duration,
}

struct State<C> {
    /// Idle connections with the instant each was opened.
    idle: Vec<(C, Instant)>,
    open: usize,
}

impl<C> Pool<C> {
    pub(crate) fn new(limits: PoolLimits) -> Pool<C> {
        Pool {
            state: Mutex::new(State { idle: Vec::new(), open: 0 }),
            freed: Condvar::new(),
            max: limits.max.max(1),
            lifetime: limits.lifetime,
        }
    }

    fn expired(&self, opened: Instant) -> bool {
        opened.elapsed() >= self.lifetime
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
            if let Some((conn, opened)) = state.idle.pop() {
                if self.expired(opened) {
                    // Past its lifetime: closed (outside the lock), its place taken by a new one.
                    state.open -= 1;
                    drop(state);
                    drop(conn);
                    state = self.state.lock();
                    continue;
                }
                return Ok(Pooled { pool: self, conn: Some(conn), opened, reused: true });
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
            Ok(conn) => Ok(Pooled { pool: self, conn: Some(conn), opened: Instant::now(), reused: false }),
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

    fn put(&self, conn: C, opened: Instant) {
        if self.expired(opened) {
            drop(conn);
            self.forget();
            return;
        }
        self.state.lock().idle.push((conn, opened));
        self.freed.notify_one();
    }
}

/// A checked-out connection; returns to the pool on drop unless [`Pooled::discard`]ed.
pub(crate) struct Pooled<'a, C> {
    pool: &'a Pool<C>,
    conn: Option<C>,
    opened: Instant,
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
            self.pool.put(conn, self.opened);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection that counts how many of its kind are alive.
    struct Conn(#[allow(dead_code)] std::sync::Arc<()>);

    #[test]
    fn connections_past_their_lifetime_are_replaced() {
        let alive = std::sync::Arc::new(());
        let opened = std::cell::Cell::new(0);
        let connect = |_: Duration| {
            opened.set(opened.get() + 1);
            Ok(Conn(alive.clone()))
        };
        let deadline = || Instant::now() + Duration::from_secs(5);
        // Forever: the one connection is reused.
        let pool = Pool::new(PoolLimits::max(2));
        drop(pool.get(deadline(), "t", connect).unwrap());
        let c = pool.get(deadline(), "t", connect).unwrap();
        assert!(c.reused());
        drop(c);
        assert_eq!(opened.get(), 1);
        // A zero lifetime: every connection is closed when returned, none is reused.
        let pool = Pool::new(PoolLimits { max: 1, lifetime: Duration::ZERO });
        for _ in 0..3 {
            let c = pool.get(deadline(), "t", connect).unwrap();
            assert!(!c.reused());
        }
        assert_eq!(opened.get(), 4);
        // Only the first pool's idle connection is still open.
        assert_eq!(std::sync::Arc::strong_count(&alive), 2);
        drop(pool);
    }
}
