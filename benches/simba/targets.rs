//! The backends under test: how to connect (directly or through the counting proxy), the raw
//! primitive each is compared with, and the server-side statement counters.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use simba::{LeaseBackend, MemoryBackend};

use crate::common::{err, BenchResult};
use crate::Config;

/// A backend kind, as named in `SIMBA_BENCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Memory,
    Redis,
    RedisCluster,
    Postgres,
    Mysql,
    Zookeeper,
}

impl Kind {
    pub const ALL: [Kind; 6] =
        [Kind::Memory, Kind::Redis, Kind::RedisCluster, Kind::Postgres, Kind::Mysql, Kind::Zookeeper];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Redis => "redis",
            Kind::RedisCluster => "redis-cluster",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
            Kind::Zookeeper => "zookeeper",
        }
    }

    pub fn parse(s: &str) -> Option<Kind> {
        Kind::ALL.iter().copied().find(|k| k.name() == s)
    }

    pub fn feature(self) -> &'static str {
        match self {
            Kind::Memory => "(none)",
            Kind::Redis | Kind::RedisCluster => "redis",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
            Kind::Zookeeper => "zookeeper",
        }
    }

    pub fn compiled(self) -> bool {
        match self {
            Kind::Memory => true,
            Kind::Redis | Kind::RedisCluster => cfg!(feature = "redis"),
            Kind::Postgres => cfg!(feature = "postgres"),
            Kind::Mysql => cfg!(feature = "mysql"),
            Kind::Zookeeper => cfg!(feature = "zookeeper"),
        }
    }

    /// True when the backend pushes releases (candidates wake at once instead of polling).
    pub fn pushes(self) -> bool {
        !matches!(self, Kind::Mysql)
    }

    /// True for the SQL backends.
    pub fn is_sql(self) -> bool {
        matches!(self, Kind::Postgres | Kind::Mysql)
    }
}

fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

/// Root of the ZooKeeper backend's nodes in benchmarks.
pub const ZK_ROOT: &str = "/simba-bench";
/// Parent of the raw ZooKeeper lock nodes.
pub const ZK_RAW_DIR: &str = "/simba-bench-raw";
/// Expiry of the raw Redis/SQL locks (they are always released long before).
pub const RAW_TTL_MS: i64 = 15_000;

/// One backend under test.
#[derive(Debug)]
pub struct Target {
    pub kind: Kind,
    /// Connection URL (standalone) or seed nodes (cluster); empty for memory.
    pub url: String,
    pub server_version: String,
}

fn unreachable(kind: Kind, url: &str, e: impl std::fmt::Display) -> crate::common::BenchError {
    err(format!(
        "{} is not reachable at {url}: {e} — run `scripts/services up` (or set the SIMBA_TEST_* URL)",
        kind.name()
    ))
}

impl Target {
    /// Checks the server, creates the tables the benchmark needs, and reads the server version.
    pub fn prepare(kind: Kind, config: &Config) -> BenchResult<Target> {
        let _ = config;
        let url = match kind {
            Kind::Memory => String::new(),
            Kind::Redis => env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379"),
            Kind::RedisCluster => {
                env_or("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002")
            }
            Kind::Postgres => env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"),
            Kind::Mysql => env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
            Kind::Zookeeper => env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test"),
        };
        // The raw PostgreSQL client connects without TLS (`postgres::NoTls`); the library's default
        // `sslmode=prefer` would use TLS against a server with `ssl = on` and pay the encryption
        // the raw lock does not. Unless the URL names a mode, both run on plain TCP.
        let url = if kind == Kind::Postgres && !url.contains("sslmode=") {
            format!("{url}{}sslmode=disable", if url.contains('?') { '&' } else { '?' })
        } else {
            url
        };
        let mut t = Target { kind, url, server_version: String::new() };
        t.server_version = t.init().map_err(|e| unreachable(kind, &t.url, e))?;
        Ok(t)
    }

