//! The performance targets of SPEC §10, measured per backend in one run.
//!
//! ```text
//! scripts/services up
//! cargo bench --all-features --bench simba                       # everything compiled in
//! SIMBA_BENCH=memory,redis cargo bench --features redis --bench simba
//! SIMBA_BENCH_QUICK=1 cargo bench --all-features --bench simba   # short smoke run
//! SIMBA_BENCH_SECTIONS=1,4 ...                                   # only some sections
//! SIMBA_BENCH_OUT=report.md ...                                  # also write the tables to a file
//! SIMBA_BENCH_CHARTS=docs/bench ...                               # also draw SVG charts there
//! SIMBA_BENCH_HANDOFF_SAMPLES=1000 ...                            # section 2's push samples
//! cargo test --all-features --bench simba                         # the benchmark's own checks
//! ```
//!
//! `SIMBA_BENCH_CHARTS=<dir>` (default: no charts) writes `handoff.svg` (section 2: the hand-off
//! latency distribution per backend) and `api-spi-raw.svg` (section 1: API vs SPI vs raw per
//! backend) into `<dir>`, relative to the package root under `cargo bench`; `docs/bench` holds
//! the committed ones that docs/benchmarks.md shows.
//!
//! Sections (each prints a markdown table; see `docs/benchmarks.md` for the results and their
//! reading):
//! 1. uncontended acquire+release: public API vs the backend SPI called directly vs the raw
//!    primitive on the same server, interleaved in blocks, plus the engine's worker hand-off;
//! 2. hand-off latency from `release` to a waiting `lock()` returning;
//! 3. crash failover: a holder that stops renewing vs waiters in `lock()`;
//! 4. keep-alive cost with 1, 100 and 10,000 leases held (time and round trips);
//! 5. scale: 1,000 sessions x 10 leases at default timings;
//! 6. idle CPU of one session holding 1,000 leases;
//! 7. semaphore acquire+release vs lock acquire+release;
//! 8. acquire+release against a peer library (tooz on MySQL) on the same server;
//! 9. partition sets: 64 partitions, members 4 → 5 → 4 (join, graceful leave, crash): time until
//!    covered and balanced, partitions moved, hand-off per partition.
//!
//! Server URLs come from the same variables as the tests (`SIMBA_TEST_REDIS_URL`, ...). This is a
//! benchmark, not a test: it asserts nothing about timings; it fails only when a server is
//! unreachable or an operation errors. A side stat the server will not give (ZooKeeper's `mntr`
//! outside its `4lw.commands.whitelist`, a counter, the version) is shown as
//! `unavailable: <reason>` and fails nothing.

#![forbid(unsafe_code)]

mod assets;
mod charts;
mod common;
mod proxy;
mod s1_uncontended;
mod s2_handoff;
mod s3_failover;
mod s4_keepalive;
mod s5_scale;
mod s6_idle;
mod s7_semaphore;
mod s8_peers;
mod s9_partitions;
mod selftest;
mod targets;

use std::process::ExitCode;
use std::time::Instant;

use common::{BenchResult, Report};

/// Counts every allocation of the process (section 1 reports allocations per op).
#[global_allocator]
static ALLOCATOR: &stats_alloc::StatsAlloc<std::alloc::System> = &stats_alloc::INSTRUMENTED_SYSTEM;
use targets::{Kind, Target};

/// Run settings from the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// Short smoke run (`SIMBA_BENCH_QUICK=1`).
    pub quick: bool,
    /// Backends to measure (`SIMBA_BENCH`, default every compiled-in backend).
    pub kinds: Vec<Kind>,
    /// Sections to run (`SIMBA_BENCH_SECTIONS`, default 1-9).
    pub sections: Vec<u32>,
    /// Random prefix of every name this run uses.
    pub prefix: String,
    /// Where sections 1 and 2 draw their SVG charts (`SIMBA_BENCH_CHARTS`, default none).
    pub charts: Option<std::path::PathBuf>,
    /// Section 2's samples per series on push backends (`SIMBA_BENCH_HANDOFF_SAMPLES`; default
    /// 600, etcd 3000): more make a p99 steadier (600: the 6th slowest).
    pub handoff_samples: Option<usize>,
}

