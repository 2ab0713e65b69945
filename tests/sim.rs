//! Deterministic simulation (SPEC §8): the real session engine against simulated backends under
//! injected faults, with invariant checkers over the recorded history. See docs/testing.md,
//! "Deterministic simulation".
//!
//! Every assertion is deterministic: a run depends only on its seed and scenario. Scale the big
//! sweeps with `SIMBA_SIM_SEEDS` (default 1500 per model); replay one seed with
//! `SIMBA_SIM_SCENARIO=<name> SIMBA_SIM_SEED=<seed> cargo test --test sim replay -- --nocapture`.
//!
//! The big "no violation" sweeps start at a seed offset that rotates daily (days since the Unix
//! epoch × 100,000), so CI explores new seeds every day; every sweep prints its seed range and
//! `SIMBA_SIM_SEED_OFFSET=<n>` reruns a day's sweeps (`0` gives the fixed seeds of before). Every
//! sweep asserts that each fault class its scenario enables fired at least once.

use std::ops::Range;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use simba::sim::{self, BrokenRule, Invariant, Premise, Scenario, Sweep};

/// Seeds of the big "no violation" sweeps.
fn seeds() -> u64 {
    std::env::var("SIMBA_SIM_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(1500)
}

/// The offset of the rotating sweeps: `SIMBA_SIM_SEED_OFFSET`, or days since the Unix epoch ×
/// 100,000.
fn seed_offset() -> u64 {
    if let Some(v) = std::env::var("SIMBA_SIM_SEED_OFFSET").ok().filter(|v| !v.is_empty()) {
        return v.parse().unwrap_or_else(|_| panic!("SIMBA_SIM_SEED_OFFSET={v:?} is not a number"));
    }
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    since.as_secs() / 86_400 * 100_000
}

/// `seeds` moved by the rotating offset (for the sweeps that must find nothing).
fn rotated(seeds: Range<u64>) -> Range<u64> {
    let o = seed_offset();
    seeds.start + o..seeds.end + o
}

fn sweep(sc: &Scenario, seeds: Range<u64>) -> Sweep {
    let started = Instant::now();
    println!(
        "[{}] seeds {seeds:?} (SIMBA_SIM_SEED_OFFSET={} reruns the rotating sweeps of this run)",
        sc.name,
        seed_offset()
    );
    let s = sim::sweep(sc, seeds);
    println!("[{}] {} in {:.2?}; {}", sc.name, s.summary(3), started.elapsed(), s.stats.fired);
    let unfired = s.stats.fired.unfired(sc);
    assert!(unfired.is_empty(), "[{}] faults that never fired over {} seeds: {unfired:?}", sc.name, s.seeds);
    s
}

/// The report of the first failing seed (replayed), for assertion messages.
fn first_failure(sc: &Scenario, s: &Sweep) -> String {
    match s.failures.first() {
        Some((seed, ..)) => sim::replay(*seed, sc).report(40),
        None => String::new(),
    }
}

fn assert_clean(sc: &Scenario, seeds: Range<u64>) {
    let s = sweep(sc, seeds);
    assert!(s.failures.is_empty(), "{}\n{}", s.summary(10), first_failure(sc, &s));
    assert!(s.stats.adoptions > s.seeds, "the workload barely took any lease: {}", s.summary(0));
    assert_eq!(s.stats.truncated, 0, "runs hit the event budget (simulator bug)");
}

// ----- premise-respecting faults: no violation -----

/// The engine on the memory backend under every premise-respecting fault, late releases included
/// (releases are term-scoped and a released term is never adopted again).
#[test]
fn memory_engine_has_no_violation() {
    assert_clean(&Scenario::memory(), rotated(0..seeds()));
    assert_clean(&Scenario::memory().harsh(), rotated(0..seeds() / 3));
}

/// With the proposed fix emulated, late releases included: no violation.
#[test]
fn memory_with_proposed_fix_has_no_violation() {
    assert_clean(&Scenario::memory().with_proposed_fix(), rotated(10_000..10_000 + seeds() / 2));
    assert_clean(&Scenario::memory().with_proposed_fix().harsh(), rotated(0..seeds() / 3));
}

/// The Redis Cluster model (3 nodes, per-node clocks, late script delivery), proposed fix emulated.
#[test]
fn cluster_with_proposed_fix_has_no_violation() {
    assert_clean(&Scenario::cluster().with_proposed_fix(), rotated(0..seeds()));
    assert_clean(&Scenario::cluster().with_proposed_fix().harsh(), rotated(0..seeds() / 3));
}

// ----- known findings: the simulation reproduces them (flip to "no violation" once fixed) -----

fn assert_finding(sc: &Scenario, seeds: Range<u64>, what: &str) {
    assert_finding_of(sc, seeds, what, Invariant::ExclusiveToken);
}

fn assert_finding_of(sc: &Scenario, seeds: Range<u64>, what: &str, invariant: Invariant) {
    let s = sweep(sc, seeds);
    assert!(
        !s.unexplained.is_empty(),
        "the simulation no longer finds {what}: if the engine/backend was fixed, move this scenario to the \
         no-violation tests. {}",
        s.summary(3)
    );
    for (_, v, _) in &s.failures {
        assert!(v.iter().all(|v| v.invariant == invariant), "unexpected kind of violation: {v:?}");
    }
    println!("finding reproduced ({what}); first failing seed:\n{}", first_failure(sc, &s));
}

/// Finding 1 (fixed): with the old SPI, whose release freed whatever term the session held, a
/// release delivered after its call ended freed a term the same session re-acquired meanwhile (the
/// backend returns the same token for an idempotent re-acquire). Kept to show the simulation sees
/// it: the fix is term-scoped releases plus the engine never re-adopting a released term.
#[test]
fn finding_late_release_frees_a_readopted_term() {
    assert_finding(
        &Scenario::memory().with_old_release_any_term(),
        0..300,
        "late releases freeing a re-adopted term (memory, old release)",
    );
}

/// Finding 2 (Cluster): a term an acquire abandoned (returned too late) is released by renewals or
/// the acquire's cleanup while another acquire of the same session reports that very term acquired.
#[test]
fn finding_cluster_abandoned_term_released_after_readoption() {
    assert_finding(
        &Scenario::cluster().without_late_releases().harsh(),
        0..400,
        "the Cluster model releasing an abandoned term that was re-adopted",
    );
}

// ----- groups, pushed notifications, elections -----

/// Group membership on the memory backend (joins, leaves and drops, `members` reads from every
/// client, `is_member()` sampled), joins waiting for the session's leave of the group in flight as
/// `attach_membership` does, leaves never delivered after their call ended: no violation of the
/// backend's group contract (`members-live`, `join-visible`, `leave-final`) nor of
/// `member-listed`. Then groups, push and elections together under harsh faults.
#[test]
fn memory_groups_without_late_leaves_have_no_violation() {
    let sc = Scenario::memory().with_groups().without_late_releases();
    let s = sweep(&sc, rotated(0..seeds() / 3));
    assert!(s.failures.is_empty(), "{}\n{}", s.summary(10), first_failure(&sc, &s));
    assert!(s.stats.joins > s.seeds * 5 && s.stats.members_reads > s.seeds * 50, "{}", s.summary(0));
    assert!(s.stats.late_joins > 0, "no join landed after its caller gave up: {}", s.summary(0));
    assert_eq!(s.stats.truncated, 0);
    // All three workloads at once, harsh faults, every proposed fix.
    assert_clean(&sc.with_push().with_elections().with_proposed_fix().harsh(), rotated(0..seeds() / 10));
}

/// Finding 3 (fixed): a leave still on its way lands after the same session joined the group
/// again: the new `Membership` says `is_member()` while the backend no longer lists it. Two
/// fixes: a join waits for the session's leave of the group in flight (`+oldJoin` emulates the
/// join before), and keep-alives report the session's groups, so a leave that lands after its
/// call ended (a timed-out request still on its way) is found by the next renewal, reported
/// (`MembershipLost`, `is_member()` false) and re-joined; `member-listed` allows that window (two
/// lease durations at most). `+broken:GroupReportsIgnored` makes the driver ignore the reports:
/// the loss then goes unnoticed and the simulation finds it, with and without the join fix.
#[test]
fn finding_late_leave_undoes_a_rejoin() {
    let broken = Scenario::memory().with_groups().with_broken_rule(BrokenRule::GroupReportsIgnored);
    let what = "a leave in flight undoing a re-join of the same session (join before the fix, reports ignored)";
    assert_finding_of(&broken.clone().with_old_join(), 0..120, what, Invariant::MemberListed);
    let what = "a leave delivered after its call ended undoing a re-join (reports ignored)";
    assert_finding_of(&broken, 0..600, what, Invariant::MemberListed);
    let sc = Scenario::memory().with_groups();
    let s = sweep(&sc, rotated(0..seeds()));
    assert!(s.failures.is_empty(), "{}\n{}", s.summary(10), first_failure(&sc, &s));
    assert!(s.stats.memberships_lost > 0, "no late leave was detected: {}", s.summary(0));
    assert!(s.stats.strays_left > 0, "no late join was left again: {}", s.summary(0));
    assert_clean(&Scenario::memory().with_groups().with_old_join(), rotated(0..seeds() / 3));
}

/// Pushed release notifications through the network (delayed, lost, cut): candidates wake at once
/// on a notification and fall back to their periodic retry when it is lost; exclusivity holds
/// either way. Hand-offs by push and by retry are counted (no timing asserted).
#[test]
fn memory_push_has_no_violation() {
    let sc = Scenario::memory().with_push();
    let s = sweep(&sc, rotated(0..seeds() / 2));
    assert!(s.failures.is_empty(), "{}\n{}", s.summary(10), first_failure(&sc, &s));
    let st = &s.stats;
    assert!(st.notifications_lost > 0, "no notification was lost: {}", s.summary(0));
    assert!(st.handoffs_push > 0 && st.handoffs_retry > 0, "hand-offs by push and by retry: {}", s.summary(0));
    assert_eq!(st.truncated, 0);
    assert_clean(&Scenario::memory().with_push().harsh(), rotated(0..seeds() / 5));
}

/// Elections: campaigns (late attempt replies adopted by their send instant, resigns, push),
/// `leader()` reads from every client checked against the backend's live term.
#[test]
fn memory_elections_have_no_violation() {
    let sc = Scenario::memory().with_elections().with_push();
    let s = sweep(&sc, rotated(0..seeds() / 3));
    assert!(s.failures.is_empty(), "{}\n{}", s.summary(10), first_failure(&sc, &s));
    assert!(s.stats.elected > s.seeds && s.stats.leader_reads > s.seeds * 10, "{}", s.summary(0));
    assert_clean(&Scenario::memory().with_elections().harsh(), rotated(0..seeds() / 5));
}

/// Finding 4 (fixed twice): a campaign attempt the renewal thread stopped waiting for (after the
/// query timeout) returns after a newer attempt made the session leader, carrying that very term
/// (the backend's acquire is idempotent); `Engine::on_acquired` says `Undo` (the reply came too
/// late to be of use, or a release of the name overlapped it) and `finish_acquire` released that
/// term — the one the session leads with, while its `token()` still succeeded: another candidate
/// took the lease and both tokens were valid at once. `finish_acquire` keeps a reply confirming the
/// held term; and since issue #14 `Engine::begin_release` drops the held entry of the term it
/// releases, so even the old driver (`+oldUndo`) can no longer leave a term held that it releases:
/// the scenario is clean.
#[test]
fn campaign_undo_of_the_led_term_no_longer_leaves_it_held() {
    assert_clean(&Scenario::memory().with_elections().with_old_undo(), 100..360);
}

// ----- premise-breaking faults: the checker sees the violation, and only explained ones -----

fn assert_premise_broken(sc: &Scenario, seeds: Range<u64>, premise: Premise, expect: Invariant) {
    let s = sweep(sc, seeds);
    assert!(s.premise_broken_runs.get(&premise).copied().unwrap_or(0) > 0, "{premise} never broken");
    let found = s.by_invariant.get(&expect).copied().unwrap_or(0);
    assert!(found > 0, "breaking {premise} never violated {expect}: {}", s.summary(3));
    assert!(
        s.unexplained.is_empty(),
        "violations not explained by {premise}: {}\n{}",
        s.summary(5),
        sim::replay(s.unexplained[0], sc).report(40)
    );
    for (_, v, broken) in &s.failures {
        for v in v {
            assert!(v.invariant.premises().iter().any(|p| broken.contains(p)), "{v}");
        }
    }
}

#[test]
fn data_loss_regresses_tokens_memory() {
    let sc = Scenario::memory().with_proposed_fix().with_data_loss();
    assert_premise_broken(&sc, 0..100, Premise::TokenReset, Invariant::TokenMonotonic);
}

#[test]
fn data_loss_forgets_members() {
    let sc = Scenario::memory().with_groups().without_late_releases().with_data_loss();
    assert_premise_broken(&sc, 0..50, Premise::TokenReset, Invariant::JoinVisible);
}

/// `member-listed` rests on the local deadline preceding the backend's expiry, like `exclusive-token`.
#[test]
fn drift_beyond_the_bound_breaks_member_listed() {
    let sc = Scenario::memory().with_groups().without_late_releases().with_drift_beyond();
    assert_premise_broken(&sc, 0..60, Premise::Drift, Invariant::MemberListed);
}

#[test]
fn backend_clock_jumps_break_member_listed() {
    let sc = Scenario::memory().with_groups().without_late_releases().with_clock_jumps();
    assert_premise_broken(&sc, 0..60, Premise::ClockJump, Invariant::MemberListed);
}

#[test]
fn data_loss_misleads_leader_reads() {
    let sc = Scenario::memory().with_elections().with_data_loss();
    assert_premise_broken(&sc, 0..50, Premise::TokenReset, Invariant::LeaderRead);
}

#[test]
fn data_loss_regresses_tokens_cluster() {
    let sc = Scenario::cluster().with_proposed_fix().with_data_loss();
    assert_premise_broken(&sc, 0..150, Premise::TokenReset, Invariant::TokenMonotonic);
}

#[test]
fn drift_beyond_the_bound_overlaps_tokens_memory() {
    let sc = Scenario::memory().with_proposed_fix().with_drift_beyond();
    assert_premise_broken(&sc, 0..150, Premise::Drift, Invariant::ExclusiveToken);
}

#[test]
fn drift_beyond_the_bound_overlaps_tokens_cluster() {
    let sc = Scenario::cluster().with_proposed_fix().with_drift_beyond();
    assert_premise_broken(&sc, 0..150, Premise::Drift, Invariant::ExclusiveToken);
}

#[test]
fn backend_clock_jumps_overlap_tokens_memory() {
    let sc = Scenario::memory().with_proposed_fix().with_clock_jumps();
    assert_premise_broken(&sc, 0..150, Premise::ClockJump, Invariant::ExclusiveToken);
}

#[test]
fn backend_clock_jumps_overlap_tokens_cluster() {
    let sc = Scenario::cluster().with_proposed_fix().with_clock_jumps();
    assert_premise_broken(&sc, 0..150, Premise::ClockJump, Invariant::ExclusiveToken);
}

// ----- deliberately broken engine rules are caught -----

fn assert_caught(sc: &Scenario, seeds: Range<u64>) {
    let s = sweep(sc, seeds);
    assert!(!s.unexplained.is_empty(), "the broken rule went unnoticed: {}", s.summary(3));
    assert!(s.premise_broken_runs.is_empty(), "these runs must respect every premise");
    println!("caught; first failing seed:\n{}", first_failure(sc, &s));
}

#[test]
fn broken_rule_deadline_from_reply_instant_is_caught_memory() {
    assert_caught(
        &Scenario::memory().with_proposed_fix().with_broken_rule(BrokenRule::DeadlineFromReplyInstant),
        0..400,
    );
}

#[test]
fn broken_rule_deadline_from_reply_instant_is_caught_cluster() {
    assert_caught(
        &Scenario::cluster().with_proposed_fix().with_broken_rule(BrokenRule::DeadlineFromReplyInstant),
        0..200,
    );
}

#[test]
fn broken_rule_no_drift_is_caught() {
    assert_caught(&Scenario::memory().with_proposed_fix().with_broken_rule(BrokenRule::NoDrift), 0..300);
}

/// `is_member()` that ignores the local deadline claims a membership the backend already expired.
#[test]
fn broken_rule_member_ignores_deadline_is_caught() {
    let sc =
        Scenario::memory().with_groups().without_late_releases().with_broken_rule(BrokenRule::MemberIgnoresDeadline);
    let s = sweep(&sc, 0..60);
    assert!(!s.unexplained.is_empty(), "the broken rule went unnoticed: {}", s.summary(3));
    assert!(s.by_invariant.keys().all(|i| *i == Invariant::MemberListed), "{}", s.summary(3));
    println!("caught; first failing seed:\n{}", first_failure(&sc, &s));
}

// ----- replay -----

#[test]
fn a_seed_replays_exactly() {
    let scenarios = [
        Scenario::memory(),
        Scenario::cluster().with_proposed_fix(),
        Scenario::memory().with_proposed_fix().with_data_loss(),
        Scenario::cluster().with_proposed_fix().with_clock_jumps(),
        Scenario::memory().with_groups().with_push().with_elections(),
    ];
    for sc in &scenarios {
        for seed in [0, 1, 2, 2024] {
            let a = sim::run(seed, sc);
            let b = sim::replay(seed, sc);
            assert!(a.records.len() > 100, "{}: seed {seed} recorded only {} events", sc.name, a.records.len());
            assert_eq!(a.records, b.records, "{}: seed {seed} did not replay", sc.name);
            assert_eq!(a.violations, b.violations);
            assert_eq!(a.fingerprint(), b.fingerprint());
            assert_eq!(a.stats, b.stats);
        }
        assert_ne!(sim::run(0, sc).fingerprint(), sim::run(1, sc).fingerprint(), "seeds must differ");
    }
    // A failing seed reproduces its violation exactly, record index included.
    let sc = Scenario::memory().with_proposed_fix().with_data_loss();
    let first = sim::run(0, &sc);
    assert!(!first.violations.is_empty());
    assert_eq!(sim::replay(0, &sc).violations, first.violations);
    assert_eq!(Scenario::from_name(&sc.name), Some(sc.clone()));
}

#[test]
fn invariants_name_their_premises() {
    assert_eq!(Premise::TokenReset.tag(), "premise:tokenReset");
    assert_eq!(Premise::ClockJump.tag(), "premise:clockJump");
    assert_eq!(Premise::Drift.tag(), "premise:drift");
    assert!(Invariant::TokenMonotonic.premises().contains(&Premise::TokenReset));
    for p in [Premise::TokenReset, Premise::ClockJump, Premise::Drift] {
        assert!(Invariant::ExclusiveToken.premises().contains(&p));
    }
    assert!(Invariant::GrantedOnly.premises().is_empty());
    assert_eq!(Invariant::JoinVisible.premises(), &[Premise::TokenReset]);
    assert_eq!(Invariant::MemberListed.premises(), Invariant::ExclusiveToken.premises());
    for name in
        ["memory+groups+oldJoin+noLateReleases", "memory+push+harsh", "memory+elections+broken:MemberIgnoresDeadline"]
    {
        assert_eq!(Scenario::from_name(name).map(|s| s.name), Some(name.to_string()));
    }
    for i in Invariant::ALL {
        println!("{i}");
    }
}

/// Replays one seed and prints its report: `SIMBA_SIM_SCENARIO=memory SIMBA_SIM_SEED=2 cargo test
/// --test sim replay -- --nocapture` (`SIMBA_SIM_CONTEXT` records of history before the first
/// violation, default 60; `SIMBA_SIM_HISTORY=1` prints the whole history). Does nothing without
/// `SIMBA_SIM_SEED`.
#[test]
fn replay() {
    let Ok(seed) = std::env::var("SIMBA_SIM_SEED") else { return };
    let seed: u64 = seed.parse().expect("SIMBA_SIM_SEED is a number");
    let name = std::env::var("SIMBA_SIM_SCENARIO").unwrap_or_else(|_| "memory".into());
    let sc = Scenario::from_name(&name).unwrap_or_else(|| panic!("unknown scenario {name:?}"));
    let o = sim::replay(seed, &sc);
    if std::env::var("SIMBA_SIM_HISTORY").is_ok() {
        for (i, r) in o.records.iter().enumerate() {
            println!("#{i:<5} {r}");
        }
    }
    let ctx = std::env::var("SIMBA_SIM_CONTEXT").ok().and_then(|v| v.parse().ok()).unwrap_or(60);
    println!("{}", o.report(ctx));
    println!("{:?}", o.stats);
}

/// Sweeps the scenarios named in `SIMBA_SIM_EXPLORE` (comma-separated, e.g.
/// `memory+fix+harsh,cluster`) over `SIMBA_SIM_SEEDS` seeds and prints what it finds. Does nothing
/// without `SIMBA_SIM_EXPLORE`.
#[test]
fn explore() {
    let Ok(names) = std::env::var("SIMBA_SIM_EXPLORE") else { return };
    for name in names.split(',') {
        let sc = Scenario::from_name(name).unwrap_or_else(|| panic!("unknown scenario {name:?}"));
        let s = sweep(&sc, 0..seeds());
        for (seed, v, broken) in &s.failures {
            println!("  seed {seed} (broken {broken:?}): {}", v[0]);
        }
    }
}

/// The fault check itself: with nothing fired, every fault class a scenario enables is named
/// (client stalls only for the Cluster model, premise breakers only when enabled).
#[test]
fn faults_that_never_fired_are_named() {
    let none = sim::FaultsFired::default();
    let memory = [
        "lost requests",
        "lost replies",
        "slow messages",
        "hung calls",
        "partitions",
        "pauses",
        "drift within the bound",
        "late releases",
    ];
    assert_eq!(none.unfired(&Scenario::memory()), memory);
    assert!(none.unfired(&Scenario::cluster()).contains(&"client stalls"));
    assert!(!none.unfired(&Scenario::memory().without_late_releases()).contains(&"late releases"));
    for (sc, class) in [
        (Scenario::memory().with_data_loss(), "data loss"),
        (Scenario::memory().with_clock_jumps(), "clock jumps"),
        (Scenario::memory().with_drift_beyond(), "drift beyond the bound"),
    ] {
        assert!(none.unfired(&sc).contains(&class), "{}", sc.name);
    }
    // One real run of the harsh scenario fires the common faults.
    let fired = sim::run(3, &Scenario::cluster().harsh()).stats.fired;
    assert!(fired.lost_requests + fired.lost_replies + fired.slow_messages > 0, "{fired}");
}
