//! Redis (standalone and Cluster) for the benchmark: the raw lock (`SET NX PX` + a compare-and-delete
//! script), the raw notification (`PUBLISH`, or on Cluster `SPUBLISH`, → a subscribed connection),
//! the masters and their slots, the server's command counter (`INFO stats`), `PING`s during a
//! measure, the version and the clean-up.

use super::*;
use crate::assets::{REDIS_PUBLISH, REDIS_SPUBLISH, REDIS_UNLOCK};
use redis::ConnectionLike;

pub fn nodes(url: &str) -> Vec<String> {
    url.trim_start_matches("redis+cluster://").split(',').map(|n| format!("redis://{n}")).collect()
}

fn conn(url: &str) -> BenchResult<redis::Connection> {
    let c = redis::Client::open(url)?.get_connection_with_timeout(Duration::from_secs(5))?;
    c.set_read_timeout(Some(Duration::from_secs(5)))?;
    c.set_write_timeout(Some(Duration::from_secs(5)))?;
    Ok(c)
}

fn info_field(conn: &mut redis::Connection, section: &str, field: &str) -> BenchResult<String> {
    let info: String = redis::cmd("INFO").arg(section).query(conn)?;
    info.lines()
        .find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')))
        .map(|v| v.trim().to_string())
        .ok_or_else(|| err(format!("INFO {section} has no {field}")))
}

/// A master's address (`redis://ip:port`) and the slot ranges (inclusive) it serves.
type Master = (String, Vec<(u16, u16)>);

/// The cluster's live masters as `CLUSTER NODES` lists them.
fn master_table(c: &mut redis::Connection) -> BenchResult<Vec<Master>> {
    let text: String = redis::cmd("CLUSTER").arg("NODES").query(c)?;
    let mut out = Vec::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() > 2 && f[2].split(',').any(|x| x == "master") && !f[2].contains("fail") {
            let addr = f[1].split('@').next().unwrap_or("");
            // `lo-hi` or a single slot; a migrating/importing entry `[…]` serves nothing yet.
            let ranges = f.iter().skip(8).filter_map(|r| {
                let (lo, hi) = r.split_once('-').unwrap_or((r, r));
                Some((lo.parse().ok()?, hi.parse().ok()?))
            });
            out.push((format!("redis://{addr}"), ranges.collect()));
        }
    }
    if out.is_empty() {
        return Err(err("CLUSTER NODES lists no master"));
    }
    Ok(out)
}

/// Addresses (`redis://ip:port`) of the cluster's masters.
pub fn masters(url: &str) -> BenchResult<Vec<String>> {
    let seed = nodes(url).into_iter().next().ok_or_else(|| err("no cluster node"))?;
    Ok(master_table(&mut conn(&seed)?)?.into_iter().map(|(addr, _)| addr).collect())
}

/// The addresses (`redis://ip:port`) of the masters serving each of `keys`' slots, read over
/// one connection.
pub fn masters_of<const N: usize>(url: &str, keys: [&str; N]) -> BenchResult<[String; N]> {
    let seed = nodes(url).into_iter().next().ok_or_else(|| err("no cluster node"))?;
    let mut c = conn(&seed)?;
    let table = master_table(&mut c)?;
    let mut out = [const { String::new() }; N];
    for (key, addr) in keys.iter().zip(out.iter_mut()) {
        let slot: u16 = redis::cmd("CLUSTER").arg("KEYSLOT").arg(*key).query(&mut c)?;
        let (a, _) = table
            .iter()
            .find(|(_, ranges)| ranges.iter().any(|(lo, hi)| (*lo..=*hi).contains(&slot)))
            .ok_or_else(|| err(format!("CLUSTER NODES names no master for slot {slot}")))?;
        addr.clone_from(a);
    }
    Ok(out)
}