    fn init(&self) -> BenchResult<String> {
        match self.kind {
            Kind::Memory => Ok("in-process (simba::MemoryBackend)".into()),
            #[cfg(feature = "redis")]
            Kind::Redis | Kind::RedisCluster => redis_impl::init(self),
            #[cfg(feature = "postgres")]
            Kind::Postgres => pg_impl::init(&self.url),
            #[cfg(feature = "mysql")]
            Kind::Mysql => my_impl::init(&self.url),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => zk_impl::init(&self.zk_hosts()?),
            #[allow(unreachable_patterns)]
            k => Err(err(format!("{} is not compiled in", k.name()))),
        }
    }

    /// `host:port` list of the ZooKeeper URL.
    pub fn zk_hosts(&self) -> BenchResult<String> {
        let rest =
            self.url.strip_prefix("zookeeper://").ok_or_else(|| err("ZooKeeper URL must start with zookeeper://"))?;
        Ok(rest.split('/').next().unwrap_or("").to_string())
    }

    /// A new backend instance (memory: a new, empty one; share it within a measurement).
    pub fn backend(&self) -> BenchResult<Arc<dyn LeaseBackend>> {
        self.backend_at(None)
    }

    /// The server address the proxy can stand in for (`None` for memory and Redis Cluster, whose
    /// clients follow redirections to the nodes' own addresses).
    pub fn upstream(&self) -> BenchResult<Option<SocketAddr>> {
        let hostport = match self.kind {
            Kind::Memory | Kind::RedisCluster => return Ok(None),
            Kind::Zookeeper => {
                let hosts = self.zk_hosts()?;
                if hosts.contains(',') {
                    return Ok(None);
                }
                hosts
            }
            _ => {
                let u = url::Url::parse(&self.url)?;
                let host = u.host_str().ok_or_else(|| err("URL without host"))?.to_string();
                let port = u.port().unwrap_or(match self.kind {
                    Kind::Redis => 6379,
                    Kind::Postgres => 5432,
                    _ => 3306,
                });
                format!("{host}:{port}")
            }
        };
        Ok(hostport.to_socket_addrs()?.next())
    }

    /// The URL with its host and port replaced by `addr` (standalone kinds only).
    fn url_at(&self, addr: SocketAddr) -> BenchResult<String> {
        if self.kind == Kind::Zookeeper {
            return Ok(addr.to_string());
        }
        let mut u = url::Url::parse(&self.url)?;
        u.set_host(Some(&addr.ip().to_string()))?;
        u.set_port(Some(addr.port())).map_err(|_| err("cannot set the port of the URL"))?;
        Ok(u.to_string())
    }

