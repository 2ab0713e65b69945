//! Virtual clocks. Simulated real time is a `u64` of nanoseconds since the start of a run; a backend
//! node reads its own clock, a linear function of real time (a rate), which the simulation can also
//! step (a clock jump).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::backends::memory::Clock;

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
