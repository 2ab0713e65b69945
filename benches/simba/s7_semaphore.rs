//! Section 7: uncontended semaphore acquire+release vs lock acquire+release, through the public
//! API, in interleaved blocks (as section 1). Four variants on one session:
//! - lock: `Session::try_lock` + `Lease::release`;
//! - sem 1: `Semaphore::try_acquire` + `Permit::release` on a 1-permit semaphore (one slot);
//! - sem 8 free: the same on an 8-permit semaphore nobody else holds (the random first slot is free);
//! - sem 8, 7 held: the same with 7 of the 8 slots held by another session, so an acquire tries
//!   slots from a random one until it finds the free one (1 to 8 attempts, 4.5 on average).
//!
//! Also round trips per op through the counting proxy, where there is one.

use std::time::Duration;

use simba::backend::LeaseBackend;
use simba::semaphore::{Permit, Semaphore};
use simba::{Session, SessionOptions};

use crate::common::{err, fmt_dur, fmt_rate, name, progress, BenchResult, Report, Samples, Summary, Table};
use crate::proxy::Proxy;
use crate::targets::{Kind, Target};
use crate::Config;

/// A lock, or a semaphore whose permit is taken and given back.
enum Variant<'a> {
    Lock(&'a Session, &'a simba::Name),
    Sem(&'a Semaphore),
}

impl Variant<'_> {
    fn op(&self) -> BenchResult<()> {
        match self {
            Variant::Lock(s, n) => {
                let lease = s.try_lock(*n)?.ok_or_else(|| err(format!("{n} is busy")))?;
                lease.release()?;
            }
            Variant::Sem(sem) => {
                let permit = sem.try_acquire()?.ok_or_else(|| err(format!("semaphore {} is full", sem.name())))?;
                permit.release()?;
            }
        }
        Ok(())
    }

    fn block(&self, n: usize, into: &mut Samples) -> BenchResult<()> {
        into.block(n, || self.op())
    }
}

/// The lock and the three semaphores of one measurement, on `session`; `other` holds 7 slots of
/// the third semaphore (returned so that they stay held).
struct Setup {
    lock: simba::Name,
    sem1: Semaphore,
    sem8: Semaphore,
    full: Semaphore,
    _held: Vec<Permit>,
}

impl Setup {
    fn new(config: &Config, tag: &str, session: &Session, other: &Session) -> BenchResult<Setup> {
        let lock = name(&format!("{}.sem.{tag}.lock", config.prefix))?;
        let sem1 = session.semaphore(format!("{}.sem.{tag}.1", config.prefix), 1)?;
        let sem8 = session.semaphore(format!("{}.sem.{tag}.8", config.prefix), 8)?;
        let full_name = format!("{}.sem.{tag}.8full", config.prefix);
        let full = session.semaphore(full_name.as_str(), 8)?;
        let by_other = other.semaphore(full_name.as_str(), 8)?;
        let held = (0..7)
            .map(|_| by_other.try_acquire()?.ok_or_else(|| err("the 8-slot semaphore is full before the bench")))
            .collect::<BenchResult<Vec<_>>>()?;
        Ok(Setup { lock, sem1, sem8, full, _held: held })
    }

