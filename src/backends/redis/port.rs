//! The scripting port: the only place that talks to the Redis driver. [`StandaloneScripting`]
//! runs scripts on one server through a small connection pool; [`ClusteredScripting`] routes every
//! call to the master of one hash slot. The backend logic in [`super::RedisBackend`] is written
//! against the [`RedisScripting`] trait, so a custom adapter (or a fault-injecting wrapper in
//! tests) slots in with [`super::RedisBackend::with_scripting`].

use std::fmt;
use std::time::{Duration, Instant};

use redis::{Client, Cmd, Connection, ConnectionAddr, ConnectionInfo, RedisError, Value};

use super::config::{self, Target};
use super::conn::Conn;
use super::pool::{Pool, PoolLimits, Pooled};
use super::router::{addr_of, left, query, Router};
use super::scripts::LuaScript;
use super::tls::RedisTls;
use crate::error::{Error, ErrorKind, Result};

/// How the Redis backend runs its Lua scripts and the few plain commands it needs.
///
/// Every call must return by its `deadline` (plus scheduling), whatever the servers do: the
/// backend's [`call_bound`](crate::backend::LeaseBackend::call_bound) (the query timeout) relies on it, and
/// the engine then runs user calls on the caller's thread. On Redis Cluster every key of one call
/// hashes to one slot and the call runs on that slot's master.
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

    /// Runs `count` script calls, each as [`eval`](RedisScripting::eval) would, and returns their
    /// outcomes in order. `call(i)` builds call `i` right before it is sent (an `Err` is that call's
    /// outcome, and it is not sent), so what a call carries can depend on when it goes out. The
    /// default sends the calls one after another, building each after the previous reply; Redis
    /// Cluster builds them all, sends the calls bound for one node as one pipeline (one round trip
    /// per node instead of one per call; the nodes' pipelines at the same time when the batch is
    /// large) and runs alone what a pipeline could not settle (a redirect, a server error).
    fn eval_each<'a>(
        &self,
        count: usize,
        call: &mut dyn FnMut(usize) -> Result<ScriptCall<'a>>,
        deadline: Instant,
    ) -> Vec<Result<Value>> {
        (0..count).map(|i| call(i).and_then(|c| self.eval(c.script, &c.keys, &c.args, deadline))).collect()
    }

    /// Groups calls by the node that will run them: `slots[i]` is the hash slot of call `i`.
    /// Returns the indices of the calls bound for each node (every index once, in order). The
    /// backend may then do one group's work in one script call that touches keys of several slots
    /// of that node (the Cluster renewal does, with `renew_slot.lua`): a slot the node no longer
    /// serves by then is reported by that call and retried alone. The default puts every call in
    /// a group of its own (one script call per slot); Redis Cluster groups by the current slot map.
    fn group_by_node(&self, slots: &[u16], deadline: Instant) -> Vec<Vec<usize>> {
        let _ = deadline;
        (0..slots.len()).map(|i| vec![i]).collect()
    }

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

    /// Walks the keyspace of every master with `SCAN cursor MATCH pattern COUNT count`, at most
    /// `steps` calls per master (each examines about `count` keys, matching or not), before
    /// `deadline`. Returns the keys found (`SCAN` may return a key twice) and whether every
    /// master's walk reached its end (`false`: a budget ran out first and more keys may match).
    /// `LeaseBackend::list` rests on it.
    ///
    /// # Errors
    /// As [`eval`](RedisScripting::eval). The default (an adapter that cannot scan) fails with
    /// `Unsupported`, and so does the backend's `list` then.
    fn scan(&self, pattern: &str, count: usize, steps: usize, deadline: Instant) -> Result<(Vec<String>, bool)> {
        let _ = (pattern, count, steps, deadline);
        Err(Error::new(
            ErrorKind::Unsupported,
            format!(
                "the redis scripting port of {} cannot SCAN, so the backend cannot list what it holds",
                self.target()
            ),
        ))
    }

    /// Runs a plain command (`PING`, `CONFIG GET`, `INFO`, `TIME`) on every master; returns each
    /// master's address and reply.
    ///
    /// # Errors
    /// As [`eval`](RedisScripting::eval).
    fn on_masters(&self, cmd: &Cmd, deadline: Instant) -> Result<Vec<(String, Value)>>;

    /// Servers a pub/sub connection may subscribe on, in order of preference. On Cluster, the
    /// nodes to read the slot map from: the Cluster scripts `SPUBLISH` on each key's own shard
    /// channel, and the backend `SSUBSCRIBE`s each channel on its slot's master (reached with the
    /// first endpoint's settings: credentials, TLS).
    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo>;

    /// The target without secrets, for logs and errors (e.g. `redis://127.0.0.1:6379`).
    fn target(&self) -> String;
}

