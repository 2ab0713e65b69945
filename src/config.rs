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

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::LeaseBackend;
use crate::error::{display_chain, Error, Result};
use crate::memory::MemoryBackend;
use crate::options::{SessionOptions, SessionOptionsBuilder};

/// Default ZooKeeper root path.
pub const DEFAULT_ZOOKEEPER_ROOT: &str = "/simba";
/// Default ZooKeeper port, used for hosts written without one.
pub const DEFAULT_ZOOKEEPER_PORT: u16 = 2181;

/// Every environment variable [`Config::from_env`] reads.
pub const ENV_VARS: &[&str] = &[
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
    "SIMBA_PURGE_INTERVAL",
    "SIMBA_SQL_POOL_SIZE",
    "SIMBA_REDIS_WAIT_REPLICAS",
    "SIMBA_REDIS_EVICTION",
    "SIMBA_REDIS_MAX_CONNECTIONS",
    "SIMBA_REDIS_TLS_CA",
    "SIMBA_REDIS_TLS_CERT",
    "SIMBA_REDIS_TLS_KEY",
    "SIMBA_ZOOKEEPER_ROOT",
    "SIMBA_ZOOKEEPER_AUTH",
    "SIMBA_ZOOKEEPER_ACL",
    "SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT",
    "SIMBA_ZOOKEEPER_TLS_CA",
    "SIMBA_ZOOKEEPER_TLS_CERT",
    "SIMBA_ZOOKEEPER_TLS_KEY",
    "SIMBA_ZOOKEEPER_SASL",
];

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

/// What the Redis backend does when `maxmemory-policy` may evict its keys (any `allkeys-*` or
/// `volatile-*` policy: evicting a lease hash restarts its token at 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisEviction {
    /// Log a loud warning and carry on (default).
    #[default]
    Warn,
    /// Refuse to start: `connect` fails with `InvalidConfig`.
    Refuse,
}

impl FromStr for RedisEviction {
    type Err = Error;

    /// Parses `warn` or `refuse` (case-insensitive).
    fn from_str(s: &str) -> Result<RedisEviction> {
        match s.trim().to_ascii_lowercase().as_str() {
            "warn" => Ok(RedisEviction::Warn),
            "refuse" => Ok(RedisEviction::Refuse),
            _ => Err(Error::config(format!("invalid Redis eviction check {:?}: expected warn or refuse", shorten(s)))),
        }
    }
}

/// The ACL of every ZooKeeper node the backend creates.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ZookeeperAcl {
    /// `creator-all` when auth (or SASL) is configured, `open` otherwise (default).
    #[default]
    Auto,
    /// `OPEN_ACL_UNSAFE`: anyone who reaches the ensemble may delete or forge nodes.
    Open,
    /// `CREATOR_ALL_ACL`: only the authenticated identity that created a node may touch it. Needs auth.
    CreatorAll,
    /// An explicit list of `scheme:id:permissions` entries, e.g. `world:anyone:r` and
    /// `digest:simba:<base64 sha1>:cdrwa` (validated when the configuration is built).
    Custom(Vec<String>),
}

impl ZookeeperAcl {
    /// `open` or `creator-all` after resolving `auto` against whether auth is configured.
    pub fn resolve(self, has_auth: bool) -> ZookeeperAcl {
        match self {
            ZookeeperAcl::Auto if has_auth => ZookeeperAcl::CreatorAll,
            ZookeeperAcl::Auto => ZookeeperAcl::Open,
            other => other,
        }
    }
}

impl FromStr for ZookeeperAcl {
    type Err = Error;

    /// Parses `auto`, `open` or `creator-all` (case-insensitive), or a comma-separated list of
    /// `scheme:id:permissions` entries (e.g. `world:anyone:r,sasl:simba:cdrwa`).
    fn from_str(s: &str) -> Result<ZookeeperAcl> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(ZookeeperAcl::Auto),
            "open" => Ok(ZookeeperAcl::Open),
            "creator-all" | "creator_all" => Ok(ZookeeperAcl::CreatorAll),
            _ if s.contains(':') => {
                let entries: Vec<String> = s.split(',').map(|e| e.trim().to_string()).collect();
                if entries.iter().any(|e| e.matches(':').count() < 2) {
                    return Err(Error::config(format!(
                        "invalid ZooKeeper ACL list {:?}: expected comma-separated scheme:id:permissions \
                         entries, e.g. world:anyone:r,sasl:simba:cdrwa",
                        shorten(s)
                    )));
                }
                Ok(ZookeeperAcl::Custom(entries))
            }
            _ => Err(Error::config(format!(
                "invalid ZooKeeper ACL mode {:?}: expected auto, open, creator-all or a list of \
                 scheme:id:permissions entries",
                shorten(s)
            ))),
        }
    }
}

/// A string that is never printed.
#[derive(Clone, PartialEq, Eq)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// ZooKeeper SASL DIGEST-MD5 user and password; the password is never printed.
#[derive(Clone, PartialEq, Eq)]
struct ZkSasl {
    user: String,
    password: Secret,
}

impl fmt::Debug for ZkSasl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DIGEST-MD5 {}:<redacted>", self.user)
    }
}

/// A ZooKeeper auth info (scheme and credentials); the credentials are never printed.
#[derive(Clone, PartialEq, Eq)]
struct ZkAuth {
    scheme: String,
    credentials: Secret,
}

impl fmt::Debug for ZkAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:<redacted>", self.scheme)
    }
}

