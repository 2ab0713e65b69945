//! The backends under test: how to connect (directly or through the counting proxy), the raw
//! primitive each is compared with, and the server-side statement counters. Each backend's raw
//! side is in its own file (`redis_impl.rs`, `pg_impl.rs`, `my_impl.rs`, `zk_impl.rs`,
//! `etcd_impl.rs`).
//!
//! The server's side stats (statement counters, ZooKeeper's fsyncs, the server version) are
//! [`Stat`]s: one the server will not give (a four-letter word left out of ZooKeeper's
//! `4lw.commands.whitelist`, a user without the right to `INFO`, ...) is shown as
//! `unavailable: <reason>` where its number would be, and the measurement beside it goes on.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use simba::backend::LeaseBackend;
use simba::MemoryBackend;

use crate::common::{err, BenchResult};
use crate::Config;

/// Why a side stat of the server could not be read, as one line: the server's own words where it
/// gave any (`mntr is not executed because it is not in the whitelist.`), else the client's error.
/// Displayed as `unavailable: <reason>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unavailable(pub String);

impl Unavailable {
    /// The reason on one line, without the table's cell separators.
    pub fn new(reason: impl std::fmt::Display) -> Unavailable {
        let text = reason.to_string();
        Unavailable(text.split_whitespace().collect::<Vec<_>>().join(" ").replace('|', "/"))
    }
}

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unavailable: {}", self.0)
    }
}

impl std::error::Error for Unavailable {}

/// A side stat of the server: its value, or why the server would not give it. Never a reason to
/// fail the measurement it sits beside.
pub type Stat<T> = Result<T, Unavailable>;

/// The server's fsyncs (ZooKeeper's `mntr`, etcd's `/metrics`): count, total ms, and the longest
/// ms since the server started where the server reports it (ZooKeeper; etcd keeps a histogram).
pub type Fsyncs = (u64, u64, Option<u64>);

/// A backend kind, as named in `SIMBA_BENCH`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Memory,
    Redis,
    RedisCluster,
    Postgres,
    Mysql,
    Zookeeper,
    Etcd,
}

