//! Section 9: partition sets (SPEC §13, issue #38): how long a set of 64 partitions takes to be
//! covered and balanced again after its membership changes, how many partitions each change moves,
//! and how long one partition's hand-off takes.
//!
//! Members are sessions, each on its own backend instance (as if in its own process; memory: one
//! shared instance), each with an owner thread that listens on `Partitions::events()` and calls
//! `Partition::release` as soon as it sees `Revoking` (so the drain period never runs out). Every
//! member's backend goes through [`Crashable`], a wrapper that counts the owner reads and acquires
//! and, for a crash, stops forwarding anything to the server.
//!
//! Two series per backend, each `reps` repetitions of 4 → 5 → 4 members:
//! - default timings (15 s lease, 5 s renew): a fifth member joins, then one member (round robin)
//!   closes its set gracefully (`Partitions::close`, then its session);
//! - lease 3 s, renew 1 s (as section 3): a fifth member joins, then one member crashes: from that
//!   instant nothing of its session reaches the server (every SPI call fails in the wrapper), so
//!   the server expires it after its lease (ZooKeeper: the backend's watchdog closes its ZooKeeper
//!   session at the lease duration, as in section 3).
//!
//! Measured per change: the time from the change (the joiner's `partitions_with` call, the close
//! call, the crash) until the members' owned partitions, as their events report them, are
//! **covered and balanced** (every partition owned exactly once among the live members, nobody
//! above ⌈64 / members⌉); the partitions moved (owners compared once the members have been quiet
//! for a while), checked against the sticky bound; and per moved partition the hand-off, from
//! `Revoking` issued (its deadline minus the drain period) to the new owner's `Assigned` event (a
//! graceful leave has no `Revoking`: from the close call to the new owner's `Assigned`).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use crossbeam_channel::{select, unbounded, Receiver, Sender};
use simba::backend::{
    Acquire, Capabilities, CheckItem, Holder, KeepAlive, LeaseBackend, Member as GroupMember, Notification,
    SessionGrant, Topic,
};
use simba::partitions::{PartitionEvent, PartitionOptions, Partitions};
use simba::{Error, Name, Session, SessionId, SessionOptions, Token};

use crate::common::{err, fmt_dur, progress, BenchResult, Report, Summary, Table};
use crate::targets::{Kind, Target};
use crate::Config;

/// Partitions in the set.
const COUNT: u32 = 64;
/// Members before a join and after a leave.
const BASE: usize = 4;
/// Timings of the crash series (as section 3).
const CRASH_LEASE: Duration = Duration::from_secs(3);
const CRASH_RENEW: Duration = Duration::from_secs(1);
/// How long the members must be quiet (no partition event) before the owners are compared.
const QUIET: Duration = Duration::from_millis(300);
/// Longest wait for covered and balanced before the measurement fails.
const PATIENCE: Duration = Duration::from_secs(30);

// ----- the member's backend: counts calls, and crashes on demand -----

/// SPI calls of the members of one series.
#[derive(Debug, Default)]
struct Calls {
    holder: AtomicU64,
    /// Time spent in `holder` calls, ns (summed over the members' threads).
    holder_ns: AtomicU64,
    acquire: AtomicU64,
}

impl Calls {
    fn read(&self) -> (u64, u64, u64) {
        (
            self.holder.load(Ordering::Relaxed),
            self.holder_ns.load(Ordering::Relaxed),
            self.acquire.load(Ordering::Relaxed),
        )
    }
}

/// Forwards to the backend under test until [`crash`](Crashable::crash): from then on every call
/// fails here and nothing of this member reaches the server, as if its process had died.
#[derive(Debug)]
struct Crashable {
    inner: Arc<dyn LeaseBackend>,
    dead: AtomicBool,
    /// When the last keep-alive that reached the server was sent.
    last_renewal: Mutex<Option<Instant>>,
    calls: Arc<Calls>,
}

impl Crashable {
    fn new(inner: Arc<dyn LeaseBackend>, calls: Arc<Calls>) -> Arc<Crashable> {
        Arc::new(Crashable { inner, dead: AtomicBool::new(false), last_renewal: Mutex::new(None), calls })
    }

    fn crash(&self) {
        self.dead.store(true, Ordering::SeqCst);
    }

