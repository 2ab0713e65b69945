//! The scripting port: the only place that talks to the Redis driver. [`StandaloneScripting`]
//! runs scripts on one server through a small connection pool; [`ClusteredScripting`] routes every
//! call to the master of one hash slot. The backend logic in [`super::RedisBackend`] is written
//! against the [`RedisScripting`] trait, so a custom adapter (or a fault-injecting wrapper in
//! tests) slots in with [`super::RedisBackend::with_scripting`].

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use redis::cluster::{ClusterClient, ClusterClientBuilder, ClusterConnection};
use redis::cluster_routing::{MultipleNodeRoutingInfo, Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};
use redis::{Client, Cmd, Connection, ConnectionInfo, ConnectionLike, IntoConnectionInfo, RedisError, Value};

use super::pool::Pool;
use super::scripts::{LuaScript, SCRIPTS};
use crate::error::{Error, ErrorKind, Result};

/// How the Redis backend runs its Lua scripts and the few plain commands it needs.
///
/// Every call is bounded by `deadline`. On Redis Cluster every key of one call hashes to one slot
/// and the call runs on that slot's master.
pub trait RedisScripting: Send + Sync + fmt::Debug + 'static {
    /// `true` on Redis Cluster: the backend then splits each operation into one call per slot.
    fn is_clustered(&self) -> bool;

    /// Runs `script` (`EVALSHA`, loading it on `NOSCRIPT`) with `keys` and `args`, on the server
    /// (Cluster: on the master of the slot of `keys[0]`).
    ///
    /// # Errors
    /// `Unavailable` for transport failures, timeouts and transient server states (loading,
    /// failover, `OOM`); `Backend` for script errors and anything else.
    fn eval(&self, script: &LuaScript, keys: &[String], args: &[String], deadline: Instant) -> Result<Value>;

    /// Runs `script` like [`eval`](RedisScripting::eval), then `WAIT replicas` on the same
    /// connection, with a WAIT timeout ending at `deadline`. Returns the script's reply and how
    /// many replicas acknowledged.
    ///
    /// # Errors
    /// As [`eval`](RedisScripting::eval); `Unsupported` where `WAIT` is not available (Cluster).
    fn eval_and_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        replicas: u32,
        deadline: Instant,
    ) -> Result<(Value, u32)> {
        let _ = (script, keys, args, replicas, deadline);
        Err(Error::new(ErrorKind::Unsupported, "WAIT is not available on this Redis deployment"))
    }

    /// Runs a plain command (`PING`, `CONFIG GET`, `INFO`, `TIME`) on every master; returns each
    /// master's address and reply.
    ///
    /// # Errors
    /// As [`eval`](RedisScripting::eval).
    fn on_masters(&self, cmd: &Cmd, deadline: Instant) -> Result<Vec<(String, Value)>>;

    /// Servers a pub/sub connection may subscribe on, in order of preference (on Cluster any node
    /// works: `PUBLISH` reaches every node).
    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo>;

    /// The target without secrets, for logs and errors (e.g. `redis://127.0.0.1:6379`).
    fn target(&self) -> String;
}

/// True when the connection that produced `e` must not be reused: a late reply could still be in
/// flight, or the socket is broken.
pub(crate) fn must_discard(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.kind() == redis::ErrorKind::Parse
}

/// Maps a driver error to the crate's error, keeping it as the source.
pub(crate) fn map_err(e: RedisError, context: impl fmt::Display) -> Error {
    use redis::ServerErrorKind as S;
    let transient = match e.kind() {
        redis::ErrorKind::Io | redis::ErrorKind::ClusterConnectionNotFound | redis::ErrorKind::Parse => true,
        redis::ErrorKind::Server(
            S::BusyLoading | S::TryAgain | S::ClusterDown | S::MasterDown | S::ReadOnly | S::Moved | S::Ask,
        ) => true,
        _ => {
            e.is_timeout()
                || e.is_connection_dropped()
                || e.is_connection_refusal()
                || matches!(e.code(), Some("OOM" | "BUSY" | "NOREPLICAS" | "MISCONF"))
        }
    };
    let detail = if e.is_timeout() { "timed out".to_string() } else { e.to_string() };
    let kind = if transient { ErrorKind::Unavailable } else { ErrorKind::Backend };
    Error::new(kind, format!("{context}: {detail}")).with_source(e)
}

