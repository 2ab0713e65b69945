//! Three nodes (threads) on the in-process memory backend:
//! 1. take a lock in turn, each writing to a fenced resource with its token;
//! 2. elect a leader, make it go away, and watch the follower take over with a larger token that
//!    a fenced resource prefers over the old leader's;
//! 3. join a group and watch the membership change.
//!
//! Run: `cargo run --example quickstart`

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use simba::fence::{self, FenceError};
use simba::{ElectionEvent, MemoryBackend, Session, SessionOptions, Token};

/// A write to a fenced resource: the fence refuses a token smaller than the largest it has seen.
/// (`fence::Memory` keeps the largest token in memory; a real resource would use
/// `simba::fence::postgres`, `mysql` or `redis`, which check and write in one step.)
fn write(fence: &fence::Memory, resource: &str, who: &str, token: Token) -> simba::Result<bool> {
    match fence.check(resource, token) {
        Ok(()) => {
            println!("  {who} writes '{resource}' with token {token}: accepted");
            Ok(true)
        }
        Err(FenceError::Stale { seen, .. }) => {
            let seen = seen.map(|s| s.to_string()).unwrap_or_default();
            println!("  {who} writes '{resource}' with token {token}: REJECTED (stale: it has seen {seen})");
            Ok(false)
        }
        Err(e) => Err(e.into()),
    }
}

fn main() -> simba::Result<()> {
    let backend = Arc::new(MemoryBackend::new());
    let options = SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()?;

    println!("1. Three nodes take the lock 'report' in turn:");
    let store = Arc::new(fence::Memory::new());
    let nodes: Vec<_> = (1..=3)
        .map(|i| {
            let (backend, options, store) =
                (backend.clone(), options.with_metadata(format!("node-{i}")), store.clone());
            thread::spawn(move || -> simba::Result<()> {
                let session = Session::open(backend, options?)?;
                for _ in 0..2 {
                    let lease = session.lock("report")?;
                    println!("node-{i} holds 'report' (token {})", lease.token()?);
                    thread::sleep(Duration::from_millis(50));
                    // Ask for the token right before each write: it fails once the lease may be lost.
                    write(&store, "report", &format!("node-{i}"), lease.token()?)?;
                    lease.release()?;
                }
                session.close()
            })
        })
        .collect();
    for n in nodes {
        n.join().map_err(|_| simba::Error::backend("node thread panicked"))??;
    }

    println!("\n2. Leader election with failover:");
    let a = Session::open(backend.clone(), options.with_metadata("node-a")?)?;
    let b = Session::open(backend.clone(), options.with_metadata("node-b")?)?;
    let ea = a.campaign("scheduler")?;
    let t1 = ea.wait_elected_timeout(Duration::from_secs(5))?;
    println!("node-a leads 'scheduler' with token {t1}");
    let eb = b.campaign("scheduler")?;
    let events = eb.events();
    if let Some(leader) = b.leader("scheduler")? {
        println!("node-b sees the leader: {} (token {})", leader.metadata, leader.token);
    }
    println!("node-a goes away (its session ends)...");
    let stale = ea.token()?;
    drop(ea);
    drop(a);
    let t2 = eb.wait_elected_timeout(Duration::from_secs(10))?;
    println!("node-b took over with token {t2} (> {t1})");
    for ev in events.try_iter() {
        if let ElectionEvent::Elected { token } = ev {
            println!("  node-b event: Elected {{ token: {token} }}");
        }
    }
    let jobs = fence::Memory::new();
    write(&jobs, "jobs", "node-a", stale)?;
    write(&jobs, "jobs", "node-b", t2)?;
    let late = write(&jobs, "jobs", "node-a (stale, e.g. after a long GC pause)", stale)?;
    assert!(!late, "the fence must refuse the old leader's token");

    println!("\n3. Group membership:");
    let watch = b.watch_members("workers")?;
    let c = Session::open(backend.clone(), options.with_metadata("node-c")?)?;
    let membership = c.join("workers")?;
    let _mb = b.join("workers")?;
    thread::sleep(Duration::from_millis(100));
    let members: Vec<String> = b.members("workers")?.into_iter().map(|m| m.metadata).collect();
    println!("members of 'workers': {members:?}");
    membership.leave()?;
    if let Ok(initial) = watch.recv_timeout(Duration::from_secs(1)) {
        println!("  initial members seen by the watcher: {}", initial.members.len());
    }
    while let Ok(change) = watch.recv_timeout(Duration::from_millis(300)) {
        let joined: Vec<_> = change.joined.iter().map(|m| m.metadata.as_str()).collect();
        let left: Vec<_> = change.left.iter().map(|m| m.metadata.as_str()).collect();
        println!("  change: joined {joined:?}, left {left:?}");
    }
    drop(eb);
    b.close()?;
    c.close()?;
    Ok(())
}
