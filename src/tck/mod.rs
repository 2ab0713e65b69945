//! The technology compatibility kit: every rule of the contract (SPEC §2), every SPI contract
//! (SPEC §5) and the lock, election and group behaviour through the public API, as cases that
//! take a [`Harness`]. Any backend — ours or a third party's — runs them all with one macro call,
//! which creates one `#[test]` per case:
//!
//! ```text
//! fn harness() -> simba::tck::Harness {
//!     simba::tck::Harness::new(std::sync::Arc::new(MyBackend::connect("...").unwrap()))
//! }
//! mod tck {
//!     // Optional attributes (e.g. `#[serial_test::serial(mine)]`) are put on every test.
//!     simba::tck_suite!(mine, crate::harness());
//! }
//! ```
//!
//! Test names read `tck::<backend>::<case>`, so a failure says which backend broke which rule.
//! Cases isolate themselves with random name prefixes; they use 1 s leases by default and wait
//! with generous margins, asserting causality and order rather than tight timings.
//!
//! The cases live in one module per area (`spi`, `groups`, `locks`, `elections`, `recovery`,
//! `semaphores`, `partitions`, `listing`) and are registered in **one list** (the `__tck_case_list!` macro below), from
//! which both [`cases`] and the `#[test]`s of [`tck_suite!`](crate::tck_suite) are generated. A
//! case function is private to its area and the kit denies dead code, so a case that is written
//! but not listed does not compile. A case that depends on a [`Capability`] is given what the
//! backend's [`LeaseBackend::capabilities`] claims and checks that behaviour (a pushed
//! notification arrives, or the backend declines to watch): no case is skipped.
#![deny(dead_code)]

mod elections;
mod groups;
mod listing;
mod locks;
mod partitions;
mod recovery;
mod semaphores;
mod spi;
mod spy;

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::backend::{Acquire, KeepAlive, LeaseBackend, Notification, TermRemaining, Topic};
use crate::error::ErrorKind;
use crate::handles::coordinator::{Coordinator, CoordinatorEvent};
use crate::handles::election::{ElectionEvent, RevokeReason, Schedule};
use crate::handles::session::Session;
use crate::options::SessionOptions;
use crate::state::SessionEvent;
use crate::state::{LossReason, SessionState};
use crate::types::{Name, SessionId, Token};

/// What a TCK case needs: the backend under test and the session options to use.
#[derive(Debug, Clone)]
pub struct Harness {
    backend: Arc<dyn LeaseBackend>,
    options: SessionOptions,
    prefix: String,
    native_expiry: bool,
}

impl Harness {
    /// A harness for `backend` with 1 s leases, 250 ms renewals and a 1 s query timeout.
    ///
    /// # Panics
    /// Never for these constants (they are valid options).
    pub fn new(backend: Arc<dyn LeaseBackend>) -> Harness {
        let options = options(Duration::from_secs(1), Duration::from_millis(250));
        let r: u64 = rand::random();
        Harness { backend, options, prefix: format!("tck-{r:012x}"), native_expiry: false }
    }

    /// Declares that the backend's server deletes expired sessions by itself (Redis key TTLs,
    /// ZooKeeper session expiry), so `purge_expired` has nothing to delete and must report 0.
    /// Without it the kit requires `purge_expired` to delete a session that expired (SQL rows,
    /// memory): `token_never_resets` checks the purge's count either way.
    pub fn with_native_expiry(mut self) -> Harness {
        self.native_expiry = true;
        self
    }

    /// Uses other session options (e.g. a longer lease for a slow backend).
    pub fn with_options(mut self, options: SessionOptions) -> Harness {
        self.options = options;
        self
    }

    /// The backend under test.
    pub fn backend(&self) -> &Arc<dyn LeaseBackend> {
        &self.backend
    }

    /// The session options cases use.
    pub fn options(&self) -> &SessionOptions {
        &self.options
    }

    /// The lease duration cases use.
    pub fn lease(&self) -> Duration {
        self.options.lease_duration()
    }

