//! Virtual clocks. Simulated real time is a `u64` of nanoseconds since the start of a run; every
//! client and backend node reads its own clock, a linear function of real time (rate and offset),
//! and a node's clock can also step (a jump injected by the simulation).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::memory::Clock;

/// A client's monotonic clock: `offset + real × rate` (rate constant for the run).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClientClock {
    pub(crate) offset: u64,
    pub(crate) rate: f64,
}

impl ClientClock {
    /// Local nanoseconds at real time `t`.
    pub(crate) fn local(&self, t: u64) -> u64 {
        self.offset + (t as f64 * self.rate) as u64
    }

    /// The `Instant` the engine sees at real time `t`.
    pub(crate) fn instant(&self, base: Instant, t: u64) -> Instant {
        base + Duration::from_nanos(self.local(t))
    }

    /// The earliest real time (within a few ns) at which the local clock reads at least `local`.
    pub(crate) fn real_at(&self, local: u64) -> u64 {
        if local <= self.offset {
            return 0;
        }
        let mut t = ((local - self.offset) as f64 / self.rate).ceil() as u64;
        while t > 0 && self.local(t - 1) >= local {
            t -= 1;
        }
        while self.local(t) < local {
            t += 1;
        }
        t
    }

    /// The real time at which the engine's `instant` is reached.
    pub(crate) fn real_at_instant(&self, base: Instant, instant: Instant) -> u64 {
        let local = instant.saturating_duration_since(base).as_nanos();
        self.real_at(u64::try_from(local).unwrap_or(u64::MAX / 2))
    }
}

/// A backend node's clock: linear between steps; a step (jump) moves it forward or back.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NodeClock {
    seg_start: u64,
    seg_value: u64,
    pub(crate) rate: f64,
}

impl NodeClock {
    pub(crate) fn new(value_at_zero: u64, rate: f64) -> NodeClock {
        NodeClock { seg_start: 0, seg_value: value_at_zero, rate }
    }

    /// The node's reading (ns) at real time `t` (`t` never goes back within a run).
    pub(crate) fn value(&self, t: u64) -> u64 {
        self.seg_value + (t.saturating_sub(self.seg_start) as f64 * self.rate) as u64
    }

    /// Steps the clock by `by` ns at real time `t`.
    pub(crate) fn jump(&mut self, t: u64, by: i64) {
        let v = self.value(t);
        self.seg_value = v.saturating_add_signed(by);
        self.seg_start = t;
    }
}

/// The memory backend's clock during a simulation: whatever the simulator last set.
#[derive(Debug, Default)]
pub(crate) struct VirtualClock(AtomicU64);

impl VirtualClock {
    pub(crate) fn set(&self, ns: u64) {
        self.0.store(ns, Ordering::Relaxed);
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}
