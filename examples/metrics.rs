//! simba's metrics in the Prometheus text format, on the in-process memory backend: a Prometheus
//! recorder is installed (the application chooses the exporter; simba only talks to the `metrics`
//! facade), two sessions contend for a lock, and the rendered page is printed — what an HTTP
//! `/metrics` endpoint would serve. The table of every metric: docs/observability.md.
//!
//! Run: `cargo run --example metrics --features metrics`

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use simba::{MemoryBackend, Session, SessionOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let prometheus = PrometheusBuilder::new().install_recorder()?;
    let backend = Arc::new(MemoryBackend::new());
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()?;
    let (a, b) = (Session::open(backend.clone(), options.clone())?, Arc::new(Session::open(backend, options)?));
    let held = a.lock("report")?;
    let waiter = {
        let b = b.clone();
        thread::spawn(move || b.lock("report").map(drop))
    };
    thread::sleep(Duration::from_millis(100)); // let the waiter wait, then hand the lock over
    held.release()?;
    waiter.join().map_err(|_| "the waiter panicked")??;
    thread::sleep(Duration::from_millis(1200)); // a couple of renewals
    print!("{}", prometheus.render());
    a.close()?;
    Ok(())
}
