//! The technology compatibility kit: every rule of the contract (SPEC §2), every SPI contract
//! (SPEC §5) and the lock, election and group behaviour through the public API, as plain
//! functions that take a [`Harness`]. Any backend — ours or a third party's — runs them all with
//! one macro call, which creates one `#[test]` per case:
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

use std::collections::HashSet;
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use crate::backend::{Acquire, KeepAlive, LeaseBackend};
use crate::coordinator::{Coordinator, CoordinatorEvent};
use crate::election::{ElectionEvent, RevokeReason, Schedule};
use crate::engine::{LossReason, SessionState};
use crate::error::ErrorKind;
use crate::options::SessionOptions;
use crate::session::{Session, SessionEvent};
use crate::types::{Name, SessionId, Token};

/// What a TCK case needs: the backend under test and the session options to use.
#[derive(Debug, Clone)]
pub struct Harness {
    backend: Arc<dyn LeaseBackend>,
    options: SessionOptions,
    prefix: String,
}

impl Harness {
    /// A harness for `backend` with 1 s leases, 250 ms renewals and a 1 s query timeout.
    ///
    /// # Panics
    /// Never for these constants (they are valid options).
    pub fn new(backend: Arc<dyn LeaseBackend>) -> Harness {
        #[allow(clippy::expect_used)]
        let options = SessionOptions::builder()
            .lease_duration(Duration::from_secs(1))
            .renew_interval(Duration::from_millis(250))
            .query_timeout(Duration::from_secs(1))
            .build()
            .expect("valid TCK options");
        let r: u64 = rand::random();
        Harness { backend, options, prefix: format!("tck-{r:012x}") }
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
        match Session::open(self.backend.clone(), options) {
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

fn acquired(r: crate::Result<Acquire>, what: &str) -> Token {
    match r {
        Ok(Acquire::Acquired { token, .. }) => token,
        other => panic!("{what}: expected Acquired, got {other:?}"),
    }
}

fn alive(h: &Harness, sid: &SessionId) -> Vec<(Name, Token)> {
    match h.backend.keep_alive(sid, h.lease()) {
        Ok(KeepAlive::Alive { remaining, owned, .. }) => {
            assert!(remaining <= h.lease(), "keep_alive remaining {remaining:?} exceeds the lease duration");
            assert!(!remaining.is_zero(), "keep_alive remaining is zero");
            owned
        }
        other => panic!("keep_alive: expected Alive, got {other:?}"),
    }
}

/// Sleeps past the lease duration while keeping `keep` sessions alive.
fn outlive(h: &Harness, keep: &[&SessionId]) {
    let end = Instant::now() + h.past_expiry();
    while Instant::now() < end {
        for s in keep {
            alive(h, s);
        }
        thread::sleep(h.options.renew_interval().min(end.saturating_duration_since(Instant::now())));
    }
}

// ---------------------------------------------------------------- SPI: sessions

/// A new session is alive: keep-alive answers `Alive` with 0 < remaining ≤ lease duration.
pub fn open_session_is_alive(h: &Harness) {
    let s = h.raw_session("");
    assert!(alive(h, &s).is_empty());
    h.backend.close_session(&s).unwrap();
}

/// Rule 1: a session not renewed within its lease duration expires.
pub fn session_expires_without_renewal(h: &Harness) {
    let s = h.raw_session("");
    thread::sleep(h.past_expiry());
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired);
}

/// Rule 2: an expired session never revives: renewal, acquire and join all fail.
pub fn expired_session_never_revives(h: &Harness) {
    let s = h.raw_session("");
    thread::sleep(h.past_expiry());
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired);
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired, "revived on second keep-alive");
    let e = h.backend.acquire(&s, &h.name("l")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SessionExpired, "{e}");
    let e = h.backend.join(&s, &h.name("g")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::SessionExpired, "{e}");
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired);
}

/// Keep-alive extends the session beyond its first lease duration.
pub fn keep_alive_extends_session(h: &Harness) {
    let s = h.raw_session("");
    let name = h.name("l");
    let t = acquired(h.backend.acquire(&s, &name), "acquire");
    outlive(h, &[&s]);
    assert_eq!(alive(h, &s), vec![(name.clone(), t)]);
    let holder = h.backend.holder(&name).unwrap().expect("holder after renewals");
    assert_eq!(holder.session, s);
    h.backend.close_session(&s).unwrap();
}

/// Closing is idempotent, and closing an unknown session is Ok.
pub fn close_is_idempotent(h: &Harness) {
    let s = h.raw_session("");
    h.backend.close_session(&s).unwrap();
    h.backend.close_session(&s).unwrap();
    assert_eq!(h.backend.keep_alive(&s, h.lease()).unwrap(), KeepAlive::Expired);
    let unknown =
        SessionId::parse(if s.as_str().len() == 16 { "00000000000000ab" } else { "000000000000000000000000000000ab" })
            .unwrap();
    h.backend.close_session(&unknown).unwrap();
}

