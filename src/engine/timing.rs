//! The engine's timing: the settings it judges by, deadlines from send instants, the keep-alive
//! backoff, and instant arithmetic where `Duration::MAX` means "forever".

use std::time::{Duration, Instant};

#[cfg(test)]
use crate::error::{Error, Result};
use crate::options::SessionOptions;
use crate::sync::{self, Bug};

/// The engine's timing, copied from [`SessionOptions`] (validated there) or, in tests, built with
/// `Timing::new`, which validates it the same way.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timing {
    /// How long the backend keeps the session without renewal.
    pub(crate) lease_duration: Duration,
    /// Time between keep-alives.
    pub(crate) renew_interval: Duration,
    /// Allowed clock-rate difference, in `[0, 1)`.
    pub(crate) drift: f64,
    /// A call in flight longer than this is abandoned.
    pub(crate) query_timeout: Duration,
}

impl From<&SessionOptions> for Timing {
    fn from(o: &SessionOptions) -> Timing {
        Timing {
            lease_duration: o.lease_duration(),
            renew_interval: o.renew_interval(),
            drift: o.drift(),
            query_timeout: o.query_timeout(),
        }
    }
}

impl Timing {
    /// A timing with these settings.
    ///
    /// # Errors
    /// `InvalidConfig` when `drift` is not a number in `[0, 1)`, or `lease_duration`,
    /// `renew_interval` or `query_timeout` is zero.
    #[cfg(test)]
    pub fn new(
        lease_duration: Duration,
        renew_interval: Duration,
        drift: f64,
        query_timeout: Duration,
    ) -> Result<Timing> {
        if !(0.0..1.0).contains(&drift) {
            return Err(Error::config(format!("drift must be a number in [0, 1), got {drift}")));
        }
        for (what, d) in
            [("lease_duration", lease_duration), ("renew_interval", renew_interval), ("query_timeout", query_timeout)]
        {
            if d.is_zero() {
                return Err(Error::config(format!("{what} must be more than zero")));
            }
        }
        Ok(Timing { lease_duration, renew_interval, drift, query_timeout })
    }

    /// The local deadline implied by a call sent at `sent` that returned `remaining`. Never
    /// panics: a drift outside `[0, 1)` (only possible within the crate) counts as "no time", a
    /// deadline beyond what an `Instant` holds as far in the future.
    pub fn deadline(&self, sent: Instant, remaining: Duration) -> Instant {
        let remaining = remaining.min(self.lease_duration);
        let factor = 1.0 - sync::pick(Bug::NoDrift, 0.0, self.drift); // broken rule: drift 0
        let usable = if (0.0..=1.0).contains(&factor) {
            Duration::try_from_secs_f64(remaining.as_secs_f64() * factor).unwrap_or(remaining)
        } else {
            Duration::ZERO
        };
        later(sent, usable)
    }

    /// Backoff before retrying a failed keep-alive.
    pub fn retry_backoff(&self, failures: u32) -> Duration {
        let base = (self.renew_interval / 4).max(Duration::from_millis(10));
        let factor = 1u32 << failures.min(3);
        base.saturating_mul(factor).min(self.renew_interval)
    }
}

/// The instant a deadline implied by a reply is counted from: the instant its call was `sent`
/// (the reply may have waited anywhere on its way back). `Bug::DeadlineFromReplyInstant`, a rule
/// the simulation breaks on purpose, counts from `replied` instead.
pub(crate) fn deadline_basis(sent: Instant, replied: Instant) -> Instant {
    sync::pick(Bug::DeadlineFromReplyInstant, replied, sent)
}

/// Whether a keep-alive sent at `sent` may judge what was established at `established` — a
/// term adopted, a join that returned, a release seen settled: only what was established
/// strictly before the send. The send instant is taken before the call goes out, so the reply's
/// listing may predate anything established at that very instant (a coarse or virtual clock):
/// the one rule for terms (9b7ef97), memberships (be3be21) and settled releases.
pub(crate) fn judged_by(established: Instant, sent: Instant) -> bool {
    established < sent
}

/// `t + d`, or a far-future instant when that is beyond what an `Instant` holds (`Duration::MAX`
/// means "forever").
pub(crate) fn later(t: Instant, d: Duration) -> Instant {
    t.checked_add(d).or_else(|| t.checked_add(FOREVER)).unwrap_or(t)
}

/// What "forever" is when an `Instant` must be computed: about 136 years.
const FOREVER: Duration = Duration::from_secs(u32::MAX as u64);

/// `t + d` when it is representable, `None` ("forever") otherwise.
pub(crate) fn deadline_after(t: Instant, d: Duration) -> Option<Instant> {
    t.checked_add(d)
}
