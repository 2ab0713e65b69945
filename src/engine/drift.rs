//! The observed clock drift: how fast the client's monotonic clock ran against the backend's over
//! the last renewals, from the time the backend says each renewal found left
//! ([`KeepAlive::Alive::remaining_before`](crate::backend::KeepAlive)).
//!
//! Two renewals in a row, k−1 and k, each answered while it was the keep-alive in flight, with
//! nothing failed or abandoned between them: renewal k−1 left the session `r` on the backend and
//! renewal k found `b` left, so the backend's clock advanced `r − b` between the two executions.
//! Each execution happened somewhere within its call, so the client's clock advanced at least
//! `sent(k) − returned(k−1)` and at most `returned(k) − sent(k−1)` between them. Summed over the
//! last [`WINDOW`] such pairs, the drift is `1 − client / backend`: positive when the client's
//! clock runs slower than the backend's — what the `drift` setting allows for, since the local
//! deadline `sent + remaining × (1 − drift)` must come before the backend's expiry — negative when
//! it runs faster (harmless). The round trips bound how far off the estimate can be.
//!
//! Anything that may have renewed the session unseen (a failed or abandoned keep-alive, a late
//! reply) starts the window over, and so does a pair whose numbers cannot be right (the backend
//! found more time left than it had given, or the client's interval is empty).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::status::ObservedDrift;

/// The renewal pairs an estimate sums at most (the oldest leave first).
pub(crate) const WINDOW: usize = 16;

#[derive(Debug, Clone, Copy)]
struct Anchor {
    sent: Instant,
    returned: Instant,
    remaining: Duration,
}

#[derive(Debug, Clone, Copy)]
struct Pair {
    backend: Duration,
    client_min: Duration,
    client_max: Duration,
}

/// The renewals the estimate is made of (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct DriftMeter {
    anchor: Option<Anchor>,
    pairs: VecDeque<Pair>,
}

impl DriftMeter {
    /// A keep-alive sent at `sent`, the one in flight, returned at `returned`: the session had
    /// `before` left when it reached the backend (`None`: the backend does not say, and this
    /// renewal pairs with nothing) and has `remaining` left after it (the next renewal pairs with
    /// this one).
    pub(super) fn renewed(&mut self, sent: Instant, returned: Instant, remaining: Duration, before: Option<Duration>) {
        if let (Some(a), Some(before)) = (self.anchor, before) {
            let backend = a.remaining.checked_sub(before);
            let client_min = sent.saturating_duration_since(a.returned);
            let client_max = returned.saturating_duration_since(a.sent);
            match backend {
                Some(backend) if !backend.is_zero() && client_max > client_min => {
                    if self.pairs.len() == WINDOW {
                        self.pairs.pop_front();
                    }
                    self.pairs.push_back(Pair { backend, client_min, client_max });
                }
                // Not a pair of this session's renewals (something else renewed it meanwhile).
                _ => self.pairs.clear(),
            }
        }
        self.anchor = Some(Anchor { sent, returned, remaining });
    }

    /// Something may have renewed the session unseen: the next renewal starts a new window.
    pub(super) fn restart(&mut self) {
        self.anchor = None;
        self.pairs.clear();
    }

    /// The estimate over the window, once it holds a pair.
    pub(super) fn observed(&self) -> Option<ObservedDrift> {
        if self.pairs.is_empty() {
            return None;
        }
        let (mut backend, mut min, mut max) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
        for p in &self.pairs {
            backend = backend.saturating_add(p.backend);
            min = min.saturating_add(p.client_min);
            max = max.saturating_add(p.client_max);
        }
        let b = backend.as_secs_f64();
        let middle = (min.as_secs_f64() + max.as_secs_f64()) / 2.0;
        Some(ObservedDrift {
            estimate: 1.0 - middle / b,
            uncertainty: (max.as_secs_f64() - min.as_secs_f64()) / 2.0 / b,
            window: backend,
            renewals: u32::try_from(self.pairs.len()).unwrap_or(u32::MAX),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Renewals every second for `n` seconds by the client's clock, on a backend whose clock runs
    /// `rate` backend seconds per client second, each call taking `rtt` and executing in its middle.
    fn run(meter: &mut DriftMeter, t0: Instant, n: u64, rate: f64, rtt: Duration) {
        let lease = Duration::from_secs(10);
        let mut left = lease;
        for k in 0..n {
            let sent = t0 + Duration::from_secs(k);
            let executed = sent + rtt / 2;
            let before = if k == 0 {
                None
            } else {
                let since = executed - (t0 + Duration::from_secs(k - 1) + rtt / 2);
                Some(left.saturating_sub(since.mul_f64(rate)))
            };
            left = lease;
            meter.renewed(sent, sent + rtt, left, before);
        }
    }

    #[test]
    fn same_clocks_give_zero_within_the_round_trips() {
        let mut m = DriftMeter::default();
        run(&mut m, Instant::now(), 40, 1.0, ms(2));
        let d = m.observed().unwrap();
        assert!(d.estimate.abs() < 1e-9, "{d:?}");
        assert!((d.uncertainty - 0.002).abs() < 1e-9, "{d:?}");
        assert_eq!(d.renewals, WINDOW as u32);
        assert_eq!(d.window, Duration::from_secs(WINDOW as u64));
    }

    #[test]
    fn a_slow_client_clock_shows_as_positive_drift() {
        // The backend's clock runs 2% faster: the client's runs slow against it.
        let mut m = DriftMeter::default();
        run(&mut m, Instant::now(), 20, 1.02, ms(1));
        let d = m.observed().unwrap();
        assert!((d.estimate - (1.0 - 1.0 / 1.02)).abs() < 1e-6, "{d:?}");
        let mut fast = DriftMeter::default();
        run(&mut fast, Instant::now(), 20, 0.98, ms(1));
        assert!(fast.observed().unwrap().estimate < -0.02, "{:?}", fast.observed());
    }

    #[test]
    fn a_gap_or_impossible_pair_starts_over() {
        let t0 = Instant::now();
        let mut m = DriftMeter::default();
        assert_eq!(m.observed(), None);
        // The first renewal anchors (what it found left pairs with nothing).
        m.renewed(t0, t0 + ms(1), ms(1000), Some(ms(900)));
        assert_eq!(m.observed(), None);
        m.renewed(t0 + ms(300), t0 + ms(301), ms(1000), Some(ms(700)));
        assert_eq!(m.observed().unwrap().renewals, 1);
        // A renewal that does not say what it found adds no pair, but anchors the next.
        m.renewed(t0 + ms(600), t0 + ms(601), ms(1000), None);
        assert_eq!(m.observed().unwrap().renewals, 1);
        m.renewed(t0 + ms(900), t0 + ms(901), ms(1000), Some(ms(700)));
        assert_eq!(m.observed().unwrap().renewals, 2);
        // More left than was given: something else renewed it; the window starts over.
        m.renewed(t0 + ms(1200), t0 + ms(1201), ms(1000), Some(ms(1000)));
        assert_eq!(m.observed(), None);
        m.renewed(t0 + ms(1500), t0 + ms(1501), ms(1000), Some(ms(700)));
        assert_eq!(m.observed().unwrap().renewals, 1);
        // A failed, abandoned or late renewal: no anchor, no window.
        m.restart();
        assert_eq!(m.observed(), None);
        m.renewed(t0 + ms(1800), t0 + ms(1801), ms(1000), Some(ms(700)));
        assert_eq!(m.observed(), None, "a pair needs the renewal before");
    }
}