/// Close releases the session's leases (tokens kept) and memberships.
pub fn close_releases_leases_and_memberships(h: &Harness) {
    let (a, b) = (h.raw_session("a"), h.raw_session("b"));
    let (l, g) = (h.name("l"), h.name("g"));
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.join(&a, &g).unwrap();
    h.backend.close_session(&a).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    assert!(h.backend.members(&g).unwrap().is_empty());
    let t2 = acquired(h.backend.acquire(&b, &l), "acquire after close");
    assert!(t2 > t1, "token after close {t2} not > {t1}");
    h.backend.close_session(&b).unwrap();
}

/// Remaining durations never exceed the lease duration.
pub fn remaining_never_exceeds_lease_duration(h: &Harness) {
    let s = h.raw_session("");
    let l = h.name("l");
    match h.backend.acquire(&s, &l).unwrap() {
        Acquire::Acquired { remaining, .. } => assert!(remaining <= h.lease() && !remaining.is_zero(), "{remaining:?}"),
        Acquire::Busy => panic!("busy"),
    }
    alive(h, &s);
    let holder = h.backend.holder(&l).unwrap().expect("holder");
    assert!(holder.remaining <= h.lease(), "holder remaining {:?}", holder.remaining);
    h.backend.close_session(&s).unwrap();
}

// ---------------------------------------------------------------- SPI: leases and tokens

/// Rule 4: tokens are > 0 and strictly increase with every new term.
pub fn token_increases_per_term(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "first");
    assert!(t1.get() > 0);
    h.backend.release(&a, &l, t1).unwrap();
    let t2 = acquired(h.backend.acquire(&a, &l), "same holder after release");
    assert!(t2 > t1, "{t2} not > {t1}");
    h.backend.release(&a, &l, t2).unwrap();
    let t3 = acquired(h.backend.acquire(&b, &l), "new holder");
    assert!(t3 > t2, "{t3} not > {t2}");
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// Rule 4: a token is stable within a term (renewals and re-acquire keep it).
pub fn token_stable_within_term(h: &Harness) {
    let s = h.raw_session("");
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&s, &l), "acquire");
    for _ in 0..3 {
        assert_eq!(alive(h, &s), vec![(l.clone(), t)]);
    }
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| x.token), Some(t));
    h.backend.close_session(&s).unwrap();
}

/// Acquiring a lease this session holds returns the same token.
pub fn reacquire_is_idempotent(h: &Harness) {
    let s = h.raw_session("");
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&s, &l), "acquire");
    assert_eq!(acquired(h.backend.acquire(&s, &l), "re-acquire"), t);
    assert_eq!(acquired(h.backend.acquire(&s, &l), "re-acquire"), t);
    h.backend.close_session(&s).unwrap();
}

/// A lease held by a live session is busy for others.
pub fn held_lease_is_busy(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    acquired(h.backend.acquire(&a, &l), "acquire");
    assert_eq!(h.backend.acquire(&b, &l).unwrap(), Acquire::Busy);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// Rules 3 and 4: after the holder's session expires, another session takes over with a larger token.
pub fn takeover_after_expiry(h: &Harness) {
    let (a, b) = (h.raw_session("a"), h.raw_session("b"));
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    assert_eq!(h.backend.acquire(&b, &l).unwrap(), Acquire::Busy);
    outlive(h, &[&b]);
    assert_eq!(h.backend.holder(&l).unwrap(), None, "holder of an expired session is reported");
    let t2 = acquired(h.backend.acquire(&b, &l), "takeover");
    assert!(t2 > t1, "{t2} not > {t1}");
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| (x.session, x.token)), Some((b.clone(), t2)));
    // The old holder never sees the lease again.
    assert_eq!(h.backend.keep_alive(&a, h.lease()).unwrap(), KeepAlive::Expired);
    h.backend.close_session(&b).unwrap();
}

/// Release frees the lease and keeps the token: the next term's token is larger.
pub fn release_keeps_token(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&a, &l, t1).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    assert!(alive(h, &a).is_empty(), "released lease still reported owned");
    let t2 = acquired(h.backend.acquire(&b, &l), "after release");
    assert!(t2 > t1);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// A release by a session that does not hold the lease is a no-op.
pub fn release_by_non_holder_is_noop(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    let t = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&b, &l, t).unwrap();
    h.backend.release(&b, &h.name("never-acquired"), t).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| (x.session, x.token)), Some((a.clone(), t)));
    assert_eq!(alive(h, &a), vec![(l.clone(), t)]);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// A release names a term: releasing an older term (a release that lands late) or a wrong token
