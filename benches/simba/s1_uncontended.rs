//! Section 1: uncontended acquire+release through the public API (`try_lock` + `release`) vs the
//! SPI called directly on the caller's thread vs the raw primitive on the same server, in
//! interleaved blocks so that the ratios are meaningful on a noisy machine. Also measures the
//! engine's worker hand-off (what `src/runtime/pool.rs` does for every backend call) in isolation.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{bounded, unbounded};
use simba::backend::{Acquire, LeaseBackend};
use simba::{Session, SessionOptions};

use crate::charts::ApiSpiRaw;
use crate::common::{
    allocations, context_switches, err, fmt_dur, fmt_rate, name, process_cpu_precise, progress, BenchResult, Report,
    Samples, Summary, Table,
};
use crate::proxy::Proxy;
use crate::targets::{self, Kind, RawLock, Target};
use crate::Config;

/// Raw lock name (fixed: the raw locks are always freed, so runs can share it).
const RAW_NAME: &str = "simba-bench.raw";

/// One of the three ways to take and free a lock.
enum Variant<'a> {
    Api(&'a Session, &'a simba::Name),
    Spi(&'a dyn LeaseBackend, &'a simba::SessionId, &'a simba::Name),
    Raw(&'a mut dyn RawLock),
}

impl Variant<'_> {
    fn op(&mut self) -> BenchResult<()> {
        match self {
            Variant::Api(s, n) => {
                let lease = s.try_lock(*n)?.ok_or_else(|| err(format!("{n} is busy")))?;
                lease.release()?;
            }
            Variant::Spi(b, sid, n) => {
                let token = match b.acquire(sid, n)? {
                    Acquire::Acquired { token, .. } => token,
                    Acquire::Busy => return Err(err(format!("{n} is busy"))),
                };
                b.release(sid, n, token)?;
            }
            Variant::Raw(r) => {
                if !r.lock(RAW_NAME)? {
                    return Err(err(format!(
                        "raw lock {RAW_NAME} is busy (an earlier run crashed? it expires in 15 s)"
                    )));
                }
                r.unlock(RAW_NAME)?;
            }
        }
        Ok(())
    }

    fn block(&mut self, n: usize, into: &mut Samples) -> BenchResult<()> {
        into.block(n, || self.op())
    }

    /// Runs a block into `into` and returns that block's own p50.
    fn block_p50(&mut self, n: usize, into: &mut Samples) -> BenchResult<Duration> {
        let from = into.per_op.len();
        self.block(n, into)?;
        Ok(Summary::of(&into.per_op[from..]).p50)
    }
}

