//! Section 5: scale. 1,000 sessions × 10 leases in this process against one server, at default
//! timings (15 s lease, 5 s renew), observed for a window: missed renewals (RenewalFailed,
//! Expired, LeaseLost events), leases still held at the end, keep-alives per second, round trips
//! per second (proxy) and server statements per second (server counter).

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use simba::{Events, Lease, Session, SessionEvent, SessionOptions};

use crate::common::{err, fmt_rate, name, process_cpu, progress, thread_count, BenchResult, Counting, Report, Table};
use crate::proxy::Proxy;
use crate::targets::{Kind, Target};
use crate::Config;

const LEASES_PER_SESSION: usize = 10;

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let sessions = config.pick(1000, 100);
    let window = config.pick(Duration::from_secs(30), Duration::from_secs(6));
    let mut table = Table::new(
        format!(
            "5. Scale: {sessions} sessions × {LEASES_PER_SESSION} leases, default timings, observed for {}s",
            window.as_secs()
        ),
        &[
            "backend",
            "setup",
            "missed renewals (failed / expired / lost)",
            "leases held at end",
            "keep-alives/s",
            "round trips/s (proxy)",
            "server statements/s",
            "process CPU",
            "client CPU / keep-alive",
            "threads",
        ],
    );
    for t in targets {
        progress(format!("section 5: {}", t.kind.name()));
        match measure(config, t, sessions, window) {
            Ok(row) => table.row(row),
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(format!(
        "All sessions live in this one process and share one backend instance (so one connection pool; ZooKeeper: \
         one client and TCP connection per session, by design). Expected keep-alives/s = sessions / renew interval \
         = {}/s. Missed renewals count every RenewalFailed, Expired and LeaseLost event from the first open to the \
         end of the window (target: zero). Round trips/s are counted by the proxy for this process only (Redis \
         standalone, PostgreSQL, MySQL; the proxy adds a little latency); server statements/s come from the server \
         counters of section 4 and include other clients of the shared servers. Process CPU is user + system time \
         over the window, in % of one core; client CPU / keep-alive divides it by the keep-alives sent (it includes \
         the process's other background work: pools, pub/sub, ZooKeeper pings).",
        sessions / 5
    ));
    report.table(&table);
}

struct Node {
    session: Session,
    events: Events<SessionEvent>,
    leases: Vec<Lease>,
}

fn measure(config: &Config, t: &Target, sessions: usize, window: Duration) -> BenchResult<Vec<String>> {
    let proxy = match (t.kind, t.upstream()?) {
        (Kind::Zookeeper, _) | (_, None) => None,
        (_, Some(up)) => Some(Proxy::start(up)?),
    };
    let raw_backend = t.backend_at(proxy.as_ref().map(|p| p.addr()))?;
    let (backend, calls) = Counting::wrap(raw_backend);
    // A side stat: a counter the server will not give shows "unavailable: <reason>".
    let mut counter = t.counter();
    let started = Instant::now();
    let threads = 4;
    let per = sessions.div_ceil(threads);
    let nodes: Vec<Node> = thread::scope(|scope| -> BenchResult<Vec<Node>> {
        let handles: Vec<_> = (0..threads)
            .map(|k| {
                let backend = backend.clone();
                let prefix = config.prefix.clone();
                scope.spawn(move || -> BenchResult<Vec<Node>> {
                    let mut out = Vec::new();
                    for i in (k * per)..((k + 1) * per).min(sessions) {
                        let session = Session::open(backend.clone(), SessionOptions::default())?;
                        let events = session.events();
                        let mut leases = Vec::with_capacity(LEASES_PER_SESSION);
                        for j in 0..LEASES_PER_SESSION {
                            let n = name(&format!("{prefix}.scale.{i}.{j}"))?;
                            leases.push(session.try_lock(&n)?.ok_or_else(|| err(format!("{n} busy")))?);
                        }
                        out.push(Node { session, events, leases });
                        if k == 0 && out.len() % 50 == 0 {
                            progress(format!("  {} sessions open", out.len() * threads));
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| err("setup thread panicked"))??);
        }
        Ok(all)
    })?;
    let setup = started.elapsed();
    progress(format!(
        "  {} sessions with {} leases open in {setup:.1?}; observing for {window:?}",
        nodes.len(),
        nodes.len() * LEASES_PER_SESSION
    ));

    let ka0 = calls.keep_alive.load(Ordering::Relaxed);
    let rt0 = proxy.as_ref().map(|p| p.round_trips());
    let c0 = counter.read();
    let cpu0 = process_cpu()?;
    let w0 = Instant::now();
    thread::sleep(window);
    let elapsed = w0.elapsed().as_secs_f64();
    let cpu = (process_cpu()? - cpu0).as_secs_f64() / elapsed * 100.0;
    let stmts = counter.since(c0);
    let ka = (calls.keep_alive.load(Ordering::Relaxed) - ka0) as f64 / elapsed;
    let rt = match (proxy.as_ref(), rt0) {
        (Some(p), Some(r0)) => Some((p.round_trips() - r0) as f64 / elapsed),
        _ => None,
    };
    let threads_now = thread_count();

    let (mut failed, mut expired, mut lost) = (0usize, 0usize, 0usize);
    let mut held = 0usize;
    for n in &nodes {
        while let Ok(ev) = n.events.try_recv() {
            match ev {
                SessionEvent::RenewalFailed { .. } => failed += 1,
                SessionEvent::Expired => expired += 1,
                SessionEvent::LeaseLost { .. } => lost += 1,
                _ => {}
            }
        }
        held += n.leases.iter().filter(|l| l.is_held()).count();
    }
    let total = nodes.len() * LEASES_PER_SESSION;
    progress("  closing the sessions");
    let closing = Instant::now();
    thread::scope(|scope| {
        let mut rest = nodes;
        let chunk = rest.len().div_ceil(threads).max(1);
        while !rest.is_empty() {
            let part: Vec<Node> = rest.drain(..rest.len().min(chunk)).collect();
            scope.spawn(move || {
                for Node { session, leases, .. } in part {
                    let _ = session.close();
                    // The close released every lease on the backend: dropping a guard after it
                    // sends nothing (the engine's rule), so the backend goes with the last guard.
                    drop(leases);
                }
            });
        }
    });
    progress(format!("  closed in {:.1?}", closing.elapsed()));
    Ok(vec![
        t.kind.name().into(),
        format!("{setup:.1?}"),
        if failed + expired + lost == 0 { "**0**".into() } else { format!("**{failed} / {expired} / {lost}**") },
        format!("{held} / {total}"),
        fmt_rate(ka),
        rt.map_or("—".into(), fmt_rate),
        counter.cell(stmts.map(|s| s.per(elapsed)), "—"),
        format!("{cpu:.1} %"),
        // Everything the process spent in the window (renewal threads, pools, pub/sub, pings),
        // per keep-alive sent: an upper bound of a renewal's own cost.
        if ka > 0.0 { crate::common::fmt_dur(Duration::from_secs_f64(cpu / 100.0 / ka)) } else { "—".into() },
        threads_now.to_string(),
    ])
}
