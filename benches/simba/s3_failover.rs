//! Section 3: crash failover. A holder opens a raw SPI session (lease 3 s), takes several names and
//! then never renews — as if its process had died right after its last renewal. One waiter
//! session per name (lease 3 s, renew 1 s) waits in `lock()`. Measured: time from the holder's
//! last renewal (the instant `open_session` was sent: a conservative origin) to each waiter
//! holding, vs the bound lease_duration + renew_interval.

use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use simba::{Session, SessionOptions};

use crate::common::{err, fmt_dur, name, progress, spi_acquire, BenchResult, Report, Summary, Table};
use crate::targets::{Kind, Target};
use crate::Config;

const LEASE: Duration = Duration::from_secs(3);
const RENEW: Duration = Duration::from_secs(1);

pub fn run(config: &Config, targets: &[Target], report: &mut Report) {
    let mut table = Table::new(
        "3. Crash failover (lease 3 s, renew 1 s): holder's last renewal → waiter holds",
        &["backend", "how the waiter learns", "samples", "min", "p50", "max", "bound (lease + renew)", "met"],
    );
    for t in targets {
        progress(format!("section 3: {}", t.kind.name()));
        match measure(config, t) {
            Ok(row) => table.row(row),
            Err(e) => table.failed(t.kind.name(), &e),
        }
    }
    table.note(
        "Waiters retry every renew_interval/2 + jitter (0.5–0.75 s here) unless the backend pushes the release. \
         Redis, SQL and memory learn of an expired holder only by retrying (expiry publishes nothing). ZooKeeper: \
         the holder's process is alive but not renewing, so the backend's watchdog closes the holder's ZooKeeper \
         session at its lease duration, the ephemeral nodes vanish and the waiters' watches fire; a holder whose \
         process really died is expired by the ensemble after the negotiated session timeout (3 s, checked every \
         tickTime = 250 ms here) with the same watch-driven wake-up.",
    );
    report.table(&table);
}

fn measure(config: &Config, t: &Target) -> BenchResult<Vec<String>> {
    let names_per_round = config.pick(6, 3);
    let rounds = config.pick(3, 1);
    let opts = SessionOptions::builder().lease_duration(LEASE).renew_interval(RENEW).build()?;
    let mut samples = Vec::new();
    for round in 0..rounds {
        let holder_backend = t.backend()?;
        let waiter_backend = if t.kind == Kind::Memory { holder_backend.clone() } else { t.backend()? };
        let names = (0..names_per_round)
            .map(|i| name(&format!("{}.failover.{round}.{i}", config.prefix)))
            .collect::<BenchResult<Vec<_>>>()?;
        // Waiters first (opening sessions takes a while on some backends).
        let waiters = names
            .iter()
            .map(|_| Session::open(waiter_backend.clone(), opts.clone()).map(Arc::new))
            .collect::<simba::Result<Vec<_>>>()?;
        let sent = Instant::now();
        let grant = holder_backend.open_session(LEASE, "crashed holder")?;
        for n in &names {
            spi_acquire(&*holder_backend, &grant.id, n)?;
        }
        let setup = sent.elapsed();
        if setup > LEASE / 2 {
            return Err(err(format!("taking {names_per_round} names took {setup:?}, too long for a 3 s lease")));
        }
        let handles: Vec<_> = waiters
            .iter()
            .zip(&names)
            .map(|(w, n)| {
                let (w, n) = (w.clone(), n.clone());
                thread::spawn(move || w.lock(&n).map(|lease| (Instant::now(), lease)))
            })
            .collect();
        for h in handles {
            let (at, lease) = h.join().map_err(|_| err("waiter thread panicked"))??;
            samples.push(at.saturating_duration_since(sent));
            drop(lease);
        }
        // Keep the holder backend alive until every waiter holds: on ZooKeeper dropping it would
        // close the holder's session early.
        drop(holder_backend);
        drop(waiters);
    }
    let s = Summary::of(&samples);
    let bound = LEASE + RENEW;
    Ok(vec![
        t.kind.name().into(),
        match t.kind {
            Kind::Zookeeper => "watch (node deleted)".into(),
            Kind::Etcd => "watch (key deleted with the etcd lease)".into(),
            _ => "retry (polling)".into(),
        },
        s.n.to_string(),
        fmt_dur(s.min),
        fmt_dur(s.p50),
        fmt_dur(s.max),
        fmt_dur(bound),
        if s.max <= bound { "yes".into() } else { "**no**".into() },
    ])
}
