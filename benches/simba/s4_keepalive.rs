//! Section 4: keep-alive cost with 1, 100 and 10,000 leases held by one raw SPI session: time per
//! `keep_alive`, round trips per keep-alive (counting proxy, exact for this process) and server
//! statements per keep-alive (server counter, includes other clients; minimum over the samples).

use std::collections::HashSet;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use simba::backend::{KeepAlive, LeaseBackend};
use simba::{Name, SessionId};

use crate::common::{
    err, fmt_dur, name, process_cpu_precise, progress, spi_acquire, BenchResult, Report, Summary, Table,
};
use crate::proxy::Proxy;
use crate::targets::{redis_slot, Kind, Reading, SideCounter, Stat, Target};
use crate::Config;

const LEASE: Duration = Duration::from_secs(120);

/// What the proxy holds each server reply for in the "with 2 ms per server reply" column.
const DELAY: Duration = Duration::from_millis(2);

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let mut table = Table::new(
        "4. Keep-alive cost vs leases held (raw SPI `keep_alive` of one session)",
        &[
            "backend",
            "leases",
            "keep-alive p50",
            "max",
            "client CPU / keep-alive",
            "round trips / keep-alive",
            "keep-alive p50 with 2 ms per server reply",
            "server statements / keep-alive",
            "server time / keep-alive",
            "concurrent PING p50 / max",
            "target",
        ],
    );
    for t in targets {
        progress(format!("section 4: {}", t.kind.name()));
        match measure(config, t) {
            Ok(rows) => rows.into_iter().for_each(|r| table.row(r)),
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(
        "Round trips: counted by a loopback TCP proxy in front of the server (a client write after a server reply \
         starts a round trip; pipelined requests count once); this is how PostgreSQL is counted. With 2 ms per \
         server reply: the same proxy then holds every chunk the server sends for 2 ms (a distant server), p50 of \
         up to 5 keep-alives: about 2 ms per round trip the keep-alive waits for, plus its time above. Server statements: \
         Redis requests from `INFO commandstats` (EVALSHA/EVAL calls; on Cluster each is one round trip, summed over \
         the masters) with, in brackets, every command executed including those inside scripts \
         (total_commands_processed), MySQL/MariaDB \
         `SHOW GLOBAL STATUS LIKE 'Questions'`, ZooKeeper `mntr` zk_packets_received (4lw over its own TCP \
         connection); the counter's own reads are subtracted and the minimum over the samples is shown, because \
         other clients of the shared servers only ever add to it. PostgreSQL's `pg_stat_database` is flushed with a \
         delay of up to seconds and is not used here. Server time: the p50 over the samples of the requests' \
         `INFO commandstats` usec (Redis standalone: steady state, and right after a release + re-acquire, when \
         the renewal lists the changed lease index) (Redis, a script's time includes the commands it runs; other clients add to it). \
         Concurrent PING: another client on its own connection PINGs in a loop while the same number of \
         keep-alives run back to back (Redis standalone: the single-threaded server answers it only between \
         scripts). Client CPU: the p50 over the samples of this process's CPU time (every thread) during one \
         keep-alive: building the requests and reading the replies (the rest of the wall time is the servers' \
         work and the network).",
    );
    report.table(&table);
}

/// Acquires names `from..to` with a few threads, keeping the session alive meanwhile.
fn acquire_range(backend: &Arc<dyn LeaseBackend>, sid: &SessionId, names: &[Name]) -> BenchResult<()> {
    if names.len() > 500 {
        progress(format!("  acquiring {} leases", names.len()));
    }
    let threads = 4.min(names.len().max(1));
    let chunk = names.len().div_ceil(threads);
    thread::scope(|scope| -> BenchResult<()> {
        let handles: Vec<_> = names
            .chunks(chunk.max(1))
            .enumerate()
            .map(|(i, part)| {
                let b = backend.clone();
                scope.spawn(move || -> BenchResult<()> {
                    let mut last = Instant::now();
                    for n in part {
                        spi_acquire(&*b, sid, n)?;
                        if i == 0 && last.elapsed() > Duration::from_secs(10) {
                            b.keep_alive(sid, LEASE)?;
                            last = Instant::now();
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| err("acquire thread panicked"))??;
        }
        Ok(())
    })
}

/// The token `sid` holds `name` with (a repeated acquire returns it).
fn spi_token(backend: &dyn LeaseBackend, sid: &SessionId, name: &Name) -> BenchResult<simba::Token> {
    match backend.acquire(sid, name)? {
        simba::backend::Acquire::Acquired { token, .. } => Ok(token),
        simba::backend::Acquire::Busy => Err(err(format!("lease {name} is not held by the bench session"))),
    }
}

fn keep_alive_owned(backend: &dyn LeaseBackend, sid: &SessionId) -> BenchResult<usize> {
    match backend.keep_alive(sid, LEASE)? {
        KeepAlive::Alive { owned, .. } => Ok(owned.len()),
        KeepAlive::Expired => Err(err("the session expired")),
    }
}

fn measure(config: &Config, t: &Target) -> BenchResult<Vec<Vec<String>>> {
    let counts: Vec<usize> = config.pick(vec![1, 100, 10_000], vec![1, 100, 1_000]);
    let samples = config.pick(15, 4);
    let names = (0..*counts.last().unwrap_or(&1))
        .map(|i| name(&format!("{}.ka.{i}", config.prefix)))
        .collect::<BenchResult<Vec<_>>>()?;

    // Pass 1, direct connection: time per keep-alive and the server counter.
    let backend = t.backend()?;
    let grant = backend.open_session(LEASE, "")?;
    // pg_stat_database is flushed too late to count single statements: PostgreSQL uses the proxy.
    // A side stat: a counter the server will not give shows "unavailable: <reason>".
    let mut counter = if t.kind == Kind::Postgres { SideCounter::none() } else { t.counter() };
    #[allow(clippy::type_complexity)]
    let mut timing: Vec<(Summary, Summary, Option<Reading>, Option<String>, Option<Stat<Summary>>)> = Vec::new();
    let mut have = 0;
    for &n in &counts {
        acquire_range(&backend, &grant.id, &names[have..n])?;
        have = n;
        let owned = keep_alive_owned(&*backend, &grant.id)?;
        if owned != n {
            return Err(err(format!("keep-alive reports {owned} leases owned, expected {n}")));
        }
        let mut times = Vec::new();
        let mut cpu = Vec::new();
        let mut stmts = Reading::MAX;
        let mut server_us = Vec::new();
        for _ in 0..samples {
            let c0 = counter.read();
            let cpu0 = process_cpu_precise()?;
            let t0 = Instant::now();
            keep_alive_owned(&*backend, &grant.id)?;
            times.push(t0.elapsed());
            cpu.push(process_cpu_precise()?.saturating_sub(cpu0));
            if let Some(r) = counter.since(c0) {
                server_us.extend(r.server_us.map(Duration::from_micros));
                stmts = stmts.min(r);
            }
        }
        // Back-to-back keep-alives (at least `samples`, for at least 200 ms) while another client
        // PINGs: what the renewal costs the others.
        let ((), pings) = t.pings_during(|| {
            let t0 = Instant::now();
            let mut done = 0;
            while done < samples || t0.elapsed() < Duration::from_millis(200) {
                keep_alive_owned(&*backend, &grant.id)?;
                done += 1;
            }
            Ok(())
        })?;
        let pings = pings.and_then(|p| match p {
            Ok(p) if p.is_empty() => None,
            p => Some(p.map(|p| Summary::of(&p))),
        });
        // Redis standalone lists the session's lease index only after someone else changed it (its
        // own acquires and releases the client follows): the server time of a keep-alive right
        // after one release + re-acquire by this backend (a churning session), and by another
        // backend instance on the same session (the worst case: the whole index is listed).
        let (mut own_us, mut other_us) = (Vec::new(), Vec::new());
        if t.kind == Kind::Redis {
            if let Some(last) = names[..n].last().filter(|_| counter.live()) {
                let other = t.backend()?;
                for (by, into) in [(&backend, &mut own_us), (&other, &mut other_us)] {
                    for _ in 0..samples {
                        by.release(&grant.id, last, spi_token(&**by, &grant.id, last)?)?;
                        spi_acquire(&**by, &grant.id, last)?;
                        let c0 = counter.read();
                        keep_alive_owned(&*backend, &grant.id)?;
                        into.extend(counter.since(c0).and_then(|r| r.server_us).map(Duration::from_micros));
                    }
                }
            }
        }
        let server = (!server_us.is_empty()).then(|| {
            let steady = fmt_dur(Summary::of(&server_us).p50);
            if own_us.is_empty() {
                steady
            } else {
                format!(
                    "{steady}; {} after its own index change, {} after another client's",
                    fmt_dur(Summary::of(&own_us).p50),
                    fmt_dur(Summary::of(&other_us).p50)
                )
            }
        });
        timing.push((Summary::of(&times), Summary::of(&cpu), (stmts != Reading::MAX).then_some(stmts), server, pings));
    }
    let _ = backend.close_session(&grant.id);
    drop(backend);

    // Pass 2, through the counting proxy: round trips per keep-alive, then the time of a
    // keep-alive when the proxy holds each server reply for DELAY (a distant server: the
    // round trips the call waits for, in time).
    let mut rts: Vec<Option<f64>> = vec![None; counts.len()];
    let mut delayed: Vec<Option<Duration>> = vec![None; counts.len()];
    if let Some(up) = t.upstream()? {
        let proxy = Proxy::start(up)?;
        let backend = t.backend_at(Some(proxy.addr()))?;
        let grant = backend.open_session(LEASE, "")?;
        let mut have = 0;
        for (i, &n) in counts.iter().enumerate() {
            acquire_range(&backend, &grant.id, &names[have..n])?;
            have = n;
            keep_alive_owned(&*backend, &grant.id)?;
            let mut best = u64::MAX;
            for _ in 0..samples {
                let r0 = proxy.round_trips();
                keep_alive_owned(&*backend, &grant.id)?;
                best = best.min(proxy.round_trips() - r0);
            }
            rts[i] = Some(best as f64);
            proxy.set_delay(DELAY);
            let mut times = Vec::new();
            for _ in 0..samples.min(5) {
                let t0 = Instant::now();
                keep_alive_owned(&*backend, &grant.id)?;
                times.push(t0.elapsed());
            }
            proxy.set_delay(Duration::ZERO);
            delayed[i] = Some(Summary::of(&times).p50);
        }
        let _ = backend.close_session(&grant.id);
    }

    let mut rows = Vec::new();
    for (i, &n) in counts.iter().enumerate() {
        let (s, cpu, stmts, server, pings) = timing[i].clone();
        let slots: HashSet<u16> = names[..n].iter().map(|nm| redis_slot(&format!("simba:lease:{{{nm}}}"))).collect();
        let target = match t.kind {
            Kind::RedisCluster => format!("≤ 1 per slot in use ({} slots + the session's)", slots.len()),
            Kind::Memory => "— (in-process)".into(),
            _ => "≤ 1".into(),
        };
        rows.push(vec![
            t.kind.name().into(),
            n.to_string(),
            fmt_dur(s.p50),
            fmt_dur(s.max),
            fmt_dur(cpu.p50),
            rts[i].map_or("—".into(), |r| format!("{r:.0}")),
            delayed[i].map_or("—".into(), fmt_dur),
            counter.cell(stmts.map(|s| s.per(1.0)), "—"),
            match server {
                Some(s) => s,
                None if matches!(t.kind, Kind::Redis | Kind::RedisCluster) => counter.cell(None, "—"),
                None => "—".into(),
            },
            match pings {
                Some(Ok(p)) => format!("{} / {}", fmt_dur(p.p50), fmt_dur(p.max)),
                Some(Err(u)) => u.to_string(),
                None => "—".into(),
            },
            target,
        ]);
    }
    Ok(rows)
}
