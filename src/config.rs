//! Configuration and backend selection: [`Config`].
//!
//! A `Config` says which backend to use, how to reach it and how sessions are timed. Build it in
//! code with [`Config::builder`], from a URL with [`Config::from_url`], or from `SIMBA_*`
//! environment variables with [`Config::from_env`]; then [`Config::connect`] creates the backend and
//! [`Config::session_options`] gives the session timing.
//!
//! ```
//! use simba::{Config, Session};
//! let config = Config::from_url("memory://")?;
//! let session = Session::open(config.connect()?, config.session_options())?;
//! let lease = session.lock("nightly-report")?;
//! # Ok::<(), simba::Error>(())
//! ```
//!
//! # Selection rules
//!
//! The backend is chosen **explicitly**: by the URL's scheme (`postgres://`, `mysql://`, `redis://`,
//! `redis+cluster://`, `zookeeper://`, `memory://`) or by [`ConfigBuilder::backend`] /
//! `SIMBA_BACKEND`. It is never guessed:
//!
//! - a backend whose Cargo feature is not compiled in is an error naming the feature;
//! - a backend disabled with `SIMBA_<BACKEND>_ENABLED=false` (or `SIMBA_ENABLED=false`) is an error;
//! - `SIMBA_BACKEND` that contradicts the URL's scheme is an error;
//! - settings of backends (e.g. `SIMBA_REDIS_*` and `SIMBA_ZOOKEEPER_*`) without an explicit
//!   choice are an error naming them; with an explicit choice, settings of other backends are
//!   ignored with a warning ([`Config::warnings`]);
//! - no choice at all is an error.
//!
//! An application may always skip all of this and pass its own backend to
//! [`Session::open`](crate::Session::open) or [`Coordinator::start`](crate::Coordinator::start).
//!
//! Every value is validated by [`ConfigBuilder::build`] before any I/O, with a message naming the
//! value and the rule. Secrets (URL passwords, sensitive URL query values, ZooKeeper auth
//! credentials) never appear in `Debug`, logs or error messages: URLs are shown redacted, e.g.
//! `redis://user:***@host:6379`. See `docs/configuration.md`.

pub(crate) mod redact;
pub(crate) mod url;
pub(crate) mod values;

use std::collections::BTreeSet;
use std::fmt;
#[cfg(feature = "zookeeper")]
use std::path::Path;
#[cfg(any(feature = "redis", feature = "zookeeper"))]
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

pub use self::redact::redact_url;
use self::redact::Secret;
use self::url::{parse_endpoint, Endpoint};
use self::values::{parse_bool, parse_count, shorten};
pub use self::values::{parse_drift, parse_duration};
use crate::backend::LeaseBackend;
#[cfg(feature = "redis")]
use crate::backends::redis::{EvictionCheck, RedisOptions, RedisOptionsBuilder};
#[cfg(feature = "zookeeper")]
use crate::backends::zookeeper::{AclMode, ZookeeperOptions, ZookeeperSettings};
use crate::error::{display_chain, Error, Result};
use crate::memory::MemoryBackend;
use crate::options::{SessionOptions, SessionOptionsBuilder};

/// Redis: what the backend does about a risky `maxmemory-policy` (the backend's own
/// [`EvictionCheck`], under its former name).
#[cfg(feature = "redis")]
pub type RedisEviction = EvictionCheck;

/// ZooKeeper: the ACL of the nodes the backend creates (the backend's own [`AclMode`], under its
/// former name).
#[cfg(feature = "zookeeper")]
pub type ZookeeperAcl = AclMode;

/// Default ZooKeeper root path.
#[cfg(feature = "zookeeper")]
pub const DEFAULT_ZOOKEEPER_ROOT: &str = crate::backends::zookeeper::DEFAULT_ROOT;
/// Default ZooKeeper port, used for hosts written without one.
#[cfg(feature = "zookeeper")]
pub const DEFAULT_ZOOKEEPER_PORT: u16 = crate::backends::zookeeper::DEFAULT_PORT;

/// The variables that are not any one backend's (the selection rules and the session timing).
const GENERIC_VARS: &[&str] = &[
    "SIMBA_URL",
    "SIMBA_BACKEND",
    "SIMBA_ENABLED",
    "SIMBA_POSTGRES_ENABLED",
    "SIMBA_MYSQL_ENABLED",
    "SIMBA_REDIS_ENABLED",
    "SIMBA_ZOOKEEPER_ENABLED",
    "SIMBA_MEMORY_ENABLED",
    "SIMBA_LEASE_DURATION",
    "SIMBA_RENEW_INTERVAL",
    "SIMBA_DRIFT",
    "SIMBA_QUERY_TIMEOUT",
    "SIMBA_WORKER_THREADS",
    "SIMBA_METADATA",
];

/// The SQL backends' variables.
const SQL_VARS: &[&str] = &["SIMBA_PURGE_INTERVAL", "SIMBA_SQL_POOL_SIZE"];

#[cfg(feature = "redis")]
const REDIS_VARS: &[&str] = crate::backends::redis::ENV_VARS;
#[cfg(not(feature = "redis"))]
const REDIS_VARS: &[&str] = &[];
#[cfg(feature = "zookeeper")]
const ZOOKEEPER_VARS: &[&str] = crate::backends::zookeeper::ENV_VARS;
#[cfg(not(feature = "zookeeper"))]
const ZOOKEEPER_VARS: &[&str] = &[];