    /// A name unique to this harness: `<random prefix>-<suffix>`.
    ///
    /// # Panics
    /// When `suffix` makes an invalid name (a bug in the case).
    pub fn name(&self, suffix: &str) -> Name {
        match Name::new(format!("{}-{suffix}", self.prefix)) {
            Ok(n) => n,
            Err(e) => panic!("TCK bug: {e}"),
        }
    }

    /// Opens a session with the harness options (and `metadata`).
    ///
    /// # Panics
    /// When the backend cannot open a session (the message says how to start the server).
    pub fn session_with(&self, metadata: &str) -> Session {
        let options = match self.options.with_metadata(metadata) {
            Ok(o) => o,
            Err(e) => panic!("TCK bug: {e}"),
        };
        self.session_on(self.backend.clone(), options)
    }

    /// Opens a session on `backend` (the backend under test, or a [`spy::Spy`] around it).
    fn session_on(&self, backend: Arc<dyn LeaseBackend>, options: SessionOptions) -> Session {
        match Session::open(backend, options) {
            Ok(s) => s,
            Err(e) => panic!(
                "cannot open a session on the {} backend: {} (is the server running? `scripts/services up`)",
                self.backend.kind(),
                crate::error::display_chain(&e)
            ),
        }
    }

    /// Opens a session with the harness options.
    ///
    /// # Panics
    /// As [`session_with`](Harness::session_with).
    pub fn session(&self) -> Session {
        self.session_with("")
    }

    /// Opens a raw SPI session (no renewal thread).
    ///
    /// # Panics
    /// When the backend fails.
    pub fn raw_session(&self, metadata: &str) -> SessionId {
        match self.backend.open_session(self.lease(), metadata) {
            Ok(g) => {
                assert!(g.remaining <= self.lease(), "open_session remaining {:?} > lease", g.remaining);
                g.id
            }
            Err(e) => panic!(
                "cannot open a session on the {} backend: {} (is the server running? `scripts/services up`)",
                self.backend.kind(),
                crate::error::display_chain(&e)
            ),
        }
    }

    fn past_expiry(&self) -> Duration {
        self.lease() + self.lease() / 2 + Duration::from_millis(300)
    }

    fn patience(&self) -> Duration {
        self.lease() * 8 + Duration::from_secs(5)
    }
}

/// Session options with `lease` and `renew` and a 1 s query timeout.
///
/// # Panics
/// When the pair is invalid (a TCK bug: `renew` must be at most `lease / 2`).
fn options(lease: Duration, renew: Duration) -> SessionOptions {
    let built = SessionOptions::builder()
        .lease_duration(lease)
        .renew_interval(renew)
        .query_timeout(Duration::from_secs(1))
        .build();
    match built {
        Ok(o) => o,
        Err(e) => panic!("TCK bug: {e}"),
    }
}

/// Polls `cond` until it holds or `timeout` passes; returns whether it held.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

pub(super) fn acquired(r: crate::Result<Acquire>, what: &str) -> Token {
    match r {
        Ok(Acquire::Acquired { token, .. }) => token,
        other => panic!("{what}: expected Acquired, got {other:?}"),
    }
}

pub(super) fn alive(h: &Harness, sid: &SessionId) -> Vec<(Name, Token)> {
    match h.backend.keep_alive(sid, h.lease()) {
        Ok(KeepAlive::Alive { remaining, owned, .. }) => {
            assert!(remaining <= h.lease(), "keep_alive remaining {remaining:?} exceeds the lease duration");
            assert!(!remaining.is_zero(), "keep_alive remaining is zero");
            owned
        }
        other => panic!("keep_alive: expected Alive, got {other:?}"),
    }
}

/// The next pushed notification on `rx`, waiting up to the harness's patience.
pub(super) fn next_notification(h: &Harness, rx: &crossbeam_channel::Receiver<Notification>) -> Option<Notification> {
    rx.recv_timeout(h.patience()).ok()
}

/// Sleeps past the lease duration while keeping `keep` sessions alive.
pub(super) fn outlive(h: &Harness, keep: &[&SessionId]) {
    let end = Instant::now() + h.past_expiry();
    while Instant::now() < end {
        for s in keep {
            alive(h, s);
        }
        thread::sleep(h.options.renew_interval().min(end.saturating_duration_since(Instant::now())));
    }
}