fn zk_auth(scheme: &str, credentials: &str, label: &str) -> Result<ZkAuth> {
    if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(Error::config(format!(
            "invalid {label}: the scheme {:?} must be ASCII letters and digits; expected scheme:credentials, \
             e.g. digest:user:password",
            shorten(scheme)
        )));
    }
    if credentials.is_empty() {
        return Err(Error::config(format!(
            "invalid {label}: empty credentials; expected scheme:credentials, e.g. digest:user:password"
        )));
    }
    if scheme == "digest" && !credentials.contains(':') {
        return Err(Error::config(format!(
            "invalid {label}: digest credentials must be user:password (the value is not shown)"
        )));
    }
    Ok(ZkAuth { scheme: scheme.to_string(), credentials: Secret(credentials.to_string()) })
}

/// One host of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
struct HostPort {
    host: String,
    port: Option<u16>,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = self.host.contains(':') && !self.host.starts_with('[');
        match (bracket, self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

/// A parsed backend URL. `raw` holds the original text (with secrets) for the drivers.
#[derive(Clone)]
struct Endpoint {
    kind: BackendKind,
    raw: Secret,
    /// The userinfo exactly as written (percent-encoded), for rebuilding per-host URLs.
    raw_userinfo: Option<Secret>,
    hosts: Vec<HostPort>,
    username: Option<String>,
    password: Option<Secret>,
    /// Percent-decoded path without the leading `/` of the authority ("" when none).
    path: String,
    redacted: String,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// Query keys whose values are hidden in redacted URLs. libpq's TLS file parameters
/// (`sslrootcert`, `sslcert`, `sslkey`) name files, not secrets: they stay visible, so errors
/// about those files can name them (`sslpassword` is hidden).
fn sensitive_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    if matches!(k.as_str(), "sslrootcert" | "sslcert" | "sslkey") {
        return false;
    }
    ["pass", "secret", "token", "auth", "key", "credential", "cert"].iter().any(|s| k.contains(s))
}

/// `raw` with its secrets replaced by `***`: the password of the URL's userinfo, the values of
/// sensitive query parameters (`password`, `sslpassword`, `token`, …) and, in a libpq-style
/// `key=value` list, the values of sensitive keys. Works on text that is not a valid URL too
/// (best effort, erring on hiding too much): the userinfo ends at the *last* `@`, so a password
/// with an unencoded `/`, `?` or `@` is still hidden, and text without `://` shows only a
/// scheme-like prefix. This is the one redaction helper of the crate: every backend, the
/// configuration and the CLI show URLs through it.
pub fn redact_url(raw: &str) -> String {
    let is_scheme = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    // "…://…" is a URL unless what precedes "://" is a key=value list (an odd value).
    let url = raw.split_once("://").filter(|(s, _)| !s.contains(|c: char| c == '=' || c.is_whitespace()));
    let Some((scheme, rest)) = url else {
        if raw.split_whitespace().next().is_some_and(|t| t.contains('=')) {
            return redact_key_values(raw);
        }
        // Without "://" there is no userinfo to find; show only a scheme-like prefix.
        return match raw.split_once(':') {
            Some((s, _)) if is_scheme(s) => format!("{}:…", shorten(s)),
            _ => "<unparsable URL>".to_string(),
        };
    };
    // Up to the last '@' is user info when a ':' comes before any '/', '?' or '#' (everything
    // after that ':' is hidden, so an unencoded '/', '?', '#' or '@' in a password is too) or
    // when it is a plain user name; otherwise the '@' belongs to the path or query (whose
    // sensitive values are hidden below).
    let (userinfo, rest) = match rest.rfind('@').map(|at| rest.split_at(at)) {
        Some((userinfo, hosts)) => {
            let delim = userinfo.find(['/', '?', '#']);
            match userinfo.split_once(':') {
                Some((user, _)) if delim.is_none_or(|d| user.len() < d) => (format!("{user}:***"), hosts),
                None if delim.is_none() => (userinfo.to_string(), hosts),
                _ => (String::new(), rest),
            }
        }
        None => (String::new(), rest),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (hosts, tail) = rest.split_at(end);
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let path = path.split('#').next().unwrap_or_default();
    let mut out = format!("{scheme}://{userinfo}{hosts}{path}");
    if let Some(q) = query {
        let q = q.split('#').next().unwrap_or_default();
        let parts: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if sensitive_key(k) => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&parts.join("&"));
    }
    out
}

/// A libpq-style `key=value key2='quoted value'` list with the values of sensitive keys hidden
/// (all of a quoted value, and, when a quote is not closed, everything after it).
fn redact_key_values(raw: &str) -> String {
    let mut in_secret_quote = false;
    raw.split_whitespace()
        .map(|word| {
            if in_secret_quote {
                in_secret_quote = !word.ends_with('\'');
                return "***".to_string();
            }
            match word.split_once('=') {
                Some((k, v)) if sensitive_key(k) => {
                    in_secret_quote = v.starts_with('\'') && (v.len() == 1 || !v.ends_with('\''));
                    format!("{k}=***")
                }
                _ => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn url_error(redacted: &str, why: impl fmt::Display) -> Error {
    Error::config(format!(
        "invalid backend URL {redacted}: {why}; expected e.g. postgres://user@host:5432/db, mysql://user@host:3306/db, \
         redis://host:6379, redis+cluster://h1:7000,h2:7001, zookeeper://h1:2181,h2:2181/root or memory://"
    ))
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn parse_host(host: &str, redacted: &str) -> Result<HostPort> {
    if host.is_empty() {
        return Err(url_error(redacted, "empty host"));
    }
    let u =
        url::Url::parse(&format!("simba://{host}")).map_err(|e| url_error(redacted, format!("host {host:?}: {e}")))?;
    let h = u.host_str().unwrap_or_default();
    if h.is_empty() {
        return Err(url_error(redacted, format!("host {host:?} has no host name")));
    }
    if !u.username().is_empty() || u.password().is_some() || !matches!(u.path(), "" | "/") {
        return Err(url_error(redacted, format!("host {host:?} is not host[:port]")));
    }
    let h = h.trim_start_matches('[').trim_end_matches(']').to_string();
    Ok(HostPort { host: h, port: u.port() })
}

/// Parses a backend URL (see the module docs for the forms).
fn parse_endpoint(raw: &str) -> Result<Endpoint> {
    let raw = raw.trim();
    let redacted = redact_url(raw);
    let Some((scheme, rest)) = raw.split_once("://") else {
        return Err(url_error(&redacted, "missing scheme:// (the backend is never guessed)"));
    };
    let kind = match scheme.to_ascii_lowercase().as_str() {
        "postgres" | "postgresql" => BackendKind::Postgres,
        "mysql" | "mariadb" => BackendKind::Mysql,
        "redis" | "rediss" => BackendKind::Redis,
        "redis+cluster" | "rediss+cluster" => BackendKind::RedisCluster,
        "zookeeper" | "zk" => BackendKind::Zookeeper,
        "memory" => BackendKind::Memory,
        other => return Err(url_error(&redacted, format!("unknown scheme {:?}", shorten(other)))),
    };
    if rest.contains('#') {
        return Err(url_error(&redacted, "a fragment (#…) is not allowed"));
    }
    if kind == BackendKind::Memory {
        if !rest.is_empty() && rest != "/" {
            return Err(url_error(&redacted, "memory:// takes nothing after the scheme"));
        }
        return Ok(Endpoint {
            kind,
            raw: Secret(raw.to_string()),
            raw_userinfo: None,
            hosts: Vec::new(),
            username: None,
            password: None,
            path: String::new(),
            redacted,
        });
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    if userinfo.is_none() && tail.contains('@') {
        // The authority ends at the first '/' or '?', so `user:pa/ss@host` has its '@' here: what
        // looks like a host, path or query would hold part of the password. Show none of it.
        return Err(url_error(
            &redacted,
            "an '@' after the host: percent-encode '/', '?', '#' and '@' in the user name and password \
             (%2F, %3F, %23, %40), and '@' anywhere else",
        ));
    }
    let (username, password) = match userinfo {
        None => (None, None),
        Some(ui) => {
            let (u, p) = match ui.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (ui, None),
            };
            let user = percent_decode(u);
            (Some(user).filter(|u| !u.is_empty()), p.map(|p| Secret(percent_decode(p))))
        }
    };
    let hosts = hostlist.split(',').map(|h| parse_host(h, &redacted)).collect::<Result<Vec<_>>>()?;
    // The query belongs to the backend (its own options parse it: TLS files, libpq options).
    let path = tail.split_once('?').map_or(tail, |(p, _)| p);
    let path = percent_decode(path.strip_prefix('/').unwrap_or(path));
    let multi = hosts.len() > 1;
    match kind {
        BackendKind::Mysql | BackendKind::Redis if multi => {
            return Err(url_error(
                &redacted,
                format!("{} takes one host (use redis+cluster:// for a Redis Cluster)", kind.name()),
            ))
        }
        BackendKind::Redis if !path.is_empty() && path.parse::<u32>().is_err() => {
            return Err(url_error(&redacted, format!("the path must be a database number, not {:?}", shorten(&path))))
        }
        BackendKind::RedisCluster if !path.is_empty() => {
            return Err(url_error(&redacted, "Redis Cluster has no databases: remove the path"))
        }
        BackendKind::Postgres | BackendKind::Mysql if path.is_empty() => {
            return Err(url_error(&redacted, "missing database name, e.g. /simba"))
        }
        BackendKind::Zookeeper if password.is_some() && username.is_none() => {
            return Err(url_error(&redacted, "ZooKeeper digest auth needs user:password@"))
        }
        _ => {}
    }
    Ok(Endpoint {
        kind,
        raw: Secret(raw.to_string()),
        raw_userinfo: userinfo.map(|u| Secret(u.to_string())),
        hosts,
        username,
        password,
        path,
        redacted,
    })
}

/// Parses a duration like `15s`, `500ms`, `1m 30s` (humantime syntax; a unit is required).
///
/// # Errors
/// `InvalidConfig` naming `what` and the value.
pub fn parse_duration(what: &str, value: &str) -> Result<Duration> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        Error::config(format!("{what}={:?} is not a duration ({e}): write e.g. 15s, 500ms or 1m 30s", shorten(value)))
    })
}

/// Parses a drift like `0.01` or `1%` (a fraction, or a percentage with `%`); `SIMBA_DRIFT` and
/// the CLI's `--drift` both use it.
///
/// # Errors
/// `InvalidConfig` naming `what` and the value.
pub fn parse_drift(what: &str, value: &str) -> Result<f64> {
    let v = value.trim();
    let parsed = match v.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => v.parse::<f64>(),
    };
    parsed.map_err(|_| {
        Error::config(format!(
            "{what}={:?} is not a number: write a fraction like 0.01 or a percentage like 1%",
            shorten(v)
        ))
    })
}

fn parse_count(what: &str, value: &str) -> Result<u32> {
    value
        .trim()
        .parse::<u32>()
        .map_err(|_| Error::config(format!("{what}={:?} is not a whole number (0 or more)", shorten(value))))
}

fn parse_bool(what: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::config(format!("{what}={:?} is not a boolean: write true or false", shorten(value)))),
    }
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
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
    redis_wait_replicas: Option<u32>,
    redis_eviction: Option<RedisEviction>,
    redis_max_connections: Option<u32>,
    /// Redis TLS files: CA, client certificate, client key.
    redis_tls: [Option<PathBuf>; 3],
    zookeeper_root: Option<String>,
    zookeeper_auth: Option<ZkAuth>,
    zookeeper_acl: Option<ZookeeperAcl>,
    zookeeper_connection_timeout: Option<Duration>,
    zookeeper_tls_ca: Option<PathBuf>,
    zookeeper_tls_identity: (Option<PathBuf>, Option<PathBuf>),
    zookeeper_sasl: Option<ZkSasl>,
    /// Backend-specific settings that were set, with the name they were set under.
    specific: BTreeSet<(Family, &'static str)>,
    warnings: Vec<String>,
}

impl fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConfigBuilder")
            .field("url", &self.url.as_ref().map(|(u, _)| redact_url(u)))
            .field("backend", &self.backend.map(|(b, _)| b))
            .field("session", &self.session)
            .field("purge_interval", &self.purge_interval)
            .field("redis_wait_replicas", &self.redis_wait_replicas)
            .field("redis_eviction", &self.redis_eviction)
            .field("sql_pool_size", &self.sql_pool_size)
            .field("redis_max_connections", &self.redis_max_connections)
            .field("redis_tls", &self.redis_tls)
            .field("zookeeper_root", &self.zookeeper_root)
            .field("zookeeper_auth", &self.zookeeper_auth)
            .field("zookeeper_acl", &self.zookeeper_acl)
            .field("zookeeper_connection_timeout", &self.zookeeper_connection_timeout)
            .field("zookeeper_tls_ca", &self.zookeeper_tls_ca)
            .field("zookeeper_tls_identity", &self.zookeeper_tls_identity)
            .field("zookeeper_sasl", &self.zookeeper_sasl)
            .finish_non_exhaustive()
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
                b.warnings.push(format!("unknown environment variable {k} is ignored (a typo?)"));
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
        if let Some(v) = get("SIMBA_REDIS_MAX_CONNECTIONS") {
            b.redis_max_connections = Some(parse_count("SIMBA_REDIS_MAX_CONNECTIONS", &v)?);
            b.specific.insert((Family::Redis, "SIMBA_REDIS_MAX_CONNECTIONS"));
        }
        if let Some(v) = get("SIMBA_REDIS_WAIT_REPLICAS") {
            let n = v.trim().parse::<u32>().map_err(|_| {
                Error::config(format!(
                    "SIMBA_REDIS_WAIT_REPLICAS={:?} is not a whole number of replicas (0 or more)",
                    shorten(&v)
                ))
            })?;
            b.redis_wait_replicas = Some(n);
            b.specific.insert((Family::Redis, "SIMBA_REDIS_WAIT_REPLICAS"));
        }
        if let Some(v) = get("SIMBA_REDIS_EVICTION") {
            let e = v.parse::<RedisEviction>().map_err(|e| Error::config(format!("SIMBA_REDIS_EVICTION: {e}")))?;
            b.redis_eviction = Some(e);
            b.specific.insert((Family::Redis, "SIMBA_REDIS_EVICTION"));
        }
        for (i, var) in ["SIMBA_REDIS_TLS_CA", "SIMBA_REDIS_TLS_CERT", "SIMBA_REDIS_TLS_KEY"].into_iter().enumerate() {
            if let Some(v) = get(var).filter(|v| !v.trim().is_empty()) {
                b.redis_tls[i] = Some(PathBuf::from(v));
                b.specific.insert((Family::Redis, var));
            }
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_ROOT") {
            b.zookeeper_root = Some(v);
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_ROOT"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_AUTH") {
            // Without a ':' the value may be just a password: never echo it as a scheme.
            let Some((scheme, creds)) = v.split_once(':') else {
                return Err(Error::config(
                    "invalid SIMBA_ZOOKEEPER_AUTH (the value is not shown): expected scheme:credentials, e.g. \
                     digest:user:password",
                ));
            };
            b.zookeeper_auth = Some(zk_auth(scheme, creds, "SIMBA_ZOOKEEPER_AUTH")?);
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_AUTH"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_ACL") {
            let a = v.parse::<ZookeeperAcl>().map_err(|e| Error::config(format!("SIMBA_ZOOKEEPER_ACL: {e}")))?;
            b.zookeeper_acl = Some(a);
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_ACL"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT") {
            b.zookeeper_connection_timeout = Some(parse_duration("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", &v)?);
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_TLS_CA") {
            b.zookeeper_tls_ca = Some(PathBuf::from(v));
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_TLS_CA"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_TLS_CERT") {
            b.zookeeper_tls_identity.0 = Some(PathBuf::from(v));
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_TLS_CERT"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_TLS_KEY") {
            b.zookeeper_tls_identity.1 = Some(PathBuf::from(v));
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_TLS_KEY"));
        }
        if let Some(v) = get("SIMBA_ZOOKEEPER_SASL") {
            let Some((user, password)) = v.split_once(':') else {
                return Err(Error::config(
                    "SIMBA_ZOOKEEPER_SASL: expected user:password (SASL DIGEST-MD5, the server's JAAS user)",
                ));
            };
            b.zookeeper_sasl = Some(ZkSasl { user: user.to_string(), password: Secret(password.to_string()) });
            b.specific.insert((Family::Zookeeper, "SIMBA_ZOOKEEPER_SASL"));
        }
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

    /// Redis: most connections open at once (default 8).
    #[must_use]
    pub fn redis_max_connections(mut self, n: u32) -> Self {
        self.redis_max_connections = Some(n);
        self.specific.insert((Family::Redis, "redis_max_connections"));
        self
    }

    /// Redis standalone only: a new term counts only after this many replicas acknowledged it
    /// with `WAIT` (default 0 = off).
    #[must_use]
    pub fn redis_wait_replicas(mut self, n: u32) -> Self {
        self.redis_wait_replicas = Some(n);
        self.specific.insert((Family::Redis, "redis_wait_replicas"));
        self
    }

    /// Redis: what to do when `maxmemory-policy` may evict Simba's keys (default warn).
    #[must_use]
    pub fn redis_eviction(mut self, e: RedisEviction) -> Self {
        self.redis_eviction = Some(e);
        self.specific.insert((Family::Redis, "redis_eviction"));
        self
    }

    /// Redis over TLS (`rediss://`, `rediss+cluster://`): trust only the CA certificate(s) in this
    /// PEM file instead of the system's roots (the URL's `ca=` does the same).
    #[must_use]
    pub fn redis_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.redis_tls[0] = Some(ca.into());
        self.specific.insert((Family::Redis, "redis_tls_ca"));
        self
    }