    /// A new backend instance, connected to `via` (the proxy) instead of the server when given.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper")),
        allow(unused_variables, unreachable_code)
    )] // memory only
    pub fn backend_at(&self, via: Option<SocketAddr>) -> BenchResult<Arc<dyn LeaseBackend>> {
        let url = match via {
            Some(a) => self.url_at(a)?,
            None => self.url.clone(),
        };
        match self.kind {
            Kind::Memory => Ok(Arc::new(MemoryBackend::new())),
            #[cfg(feature = "redis")]
            Kind::Redis | Kind::RedisCluster => {
                use simba::backends::redis::{RedisBackend, RedisOptions};
                Ok(Arc::new(RedisBackend::connect(&url, RedisOptions::default())?))
            }
            #[cfg(feature = "postgres")]
            Kind::Postgres => {
                use simba::backends::sql::{SqlBackend, SqlOptions};
                Ok(Arc::new(SqlBackend::postgres(&url, SqlOptions::default())?))
            }
            #[cfg(feature = "mysql")]
            Kind::Mysql => {
                use simba::backends::sql::{SqlBackend, SqlOptions};
                Ok(Arc::new(SqlBackend::mysql(&url, SqlOptions::default())?))
            }
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => {
                use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
                let hosts = if via.is_some() { url } else { self.zk_hosts()? };
                Ok(Arc::new(ZookeeperBackend::connect(&hosts, ZookeeperOptions::default().root(ZK_ROOT))?))
            }
            #[allow(unreachable_patterns)]
            k => Err(err(format!("{} is not compiled in", k.name()))),
        }
    }

    /// Redis Cluster: whether the keys of session `sid` and of lease `name` live on the same
    /// master (then an acquire's two scripts go to one connection; else to two, written first and
    /// read after). `None` on every other backend. The keys hash-tag the id and the name, so
    /// `{id}` and `{name}` have their slots.
    #[cfg_attr(not(feature = "redis"), allow(unused_variables))]
    pub fn cluster_same_master(&self, sid: &str, name: &str) -> BenchResult<Option<bool>> {
        match self.kind {
            #[cfg(feature = "redis")]
            Kind::RedisCluster => {
                let [a, b] = redis_impl::masters_of(&self.url, [&format!("{{{sid}}}"), &format!("{{{name}}}")])?;
                Ok(Some(a == b))
            }
            _ => Ok(None),
        }
    }

    /// The raw primitive on the same server (through `via` when given), or `None` for memory.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper")),
        allow(unused_variables, unreachable_code)
    )] // memory only
    pub fn raw(&self, via: Option<SocketAddr>) -> BenchResult<Option<Box<dyn RawLock>>> {
        let url = match via {
            Some(a) => self.url_at(a)?,
            None => self.url.clone(),
        };
        match self.kind {
            Kind::Memory => Ok(None),
            #[cfg(feature = "redis")]
            Kind::Redis => Ok(Some(Box::new(redis_impl::RawRedis::standalone(&url, owner())?))),
            #[cfg(feature = "redis")]
            Kind::RedisCluster => Ok(Some(Box::new(redis_impl::RawRedis::cluster(&url, owner())?))),
            #[cfg(feature = "postgres")]
            Kind::Postgres => Ok(Some(Box::new(pg_impl::RawPg::connect(&url, owner())?))),
            #[cfg(feature = "mysql")]
            Kind::Mysql => Ok(Some(Box::new(my_impl::RawMy::connect(&url, owner())?))),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => {
                let hosts = if via.is_some() { url } else { self.zk_hosts()? };
                Ok(Some(Box::new(zk_impl::RawZk::connect(&hosts)?)))
            }
            #[allow(unreachable_patterns)]
            k => Err(err(format!("{} is not compiled in", k.name()))),
        }
    }

    /// Latencies of the raw notification primitive: Redis `PUBLISH` → a `SUBSCRIBE`d connection
    /// (Cluster: the subscriber on another master than the channel's, so the message crosses the
    /// cluster bus), ZooKeeper `delete` →
    /// an `exists` watch on another client. `None` where there is none (SQL, memory).
    pub fn raw_notify(&self, samples: usize) -> BenchResult<Option<Vec<Duration>>> {
        let _ = samples;
        match self.kind {
            #[cfg(feature = "redis")]
            Kind::Redis | Kind::RedisCluster => redis_impl::notify(self, samples, false).map(Some),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => zk_impl::samples(&self.zk_hosts()?, samples, zk_impl::Sample::Notify).map(Some),
            #[cfg(feature = "postgres")]
            Kind::Postgres => pg_impl::notify(&self.url, samples).map(Some),
            _ => Ok(None),
        }
    }

    /// ZooKeeper: the raw hand-off (delete → another client's watch → its create returns), the
    /// two durable writes simba's hand-off makes. `None` on every other backend.
    pub fn raw_handoff(&self, samples: usize) -> BenchResult<Option<Vec<Duration>>> {
        let _ = samples;
        match self.kind {
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => zk_impl::samples(&self.zk_hosts()?, samples, zk_impl::Sample::Handoff).map(Some),
            _ => Ok(None),
        }
    }

    /// ZooKeeper: the server's (fsync count, total fsync ms, longest fsync ms since it started),
    /// from `mntr`. `None` on every other backend.
    pub fn fsync_stats(&self) -> BenchResult<Option<(u64, u64, u64)>> {
        match self.kind {
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => zk_impl::fsync(self.upstream()?.ok_or_else(|| err("no ZooKeeper address"))?).map(Some),
            _ => Ok(None),
        }
    }

    /// Redis Cluster: the raw sharded notification, as simba's (script `SPUBLISH` → `SSUBSCRIBE`
    /// on the channel's own master: no message crosses the cluster bus). `None` on every other
    /// backend.
    pub fn raw_notify_sharded(&self, samples: usize) -> BenchResult<Option<Vec<Duration>>> {
        let _ = samples;
        match self.kind {
            #[cfg(feature = "redis")]
            Kind::RedisCluster => redis_impl::notify(self, samples, true).map(Some),
            _ => Ok(None),
        }
    }

    /// A server-side statement counter, or `None` where there is no reliable one.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper")),
        allow(unused_variables, unreachable_code)
    )] // memory only
    pub fn counter(&self) -> BenchResult<Option<Box<dyn ServerCounter>>> {
        let c: Box<dyn ServerCounter> = match self.kind {
            Kind::Memory => return Ok(None),
            #[cfg(feature = "redis")]
            Kind::Redis | Kind::RedisCluster => Box::new(redis_impl::InfoCounter::connect(self)?),
            #[cfg(feature = "postgres")]
            Kind::Postgres => Box::new(pg_impl::CommitCounter::connect(&self.url)?),
            #[cfg(feature = "mysql")]
            Kind::Mysql => Box::new(my_impl::QuestionsCounter::connect(&self.url)?),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => {
                Box::new(zk_impl::MntrCounter::new(self.upstream()?.ok_or_else(|| err("no ZooKeeper address"))?))
            }
            #[allow(unreachable_patterns)]
            k => return Err(err(format!("{} is not compiled in", k.name()))),
        };
        Ok(Some(c))
    }

    /// A concurrent client's `PING` latencies while `during` runs (Redis standalone only: the
    /// server is single-threaded, so a long script stalls every other client for its length).
    /// `None` for the other backends.
    pub fn pings_during<R>(&self, during: impl FnOnce() -> BenchResult<R>) -> BenchResult<(R, Option<Vec<Duration>>)> {
        match self.kind {
            #[cfg(feature = "redis")]
            Kind::Redis => redis_impl::pings_during(&self.url, during).map(|(r, p)| (r, Some(p))),
            _ => during().map(|r| (r, None)),
        }
    }

    /// Deletes what the run left behind (SQL lease rows and Redis lease hashes of its names).
    pub fn cleanup(&self, config: &Config) -> BenchResult<()> {
        let pattern = format!("{}%", config.prefix);
        let _ = &pattern;
        match self.kind {
            #[cfg(feature = "redis")]
            Kind::Redis | Kind::RedisCluster => redis_impl::cleanup(self, &config.prefix),
            #[cfg(feature = "postgres")]
            Kind::Postgres => pg_impl::cleanup(&self.url, &pattern),
            #[cfg(feature = "mysql")]
            Kind::Mysql => my_impl::cleanup(&self.url, &pattern),
            _ => Ok(()),
        }
    }
}

