//! A pooled Redis connection that remembers the socket timeouts last set on it. Every command of
//! a call is bounded by the time left before the call's deadline, but setting a socket timeout is
//! a system call (about 1.3 µs on the benchmark machine, four per acquire+release on standalone
//! Redis), so a timeout already set is kept while it still fits the time left: never longer than
//! it (the bound holds), and at least 7/8 of it (a command fails at most an eighth of its time left
//! before its deadline).

use std::ops::{Deref, DerefMut};
use std::time::Duration;

use redis::Connection;

/// A connection and its current read and write timeouts (`None`: not set by simba yet).
pub(crate) struct Conn {
    con: Connection,
    read: Option<Duration>,
    write: Option<Duration>,
}

/// The timeout to set when `left` is the time left and `current` is set, or `None` to keep
/// `current`. A new timeout is a little shorter than the time left, so the next calls, whose
/// time left is a little shorter too, can keep it.
fn fitted(current: Option<Duration>, left: Duration) -> Option<Duration> {
    match current {
        Some(c) if c <= left && c >= left - left / 8 => None,
        _ => Some((left - left / 16).max(Duration::from_micros(1))),
    }
}

impl Conn {
    pub(crate) fn new(con: Connection) -> Conn {
        Conn { con, read: None, write: None }
    }

    /// Bounds every read from now on by at most `left` (and at least 7/8 of it).
    pub(crate) fn read_within(&mut self, left: Duration) -> redis::RedisResult<()> {
        match fitted(self.read, left) {
            Some(t) => self.read_for(t),
            None => Ok(()),
        }
    }

    /// Bounds every read from now on by exactly `t` (a `WAIT` whose server-side timeout is
    /// computed from it).
    pub(crate) fn read_for(&mut self, t: Duration) -> redis::RedisResult<()> {
        self.read = None;
        self.con.set_read_timeout(Some(t))?;
        self.read = Some(t);
        Ok(())
    }

    /// Bounds every write from now on by at most `left` (and at least 7/8 of it).
    pub(crate) fn write_within(&mut self, left: Duration) -> redis::RedisResult<()> {
        let Some(t) = fitted(self.write, left) else { return Ok(()) };
        self.write = None;
        self.con.set_write_timeout(Some(t))?;
        self.write = Some(t);
        Ok(())
    }
}

impl Deref for Conn {
    type Target = Connection;
    fn deref(&self) -> &Connection {
        &self.con
    }
}

impl DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut Connection {
        &mut self.con
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeout_is_kept_while_it_fits_the_time_left() {
        let ms = Duration::from_millis;
        // Nothing set yet: set, a little below the time left.
        assert_eq!(fitted(None, ms(1600)), Some(ms(1500)));
        // Set at 1500 ms: kept from 1500 ms left up to 1714 ms left (1500 = 1714 - 1714 / 8)...
        assert_eq!(fitted(Some(ms(1500)), ms(1599)), None);
        assert_eq!(fitted(Some(ms(1500)), ms(1500)), None);
        assert_eq!(fitted(Some(ms(1500)), ms(1714)), None);
        // ...but never longer than the time left, nor shorter than 7/8 of it.
        assert_eq!(fitted(Some(ms(1500)), ms(1499)), Some(ms(1499) - ms(1499) / 16));
        assert_eq!(fitted(Some(ms(1500)), ms(1715)), Some(ms(1715) - ms(1715) / 16));
        // A tiny time left still gets a non-zero timeout (zero would mean none).
        assert_eq!(fitted(None, Duration::from_nanos(10)), Some(Duration::from_micros(1)));
    }
}
