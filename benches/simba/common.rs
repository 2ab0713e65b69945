//! Shared pieces: results, statistics, markdown tables, process CPU, a counting SPI wrapper.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use simba::backend::{
    Acquire, Capabilities, CheckItem, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant, Topic,
};
use simba::{Name, SessionId, Token};

use crate::targets::Target;
use crate::Config;

/// Errors of the benchmark itself (unreachable server, failed operation).
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;
/// Result of a benchmark step.
pub type BenchResult<T> = Result<T, BenchError>;

/// Turns anything printable into a [`BenchError`].
pub fn err(msg: impl Into<String>) -> BenchError {
    msg.into().into()
}

/// How long after the waiter is parked a push hand-off sample releases: simba's (section 2) and
/// every raw notification and hand-off sampler's alike, 20–25 ms. The same idle time matters: a
/// release after 2–5 ms was measured ~0.5 ms faster at p50 on etcd than after 20–25 ms (the
/// server's and the clients' threads have not gone to sleep yet; docs/benchmarks.md, "etcd").
pub fn release_delay() -> Duration {
    Duration::from_millis(20) + Duration::from_micros(rand::random_range(0..5_000))
}

// ----- statistics -----

/// Nearest-rank percentile of sorted samples (`p` in 0..=100).
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summary of latency samples.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    pub n: usize,
    pub min: Duration,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    pub mean: Duration,
}

impl Summary {
    pub fn of(samples: &[Duration]) -> Summary {
        let mut s = samples.to_vec();
        s.sort();
        if s.is_empty() {
            return Summary::default();
        }
        let total: Duration = s.iter().sum();
        Summary {
            n: s.len(),
            min: s[0],
            p50: percentile(&s, 50.0),
            p99: percentile(&s, 99.0),
            max: s[s.len() - 1],
            mean: total / s.len() as u32,
        }
    }
}

/// `12.3 µs`, `4.56 ms`, `3.21 s`.
/// Per-operation latencies and the throughput of blocks of operations run back to back.
#[derive(Default)]
pub struct Samples {
    pub per_op: Vec<Duration>,
    pub busy: Duration,
    pub ops: usize,
}

impl Samples {
    /// Runs `op` `n` times back to back, recording each one's latency and the block's time.
    pub fn block(&mut self, n: usize, mut op: impl FnMut() -> BenchResult<()>) -> BenchResult<()> {
        let start = Instant::now();
        for _ in 0..n {
            let t = Instant::now();
            op()?;
            self.per_op.push(t.elapsed());
        }
        self.busy += start.elapsed();
        self.ops += n;
        Ok(())
    }

    pub fn ops_per_s(&self) -> f64 {
        if self.busy.is_zero() {
            0.0
        } else {
            self.ops as f64 / self.busy.as_secs_f64()
        }
    }
}

pub fn fmt_dur(d: Duration) -> String {
    let ns = d.as_nanos() as f64;
    if ns < 1_000.0 {
        format!("{ns:.0} ns")
    } else if ns < 1_000_000.0 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1_000_000_000.0 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.2} s", ns / 1e9)
    }
}

/// A rate with sensible precision.
pub fn fmt_rate(per_s: f64) -> String {
    if per_s >= 100.0 {
        format!("{per_s:.0}")
    } else {
        format!("{per_s:.1}")
    }
}

// ----- tables and the report -----

/// A markdown table.
#[derive(Debug, Clone)]
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
    notes: Vec<String>,
}