    /// Redis over TLS: present this client certificate and key (PEM files; the URL's `cert=` and
    /// `key=` do the same).
    #[must_use]
    pub fn redis_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.redis_tls[1] = Some(cert.into());
        self.redis_tls[2] = Some(key.into());
        self.specific.insert((Family::Redis, "redis_tls_identity"));
        self
    }

    /// ZooKeeper: root path of every node (default `/simba`; a `zookeeper://` URL path sets it too).
    #[must_use]
    pub fn zookeeper_root(mut self, root: impl Into<String>) -> Self {
        self.zookeeper_root = Some(root.into());
        self.specific.insert((Family::Zookeeper, "zookeeper_root"));
        self
    }

    /// ZooKeeper: auth info sent by every client, e.g. `("digest", "user:password")`. The
    /// credentials are never printed. Validated by [`build`](ConfigBuilder::build).
    #[must_use]
    pub fn zookeeper_auth(mut self, scheme: impl Into<String>, credentials: impl Into<String>) -> Self {
        // Validation happens in build(); keep the raw values in a redacting wrapper until then.
        self.zookeeper_auth = Some(ZkAuth { scheme: scheme.into(), credentials: Secret(credentials.into()) });
        self.specific.insert((Family::Zookeeper, "zookeeper_auth"));
        self
    }

    /// ZooKeeper: ACL of the nodes the backend creates (default auto).
    #[must_use]
    pub fn zookeeper_acl(mut self, acl: ZookeeperAcl) -> Self {
        self.zookeeper_acl = Some(acl);
        self.specific.insert((Family::Zookeeper, "zookeeper_acl"));
        self
    }

    /// ZooKeeper: bound on opening a session (default 10 s).
    #[must_use]
    pub fn zookeeper_connection_timeout(mut self, d: Duration) -> Self {
        self.zookeeper_connection_timeout = Some(d);
        self.specific.insert((Family::Zookeeper, "zookeeper_connection_timeout"));
        self
    }

    /// ZooKeeper: connect over TLS, trusting the CA certificates in the PEM file `ca` (like
    /// `SIMBA_ZOOKEEPER_TLS_CA`). The file is read when the configuration is built.
    #[must_use]
    pub fn zookeeper_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
        self.zookeeper_tls_ca = Some(ca.into());
        self.specific.insert((Family::Zookeeper, "zookeeper_tls_ca"));
        self
    }

    /// ZooKeeper: the TLS client certificate chain and private key, PEM files (like
    /// `SIMBA_ZOOKEEPER_TLS_CERT` and `SIMBA_ZOOKEEPER_TLS_KEY`). Needs a CA.
    #[must_use]
    pub fn zookeeper_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.zookeeper_tls_identity = (Some(cert.into()), Some(key.into()));
        self.specific.insert((Family::Zookeeper, "zookeeper_tls_identity"));
        self
    }

    /// ZooKeeper: SASL DIGEST-MD5 authentication of every client (like
    /// `SIMBA_ZOOKEEPER_SASL=user:password`). The password is never printed.
    #[must_use]
    pub fn zookeeper_sasl(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.zookeeper_sasl = Some(ZkSasl { user: user.into(), password: Secret(password.into()) });
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
        for (family, label) in &self.specific {
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
        let redis_wait_replicas = self.redis_wait_replicas.unwrap_or(0);
        if kind == BackendKind::RedisCluster && redis_wait_replicas > 0 {
            return Err(Error::config(format!(
                "redis_wait_replicas={redis_wait_replicas} (SIMBA_REDIS_WAIT_REPLICAS) is not available on Redis \
                 Cluster: set it to 0 or use a standalone redis:// URL"
            )));
        }
        let mut zookeeper_root = DEFAULT_ZOOKEEPER_ROOT.to_string();
        let mut zookeeper_auth = None;
        if kind == BackendKind::Zookeeper {
            let ep = endpoint.as_ref().ok_or_else(|| Error::config("internal: zookeeper without a URL"))?;
            let url_root = if ep.path.is_empty() { None } else { Some(format!("/{}", ep.path)) };
            zookeeper_root = match (url_root, &self.zookeeper_root) {
                (Some(u), Some(s)) if &u != s => {
                    return Err(Error::config(format!(
                        "the ZooKeeper root is set twice with different values: {u:?} in the URL and {s:?} in \
                         SIMBA_ZOOKEEPER_ROOT/zookeeper_root; keep one"
                    )))
                }
                (Some(u), _) => u,
                (None, Some(s)) => s.clone(),
                (None, None) => DEFAULT_ZOOKEEPER_ROOT.to_string(),
            };
            validate_zk_root(&zookeeper_root)?;
            let url_auth = match (&ep.username, &ep.password) {
                (Some(u), Some(p)) => Some(zk_auth("digest", &format!("{u}:{}", p.0), "ZooKeeper URL auth")?),
                (Some(_), None) => {
                    return Err(Error::config(format!(
                        "invalid backend URL {}: ZooKeeper digest auth needs user:password@",
                        ep.redacted
                    )))
                }
                _ => None,
            };
            zookeeper_auth = match (url_auth, &self.zookeeper_auth) {
                (Some(_), Some(_)) => {
                    return Err(Error::config(
                        "ZooKeeper auth is set twice: in the URL (user:password@) and in \
                         SIMBA_ZOOKEEPER_AUTH/zookeeper_auth; keep one",
                    ))
                }
                (Some(a), None) => Some(a),
                (None, Some(a)) => Some(zk_auth(&a.scheme, &a.credentials.0, "ZooKeeper auth")?),
                (None, None) => None,
            };
            if self.zookeeper_acl == Some(ZookeeperAcl::CreatorAll)
                && zookeeper_auth.is_none()
                && self.zookeeper_sasl.is_none()
            {
                return Err(Error::config(
                    "ZooKeeper ACL mode creator-all (SIMBA_ZOOKEEPER_ACL) needs auth (SIMBA_ZOOKEEPER_AUTH=digest:user:\
                     password or zookeeper://user:password@host) or SASL (SIMBA_ZOOKEEPER_SASL): without an \
                     identity the server rejects the ACL",
                ));
            }
            match (&self.zookeeper_tls_ca, &self.zookeeper_tls_identity) {
                (_, (Some(_), None)) | (_, (None, Some(_))) => {
                    return Err(Error::config(
                        "ZooKeeper TLS client identity needs both a certificate and a key \
                         (SIMBA_ZOOKEEPER_TLS_CERT and SIMBA_ZOOKEEPER_TLS_KEY)",
                    ))
                }
                (None, (Some(_), Some(_))) => {
                    return Err(Error::config(
                        "a ZooKeeper TLS client certificate needs the CA that signs the servers' certificates \
                         (SIMBA_ZOOKEEPER_TLS_CA)",
                    ))
                }
                _ => {}
            }
            if let Some(d) = self.zookeeper_connection_timeout {
                if d.is_zero() {
                    return Err(Error::config(
                        "zookeeper_connection_timeout must be > 0 (SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT, e.g. 10s)",
                    ));
                }
            }
        }
        let config = Config {
            kind,
            endpoint,
            session,
            purge_interval: self.purge_interval,
            sql_pool_size: self.sql_pool_size,
            redis_wait_replicas,
            redis_eviction: self.redis_eviction.unwrap_or_default(),
            redis_max_connections: self.redis_max_connections,
            redis_tls: self.redis_tls.clone(),
            zookeeper_root,
            zookeeper_acl: self.zookeeper_acl.clone().unwrap_or_default(),
            zookeeper_connection_timeout: self.zookeeper_connection_timeout,
            zookeeper_auth,
            zookeeper_tls_ca: self.zookeeper_tls_ca.clone(),
            zookeeper_tls_identity: match &self.zookeeper_tls_identity {
                (Some(c), Some(k)) => Some((c.clone(), k.clone())),
                _ => None,
            },
            zookeeper_sasl: self.zookeeper_sasl.clone(),
            warnings,
        };
        config.validate_backend_options()?;
        Ok(config)
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
                let families: BTreeSet<Family> = self.specific.iter().map(|(f, _)| *f).collect();
                let listed = |f: Family| {
                    let names: Vec<&str> = self.specific.iter().filter(|(g, _)| *g == f).map(|(_, l)| *l).collect();
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

/// The ZooKeeper root rule (same as the backend's).
fn validate_zk_root(root: &str) -> Result<()> {
    let rule = "the ZooKeeper root must be an absolute path like /simba: starts with '/', no trailing '/', no \
                empty, '.' or '..' segments, no control characters, not under /zookeeper";
    let bad = |why: &str| Err(Error::config(format!("invalid ZooKeeper root {:?}: {why}; {rule}", shorten(root))));
    if root == "/" {
        return Ok(());
    }
    if !root.starts_with('/') {
        return bad("not absolute");
    }
    if root.ends_with('/') {
        return bad("trailing '/'");
    }
    if root.chars().any(char::is_control) {
        return bad("control character");
    }
    if root[1..].split('/').any(|s| s.is_empty() || s == "." || s == "..") {
        return bad("empty, '.' or '..' segment");
    }
    if root == "/zookeeper" || root.starts_with("/zookeeper/") {
        return bad("/zookeeper is reserved by the server");
    }
    Ok(())
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
    redis_wait_replicas: u32,
    redis_eviction: RedisEviction,
    redis_max_connections: Option<u32>,
    redis_tls: [Option<PathBuf>; 3],
    zookeeper_root: String,
    zookeeper_acl: ZookeeperAcl,
    zookeeper_connection_timeout: Option<Duration>,
    zookeeper_auth: Option<ZkAuth>,
    zookeeper_tls_ca: Option<PathBuf>,
    zookeeper_tls_identity: Option<(PathBuf, PathBuf)>,
    zookeeper_sasl: Option<ZkSasl>,
    warnings: Vec<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("backend", &self.kind).field("url", &self.endpoint).field("session", &self.session);
        if self.kind.is_sql() {
            d.field("purge_interval", &self.purge_interval).field("sql_pool_size", &self.sql_pool_size);
        }
        if matches!(self.kind, BackendKind::Redis | BackendKind::RedisCluster) {
            d.field("redis_wait_replicas", &self.redis_wait_replicas)
                .field("redis_eviction", &self.redis_eviction)
                .field("redis_max_connections", &self.redis_max_connections)
                .field("redis_tls", &self.redis_tls);
        }
        if self.kind == BackendKind::Zookeeper {
            d.field("zookeeper_root", &self.zookeeper_root)
                .field("zookeeper_auth", &self.zookeeper_auth)
                .field("zookeeper_acl", &self.zookeeper_acl())
                .field("zookeeper_connection_timeout", &self.zookeeper_connection_timeout)
                .field("zookeeper_tls_ca", &self.zookeeper_tls_ca)
                .field("zookeeper_tls_identity", &self.zookeeper_tls_identity)
                .field("zookeeper_sasl", &self.zookeeper_sasl);
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

    /// Redis: replicas that must acknowledge a new term (0 = off).
    pub fn redis_wait_replicas(&self) -> u32 {
        self.redis_wait_replicas
    }

    /// Redis: the eviction-policy check mode.
    pub fn redis_eviction(&self) -> RedisEviction {
        self.redis_eviction
    }

    /// ZooKeeper: the root path.
    pub fn zookeeper_root(&self) -> &str {
        &self.zookeeper_root
    }

    /// ZooKeeper: the effective ACL mode (`auto` resolved: `creator-all` with auth or SASL, else
    /// `open`).
    pub fn zookeeper_acl(&self) -> ZookeeperAcl {
        self.zookeeper_acl.clone().resolve(self.zookeeper_auth.is_some() || self.zookeeper_sasl.is_some())
    }

    /// ZooKeeper: the TLS CA file, when TLS is configured.
    pub fn zookeeper_tls_ca(&self) -> Option<&Path> {
        self.zookeeper_tls_ca.as_deref()
    }

    /// ZooKeeper: the SASL user, when SASL is configured (the password is never exposed).
    pub fn zookeeper_sasl_user(&self) -> Option<&str> {
        self.zookeeper_sasl.as_ref().map(|s| s.user.as_str())
    }

    /// ZooKeeper: the auth scheme, when auth is configured (the credentials are never exposed).
    pub fn zookeeper_auth_scheme(&self) -> Option<&str> {
        self.zookeeper_auth.as_ref().map(|a| a.scheme.as_str())
    }

    /// ZooKeeper: the connection timeout, when set (the backend's default otherwise).
    pub fn zookeeper_connection_timeout(&self) -> Option<Duration> {
        self.zookeeper_connection_timeout
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
        match self.kind {
            BackendKind::Memory => {
                log::info!("simba: using the in-process memory backend (process-local: other processes never see it)");
                Ok(Arc::new(MemoryBackend::new()))
            }
            #[cfg(any(feature = "postgres", feature = "mysql"))]
            BackendKind::Postgres | BackendKind::Mysql => Ok(Arc::new(self.connect_sql()?)),
            #[cfg(feature = "redis")]
            BackendKind::Redis => {
                let ep = self.endpoint()?;
                let b = crate::backends::redis::RedisBackend::connect(&ep.raw.0, self.redis_options()?)?;
                Ok(Arc::new(b))
            }
            #[cfg(feature = "redis")]
            BackendKind::RedisCluster => {
                // The backend splits the hosts and reads its TLS parameters (ca=, cert=, key=).
                let ep = self.endpoint()?;
                let b = crate::backends::redis::RedisBackend::connect(&ep.raw.0, self.redis_options()?)?;
                Ok(Arc::new(b))
            }
            #[cfg(feature = "zookeeper")]
            BackendKind::Zookeeper => {
                let ep = self.endpoint()?;
                let hosts: Vec<String> = ep
                    .hosts
                    .iter()
                    .map(|h| {
                        HostPort { host: h.host.clone(), port: Some(h.port.unwrap_or(DEFAULT_ZOOKEEPER_PORT)) }
                            .to_string()
                    })
                    .collect();
                let b =
                    crate::backends::zookeeper::ZookeeperBackend::connect(&hosts.join(","), self.zookeeper_options()?)?;
                Ok(Arc::new(b))
            }
            #[allow(unreachable_patterns)]
            other => Err(Error::config(format!(
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

    /// The Redis backend options of this configuration.
    #[cfg(feature = "redis")]
    fn redis_options(&self) -> Result<crate::backends::redis::RedisOptions> {
        use crate::backends::redis::{EvictionCheck, RedisOptions};
        let mut o = RedisOptions::builder()
            .query_timeout(self.query_timeout())
            .wait_replicas(self.redis_wait_replicas)
            .eviction_check(match self.redis_eviction {
                RedisEviction::Warn => EvictionCheck::Warn,
                RedisEviction::Refuse => EvictionCheck::Refuse,
            });
        if let Some(n) = self.redis_max_connections {
            o = o.max_connections(usize::try_from(n).unwrap_or(usize::MAX));
        }
        let [ca, cert, key] = self.redis_tls.clone();
        let tls = crate::backends::redis::RedisTls::from_files(ca, cert, key);
        o = o.tls(tls);
        o.build().map_err(|e| Error::config(format!("Redis options: {e}")))
    }

    /// The ZooKeeper backend options of this configuration.
    #[cfg(feature = "zookeeper")]
    fn zookeeper_options(&self) -> Result<crate::backends::zookeeper::ZookeeperOptions> {
        use crate::backends::zookeeper::{
            AclEntry, AclMode, ZookeeperAuth, ZookeeperOptions, ZookeeperSasl, ZookeeperTls,
        };
        let mut o = ZookeeperOptions::default().root(self.zookeeper_root.clone()).query_timeout(self.query_timeout());
        if let Some(d) = self.zookeeper_connection_timeout {
            o = o.connection_timeout(d);
        }
        if let Some(a) = &self.zookeeper_auth {
            o = o.auth(ZookeeperAuth::new(a.scheme.clone(), a.credentials.0.as_bytes().to_vec())?);
        }
        o = o.acl(match self.zookeeper_acl() {
            ZookeeperAcl::CreatorAll => AclMode::CreatorAll,
            ZookeeperAcl::Custom(list) => {
                AclMode::Custom(list.iter().map(|e| AclEntry::parse(e)).collect::<Result<Vec<_>>>()?)
            }
            ZookeeperAcl::Auto | ZookeeperAcl::Open => AclMode::Open,
        });
        // zookeeper://…?tls_ca=…&tls_cert=…&tls_key=… (parsed by the backend's module)
        let url_query = self.endpoint.as_ref().and_then(|ep| ep.raw.0.split_once('?')).map(|(_, q)| q);
        let url_tls = crate::backends::zookeeper::tls_from_url_query(url_query.unwrap_or_default())?;
        match (url_tls, &self.zookeeper_tls_ca) {
            (Some(_), Some(_)) => return Err(Error::config(
                "ZooKeeper TLS is set twice: in the URL (tls_ca=…) and in SIMBA_ZOOKEEPER_TLS_CA/zookeeper_tls_ca; \
                     keep one",
            )),
            (Some(tls), None) => o = o.tls(tls),
            (None, Some(ca)) => {
                let mut tls = ZookeeperTls::from_ca_file(ca)?;
                if let Some((cert, key)) = &self.zookeeper_tls_identity {
                    tls = tls.identity_files(cert, key)?;
                }
                o = o.tls(tls);
            }
            (None, None) => {}
        }
        if let Some(s) = &self.zookeeper_sasl {
            o = o.sasl(ZookeeperSasl::digest_md5(&s.user, &s.password.0)?);
        }
        Ok(o)
    }

    /// Validates the backend's own options (without I/O).
    fn validate_backend_options(&self) -> Result<()> {
        match self.kind {
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => {
                self.sql_options()?;
                // The backend's own URL parsing (libpq TLS parameters) and its TLS files.
                crate::backends::sql::validate_postgres_url(&self.endpoint()?.raw.0)?;
            }
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => {
                self.sql_options()?;
            }
            #[cfg(feature = "redis")]
            BackendKind::Redis | BackendKind::RedisCluster => {
                self.redis_options()?;
            }
            #[cfg(feature = "zookeeper")]
            BackendKind::Zookeeper => self.zookeeper_options()?.validate()?,
            _ => {}
        }
        Ok(())
    }

    /// The secrets of this configuration (to scrub from third-party error messages).
    fn secrets(&self) -> Vec<String> {
        let mut s = Vec::new();
        if let Some(ep) = &self.endpoint {
            if let Some(p) = &ep.password {
                s.push(p.0.clone());
            }
            if let Some(u) = &ep.raw_userinfo {
                if let Some((_, p)) = u.0.split_once(':') {
                    s.push(p.to_string());
                }
            }
            if let Some(q) = ep.raw.0.split_once('?').map(|(_, q)| q) {
                for kv in q.split('&') {
                    if let Some((k, v)) = kv.split_once('=') {
                        if sensitive_key(k) {
                            s.push(v.to_string());
                            s.push(percent_decode(v));
                        }
                    }
                }
            }
        }
        if let Some(z) = &self.zookeeper_sasl {
            s.push(z.password.0.clone());
        }
        if let Some(a) = &self.zookeeper_auth {
            s.push(a.credentials.0.clone());
            if let Some((_, p)) = a.credentials.0.split_once(':') {
                s.push(p.to_string());
            }
        }
        s.retain(|x| !x.is_empty());
        s
    }

    /// Replaces an error whose message chain contains a secret with a redacted copy.
    fn scrub(&self, e: Error) -> Error {
        let secrets = self.secrets();
        let chain = display_chain(&e);
        if secrets.iter().any(|s| chain.contains(s.as_str())) {
            let mut msg = chain;
            for s in &secrets {
                msg = msg.replace(s.as_str(), "***");
            }
            Error::new(e.kind(), msg)
        } else {
            e
        }
    }
}
