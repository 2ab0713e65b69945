//! The cost of the `metrics` feature per acquire + release on the memory backend, in paired runs
//! (docs/benchmarks.md, "Metrics overhead"): batches of `try_lock` + `release` alternate between
//! a real recorder (the Prometheus exporter's, set as the thread's local recorder) and none (the
//! facade's no-op), so machine noise hits both sides alike; the target is at most 2 µs more per
//! acquire + release. Run: `cargo bench --bench metrics_cost --features metrics`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::PrometheusBuilder;
use simba::{MemoryBackend, Session, SessionOptions};

const BATCH: u32 = 2_000;
const PAIRS: usize = 31;
const TARGET: Duration = Duration::from_micros(2);

fn batch(session: &Session) -> Duration {
    let started = Instant::now();
    for _ in 0..BATCH {
        match session.try_lock("cost") {
            Ok(Some(lease)) => {
                if let Err(e) = lease.release() {
                    panic!("release: {e}");
                }
            }
            other => panic!("try_lock: {other:?}"),
        }
    }
    started.elapsed() / BATCH
}

fn main() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let options = SessionOptions::builder().lease_duration(Duration::from_secs(30)).build().expect("options");
    let session = Session::open(Arc::new(MemoryBackend::new()), options).expect("session");
    // Warm up both paths.
    batch(&session);
    metrics::with_local_recorder(&recorder, || batch(&session));
    let mut diffs: Vec<f64> = Vec::with_capacity(PAIRS);
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for i in 0..PAIRS {
        // Alternate which side runs first, so a drift in machine load does not favour one.
        let (on, off) = if i % 2 == 0 {
            let on = metrics::with_local_recorder(&recorder, || batch(&session));
            (on, batch(&session))
        } else {
            let off = batch(&session);
            (metrics::with_local_recorder(&recorder, || batch(&session)), off)
        };
        with.push(on.as_secs_f64() * 1e6);
        without.push(off.as_secs_f64() * 1e6);
        diffs.push((on.as_secs_f64() - off.as_secs_f64()) * 1e6);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let (m_on, m_off, m_diff) = (median(&mut with), median(&mut without), median(&mut diffs));
    println!("metrics overhead per try_lock + release (memory backend, {PAIRS} paired batches of {BATCH}):");
    println!("  with a Prometheus recorder: {m_on:.2} µs   without (no-op): {m_off:.2} µs   paired difference (median): {m_diff:.2} µs");
    let target = TARGET.as_secs_f64() * 1e6;
    println!("  target: at most {target:.1} µs more: {}", if m_diff <= target { "met" } else { "MISSED" });
}