impl Table {
    pub fn new(title: impl Into<String>, header: &[&str]) -> Table {
        Table {
            title: title.into(),
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            notes: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// A row saying this backend's measurement failed.
    pub fn failed(&mut self, backend: &str, e: &BenchError) {
        let mut cells = vec![backend.to_string(), format!("**failed: {}**", one_line(&e.to_string()))];
        cells.resize(self.header.len(), String::new());
        self.rows.push(cells);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn render(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "### {}\n", self.title);
        let _ = writeln!(s, "| {} |", self.header.join(" | "));
        let _ = writeln!(s, "|{}|", self.header.iter().map(|_| "---").collect::<Vec<_>>().join("|"));
        for r in &self.rows {
            let _ = writeln!(s, "| {} |", r.join(" | "));
        }
        for n in &self.notes {
            let _ = writeln!(s, "\n{n}");
        }
        s
    }
}

fn one_line(s: &str) -> String {
    s.replace(['\n', '|'], " ")
}

/// Everything the run prints; also written to `SIMBA_BENCH_OUT` when set.
#[derive(Debug)]
pub struct Report {
    text: String,
    failures: usize,
}

impl Report {
    pub fn new(config: &Config) -> Report {
        let mut r = Report { text: String::new(), failures: 0 };
        let mode =
            if config.quick { "quick (SIMBA_BENCH_QUICK=1: few samples, numbers are indicative only)" } else { "full" };
        r.push(format!("## simba benchmark run\n\nmode: {mode}; backends: {}\n", {
            config.kinds.iter().map(|k| k.name()).collect::<Vec<_>>().join(", ")
        }));
        r
    }

    fn push(&mut self, s: String) {
        println!("{s}");
        self.text.push_str(&s);
        self.text.push('\n');
    }

    /// The machine and server versions.
    pub fn machine(&mut self, targets: &[Target]) {
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        let model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|c| {
                c.lines()
                    .find(|l| l.starts_with("model name"))
                    .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
            })
            .unwrap_or_else(|| "unknown".into());
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let mut t = Table::new("Machine", &["item", "value"]);
        t.row(vec!["CPUs (available_parallelism)".into(), cpus.to_string()]);
        t.row(vec!["CPU model".into(), model]);
        t.row(vec!["kernel".into(), kernel.trim().to_string()]);
        t.row(vec!["load average at start (1/5/15 min)".into(), loadavg()]);
        for target in targets {
            t.row(vec![format!("{} server", target.kind.name()), target.server_version.clone()]);
        }
        self.table(&t);
    }

    /// A line of text in the report.
    pub fn line(&mut self, s: impl Into<String>) {
        self.push(s.into());
    }

    pub fn table(&mut self, t: &Table) {
        self.failures += t.rows.iter().filter(|r| r.iter().any(|c| c.starts_with("**failed"))).count();
        self.push(t.render());
    }

    /// Where a chart was written, or (counted as a failure) why it was not.
    pub fn chart(&mut self, what: &str, written: BenchResult<Option<std::path::PathBuf>>) {
        match written {
            Ok(Some(path)) => self.push(format!("_chart ({what}): {}_\n", path.display())),
            Ok(None) => {}
            Err(e) => {
                self.failures += 1;
                self.push(format!("**chart ({what}) not written: {}**\n", one_line(&e.to_string())));
            }
        }
    }

    pub fn failures(&self) -> usize {
        self.failures
    }

    /// Writes the report to `SIMBA_BENCH_OUT` if set.
    pub fn finish(&self) {
        if let Ok(path) = std::env::var("SIMBA_BENCH_OUT") {
            if !path.is_empty() {
                if let Err(e) = std::fs::write(&path, &self.text) {
                    eprintln!("cannot write {path}: {e}");
                } else {
                    eprintln!("[bench] report written to {path}");
                }
            }
        }
    }
}

/// `/proc/loadavg`'s first three fields (other work on the machine skews tail latencies).
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Progress on stderr (the tables go to stdout).
pub fn progress(msg: impl AsRef<str>) {
    eprintln!("[bench] {}", msg.as_ref());
}

// ----- process CPU -----

/// User + system CPU time of this process so far (`/proc/self/stat` utime + stime, 10 ms ticks).
pub fn process_cpu() -> BenchResult<Duration> {
    let stat = std::fs::read_to_string("/proc/self/stat")?;
    let after = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| err("unexpected /proc/self/stat"))?;
    let f: Vec<&str> = after.split_whitespace().collect();
    // After the command name: state (field 3) is f[0], utime (14) f[11], stime (15) f[12].
    let ticks = |i: usize| -> BenchResult<u64> { Ok(f.get(i).ok_or_else(|| err("short /proc/self/stat"))?.parse()?) };
    let total = ticks(11)? + ticks(12)?;
    // USER_HZ is 100 on Linux for every architecture's /proc ABI.
    Ok(Duration::from_millis(total * 10))
}

/// User + system CPU time of this process so far, at nanosecond resolution
/// (`CLOCK_PROCESS_CPUTIME_ID`: every thread, the session's renewal and worker threads included).
pub fn process_cpu_precise() -> BenchResult<Duration> {
    let t = nix::time::clock_gettime(nix::time::ClockId::CLOCK_PROCESS_CPUTIME_ID)?;
    Ok(Duration::from(t))
}

/// Allocations made by this process so far (every thread), from the counting global allocator.
pub fn allocations() -> usize {
    crate::ALLOCATOR.stats().allocations
}