/// A random owner value for a raw lock client.
fn owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The raw lock a backend's acquire+release is compared with.
pub trait RawLock: Send {
    /// Takes `name`; false when busy.
    fn lock(&mut self, name: &str) -> BenchResult<bool>;
    /// Frees `name` if this client holds it.
    fn unlock(&mut self, name: &str) -> BenchResult<()>;
}

/// Cumulative server counters (for every client of the server).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Reading {
    /// Requests clients sent: Redis EVAL/EVALSHA + SET calls (`INFO commandstats`; commands run
    /// inside scripts are not requests), MySQL `Questions`, ZooKeeper packets received,
    /// PostgreSQL transactions.
    pub requests: u64,
    /// Redis only: every command executed, including those run inside scripts
    /// (`total_commands_processed`).
    pub executed: Option<u64>,
    /// Redis only: server CPU time spent in the requests (µs, `INFO commandstats` usec; a script's
    /// time includes the commands it runs).
    pub server_us: Option<u64>,
}

impl Reading {
    /// `self - earlier - cost`, saturating.
    pub fn since(self, earlier: Reading, cost: Reading) -> Reading {
        Reading {
            requests: self.requests.saturating_sub(earlier.requests).saturating_sub(cost.requests),
            executed: match (self.executed, earlier.executed) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b).saturating_sub(cost.executed.unwrap_or(0))),
                _ => None,
            },
            server_us: match (self.server_us, earlier.server_us) {
                (Some(a), Some(b)) => Some(a.saturating_sub(b)),
                _ => None,
            },
        }
    }

    /// Field-wise minimum.
    pub fn min(self, other: Reading) -> Reading {
        Reading {
            requests: self.requests.min(other.requests),
            executed: match (self.executed, other.executed) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
            server_us: match (self.server_us, other.server_us) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            },
        }
    }

    /// The largest possible reading (start value of a minimum).
    pub const MAX: Reading = Reading { requests: u64::MAX, executed: None, server_us: None };

    /// `12` or `12 (2008 commands)`, divided by `per`.
    pub fn per(self, per: f64) -> String {
        let r = self.requests as f64 / per;
        let fmt = |v: f64| {
            if v >= 100.0 || (v - v.round()).abs() < 0.005 {
                format!("{v:.0}")
            } else if v >= 10.0 {
                format!("{v:.1}")
            } else {
                format!("{v:.2}")
            }
        };
        match self.executed {
            Some(e) => format!("{} ({} cmds)", fmt(r), fmt(e as f64 / per)),
            None => fmt(r),
        }
    }
}