    fn variants<'a>(&'a self, session: &'a Session) -> [Variant<'a>; 4] {
        [
            Variant::Lock(session, &self.lock),
            Variant::Sem(&self.sem1),
            Variant::Sem(&self.sem8),
            Variant::Sem(&self.full),
        ]
    }
}

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let block = config.pick(100, 20);
    let rounds = config.pick(10, 2);
    let mut table = Table::new(
        "7. Semaphore vs lock: uncontended acquire+release (one op = acquire + release)",
        &[
            "backend",
            "lock ops/s",
            "lock p50",
            "sem 1 p50",
            "sem 8 free p50",
            "sem 8, 7 held p50",
            "**sem 1 / lock** (p50)",
            "sem 8 free / lock",
            "sem 8, 7 held / lock",
            "round trips/op lock / sem 1 / sem 8 free / sem 8, 7 held",
        ],
    );
    for t in targets {
        progress(format!("section 7: {}", t.kind.name()));
        match measure(config, t, block, rounds) {
            Ok(row) => table.row(row),
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(format!(
        "{rounds} rounds × blocks of {block} ops per variant, the four variants interleaved (order rotated each round), \
         one session with default timings. lock = `Session::try_lock` + `Lease::release`; sem N = \
         `Semaphore::try_acquire` + `Permit::release` on an N-permit semaphore; \"7 held\": another session holds 7 of \
         the 8 slots, so each acquire tries slots from a random one until the free one (1–8 backend acquires, 4.5 on \
         average; a busy slot costs one round trip and no write). Round trips counted by a loopback proxy (memory and \
         Redis Cluster: not counted). The semaphores' limits and slot leases stay on the server (a limit is never \
         deleted, by design)."
    ));
    report.table(&table);
}

fn measure(config: &Config, t: &Target, block: usize, rounds: usize) -> BenchResult<Vec<String>> {
    let backend = t.backend()?;
    // The slots' other holder, as if from another process (memory: the shared state).
    let other_backend: std::sync::Arc<dyn LeaseBackend> =
        if t.kind == Kind::Memory { backend.clone() } else { t.backend()? };
    let session = Session::open(backend, SessionOptions::default())?;
    let other = Session::open(other_backend, SessionOptions::default())?;
    let setup = Setup::new(config, "u", &session, &other)?;
    let variants = setup.variants(&session);
    let mut samples: [Samples; 4] = Default::default();
    {
        // Warm-up (connections, script caches, prepared statements).
        let mut scratch = Samples::default();
        for v in &variants {
            v.block(block / 4, &mut scratch)?;
        }
    }
    for round in 0..rounds {
        for k in 0..4 {
            let i = (round + k) % 4;
            variants[i].block(block, &mut samples[i])?;
        }
    }
    for (label, smp) in ["lock", "sem 1", "sem 8 free", "sem 8, 7 held"].iter().zip(&samples) {
        let mut slow = smp.per_op.clone();
        slow.sort_unstable_by(|a, b| b.cmp(a));
        slow.truncate(5);
        progress(format!(
            "  {} {label}: slowest ops {}",
            t.kind.name(),
            slow.iter().map(|d| fmt_dur(*d)).collect::<Vec<_>>().join(", ")
        ));
    }
    drop(setup);
    let _ = other.close();
    let _ = session.close();
    let p50: Vec<Duration> = samples.iter().map(|s| Summary::of(&s.per_op).p50).collect();
    let ratio = |i: usize| format!("{:.2}", p50[i].as_secs_f64() / p50[0].as_secs_f64().max(1e-12));
    let rts = round_trips(config, t).unwrap_or_else(|e| format!("failed: {e}"));
    Ok(vec![
        t.kind.name().to_string(),
        fmt_rate(samples[0].ops_per_s()),
        fmt_dur(p50[0]),
        fmt_dur(p50[1]),
        fmt_dur(p50[2]),
        fmt_dur(p50[3]),
        format!("**{}**", ratio(1)),
        ratio(2),
        ratio(3),
        rts,
    ])
}

/// Round trips per op of the four variants, through the counting proxy.
fn round_trips(config: &Config, t: &Target) -> BenchResult<String> {
    let n = 40usize;
    let Some(up) = t.upstream()? else { return Ok("—".into()) };
    let proxy = Proxy::start(up)?;
    let session = Session::open(t.backend_at(Some(proxy.addr()))?, SessionOptions::default())?;
    // The other holder does not go through the proxy: only the measured session's calls count.
    let other = Session::open(t.backend()?, SessionOptions::default())?;
    let setup = Setup::new(config, "rt", &session, &other)?;
    let mut out = Vec::new();
    let mut scratch = Samples::default();
    for v in &setup.variants(&session) {
        v.block(5, &mut scratch)?; // warm-up: connections, prepared statements, script loads
        let r0 = proxy.round_trips();
        v.block(n, &mut scratch)?;
        out.push(format!("{:.2}", (proxy.round_trips() - r0) as f64 / n as f64));
    }
    drop(setup);
    let _ = other.close();
    let _ = session.close();
    Ok(out.join(" / "))
}
