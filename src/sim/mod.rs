//! Deterministic simulation of the **shipped** runtime under faults (SPEC §8; issue #21).
//!
//! Built only with the `sim` and `explore` features **and** `--cfg simba_explore` (the schedule
//! explorer's seam, `src/sync.rs`): the simulation runs the real `Session`, `Lease`, `Election`,
//! `Membership` and `Coordinator` code — its renewal thread, worker pool and engine — on shuttle
//! threads with a virtual clock that only the simulation moves, over the real backends' logic
//! behind simulated faults ([`shipped`]). Nothing in here re-implements the runtime or a
//! backend: the simulation supplies time, scheduling and the faults, and checks.
//!
//! Every run records a history ([`Record`]s) and [`check`] verifies the [`Invariant`]s over it;
//! each invariant lists the [`Premise`]s it depends on, so a violation in a run that broke one of
//! them on purpose is *explained* and any other violation is a bug.
//!
//! `docs/testing.md` ("Simulation of the shipped runtime") explains how to run it, replay a seed,
//! switch a fixed bug or a broken rule back on, and what it found.

mod check;
mod clock;
mod history;
pub mod shipped;

pub use check::{
    check, check_renewing, partition_stats, Invariant, PartStats, Premise, Violation, BUSY_PER_RENEW,
    RENEWALS_PER_RENEW, STABLE_LEASES,
};
pub use history::{Event, Held, PartStep, Record, TaskStep, WatchStep};