/// One call of a batch for [`RedisScripting::eval_each`].
#[derive(Debug, Clone)]
pub struct ScriptCall<'a> {
    /// The script.
    pub script: &'a LuaScript,
    /// Its keys (on Cluster all in one hash slot).
    pub keys: Vec<String>,
    /// Its arguments.
    pub args: Vec<String>,
}

/// True when the connection that produced `e` must not be reused: a late reply could still be in
/// flight, or the socket is broken.
pub(crate) fn must_discard(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped() || e.kind() == redis::ErrorKind::Parse
}

/// After `e` on `con`: closes the connection when it is broken (otherwise it goes back to the
/// pool), and says whether to run the call once more on a fresh one — an idle pooled connection
/// the server closed (restart, idle timeout) fails at once, and every script is safe to run twice.
pub(crate) fn retry_on_fresh(
    con: Pooled<'_, Conn>,
    e: &RedisError,
    retried: &mut bool,
    what: &str,
    target: &str,
) -> bool {
    let stale = con.reused() && e.is_connection_dropped() && !e.is_timeout();
    if must_discard(e) {
        con.discard();
    }
    if stale && !*retried {
        *retried = true;
        log::debug!("redis {what} on {target}: pooled connection was closed ({e}); retrying");
        return true;
    }
    false
}

/// What the user must change when the server refused the credentials or a permission: `None`
/// for any other error. These never heal by retrying, so they fail at once (`Backend`).
pub(crate) fn refusal_hint(e: &RedisError) -> Option<&'static str> {
    match e.code() {
        Some("NOAUTH") => Some(
            "the server requires a password: put it in the URL (redis://:password@host:port, or \
             redis://user:password@host:port for an ACL user; redis+cluster://user:password@host:port,… on Cluster)",
        ),
        Some("WRONGPASS") => Some(
            "the user name or password in the URL is wrong, or the ACL user is unknown or disabled: \
             fix redis://user:password@host:port (redis://:password@host:port for the default user; \
             redis+cluster://user:password@host:port,… on Cluster)",
        ),
        Some("NOPERM") => Some(
            "the ACL user may not run a command or touch a key or channel simba needs: grant it \
             the commands, simba:* keys and simba:* channels listed in docs/backends/redis.md",
        ),
        _ if e.kind() == redis::ErrorKind::AuthenticationFailed => Some(AUTH_REFUSED),
        _ => None,
    }
}

/// What to change when the server refused the `AUTH` of the URL's credentials.
const AUTH_REFUSED: &str = "the server refused the credentials in the URL: fix redis://user:password@host:port \
     (redis://:password@host:port for the default user, none when the server has no password)";

/// The server's own words for a server error (`WRONGPASS invalid username-password pair …`),
/// the driver's description for anything else.
pub(crate) fn server_words(e: &RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        _ => e.to_string(),
    }
}