// ---------------------------------------------------------------- the case list

/// A backend capability a case depends on (see [`Capabilities`](crate::backend::Capabilities)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Capability {
    /// `push_release`: the backend pushes `Notification::Released` when a lease is freed.
    PushRelease,
    /// `push_membership`: the backend pushes `Notification::MembersChanged` on joins and leaves.
    PushMembership,
    /// `watch_checks_lease`: a lease registration answers a free lease at once.
    WatchChecksLease,
    /// `list`: the backend lists what it holds (`LeaseBackend::list`).
    Listing,
}

impl Capability {
    /// Whether `backend` claims this capability.
    pub fn claimed_by(self, backend: &dyn LeaseBackend) -> bool {
        let caps = backend.capabilities();
        match self {
            Capability::PushRelease => caps.push_release,
            Capability::PushMembership => caps.push_membership,
            Capability::WatchChecksLease => caps.watch_checks_lease,
            Capability::Listing => caps.list,
        }
    }
}

#[derive(Clone, Copy)]
enum Body {
    /// Runs on every backend.
    Plain(fn(&Harness)),
    /// Runs on every backend and is told whether the backend claims the capability: a push
    /// backend must push, a poll backend must decline to watch.
    Selected(Capability, fn(&Harness, bool)),
}

/// One TCK case: its area, its name and what it runs.
#[derive(Clone, Copy)]
pub struct Case {
    area: &'static str,
    name: &'static str,
    body: Body,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case")
            .field("area", &self.area)
            .field("name", &self.name)
            .field("capability", &self.capability())
            .finish()
    }
}

impl Case {
    /// The area: `spi`, `groups`, `locks`, `elections`, `recovery`, `semaphores` or `partitions`.
    pub fn area(&self) -> &'static str {
        self.area
    }

    /// The case's name (the name of its `#[test]`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The capability whose claim selects what the case checks, if any.
    pub fn capability(&self) -> Option<Capability> {
        match self.body {
            Body::Plain(_) => None,
            Body::Selected(c, _) => Some(c),
        }
    }

    /// Runs the case against `h`'s backend.
    ///
    /// # Panics
    /// When the backend breaks the rule the case checks (the message says how).
    pub fn run(&self, h: &Harness) {
        match self.body {
            Body::Plain(f) => f(h),
            Body::Selected(c, f) => f(h, c.claimed_by(h.backend.as_ref())),
        }
    }
}

/// Every case of the kit, in the order of the one case list.
pub fn cases() -> &'static [Case] {
    CASES
}

/// The case called `name`.
///
/// # Panics
/// When no case has that name (the generated tests use names from the same list, so this is a
/// TCK bug).
pub fn case(name: &str) -> &'static Case {
    match CASES.iter().find(|c| c.name == name) {
        Some(c) => c,
        None => panic!("TCK bug: no case named {name}"),
    }
}