/// A server-side counter of what clients ask of the server.
pub trait ServerCounter: Send {
    fn read(&mut self) -> BenchResult<Reading>;
}

/// What a counter read itself adds (two reads back to back, minimum of a few tries).
pub fn self_cost(c: &mut dyn ServerCounter) -> BenchResult<Reading> {
    let mut best = Reading::MAX;
    for _ in 0..5 {
        let a = c.read()?;
        let b = c.read()?;
        best = best.min(b.since(a, Reading::default()));
    }
    Ok(best)
}

/// Sends a ZooKeeper four-letter word and returns the reply.
pub fn zk_four_letter(addr: SocketAddr, word: &str) -> BenchResult<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.write_all(word.as_bytes())?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// Redis Cluster hash slot of a key (CRC16/XMODEM of the hash tag or the whole key, mod 16384).
pub fn redis_slot(key: &str) -> u16 {
    let b = key.as_bytes();
    let tagged = b.iter().position(|&c| c == b'{').and_then(|open| {
        b[open + 1..].iter().position(|&c| c == b'}').filter(|&len| len > 0).map(|len| &b[open + 1..open + 1 + len])
    });
    let data = tagged.unwrap_or(b);
    let mut crc: u16 = 0;
    for &byte in data {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 { (crc << 1) ^ 0x1021 } else { crc << 1 };
        }
    }
    crc % 16384
}

#[cfg(feature = "redis")]
mod redis_impl {
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
        let v = info_field(&mut c, "server", "redis_version")?;
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
        fn read(&mut self) -> BenchResult<Reading> {
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
    /// what `during` returned and every `PING`'s round-trip time.
    pub fn pings_during<R>(url: &str, during: impl FnOnce() -> BenchResult<R>) -> BenchResult<(R, Vec<Duration>)> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let mut c = conn(url)?;
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
        let rtts = pinger.join().map_err(|_| err("ping thread panicked"))??;
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
            std::thread::sleep(Duration::from_millis(2) + Duration::from_micros(rand::random_range(0..3_000)));
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
            std::thread::sleep(Duration::from_millis(2) + Duration::from_micros(rand::random_range(0..3_000)));
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
}

#[cfg(feature = "postgres")]
mod pg_impl {
    use super::*;
    use crate::assets::postgres as q;

    fn client(url: &str) -> BenchResult<postgres::Client> {
        let mut cfg: postgres::Config = url.parse()?;
        cfg.connect_timeout(Duration::from_secs(5));
        Ok(cfg.connect(postgres::NoTls)?)
    }

    pub fn init(url: &str) -> BenchResult<String> {
        use simba::backends::sql::{SqlBackend, SqlOptions};
        SqlBackend::postgres(url, SqlOptions::default())?.init_schema()?;
        let mut c = client(url)?;
        c.batch_execute(q::INIT)?;
        let v: String = c.query_one(q::VERSION, &[])?.try_get(0)?;
        Ok(v.split(" on ").next().unwrap_or(&v).to_string())
    }