/// Opens a connection to `client`'s server within `left`. redis-rs replaces the server's answer
/// to a refused `AUTH` with its own "Password authentication failed"; the server's words are
/// then read again with one `AUTH` on a connection without credentials (only on that failure),
/// so the error says what Redis said.
///
/// # Errors
/// As [`map_err`]: a refusal is `Backend` (permanent), a transport failure `Unavailable`.
pub(crate) fn connect(client: &Client, left: Duration, context: &str) -> Result<Connection> {
    let deadline = Instant::now() + left;
    let share = |left: Duration| (left / SETUP_REPLIES).max(Duration::from_millis(1));
    match client.get_connection_with_timeout(share(left)) {
        Ok(con) => Ok(con),
        Err(e) if e.kind() == redis::ErrorKind::AuthenticationFailed => {
            let left = deadline.saturating_duration_since(Instant::now());
            // Any answer to AUTH but OK is a refusal, whatever its code (`ERR AUTH <password>
            // called without any password configured…` when the server has none).
            let refusal = refused_auth(client.get_connection_info(), share(left)).unwrap_or(e);
            let hint = refusal_hint(&refusal).unwrap_or(AUTH_REFUSED);
            Err(Error::backend(format!("{context}: redis refused: {}; {hint}", server_words(&refusal))))
        }
        Err(e)
            if e.is_connection_dropped() && matches!(client.get_connection_info().addr(), ConnectionAddr::Tcp(..)) =>
        {
            // What a TLS-only port does to a plaintext client: it closes the connection at once.
            Err(map_err(
                e,
                format!(
                    "{context} (the server closed the connection while it was set up: if it accepts only TLS, use \
                     rediss://)"
                ),
            ))
        }
        Err(e) if e.is_timeout() && matches!(client.get_connection_info().addr(), ConnectionAddr::TcpTls { .. }) => {
            // A plaintext server waits for the end of a line the TLS ClientHello never sends.
            Err(map_err(
                e,
                format!(
                    "{context} (no TLS handshake answer: if the server does not speak TLS on this port, use redis://)"
                ),
            ))
        }
        Err(e) => Err(map_err(e, context)),
    }
}

/// The server's reply to the `AUTH` of `info`, sent on a connection without credentials.
fn refused_auth(info: &ConnectionInfo, timeout: Duration) -> Option<RedisError> {
    let settings = info.redis_settings();
    let password = settings.password()?;
    let bare = info.clone().set_redis_settings(redis::RedisConnectionInfo::default());
    let mut con = Client::open(bare).ok()?.get_connection_with_timeout(timeout).ok()?;
    con.set_read_timeout(Some(timeout)).ok()?;
    con.set_write_timeout(Some(timeout)).ok()?;
    let mut auth = redis::cmd("AUTH");
    if let Some(user) = settings.username() {
        auth.arg(user);
    }
    auth.arg(password);
    auth.query::<Value>(&mut con).err().filter(|e| e.code().is_some())
}

/// Maps a driver error to the crate's error, keeping it as the source. A refusal (credentials,
/// ACL permissions) is `Backend` with the server's words and what to change, without the source
/// (whose text it already holds).
pub(crate) fn map_err(e: RedisError, context: impl fmt::Display) -> Error {
    use redis::ServerErrorKind as S;
    if let Some(hint) = refusal_hint(&e) {
        return Error::backend(format!("{context}: redis refused: {}; {hint}", server_words(&e)));
    }
    if let Some(hint) = super::tls::handshake_hint(&e) {
        return Error::backend(format!("{context}: TLS failed: {e}; {hint}"));
    }
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

pub(crate) use crate::settings::redact::redact_url as redact;

/// `EVALSHA` of `script` (after `ASKING` when `asking`), loading the script and trying again on
/// `NOSCRIPT`. Every command gets only the time left before `deadline`.
fn run_script(
    con: &mut Conn,
    script: &LuaScript,
    keys: &[String],
    args: &[String],
    asking: bool,
    deadline: Instant,
) -> redis::RedisResult<Value> {
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.sha()).arg(keys.len()).arg(keys).arg(args);
    let send = |con: &mut Conn| {
        if asking {
            query(con, &redis::cmd("ASKING"), deadline)?;
        }
        query(con, &cmd, deadline)
    };
    match send(con) {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            let mut load = redis::cmd("SCRIPT");
            load.arg("LOAD").arg(script.code());
            query(con, &load, deadline)?;
            send(con)
        }
        other => other,
    }
}

/// One master's part of [`RedisScripting::scan`]: `SCAN` from cursor 0, at most `steps` calls,
/// each with the time left before `deadline`. Returns the keys and whether the walk ended.
pub(crate) fn scan_node(
    con: &mut Conn,
    pattern: &str,
    count: usize,
    steps: usize,
    deadline: Instant,
) -> redis::RedisResult<(Vec<String>, bool)> {
    let mut cursor = "0".to_string();
    let mut keys = Vec::new();
    for _ in 0..steps {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(&cursor).arg("MATCH").arg(pattern).arg("COUNT").arg(count);
        let v = query(con, &cmd, deadline)?;
        let (next, found): (String, Vec<String>) = redis::from_redis_value(v)?;
        keys.extend(found);
        if next == "0" {
            return Ok((keys, true));
        }
        cursor = next;
    }
    Ok((keys, false))
}