/// The one list of cases, by area. `cases` and `tck_suite!` are both generated from it; a
/// case tagged `(capability)` takes `(&Harness, claimed: bool)`.
#[doc(hidden)]
#[macro_export]
macro_rules! __tck_case_list {
    ($($then:tt)*) => {
        $crate::__tck_emit! { [$($then)*]
            spi {
                open_session_is_alive,
                session_expires_without_renewal,
                session_alive_until_reported_remaining,
                expired_session_never_revives,
                keep_alive_extends_session,
                close_is_idempotent,
                close_releases_leases_and_memberships,
                remaining_never_exceeds_lease_duration,
                token_increases_per_term,
                token_stable_within_term,
                reacquire_is_idempotent,
                held_lease_is_busy,
                takeover_after_expiry,
                release_keeps_token,
                release_by_non_holder_is_noop,
                release_of_another_term_is_noop,
                token_never_resets,
                holder_reports_metadata,
                keep_alive_reports_owned_leases,
                keep_alive_reports_lease_taken_over,
                names_are_case_sensitive,
                racing_sessions_one_winner,
                release_is_pushed(PushRelease),
                watch_of_a_free_lease_answers_at_once(WatchChecksLease),
            }
            groups {
                keep_alive_reports_groups,
                join_visible_at_once,
                members_are_live_sessions_only,
                membership_lost_behind_back_is_rejoined,
                stray_membership_is_left,
                membership_changes_are_streamed,
                membership_ends_with_session,
                membership_changes_are_pushed(PushMembership),
            }
            locks {
                invalid_names_rejected,
                lock_guard_token_until_release,
                try_lock_and_timeout_when_held,
                zero_timeout_on_a_free_lock_acquires,
                lock_waits_for_release,
                drop_releases_lease,
                lock_is_not_reentrant,
                close_session_ends_leases,
                session_loss_is_detected,
                lease_taken_behind_back_is_lost,
                token_exclusive_over_real_time,
                lock_waiter_wakes_on_release(PushRelease),
                lock_registers_where_it_cannot_miss_a_release(WatchChecksLease),
            }
            elections {
                exactly_one_leader,
                leadership_moves_on_resign,
                dropped_election_frees_the_lease,
                leader_loss_moves_leadership,
                leader_work_stops_on_loss,
                campaign_registers_where_it_cannot_miss_a_release(WatchChecksLease),
            }
            recovery {
                coordinator_reports_membership_loss,
                recovery_reelects_with_larger_token,
            }
            semaphores {
                racing_sessions_exactly_n_win,
                at_most_n_permits_valid_at_once,
                limit_is_stored_and_mismatch_rejected,
                several_permits_in_one_session,
                release_and_drop_free_the_slot,
                lost_permit_names_semaphore_and_slot,
                expiry_frees_a_permit,
                coordinator_semaphore_uses_current_session,
                permit_waiter_wakes_on_release(PushRelease),
                permit_waiter_registers_where_it_cannot_miss_a_release(WatchChecksLease),
            }
            partitions {
                partitions_join_and_leave_are_sticky,
                partitions_drain_until_released,
                partitions_crash_moves_only_the_crashed_members,
                partitions_count_is_stored_and_mismatch_rejected,
                partitions_bad_input_rejected,
                coordinator_partitions_survive_replacement,
                dropped_partitions_are_released,
                max_per_member_leaves_the_rest_unowned,
                settle_period_damps_flapping,
                partition_handoff_is_pushed(PushRelease),
            }
            listing {
                listing_matches_the_model(Listing),
                listing_is_capped_and_says_so(Listing),
            }
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __tck_emit {
    // The table `cases()` returns (expanded once, in this module).
    ([table] $($area:ident { $($case:ident $(($cap:ident))?),* $(,)? })*) => {
        static CASES: &[Case] = &[
            $($(Case {
                area: stringify!($area),
                name: stringify!($case),
                body: $crate::__tck_emit!(@body $area::$case $(, $cap)?),
            },)*)*
        ];
    };
    (@body $f:path) => { Body::Plain($f) };
    (@body $f:path, $cap:ident) => { Body::Selected(Capability::$cap, $f) };
    // One `#[test]` per case (expanded by `tck_suite!` in the backend's test crate).
    ([tests $attrs:tt $harness:expr] $($area:ident { $($case:ident $(($cap:ident))?),* $(,)? })*) => {
        $crate::__tck_emit!(@tests $attrs $harness; $($($case)*)*);
    };
    (@tests $attrs:tt $harness:expr; ) => {};
    (@tests [$($attr:tt)*] $harness:expr; $case:ident $($rest:ident)*) => {
        #[test]
        $($attr)*
        fn $case() {
            let harness: $crate::tck::Harness = $harness;
            $crate::tck::case(stringify!($case)).run(&harness);
        }
        $crate::__tck_emit!(@tests [$($attr)*] $harness; $($rest)*);
    };
}

__tck_case_list!(table);

/// Instantiates every TCK case as a `#[test]` for one backend: `tck_suite!(name, harness_expr,
/// #[attr]...)`. The harness expression is evaluated once per test.
#[macro_export]
macro_rules! tck_suite {
    ($backend:ident, $harness:expr $(, #[$meta:meta])* $(,)?) => {
        #[allow(unused_imports, clippy::unwrap_used)]
        pub mod $backend {
            use super::*;
            $crate::__tck_case_list!(tests [$(#[$meta])*] $harness);
        }
    };
}