pub fn init(t: &Target) -> BenchResult<String> {
    let first = if t.kind == Kind::RedisCluster {
        masters(&t.url)?.into_iter().next().ok_or_else(|| err("no master"))?
    } else {
        t.url.clone()
    };
    let mut c = conn(&first)?;
    // The version is a side stat: a user without the right to `INFO` still benchmarks.
    let v = match info_field(&mut c, "server", "redis_version") {
        Ok(v) => v,
        Err(e) => format!("(version {})", Unavailable::new(e)),
    };
    Ok(if t.kind == Kind::RedisCluster {
        format!("Redis {v} (cluster, {} masters)", masters(&t.url)?.len())
    } else {
        format!("Redis {v}")
    })
}

enum Conn {
    One(redis::Connection),
    Cluster(Box<redis::cluster::ClusterConnection>),
}

impl Conn {
    fn get(&mut self) -> &mut dyn ConnectionLike {
        match self {
            Conn::One(c) => c,
            Conn::Cluster(c) => &mut **c,
        }
    }
}

/// `SET key owner NX PX ttl` + compare-and-delete script (by SHA).
pub struct RawRedis {
    conn: Conn,
    unlock: redis::Script,
    owner: String,
}

fn key(name: &str) -> String {
    format!("simba-bench:raw:{{{name}}}")
}

impl RawRedis {
    pub fn standalone(url: &str, owner: String) -> BenchResult<RawRedis> {
        Ok(RawRedis { conn: Conn::One(conn(url)?), unlock: redis::Script::new(REDIS_UNLOCK), owner })
    }

    pub fn cluster(url: &str, owner: String) -> BenchResult<RawRedis> {
        let client = redis::cluster::ClusterClient::builder(nodes(url))
            .connection_timeout(Duration::from_secs(5))
            .response_timeout(Duration::from_secs(5))
            .build()?;
        Ok(RawRedis {
            conn: Conn::Cluster(Box::new(client.get_connection()?)),
            unlock: redis::Script::new(REDIS_UNLOCK),
            owner,
        })
    }
}

impl RawLock for RawRedis {
    fn lock(&mut self, name: &str) -> BenchResult<bool> {
        let r: Option<String> = redis::cmd("SET")
            .arg(key(name))
            .arg(&self.owner)
            .arg("NX")
            .arg("PX")
            .arg(RAW_TTL_MS)
            .query(self.conn.get())?;
        Ok(r.is_some())
    }

    fn unlock(&mut self, name: &str) -> BenchResult<()> {
        let _: i64 = self.unlock.key(key(name)).arg(&self.owner).invoke(self.conn.get())?;
        Ok(())
    }
}

/// `INFO stats` total_commands_processed, summed over the masters on Cluster.
pub struct InfoCounter {
    conns: Vec<redis::Connection>,
}

impl InfoCounter {
    pub fn connect(t: &Target) -> BenchResult<InfoCounter> {
        let urls = if t.kind == Kind::RedisCluster { masters(&t.url)? } else { vec![t.url.clone()] };
        let conns = urls.iter().map(|u| conn(u)).collect::<BenchResult<Vec<_>>>()?;
        Ok(InfoCounter { conns })
    }
}