/// never frees the current one.
pub fn release_of_another_term_is_noop(h: &Harness) {
    let a = h.raw_session("");
    let l = h.name("l");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    h.backend.release(&a, &l, t1).unwrap();
    let t2 = acquired(h.backend.acquire(&a, &l), "second term");
    assert!(t2 > t1);
    // The first term's release arrives again (late), and a release with a token never granted.
    h.backend.release(&a, &l, t1).unwrap();
    let never = Token::new(t2.get() + 1_000_000).unwrap_or(t2);
    h.backend.release(&a, &l, never).unwrap();
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| (x.session, x.token)), Some((a.clone(), t2)));
    assert_eq!(alive(h, &a), vec![(l.clone(), t2)]);
    h.backend.close_session(&a).unwrap();
}

/// Rule 4: tokens never reset — not by release, expiry, close or purge.
pub fn token_never_resets(h: &Harness) {
    let l = h.name("l");
    let a = h.raw_session("");
    let t1 = acquired(h.backend.acquire(&a, &l), "acquire");
    thread::sleep(h.past_expiry());
    let purged = h.backend.purge_expired().unwrap();
    let _ = purged;
    let b = h.raw_session("");
    let t2 = acquired(h.backend.acquire(&b, &l), "after expiry and purge");
    assert!(t2 > t1, "{t2} not > {t1}");
    h.backend.close_session(&b).unwrap();
    let c = h.raw_session("");
    let t3 = acquired(h.backend.acquire(&c, &l), "after close");
    assert!(t3 > t2);
    h.backend.close_session(&c).unwrap();
}

/// `holder` reports the live holder with its metadata and token; `None` when free.
pub fn holder_reports_metadata(h: &Harness) {
    let meta = format!("node-1 ✓ {}", "x".repeat(900));
    let a = h.raw_session(&meta);
    let l = h.name("l");
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    let t = acquired(h.backend.acquire(&a, &l), "acquire");
    let holder = h.backend.holder(&l).unwrap().expect("holder");
    assert_eq!((holder.session, holder.token, holder.metadata), (a.clone(), t, meta));
    h.backend.close_session(&a).unwrap();
}

/// Keep-alive lists every lease the session holds with its token, and never one it lost.
pub fn keep_alive_reports_owned_leases(h: &Harness) {
    let s = h.raw_session("");
    let mut want = Vec::new();
    for i in 0..5 {
        let l = h.name(&format!("l{i}"));
        let t = acquired(h.backend.acquire(&s, &l), "acquire");
        want.push((l, t));
    }
    want.sort();
    let mut got = alive(h, &s);
    got.sort();
    assert_eq!(got, want);
    h.backend.release(&s, &want[0].0, want[0].1).unwrap();
    let mut got = alive(h, &s);
    got.sort();
    assert_eq!(got, want[1..].to_vec());
    h.backend.close_session(&s).unwrap();
}

fn groups_of(h: &Harness, sid: &SessionId) -> Vec<Name> {
    match h.backend.keep_alive(sid, h.lease()) {
        Ok(KeepAlive::Alive { groups, .. }) => groups,
        other => panic!("keep_alive: expected Alive, got {other:?}"),
    }
}