    fn last_renewal(&self) -> Option<Instant> {
        *lock(&self.last_renewal)
    }

    fn gate(&self) -> simba::Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            Err(Error::unavailable("bench: this member crashed (nothing reaches the server)"))
        } else {
            Ok(())
        }
    }
}

impl LeaseBackend for Crashable {
    fn kind(&self) -> &'static str {
        self.inner.kind()
    }
    fn open_session(&self, lease_duration: Duration, metadata: &str) -> simba::Result<SessionGrant> {
        self.gate()?;
        let sent = Instant::now();
        let grant = self.inner.open_session(lease_duration, metadata)?;
        *lock(&self.last_renewal) = Some(sent);
        Ok(grant)
    }
    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> simba::Result<KeepAlive> {
        self.gate()?;
        let sent = Instant::now();
        let r = self.inner.keep_alive(session, lease_duration)?;
        *lock(&self.last_renewal) = Some(sent);
        Ok(r)
    }
    fn close_session(&self, session: &SessionId) -> simba::Result<()> {
        self.gate()?;
        self.inner.close_session(session)
    }
    fn acquire(&self, session: &SessionId, name: &Name) -> simba::Result<Acquire> {
        self.gate()?;
        self.calls.acquire.fetch_add(1, Ordering::Relaxed);
        self.inner.acquire(session, name)
    }
    fn release(&self, session: &SessionId, name: &Name, token: Token) -> simba::Result<()> {
        self.gate()?;
        self.inner.release(session, name, token)
    }
    fn holder(&self, name: &Name) -> simba::Result<Option<Holder>> {
        self.gate()?;
        self.calls.holder.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        let r = self.inner.holder(name);
        let took = t.elapsed();
        self.calls.holder_ns.fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
        log::trace!("bench spi: holder {name}: {took:?}");
        r
    }
    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> simba::Result<Option<u32>> {
        self.gate()?;
        self.inner.semaphore_limit(name, permits)
    }
    fn join(&self, session: &SessionId, group: &Name) -> simba::Result<()> {
        self.gate()?;
        self.inner.join(session, group)
    }
    fn leave(&self, session: &SessionId, group: &Name) -> simba::Result<()> {
        self.gate()?;
        self.inner.leave(session, group)
    }
    fn members(&self, group: &Name) -> simba::Result<Vec<GroupMember>> {
        self.gate()?;
        self.inner.members(group)
    }
    fn call_bound(&self) -> Option<Duration> {
        self.inner.call_bound()
    }
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities()
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> simba::Result<bool> {
        self.gate()?;
        self.inner.watch(topic, notify)
    }
    fn purge_expired(&self) -> simba::Result<usize> {
        self.gate()?;
        self.inner.purge_expired()
    }
    fn check(&self) -> Vec<CheckItem> {
        self.inner.check()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

// ----- what the owner threads report -----

#[derive(Debug, Clone, Copy)]
enum What {
    Assigned,
    /// `Revoking`, with the instant the driver issued it (its deadline minus the drain period).
    Revoking(Instant),
    Revoked,
    Lost,
}

#[derive(Debug, Clone, Copy)]
struct Logged {
    at: Instant,
    member: usize,
    partition: u32,
    what: What,
}

/// Every member's partitions as its events report them (events are emitted in order with
/// `Partitions::owned`), and the log of those events.
struct Board {
    owned: BTreeMap<usize, BTreeSet<u32>>,
    /// When each member's partitions last changed (the receipt of its last `Assigned`, `Revoked`
    /// or `Lost`).
    set_changed: BTreeMap<usize, Instant>,
    /// When the board last changed (the receipt of the last event of any member).
    changed: Instant,
    log: Vec<Logged>,
}

struct Shared {
    board: Mutex<Board>,
    cv: Condvar,
}

impl Shared {
    fn record(&self, member: usize, partition: u32, what: What) {
        let at = Instant::now();
        let mut b = lock(&self.board);
        let set = b.owned.entry(member).or_default();
        match what {
            What::Assigned => {
                set.insert(partition);
            }
            What::Revoked | What::Lost => {
                set.remove(&partition);
            }
            What::Revoking(_) => {}
        }
        if !matches!(what, What::Revoking(_)) {
            b.set_changed.insert(member, at);
        }
        b.changed = at;
        b.log.push(Logged { at, member, partition, what });
        drop(b);
        self.cv.notify_all();
    }

    /// Waits until `members` own every partition exactly once, nobody above ⌈count / members⌉;
    /// returns the instant of the event that made it so (the last change of those members' sets:
    /// events of members not counted, a leaver's or a crashed member's, do not move it).
    fn covered_and_balanced(&self, members: &[usize], until: Instant) -> Option<Instant> {
        let mut b = lock(&self.board);
        loop {
            if balanced(&b, members) {
                return members.iter().filter_map(|m| b.set_changed.get(m).copied()).max();
            }
            let now = Instant::now();
            if now >= until {
                return None;
            }
            b = self.cv.wait_timeout(b, until - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Waits until no event arrived for `QUIET` (at most `PATIENCE`).
    fn quiet(&self) {
        let until = Instant::now() + PATIENCE;
        let mut b = lock(&self.board);
        loop {
            let now = Instant::now();
            let calm = b.changed + QUIET;
            if now >= calm || now >= until {
                return;
            }
            b = self.cv.wait_timeout(b, calm - now).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// Partition → its owners among `members` now.
    fn owners(&self, members: &[usize]) -> BTreeMap<u32, Vec<usize>> {
        let b = lock(&self.board);
        let mut out: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for &m in members {
            for &p in b.owned.get(&m).into_iter().flatten() {
                out.entry(p).or_default().push(m);
            }
        }
        out
    }

    fn log_since(&self, t0: Instant) -> Vec<Logged> {
        lock(&self.board)
            .log
            .iter()
            .filter(|l| l.at >= t0 || matches!(l.what, What::Revoking(i) if i >= t0))
            .copied()
            .collect()
    }

    fn views(&self, members: &[usize]) -> String {
        let b = lock(&self.board);
        members
            .iter()
            .map(|m| format!("member {m}: {} partitions", b.owned.get(m).map_or(0, BTreeSet::len)))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn balanced(b: &Board, members: &[usize]) -> bool {
    if members.is_empty() {
        return false;
    }
    let cap = COUNT.div_ceil(members.len() as u32) as usize;
    let mut total = 0;
    let mut union = BTreeSet::new();
    for m in members {
        let set = b.owned.get(m).map_or(0, |s| {
            union.extend(s.iter().copied());
            s.len()
        });
        if set > cap {
            return false;
        }
        total += set;
    }
    total == COUNT as usize && union.len() == COUNT as usize
}

// ----- members -----

enum Cmd {
    /// Close the set, then the session; reply with the close's result.
    Close(Sender<simba::Result<()>>),
    /// Drop everything (after a crash).
    Drop,
}

struct Member {
    id: usize,
    backend: Arc<Crashable>,
    cmd: Sender<Cmd>,
    thread: JoinHandle<()>,
}

/// The owner thread of one member: records its events and releases a partition as soon as it
/// is told `Revoking`.
fn owner(id: usize, session: Session, parts: Partitions, shared: Arc<Shared>, cmd: Receiver<Cmd>) {
    let events = parts.events();
    let drain = parts.options().drain_period();
    loop {
        select! {
            recv(events) -> ev => {
                let Ok(ev) = ev else { break };
                match ev {
                    PartitionEvent::Assigned { partition, .. } => shared.record(id, partition, What::Assigned),
                    PartitionEvent::Revoking { partition, deadline, .. } => {
                        let issued = deadline.checked_sub(drain).unwrap_or(deadline);
                        shared.record(id, partition, What::Revoking(issued));
                        if let Some(p) = parts.owned().into_iter().find(|p| p.index() == partition) {
                            if let Err(e) = p.release() {
                                log::warn!("bench: member {id}: release of partition {partition}: {e}");
                            }
                        }
                    }
                    PartitionEvent::Revoked { partition, .. } => shared.record(id, partition, What::Revoked),
                    PartitionEvent::Lost { partition, .. } => shared.record(id, partition, What::Lost),
                    _ => {}
                }
            }
            recv(cmd) -> c => {
                if let Ok(Cmd::Close(reply)) = c {
                    let r = parts.close();
                    let _ = session.close();
                    let _ = reply.send(r);
                }
                return;
            }
        }
    }
    // The events ended (cannot happen while `parts` lives); wait for the command.
    let _ = cmd.recv();
}

/// One series: the members of one partition set with one set of timings.
struct Series<'a> {
    t: &'a Target,
    name: String,
    opts: SessionOptions,
    shared: Arc<Shared>,
    calls: Arc<Calls>,
    /// The memory backend's one instance (memory only).
    memory: Option<Arc<dyn LeaseBackend>>,
    live: Vec<Member>,
    next_id: usize,
}

impl<'a> Series<'a> {
    fn new(config: &Config, t: &'a Target, tag: &str, opts: SessionOptions) -> BenchResult<Series<'a>> {
        let memory = if t.kind == Kind::Memory { Some(t.backend()?) } else { None };
        Ok(Series {
            t,
            name: format!("{}.part.{tag}", config.prefix),
            opts,
            shared: Arc::new(Shared {
                board: Mutex::new(Board {
                    owned: BTreeMap::new(),
                    set_changed: BTreeMap::new(),
                    changed: Instant::now(),
                    log: Vec::new(),
                }),
                cv: Condvar::new(),
            }),
            calls: Arc::new(Calls::default()),
            memory,
            live: Vec::new(),
            next_id: 0,
        })
    }

    fn ids(&self) -> Vec<usize> {
        self.live.iter().map(|m| m.id).collect()
    }

    /// Opens a session, then (the instant returned) joins the set and starts the owner thread.
    fn join(&mut self) -> BenchResult<(usize, Instant)> {
        let inner = match &self.memory {
            Some(m) => m.clone(),
            None => self.t.backend()?,
        };
        let backend = Crashable::new(inner, self.calls.clone());
        let session = Session::open(backend.clone(), self.opts.clone())?;
        let id = self.next_id;
        self.next_id += 1;
        let t0 = Instant::now();
        let parts = session.partitions_with(self.name.as_str(), COUNT, PartitionOptions::default())?;
        let (cmd, cmd_rx) = unbounded();
        let shared = self.shared.clone();
        let thread = thread::Builder::new()
            .name(format!("bench-owner-{id}"))
            .spawn(move || owner(id, session, parts, shared, cmd_rx))?;
        self.live.push(Member { id, backend, cmd, thread });
        Ok((id, t0))
    }

    fn take(&mut self, id: usize) -> BenchResult<Member> {
        let i = self.live.iter().position(|m| m.id == id).ok_or_else(|| err(format!("no member {id}")))?;
        Ok(self.live.remove(i))
    }

    fn wait_balanced(&self, t0: Instant, what: &str) -> BenchResult<Instant> {
        let ids = self.ids();
        self.shared.covered_and_balanced(&ids, t0 + PATIENCE).ok_or_else(|| {
            err(format!("{what}: not covered and balanced within {PATIENCE:?} ({})", self.shared.views(&ids)))
        })
    }

    fn close_all(&mut self) {
        for m in self.live.drain(..) {
            let (tx, rx) = crossbeam_channel::bounded(1);
            let _ = m.cmd.send(Cmd::Close(tx));
            let _ = rx.recv_timeout(Duration::from_secs(60));
            let _ = m.thread.join();
        }
    }
}

impl Drop for Series<'_> {
    fn drop(&mut self) {
        self.close_all();
    }
}

// ----- one change -----

/// What a kind of change measured over the repetitions.
#[derive(Default)]
struct Change {
    converge: Vec<Duration>,
    /// Crash only: from the crashed member's last renewal that reached the server.
    from_renewal: Vec<Duration>,
    moved: Vec<usize>,
    /// Changes that moved partitions against the sticky rule, with the first such description.
    unsticky: usize,
    first_unsticky: Option<String>,
    handoff: Vec<Duration>,
    /// Owner reads (and their summed time) and acquires of all members per change.
    reads: Vec<u64>,
    read_time: Vec<Duration>,
    acquires: Vec<u64>,
}

impl Change {
    /// Records a change that began at `t0` and converged at `at`; `before`/`after` are the owners,
    /// `gainer` the joiner (join) and `loser` the leaver (leave, crash).
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        t0: Instant,
        at: Instant,
        before: &BTreeMap<u32, Vec<usize>>,
        after: &BTreeMap<u32, Vec<usize>>,
        gainer: Option<usize>,
        loser: Option<usize>,
        calls: ((u64, u64, u64), (u64, u64, u64)),
    ) {
        self.converge.push(at.saturating_duration_since(t0));
        let moved: Vec<u32> = (0..COUNT).filter(|p| before.get(p) != after.get(p)).collect();
        self.moved.push(moved.len());
        let mut bad = Vec::new();
        for &p in &moved {
            let (b, a) = (before.get(&p).cloned().unwrap_or_default(), after.get(&p).cloned().unwrap_or_default());
            let ok = match (gainer, loser) {
                (Some(g), _) => a == [g],
                (_, Some(l)) => b == [l] && a.len() == 1,
                _ => false,
            };
            if !ok {
                bad.push(format!("partition {p}: {b:?} → {a:?}"));
            }
        }
        if let Some(g) = gainer {
            let cap = COUNT.div_ceil(BASE as u32 + 1) as usize;
            if moved.len() > cap {
                bad.push(format!("{} partitions moved to the joiner {g} (bound {cap})", moved.len()));
            }
        }
        if !bad.is_empty() {
            self.unsticky += 1;
            self.first_unsticky.get_or_insert_with(|| bad.join("; "));
        }
        let ((h0, n0, a0), (h1, n1, a1)) = calls;
        self.reads.push(h1 - h0);
        self.read_time.push(Duration::from_nanos(n1 - n0));
        self.acquires.push(a1 - a0);
    }

    /// Hand-offs of the partitions that moved: from `Revoking` issued by the old owner (or from
    /// `origin`, a graceful close) to the new owner's `Assigned`.
    fn handoffs(
        &mut self,
        log: &[Logged],
        after: &BTreeMap<u32, Vec<usize>>,
        moved_from: &[u32],
        origin: Option<Instant>,
    ) {
        for &p in moved_from {
            let Some(&[new]) = after.get(&p).map(Vec::as_slice) else { continue };
            let assigned = log.iter().find(|l| l.partition == p && l.member == new && matches!(l.what, What::Assigned));
            let start = match origin {
                Some(o) => Some(o),
                None => log.iter().rev().find_map(|l| match l.what {
                    What::Revoking(issued) if l.partition == p && l.member != new => Some(issued),
                    _ => None,
                }),
            };
            if let (Some(a), Some(s)) = (assigned, start) {
                self.handoff.push(a.at.saturating_duration_since(s));
            }
        }
    }
}

fn moved_partitions(before: &BTreeMap<u32, Vec<usize>>, after: &BTreeMap<u32, Vec<usize>>) -> Vec<u32> {
    (0..COUNT).filter(|p| before.get(p) != after.get(p)).collect()
}

// ----- the section -----

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let reps = config.pick(10, 2);
    let mut table = Table::new(
        format!(
            "9. Partition sets: {COUNT} partitions, members {BASE} → {} → {BASE}, {reps} repetitions per change",
            BASE + 1
        ),
        &[
            "backend",
            "change",
            "timings",
            "samples",
            "covered & balanced p50",
            "p99",
            "max",
            "target",
            "met",
            "moved per change (min–max; bound)",
            "sticky",
            "hand-off p50 / p99 (n)",
            "owner reads (their summed time) / acquires per change, all members",
        ],
    );
    for t in targets {
        progress(format!("section 9: {}", t.kind.name()));
        match measure(config, t, reps) {
            Ok(rows) => {
                for r in rows {
                    table.row(r);
                }
            }
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(format!(
        "Each member is a session on its own backend instance (memory: one shared instance) with an owner thread that \
         listens on `Partitions::events()` and calls `Partition::release` as soon as it sees `Revoking`. Default \
         timings: 15 s lease, 5 s renew, `PartitionOptions::default()` (drain 5 s, never reached; no settle). A join \
         opens a fifth member (`Session::partitions_with`; the time starts at that call, after its session opened); a \
         leave closes one member's set (`Partitions::close`, round robin over the members); a crash (lease 3 s, renew \
         1 s, as section 3) stops every SPI call of one member in a wrapper from one instant on, so nothing of its \
         session reaches the server any more and the server expires it. Covered & balanced: the live members' owned \
         partitions, as their events report them, cover all {COUNT} exactly once and nobody owns more than \
         ⌈{COUNT} / members⌉; the time is that of the event that made it so. Moved: owners compared after the members \
         were quiet for {QUIET:?}; sticky = a join moves at most ⌈{COUNT}/5⌉ = 13 and only to the joiner, a leave or \
         crash moves only the leaver's partitions. Hand-off: join, from `Revoking` issued (its deadline minus the \
         drain period) to the new owner's `Assigned`; leave, from the close call to each new owner's `Assigned`. \
         Crash: the bracket is from the crashed member's last keep-alive that reached the server. Owner reads: \
         `LeaseBackend::holder` calls of all members (each driver round reads the owner of every partition it does \
         not own, one call each), from the change until quiet, mean per change, with the time spent in them summed \
         over the members' threads. p99 over {reps} changes (nearest rank) is \
         their maximum. Targets (issue #38): graceful join and leave p99 ≤ 1 s on push backends, ≤ 2 s on \
         MySQL (default timings); crash p99 ≤ lease + renew + 1 s; every change within the sticky bound."
    ));
    report.table(&table);
}

fn measure(config: &Config, t: &Target, reps: usize) -> BenchResult<Vec<Vec<String>>> {
    let graceful = series_graceful(config, t, reps)?;
    let crash_opts = SessionOptions::builder().lease_duration(CRASH_LEASE).renew_interval(CRASH_RENEW).build()?;
    let (short_join, crash) = series_crash(config, t, reps, crash_opts)?;
    let limit = if t.kind.pushes() { Duration::from_secs(1) } else { Duration::from_secs(2) };
    let crash_bound = CRASH_LEASE + CRASH_RENEW + Duration::from_secs(1);
    let name = t.kind.name();
    let (join, leave) = graceful;
    Ok(vec![
        row(name, "join 4 → 5", "default", &join, Some(limit), Some(13)),
        row(name, "leave 5 → 4 (close)", "default", &leave, Some(limit), None),
        row(name, "join 4 → 5", "lease 3 s, renew 1 s", &short_join, None, Some(13)),
        row(name, "crash 5 → 4", "lease 3 s, renew 1 s", &crash, Some(crash_bound), None),
    ])
}

fn row(
    backend: &str,
    change: &str,
    timings: &str,
    c: &Change,
    target: Option<Duration>,
    join_bound: Option<usize>,
) -> Vec<String> {
    let s = Summary::of(&c.converge);
    let mut p99 = fmt_dur(s.p99);
    if !c.from_renewal.is_empty() {
        let r = Summary::of(&c.from_renewal);
        p99 = format!("{p99} ({} from the last renewal)", fmt_dur(r.p99));
    }
    let (target_s, met) = match target {
        Some(d) => (format!("p99 ≤ {}", fmt_dur(d)), if s.p99 <= d { "yes".to_string() } else { "**no**".to_string() }),
        None => ("— (informative)".to_string(), "—".to_string()),
    };
    let moved = format!(
        "{}–{} ({})",
        c.moved.iter().min().unwrap_or(&0),
        c.moved.iter().max().unwrap_or(&0),
        match join_bound {
            Some(b) => format!("≤ {b}, to the joiner"),
            None => "the leaver's".to_string(),
        }
    );
    let sticky = match &c.first_unsticky {
        None => "yes".to_string(),
        Some(first) => format!("**no** ({} of {}: {first})", c.unsticky, c.moved.len()),
    };
    let handoff = if c.handoff.is_empty() {
        "—".to_string()
    } else {
        let h = Summary::of(&c.handoff);
        format!("{} / {} ({})", fmt_dur(h.p50), fmt_dur(h.p99), h.n)
    };
    let mean = |v: &[u64]| if v.is_empty() { 0.0 } else { v.iter().sum::<u64>() as f64 / v.len() as f64 };
    vec![
        backend.to_string(),
        change.to_string(),
        timings.to_string(),
        s.n.to_string(),
        fmt_dur(s.p50),
        p99,
        fmt_dur(s.max),
        target_s,
        met,
        moved,
        sticky,
        handoff,
        format!(
            "{:.0} ({}) / {:.0}",
            mean(&c.reads),
            fmt_dur(c.read_time.iter().sum::<Duration>() / c.read_time.len().max(1) as u32),
            mean(&c.acquires)
        ),
    ]
}

/// Starts `BASE` members and waits until they are covered and balanced.
fn start(series: &mut Series<'_>) -> BenchResult<()> {
    let t0 = Instant::now();
    for _ in 0..BASE {
        series.join()?;
    }
    series.wait_balanced(t0, "the first members")?;
    series.shared.quiet();
    Ok(())
}

/// A fifth member joins; returns its id.
fn measure_join(series: &mut Series<'_>, into: &mut Change) -> BenchResult<usize> {
    let before = series.shared.owners(&series.ids());
    let c0 = series.calls.read();
    let (id, t0) = series.join()?;
    let at = series.wait_balanced(t0, "after a join")?;
    series.shared.quiet();
    let after = series.shared.owners(&series.ids());
    into.record(t0, at, &before, &after, Some(id), None, (c0, series.calls.read()));
    let moved = moved_partitions(&before, &after);
    into.handoffs(&series.shared.log_since(t0), &after, &moved, None);
    Ok(id)
}

/// Default timings: join, then close one member (round robin), `reps` times.
fn series_graceful(config: &Config, t: &Target, reps: usize) -> BenchResult<(Change, Change)> {
    let mut series = Series::new(config, t, "graceful", SessionOptions::default())?;
    start(&mut series)?;
    let (mut join, mut leave) = (Change::default(), Change::default());
    for rep in 0..reps {
        measure_join(&mut series, &mut join)?;
        let ids = series.ids();
        let victim = ids[rep % ids.len()];
        let before = series.shared.owners(&ids);
        let c0 = series.calls.read();
        let m = series.take(victim)?;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let t0 = Instant::now();
        m.cmd.send(Cmd::Close(tx)).map_err(|_| err("owner thread gone"))?;
        let at = series.wait_balanced(t0, "after a graceful leave")?;
        rx.recv_timeout(PATIENCE).map_err(|_| err("close did not return"))??;
        let _ = m.thread.join();
        series.shared.quiet();
        let after = series.shared.owners(&series.ids());
        leave.record(t0, at, &before, &after, None, Some(victim), (c0, series.calls.read()));
        let moved = moved_partitions(&before, &after);
        leave.handoffs(&series.shared.log_since(t0), &after, &moved, Some(t0));
        progress(format!(
            "  {} graceful {}/{reps}: join {}, leave {}",
            t.kind.name(),
            rep + 1,
            fmt_dur(*join.converge.last().unwrap_or(&Duration::ZERO)),
            fmt_dur(*leave.converge.last().unwrap_or(&Duration::ZERO))
        ));
    }
    Ok((join, leave))
}

/// Lease 3 s, renew 1 s: join, then crash one member (round robin), `reps` times.
fn series_crash(config: &Config, t: &Target, reps: usize, opts: SessionOptions) -> BenchResult<(Change, Change)> {
    let mut series = Series::new(config, t, "crash", opts)?;
    start(&mut series)?;
    let (mut join, mut crash) = (Change::default(), Change::default());
    for rep in 0..reps {
        measure_join(&mut series, &mut join)?;
        // At a random phase of the victim's renewals.
        thread::sleep(CRASH_RENEW.mul_f64(rand::random::<f64>()));
        let ids = series.ids();
        let victim = ids[rep % ids.len()];
        let before = series.shared.owners(&ids);
        let c0 = series.calls.read();
        let m = series.take(victim)?;
        let t0 = Instant::now();
        m.backend.crash();
        let renewed = m.backend.last_renewal().unwrap_or(t0);
        let at = series.wait_balanced(t0, "after a crash")?;
        series.shared.quiet();
        let after = series.shared.owners(&series.ids());
        crash.record(t0, at, &before, &after, None, Some(victim), (c0, series.calls.read()));
        crash.from_renewal.push(at.saturating_duration_since(renewed));
        let _ = m.cmd.send(Cmd::Drop);
        let _ = m.thread.join();
        progress(format!(
            "  {} crash {}/{reps}: join {}, crash {}",
            t.kind.name(),
            rep + 1,
            fmt_dur(*join.converge.last().unwrap_or(&Duration::ZERO)),
            fmt_dur(*crash.converge.last().unwrap_or(&Duration::ZERO))
        ));
    }
    Ok((join, crash))
}
