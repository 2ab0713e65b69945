//! The seeded simulation of the **shipped** runtime (issue #21 item 1; `simba::sim::shipped`): the
//! real `Session`/`Lease`/`Election`/`Membership` code, renewal thread and worker pool on the
//! schedule explorer's seam (shuttle threads, a virtual clock only the simulation moves), over the
//! real memory backend on the sim's virtual clock behind a layer that fails, stalls, loses and
//! delays replies per call, with the sim's invariant checker over the history.
//!
//! Built only with `--features sim,explore` **and** `--cfg simba_explore` (scripts/test runs it
//! with the explorer, in its own target directory; see docs/testing.md, "Simulation of the shipped
//! runtime"). `SIMBA_SIM_SEEDS` sets the seeds of the sweep (default 2,000); the sweep starts at
//! a rotating offset (`SIMBA_SIM_SEED_OFFSET`, printed); `SIMBA_SIM_SEED=<seed>` replays one seed.
#![cfg(simba_explore)]

use std::ops::Range;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use simba::explore::Bug;
use simba::sim::shipped::{self, Scenario};

fn env_u64(key: &str) -> Option<u64> {
    let v = std::env::var(key).ok().filter(|v| !v.trim().is_empty())?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a number")))
}

/// The sweep's seeds: `SIMBA_SIM_SEEDS` (default 2,000) from the rotating offset
/// (`SIMBA_SIM_SEED_OFFSET`, or days since the Unix epoch × 100,000).
fn seeds() -> Range<u64> {
    let n = env_u64("SIMBA_SIM_SEEDS").unwrap_or(2_000);
    let o = env_u64("SIMBA_SIM_SEED_OFFSET").unwrap_or_else(|| {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default().as_secs() / 86_400 * 100_000
    });
    o..o + n
}

fn replay_hint(seed: u64) -> String {
    format!(
        "replay: SIMBA_SIM_SEED={seed} CARGO_TARGET_DIR=target/explore RUSTFLAGS=\"--cfg simba_explore\" cargo test \
         --features sim,explore --test sim_shipped replay -- --nocapture"
    )
}

#[test]
fn shipped_runtime_keeps_every_invariant_under_every_fault_class() {
    let sc = Scenario::default_faults();
    let seeds = seeds();
    println!("[{}] seeds {seeds:?} (SIMBA_SIM_SEED_OFFSET={} reruns this sweep)", sc.name, seeds.start);
    let started = Instant::now();
    let s = shipped::sweep(&sc, seeds.clone());
    println!("[{}] {} seeds in {:.2?}: {}", sc.name, s.runs, started.elapsed(), s.counts);
    if let Some(o) = s.failures.first() {
        panic!("{} of {} seeds failed; the first:\n{}\n{}", s.failures.len(), s.runs, o.report(30), replay_hint(o.seed));
    }
    let unfired = s.counts.unfired();
    assert!(unfired.is_empty(), "fault classes that never fired over seeds {seeds:?}: {unfired:?}");
}

#[test]
fn a_seed_replays_exactly() {
    let sc = Scenario::default_faults();
    for seed in [1, 2, 3] {
        let a = shipped::run(seed, &sc);
        let b = shipped::run(seed, &sc);
        assert!(a.records.len() > 10, "seed {seed} recorded almost nothing: {}", a.report(0));
        assert_eq!(a.records, b.records, "seed {seed} did not replay");
        assert_eq!(a.counts, b.counts);
    }
}

/// Replays `SIMBA_SIM_SEED` (printing its whole history); without it, does nothing but say so.
#[test]
fn replay() {
    let Some(seed) = env_u64("SIMBA_SIM_SEED") else {
        println!("set SIMBA_SIM_SEED=<seed> to replay one seed of the shipped-runtime simulation");
        return;
    };
    let sc = match std::env::var("SIMBA_SIM_BUG").ok().as_deref() {
        Some("LateAliveRevives") => Scenario::default_faults().with_bug(Bug::LateAliveRevives),
        _ => Scenario::default_faults(),
    };
    let o = shipped::run(seed, &sc);
    for (i, r) in o.records.iter().enumerate() {
        println!("#{i} {r}");
    }
    println!("{}", o.report(0));
    assert!(o.clean(), "seed {seed} failed:\n{}", o.report(30));
}

/// Runs seeds `offset..offset + budget` of `scenario` and returns the first that fails.
fn first_failing(sc: &Scenario, offset: u64, budget: u64) -> Option<shipped::Outcome> {
    (offset..offset + budget).map(|seed| shipped::run(seed, sc)).find(|o| !o.clean())
}

#[test]
#[ignore = "probe"]
fn probe_bugs() {
    for sc in [Scenario::default_faults().with_old_release_any_term(), Scenario::elections().with_old_release_any_term()] {
        let started = Instant::now();
        match first_failing(&sc, 0, 3_000) {
            Some(o) => println!("{}: seed {} in {:.2?}\n{}", sc.name, o.seed, started.elapsed(), o.report(12)),
            None => println!("{}: not found in 3000 seeds ({:.2?})", sc.name, started.elapsed()),
        }
    }
    for bug in [Bug::ReattachKept] {
        let sc = Scenario::elections().with_bug(bug);
        let started = Instant::now();
        match first_failing(&sc, 0, 3_000) {
            Some(o) => println!("{bug:?}: seed {} in {:.2?}\n{}", o.seed, started.elapsed(), o.report(12)),
            None => println!("{bug:?}: not found in 3000 seeds ({:.2?})", started.elapsed()),
        }
    }
}