/// A keep-alive reports exactly the groups the session is a member of, sorted: joined ones,
/// not left ones, never another session's.
pub fn keep_alive_reports_groups(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let (g1, g2, g3) = (h.name("g1"), h.name("g2"), h.name("g3"));
    assert!(groups_of(h, &a).is_empty());
    for g in [&g2, &g1, &g3] {
        h.backend.join(&a, g).unwrap();
    }
    h.backend.join(&b, &g3).unwrap();
    let mut want = vec![g1.clone(), g2.clone(), g3.clone()];
    want.sort();
    assert_eq!(groups_of(h, &a), want);
    h.backend.leave(&a, &g2).unwrap();
    h.backend.leave(&a, &g3).unwrap();
    assert_eq!(groups_of(h, &a), vec![g1.clone()]);
    assert_eq!(groups_of(h, &b), vec![g3.clone()]);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// A membership removed behind the session's back (as a leave that reached the server late
/// would) is found by the next renewals: `MembershipLost`, then the session re-joins it
/// (`MembershipRestored`) and is listed again.
pub fn membership_lost_behind_back_is_rejoined(h: &Harness) {
    let s = h.session();
    let events = s.events();
    let g = h.name("g");
    let m = s.join(&g).unwrap();
    assert!(m.is_member());
    h.backend.leave(s.id(), &g).unwrap();
    let next = |want: &dyn Fn(&SessionEvent) -> bool| {
        let end = Instant::now() + h.patience();
        while let Some(left) = end.checked_duration_since(Instant::now()) {
            match events.recv_timeout(left) {
                Ok(ev) if want(&ev) => return ev,
                Ok(_) => {}
                Err(_) => break,
            }
        }
        panic!("no such event within {:?}", h.patience());
    };
    let lost = next(&|ev| matches!(ev, SessionEvent::MembershipLost { .. }));
    assert_eq!(lost, SessionEvent::MembershipLost { group: g.clone() });
    let back = next(&|ev| matches!(ev, SessionEvent::MembershipRestored { .. }));
    assert_eq!(back, SessionEvent::MembershipRestored { group: g.clone() });
    assert!(m.is_member());
    assert!(h.backend.members(&g).unwrap().iter().any(|x| &x.session == s.id()));
    m.leave().unwrap();
    assert!(h.backend.members(&g).unwrap().is_empty());
    s.close().unwrap();
}

/// A `Coordinator` forwards a membership's loss and restoration as its own events.
pub fn coordinator_reports_membership_loss(h: &Harness) {
    let c = Coordinator::start(h.backend.clone(), h.options.clone()).unwrap();
    let events = c.events();
    let g = h.name("g");
    let m = c.join(&g).unwrap();
    let sid = c.session_id().unwrap();
    h.backend.leave(&sid, &g).unwrap();
    let end = Instant::now() + h.patience() * 2;
    let mut seen = Vec::new();
    while let Some(left) = end.checked_duration_since(Instant::now()) {
        match events.recv_timeout(left) {
            Ok(ev @ (CoordinatorEvent::MembershipLost { .. } | CoordinatorEvent::MembershipRestored { .. })) => {
                seen.push(ev);
                if seen.len() == 2 {
                    break;
                }
            }
            Ok(_) => {}
            Err(_) => break,
        }
    }
    assert_eq!(
        seen,
        vec![
            CoordinatorEvent::MembershipLost { session: sid.clone(), group: g.clone() },
            CoordinatorEvent::MembershipRestored { session: sid.clone(), group: g.clone() },
        ]
    );
    assert!(m.is_member());
    drop(m);
    c.close().unwrap();
}

/// A membership the session does not hold (as a join that landed after its caller gave up
/// would make) is left again by the next renewals.
pub fn stray_membership_is_left(h: &Harness) {
    let s = h.session();
    let (g, kept) = (h.name("g"), h.name("kept"));
    let m = s.join(&kept).unwrap();
    h.backend.join(s.id(), &g).unwrap();
    assert!(
        eventually(h.patience(), || h.backend.members(&g).unwrap().is_empty()),
        "the stray membership of {g} was not left"
    );
    assert!(m.is_member());
    assert_eq!(h.backend.members(&kept).unwrap().len(), 1);
    drop(m);
    s.close().unwrap();
}

/// A lease taken over (after the holder's session expired) is never reported owned by the old
/// holder again.
pub fn keep_alive_reports_lease_taken_over(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let l = h.name("l");
    acquired(h.backend.acquire(&a, &l), "acquire");
    outlive(h, &[&b]);
    acquired(h.backend.acquire(&b, &l), "takeover");
    match h.backend.keep_alive(&a, h.lease()).unwrap() {
        KeepAlive::Expired => {}
        KeepAlive::Alive { owned, .. } => {
            assert!(owned.iter().all(|(n, _)| n != &l), "taken-over lease reported owned")
        }
    }
    h.backend.close_session(&b).unwrap();
}

/// Names are case-sensitive: `Job` and `job` are different leases and groups.
pub fn names_are_case_sensitive(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let upper = h.name("Job");
    let lower = h.name("job");
    acquired(h.backend.acquire(&a, &upper), "Job");
    acquired(h.backend.acquire(&b, &lower), "job");
    assert_eq!(h.backend.holder(&upper).unwrap().map(|x| x.session), Some(a.clone()));
    assert_eq!(h.backend.holder(&lower).unwrap().map(|x| x.session), Some(b.clone()));
    h.backend.join(&a, &upper).unwrap();
    assert!(h.backend.members(&lower).unwrap().is_empty());
    assert_eq!(h.backend.members(&upper).unwrap().len(), 1);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// N sessions racing for one free name produce exactly one winner.
pub fn racing_sessions_one_winner(h: &Harness) {
    const N: usize = 8;
    let l = h.name("race");
    let sessions: Vec<SessionId> = (0..N).map(|_| h.raw_session("")).collect();
    let barrier = Arc::new(Barrier::new(N));
    let handles: Vec<_> = sessions
        .iter()
        .cloned()
        .map(|s| {
            let (b, l, backend) = (barrier.clone(), l.clone(), h.backend.clone());
            thread::spawn(move || {
                b.wait();
                backend.acquire(&s, &l)
            })
        })
        .collect();
    let results: Vec<_> = handles.into_iter().map(|j| j.join().expect("racer panicked").expect("acquire")).collect();
    let winners = results.iter().filter(|r| matches!(r, Acquire::Acquired { .. })).count();
    assert_eq!(winners, 1, "{results:?}");
    for s in &sessions {
        h.backend.close_session(s).unwrap();
    }
}

// ---------------------------------------------------------------- SPI: groups

/// A join that returned is visible at once, with the member's metadata; join and leave are idempotent.
pub fn join_visible_at_once(h: &Harness) {
    let (a, b) = (h.raw_session("meta-a"), h.raw_session("meta-b"));
    let g = h.name("g");
    h.backend.join(&a, &g).unwrap();
    h.backend.join(&a, &g).unwrap();
    h.backend.join(&b, &g).unwrap();
    let m = h.backend.members(&g).unwrap();
    let mut want = vec![(a.clone(), "meta-a".to_string()), (b.clone(), "meta-b".to_string())];
    want.sort();
    assert_eq!(m.iter().map(|m| (m.session.clone(), m.metadata.clone())).collect::<Vec<_>>(), want);
    h.backend.leave(&a, &g).unwrap();
    h.backend.leave(&a, &g).unwrap();
    assert_eq!(h.backend.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![b.clone()]);
    h.backend.close_session(&a).unwrap();
    h.backend.close_session(&b).unwrap();
}

/// `members` lists live sessions only: an expired member disappears.
pub fn members_are_live_sessions_only(h: &Harness) {
    let (a, b) = (h.raw_session(""), h.raw_session(""));
    let g = h.name("g");
    h.backend.join(&a, &g).unwrap();
    h.backend.join(&b, &g).unwrap();
    assert_eq!(h.backend.members(&g).unwrap().len(), 2);
    outlive(h, &[&a]);
    let m = h.backend.members(&g).unwrap();
    assert_eq!(m.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![a.clone()]);
    h.backend.close_session(&a).unwrap();
    assert!(h.backend.members(&g).unwrap().is_empty());
}

// ---------------------------------------------------------------- public API: locks

/// Invalid names are rejected before any I/O, naming the value and the rule.
pub fn invalid_names_rejected(h: &Harness) {
    let s = h.session();
    for bad in ["", ".", "..", "a/b", "a b", "x{y}", "é"] {
        let e = s.try_lock(bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName, "{bad}: {e}");
        assert!(e.to_string().contains("[A-Za-z0-9._:-]"), "{e}");
        assert_eq!(s.join(bad).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(s.campaign(bad).unwrap_err().kind(), ErrorKind::InvalidName);
        assert_eq!(s.members(bad).unwrap_err().kind(), ErrorKind::InvalidName);
    }
    let long = "x".repeat(129);
    assert_eq!(s.try_lock(long.as_str()).unwrap_err().kind(), ErrorKind::InvalidName);
    assert!(s.is_alive());
    s.close().unwrap();
}

/// `lock` returns a guard whose `token()` works until `release`, then fails.
pub fn lock_guard_token_until_release(h: &Harness) {
    let s = h.session();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    let t = lease.token().unwrap();
    assert!(lease.is_held());
    assert!(lease.remaining().is_some_and(|r| r <= h.lease()));
    // Renewals keep the token valid well past one lease duration.
    thread::sleep(h.past_expiry());
    assert_eq!(lease.token().unwrap(), t);
    assert_eq!(h.backend.holder(&l).unwrap().map(|x| x.token), Some(t));
    lease.release().unwrap();
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    s.close().unwrap();
}

/// `try_lock` returns `None` while another session holds the lease; `lock_timeout` times out.
pub fn try_lock_and_timeout_when_held(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let l = h.name("l");
    let held = a.lock(&l).unwrap();
    assert!(b.try_lock(&l).unwrap().is_none());
    let start = Instant::now();
    assert!(b.lock_timeout(&l, Duration::from_millis(600)).unwrap().is_none());
    assert!(start.elapsed() >= Duration::from_millis(600));
    assert!(b.lock_deadline(&l, Instant::now() + Duration::from_millis(100)).unwrap().is_none());
    assert!(held.is_held());
    drop(held);
    a.close().unwrap();
    b.close().unwrap();
}

/// A zero (or passed) timeout makes one attempt, as crossbeam's `recv_timeout(ZERO)` tries once:
/// on a free lock it acquires, on every backend however long its round trip.
pub fn zero_timeout_on_a_free_lock_acquires(h: &Harness) {
    let s = h.session();
    let l = h.name("zero");
    let lease = s.lock_timeout(&l, Duration::ZERO).unwrap().expect("one attempt on a free lock");
    assert!(lease.is_held());
    let l2 = h.name("passed");
    let lease2 = s.lock_deadline(&l2, Instant::now()).unwrap().expect("one attempt on a free lock");
    assert!(lease2.is_held());
    // A zero wait on a fresh campaign for a free election waits for its first attempt.
    let e = s.campaign(h.name("elect")).unwrap();
    let t = e.wait_elected(Duration::ZERO).expect("the first attempt wins a free election");
    assert_eq!(e.token().unwrap(), t);
    drop((lease, lease2, e));
    s.close().unwrap();
}

/// A waiter in `lock` gets the lease after the holder releases it, with a larger token.
pub fn lock_waits_for_release(h: &Harness) {
    let (a, b) = (h.session(), Arc::new(h.session()));
    let l = h.name("l");
    let first = a.lock(&l).unwrap();
    let t1 = first.token().unwrap();
    let (b2, l2) = (b.clone(), l.clone());
    let waiter = thread::spawn(move || {
        let lease = b2.lock(&l2).expect("lock");
        let t = lease.token().expect("token");
        (t, lease)
    });
    thread::sleep(Duration::from_millis(300));
    first.release().unwrap();
    let (t2, lease) = waiter.join().expect("waiter");
    assert!(t2 > t1, "{t2} not > {t1}");
    assert!(lease.is_held());
    drop(lease);
    a.close().unwrap();
}

/// Dropping the guard releases the lease.
pub fn drop_releases_lease(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let l = h.name("l");
    let t1 = a.lock(&l).unwrap().token().unwrap();
    // The guard above was dropped at the end of the statement.
    let lease = b.lock_timeout(&l, h.patience()).unwrap().expect("released by drop");
    assert!(lease.token().unwrap() > t1);
    drop(lease);
    a.close().unwrap();
    b.close().unwrap();
}

/// A session does not take a lease it already holds twice (locks are not reentrant).
pub fn lock_is_not_reentrant(h: &Harness) {
    let s = h.session();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    assert_eq!(s.try_lock(&l).unwrap_err().kind(), ErrorKind::AlreadyHeld);
    assert!(lease.is_held());
    drop(lease);
    s.close().unwrap();
}

/// Closing the session fails every `token()` at once and releases on the backend; close events.
pub fn close_session_ends_leases(h: &Harness) {
    let s = h.session();
    let events = s.events();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    let t = lease.token().unwrap();
    s.close().unwrap();
    assert_eq!(lease.token().unwrap_err().kind(), ErrorKind::LeaseLost);
    assert_eq!(h.backend.holder(&l).unwrap(), None);
    let got: Vec<SessionEvent> = events.try_iter().collect();
    assert_eq!(
        got,
        vec![
            SessionEvent::LeaseLost { name: l.clone(), token: t, reason: LossReason::SessionClosed },
            SessionEvent::Closed
        ]
    );
}

/// When the backend loses the session (deleted behind its back), the engine reports `LeaseLost`
/// then `Expired`, `token()` fails, and the session is never used again.
pub fn session_loss_is_detected(h: &Harness) {
    let s = h.session();
    let events = s.events();
    let l = h.name("l");
    let lease = s.lock(&l).unwrap();
    let t = lease.token().unwrap();
    h.backend.close_session(s.id()).unwrap();
    let first = events.recv_timeout(h.patience()).expect("an event");
    assert_eq!(first, SessionEvent::LeaseLost { name: l.clone(), token: t, reason: LossReason::SessionExpired });
    assert_eq!(events.recv_timeout(h.patience()).expect("expired event"), SessionEvent::Expired);
    assert!(lease.token().is_err());
    assert_eq!(s.state(), SessionState::Expired);
    assert_eq!(s.try_lock(h.name("other")).unwrap_err().kind(), ErrorKind::SessionExpired);
}

/// A lease taken by someone else while we still believe we hold it is reported lost on the next
/// keep-alive (here the backend releases it behind the holder's back).
pub fn lease_taken_behind_back_is_lost(h: &Harness) {
    let (a, b) = (h.session(), h.session());
    let events = a.events();
    let l = h.name("l");
    let lease = a.lock(&l).unwrap();
    let t1 = lease.token().unwrap();
    h.backend.release(a.id(), &l, t1).unwrap();
    let got = b.lock_timeout(&l, h.patience()).unwrap().expect("takeover");
    let ev = events.recv_timeout(h.patience()).expect("lost event");
    assert_eq!(ev, SessionEvent::LeaseLost { name: l.clone(), token: t1, reason: LossReason::NotOwned });
    assert!(lease.token().is_err());
    assert!(got.token().unwrap() > t1);
    assert!(a.is_alive());
    drop(got);
    a.close().unwrap();
    b.close().unwrap();
}

// ---------------------------------------------------------------- elections

/// Exactly one leader among N candidates; every node observes the same leader.
pub fn exactly_one_leader(h: &Harness) {
    let l = h.name("e");
    let sessions: Vec<Session> = (0..3).map(|i| h.session_with(&format!("node-{i}"))).collect();
    let elections: Vec<_> = sessions.iter().map(|s| s.campaign(&l).unwrap()).collect();
    assert!(eventually(h.patience(), || elections.iter().any(|e| e.is_leader())), "nobody elected");
    thread::sleep(h.options.renew_interval() * 2);
    let leaders: Vec<_> = elections.iter().filter(|e| e.is_leader()).collect();
    assert_eq!(leaders.len(), 1, "{elections:?}");
    let token = leaders[0].token().unwrap();
    for (s, e) in sessions.iter().zip(&elections) {
        let seen = s.leader(&l).unwrap().expect("leader");
        assert_eq!(seen.token, token);
        assert_eq!(e.leader().unwrap().map(|x| x.token), Some(token));
        if !e.is_leader() {
            assert_eq!(e.token().unwrap_err().kind(), ErrorKind::NotLeader);
        }
    }
    drop(elections);
    for s in sessions {
        s.close().unwrap();
    }
}

/// Leadership moves on resign (at once on push backends, within retry periods otherwise), with a
/// larger token; a follower's `leader()` sees the new leader; events arrive in order.
pub fn leadership_moves_on_resign(h: &Harness) {
    let l = h.name("e");
    let (a, b) = (h.session_with("a"), h.session_with("b"));
    let ea = a.campaign(&l).unwrap();
    let t1 = ea.wait_elected(h.patience()).unwrap();
    let eb = b.campaign(&l).unwrap();
    let events_b = eb.events();
    let events_a = ea.events();
    thread::sleep(h.options.renew_interval());
    assert!(!eb.is_leader());
    ea.resign().unwrap();
    let t2 = eb.wait_elected(h.patience()).unwrap();
    assert!(t2 > t1, "{t2} not > {t1}");
    let seen = a.leader(&l).unwrap().expect("leader");
    assert_eq!((seen.session, seen.token, seen.metadata.as_str()), (b.id().clone(), t2, "b"));
    let a_events: Vec<_> = events_a.try_iter().collect();
    assert_eq!(a_events.first(), Some(&ElectionEvent::Elected { token: t1 }), "{a_events:?}");
    assert!(a_events.contains(&ElectionEvent::Revoked { token: t1, reason: RevokeReason::Resigned }), "{a_events:?}");
    let b_events: Vec<_> = events_b.try_iter().collect();
    assert!(b_events.contains(&ElectionEvent::Elected { token: t2 }), "{b_events:?}");
    drop(eb);
    a.close().unwrap();
    b.close().unwrap();
}

/// Resigning and dropping elections stop contending and free the lease.
pub fn dropped_election_frees_the_lease(h: &Harness) {
    let l = h.name("e");
    let a = h.session();
    let e = a.campaign(&l).unwrap();
    e.wait_elected(h.patience()).unwrap();
    drop(e);
    assert!(eventually(h.patience(), || h.backend.holder(&l).unwrap().is_none()), "lease still held after drop");
    thread::sleep(h.options.renew_interval() * 2);
    assert!(h.backend.holder(&l).unwrap().is_none(), "a dropped election contended again");
    a.close().unwrap();
}

/// A leader whose session expires is revoked (token fails), and the other candidate takes over.
pub fn leader_loss_moves_leadership(h: &Harness) {
    let l = h.name("e");
    let (a, b) = (h.session(), h.session());
    let ea = a.campaign(&l).unwrap();
    let t1 = ea.wait_elected(h.patience()).unwrap();
    let events = ea.events();
    let eb = b.campaign(&l).unwrap();
    h.backend.close_session(a.id()).unwrap();
    let t2 = eb.wait_elected(h.patience()).unwrap();
    assert!(t2 > t1);
    assert!(eventually(h.patience(), || !ea.is_leader()));
    let revoked = events.iter().find(|e| matches!(e, ElectionEvent::Revoked { .. }));
    assert!(matches!(revoked, Some(ElectionEvent::Revoked { token, .. }) if token == t1), "{revoked:?}");
    drop(eb);
    b.close().unwrap();
}

/// Leader-gated work runs only while leading and is cancelled the moment leadership is lost.
pub fn leader_work_stops_on_loss(h: &Harness) {
    let l = h.name("e");
    let a = h.session();
    let e = a.campaign(&l).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    let task = e.run_while_leader(Schedule::Every(Duration::from_millis(20)), move |ctx| {
        let _ = tx.send((ctx.granted_token(), ctx.is_cancelled(), ctx.token().is_ok()));
    });
    let (token, cancelled, checked) = rx.recv_timeout(h.patience()).expect("work ran");
    assert!(!cancelled);
    assert!(checked, "the context's token is valid while leading");
    assert_eq!(e.token().unwrap(), token);
    h.backend.close_session(a.id()).unwrap();
    assert!(eventually(h.patience(), || !e.is_leader()));
    // Drain what ran before the loss was noticed; then nothing more runs.
    thread::sleep(Duration::from_millis(200));
    while rx.try_recv().is_ok() {}
    thread::sleep(Duration::from_millis(300));
    assert!(rx.try_recv().is_err(), "work ran after leadership was lost");
    task.stop();
}

// ---------------------------------------------------------------- groups via the public API

/// A member appears in `members` and in the change stream, and disappears from both when it leaves.
pub fn membership_changes_are_streamed(h: &Harness) {
    let g = h.name("g");
    let (a, b) = (h.session_with("watcher"), h.session_with("member"));
    let watch = a.watch_members(&g).unwrap();
    let first = watch.recv_timeout(h.patience()).expect("initial snapshot");
    assert!(first.members.is_empty());
    let m = b.join(&g).unwrap();
    assert!(m.is_member());
    assert_eq!(a.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![b.id().clone()]);
    let change = watch.recv_timeout(h.patience()).expect("join change");
    assert_eq!(
        change.joined.iter().map(|m| (m.session.clone(), m.metadata.clone())).collect::<Vec<_>>(),
        vec![(b.id().clone(), "member".to_string())]
    );
    m.leave().unwrap();
    assert!(a.members(&g).unwrap().is_empty());
    let change = watch.recv_timeout(h.patience()).expect("leave change");
    assert_eq!(change.left.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![b.id().clone()]);
    assert!(change.members.is_empty());
    a.close().unwrap();
    b.close().unwrap();
}

/// A member whose session ends disappears from `members`; dropping the handle leaves.
pub fn membership_ends_with_session(h: &Harness) {
    let g = h.name("g");
    let (a, b) = (h.session(), h.session());
    let ma = a.join(&g).unwrap();
    let mb = b.join(&g).unwrap();
    assert_eq!(a.members(&g).unwrap().len(), 2);
    drop(mb);
    assert!(eventually(h.patience(), || a.members(&g).unwrap().len() == 1));
    let _mb2 = b.join(&g).unwrap();
    b.close().unwrap();
    assert_eq!(a.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![a.id().clone()]);
    assert!(ma.is_member());
    drop(ma);
    a.close().unwrap();
}

// ---------------------------------------------------------------- recovery

/// A coordinator replaces an expired session, re-campaigns with a new, larger token, re-joins
/// durable memberships, and reports the gap through events.
pub fn recovery_reelects_with_larger_token(h: &Harness) {
    let l = h.name("e");
    let g = h.name("g");
    let c = match Coordinator::start(h.backend.clone(), h.options.clone()) {
        Ok(c) => c,
        Err(e) => panic!("coordinator: {e}"),
    };
    let events = c.events();
    let e = c.campaign(&l).unwrap();
    let m = c.join(&g).unwrap();
    let t1 = e.wait_elected(h.patience()).unwrap();
    let old = c.session_id().expect("session");
    let election_events = e.events();
    h.backend.close_session(&old).unwrap();
    let mut recovered = None;
    let deadline = Instant::now() + h.patience();
    while Instant::now() < deadline {
        if let Ok(CoordinatorEvent::Recovered { old: o, new, .. }) = events.recv_timeout(Duration::from_millis(100)) {
            recovered = Some((o, new));
            break;
        }
    }
    let (o, new) = recovered.expect("recovered event");
    assert_eq!(o, old);
    assert_ne!(new, old);
    let t2 = e.wait_elected(h.patience()).unwrap();
    assert!(t2 > t1, "{t2} not > {t1}");
    assert_eq!(e.session_id(), Some(new.clone()));
    assert!(eventually(h.patience(), || {
        h.backend.members(&g).unwrap().iter().map(|m| m.session.clone()).collect::<Vec<_>>() == vec![new.clone()]
    }));
    assert!(m.is_member());
    let evs: Vec<_> = election_events.try_iter().collect();
    let revoked = evs.iter().position(|x| matches!(x, ElectionEvent::Revoked { token, .. } if *token == t1));
    let elected = evs.iter().position(|x| matches!(x, ElectionEvent::Elected { token } if *token == t2));
    assert!(matches!((revoked, elected), (Some(r), Some(el)) if r < el), "{evs:?}");
    let seen: HashSet<_> = h.backend.holder(&l).unwrap().map(|x| x.session).into_iter().collect();
    assert!(seen.contains(&new));
    drop(e);
    drop(m);
    c.close().unwrap();
}

/// Instantiates every TCK case as a `#[test]` for one backend: `tck_suite!(name, harness_expr,
/// #[attr]...)`. The harness expression is evaluated once per test.
#[macro_export]
macro_rules! tck_suite {
    ($backend:ident, $harness:expr $(, #[$meta:meta])* $(,)?) => {
        #[allow(unused_imports, clippy::unwrap_used)]
        pub mod $backend {
            use super::*;
            $crate::__tck_cases!([$(#[$meta])*] $harness;
                open_session_is_alive,
                session_expires_without_renewal,
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
                keep_alive_reports_groups,
                membership_lost_behind_back_is_rejoined,
                stray_membership_is_left,
                coordinator_reports_membership_loss,
                names_are_case_sensitive,
                racing_sessions_one_winner,
                join_visible_at_once,
                members_are_live_sessions_only,
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
                exactly_one_leader,
                leadership_moves_on_resign,
                dropped_election_frees_the_lease,
                leader_loss_moves_leadership,
                leader_work_stops_on_loss,
                membership_changes_are_streamed,
                membership_ends_with_session,
                recovery_reelects_with_larger_token,
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __tck_cases {
    ([$($attrs:tt)*] $harness:expr; ) => {};
    ([$($attrs:tt)*] $harness:expr; $case:ident $(, $rest:ident)* $(,)?) => {
        #[test]
        $($attrs)*
        fn $case() {
            let harness: $crate::tck::Harness = $harness;
            $crate::tck::$case(&harness);
        }
        $crate::__tck_cases!([$($attrs)*] $harness; $($rest),*);
    };
}