/// Cluster node addresses as URLs: `host:port` becomes `redis://host:port`.
pub(crate) fn node_urls<S: AsRef<str>>(nodes: &[S]) -> Vec<String> {
    nodes
        .iter()
        .map(|n| {
            let n = n.as_ref().trim();
            if n.contains("://") {
                n.to_string()
            } else {
                format!("redis://{n}")
            }
        })
        .collect()
}

/// The one hash slot of a script call's keys.
fn call_slot(script: &LuaScript, keys: &[String]) -> Result<u16> {
    let Some(first) = keys.first() else {
        return Err(Error::backend(format!("redis cluster: script {} called without keys", script.name())));
    };
    let slot = super::router::slot_of(first.as_bytes());
    if let Some(other) = keys.iter().find(|k| super::router::slot_of(k.as_bytes()) != slot) {
        return Err(Error::backend(format!(
            "redis cluster: script {} would span slots ({first} and {other})",
            script.name()
        )));
    }
    Ok(slot)
}

/// The time left before `deadline` for one step of a pipeline, or a timeout error.
fn pipeline_time_left(deadline: Instant) -> redis::RedisResult<Duration> {
    let t = deadline.saturating_duration_since(Instant::now());
    if t < Duration::from_millis(1) {
        Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            "query timeout reached within a pipeline",
        )))
    } else {
        Ok(t)
    }
}