/// Redacts the password of a URL-shaped string.
pub(crate) fn redact(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("***"));
            u.to_string()
        }
        Ok(_) => url.to_string(),
        Err(_) => match url.rfind('@') {
            Some(at) => format!("***@{}", &url[at + 1..]),
            None => url.to_string(),
        },
    }
}

fn left(deadline: Instant, what: &str) -> Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left < Duration::from_millis(1) {
        Err(Error::unavailable(format!("{what}: query timeout reached before the call was sent")))
    } else {
        Ok(left)
    }
}

fn invocation<'a>(script: &'a LuaScript, keys: &[String], args: &[String]) -> redis::ScriptInvocation<'a> {
    let mut inv = script.script().prepare_invoke();
    for k in keys {
        inv.key(k);
    }
    for a in args {
        inv.arg(a);
    }
    inv
}

fn set_timeouts(con: &impl ConnectionLikeTimeouts, t: Duration) -> redis::RedisResult<()> {
    con.read_timeout(Some(t))?;
    con.write_timeout(Some(t))
}

/// Read/write timeouts of both connection kinds.
trait ConnectionLikeTimeouts {
    fn read_timeout(&self, t: Option<Duration>) -> redis::RedisResult<()>;
    fn write_timeout(&self, t: Option<Duration>) -> redis::RedisResult<()>;
}

impl ConnectionLikeTimeouts for Connection {
    fn read_timeout(&self, t: Option<Duration>) -> redis::RedisResult<()> {
        self.set_read_timeout(t)
    }
    fn write_timeout(&self, t: Option<Duration>) -> redis::RedisResult<()> {
        self.set_write_timeout(t)
    }
}

impl ConnectionLikeTimeouts for ClusterConnection {
    fn read_timeout(&self, t: Option<Duration>) -> redis::RedisResult<()> {
        self.set_read_timeout(t)
    }
    fn write_timeout(&self, t: Option<Duration>) -> redis::RedisResult<()> {
        self.set_write_timeout(t)
    }
}

/// The most replies redis-rs reads while setting a connection up (`HELLO`/`AUTH`, `SELECT`, two
/// `CLIENT SETINFO`). It applies its connect timeout to the TCP connect and then again to each of
/// those replies, reading every one even after one timed out (against a stalled server a connect
/// with timeout `t` took 2 × `t`), so a connect gets this share of the time left to stay within it.
const SETUP_REPLIES: u32 = 4;

/// Scripts on one Redis server (standalone, or the primary of a replicated pair) through a small
/// pool of connections. A connection that saw an I/O error or timeout is closed, never reused.
pub struct StandaloneScripting {
    client: Client,
    pool: Pool<Connection>,
    target: String,
}

impl StandaloneScripting {
    /// Prepares connections to `url` (`redis://[user:password@]host:port[/db]`, `rediss://…`,
    /// `unix://…`), at most `max_connections` at a time. No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when the URL cannot be parsed.
    pub fn new(url: &str, max_connections: usize) -> Result<StandaloneScripting> {
        let target = redact(url);
        let client =
            Client::open(url).map_err(|e| Error::config(format!("invalid redis URL {target}: {e}")).with_source(e))?;
        Ok(StandaloneScripting { client, pool: Pool::new(max_connections), target })
    }