const ENV_VAR_COUNT: usize = GENERIC_VARS.len() + SQL_VARS.len() + REDIS_VARS.len() + ZOOKEEPER_VARS.len();

const fn concat(parts: [&[&'static str]; 4]) -> [&'static str; ENV_VAR_COUNT] {
    let mut out = [""; ENV_VAR_COUNT];
    let mut n = 0;
    let mut p = 0;
    while p < parts.len() {
        let mut i = 0;
        while i < parts[p].len() {
            out[n] = parts[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    out
}

const ALL_VARS: [&str; ENV_VAR_COUNT] = concat([GENERIC_VARS, SQL_VARS, REDIS_VARS, ZOOKEEPER_VARS]);

/// Every environment variable [`Config::from_env`] reads: the generic ones and those of the
/// backends compiled in (each backend declares its own: `backends::redis::ENV_VARS`,
/// `backends::zookeeper::ENV_VARS`). A `SIMBA_REDIS_*`/`SIMBA_ZOOKEEPER_*` variable of a backend
/// that is not compiled in counts as that backend's setting in the selection rules.
pub const ENV_VARS: &[&str] = &ALL_VARS;

/// `SIMBA_*` variables that are not settings (the CLI sets them for its children; tests use
/// `SIMBA_TEST_*`), so [`Config::from_env`] does not warn about them.
const NOT_SETTINGS: &[&str] = &["SIMBA_TOKEN", "SIMBA_LEASE", "SIMBA_SESSION", "SIMBA_GROUP"];

/// The backends [`Config`] can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BackendKind {
    /// PostgreSQL 14+ (`postgres://`, `postgresql://`; feature `postgres`).
    Postgres,
    /// MySQL 8 / MariaDB 10.11 (`mysql://`; feature `mysql`).
    Mysql,
    /// Redis 7 standalone (`redis://`; feature `redis`).
    Redis,
    /// Redis Cluster (`redis+cluster://h1:p,h2:p`; feature `redis`).
    RedisCluster,
    /// ZooKeeper 3.8 (`zookeeper://h1:2181,h2:2181/root`; feature `zookeeper`).
    Zookeeper,
    /// The in-process memory backend (`memory://`; always compiled). Process-local: two processes
    /// never see each other's leases.
    Memory,
}

impl BackendKind {
    /// Every kind.
    pub const ALL: [BackendKind; 6] = [
        BackendKind::Postgres,
        BackendKind::Mysql,
        BackendKind::Redis,
        BackendKind::RedisCluster,
        BackendKind::Zookeeper,
        BackendKind::Memory,
    ];

    /// The name used by `SIMBA_BACKEND`, e.g. `"redis-cluster"`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Postgres => "postgres",
            BackendKind::Mysql => "mysql",
            BackendKind::Redis => "redis",
            BackendKind::RedisCluster => "redis-cluster",
            BackendKind::Zookeeper => "zookeeper",
            BackendKind::Memory => "memory",
        }
    }

    /// The Cargo feature that compiles this backend in (`None` for memory, which is always there).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            BackendKind::Postgres => Some("postgres"),
            BackendKind::Mysql => Some("mysql"),
            BackendKind::Redis | BackendKind::RedisCluster => Some("redis"),
            BackendKind::Zookeeper => Some("zookeeper"),
            BackendKind::Memory => None,
        }
    }

    /// True when this build contains the backend.
    pub fn is_compiled(self) -> bool {
        match self {
            BackendKind::Postgres => cfg!(feature = "postgres"),
            BackendKind::Mysql => cfg!(feature = "mysql"),
            BackendKind::Redis | BackendKind::RedisCluster => cfg!(feature = "redis"),
            BackendKind::Zookeeper => cfg!(feature = "zookeeper"),
            BackendKind::Memory => true,
        }
    }

    /// True for PostgreSQL and MySQL (the backends with a schema).
    pub fn is_sql(self) -> bool {
        matches!(self, BackendKind::Postgres | BackendKind::Mysql)
    }

    /// The backend's settings family (for the selection rules and `SIMBA_<FAMILY>_ENABLED`).
    fn family(self) -> Family {
        match self {
            BackendKind::Postgres => Family::Postgres,
            BackendKind::Mysql => Family::Mysql,
            BackendKind::Redis | BackendKind::RedisCluster => Family::Redis,
            BackendKind::Zookeeper => Family::Zookeeper,
            BackendKind::Memory => Family::Memory,
        }
    }

    /// Whether an explicit choice `self` (from `SIMBA_BACKEND`) agrees with a URL of kind `url`:
    /// equal, or `redis` for a `redis+cluster://` URL.
    fn agrees_with(self, url: BackendKind) -> bool {
        self == url || (self == BackendKind::Redis && url == BackendKind::RedisCluster)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = Error;

    /// Parses `postgres` (or `postgresql`), `mysql`, `redis`, `redis-cluster`, `zookeeper`,
    /// `memory`; case-insensitive.
    fn from_str(s: &str) -> Result<BackendKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            "mysql" => Ok(BackendKind::Mysql),
            "redis" => Ok(BackendKind::Redis),
            "redis-cluster" => Ok(BackendKind::RedisCluster),
            "zookeeper" => Ok(BackendKind::Zookeeper),
            "memory" => Ok(BackendKind::Memory),
            _ => Err(Error::config(format!(
                "unknown backend {:?}: expected one of postgres, mysql, redis, redis-cluster, zookeeper, memory",
                shorten(s)
            ))),
        }
    }
}

/// A group of settings that belong to one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    Postgres,
    Mysql,
    Sql,
    Redis,
    Zookeeper,
    Memory,
}