/// Context switches (voluntary + involuntary) of all live threads of this process so far.
pub fn context_switches() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else { return 0 };
    let mut total = 0;
    for e in dir.flatten() {
        if let Ok(status) = std::fs::read_to_string(e.path().join("status")) {
            for line in status.lines() {
                if let Some(v) = line
                    .strip_prefix("voluntary_ctxt_switches:")
                    .or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    total += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    total
}

/// Threads of this process right now.
pub fn thread_count() -> usize {
    std::fs::read_dir("/proc/self/task").map(|d| d.count()).unwrap_or(0)
}

// ----- a counting SPI wrapper -----

/// Counts the SPI calls made through it (exact client-side statement counts).
#[derive(Debug, Default)]
pub struct CallCounts {
    pub keep_alive: AtomicU64,
    pub acquire: AtomicU64,
    pub release: AtomicU64,
    pub other: AtomicU64,
}

/// A [`LeaseBackend`] that forwards to another and counts calls.
#[derive(Debug)]
pub struct Counting {
    inner: Arc<dyn LeaseBackend>,
    pub counts: Arc<CallCounts>,
}

impl Counting {
    pub fn wrap(inner: Arc<dyn LeaseBackend>) -> (Arc<dyn LeaseBackend>, Arc<CallCounts>) {
        let counts = Arc::new(CallCounts::default());
        (Arc::new(Counting { inner, counts: counts.clone() }), counts)
    }

    fn other(&self) {
        self.counts.other.fetch_add(1, Ordering::Relaxed);
    }
}

impl LeaseBackend for Counting {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn open_session(&self, lease_duration: Duration, metadata: &str) -> simba::Result<SessionGrant> {
        self.other();
        self.inner.open_session(lease_duration, metadata)
    }
    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> simba::Result<KeepAlive> {
        self.counts.keep_alive.fetch_add(1, Ordering::Relaxed);
        self.inner.keep_alive(session, lease_duration)
    }
    fn close_session(&self, session: &SessionId) -> simba::Result<()> {
        self.other();
        self.inner.close_session(session)
    }
    fn acquire(&self, session: &SessionId, name: &Name) -> simba::Result<Acquire> {
        self.counts.acquire.fetch_add(1, Ordering::Relaxed);
        let t = std::time::Instant::now();
        let r = self.inner.acquire(session, name);
        log::trace!(
            "bench spi: acquire {name} by {session}: {:?} in {:?}",
            r.as_ref().map(|a| matches!(a, Acquire::Busy)),
            t.elapsed()
        );
        r
    }
    fn release(&self, session: &SessionId, name: &Name, token: Token) -> simba::Result<()> {
        self.counts.release.fetch_add(1, Ordering::Relaxed);
        let t = std::time::Instant::now();
        let r = self.inner.release(session, name, token);
        log::trace!("bench spi: release {name} by {session} in {:?}", t.elapsed());
        r
    }
    fn holder(&self, name: &Name) -> simba::Result<Option<Holder>> {
        self.other();
        self.inner.holder(name)
    }
    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> simba::Result<Option<u32>> {
        self.other();
        self.inner.semaphore_limit(name, permits)
    }
    fn join(&self, session: &SessionId, group: &Name) -> simba::Result<()> {
        self.other();
        self.inner.join(session, group)
    }
    fn leave(&self, session: &SessionId, group: &Name) -> simba::Result<()> {
        self.other();
        self.inner.leave(session, group)
    }
    fn members(&self, group: &Name) -> simba::Result<Vec<Member>> {
        self.other();
        self.inner.members(group)
    }
    fn call_bound(&self) -> Option<Duration> {
        self.inner.call_bound()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> simba::Result<bool> {
        self.other();
        let t = std::time::Instant::now();
        let r = self.inner.watch(topic, notify);
        log::trace!("bench spi: watch {topic:?} in {:?}", t.elapsed());
        r
    }
    fn purge_expired(&self) -> simba::Result<usize> {
        self.inner.purge_expired()
    }
    fn check(&self) -> Vec<CheckItem> {
        self.inner.check()
    }
}

/// Acquires `name` for `session` through the SPI, retrying for a while when busy (a name of an
/// earlier, crashed run may still be held).
pub fn spi_acquire(backend: &dyn LeaseBackend, session: &SessionId, name: &Name) -> BenchResult<()> {
    let until = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match backend.acquire(session, name)? {
            Acquire::Acquired { .. } => return Ok(()),
            Acquire::Busy if std::time::Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
            Acquire::Busy => return Err(err(format!("lease {name} stays busy"))),
        }
    }
}

/// `simba::Name` from a string the benchmark built.
pub fn name(s: &str) -> BenchResult<Name> {
    Ok(Name::new(s)?)
}