impl Kind {
    pub const ALL: [Kind; 7] =
        [Kind::Memory, Kind::Redis, Kind::RedisCluster, Kind::Postgres, Kind::Mysql, Kind::Zookeeper, Kind::Etcd];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Memory => "memory",
            Kind::Redis => "redis",
            Kind::RedisCluster => "redis-cluster",
            Kind::Postgres => "postgres",
            Kind::Mysql => "mysql",
            Kind::Zookeeper => "zookeeper",
            Kind::Etcd => "etcd",
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
            Kind::Etcd => "etcd",
        }
    }

    pub fn compiled(self) -> bool {
        match self {
            Kind::Memory => true,
            Kind::Redis | Kind::RedisCluster => cfg!(feature = "redis"),
            Kind::Postgres => cfg!(feature = "postgres"),
            Kind::Mysql => cfg!(feature = "mysql"),
            Kind::Zookeeper => cfg!(feature = "zookeeper"),
            Kind::Etcd => cfg!(feature = "etcd"),
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

/// Key prefix of the etcd backend in benchmarks.
pub const ETCD_PREFIX: &str = "simba-bench";
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
            Kind::Etcd => env_or("SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379"),
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
            #[cfg(feature = "etcd")]
            Kind::Etcd => etcd_impl::init(&self.url),
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
            #[cfg(feature = "etcd")]
            Kind::Etcd => {
                if self.url.contains(',') {
                    return Ok(None);
                }
                etcd_impl::first_member(&self.url)?
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
        not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper", feature = "etcd")),
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
            #[cfg(feature = "etcd")]
            Kind::Etcd => {
                use simba::backends::etcd::{EtcdBackend, EtcdOptions};
                Ok(Arc::new(EtcdBackend::from_url(&url, EtcdOptions::default().prefix(ETCD_PREFIX))?))
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
        not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper", feature = "etcd")),
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
            #[cfg(feature = "etcd")]
            Kind::Etcd => Ok(Some(Box::new(etcd_impl::RawEtcd::connect(&etcd_impl::first_member(&url)?)?))),
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
            #[cfg(feature = "etcd")]
            Kind::Etcd => etcd_impl::samples(&self.url, samples, etcd_impl::Sample::Notify).map(Some),
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

    /// Raw hand-off samplers that section 2 interleaves with simba's samples, one of each in
    /// turn, so that all see the same moments of the machine (a p99 is a handful of samples, and
    /// a burst of noise during one series alone decides it): etcd's plain raw hand-off and the
    /// same with each client's keys attached to an etcd lease of its own, as simba's are. None
    /// elsewhere.
    pub fn raw_interleaved(&self) -> BenchResult<Vec<(&'static str, Box<dyn RawSampler>)>> {
        match self.kind {
            #[cfg(feature = "etcd")]
            Kind::Etcd => Ok(vec![
                (
                    "raw hand-off (`delete` → watch → the other client's put-if-absent returns)",
                    Box::new(etcd_impl::Sampler::open(&self.url, etcd_impl::Sample::Handoff)?) as Box<dyn RawSampler>,
                ),
                (
                    "the same with keys attached to each client's lease",
                    Box::new(etcd_impl::Sampler::open(&self.url, etcd_impl::Sample::LeasedHandoff)?),
                ),
            ]),
            _ => Ok(Vec::new()),
        }
    }

    /// ZooKeeper: the server's (fsync count, total fsync ms, longest fsync ms since it started),
    /// from `mntr`, or why it cannot be read. `None` on every other backend.
    pub fn fsync_stats(&self) -> Option<Stat<Fsyncs>> {
        match self.kind {
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => Some(self.four_letter_addr().and_then(zk_impl::fsync)),
            #[cfg(feature = "etcd")]
            Kind::Etcd => Some(self.four_letter_addr().and_then(etcd_impl::fsync)),
            _ => None,
        }
    }

    /// ZooKeeper, etcd: the one server the side stats are read from (four-letter words, `/metrics`;
    /// a URL of several members has none).
    fn four_letter_addr(&self) -> Stat<SocketAddr> {
        self.upstream()
            .map_err(Unavailable::new)?
            .ok_or_else(|| Unavailable::new(format!("no single server to ask in {}", self.url)))
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

    /// The server-side statement counter as a side stat (connected, its own cost measured): none
    /// where there is no reliable one (memory), unavailable where the server will not give it.
    #[cfg_attr(
        not(any(feature = "redis", feature = "postgres", feature = "mysql", feature = "zookeeper", feature = "etcd")),
        allow(unused_variables, unreachable_code)
    )] // memory only
    pub fn counter(&self) -> SideCounter {
        let c: Stat<Box<dyn ServerCounter>> = match self.kind {
            Kind::Memory => return SideCounter::none(),
            #[cfg(feature = "redis")]
            Kind::Redis | Kind::RedisCluster => redis_impl::InfoCounter::connect(self)
                .map(|c| Box::new(c) as Box<dyn ServerCounter>)
                .map_err(|e| Unavailable::new(format!("INFO commandstats: {e}"))),
            #[cfg(feature = "postgres")]
            Kind::Postgres => pg_impl::CommitCounter::connect(&self.url)
                .map(|c| Box::new(c) as Box<dyn ServerCounter>)
                .map_err(|e| Unavailable::new(format!("pg_stat_database: {e}"))),
            #[cfg(feature = "mysql")]
            Kind::Mysql => my_impl::QuestionsCounter::connect(&self.url)
                .map(|c| Box::new(c) as Box<dyn ServerCounter>)
                .map_err(|e| Unavailable::new(format!("SHOW GLOBAL STATUS: {e}"))),
            #[cfg(feature = "zookeeper")]
            Kind::Zookeeper => {
                self.four_letter_addr().map(|a| Box::new(zk_impl::MntrCounter::new(a)) as Box<dyn ServerCounter>)
            }
            #[cfg(feature = "etcd")]
            Kind::Etcd => {
                self.four_letter_addr().map(|a| Box::new(etcd_impl::MetricsCounter::new(a)) as Box<dyn ServerCounter>)
            }
            #[allow(unreachable_patterns)]
            k => Err(Unavailable::new(format!("{} is not compiled in", k.name()))),
        };
        SideCounter::new(c)
    }

    /// A concurrent client's `PING` latencies while `during` runs (Redis standalone only: the
    /// server is single-threaded, so a long script stalls every other client for its length), or
    /// why there are none (the side client failed; `during` ran all the same). `None` for the
    /// other backends.
    #[allow(clippy::type_complexity)]
    pub fn pings_during<R>(
        &self,
        during: impl FnOnce() -> BenchResult<R>,
    ) -> BenchResult<(R, Option<Stat<Vec<Duration>>>)> {
        match self.kind {
            #[cfg(feature = "redis")]
            Kind::Redis => redis_impl::pings_during(&self.url, during).map(|(r, p)| (r, Some(p))),
            _ => during().map(|r| (r, None)),
        }
    }

    /// Deletes what the run left behind (SQL lease rows and Redis lease hashes of its names, and
    /// those of its partition sets' partitions, `simba.part:<prefix>…`).
    pub fn cleanup(&self, config: &Config) -> BenchResult<()> {
        for prefix in [config.prefix.clone(), format!("{}{}", simba::PARTITION_NAME_PREFIX, config.prefix)] {
            let pattern = format!("{prefix}%");
            let _ = &pattern;
            match self.kind {
                #[cfg(feature = "redis")]
                Kind::Redis | Kind::RedisCluster => redis_impl::cleanup(self, &prefix)?,
                #[cfg(feature = "postgres")]
                Kind::Postgres => pg_impl::cleanup(&self.url, &pattern)?,
                #[cfg(feature = "mysql")]
                Kind::Mysql => my_impl::cleanup(&self.url, &pattern)?,
                #[cfg(feature = "etcd")]
                Kind::Etcd => etcd_impl::cleanup(&self.url)?,
                _ => {}
            }
        }
        Ok(())
    }
}

/// A random owner value for a raw lock client.
fn owner() -> String {
    format!("{:032x}", rand::random::<u128>())
}

/// The raw lock a backend's acquire+release is compared with.
/// One raw sample at a time (section 2's interleaved raw hand-offs).
pub trait RawSampler {
    /// One sample.
    fn next(&mut self) -> BenchResult<Duration>;
    /// Ends the sampler, freeing what it holds on the server.
    fn close(self: Box<Self>) -> BenchResult<()>;
}

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
    fn read(&mut self) -> Stat<Reading>;
}

/// What a counter read itself adds (two reads back to back, minimum of a few tries).
pub fn self_cost(c: &mut dyn ServerCounter) -> Stat<Reading> {
    let mut best = Reading::MAX;
    for _ in 0..5 {
        let a = c.read()?;
        let b = c.read()?;
        best = best.min(b.since(a, Reading::default()));
    }
    Ok(best)
}

/// A server counter read beside a measurement: connected and its own cost measured once; the
/// first connect or read that fails turns it off and keeps why (then its cells say
/// `unavailable: <reason>`), so the measurement goes on without it.
pub struct SideCounter {
    counter: Option<Box<dyn ServerCounter>>,
    cost: Reading,
    unavailable: Option<Unavailable>,
}

impl SideCounter {
    /// The backend has no counter (its cells say what the caller says then, e.g. "—").
    pub fn none() -> SideCounter {
        SideCounter { counter: None, cost: Reading::default(), unavailable: None }
    }

    fn new(counter: Stat<Box<dyn ServerCounter>>) -> SideCounter {
        let mut side = SideCounter::none();
        match counter.and_then(|mut c| self_cost(&mut *c).map(|cost| (c, cost))) {
            Ok((c, cost)) => {
                side.counter = Some(c);
                side.cost = cost;
            }
            Err(u) => side.unavailable = Some(u),
        }
        side
    }

    /// True when the backend has a counter (readable or not).
    pub fn exists(&self) -> bool {
        self.counter.is_some() || self.unavailable.is_some()
    }

    /// True while the counter can be read.
    pub fn live(&self) -> bool {
        self.counter.is_some()
    }

    /// The counter now; `None` when there is none or it became unavailable.
    pub fn read(&mut self) -> Option<Reading> {
        match self.counter.as_mut()?.read() {
            Ok(r) => Some(r),
            Err(u) => {
                self.counter = None;
                self.unavailable = Some(u);
                None
            }
        }
    }

    /// What was counted since `earlier` (a [`SideCounter::read`]), less the counter's own reads.
    pub fn since(&mut self, earlier: Option<Reading>) -> Option<Reading> {
        let earlier = earlier?;
        let cost = self.cost;
        self.read().map(|now| now.since(earlier, cost))
    }

    /// Why the counter cannot be read, once it could not.
    pub fn unavailable(&self) -> Option<&Unavailable> {
        self.unavailable.as_ref()
    }

    /// A cell: `value` when there is one, else `unavailable: <reason>`, else `none`.
    pub fn cell(&self, value: Option<String>, none: &str) -> String {
        value.or_else(|| self.unavailable.as_ref().map(|u| u.to_string())).unwrap_or_else(|| none.to_string())
    }
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
mod redis_impl;

#[cfg(feature = "postgres")]
mod pg_impl;

#[cfg(feature = "mysql")]
mod my_impl;

#[cfg(feature = "zookeeper")]
pub mod zk_impl;

#[cfg(feature = "etcd")]
pub mod etcd_impl;