impl Family {
    fn name(self) -> &'static str {
        match self {
            Family::Postgres => "postgres",
            Family::Mysql => "mysql",
            Family::Sql => "sql (postgres/mysql)",
            Family::Redis => "redis",
            Family::Zookeeper => "zookeeper",
            Family::Memory => "memory",
        }
    }

    fn applies_to(self, kind: BackendKind) -> bool {
        match self {
            Family::Sql => kind.is_sql(),
            f => kind.family() == f,
        }
    }

    /// The family of a `SIMBA_REDIS_*` or `SIMBA_ZOOKEEPER_*` variable `name` when that backend is
    /// not compiled in (so this build cannot know its variables).
    fn not_compiled_owner(name: &str) -> Option<Family> {
        let family = if name.starts_with("SIMBA_REDIS_") {
            Family::Redis
        } else if name.starts_with("SIMBA_ZOOKEEPER_") {
            Family::Zookeeper
        } else {
            return None;
        };
        let compiled = match family {
            Family::Redis => cfg!(feature = "redis"),
            _ => cfg!(feature = "zookeeper"),
        };
        (!compiled && !name.ends_with("_ENABLED")).then_some(family)
    }

    fn enabled_var(self) -> &'static str {
        match self {
            Family::Postgres => "SIMBA_POSTGRES_ENABLED",
            Family::Mysql => "SIMBA_MYSQL_ENABLED",
            Family::Redis => "SIMBA_REDIS_ENABLED",
            Family::Zookeeper => "SIMBA_ZOOKEEPER_ENABLED",
            Family::Memory | Family::Sql => "SIMBA_MEMORY_ENABLED",
        }
    }
}

/// Builder of [`Config`]. Setters record values; [`build`](ConfigBuilder::build) validates them
/// all before any I/O. Settings from the environment ([`ConfigBuilder::from_env`]) can be
/// overridden by later setter calls.
#[derive(Clone, Default)]
pub struct ConfigBuilder {
    url: Option<(String, &'static str)>,
    backend: Option<(BackendKind, &'static str)>,
    disabled: Vec<(Family, &'static str)>,
    session: SessionOptionsBuilder,
    purge_interval: Option<Duration>,
    sql_pool_size: Option<u32>,
    /// The Redis backend's own options builder (its `SIMBA_REDIS_*` parsing lives with it).
    #[cfg(feature = "redis")]
    redis: RedisOptionsBuilder,
    /// The ZooKeeper backend's settings, checked when built (its parsing lives with it).
    #[cfg(feature = "zookeeper")]
    zookeeper: ZookeeperSettings,
    /// Backend-specific settings that were set, with the name they were set under.
    specific: BTreeSet<(Family, &'static str)>,
    /// `SIMBA_*` variables of backends not compiled in (they still count in the selection rules).
    not_compiled: BTreeSet<(Family, String)>,
    warnings: Vec<String>,
}

impl fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ConfigBuilder");
        d.field("url", &self.url.as_ref().map(|(u, _)| redact_url(u)))
            .field("backend", &self.backend.map(|(b, _)| b))
            .field("session", &self.session)
            .field("purge_interval", &self.purge_interval)
            .field("sql_pool_size", &self.sql_pool_size);
        #[cfg(feature = "redis")]
        d.field("redis", &self.redis);
        #[cfg(feature = "zookeeper")]
        d.field("zookeeper", &self.zookeeper);
        d.finish_non_exhaustive()
    }
}

impl ConfigBuilder {
    /// Reads the `SIMBA_*` environment variables (see [`ENV_VARS`]); empty values count as unset.
    /// Unknown `SIMBA_*` variables produce a warning (a likely typo).
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule.
    pub fn from_env() -> Result<ConfigBuilder> {
        let mut b = ConfigBuilder::from_vars(|k| std::env::var(k).ok())?;
        for (k, _) in std::env::vars_os() {
            let Some(k) = k.to_str() else { continue };
            if k.starts_with("SIMBA_")
                && !k.starts_with("SIMBA_TEST_")
                && !ENV_VARS.contains(&k)
                && !NOT_SETTINGS.contains(&k)
            {
                match Family::not_compiled_owner(k) {
                    // Whose it is, even though that backend cannot read it in this build.
                    Some(family) => {
                        b.not_compiled.insert((family, k.to_string()));
                    }
                    None => b.warnings.push(format!("unknown environment variable {k} is ignored (a typo?)")),
                }
            }
        }
        Ok(b)
    }

    /// Like [`from_env`](ConfigBuilder::from_env), reading variables through `get` (for tests and
    /// for other sources such as a config file). Empty values count as unset.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<ConfigBuilder> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let mut b = ConfigBuilder::default();
        if let Some(v) = get("SIMBA_URL") {
            b.url = Some((v, "SIMBA_URL"));
        }
        if let Some(v) = get("SIMBA_BACKEND") {
            let kind = v.parse::<BackendKind>().map_err(|e| Error::config(format!("SIMBA_BACKEND: {e}")))?;
            b.backend = Some((kind, "SIMBA_BACKEND"));
        }
        if let Some(v) = get("SIMBA_ENABLED") {
            if !parse_bool("SIMBA_ENABLED", &v)? {
                for f in [Family::Postgres, Family::Mysql, Family::Redis, Family::Zookeeper, Family::Memory] {
                    b.disabled.push((f, "SIMBA_ENABLED"));
                }
            }
        }
        for f in [Family::Postgres, Family::Mysql, Family::Redis, Family::Zookeeper, Family::Memory] {
            let var = f.enabled_var();
            if let Some(v) = get(var) {
                if !parse_bool(var, &v)? {
                    b.disabled.push((f, var));
                }
            }
        }
        if let Some(v) = get("SIMBA_LEASE_DURATION") {
            b.session = b.session.lease_duration(parse_duration("SIMBA_LEASE_DURATION", &v)?);
        }
        if let Some(v) = get("SIMBA_RENEW_INTERVAL") {
            b.session = b.session.renew_interval(parse_duration("SIMBA_RENEW_INTERVAL", &v)?);
        }
        if let Some(v) = get("SIMBA_DRIFT") {
            b.session = b.session.drift(parse_drift("SIMBA_DRIFT", &v)?);
        }
        if let Some(v) = get("SIMBA_QUERY_TIMEOUT") {
            b.session = b.session.query_timeout(parse_duration("SIMBA_QUERY_TIMEOUT", &v)?);
        }
        if let Some(v) = get("SIMBA_WORKER_THREADS") {
            b.session = b.session.worker_threads(parse_count("SIMBA_WORKER_THREADS", &v)? as usize);
        }
        if let Some(v) = get("SIMBA_METADATA") {
            b.session = b.session.metadata(v);
        }
        if let Some(v) = get("SIMBA_PURGE_INTERVAL") {
            b.purge_interval = Some(parse_duration("SIMBA_PURGE_INTERVAL", &v)?);
            b.specific.insert((Family::Sql, "SIMBA_PURGE_INTERVAL"));
        }
        if let Some(v) = get("SIMBA_SQL_POOL_SIZE") {
            b.sql_pool_size = Some(parse_count("SIMBA_SQL_POOL_SIZE", &v)?);
            b.specific.insert((Family::Sql, "SIMBA_SQL_POOL_SIZE"));
        }
        #[allow(unused_mut)]
        let mut seen: Vec<(Family, &'static str)> = Vec::new();
        #[cfg(feature = "redis")]
        {
            b.redis = b.redis.read_vars(&get, &mut |name| seen.push((Family::Redis, name)))?;
        }
        #[cfg(feature = "zookeeper")]
        {
            b.zookeeper = b.zookeeper.read_vars(&get, &mut |name| seen.push((Family::Zookeeper, name)))?;
        }
        b.specific.extend(seen);
        Ok(b)
    }

    /// The backend URL (its scheme chooses the backend). Replaces `SIMBA_URL`.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some((url.into(), "url"));
        self
    }

    /// The explicit backend choice (must agree with the URL's scheme when both are given).
    /// Replaces `SIMBA_BACKEND`.
    #[must_use]
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.backend = Some((kind, "backend"));
        self
    }