/// Calls of the commands clients send directly (scripts and the raw lock's `SET`).
const REQUESTS: [&str; 6] = ["eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "set"];

impl ServerCounter for InfoCounter {
    fn read(&mut self) -> Stat<Reading> {
        self.read_info().map_err(|e| Unavailable::new(format!("INFO commandstats: {e}")))
    }
}

impl InfoCounter {
    fn read_info(&mut self) -> BenchResult<Reading> {
        let mut r = Reading { requests: 0, executed: Some(0), server_us: Some(0) };
        for c in &mut self.conns {
            let info: String = redis::cmd("INFO").arg("stats").arg("commandstats").query(c)?;
            for line in info.lines() {
                if let Some(v) = line.strip_prefix("total_commands_processed:") {
                    r.executed = Some(r.executed.unwrap_or(0) + v.trim().parse::<u64>()?);
                } else if let Some((cmd, rest)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) {
                    if REQUESTS.contains(&cmd) {
                        let calls = rest
                            .split(',')
                            .find_map(|kv| kv.strip_prefix("calls="))
                            .ok_or_else(|| err("commandstats without calls="))?;
                        r.requests += calls.parse::<u64>()?;
                        let usec = rest
                            .split(',')
                            .find_map(|kv| kv.strip_prefix("usec="))
                            .ok_or_else(|| err("commandstats without usec="))?;
                        r.server_us = Some(r.server_us.unwrap_or(0) + usec.parse::<u64>()?);
                    }
                }
            }
        }
        Ok(r)
    }
}

/// Runs `during` while another thread sends `PING` after `PING` on its own connection; returns
/// what `during` returned and every `PING`'s round-trip time, or why the pinging client failed
/// (then `during` runs all the same).
pub fn pings_during<R>(url: &str, during: impl FnOnce() -> BenchResult<R>) -> BenchResult<(R, Stat<Vec<Duration>>)> {
    use std::sync::atomic::{AtomicBool, Ordering};
    let mut c = match conn(url) {
        Ok(c) => c,
        Err(e) => return during().map(|r| (r, Err(Unavailable::new(format!("PING client: {e}"))))),
    };
    let stop = std::sync::Arc::new(AtomicBool::new(false));
    let (started_tx, started_rx) = crossbeam_channel::bounded::<()>(1);
    let pinger = {
        let stop = stop.clone();
        std::thread::spawn(move || -> BenchResult<Vec<Duration>> {
            let mut rtts = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let t0 = std::time::Instant::now();
                let _: String = redis::cmd("PING").query(&mut c)?;
                rtts.push(t0.elapsed());
                let _ = started_tx.try_send(());
            }
            Ok(rtts)
        })
    };
    // `during` starts once the pinger is in its loop.
    let _ = started_rx.recv_timeout(Duration::from_secs(5));
    let r = during();
    stop.store(true, Ordering::Relaxed);
    let rtts = match pinger.join() {
        Ok(Ok(rtts)) => Ok(rtts),
        Ok(Err(e)) => Err(Unavailable::new(format!("PING: {e}"))),
        Err(_) => Err(Unavailable::new("the PING thread panicked")),
    };
    Ok((r?, rtts))
}

/// A script that PUBLISHes on a channel named like a lease's (`simba-bench:notify:{…}`, so
/// its hash slot picks the node on Cluster) → the message on a connection PSUBSCRIBEd on the
/// first node, as simba's release script and pub/sub thread do.
///
/// On Cluster, `sharded` picks what simba does since issue #19: a script `SPUBLISH` on the
/// channel → a connection `SSUBSCRIBE`d on the channel's own master ([`spublish_notify`]);
/// otherwise the classic `PUBLISH` with the subscriber on another master (so every message
/// crosses the cluster bus).
pub fn notify(t: &Target, samples: usize, sharded: bool) -> BenchResult<Vec<Duration>> {
    let channel = format!("simba-bench:notify:{{{:08x}}}", rand::random::<u32>());
    let sub_url = if t.kind == Kind::RedisCluster {
        let [home] = masters_of(&t.url, [&channel])?;
        if sharded {
            return spublish_notify(t, &home, &channel, samples);
        }
        let mut all = masters(&t.url)?;
        all.retain(|m| *m != home);
        all.into_iter().next().ok_or_else(|| err("the cluster has one master: no bus to cross"))?
    } else {
        t.url.clone()
    };
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(1);
    let (got_tx, got_rx) = crossbeam_channel::unbounded::<std::time::Instant>();
    let sub = std::thread::spawn(move || -> BenchResult<()> {
        let mut c = conn(&sub_url)?;
        let mut ps = c.as_pubsub();
        ps.psubscribe("simba-bench:notify:*")?;
        ps.set_read_timeout(Some(Duration::from_secs(5)))?;
        let _ = ready_tx.send(());
        for _ in 0..samples {
            let _ = ps.get_message()?;
            let _ = got_tx.send(std::time::Instant::now());
        }
        Ok(())
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("subscriber did not start"))?;
    let mut publisher = if t.kind == Kind::RedisCluster {
        let client = redis::cluster::ClusterClient::builder(nodes(&t.url)).build()?;
        Conn::Cluster(Box::new(client.get_connection()?))
    } else {
        Conn::One(conn(&t.url)?)
    };
    let script = redis::Script::new(REDIS_PUBLISH);
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        std::thread::sleep(crate::common::release_delay());
        let t0 = std::time::Instant::now();
        let _: i64 = script.key(&channel).arg("released").invoke(publisher.get())?;
        let t1 = got_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("message not delivered"))?;
        out.push(t1.saturating_duration_since(t0));
    }
    sub.join().map_err(|_| err("subscriber panicked"))??;
    Ok(out)
}

