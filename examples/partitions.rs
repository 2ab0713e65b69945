//! Sharded work on the in-process memory backend: 8 shards of an "order stream" spread over
//! whichever workers are alive, each shard processed by exactly one worker at a time, each write
//! to a shard fenced with the shard's token.
//!
//! 1. Two workers share the 8 shards (4 each).
//! 2. A third joins: it takes shards only from the others (2 or 3 of them), who finish the batch
//!    they are on and release each shard as soon as they are told it is being revoked.
//! 3. The third leaves gracefully: only its shards move back.
//!
//! Run: `cargo run --example partitions`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use simba::channel::{bounded, select, Sender};
use simba::fence;
use simba::partitions::{PartitionEvent, Partitions};
use simba::{MemoryBackend, Session, SessionOptions};

const SHARDS: u32 = 8;

/// A worker: its session and its member of the partition set, and a thread that processes its
/// shards and hands a shard over as soon as it is revoked.
struct Worker {
    name: String,
    session: Session,
    shards: Arc<Partitions>,
    stop: Sender<()>,
    thread: thread::JoinHandle<simba::Result<()>>,
}

fn start(
    name: &str,
    backend: &Arc<MemoryBackend>,
    options: &SessionOptions,
    store: &Arc<fence::Memory>,
) -> simba::Result<Worker> {
    let session = Session::open(backend.clone(), options.with_metadata(name)?)?;
    let shards = Arc::new(session.partitions("orders", SHARDS)?);
    let (stop, stopped) = bounded::<()>(0);
    let (me, mine, store) = (name.to_string(), shards.clone(), store.clone());
    let thread = thread::spawn(move || -> simba::Result<()> {
        let events = mine.events();
        loop {
            select! {
                recv(stopped) -> _ => return Ok(()),
                recv(*events) -> ev => match ev {
                    Ok(PartitionEvent::Revoking { partition, .. }) => {
                        // Finish the current batch of this shard (nothing here), then hand it on.
                        if let Some(p) = mine.owned().into_iter().find(|p| p.index() == partition) {
                            p.release()?;
                        }
                    }
                    Ok(PartitionEvent::Lost { partition, reason, .. }) => {
                        println!("  {me}: shard {partition} LOST ({reason:?})");
                    }
                    Ok(_) => {}
                    Err(_) => return Ok(()),
                },
                default(Duration::from_millis(20)) => {
                    // Process every owned shard: one fenced write each.
                    for p in mine.owned() {
                        if let Ok(token) = p.token() {
                            store.check(p.fence_resource(), token)?;
                        }
                    }
                }
            }
        }
    });
    Ok(Worker { name: name.to_string(), session, shards, stop, thread })
}

impl Worker {
    fn owned(&self) -> Vec<u32> {
        self.shards.owned().iter().map(|p| p.index()).collect()
    }

    /// Leaves gracefully: stops processing, releases every shard (the others take them over at
    /// once) and closes the session.
    fn stop(self) -> simba::Result<()> {
        drop(self.stop);
        self.thread.join().map_err(|_| simba::Error::new(simba::ErrorKind::Backend, "worker thread panicked"))??;
        // The worker thread has ended, so this is the last handle: close it (Drop would release in
        // the background instead).
        if let Ok(shards) = Arc::try_unwrap(self.shards) {
            shards.close()?;
        }
        self.session.close()
    }
}

/// Waits until the workers own every shard exactly once, none more than ⌈shards / workers⌉.
fn settled(workers: &[&Worker]) -> simba::Result<BTreeMap<String, Vec<u32>>> {
    let cap = SHARDS.div_ceil(workers.len() as u32) as usize;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let view: BTreeMap<String, Vec<u32>> = workers.iter().map(|w| (w.name.clone(), w.owned())).collect();
        let total: usize = view.values().map(Vec::len).sum();
        let mut all: Vec<u32> = view.values().flatten().copied().collect();
        all.sort_unstable();
        all.dedup();
        if total == SHARDS as usize && all.len() == SHARDS as usize && view.values().all(|v| v.len() <= cap) {
            return Ok(view);
        }
        if Instant::now() >= deadline {
            return Err(simba::Error::new(simba::ErrorKind::Timeout, format!("the workers did not settle: {view:?}")));
        }
        thread::sleep(Duration::from_millis(20));
    }
}

fn main() -> simba::Result<()> {
    let backend = Arc::new(MemoryBackend::new());
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()?;
    let store = Arc::new(fence::Memory::new());

    println!("1. Two workers share {SHARDS} shards:");
    let a = start("worker-a", &backend, &options, &store)?;
    let b = start("worker-b", &backend, &options, &store)?;
    let before = settled(&[&a, &b])?;
    println!("  {before:?}");

    println!("2. worker-c joins; only the others give shards up, and only to it:");
    let c = start("worker-c", &backend, &options, &store)?;
    let during = settled(&[&a, &b, &c])?;
    println!("  {during:?}");

    println!("3. worker-c leaves gracefully; only its shards move:");
    c.stop()?;
    let after = settled(&[&a, &b])?;
    println!("  {after:?}");

    thread::sleep(Duration::from_millis(100)); // every owner writes once with its current token
    println!("Each shard's resource accepted tokens in term order; the largest:");
    for p in 0..SHARDS {
        let seen = store.seen(simba::partitions::fence_resource("orders", p)?)?;
        println!("  shard {p}: {}", seen.map_or(0, |t| t.get()));
    }
    a.stop()?;
    b.stop()
}