    /// How long the backend keeps a session without renewal (default 15 s).
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.session = self.session.lease_duration(d);
        self
    }

    /// Time between keep-alives (default 5 s, or lease_duration / 3 when only that is set).
    #[must_use]
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.session = self.session.renew_interval(d);
        self
    }

    /// Allowed clock-rate difference between client and backend (default 0.01).
    #[must_use]
    pub fn drift(mut self, drift: f64) -> Self {
        self.session = self.session.drift(drift);
        self
    }

    /// Per-call timeout of the session engine and of the backend's own calls (default = renew
    /// interval).
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.session = self.session.query_timeout(d);
        self
    }

    /// The most worker threads running backend calls at once, process-wide (default 64; see
    /// [`SessionOptionsBuilder::worker_threads`](crate::options::SessionOptionsBuilder::worker_threads)).
    #[must_use]
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.session = self.session.worker_threads(n);
        self
    }

    /// Session metadata visible to others (at most 1024 bytes).
    #[must_use]
    pub fn metadata(mut self, m: impl Into<String>) -> Self {
        self.session = self.session.metadata(m);
        self
    }

    /// SQL only: minimum time between purges of expired sessions (default 1 min).
    #[must_use]
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.purge_interval = Some(d);
        self.specific.insert((Family::Sql, "purge_interval"));
        self
    }

    /// SQL only: connections in the backend's own pool (default 4).
    #[must_use]
    pub fn sql_pool_size(mut self, n: u32) -> Self {
        self.sql_pool_size = Some(n);
        self.specific.insert((Family::Sql, "sql_pool_size"));
        self
    }

    /// Redis: most connections open at once, to the server or to each Cluster node (default 8;
    /// [`RedisOptionsBuilder::max_connections`]).
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis_max_connections(mut self, n: u32) -> Self {
        self.redis = self.redis.max_connections(usize::try_from(n).unwrap_or(usize::MAX));
        self.specific.insert((Family::Redis, "redis_max_connections"));
        self
    }

    /// Redis: how long a pooled connection is reused before it is replaced (default forever;
    /// [`RedisOptionsBuilder::max_connection_lifetime`]).
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis_max_connection_lifetime(mut self, d: Duration) -> Self {
        self.redis = self.redis.max_connection_lifetime(d);
        self.specific.insert((Family::Redis, "redis_max_connection_lifetime"));
        self
    }

    /// Redis standalone only: a new term counts only after this many replicas acknowledged it
    /// with `WAIT` (default 0 = off; [`RedisOptionsBuilder::wait_replicas`]).
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis_wait_replicas(mut self, n: u32) -> Self {
        self.redis = self.redis.wait_replicas(n);
        self.specific.insert((Family::Redis, "redis_wait_replicas"));
        self
    }

    /// Redis: what to do when `maxmemory-policy` may evict Simba's keys (default warn;
    /// [`RedisOptionsBuilder::eviction_check`]).
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis_eviction(mut self, e: EvictionCheck) -> Self {
        self.redis = self.redis.eviction_check(e);
        self.specific.insert((Family::Redis, "redis_eviction"));
        self
    }

    /// Redis over TLS (`rediss://`, `rediss+cluster://`): trust only the CA certificate(s) in this
    /// PEM file instead of the system's roots (the URL's `ca=` does the same).
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.redis.tls_slot(0, ca.into());
        self.specific.insert((Family::Redis, "redis_tls_ca"));
        self
    }

    /// Redis over TLS: present this client certificate and key (PEM files; the URL's `cert=` and
    /// `key=` do the same).
    #[cfg(feature = "redis")]
    #[must_use]
    pub fn redis_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.redis.tls_slot(1, cert.into());
        self.redis.tls_slot(2, key.into());
        self.specific.insert((Family::Redis, "redis_tls_identity"));
        self
    }

    /// ZooKeeper: root path of every node (default `/simba`; a `zookeeper://` URL path sets it too).
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_root(mut self, root: impl Into<String>) -> Self {
        self.zookeeper.root = Some(root.into());
        self.specific.insert((Family::Zookeeper, "zookeeper_root"));
        self
    }

    /// ZooKeeper: auth info sent by every client, e.g. `("digest", "user:password")`. The
    /// credentials are never printed. Validated by [`build`](ConfigBuilder::build) (as
    /// [`ZookeeperAuth::new`](crate::backends::zookeeper::ZookeeperAuth::new)).
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_auth(mut self, scheme: impl Into<String>, credentials: impl Into<String>) -> Self {
        self.zookeeper.auth = Some((scheme.into(), Secret(credentials.into())));
        self.specific.insert((Family::Zookeeper, "zookeeper_auth"));
        self
    }

    /// ZooKeeper: ACL of the nodes the backend creates (default [`AclMode::Auto`]).
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_acl(mut self, acl: AclMode) -> Self {
        self.zookeeper.acl = Some(acl);
        self.specific.insert((Family::Zookeeper, "zookeeper_acl"));
        self
    }

    /// ZooKeeper: bound on opening a session (default 10 s).
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_connection_timeout(mut self, d: Duration) -> Self {
        self.zookeeper.connection_timeout = Some(d);
        self.specific.insert((Family::Zookeeper, "zookeeper_connection_timeout"));
        self
    }

    /// ZooKeeper: connect over TLS, trusting the CA certificates in the PEM file `ca` (like
    /// `SIMBA_ZOOKEEPER_TLS_CA`). The file is read when the configuration is built.
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.zookeeper.tls[0] = Some(ca.into());
        self.specific.insert((Family::Zookeeper, "zookeeper_tls_ca"));
        self
    }

    /// ZooKeeper: the TLS client certificate chain and private key, PEM files (like
    /// `SIMBA_ZOOKEEPER_TLS_CERT` and `SIMBA_ZOOKEEPER_TLS_KEY`). Needs a CA.
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.zookeeper.tls[1] = Some(cert.into());
        self.zookeeper.tls[2] = Some(key.into());
        self.specific.insert((Family::Zookeeper, "zookeeper_tls_identity"));
        self
    }

    /// ZooKeeper: SASL DIGEST-MD5 authentication of every client (like
    /// `SIMBA_ZOOKEEPER_SASL=user:password`). The password is never printed.
    #[cfg(feature = "zookeeper")]
    #[must_use]
    pub fn zookeeper_sasl(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.zookeeper.sasl = Some((user.into(), Secret(password.into())));
        self.specific.insert((Family::Zookeeper, "zookeeper_sasl"));
        self
    }

    /// Disables `kind`'s backend family (like `SIMBA_<BACKEND>_ENABLED=false`): choosing it fails.
    #[must_use]
    pub fn disable(mut self, kind: BackendKind) -> Self {
        self.disabled.push((kind.family(), "disable"));
        self
    }

    /// Applies the selection rules and validates every value, without any I/O.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule: no backend chosen, contradicting choices,
    /// settings for two backends without a choice, a backend whose feature is not compiled in or
    /// that is disabled, a malformed URL, invalid timings or backend options.
    pub fn build(self) -> Result<Config> {
        let mut warnings = self.warnings.clone();
        let endpoint = match &self.url {
            Some((u, _)) => Some(parse_endpoint(u)?),
            None => None,
        };
        let kind = self.select(endpoint.as_ref())?;
        if let Some(feature) = kind.feature().filter(|_| !kind.is_compiled()) {
            return Err(Error::config(format!(
                "the {} backend needs the `{feature}` feature: cargo build --features {feature}",
                kind.name()
            )));
        }
        if let Some((_, label)) = self.disabled.iter().find(|(f, _)| *f == kind.family()) {
            let how = if *label == "disable" { "ConfigBuilder::disable".to_string() } else { format!("{label}=false") };
            return Err(Error::config(format!("the {} backend is disabled ({how})", kind.name())));
        }
        for (family, label) in self.settings_set() {
            if !family.applies_to(kind) {
                warnings.push(format!("{label} is a {} setting and is ignored by the {} backend", family.name(), kind));
            }
        }
        let session = self.session.clone().build()?;
        let endpoint = match (endpoint, kind) {
            (Some(e), _) => Some(e),
            (None, BackendKind::Memory) => None,
            (None, k) => {
                return Err(Error::config(format!("internal: the {k} backend was chosen without a URL")));
            }
        };
        if let Some(d) = self.purge_interval {
            if d.is_zero() {
                return Err(Error::config("purge_interval must be > 0 (SIMBA_PURGE_INTERVAL, e.g. 1m)"));
            }
        }
        // The backend's own options, from its own parsers (no I/O but reading ZooKeeper's TLS files).
        #[allow(unused_mut)]
        let mut backend = BackendSettings::Memory;
        #[cfg(any(feature = "redis", feature = "zookeeper"))]
        if let Some(ep) = endpoint.as_ref() {
            match kind {
                #[cfg(feature = "redis")]
                BackendKind::Redis | BackendKind::RedisCluster => {
                    let url = crate::backends::redis::config::parse_url(&ep.raw.0)?;
                    let options = self.redis.clone().query_timeout(session.query_timeout()).build()?;
                    crate::backends::redis::config::check(&url, &options)?;
                    backend = BackendSettings::Redis(options);
                }
                #[cfg(feature = "zookeeper")]
                BackendKind::Zookeeper => {
                    let (hosts, options) = self.zookeeper.resolve(ep, session.query_timeout())?;
                    backend = BackendSettings::Zookeeper { hosts, options };
                }
                _ => {}
            }
        }
        let endpoint_secrets = endpoint.as_ref().map(Endpoint::secrets).unwrap_or_default();
        let config = Config {
            kind,
            endpoint,
            session,
            purge_interval: self.purge_interval,
            sql_pool_size: self.sql_pool_size,
            backend,
            secrets: self.secrets(endpoint_secrets),
            warnings,
        };
        config.validate_backend_options()?;
        Ok(config)
    }

    /// Every backend-specific setting that was set, with the name it was set under (including the
    /// variables of backends not compiled in).
    fn settings_set(&self) -> Vec<(Family, String)> {
        let mut all: Vec<(Family, String)> = self.specific.iter().map(|(f, l)| (*f, l.to_string())).collect();
        all.extend(self.not_compiled.iter().cloned());
        all
    }

    /// The secrets of the configuration: those of the URL (`endpoint`) and of the backends'
    /// settings (to scrub from third-party error messages).
    fn secrets(&self, endpoint: Vec<String>) -> Vec<Secret> {
        let mut s = endpoint;
        #[cfg(feature = "zookeeper")]
        {
            if let Some((_, p)) = &self.zookeeper.sasl {
                s.push(p.0.clone());
            }
            if let Some((_, c)) = &self.zookeeper.auth {
                s.push(c.0.clone());
                if let Some((_, p)) = c.0.split_once(':') {
                    s.push(p.to_string());
                }
            }
        }
        s.retain(|x| !x.is_empty());
        s.into_iter().map(Secret).collect()
    }

    /// The selection rules of the module docs.
    fn select(&self, endpoint: Option<&Endpoint>) -> Result<BackendKind> {
        match (endpoint, self.backend) {
            (Some(ep), Some((choice, label))) => {
                if choice.agrees_with(ep.kind) {
                    Ok(ep.kind)
                } else {
                    let url_label = self.url.as_ref().map_or("url", |(_, l)| *l);
                    Err(Error::config(format!(
                        "{label}={choice} contradicts {url_label}={} (a {} URL): choose one backend",
                        ep.redacted, ep.kind
                    )))
                }
            }
            (Some(ep), None) => Ok(ep.kind),
            (None, Some((BackendKind::Memory, _))) => Ok(BackendKind::Memory),
            (None, Some((choice, label))) => Err(Error::config(format!(
                "{label}={choice} needs a URL: set SIMBA_URL (or --url), e.g. {}",
                example_url(choice)
            ))),
            (None, None) => {
                let set = self.settings_set();
                let families: BTreeSet<Family> = set.iter().map(|(f, _)| *f).collect();
                let listed = |f: Family| {
                    let names: Vec<&str> = set.iter().filter(|(g, _)| *g == f).map(|(_, l)| l.as_str()).collect();
                    format!("{} ({})", f.name(), names.join(", "))
                };
                if families.len() > 1 {
                    let all: Vec<String> = families.iter().map(|f| listed(*f)).collect();
                    Err(Error::config(format!(
                        "settings for {} backends but no backend chosen: {}; choose one with SIMBA_URL or \
                         SIMBA_BACKEND (the backend is never guessed)",
                        families.len(),
                        all.join(" and ")
                    )))
                } else if let Some(f) = families.first() {
                    Err(Error::config(format!(
                        "{} settings are set but no backend is chosen: {}; set SIMBA_URL (or --url) to choose \
                         the backend (it is never guessed)",
                        f.name(),
                        listed(*f)
                    )))
                } else {
                    Err(Error::config(
                        "no backend chosen: set SIMBA_URL (or --url), e.g. redis://127.0.0.1:6379, \
                         postgres://user@host:5432/db or memory:// (or SIMBA_BACKEND=memory)",
                    ))
                }
            }
        }
    }
}

