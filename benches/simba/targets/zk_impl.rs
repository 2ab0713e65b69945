//! ZooKeeper for the benchmark: the raw lock (an ephemeral create, a delete), the raw notification
//! and hand-off samples, the server's fsyncs and packet counter (`mntr`), the version.

use super::*;
use futures::executor::block_on;
use zookeeper_client::{Acls, Client, CreateMode, Error as ZkError};

fn client(hosts: &str) -> BenchResult<Client> {
    let connect = Client::connector().with_session_timeout(Duration::from_secs(15)).connect(hosts);
    Ok(block_on(connect)?)
}

pub fn init(hosts: &str) -> BenchResult<String> {
    let c = client(hosts)?;
    match block_on(c.create(ZK_RAW_DIR, &[], &CreateMode::Persistent.with_acls(Acls::anyone_all()))) {
        Ok(_) | Err(ZkError::NodeExists) => {}
        Err(e) => return Err(e.into()),
    }
    let addr = hosts.split(',').next().unwrap_or("").to_socket_addrs()?.next().ok_or_else(|| err("bad address"))?;
    Ok(match version(addr) {
        Ok(v) => format!("ZooKeeper {v}"),
        Err(u) => format!("ZooKeeper (version {u})"),
    })
}

/// Sends a four-letter word and returns the reply, or why there is none: a ZooKeeper whose
/// `4lw.commands.whitelist` leaves the word out answers with one line of its own ("mntr is not
/// executed because it is not in the whitelist."), which becomes the reason as it wrote it.
/// `looks_right` tells a real reply from such a refusal.
fn four_letter(addr: SocketAddr, word: &str, looks_right: impl Fn(&str) -> bool) -> Stat<String> {
    let reply = zk_four_letter(addr, word).map_err(|e| Unavailable::new(format!("{word} to {addr}: {e}")))?;
    if looks_right(&reply) {
        return Ok(reply);
    }
    Err(Unavailable::new(match reply.trim() {
        "" => format!("{word} to {addr}: the server closed the connection without a reply"),
        said => said.to_string(),
    }))
}

/// The server's version (`srvr`), e.g. `3.8.0`.
pub fn version(addr: SocketAddr) -> Stat<String> {
    let srvr = four_letter(addr, "srvr", |r| r.contains("Zookeeper version: "))?;
    let v = srvr.lines().find_map(|l| l.strip_prefix("Zookeeper version: ")).unwrap_or("unknown");
    let v = v.split(',').next().unwrap_or(v);
    // Debian's build reports "3.8.0-${mvngit.commit.id}".
    Ok(v.split("-$").next().unwrap_or(v).to_string())
}

/// `mntr`'s reply (lines of `zk_<key>\t<value>`), or why there is none.
fn mntr(addr: SocketAddr) -> Stat<String> {
    four_letter(addr, "mntr", |r| r.lines().any(|l| l.starts_with("zk_")))
}

/// The numeric value of `key` in a `mntr` reply.
fn mntr_value(mntr: &str, key: &str) -> Stat<u64> {
    let v = mntr
        .lines()
        .find_map(|l| l.strip_prefix(key).filter(|r| r.starts_with('\t')))
        .ok_or_else(|| Unavailable::new(format!("mntr has no {key}")))?;
    v.trim().parse().map_err(|e| Unavailable::new(format!("mntr's {key} {:?} is not a count: {e}", v.trim())))
}

/// Create + delete of an ephemeral node, on a dedicated client.
pub struct RawZk {
    client: Client,
}

impl RawZk {
    pub fn connect(hosts: &str) -> BenchResult<RawZk> {
        Ok(RawZk { client: client(hosts)? })
    }
}

impl RawLock for RawZk {
    fn lock(&mut self, name: &str) -> BenchResult<bool> {
        let path = format!("{ZK_RAW_DIR}/{name}");
        let opts = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
        match block_on(self.client.create(&path, &[], &opts)) {
            Ok(_) => Ok(true),
            Err(ZkError::NodeExists) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
    fn unlock(&mut self, name: &str) -> BenchResult<()> {
        let path = format!("{ZK_RAW_DIR}/{name}");
        match block_on(self.client.delete(&path, None)) {
            Ok(()) | Err(ZkError::NoNode) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// What a raw sample measures, from one client's delete of the node another client watches.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Sample {
    /// Until the watch fires.
    Notify,
    /// The raw hand-off, what simba's does on ZooKeeper: the watcher then creates the node (its
    /// lock is taken once the create returns). Two durable writes, one after the other.
    Handoff,
}

/// delete on one client → the `exists` watch of another client fires (→ for a hand-off, that
/// client creates the node): the time from the delete, per sample.
pub fn samples(hosts: &str, samples: usize, sample: Sample) -> BenchResult<Vec<Duration>> {
    let writer = client(hosts)?;
    let watcher = client(hosts)?;
    let (prefix, what) = match sample {
        Sample::Notify => ("notify", "watch"),
        Sample::Handoff => ("handoff", "the raw hand-off's watch"),
    };
    let path = format!("{ZK_RAW_DIR}/{prefix}-{:08x}", rand::random::<u32>());
    let opts = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        block_on(writer.create(&path, &[], &opts))?;
        let (_, watch) = block_on(watcher.check_and_watch_stat(&path))?;
        let (tx, rx) = crossbeam_channel::bounded::<Result<std::time::Instant, String>>(1);
        let take = (sample == Sample::Handoff).then(|| (watcher.clone(), path.clone(), opts.clone()));
        let h = std::thread::spawn(move || {
            block_on(watch.changed());
            let r = match take {
                None => Ok(std::time::Instant::now()),
                Some((c, p, o)) => block_on(c.create(&p, &[], &o)).map(|_| std::time::Instant::now()),
            };
            let _ = tx.send(r.map_err(|e| e.to_string()));
        });
        std::thread::sleep(crate::common::release_delay());
        let t0 = std::time::Instant::now();
        block_on(writer.delete(&path, None))?;
        let t1 = rx
            .recv_timeout(Duration::from_secs(5))
            .map_err(|_| err(format!("{what} did not fire")))?
            .map_err(|e| err(format!("the raw hand-off's create failed: {e}")))?;
        let _ = h.join();
        out.push(t1.saturating_duration_since(t0));
        if sample == Sample::Handoff {
            block_on(watcher.delete(&path, None))?;
        }
    }
    Ok(out)
}

/// The server's fsync count and total time in ms (`mntr` zk_cnt_fsynctime, zk_sum_fsynctime)
/// and its longest fsync since it started (zk_max_fsynctime), or why they cannot be read.
pub fn fsync(addr: SocketAddr) -> Stat<Fsyncs> {
    let m = mntr(addr)?;
    Ok((
        mntr_value(&m, "zk_cnt_fsynctime")?,
        mntr_value(&m, "zk_sum_fsynctime")?,
        Some(mntr_value(&m, "zk_max_fsynctime")?),
    ))
}

/// `mntr` zk_packets_received (a four-letter word over its own TCP connection).
pub struct MntrCounter {
    addr: SocketAddr,
}

impl MntrCounter {
    pub fn new(addr: SocketAddr) -> MntrCounter {
        MntrCounter { addr }
    }
}

impl ServerCounter for MntrCounter {
    fn read(&mut self) -> Stat<Reading> {
        let requests = mntr_value(&mntr(self.addr)?, "zk_packets_received")?;
        Ok(Reading { requests, executed: None, server_us: None })
    }
}