/// Cluster: a script `SPUBLISH` on `channel` → a connection `SSUBSCRIBE`d to it on `home`, the
/// channel's own master (RESP2: the confirmation and the messages are plain replies, read one
/// by one; no read times out here, so the driver never skips one).
fn spublish_notify(t: &Target, home: &str, channel: &str, samples: usize) -> BenchResult<Vec<Duration>> {
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(1);
    let (got_tx, got_rx) = crossbeam_channel::unbounded::<std::time::Instant>();
    let (sub_url, sub_channel) = (home.to_string(), channel.to_string());
    let sub = std::thread::spawn(move || -> BenchResult<()> {
        let mut c = conn(&sub_url)?;
        let _: redis::Value = redis::cmd("SSUBSCRIBE").arg(&sub_channel).query(&mut c)?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        let _ = ready_tx.send(());
        let mut got = 0;
        while got < samples {
            let kind: Option<String> = match c.recv_response()? {
                redis::Value::Array(items) => items.first().and_then(|k| redis::from_redis_value(k.clone()).ok()),
                _ => None,
            };
            if kind.as_deref() == Some("smessage") {
                got += 1;
                let _ = got_tx.send(std::time::Instant::now());
            }
        }
        Ok(())
    });
    ready_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("sharded subscriber did not start"))?;
    let client = redis::cluster::ClusterClient::builder(nodes(&t.url)).build()?;
    let mut publisher = Conn::Cluster(Box::new(client.get_connection()?));
    let script = redis::Script::new(REDIS_SPUBLISH);
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        std::thread::sleep(crate::common::release_delay());
        let t0 = std::time::Instant::now();
        let _: i64 = script.key(channel).arg("released").invoke(publisher.get())?;
        let t1 = got_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("shard message not delivered"))?;
        out.push(t1.saturating_duration_since(t0));
    }
    sub.join().map_err(|_| err("sharded subscriber panicked"))??;
    Ok(out)
}

/// Deletes the lease hashes of the run's names (`simba:lease:{<prefix>…}`) on every master.
pub fn cleanup(t: &Target, prefix: &str) -> BenchResult<()> {
    let urls = if t.kind == Kind::RedisCluster { masters(&t.url)? } else { vec![t.url.clone()] };
    let pattern = format!("simba:lease:{{{prefix}*");
    for u in urls {
        let mut c = conn(&u)?;
        let keys: Vec<String> = c.scan_match::<_, String>(&pattern)?.collect::<Result<_, _>>()?;
        for chunk in keys.chunks(500) {
            // One key per DEL: on Cluster the keys of a chunk live in different slots.
            for k in chunk {
                let _: i64 = redis::cmd("DEL").arg(k).query(&mut c)?;
            }
        }
    }
    Ok(())
}
use redis::Commands as _;