fn example_url(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Postgres => "postgres://user@127.0.0.1:5432/db",
        BackendKind::Mysql => "mysql://user@127.0.0.1:3306/db",
        BackendKind::Redis => "redis://127.0.0.1:6379",
        BackendKind::RedisCluster => "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        BackendKind::Zookeeper => "zookeeper://127.0.0.1:2181/simba",
        BackendKind::Memory => "memory://",
    }
}

/// The options of the selected backend, from the backend's own parsers.
#[derive(Clone)]
enum BackendSettings {
    /// Memory, or a SQL backend (whose options are built when connecting).
    Memory,
    #[cfg(feature = "redis")]
    Redis(RedisOptions),
    #[cfg(feature = "zookeeper")]
    Zookeeper { hosts: String, options: ZookeeperOptions },
}

/// A validated configuration: which backend, how to reach it, and the session timing.
///
/// `Debug` never shows secrets. See the [module docs](self) for the selection rules.
#[derive(Clone)]
pub struct Config {
    kind: BackendKind,
    endpoint: Option<Endpoint>,
    session: SessionOptions,
    purge_interval: Option<Duration>,
    sql_pool_size: Option<u32>,
    backend: BackendSettings,
    /// Every secret of the configuration, to scrub from third-party error messages.
    secrets: Vec<Secret>,
    warnings: Vec<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("backend", &self.kind).field("url", &self.endpoint).field("session", &self.session);
        if self.kind.is_sql() {
            d.field("purge_interval", &self.purge_interval).field("sql_pool_size", &self.sql_pool_size);
        }
        match &self.backend {
            BackendSettings::Memory => {}
            #[cfg(feature = "redis")]
            BackendSettings::Redis(o) => {
                d.field("redis", o);
            }
            #[cfg(feature = "zookeeper")]
            BackendSettings::Zookeeper { hosts, options } => {
                d.field("zookeeper_hosts", hosts).field("zookeeper", options);
            }
        }
        d.finish()
    }
}