    /// One upsert to take + one update to free, prepared once, on one connection.
    pub struct RawPg {
        client: postgres::Client,
        lock: postgres::Statement,
        unlock: postgres::Statement,
        owner: String,
    }

    impl RawPg {
        pub fn connect(url: &str, owner: String) -> BenchResult<RawPg> {
            let mut client = client(url)?;
            let lock = client.prepare(q::LOCK)?;
            let unlock = client.prepare(q::UNLOCK)?;
            Ok(RawPg { client, lock, unlock, owner })
        }
    }

    impl RawLock for RawPg {
        fn lock(&mut self, name: &str) -> BenchResult<bool> {
            Ok(self.client.query_opt(&self.lock, &[&name, &self.owner, &RAW_TTL_MS])?.is_some())
        }
        fn unlock(&mut self, name: &str) -> BenchResult<()> {
            self.client.execute(&self.unlock, &[&name, &self.owner])?;
            Ok(())
        }
    }

    /// An autocommit `pg_notify` on one connection → the notification on another that `LISTEN`s,
    /// as simba's release statement and notification thread do.
    pub fn notify(url: &str, samples: usize) -> BenchResult<Vec<Duration>> {
        use postgres::fallible_iterator::FallibleIterator;
        let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(1);
        let (got_tx, got_rx) = crossbeam_channel::unbounded::<std::time::Instant>();
        let listen_url = url.to_string();
        let listener = std::thread::spawn(move || -> BenchResult<()> {
            let mut c = client(&listen_url)?;
            c.batch_execute(q::LISTEN)?;
            let _ = ready_tx.send(());
            let mut got = 0;
            while got < samples {
                if c.notifications().timeout_iter(Duration::from_secs(5)).next()?.is_none() {
                    return Err(err("no notification within 5 s"));
                }
                got += 1;
                let _ = got_tx.send(std::time::Instant::now());
            }
            Ok(())
        });
        ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| err("listener did not start"))?;
        let mut c = client(url)?;
        let notify = c.prepare(q::NOTIFY)?;
        let mut out = Vec::with_capacity(samples);
        for i in 0..samples {
            std::thread::sleep(Duration::from_millis(2) + Duration::from_micros(rand::random_range(0..3_000)));
            let payload = i.to_string();
            let t0 = std::time::Instant::now();
            c.execute(&notify, &[&payload])?;
            let t1 = got_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("notification not delivered"))?;
            out.push(t1.saturating_duration_since(t0));
        }
        listener.join().map_err(|_| err("listener panicked"))??;
        Ok(out)
    }

    /// `pg_stat_database` xact_commit + xact_rollback (flushed by each server process with a delay).
    pub struct CommitCounter {
        client: postgres::Client,
    }

    impl CommitCounter {
        pub fn connect(url: &str) -> BenchResult<CommitCounter> {
            Ok(CommitCounter { client: client(url)? })
        }
    }

    impl ServerCounter for CommitCounter {
        fn read(&mut self) -> BenchResult<Reading> {
            let v: i64 = self.client.query_one(q::COMMITS, &[])?.try_get(0)?;
            Ok(Reading { requests: v.max(0) as u64, executed: None, server_us: None })
        }
    }

    pub fn cleanup(url: &str, pattern: &str) -> BenchResult<()> {
        client(url)?.execute(q::CLEANUP, &[&pattern])?;
        Ok(())
    }
}

#[cfg(feature = "mysql")]
mod my_impl {
    use super::*;
    use crate::assets::mysql as q;
    use mysql::prelude::Queryable;