/// API−SPI estimated from the rounds: each round's API block p50 minus the same round's SPI block
/// p50 (the two blocks run next to each other, so slow drifts of the machine cancel), as the
/// median of the rounds and their interquartile range, in µs (signed: the API can be faster).
fn paired_difference(api: &[Duration], spi: &[Duration]) -> String {
    let mut d: Vec<f64> = api.iter().zip(spi).map(|(a, s)| (a.as_secs_f64() - s.as_secs_f64()) * 1e6).collect();
    if d.is_empty() {
        return "—".into();
    }
    d.sort_by(f64::total_cmp);
    let at = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    format!("{:+.1} µs ({:+.1} … {:+.1})", at(0.5), at(0.25), at(0.75))
}

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let block = config.pick(200, 50);
    let rounds = config.pick(15, 2);
    let mut table = Table::new(
        "1. Uncontended acquire+release (one op = acquire + release)",
        &[
            "backend",
            "API ops/s",
            "API p50",
            "SPI ops/s",
            "SPI p50",
            "raw ops/s",
            "raw p50",
            "**API/raw** (p50)",
            "API/raw (ops/s)",
            "API−SPI p50",
            "API−SPI paired per round: median (IQR)",
            "round trips/op API / SPI / raw",
            "Redis server time/op API / SPI / raw",
            "context switches/op API / SPI / raw",
            "client CPU/op API / SPI / raw",
            "allocations/op API / SPI / raw",
        ],
    );
    let mut bars = Vec::new();
    for t in targets {
        progress(format!("section 1: {}", t.kind.name()));
        match measure(config, t, block, rounds) {
            Ok((row, b)) => {
                table.row(row);
                bars.push(b);
            }
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(format!(
        "{rounds} rounds × blocks of {block} ops per variant, the three variants interleaved (order rotated each round). \
         API = `Session::try_lock` + `Lease::release` (default timings); SPI = `LeaseBackend::acquire` + `release` \
         called directly on the bench thread (no engine, no worker hand-off); raw = the minimal primitive on the same \
         server and the same kind of connection (PostgreSQL: plain TCP for both, `sslmode=disable` unless the URL names a mode): Redis `SET NX PX` + compare-and-delete script (EVALSHA); PostgreSQL/MySQL \
         one upsert to take + one update to free (prepared once; the spec's \"one upsert\" cannot also free the lock); \
         ZooKeeper create + delete of an ephemeral node (zookeeper-client). memory has no raw primitive: its API/raw \
         column compares with the SPI. API−SPI paired: per round, the API block's p50 minus the SPI block's p50 \
         (adjacent blocks, so the machine's slow drifts cancel), median and interquartile range over the rounds. \
         Redis Cluster: the SPI's lease name is picked so that its session's and its lease's keys share a master \
         exactly when the API's do (the row says which), since that changes what an acquire costs. Round trips counted by a loopback proxy (memory: none; Redis Cluster: \
         requests per op from `INFO commandstats` (EVALSHA/EVAL + SET calls; each is one round trip on the sync \
         cluster connection), summed over the masters; in brackets every command executed, including those inside \
         scripts). Client CPU/op and allocations/op are the whole bench process's (every thread, so the API's \
         renewal and worker threads count; a process-wide counting allocator), over one extra block per variant."
    ));
    report.table(&table);
    if !bars.is_empty() {
        report.chart("API vs SPI vs raw", crate::charts::api_spi_raw(config, &bars));
    }
    match handoff_table(config) {
        Ok(t) => report.table(&t),
        Err(e) => {
            let mut t = Table::new("1b. Worker hand-off", &["what", "p50"]);
            t.failed("hand-off", &e);
            report.table(&t);
        }
    }
}

/// One backend's row and its API, SPI and raw latencies (for the chart).
fn measure(config: &Config, t: &Target, block: usize, rounds: usize) -> BenchResult<(Vec<String>, ApiSpiRaw)> {
    let backend = t.backend()?;
    let session = Session::open(backend.clone(), SessionOptions::default())?;
    let api_name = name(&format!("{}.u.api", config.prefix))?;
    let spi = backend.open_session(Duration::from_secs(60), "")?;
    // Redis Cluster: an acquire costs differently when its session's and its lease's keys share a
    // master, so the SPI gets a name placed like the API's (else API−SPI compares placements).
    let placed = t.cluster_same_master(session.id().as_str(), api_name.as_str())?;
    let mut spi_name = name(&format!("{}.u.spi", config.prefix))?;
    if let Some(same) = placed {
        let mut k = 0;
        while t.cluster_same_master(spi.id.as_str(), spi_name.as_str())? != Some(same) {
            k += 1;
            if k > 200 {
                return Err(err("no SPI lease name placed like the API's in 200 tries"));
            }
            spi_name = name(&format!("{}.u.spi.{k}", config.prefix))?;
        }
    }
    let mut raw = t.raw(None)?;

    let mut api = Samples::default();
    let mut spis = Samples::default();
    let mut raws = Samples::default();
    let (mut api_rounds, mut spi_rounds) = (Vec::new(), Vec::new());
    // Warm-up (connections, script caches, prepared statements).
    {
        let mut scratch = Samples::default();
        Variant::Api(&session, &api_name).block(block / 4, &mut scratch)?;
        Variant::Spi(&*backend, &spi.id, &spi_name).block(block / 4, &mut scratch)?;
        if let Some(r) = raw.as_deref_mut() {
            Variant::Raw(r).block(block / 4, &mut scratch)?;
        }
    }
    for round in 0..rounds {
        for k in 0..3 {
            match (round + k) % 3 {
                0 => api_rounds.push(Variant::Api(&session, &api_name).block_p50(block, &mut api)?),
                1 => spi_rounds.push(Variant::Spi(&*backend, &spi.id, &spi_name).block_p50(block, &mut spis)?),
                _ => {
                    if let Some(r) = raw.as_deref_mut() {
                        Variant::Raw(r).block(block, &mut raws)?;
                    }
                }
            }
        }
        // Keep the raw SPI session alive (the API session renews itself).
        backend.keep_alive(&spi.id, Duration::from_secs(60))?;
    }
    // Per-op costs of the client process, each variant in its own block: context switches, CPU time
    // (every thread of the process, so the API's renewal and worker threads count) and allocations.
    let costs = {
        let count = |v: &mut Variant| -> BenchResult<[String; 3]> {
            let mut scratch = Samples::default();
            let (c0, cpu0, a0) = (context_switches(), process_cpu_precise()?, allocations());
            v.block(block, &mut scratch)?;
            let (c1, cpu1, a1) = (context_switches(), process_cpu_precise()?, allocations());
            let per = |x: f64| x / block as f64;
            Ok([
                format!("{:.1}", per(c1.saturating_sub(c0) as f64)),
                fmt_dur(cpu1.saturating_sub(cpu0) / block as u32),
                format!("{:.0}", per(a1.saturating_sub(a0) as f64)),
            ])
        };
        let a = count(&mut Variant::Api(&session, &api_name))?;
        let s = count(&mut Variant::Spi(&*backend, &spi.id, &spi_name))?;
        let r = match raw.as_deref_mut() {
            Some(r) => count(&mut Variant::Raw(r))?,
            None => ["—".into(), "—".into(), "—".into()],
        };
        [0, 1, 2].map(|i| format!("{} / {} / {}", a[i], s[i], r[i]))
    };
    for (label, smp) in [("API", &api), ("SPI", &spis), ("raw", &raws)] {
        let mut slow = smp.per_op.clone();
        slow.sort_unstable_by(|a, b| b.cmp(a));
        slow.truncate(5);
        progress(format!(
            "  {} {label}: slowest ops {}",
            t.kind.name(),
            slow.iter().map(|d| fmt_dur(*d)).collect::<Vec<_>>().join(", ")
        ));
    }
    let a = Summary::of(&api.per_op);
    let s = Summary::of(&spis.per_op);
    let (base, base_rate) =
        if raws.ops > 0 { (Summary::of(&raws.per_op), raws.ops_per_s()) } else { (s, spis.ops_per_s()) };
    let ratio_p50 = a.p50.as_secs_f64() / base.p50.as_secs_f64().max(1e-12);
    let ratio_rate = base_rate / api.ops_per_s().max(1e-12);
    let rts = round_trips(config, t).unwrap_or_else(|e| format!("failed: {e}"));
    let server = if matches!(t.kind, Kind::Redis | Kind::RedisCluster) {
        server_time(config, t).unwrap_or_else(|e| format!("failed: {e}"))
    } else {
        "—".into()
    };
    drop(session);
    let _ = backend.close_session(&spi.id);
    let mark = |r: f64| if r <= 1.3 { format!("**{r:.2}**") } else { format!("**{r:.2}** (> 1.3)") };
    let backend_label = match placed {
        Some(true) => format!("{} (session and lease on one master)", t.kind.name()),
        Some(false) => format!("{} (session and lease on two masters)", t.kind.name()),
        None => t.kind.name().to_string(),
    };
    let bars = ApiSpiRaw { kind: t.kind, api: a, spi: s, raw: (raws.ops > 0).then_some(base) };
    let row = vec![
        backend_label,
        fmt_rate(api.ops_per_s()),
        fmt_dur(a.p50),
        fmt_rate(spis.ops_per_s()),
        fmt_dur(s.p50),
        if raws.ops > 0 { fmt_rate(raws.ops_per_s()) } else { "—".into() },
        if raws.ops > 0 { fmt_dur(base.p50) } else { "—".into() },
        mark(ratio_p50),
        format!("{ratio_rate:.2}"),
        fmt_dur(a.p50.saturating_sub(s.p50)),
        paired_difference(&api_rounds, &spi_rounds),
        rts,
        server,
        costs[0].clone(),
        costs[1].clone(),
        costs[2].clone(),
    ];
    Ok((row, bars))
}

/// Redis: server CPU time per op of the requests (scripts include the commands they run), from
/// `INFO commandstats` usec; minimum over a few blocks since other clients only add.
fn server_time(config: &Config, t: &Target) -> BenchResult<String> {
    let n = 100usize;
    let mut counter = t.counter();
    if !counter.live() {
        return Ok(counter.cell(None, "—"));
    }
    let api_name = name(&format!("{}.u.api-us", config.prefix))?;
    let spi_name = name(&format!("{}.u.spi-us", config.prefix))?;
    let backend = t.backend()?;
    let session = Session::open(backend.clone(), SessionOptions::default())?;
    let spi = backend.open_session(Duration::from_secs(60), "")?;
    let mut raw = t.raw(None)?;
    let mut scratch = Samples::default();
    let mut count = |v: &mut Variant| -> BenchResult<String> {
        v.block(5, &mut scratch)?;
        let mut best = u64::MAX;
        for _ in 0..3 {
            let c0 = counter.read();
            v.block(n, &mut scratch)?;
            if let Some(d) = counter.since(c0) {
                best = best.min(d.server_us.unwrap_or(0));
            }
        }
        Ok(format!("{:.1} µs", best as f64 / n as f64))
    };
    let a = count(&mut Variant::Api(&session, &api_name))?;
    let s = count(&mut Variant::Spi(&*backend, &spi.id, &spi_name))?;
    let r = match raw.as_deref_mut() {
        Some(r) => count(&mut Variant::Raw(r))?,
        None => "—".into(),
    };
    drop(session);
    let _ = backend.close_session(&spi.id);
    // The counter is a side stat: once it could not be read, the cell says why.
    if let Some(u) = counter.unavailable() {
        return Ok(u.to_string());
    }
    Ok(format!("{a} / {s} / {r}"))
}

/// Round trips per op for the three variants, through the counting proxy (or server commands per
/// op on Redis Cluster).
fn round_trips(config: &Config, t: &Target) -> BenchResult<String> {
    let n = 50usize;
    let api_name = name(&format!("{}.u.api-rt", config.prefix))?;
    let spi_name = name(&format!("{}.u.spi-rt", config.prefix))?;
    if let Some(up) = t.upstream()? {
        let proxy = Proxy::start(up)?;
        let backend = t.backend_at(Some(proxy.addr()))?;
        let session = Session::open(backend.clone(), SessionOptions::default())?;
        let spi = backend.open_session(Duration::from_secs(60), "")?;
        let mut raw = t.raw(Some(proxy.addr()))?;
        let mut scratch = Samples::default();
        let mut count = |v: &mut Variant| -> BenchResult<f64> {
            v.block(5, &mut scratch)?; // warm-up: connections, prepared statements, script loads
            let r0 = proxy.round_trips();
            v.block(n, &mut scratch)?;
            Ok((proxy.round_trips() - r0) as f64 / n as f64)
        };
        let a = count(&mut Variant::Api(&session, &api_name))?;
        let s = count(&mut Variant::Spi(&*backend, &spi.id, &spi_name))?;
        let r = match raw.as_deref_mut() {
            Some(r) => format!("{:.2}", count(&mut Variant::Raw(r))?),
            None => "—".into(),
        };
        drop(session);
        let _ = backend.close_session(&spi.id);
        return Ok(format!("{a:.2} / {s:.2} / {r}"));
    }
    let mut counter = t.counter();
    if !counter.live() {
        return Ok(counter.cell(None, "— (in-process)"));
    }
    let backend = t.backend()?;
    let session = Session::open(backend.clone(), SessionOptions::default())?;
    let spi = backend.open_session(Duration::from_secs(60), "")?;
    let mut raw = t.raw(None)?;
    let mut scratch = Samples::default();
    let mut count = |v: &mut Variant| -> BenchResult<String> {
        v.block(5, &mut scratch)?;
        let mut best = targets::Reading::MAX;
        // Minimum over a few tries: other clients' commands only ever add.
        for _ in 0..3 {
            let c0 = counter.read();
            v.block(n, &mut scratch)?;
            if let Some(d) = counter.since(c0) {
                best = best.min(d);
            }
        }
        Ok(best.per(n as f64))
    };
    let a = count(&mut Variant::Api(&session, &api_name))?;
    let s = count(&mut Variant::Spi(&*backend, &spi.id, &spi_name))?;
    let r = match raw.as_deref_mut() {
        Some(r) => count(&mut Variant::Raw(r))?,
        None => "—".into(),
    };
    drop(session);
    let _ = backend.close_session(&spi.id);
    if let Some(u) = counter.unavailable() {
        return Ok(u.to_string());
    }
    Ok(format!("{a} / {s} / {r} (server requests)"))
}

type Job = Box<dyn FnOnce() + Send + 'static>;

/// A 1-byte loopback TCP round trip to an echo thread, timed on the caller's thread and on a
/// worker the caller waits for.
fn ping_pong(config: &Config) -> BenchResult<(Summary, Summary)> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let n = config.pick(20_000, 2_000);
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let echo = thread::Builder::new().name("bench-echo".into()).spawn(move || -> std::io::Result<()> {
        let (mut s, _) = listener.accept()?;
        s.set_nodelay(true)?;
        let mut b = [0u8; 1];
        loop {
            if s.read(&mut b)? == 0 {
                return Ok(());
            }
            s.write_all(&b)?;
        }
    })?;
    let stream = TcpStream::connect(addr)?;
    stream.set_nodelay(true)?;
    let stream = Arc::new(parking_lot::Mutex::new(stream));
    let once = |s: &parking_lot::Mutex<TcpStream>| -> std::io::Result<()> {
        let mut s = s.lock();
        s.write_all(&[7])?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b)
    };
    let (tx, rx) = unbounded::<Job>();
    let worker = thread::Builder::new().name("bench-worker".into()).spawn(move || {
        while let Ok(job) = rx.recv() {
            job();
        }
    })?;
    let mut direct = Vec::with_capacity(n);
    let mut via = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        // Alternate so both see the same machine conditions.
        let t = Instant::now();
        once(&stream)?;
        let d = t.elapsed();
        let t = Instant::now();
        let (rtx, rrx) = bounded::<std::io::Result<()>>(1);
        let st = stream.clone();
        tx.send(Box::new(move || {
            let _ = rtx.send(once(&st));
        }))
        .map_err(|_| err("worker gone"))?;
        rrx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("worker did not answer"))??;
        let v = t.elapsed();
        if i >= n / 10 {
            direct.push(d);
            via.push(v);
        }
    }
    drop(tx);
    let _ = worker.join();
    drop(stream);
    let _ = echo.join();
    Ok((Summary::of(&direct), Summary::of(&via)))
}

