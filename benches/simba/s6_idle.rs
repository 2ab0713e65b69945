//! Section 6: idle CPU of one session holding 1,000 leases at default timings (process user +
//! system time from /proc/self/stat over a window), next to the same backend with no session.

use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use simba::{Lease, Session, SessionOptions};

use crate::common::{err, name, process_cpu, progress, BenchResult, Counting, Report, Table};
use crate::targets::Target;
use crate::Config;

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let leases = 1000;
    let window = config.pick(Duration::from_secs(10), Duration::from_secs(3));
    let mut table = Table::new(
        format!("6. Idle CPU: one session holding {leases} leases, default timings, {}s window", window.as_secs()),
        &["backend", "process CPU with the session", "same backend, no session", "keep-alives in window", "target"],
    );
    for t in targets {
        progress(format!("section 6: {}", t.kind.name()));
        match measure(config, t, leases, window) {
            Ok(row) => table.row(row),
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(
        "CPU = (utime + stime) of the whole bench process over the window, in % of one core; /proc ticks are \
         10 ms, so over 10 s the resolution is 0.1 %. The second column is the backend's own background cost (pub/sub \
         thread, ZooKeeper pings and watchdog, pools) measured the same way before the session was opened.",
    );
    report.table(&table);
}

fn cpu_over(window: Duration) -> BenchResult<f64> {
    let c0 = process_cpu()?;
    let t0 = Instant::now();
    thread::sleep(window);
    Ok((process_cpu()? - c0).as_secs_f64() / t0.elapsed().as_secs_f64() * 100.0)
}

fn measure(config: &Config, t: &Target, leases: usize, window: Duration) -> BenchResult<Vec<String>> {
    let (backend, calls) = Counting::wrap(t.backend()?);
    // Touch the backend once so lazily opened connections exist for the baseline too.
    let _ = backend.holder(&name(&format!("{}.idle.0", config.prefix))?)?;
    thread::sleep(Duration::from_millis(500));
    let baseline = cpu_over(window)?;
    let session = Session::open(backend.clone(), SessionOptions::default())?;
    let held: Vec<Lease> = thread::scope(|scope| -> BenchResult<Vec<Lease>> {
        let handles: Vec<_> = (0..4)
            .map(|k| {
                let session = &session;
                let prefix = config.prefix.clone();
                scope.spawn(move || -> BenchResult<Vec<Lease>> {
                    let mut out = Vec::new();
                    for i in (k..leases).step_by(4) {
                        let n = name(&format!("{prefix}.idle.{i}"))?;
                        out.push(session.try_lock(&n)?.ok_or_else(|| err(format!("{n} busy")))?);
                    }
                    Ok(out)
                })
            })
            .collect();
        let mut all = Vec::new();
        for h in handles {
            all.extend(h.join().map_err(|_| err("acquire thread panicked"))??);
        }
        Ok(all)
    })?;
    thread::sleep(Duration::from_secs(1));
    let ka0 = calls.keep_alive.load(Ordering::Relaxed);
    let cpu = cpu_over(window)?;
    let kas = calls.keep_alive.load(Ordering::Relaxed) - ka0;
    let still = held.iter().filter(|l| l.is_held()).count();
    if still != leases {
        return Err(err(format!("only {still} of {leases} leases still held after the window")));
    }
    session.close()?;
    drop(held); // released by the close: dropping a guard after it sends nothing
    Ok(vec![
        t.kind.name().into(),
        format!("{cpu:.2} %"),
        format!("{baseline:.2} %"),
        kas.to_string(),
        if cpu < 1.0 { "< 1 %: yes".into() } else { "< 1 %: **no**".into() },
    ])
}