/// Writes `EVALSHA` of every call as one pipeline; nothing is read ([`recv_scripts`] reads the
/// replies).
fn send_scripts(con: &mut Conn, calls: &[&ScriptCall<'_>], deadline: Instant) -> redis::RedisResult<()> {
    let mut pipe = redis::pipe();
    for c in calls {
        pipe.cmd("EVALSHA").arg(c.script.sha()).arg(c.keys.len()).arg(&c.keys).arg(&c.args);
    }
    con.write_within(pipeline_time_left(deadline)?)?;
    con.send_packed_command(&pipe.get_packed_pipeline())
}

/// Reads the replies of `count` calls, each with the time left (redis-rs' own pipeline read
/// would wait the full timeout once per reply after the first one timed out).
fn read_replies(con: &mut Conn, count: usize, deadline: Instant) -> redis::RedisResult<Vec<redis::RedisResult<Value>>> {
    let mut replies = Vec::with_capacity(count);
    while replies.len() < count {
        con.read_within(pipeline_time_left(deadline)?)?;
        match con.recv_response()? {
            Value::Push { .. } => {}
            v => replies.push(v.extract_error()),
        }
    }
    Ok(replies)
}

/// Reads the replies of the pipeline [`send_scripts`] wrote for `calls`; the scripts the node
/// did not have yet are loaded and their calls sent again as a second pipeline. Returns each
/// call's reply, or `None` for a call whose reply was an error to settle alone (a redirect, or
/// any other server error: the single call reports it in its own words). A transport error fails
/// the whole pipeline.
fn recv_scripts(
    con: &mut Conn,
    calls: &[&ScriptCall<'_>],
    deadline: Instant,
) -> redis::RedisResult<Vec<Option<Value>>> {
    let mut out: Vec<Option<Value>> = vec![None; calls.len()];
    let mut missing = Vec::new();
    for (i, r) in read_replies(con, calls.len(), deadline)?.into_iter().enumerate() {
        match r {
            Ok(v) => out[i] = Some(v),
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => missing.push(i),
            Err(_) => {}
        }
    }
    if !missing.is_empty() {
        let mut loaded: Vec<&str> = Vec::new();
        for i in &missing {
            let script = calls[*i].script;
            if !loaded.contains(&script.sha()) {
                let mut load = redis::cmd("SCRIPT");
                load.arg("LOAD").arg(script.code());
                query(con, &load, deadline)?;
                loaded.push(script.sha());
            }
        }
        let again: Vec<&ScriptCall<'_>> = missing.iter().map(|i| calls[*i]).collect();
        send_scripts(con, &again, deadline)?;
        for (i, r) in missing.iter().zip(read_replies(con, again.len(), deadline)?) {
            if let Ok(v) = r {
                out[*i] = Some(v);
            }
        }
    }
    Ok(out)
}

/// The most replies redis-rs reads while setting a connection up (`HELLO`/`AUTH`, `SELECT`, two
/// `CLIENT SETINFO`). It applies its connect timeout to the TCP connect and then again to each of
/// those replies, reading every one even after one timed out (against a stalled server a connect
/// with timeout `t` took 2 × `t`), so a connect gets this share of the time left to stay within it.
pub(crate) const SETUP_REPLIES: u32 = 4;

/// Scripts on one Redis server (standalone, or the primary of a replicated pair) through a small
/// pool of connections. A connection that saw an I/O error or timeout is closed, never reused.
pub struct StandaloneScripting {
    client: Client,
    pool: Pool<Conn>,
    target: String,
}

impl StandaloneScripting {
    /// Prepares connections to `url` (`redis://[user:password@]host:port[/db]`, `unix://…`, or
    /// `rediss://…[?ca=…&cert=…&key=…]` over TLS), at most `max_connections` at a time. No network
    /// I/O happens here (TLS files are read).
    ///
    /// # Errors
    /// `InvalidConfig` when the URL cannot be parsed or a TLS file cannot be read or parsed.
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn new(url: &str, max_connections: usize) -> Result<StandaloneScripting> {
        StandaloneScripting::with_tls(url, max_connections, &RedisTls::default())
    }

    /// As [`new`](StandaloneScripting::new), with TLS files besides those the URL names.
    ///
    /// # Errors
    /// As [`new`](StandaloneScripting::new); `InvalidConfig` when `tls` names files for a
    /// `redis://` URL or a file differently from the URL, or the URL is a Cluster one.
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn with_tls(url: &str, max_connections: usize, tls: &RedisTls) -> Result<StandaloneScripting> {
        let parsed = config::parse_url(url)?;
        let Target::Standalone(url) = &parsed.target else {
            return Err(Error::config(format!(
                "{} is a Redis Cluster URL: use ClusteredScripting (or RedisBackend::connect)",
                parsed.shown
            )));
        };
        let files = parsed.tls.clone().merge(tls)?;
        StandaloneScripting::open(url, &files, PoolLimits::max(max_connections))
    }

    /// Prepares connections described by the application's own `info` (bring your own
    /// configuration: address, credentials, database, protocol, and for `TcpTls` its TLS
    /// parameters, e.g. from [`redis::Client::build_with_tls`]), at most `max_connections` at a
    /// time. No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when `info` turns certificate verification off (`insecure`).
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn from_connection_info(info: ConnectionInfo, max_connections: usize) -> Result<StandaloneScripting> {
        let (info, target) = config::own_info(info, &RedisTls::default())?;
        StandaloneScripting::from_info(info, target, PoolLimits::max(max_connections))
    }

    /// Connections to the driver URL `url` with the TLS `files`.
    pub(crate) fn open(url: &str, files: &RedisTls, limits: PoolLimits) -> Result<StandaloneScripting> {
        let info = config::driver_info(url, files)?;
        StandaloneScripting::from_info(info, redact(url), limits)
    }

    pub(crate) fn from_info(info: ConnectionInfo, target: String, limits: PoolLimits) -> Result<StandaloneScripting> {
        let client =
            Client::open(info).map_err(|e| Error::config(format!("invalid redis URL {target}: {e}")).with_source(e))?;
        Ok(StandaloneScripting { client, pool: Pool::new(limits), target })
    }

    fn run<T>(
        &self,
        deadline: Instant,
        what: &str,
        mut f: impl FnMut(&mut Conn, Instant) -> redis::RedisResult<T>,
    ) -> Result<T> {
        let mut retried = false;
        loop {
            let mut con = self.pool.get(deadline, &self.target, |t| {
                connect(&self.client, t, &format!("cannot connect to redis at {}", self.target)).map(Conn::new)
            })?;
            left(deadline, what)?;
            match f(&mut con, deadline) {
                Ok(v) => return Ok(v),
                Err(e) => {
                    if retry_on_fresh(con, &e, &mut retried, what, &self.target) {
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
        self.run(deadline, script.name(), |con, deadline| run_script(con, script, keys, args, false, deadline))
    }

    fn eval_and_wait(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        replicas: u32,
        deadline: Instant,
    ) -> Result<(Value, u32)> {
        self.run(deadline, script.name(), |con, deadline| {
            let value = run_script(con, script, keys, args, false, deadline)?;
            // WAIT gives up before the deadline so its reply still arrives in time: Redis checks
            // blocked clients' timeouts only every 100 ms (hz 10).
            let t = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(2));
            let margin = (t / 4).max(Duration::from_millis(150));
            let wait_ms = (t.saturating_sub(margin).as_millis() as u64).max(1);
            con.read_for(t)?;
            let acked: i64 = redis::cmd("WAIT").arg(replicas).arg(wait_ms).query(con)?;
            Ok((value, u32::try_from(acked.max(0)).unwrap_or(u32::MAX)))
        })
    }

    /// Builds every call first, then sends them as one pipeline on one connection (one round
    /// trip); a call whose reply was a server error runs again alone and reports it as
    /// [`eval`](RedisScripting::eval) does. No standalone operation batches calls; the listing
    /// (`LeaseBackend::list`) does.
    fn eval_each<'a>(
        &self,
        count: usize,
        call: &mut dyn FnMut(usize) -> Result<ScriptCall<'a>>,
        deadline: Instant,
    ) -> Vec<Result<Value>> {
        let built: Vec<Result<ScriptCall<'a>>> = (0..count).map(call).collect();
        let ok: Vec<&ScriptCall<'a>> = built.iter().filter_map(|c| c.as_ref().ok()).collect();
        let mut piped = if ok.is_empty() {
            Ok(Vec::new())
        } else {
            self.run(deadline, "script pipeline", |con, deadline| {
                send_scripts(con, &ok, deadline)?;
                recv_scripts(con, &ok, deadline)
            })
        }
        .map(Vec::into_iter);
        built
            .into_iter()
            .map(|c| {
                let c = c?;
                match &mut piped {
                    Ok(replies) => match replies.next().flatten() {
                        Some(v) => Ok(v),
                        None => self.eval(c.script, &c.keys, &c.args, deadline),
                    },
                    Err(e) => Err(Error::new(e.kind(), e.to_string())),
                }
            })
            .collect()
    }

    fn scan(&self, pattern: &str, count: usize, steps: usize, deadline: Instant) -> Result<(Vec<String>, bool)> {
        self.run(deadline, "SCAN", |con, deadline| scan_node(con, pattern, count, steps, deadline))
    }

    fn on_masters(&self, cmd: &Cmd, deadline: Instant) -> Result<Vec<(String, Value)>> {
        let v = self.run(deadline, "command", |con, deadline| query(con, cmd, deadline))?;
        Ok(vec![(self.target.clone(), v)])
    }

    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo> {
        vec![self.client.get_connection_info().clone()]
    }

    fn target(&self) -> String {
        self.target.clone()
    }
}

/// Keys and arguments of a batch ([`RedisScripting::eval_each`]) from which its nodes' pipelines
/// run at the same time: a thread per node costs tens of microseconds, a node's share of this many
/// (~100 leases to renew) about as much server time; smaller batches go node after node (at 1,000
/// sessions × 10 leases, a thread per keep-alive doubled the process's CPU).
const CONCURRENT_ITEMS: usize = 300;

/// Scripts on Redis Cluster: every call runs on the master of one hash slot, over plain
/// connections to the nodes (one small pool per node), following `MOVED`/`ASK` redirects. Every
/// blocking step of a call — reading the slot map, waiting for a pooled connection, connecting,
/// each command — gets only the time left before the call's deadline, so a call ends by its
/// deadline however many nodes stop answering. A connection that saw a transport error is closed
/// and the slot map is re-read by the next call; scripts are loaded on a node on `NOSCRIPT`.
pub struct ClusteredScripting {
    router: Router,
    nodes: Vec<ConnectionInfo>,
    target: String,
}

impl ClusteredScripting {
    /// Prepares connections to the cluster reachable through `nodes` (`redis://host:port` or
    /// `host:port`, optionally with credentials; `rediss://host:port[?ca=…&cert=…&key=…]` over
    /// TLS), at most `max_connections` connections to each node at a time. Nodes the cluster
    /// announces are reached with the first node's settings (credentials, TLS and its
    /// certificates). No network I/O happens here (TLS files are read). `query_timeout` is not
    /// used (every call carries its own deadline); it is kept for compatibility.
    ///
    /// # Errors
    /// `InvalidConfig` when `nodes` is empty, a node address cannot be parsed or is not TCP, the
    /// nodes mix `redis://` and `rediss://`, or a TLS file cannot be read or parsed.
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn new<S: AsRef<str>>(
        nodes: &[S],
        max_connections: usize,
        query_timeout: Duration,
    ) -> Result<ClusteredScripting> {
        let _ = query_timeout;
        ClusteredScripting::with_tls(nodes, max_connections, &RedisTls::default())
    }

    /// As [`new`](ClusteredScripting::new), with TLS files besides those the node URLs name.
    ///
    /// # Errors
    /// As [`new`](ClusteredScripting::new).
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn with_tls<S: AsRef<str>>(nodes: &[S], max_connections: usize, tls: &RedisTls) -> Result<ClusteredScripting> {
        let urls = node_urls(nodes);
        ClusteredScripting::open(&urls, tls, PoolLimits::max(max_connections))
    }

    /// Prepares connections to the cluster reachable through the application's own node
    /// `infos` (bring your own configuration; see [`StandaloneScripting::from_connection_info`]).
    /// Nodes the cluster announces are reached with the first node's settings. No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when `infos` is empty, a node is not TCP, the nodes mix plaintext and TLS,
    /// or a node turns certificate verification off (`insecure`).
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn from_connection_infos(infos: Vec<ConnectionInfo>, max_connections: usize) -> Result<ClusteredScripting> {
        let own = infos.into_iter().map(|i| config::own_info(i, &RedisTls::default())).collect::<Result<Vec<_>>>()?;
        ClusteredScripting::from_infos(own, PoolLimits::max(max_connections))
    }

    /// Connections through the node URLs `nodes` (`redis://…` or `rediss://…`, each possibly with
    /// its own `ca=`/`cert=`/`key=`), with the TLS `files` besides.
    pub(crate) fn open(nodes: &[String], files: &RedisTls, limits: PoolLimits) -> Result<ClusteredScripting> {
        let mut checked = Vec::with_capacity(nodes.len());
        for url in nodes {
            let parsed = config::parse_url(url)?;
            let Target::Standalone(url) = parsed.target else {
                return Err(Error::config(format!(
                    "invalid redis cluster node {}: expected host:port or redis://host:port",
                    parsed.shown
                )));
            };
            checked.push((url, parsed.tls.merge(files)?, parsed.shown));
        }
        ClusteredScripting::open_checked(checked, limits)
    }

    /// Connections through the node URLs of a parsed `redis+cluster://` URL (its
    /// [`Target::Cluster`]: driver URLs, already checked, without TLS file parameters), with the
    /// TLS `files`. The node URLs are not parsed again.
    pub(crate) fn open_nodes(nodes: &[String], files: &RedisTls, limits: PoolLimits) -> Result<ClusteredScripting> {
        let checked = nodes.iter().map(|url| (url.clone(), files.clone(), redact(url))).collect();
        ClusteredScripting::open_checked(checked, limits)
    }

    /// Connections through checked node driver URLs, each with its TLS files and how it is shown.
    fn open_checked(nodes: Vec<(String, RedisTls, String)>, limits: PoolLimits) -> Result<ClusteredScripting> {
        let mut infos = Vec::with_capacity(nodes.len());
        for (url, files, shown) in nodes {
            let info = config::driver_info(&url, &files)
                .map_err(|e| Error::new(e.kind(), format!("invalid redis cluster node {shown}: {e}")))?;
            infos.push((info, redact(&url)));
        }
        ClusteredScripting::from_infos(infos, limits)
    }

    /// The cluster through `infos`, each with the text that shows it.
    pub(crate) fn from_infos(infos: Vec<(ConnectionInfo, String)>, limits: PoolLimits) -> Result<ClusteredScripting> {
        if infos.is_empty() {
            return Err(Error::config("redis cluster: at least one node address is required"));
        }
        let is_tls = |i: &ConnectionInfo| matches!(i.addr(), redis::ConnectionAddr::TcpTls { .. });
        let mut seeds = Vec::with_capacity(infos.len());
        let mut shown = Vec::with_capacity(infos.len());
        let mut nodes = Vec::with_capacity(infos.len());
        for (info, text) in infos {
            let addr = addr_of(&info)
                .ok_or_else(|| Error::config(format!("redis cluster node {text} is not a TCP address")))?;
            if nodes.first().is_some_and(|first| is_tls(first) != is_tls(&info)) {
                return Err(Error::config(format!(
                    "redis cluster nodes mix redis:// and rediss:// ({text}): use one scheme for all"
                )));
            }
            shown.push(text);
            seeds.push((addr, info.clone()));
            nodes.push(info);
        }
        let target = format!("redis cluster [{}]", shown.join(", "));
        Ok(ClusteredScripting { router: Router::new(seeds, limits), nodes, target })
    }
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
        let slot = call_slot(script, keys)?;
        self.router
            .on_slot(slot, deadline, script.name(), |con, asking| run_script(con, script, keys, args, asking, deadline))
    }

    fn eval_each<'a>(
        &self,
        count: usize,
        call: &mut dyn FnMut(usize) -> Result<ScriptCall<'a>>,
        deadline: Instant,
    ) -> Vec<Result<Value>> {
        // Built together: the pipelines go out together.
        let built: Vec<Result<ScriptCall<'a>>> = (0..count).map(call).collect();
        let mut out: Vec<Option<Result<Value>>> = (0..count).map(|_| None).collect();
        let mut calls: Vec<Option<ScriptCall<'a>>> = Vec::with_capacity(count);
        let mut pending = Vec::new();
        for (i, c) in built.into_iter().enumerate() {
            match c.and_then(|c| call_slot(c.script, &c.keys).map(|slot| (c, slot))) {
                Ok((c, slot)) => {
                    pending.push((i, slot));
                    calls.push(Some(c));
                }
                Err(e) => {
                    out[i] = Some(Err(e));
                    calls.push(None);
                }
            }
        }
        // A large batch runs the nodes' pipelines at the same time, a small one node after node.
        let items: usize = calls.iter().flatten().map(|c| c.keys.len() + c.args.len()).sum();
        let concurrent = items >= CONCURRENT_ITEMS;
        let of = |idx: &[usize]| -> Vec<&ScriptCall<'a>> { idx.iter().filter_map(|i| calls[*i].as_ref()).collect() };
        let settled = self.router.pipelined(
            &pending,
            deadline,
            "script pipeline",
            concurrent,
            |con, idx| send_scripts(con, &of(idx), deadline),
            |con, idx, by| recv_scripts(con, &of(idx), by),
        );
        for (i, r) in settled {
            out[i] = Some(r);
        }
        // Whatever a pipeline left unsettled (a redirect, a server error) runs alone, following
        // redirects and reporting errors as `eval` does.
        out.into_iter()
            .zip(calls)
            .map(|(r, c)| match (r, c) {
                (Some(r), _) => r,
                (None, Some(c)) => self.eval(c.script, &c.keys, &c.args, deadline),
                (None, None) => Err(Error::backend("redis cluster: a batched script call was lost")),
            })
            .collect()
    }

    fn group_by_node(&self, slots: &[u16], deadline: Instant) -> Vec<Vec<usize>> {
        self.router.group_by_node(slots, deadline, "slot map")
    }

    fn on_masters(&self, cmd: &Cmd, deadline: Instant) -> Result<Vec<(String, Value)>> {
        self.router.on_masters(cmd, deadline, "command")
    }

    fn scan(&self, pattern: &str, count: usize, steps: usize, deadline: Instant) -> Result<(Vec<String>, bool)> {
        let walks =
            self.router.on_each_master(deadline, "SCAN", |con| scan_node(con, pattern, count, steps, deadline))?;
        let ended = walks.iter().all(|(_, (_, ended))| *ended);
        Ok((walks.into_iter().flat_map(|(_, (keys, _))| keys).collect(), ended))
    }

    fn subscriber_endpoints(&self) -> Vec<ConnectionInfo> {
        self.nodes.clone()
    }

    fn target(&self) -> String {
        self.target.clone()
    }
}
