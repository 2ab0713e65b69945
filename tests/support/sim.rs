//! Helpers of the two shipped-simulation test files (`sim_shipped`, `sim_shipped_cluster`),
//! included by path (`#[path = "support/sim.rs"]`): the rest of `support` is not built for the
//! explorer's `--cfg simba_explore`.

use simba::sim::shipped::Scenario;

/// The number in `key`, if set and not blank.
///
/// # Panics
/// When the variable is set but not a number (a mistyped knob must not run a different test).
pub fn env_u64(key: &str) -> Option<u64> {
    let v = std::env::var(key).ok().filter(|v| !v.trim().is_empty())?;
    Some(v.trim().parse().unwrap_or_else(|_| panic!("{key}={v:?} is not a number")))
}

/// The command that replays `seed` of `sc` in test binary `test` (built with `features`).
pub fn replay_hint(sc: &Scenario, seed: u64, test: &str, features: &str) -> String {
    format!(
        "replay: SIMBA_SIM_SCENARIO={} SIMBA_SIM_SEED={seed} CARGO_TARGET_DIR=target/explore RUSTFLAGS=\"--cfg \
         simba_explore\" cargo test --features {features} --test {test} replay -- --nocapture",
        sc.name
    )
}