    fn conn(url: &str) -> BenchResult<mysql::Conn> {
        let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(url)?)
            .prefer_socket(false) // TCP like the backend's pool, never the unix socket
            .tcp_connect_timeout(Some(Duration::from_secs(5)))
            .read_timeout(Some(Duration::from_secs(5)))
            .write_timeout(Some(Duration::from_secs(5)));
        Ok(mysql::Conn::new(opts)?)
    }

    fn first_string(conn: &mut mysql::Conn, sql: &str, col: usize) -> BenchResult<String> {
        let row: mysql::Row = conn.query_first(sql)?.ok_or_else(|| err("no row"))?;
        row.get_opt::<String, usize>(col).ok_or_else(|| err("no such column"))?.map_err(|e| err(e.to_string()))
    }

    pub fn init(url: &str) -> BenchResult<String> {
        use simba::backends::sql::{SqlBackend, SqlOptions};
        SqlBackend::mysql(url, SqlOptions::default())?.init_schema()?;
        let mut c = conn(url)?;
        c.query_drop(q::INIT)?;
        first_string(&mut c, q::VERSION, 0)
    }

    /// One upsert to take + one update to free, prepared once, on one connection.
    pub struct RawMy {
        conn: mysql::Conn,
        lock: mysql::Statement,
        unlock: mysql::Statement,
        owner: String,
    }

    impl RawMy {
        pub fn connect(url: &str, owner: String) -> BenchResult<RawMy> {
            let mut conn = conn(url)?;
            let lock = conn.prep(q::LOCK)?;
            let unlock = conn.prep(q::UNLOCK)?;
            Ok(RawMy { conn, lock, unlock, owner })
        }
    }

    impl RawLock for RawMy {
        fn lock(&mut self, name: &str) -> BenchResult<bool> {
            self.conn.exec_drop(&self.lock, (name, &self.owner, RAW_TTL_MS))?;
            Ok(self.conn.affected_rows() > 0)
        }
        fn unlock(&mut self, name: &str) -> BenchResult<()> {
            self.conn.exec_drop(&self.unlock, (name, &self.owner))?;
            Ok(())
        }
    }

    /// `SHOW GLOBAL STATUS LIKE 'Questions'`.
    pub struct QuestionsCounter {
        conn: mysql::Conn,
    }

    impl QuestionsCounter {
        pub fn connect(url: &str) -> BenchResult<QuestionsCounter> {
            Ok(QuestionsCounter { conn: conn(url)? })
        }
    }

    impl ServerCounter for QuestionsCounter {
        fn read(&mut self) -> BenchResult<Reading> {
            Ok(Reading {
                requests: first_string(&mut self.conn, q::QUESTIONS, 1)?.parse()?,
                executed: None,
                server_us: None,
            })
        }
    }

    pub fn cleanup(url: &str, pattern: &str) -> BenchResult<()> {
        conn(url)?.exec_drop(q::CLEANUP, (pattern,))?;
        Ok(())
    }
}

#[cfg(feature = "zookeeper")]
mod zk_impl {
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
        let srvr = zk_four_letter(addr, "srvr")?;
        let v = srvr.lines().find_map(|l| l.strip_prefix("Zookeeper version: ")).unwrap_or("unknown");
        let v = v.split(',').next().unwrap_or(v);
        // Debian's build reports "3.8.0-${mvngit.commit.id}".
        Ok(format!("ZooKeeper {}", v.split("-$").next().unwrap_or(v)))
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
            std::thread::sleep(Duration::from_millis(2) + Duration::from_micros(rand::random_range(0..3_000)));
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
    /// and its longest fsync since it started (zk_max_fsynctime).
    pub fn fsync(addr: SocketAddr) -> BenchResult<(u64, u64, u64)> {
        let m = zk_four_letter(addr, "mntr")?;
        let get = |key: &str| -> BenchResult<u64> {
            let v = m
                .lines()
                .find_map(|l| l.strip_prefix(key).filter(|r| r.starts_with('\t')))
                .ok_or_else(|| err(format!("mntr has no {key} (is mntr in 4lw.commands.whitelist?)")))?;
            Ok(v.trim().parse()?)
        };
        Ok((get("zk_cnt_fsynctime")?, get("zk_sum_fsynctime")?, get("zk_max_fsynctime")?))
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
        fn read(&mut self) -> BenchResult<Reading> {
            let m = zk_four_letter(self.addr, "mntr")?;
            let v = m
                .lines()
                .find_map(|l| l.strip_prefix("zk_packets_received"))
                .ok_or_else(|| err("mntr has no zk_packets_received (is mntr in 4lw.commands.whitelist?)"))?;
            Ok(Reading { requests: v.trim().parse()?, executed: None, server_us: None })
        }
    }
}