impl Config {
    fn from_env() -> Result<Config, String> {
        let quick = std::env::var("SIMBA_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
        let kinds = match std::env::var("SIMBA_BENCH") {
            Ok(v) if !v.trim().is_empty() => {
                let mut kinds = Vec::new();
                for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match Kind::parse(part) {
                        Some(k) if k.compiled() => kinds.push(k),
                        Some(k) => {
                            return Err(format!(
                                "SIMBA_BENCH names {part}, but its feature is not compiled in: add --features {}",
                                k.feature()
                            ))
                        }
                        None => {
                            return Err(format!(
                                "SIMBA_BENCH: unknown backend {part:?} (known: {})",
                                Kind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
                            ))
                        }
                    }
                }
                kinds
            }
            _ => Kind::ALL.iter().copied().filter(|k| k.compiled()).collect(),
        };
        let sections = match std::env::var("SIMBA_BENCH_SECTIONS") {
            Ok(v) if !v.trim().is_empty() => {
                let mut s = Vec::new();
                for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match part.parse::<u32>() {
                        Ok(n @ 1..=9) => s.push(n),
                        _ => return Err(format!("SIMBA_BENCH_SECTIONS: {part:?} is not a section number 1-9")),
                    }
                }
                s
            }
            _ => (1..=9).collect(),
        };
        let prefix = format!("simba-bench-{:08x}", rand::random::<u32>());
        let charts = std::env::var_os("SIMBA_BENCH_CHARTS").filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
        let handoff_samples = match std::env::var("SIMBA_BENCH_HANDOFF_SAMPLES") {
            Ok(v) if !v.trim().is_empty() => match v.trim().parse::<usize>() {
                Ok(n @ 100..=100_000) => Some(n),
                _ => {
                    return Err(format!(
                        "SIMBA_BENCH_HANDOFF_SAMPLES: {v:?} is not a number of samples from 100 to 100000 (fewer \
                         make no p99)"
                    ))
                }
            },
            _ => None,
        };
        Ok(Config { quick, kinds, sections, prefix, charts, handoff_samples })
    }

    /// `full` normally, `quick` in a smoke run.
    pub fn pick<T>(&self, full: T, quick: T) -> T {
        if self.quick {
            quick
        } else {
            full
        }
    }
}

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; `cargo test --all-targets` runs bench targets without it.
    // Without it the binary runs its own checks (`cargo test --bench simba --all-features`).
    if !std::env::args().any(|a| a == "--bench") {
        println!("simba benchmarks: run them with `cargo bench --all-features --bench simba` (see docs/benchmarks.md)");
        return if selftest::run() { ExitCode::SUCCESS } else { ExitCode::FAILURE };
    }
    let _ = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("error"))
        .format_timestamp_micros()
        .try_init();
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match run(&config) {
        Ok(report) => {
            report.finish();
            if report.failures() > 0 {
                eprintln!("{} measurement(s) failed; see the tables above", report.failures());
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(config: &Config) -> BenchResult<Report> {
    let start = Instant::now();
    let mut report = Report::new(config);
    let mut targets = Vec::new();
    for &kind in &config.kinds {
        targets.push(Target::prepare(kind, config)?);
    }
    report.machine(&targets);
    for &section in &config.sections {
        let t = Instant::now();
        match section {
            1 => s1_uncontended::run(config, &targets, &mut report),
            2 => s2_handoff::run(config, &targets, &mut report),
            3 => s3_failover::run(config, &targets, &mut report),
            4 => s4_keepalive::run(config, &targets, &mut report),
            5 => s5_scale::run(config, &targets, &mut report),
            6 => s6_idle::run(config, &targets, &mut report),
            7 => s7_semaphore::run(config, &targets, &mut report),
            8 => s8_peers::run(config, &targets, &mut report),
            9 => s9_partitions::run(config, &targets, &mut report),
            _ => {}
        }
        report.line(format!(
            "_section {section}: {:.0?}, load average (1/5/15 min) at its end: {}_\n",
            t.elapsed(),
            common::loadavg()
        ));
    }
    for t in &targets {
        if let Err(e) = t.cleanup(config) {
            eprintln!("[bench] cleanup of {} failed: {e}", t.kind.name());
        }
    }
    eprintln!("[bench] total {:.0?}", start.elapsed());
    Ok(report)
}