    fn run<T>(
        &self,
        deadline: Instant,
        what: &str,
        mut f: impl FnMut(&mut Connection, Instant) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            let mut con = self.pool.get(deadline, &self.target, |t| {
                self.client
                    .get_connection_with_timeout((t / SETUP_REPLIES).max(Duration::from_millis(1)))
                    .map_err(|e| map_err(e, format!("cannot connect to redis at {}", self.target)))
            })?;
            let reused = con.reused();
            let t = left(deadline, what)?;
            let result = set_timeouts(&*con, t).and_then(|()| f(&mut con, deadline));
            match result {
                Ok(v) => return Ok(v),
                Err(e) => {
                    // An idle pooled connection the server closed (restart, idle timeout) fails at
                    // once: retry once on a fresh one. Every script is safe to run twice.
                    let stale = reused && e.is_connection_dropped() && !e.is_timeout();
                    if must_discard(&e) {
                        con.discard();
                    }
                    if stale && !retried {
                        retried = true;
                        log::debug!("redis {what} on {}: pooled connection was closed ({e}); retrying", self.target);
                        continue;
                    }
                    return Err(map_err(e, format!("redis {what} on {}", self.target)));
                }
            }
        }
    }
}

impl fmt::Debug for StandaloneScripting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StandaloneScripting").field("target", &self.target).finish_non_exhaustive()
    }
}

impl RedisScripting for StandaloneScripting {
    fn is_clustered(&self) -> bool {
        false
    }

    fn eval(&self, script: &LuaScript, keys: &[String], args: &[String], deadline: Instant) -> Result<Value> {
        let inv = invocation(script, keys, args);
        self.run(deadline, script.name(), |con, _| inv.invoke::<Value>(con))
    }

    fn eval_and_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        replicas: u32,
        deadline: Instant,
    ) -> Result<(Value, u32)> {
        let inv = invocation(script, keys, args);
        self.run(deadline, script.name(), |con, deadline| {
            let value = inv.invoke::<Value>(con)?;
            // WAIT gives up before the deadline so its reply still arrives in time: Redis checks
            // blocked clients' timeouts only every 100 ms (hz 10).
            let t = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(2));
            let margin = (t / 4).max(Duration::from_millis(150));
            let wait_ms = (t.saturating_sub(margin).as_millis() as u64).max(1);
            con.set_read_timeout(Some(t))?;
            let acked: i64 = redis::cmd("WAIT").arg(replicas).arg(wait_ms).query(con)?;
            Ok((value, u32::try_from(acked.max(0)).unwrap_or(u32::MAX)))
        })
    }

    fn on_masters(&self, cmd: &Cmd, deadline: Instant) -> Result<Vec<(String, Value)>> {
        let v = self.run(deadline, "command", |con, _| con.req_command(cmd).and_then(Value::extract_error))?;
        Ok(vec![(self.target.clone(), v)])
    }

    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo> {
        vec![self.client.get_connection_info().clone()]
    }

    fn target(&self) -> String {
        self.target.clone()
    }
}

/// Scripts on Redis Cluster: every call runs on the master of one hash slot (explicit slot
/// routing; the scripts are pre-loaded on every master and re-loaded on `NOSCRIPT`). A cluster
/// connection that saw a transport error is discarded, so the next one reads a fresh slot map.
pub struct ClusteredScripting {
    client: ClusterClient,
    pool: Pool<ClusterConnection>,
    nodes: Vec<ConnectionInfo>,
    target: String,
    loaded: AtomicBool,
}