impl Config {
    /// A builder with nothing set.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// Reads and validates the `SIMBA_*` environment variables (see [`ENV_VARS`] and
    /// `docs/configuration.md`). Warnings (ignored settings, unknown variables) are logged and
    /// kept in [`warnings`](Config::warnings).
    ///
    /// # Errors
    /// `InvalidConfig` as [`ConfigBuilder::build`], or for a malformed variable.
    pub fn from_env() -> Result<Config> {
        let c = ConfigBuilder::from_env()?.build()?;
        c.log_warnings();
        Ok(c)
    }

    /// Like [`from_env`](Config::from_env), reading variables through `get`.
    ///
    /// # Errors
    /// As [`from_env`](Config::from_env).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        ConfigBuilder::from_vars(get)?.build()
    }

    /// The configuration of backend URL `url` with default timings.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed URL or a backend that is not compiled in.
    pub fn from_url(url: &str) -> Result<Config> {
        Config::builder().url(url).build()
    }

    /// The selected backend.
    pub fn backend_kind(&self) -> BackendKind {
        self.kind
    }

    /// The URL with its secrets replaced by `***` (`None` for a memory backend chosen without a URL).
    pub fn redacted_url(&self) -> Option<&str> {
        self.endpoint.as_ref().map(|e| e.redacted.as_str())
    }

    /// The hosts of the URL as `host[:port]`.
    pub fn hosts(&self) -> Vec<String> {
        self.endpoint.as_ref().map(|e| e.hosts.iter().map(ToString::to_string).collect()).unwrap_or_default()
    }

    /// The database name of a SQL URL (its path).
    pub fn database(&self) -> Option<&str> {
        self.endpoint.as_ref().filter(|_| self.kind.is_sql()).map(|e| e.path.as_str())
    }

    /// The session timing and metadata.
    pub fn session_options(&self) -> SessionOptions {
        self.session.clone()
    }

    /// The per-call timeout given to the backend (= the session's query timeout).
    pub fn query_timeout(&self) -> Duration {
        self.session.query_timeout()
    }

    /// SQL: the purge interval, when set (the backend's default otherwise).
    pub fn purge_interval(&self) -> Option<Duration> {
        self.purge_interval
    }

    /// Redis: the backend's options (`None` for another backend).
    #[cfg(feature = "redis")]
    pub fn redis_options(&self) -> Option<&RedisOptions> {
        match &self.backend {
            BackendSettings::Redis(o) => Some(o),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Redis: replicas that must acknowledge a new term (0 = off, and for another backend).
    #[cfg(feature = "redis")]
    pub fn redis_wait_replicas(&self) -> u32 {
        self.redis_options().map_or(0, RedisOptions::wait_replicas)
    }

    /// Redis: the eviction-policy check mode (the default for another backend).
    #[cfg(feature = "redis")]
    pub fn redis_eviction(&self) -> EvictionCheck {
        self.redis_options().map(RedisOptions::eviction_check).unwrap_or_default()
    }

    /// ZooKeeper: the backend's options (`None` for another backend).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_options(&self) -> Option<&ZookeeperOptions> {
        match &self.backend {
            BackendSettings::Zookeeper { options, .. } => Some(options),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// ZooKeeper: the root path (the default for another backend).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_root(&self) -> &str {
        self.zookeeper_options().map_or(DEFAULT_ZOOKEEPER_ROOT, ZookeeperOptions::root_path)
    }

    /// ZooKeeper: the effective ACL mode ([`AclMode::Auto`] resolved: `creator-all` with auth or
    /// SASL, else `open`).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_acl(&self) -> AclMode {
        self.zookeeper_options().map(ZookeeperOptions::effective_acl).unwrap_or_default()
    }

    /// ZooKeeper: the TLS CA file, when TLS is configured by a file (URL or variable).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_tls_ca(&self) -> Option<&Path> {
        self.zookeeper_options().and_then(|o| o.tls.as_ref()).and_then(|t| t.ca_file())
    }

    /// ZooKeeper: the SASL user, when SASL is configured (the password is never exposed).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_sasl_user(&self) -> Option<&str> {
        self.zookeeper_options().and_then(|o| o.sasl.as_ref()).map(|s| s.user())
    }

    /// ZooKeeper: the auth scheme, when auth is configured (the credentials are never exposed).
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_auth_scheme(&self) -> Option<&str> {
        self.zookeeper_options().and_then(|o| o.auth.first()).map(|a| a.scheme())
    }

    /// ZooKeeper: the connection timeout.
    #[cfg(feature = "zookeeper")]
    pub fn zookeeper_connection_timeout(&self) -> Option<Duration> {
        self.zookeeper_options().map(|o| o.connection_timeout)
    }

    /// Non-fatal findings of [`build`](ConfigBuilder::build): settings ignored by the chosen
    /// backend, unknown `SIMBA_*` variables. [`from_env`](Config::from_env) also logs them.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Logs [`warnings`](Config::warnings) at warn level.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            log::warn!("simba configuration: {w}");
        }
    }

    /// Creates the backend. A memory backend is new and private to this call (process-local);
    /// network backends connect (and may check the server) here.
    ///
    /// An application may always construct a backend itself and pass it to
    /// [`Session::open`](crate::Session::open) instead.
    ///
    /// # Errors
    /// The backend's errors (`Unavailable`, `Backend`, `InvalidConfig` for a refused startup
    /// check); messages never contain secrets.
    pub fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        log::debug!("connecting to the {} backend at {}", self.kind, self.redacted_url().unwrap_or("memory://"));
        self.connect_inner().map_err(|e| self.scrub(e))
    }

    fn connect_inner(&self) -> Result<Arc<dyn LeaseBackend>> {
        match (self.kind, &self.backend) {
            (BackendKind::Memory, _) => {
                log::info!("simba: using the in-process memory backend (process-local: other processes never see it)");
                Ok(Arc::new(MemoryBackend::new()))
            }
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            (BackendKind::Postgres | BackendKind::Mysql, _) => Ok(Arc::new(self.connect_sql()?)),
            #[cfg(feature = "redis")]
            (BackendKind::Redis | BackendKind::RedisCluster, BackendSettings::Redis(options)) => {
                // The backend parses the URL again (the same parser), splitting Cluster hosts and
                // reading the TLS files.
                let ep = self.endpoint()?;
                Ok(Arc::new(crate::backends::redis::RedisBackend::connect(&ep.raw.0, options.clone())?))
            }
            #[cfg(feature = "zookeeper")]
            (BackendKind::Zookeeper, BackendSettings::Zookeeper { hosts, options }) => {
                Ok(Arc::new(crate::backends::zookeeper::ZookeeperBackend::connect(hosts, options.clone())?))
            }
            #[allow(unreachable_patterns)]
            (other, _) => Err(Error::config(format!(
                "the {other} backend needs the `{f}` feature: cargo build --features {f}",
                f = other.feature().unwrap_or("none")
            ))),
        }
    }

    /// Creates the SQL backend itself (for [`init_schema`](crate::backends::sql::SqlBackend::init_schema)
    /// and other SQL-only operations). No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when the configured backend is not SQL or the URL is rejected by the driver.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub fn connect_sql(&self) -> Result<crate::backends::sql::SqlBackend> {
        self.connect_sql_inner().map_err(|e| self.scrub(e))
    }

    #[cfg(any(feature = "postgres", feature = "mysql"))]
    fn connect_sql_inner(&self) -> Result<crate::backends::sql::SqlBackend> {
        use crate::backends::sql::SqlBackend;
        let ep = self.endpoint()?;
        match self.kind {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => SqlBackend::postgres(&ep.raw.0, self.sql_options()?),
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => SqlBackend::mysql(&ep.raw.0, self.sql_options()?),
            other => Err(Error::config(format!(
                "the {other} backend is not a SQL backend (postgres or mysql){}",
                other
                    .feature()
                    .filter(|_| !other.is_compiled())
                    .map(|f| format!(" and needs the `{f}` feature"))
                    .unwrap_or_default()
            ))),
        }
    }

    #[allow(dead_code)]
    fn endpoint(&self) -> Result<&Endpoint> {
        self.endpoint.as_ref().ok_or_else(|| Error::config(format!("internal: the {} backend has no URL", self.kind)))
    }

    /// The SQL backend options of this configuration.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    fn sql_options(&self) -> Result<crate::backends::sql::SqlOptions> {
        let mut o = crate::backends::sql::SqlOptions::builder().query_timeout(self.query_timeout());
        if let Some(d) = self.purge_interval {
            o = o.purge_interval(d);
        }
        if let Some(n) = self.sql_pool_size {
            o = o.pool_size(n);
        }
        o.build().map_err(|e| Error::config(format!("SQL options: {e}")))
    }

    /// Validates the backend's own options (without I/O).
    fn validate_backend_options(&self) -> Result<()> {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if self.kind.is_sql() {
            self.sql_options()?;
        }
        Ok(())
    }

    /// Replaces an error whose message chain contains a secret with a redacted copy.
    fn scrub(&self, e: Error) -> Error {
        let secrets: Vec<&str> = self.secrets.iter().map(|s| s.0.as_str()).collect();
        let chain = display_chain(&e);
        if secrets.iter().any(|s| chain.contains(*s)) {
            let mut msg = chain;
            for s in &secrets {
                msg = msg.replace(*s, "***");
            }
            Error::new(e.kind(), msg)
        } else {
            e
        }
    }
}
