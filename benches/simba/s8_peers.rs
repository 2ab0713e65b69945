//! Section 8: the library against a peer library on the same server, the same day, in one run:
//! tooz (Python, OpenStack) on MySQL/MariaDB, its `GET_LOCK` lock taken and freed without waiting
//! (`benches/peers/tooz_lock.py`), against simba's `Session::try_lock` + `Lease::release`. The two
//! run in alternating blocks so that both see the same machine. tooz must be installed
//! (`pip install tooz pymysql`); a run without it says so in the table instead of a row.

use std::process::Command;
use std::time::Duration;

use simba::{Session, SessionOptions};

use crate::common::{err, fmt_dur, fmt_rate, name, progress, BenchResult, Report, Samples, Summary, Table};
use crate::targets::{Kind, Target};
use crate::Config;

/// The peer script, run by `python3` from the crate's root (where `cargo bench` runs).
const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/benches/peers/tooz_lock.py");

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let block = config.pick(200, 50);
    let rounds = config.pick(10, 2);
    let mut table = Table::new(
        "8. Against a peer library: uncontended acquire+release on the same server",
        &["backend", "peer", "peer ops/s", "peer p50", "peer p99", "simba ops/s", "simba p50", "simba p99", "**simba / peer** (p50)"],
    );
    let mut any = false;
    for t in targets.iter().filter(|t| t.kind == Kind::Mysql) {
        any = true;
        progress("section 8: mysql against tooz");
        match measure(config, t, block, rounds) {
            Ok(row) => table.row(row),
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    if !any {
        table.note("MySQL is not among the backends of this run: nothing to compare.");
    }
    table.note(format!(
        "{rounds} rounds × blocks of {block} ops each, the two alternating. Peer = tooz {} (`benches/peers/tooz_lock.py`): \
         `get_lock(name)`, then `acquire(blocking=False)` + `release()` per op, timed inside Python with `perf_counter_ns` \
         (tooz's MySQL lock is the session-level `GET_LOCK`/`RELEASE_LOCK`, held by its connection: nothing is written, \
         and its `release` closes the connection, so each acquire connects again). simba = `Session::try_lock` + \
         `Lease::release`, default timings: two durable statements per op.",
        tooz_version().unwrap_or_else(|| "(version unknown)".into())
    ));
    report.table(&table);
}

fn measure(config: &Config, t: &Target, block: usize, rounds: usize) -> BenchResult<Vec<String>> {
    let session = Session::open(t.backend()?, SessionOptions::default())?;
    let ours = name(&format!("{}.peer.simba", config.prefix))?;
    let theirs = format!("{}.peer.tooz", config.prefix);
    let mut simba = Samples::default();
    let mut peer = Samples::default();
    Samples::default().block(block / 4, || api_op(&session, &ours))?; // warm-up
    peer_block(&t.url, &theirs, block / 4)?;
    for round in 0..rounds {
        for k in 0..2 {
            if (round + k) % 2 == 0 {
                simba.block(block, || api_op(&session, &ours))?;
            } else {
                let samples = peer_block(&t.url, &theirs, block)?;
                peer.busy += samples.iter().sum::<Duration>();
                peer.ops += samples.len();
                peer.per_op.extend(samples);
            }
        }
    }
    let (s, p) = (Summary::of(&simba.per_op), Summary::of(&peer.per_op));
    let ratio = s.p50.as_secs_f64() / p.p50.as_secs_f64().max(1e-12);
    Ok(vec![
        t.kind.name().into(),
        "tooz (`GET_LOCK`)".into(),
        fmt_rate(peer.ops_per_s()),
        fmt_dur(p.p50),
        fmt_dur(p.p99),
        fmt_rate(simba.ops_per_s()),
        fmt_dur(s.p50),
        fmt_dur(s.p99),
        if ratio < 1.0 { format!("**{ratio:.2}** (faster)") } else { format!("**{ratio:.2}** (slower)") },
    ])
}

fn api_op(session: &Session, n: &simba::Name) -> BenchResult<()> {
    let lease = session.try_lock(n)?.ok_or_else(|| err(format!("{n} is busy")))?;
    lease.release()?;
    Ok(())
}

/// Runs `ops` tooz acquire+release in one `python3` process and returns their latencies.
fn peer_block(url: &str, lock: &str, ops: usize) -> BenchResult<Vec<Duration>> {
    let out = Command::new("python3")
        .args([SCRIPT, url, lock, &ops.to_string()])
        .output()
        .map_err(|e| err(format!("cannot run python3 {SCRIPT}: {e} (the peer needs Python 3 with `pip install tooz pymysql`)")))?;
    if !out.status.success() {
        return Err(err(format!(
            "the tooz peer failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let samples = text
        .split_whitespace()
        .map(|s| s.parse::<u64>().map(Duration::from_nanos))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| err(format!("the tooz peer printed {:?}, not latencies: {e}", text.trim())))?;
    if samples.len() != ops {
        return Err(err(format!("the tooz peer reported {} latencies for {ops} ops", samples.len())));
    }
    Ok(samples)
}

fn tooz_version() -> Option<String> {
    let code = "from importlib.metadata import version; print(version('tooz'), 'with PyMySQL', version('PyMySQL'))";
    let out = Command::new("python3").args(["-c", code]).output().ok()?;
    out.status.success().then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}