impl ClusteredScripting {
    /// Prepares connections to the cluster reachable through `nodes` (`redis://host:port` or
    /// `host:port`, optionally with credentials), at most `max_connections` cluster connections at
    /// a time. `query_timeout` bounds connecting to a node. No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when `nodes` is empty or a node address cannot be parsed.
    pub fn new<S: AsRef<str>>(
        nodes: &[S],
        max_connections: usize,
        query_timeout: Duration,
    ) -> Result<ClusteredScripting> {
        if nodes.is_empty() {
            return Err(Error::config("redis cluster: at least one node address is required"));
        }
        let mut infos = Vec::new();
        let mut shown = Vec::new();
        for n in nodes {
            let n = n.as_ref().trim();
            let url = if n.contains("://") { n.to_string() } else { format!("redis://{n}") };
            let info = url.as_str().into_connection_info().map_err(|e| {
                Error::config(format!("invalid redis cluster node {}: {e}", redact(&url))).with_source(e)
            })?;
            shown.push(redact(&url));
            infos.push(info);
        }
        let target = format!("redis cluster [{}]", shown.join(", "));
        let client = ClusterClientBuilder::new(infos.clone())
            .connection_timeout(query_timeout.min(Duration::from_secs(1)))
            .response_timeout(query_timeout)
            // One retry follows a MOVED/ASK redirect; anything else fails the call and the
            // connection is replaced.
            .retries(1)
            .min_retry_wait(5)
            .max_retry_wait(50)
            .build()
            .map_err(|e| Error::config(format!("invalid {target}: {e}")).with_source(e))?;
        Ok(ClusteredScripting {
            client,
            pool: Pool::new(max_connections),
            nodes: infos,
            target,
            loaded: AtomicBool::new(false),
        })
    }

    fn run<T>(
        &self,
        deadline: Instant,
        what: &str,
        f: impl FnOnce(&mut ClusterConnection) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut con = self.pool.get(deadline, &self.target, |_| {
            self.client.get_connection().map_err(|e| map_err(e, format!("cannot connect to {}", self.target)))
        })?;
        let t = left(deadline, what)?;
        // The driver retries a timed-out call once: each attempt gets half of the time left.
        let result = set_timeouts(&*con, (t / 2).max(Duration::from_millis(1))).and_then(|()| {
            if !self.loaded.load(Ordering::Acquire) {
                load_scripts(&mut con)?;
                self.loaded.store(true, Ordering::Release);
            }
            f(&mut con)
        });
        match result {
            Ok(v) => Ok(v),
            Err(e) => {
                // Any failure may come from a stale slot map or a broken node connection: the next
                // call starts from a fresh cluster connection.
                con.discard();
                Err(map_err(e, format!("redis {what} on {}", self.target)))
            }
        }
    }
}

fn all_masters() -> RoutingInfo {
    RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None))
}

fn load_scripts(con: &mut ClusterConnection) -> redis::RedisResult<()> {
    for s in SCRIPTS.clustered() {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(s.code());
        con.route_command(&cmd, all_masters())?;
    }
    Ok(())
}

impl fmt::Debug for ClusteredScripting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusteredScripting").field("target", &self.target).finish_non_exhaustive()
    }
}

impl RedisScripting for ClusteredScripting {
    fn is_clustered(&self) -> bool {
        true
    }

    fn eval(&self, script: &LuaScript, keys: &[String], args: &[String], deadline: Instant) -> Result<Value> {
        let Some(first) = keys.first() else {
            return Err(Error::backend(format!("redis cluster: script {} called without keys", script.name())));
        };
        let slot = redis::cluster_routing::Slot::for_key(first.as_bytes());
        if let Some(other) = keys.iter().find(|k| redis::cluster_routing::Slot::for_key(k.as_bytes()) != slot) {
            return Err(Error::backend(format!(
                "redis cluster: script {} would span slots ({first} and {other})",
                script.name()
            )));
        }
        let route =
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_slot(slot, SlotAddr::Master)));
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
        self.run(deadline, script.name(), |con| match con.route_command(&cmd, route.clone()) {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                load_scripts(con)?;
                con.route_command(&cmd, route)
            }
            other => other,
        })
    }

    fn on_masters(&self, cmd: &Cmd, deadline: Instant) -> Result<Vec<(String, Value)>> {
        let v = self.run(deadline, "command", |con| con.route_command(cmd, all_masters()))?;
        match v {
            Value::Map(entries) => Ok(entries
                .into_iter()
                .map(|(addr, v)| (super::reply::string(&addr).unwrap_or_else(|| format!("{addr:?}")), v))
                .collect()),
            other => Ok(vec![(self.target.clone(), other)]),
        }
    }

    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo> {
        self.nodes.clone()
    }

    fn target(&self) -> String {
        self.target.clone()
    }
}
