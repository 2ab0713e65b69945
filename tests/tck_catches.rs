//! The TCK's checks can fail: each runs against a memory backend wrapped to break exactly the rule
//! the case claims to check, and must fail there, while the same wrapper without the flaw passes
//! it. (No server: the flaws are what a real backend could get wrong, written over the memory
//! backend so each is the only difference.)
#![cfg(feature = "tck")]

use std::collections::HashSet;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;
use parking_lot::Mutex;
use simba::backend::{
    Acquire, Capabilities, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant, TermRemaining, Topic,
};
use simba::tck::{self, Harness};
use simba::{ErrorKind, MemoryBackend, Name, SessionId, Token};

/// What the wrapped backend gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flaw {
    /// Nothing: the control.
    None,
    /// Sessions (and so their leases) live lease / 2 while every remaining says a full lease.
    HalfTtl,
    /// Claims push_release and push_membership, accepts watches, never sends a notification.
    ClaimsPushNeverSends,
    /// Claims no push but accepts watches (and pushes).
    PushesUndeclared,
    /// Claims `watch_checks_lease` (as the memory backend does), but a lease registration made
    /// while the lease is free is never answered: a subscription that does not look at the lease.
    WatchIgnoresFreeLease,
    /// An acquire or join on an expired session succeeds until a keep-alive reported it expired
    /// (as an SQL backend whose keep-alive alone deletes the expired row could).
    FirstCallRevives,
    /// A keep-alive of an expired session answers `Alive` owning nothing.
    ExpiredReportedAlive,
    /// `purge_expired` does nothing.
    PurgeNoop,
    /// `semaphore_limit` stores nothing and answers the limit it was asked for (every client
    /// sees its own semaphore).
    LimitNotStored,
}

#[derive(Debug)]
struct Flawed {
    inner: MemoryBackend,
    flaw: Flaw,
    /// Sessions a keep-alive reported expired.
    reported_expired: Mutex<HashSet<SessionId>>,
}

impl Flawed {
    fn harness(flaw: Flaw) -> Harness {
        let backend = Flawed { inner: MemoryBackend::new(), flaw, reported_expired: Mutex::new(HashSet::new()) };
        Harness::new(Arc::new(backend))
    }

    fn ttl(&self, d: Duration) -> Duration {
        if self.flaw == Flaw::HalfTtl {
            d / 2
        } else {
            d
        }
    }

    fn reported(&self, remaining: Duration) -> Duration {
        if self.flaw == Flaw::HalfTtl {
            remaining * 2
        } else {
            remaining
        }
    }

    fn revives(&self, s: &SessionId, e: &simba::Error) -> bool {
        self.flaw == Flaw::FirstCallRevives
            && e.kind() == ErrorKind::SessionExpired
            && !self.reported_expired.lock().contains(s)
    }
}

impl LeaseBackend for Flawed {
    fn kind(&self) -> &'static str {
        "flawed-memory"
    }
    fn open_session(&self, d: Duration, m: &str) -> simba::Result<SessionGrant> {
        let g = self.inner.open_session(self.ttl(d), m)?;
        Ok(SessionGrant { id: g.id, remaining: self.reported(g.remaining) })
    }
    fn keep_alive(&self, s: &SessionId, d: Duration) -> simba::Result<KeepAlive> {
        match self.inner.keep_alive(s, self.ttl(d))? {
            KeepAlive::Alive { remaining, owned, groups, unknown, remaining_before } => {
                Ok(KeepAlive::Alive { remaining: self.reported(remaining), owned, groups, unknown, remaining_before })
            }
            KeepAlive::Expired if self.flaw == Flaw::ExpiredReportedAlive => Ok(KeepAlive::Alive {
                remaining: d,
                owned: Vec::new(),
                groups: Vec::new(),
                unknown: Vec::new(),
                remaining_before: None,
            }),
            KeepAlive::Expired => {
                self.reported_expired.lock().insert(s.clone());
                Ok(KeepAlive::Expired)
            }
        }
    }
    fn close_session(&self, s: &SessionId) -> simba::Result<()> {
        self.inner.close_session(s)
    }
    fn acquire(&self, s: &SessionId, n: &Name) -> simba::Result<Acquire> {
        match self.inner.acquire(s, n) {
            Ok(Acquire::Acquired { token, remaining: TermRemaining::Known(remaining) }) => {
                Ok(Acquire::Acquired { token, remaining: self.reported(remaining).into() })
            }
            Err(e) if self.revives(s, &e) => Ok(Acquire::Acquired {
                token: Token::new(1).expect("1 is a token"),
                remaining: Duration::from_secs(1).into(),
            }),
            other => other,
        }
    }
    fn release(&self, s: &SessionId, n: &Name, t: Token) -> simba::Result<()> {
        self.inner.release(s, n, t)
    }
    fn holder(&self, n: &Name) -> simba::Result<Option<Holder>> {
        Ok(self.inner.holder(n)?.map(|h| Holder { remaining: self.reported(h.remaining), ..h }))
    }
    fn join(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        match self.inner.join(s, g) {
            Err(e) if self.revives(s, &e) => Ok(()),
            other => other,
        }
    }
    fn leave(&self, s: &SessionId, g: &Name) -> simba::Result<()> {
        self.inner.leave(s, g)
    }
    fn members(&self, g: &Name) -> simba::Result<Vec<Member>> {
        self.inner.members(g)
    }
    fn semaphore_limit(&self, n: &Name, p: Option<u32>) -> simba::Result<Option<u32>> {
        match self.flaw {
            Flaw::LimitNotStored => Ok(p),
            _ => self.inner.semaphore_limit(n, p),
        }
    }
    fn call_bound(&self) -> Option<Duration> {
        self.inner.call_bound()
    }
    fn capabilities(&self) -> Capabilities {
        match self.flaw {
            Flaw::PushesUndeclared => Capabilities::default(),
            Flaw::ClaimsPushNeverSends => {
                let mut caps = Capabilities::default();
                (caps.push_release, caps.push_membership, caps.watch_checks_lease) = (true, true, true);
                caps
            }
            _ => self.inner.capabilities(),
        }
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> simba::Result<bool> {
        match self.flaw {
            Flaw::ClaimsPushNeverSends => Ok(true),
            Flaw::WatchIgnoresFreeLease => match topic {
                Topic::Lease(name) if self.inner.holder(name)?.is_none() => Ok(true),
                _ => self.inner.watch(topic, notify),
            },
            _ => self.inner.watch(topic, notify),
        }
    }
    fn purge_expired(&self) -> simba::Result<usize> {
        match self.flaw {
            Flaw::PurgeNoop => Ok(0),
            _ => self.inner.purge_expired(),
        }
    }
}