/// The engine's per-call hand-off, rebuilt from `src/runtime/pool.rs` (which is private): a pooled worker
/// parked on a channel receives a boxed job, runs it, and hands the result back through a
/// one-slot channel the caller waits on.
fn handoff_table(config: &Config) -> BenchResult<Table> {
    let n = config.pick(20_000, 2_000);
    let (tx, rx) = unbounded::<Job>();
    let worker = thread::Builder::new().name("bench-worker".into()).spawn(move || {
        while let Ok(job) = rx.recv() {
            job();
        }
    })?;
    let mut samples = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        let (rtx, rrx) = bounded::<u64>(1);
        let slot = Arc::new(parking_lot::Mutex::new(true));
        let ws = slot.clone();
        tx.send(Box::new(move || {
            let g = ws.lock();
            if *g {
                let _ = rtx.send(7);
            }
        }))
        .map_err(|_| err("worker gone"))?;
        let _ = rrx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("worker did not answer"))?;
        if i >= n / 10 {
            samples.push(t.elapsed());
        }
    }
    drop(tx);
    let _ = worker.join();
    let mut inline = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        let f: Job = Box::new(|| {});
        f();
        inline.push(t.elapsed());
    }
    let s = Summary::of(&samples);
    let i = Summary::of(&inline);
    let (direct, via_worker) = ping_pong(config)?;
    let mut t = Table::new(
        "1b. Worker hand-off in isolation (the cost src/runtime/pool.rs adds to every backend call)",
        &["what", "p50", "p99", "mean"],
    );
    t.row(vec![
        "hand a no-op job to a parked worker and wait for its reply".into(),
        fmt_dur(s.p50),
        fmt_dur(s.p99),
        fmt_dur(s.mean),
    ]);
    t.row(vec!["the same job run inline".into(), fmt_dur(i.p50), fmt_dur(i.p99), fmt_dur(i.mean)]);
    t.row(vec![
        "loopback TCP ping-pong with an echo thread, on the caller's thread (like the SPI column)".into(),
        fmt_dur(direct.p50),
        fmt_dur(direct.p99),
        fmt_dur(direct.mean),
    ]);
    t.row(vec![
        "the same ping-pong run on a worker the caller waits for (like every API call)".into(),
        fmt_dur(via_worker.p50),
        fmt_dur(via_worker.p99),
        fmt_dur(via_worker.mean),
    ]);
    t.note(format!(
        "{n} samples each. A no-op job measures the hand-off when both threads are hot (they spin briefly before \
         parking); the ping-pong rows measure it around a blocking round trip, as in real calls: while the worker \
         waits on its socket the caller parks, and waking a parked thread costs a futex wake-up plus scheduling (on \
         this VM, waking an idle vCPU). An API acquire+release makes two hand-offs (the acquire waits on \
         `pool::call_until`, the release on its completion channel), so about 2 × (row 4 − row 3) is the floor of \
         the \"API−SPI\" column above."
    ));
    Ok(t)
}