/// Runs `case` on the backend with `flaw`; returns whether it passed.
fn passes(case: &str, flaw: Flaw) -> bool {
    let h = Flawed::harness(flaw);
    let case = tck::case(case);
    catch_unwind(AssertUnwindSafe(|| case.run(&h))).is_ok()
}

/// Each case passes on the faithful wrapper and fails with the flaw.
fn caught(flaw: Flaw, cases: &[&str]) {
    for case in cases {
        assert!(passes(case, Flaw::None), "{case} fails on the faithful wrapper");
        assert!(!passes(case, flaw), "{case} passes on a backend with {flaw:?}");
    }
}

#[test]
fn half_ttl_breaks_rule_1_both_ways() {
    caught(
        Flaw::HalfTtl,
        &["session_alive_until_reported_remaining", "token_exclusive_over_real_time", "expiry_frees_a_permit"],
    );
    // The one-way check alone never saw it.
    assert!(passes("session_expires_without_renewal", Flaw::HalfTtl));
}

#[test]
fn claimed_push_that_never_comes_is_caught() {
    caught(
        Flaw::ClaimsPushNeverSends,
        &["release_is_pushed", "membership_changes_are_pushed", "lock_waiter_wakes_on_release"],
    );
    // Polling hides it from the case that only waits for the lock.
    assert!(passes("lock_waits_for_release", Flaw::ClaimsPushNeverSends));
}

#[test]
fn undeclared_push_is_caught() {
    caught(Flaw::PushesUndeclared, &["release_is_pushed", "membership_changes_are_pushed"]);
}

#[test]
fn checked_watch_that_does_not_check_is_caught() {
    caught(
        Flaw::WatchIgnoresFreeLease,
        &[
            "watch_of_a_free_lease_answers_at_once",
            "lock_registers_where_it_cannot_miss_a_release",
            "campaign_registers_where_it_cannot_miss_a_release",
            "permit_waiter_registers_where_it_cannot_miss_a_release",
        ],
    );
}

#[test]
fn expired_session_accepting_its_first_call_is_caught() {
    caught(Flaw::FirstCallRevives, &["expired_session_never_revives"]);
}

#[test]
fn expired_session_renewed_after_takeover_is_caught() {
    caught(Flaw::ExpiredReportedAlive, &["keep_alive_reports_lease_taken_over"]);
}

#[test]
fn purge_that_deletes_nothing_is_caught() {
    caught(Flaw::PurgeNoop, &["token_never_resets"]);
}

#[test]
fn semaphore_limit_not_stored_is_caught() {
    caught(Flaw::LimitNotStored, &["limit_is_stored_and_mismatch_rejected"]);
}

#[test]
fn partition_count_not_stored_is_caught() {
    caught(Flaw::LimitNotStored, &["partitions_count_is_stored_and_mismatch_rejected"]);
}

#[test]
fn claimed_push_that_never_comes_to_a_partition_waiter_is_caught() {
    caught(Flaw::ClaimsPushNeverSends, &["partition_handoff_is_pushed"]);
}

#[test]
fn claimed_push_that_never_comes_to_a_permit_waiter_is_caught() {
    caught(Flaw::ClaimsPushNeverSends, &["permit_waiter_wakes_on_release"]);
}

/// The case list is one list: every case has a unique name and an area, and the capability
/// cases are the ones the kit documents.
#[test]
fn case_list_is_whole() {
    let cases = tck::cases();
    let names: HashSet<_> = cases.iter().map(|c| c.name()).collect();
    assert_eq!(names.len(), cases.len(), "duplicate case names");
    let areas: HashSet<_> = cases.iter().map(|c| c.area()).collect();
    assert_eq!(
        areas,
        ["spi", "groups", "locks", "elections", "recovery", "semaphores", "partitions", "listing"]
            .into_iter()
            .collect()
    );
    let selected: Vec<_> = cases.iter().filter(|c| c.capability().is_some()).map(|c| c.name()).collect();
    assert_eq!(
        selected,
        [
            "release_is_pushed",
            "watch_of_a_free_lease_answers_at_once",
            "membership_changes_are_pushed",
            "lock_waiter_wakes_on_release",
            "lock_registers_where_it_cannot_miss_a_release",
            "campaign_registers_where_it_cannot_miss_a_release",
            "permit_waiter_wakes_on_release",
            "permit_waiter_registers_where_it_cannot_miss_a_release",
            "partition_handoff_is_pushed",
            "listing_matches_the_model",
            "listing_is_capped_and_says_so"
        ]
    );
}
