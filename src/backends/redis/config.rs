//! The settings of the Redis backend and where they come from: [`RedisOptions`] (built with
//! [`RedisOptionsBuilder`]), [`EvictionCheck`], the `SIMBA_REDIS_*` variables ([`ENV_VARS`]) and
//! the URL forms (`redis://`, `rediss://`, `redis+cluster://`, `rediss+cluster://`, `unix://`).
//! [`crate::Config`] reads them through this module ([`RedisConfig`]); so do
//! [`RedisBackend::connect`](super::RedisBackend::connect) and the scripting ports, so a URL means
//! the same everywhere. A [`crate::Config`] connects with the URL as it parsed it when it was built.

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use redis::{ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use super::tls::{self, RedisTls};
use crate::backend::LeaseBackend;
use crate::backends::registry::{BackendConfig, Knobs, ParsedBackend};
use crate::error::{Error, Result};
use crate::options::DEFAULT_QUERY_TIMEOUT;
use crate::settings::endpoint::{parse_endpoint, url_error, Endpoint};
use crate::settings::kind::{BackendKind, Family};
use crate::settings::redact::redact_url;
use crate::settings::tls_query::{with_query, TlsParams};
use crate::settings::values::{parse_count, parse_duration, shorten};

/// The `SIMBA_REDIS_*` variables ([`RedisOptionsBuilder::from_vars`] and
/// [`Config::from_env`](crate::Config::from_env) read them).
pub(crate) const ENV_VARS: &[&str] = &[
    "SIMBA_REDIS_WAIT_REPLICAS",
    "SIMBA_REDIS_EVICTION",
    "SIMBA_REDIS_MAX_CONNECTIONS",
    "SIMBA_REDIS_MAX_CONNECTION_LIFETIME",
    "SIMBA_REDIS_TLS_CA",
    "SIMBA_REDIS_TLS_CERT",
    "SIMBA_REDIS_TLS_KEY",
];

/// The URL query parameters naming TLS files: CA, client certificate, client key.
const URL_TLS_KEYS: [&str; 3] = ["ca", "cert", "key"];

/// Default number of pooled connections (standalone), or of pooled connections to each node (Cluster).
pub const DEFAULT_MAX_CONNECTIONS: usize = 8;

/// What to do when the server's `maxmemory-policy` may evict Simba's keys (`allkeys-*` can evict
/// a lease hash and restart its token at 1; `volatile-*` can evict a session early).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum EvictionCheck {
    /// Log a warning and carry on (default).
    #[default]
    Warn,
    /// Refuse to construct the backend.
    Refuse,
}

impl FromStr for EvictionCheck {
    type Err = Error;

    /// Parses `warn` or `refuse` (case-insensitive), the values of `SIMBA_REDIS_EVICTION`.
    fn from_str(s: &str) -> Result<EvictionCheck> {
        match s.trim().to_ascii_lowercase().as_str() {
            "warn" => Ok(EvictionCheck::Warn),
            "refuse" => Ok(EvictionCheck::Refuse),
            _ => Err(Error::config(format!("invalid Redis eviction check {:?}: expected warn or refuse", shorten(s)))),
        }
    }
}

/// Settings of a [`RedisBackend`](super::RedisBackend). Build with [`RedisOptions::builder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisOptions {
    pub(crate) query_timeout: Duration,
    pub(crate) wait_replicas: u32,
    pub(crate) eviction_check: EvictionCheck,
    pub(crate) max_connections: usize,
    pub(crate) max_connection_lifetime: Duration,
    pub(crate) tls: RedisTls,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            wait_replicas: 0,
            eviction_check: EvictionCheck::Warn,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connection_lifetime: Duration::MAX,
            tls: RedisTls::default(),
        }
    }
}

impl RedisOptions {
    /// A builder starting from the defaults (query timeout 5 s, no `WAIT`, eviction check warns,
    /// 8 connections).
    pub fn builder() -> RedisOptionsBuilder {
        RedisOptionsBuilder::default()
    }
    /// Bounds every call as a whole: waiting for a pooled connection, connecting, writing, reading,
    /// the `WAIT` of `wait_replicas`, and on Cluster every script of one operation, slot map
    /// re-reads and redirects ([`LeaseBackend::call_bound`](crate::backend::LeaseBackend::call_bound) returns it).
    pub fn query_timeout(&self) -> Duration {
        self.query_timeout
    }
    /// Replicas that must acknowledge a new term (`WAIT`) before acquire reports it; 0 = off.
    pub fn wait_replicas(&self) -> u32 {
        self.wait_replicas
    }
    /// What the startup check does about a risky `maxmemory-policy`.
    pub fn eviction_check(&self) -> EvictionCheck {
        self.eviction_check
    }
    /// Most connections open at once (standalone), or to each node (Cluster).
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }
    /// How long a pooled connection is reused: one older than this is closed when it is next taken
    /// from or returned to the pool, and a new one is opened (default [`Duration::MAX`]: forever).
    pub fn max_connection_lifetime(&self) -> Duration {
        self.max_connection_lifetime
    }
    /// The size and connection lifetime of each pool.
    pub(crate) fn pool_limits(&self) -> super::pool::PoolLimits {
        super::pool::PoolLimits { max: self.max_connections, lifetime: self.max_connection_lifetime }
    }
    /// TLS files (CA, client identity) for `rediss://` / `rediss+cluster://` connections, in
    /// addition to those named in the URL.
    pub fn tls(&self) -> &RedisTls {
        &self.tls
    }
}

/// Builder of [`RedisOptions`].
#[derive(Debug, Clone, Default)]
pub struct RedisOptionsBuilder {
    query_timeout: Option<Duration>,
    wait_replicas: Option<u32>,
    eviction_check: Option<EvictionCheck>,
    max_connections: Option<usize>,
    max_connection_lifetime: Option<Duration>,
    tls: Option<RedisTls>,
}

impl RedisOptionsBuilder {
    /// Per-call timeout: connect, read and write timeouts, and the `WAIT` timeout (default
    /// [`DEFAULT_QUERY_TIMEOUT`], 5 s; between 1 ms and 1 h). Set it to the sessions' renew interval.
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = Some(d);
        self
    }
    /// A new term counts only after this many replicas acknowledge it via `WAIT` within the query
    /// timeout; otherwise acquire releases the term and fails with `Unavailable` (default 0 = off;
    /// not available on Cluster).
    #[must_use]
    pub fn wait_replicas(mut self, n: u32) -> Self {
        self.wait_replicas = Some(n);
        self
    }
    /// Warn (default) or refuse when `maxmemory-policy` may evict Simba's keys.
    #[must_use]
    pub fn eviction_check(mut self, mode: EvictionCheck) -> Self {
        self.eviction_check = Some(mode);
        self
    }
    /// Most connections open at once (standalone), or to each node (Cluster) (default 8, between 1
    /// and 1024).
    #[must_use]
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// Closes a pooled connection once it is this old (when it is next taken from or returned to
    /// the pool) and opens a new one: for servers or proxies that drop long-lived connections, or
    /// to follow DNS changes (default [`Duration::MAX`]: forever; at least 1 s).
    #[must_use]
    pub fn max_connection_lifetime(mut self, d: Duration) -> Self {
        self.max_connection_lifetime = Some(d);
        self
    }

    /// TLS files for `rediss://` and `rediss+cluster://` URLs (a CA instead of the system's roots, a
    /// client identity); the URL may name them too (`?ca=…&cert=…&key=…`), but not differently.
    /// Certificate verification is always on. The files are read when the backend is built.
    #[must_use]
    pub fn tls(mut self, tls: RedisTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule it breaks.
    pub fn build(self) -> Result<RedisOptions> {
        let d = RedisOptions::default();
        let query_timeout = self.query_timeout.unwrap_or(d.query_timeout);
        if query_timeout < Duration::from_millis(1) || query_timeout > Duration::from_secs(3600) {
            return Err(Error::config(format!("redis query_timeout {query_timeout:?} must be between 1ms and 1h")));
        }
        let max_connections = self.max_connections.unwrap_or(d.max_connections);
        if !(1..=1024).contains(&max_connections) {
            return Err(Error::config(format!("redis max_connections {max_connections} must be between 1 and 1024")));
        }
        let max_connection_lifetime = self.max_connection_lifetime.unwrap_or(d.max_connection_lifetime);
        if max_connection_lifetime < Duration::from_secs(1) {
            return Err(Error::config(format!(
                "redis max_connection_lifetime {max_connection_lifetime:?} must be at least 1s (Duration::MAX: forever)"
            )));
        }
        let wait_replicas = self.wait_replicas.unwrap_or(0);
        if wait_replicas > 1000 {
            return Err(Error::config(format!("redis wait_replicas {wait_replicas} must be at most 1000")));
        }
        Ok(RedisOptions {
            query_timeout,
            wait_replicas,
            eviction_check: self.eviction_check.unwrap_or_default(),
            max_connections,
            max_connection_lifetime,
            tls: self.tls.unwrap_or_default(),
        })
    }
}

impl RedisOptionsBuilder {
    /// A builder with the `SIMBA_REDIS_*` variables (in [`crate::config::ENV_VARS`]) read through `get` (empty values
    /// count as unset); later setter calls override them.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<RedisOptionsBuilder> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        RedisOptionsBuilder::default().read_vars(&get, &mut |_| {})
    }

    /// Reads the `SIMBA_REDIS_*` variables through `get` (which yields only non-empty values),
    /// telling `seen` the name of each one that is set.
    pub(crate) fn read_vars(
        mut self,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<RedisOptionsBuilder> {
        let mut var = |name: &'static str| {
            let v = get(name);
            if v.is_some() {
                seen(name);
            }
            v
        };
        if let Some(v) = var("SIMBA_REDIS_MAX_CONNECTIONS") {
            self = self.max_connections(parse_count("SIMBA_REDIS_MAX_CONNECTIONS", &v)? as usize);
        }
        if let Some(v) = var("SIMBA_REDIS_MAX_CONNECTION_LIFETIME") {
            self = self.max_connection_lifetime(parse_duration("SIMBA_REDIS_MAX_CONNECTION_LIFETIME", &v)?);
        }
        if let Some(v) = var("SIMBA_REDIS_WAIT_REPLICAS") {
            let n = v.trim().parse::<u32>().map_err(|_| {
                Error::config(format!(
                    "SIMBA_REDIS_WAIT_REPLICAS={:?} is not a whole number of replicas (0 or more)",
                    shorten(&v)
                ))
            })?;
            self = self.wait_replicas(n);
        }
        if let Some(v) = var("SIMBA_REDIS_EVICTION") {
            let e = v.parse::<EvictionCheck>().map_err(|e| Error::config(format!("SIMBA_REDIS_EVICTION: {e}")))?;
            self = self.eviction_check(e);
        }
        for (i, name) in ["SIMBA_REDIS_TLS_CA", "SIMBA_REDIS_TLS_CERT", "SIMBA_REDIS_TLS_KEY"].into_iter().enumerate() {
            if let Some(v) = var(name) {
                self.tls_slot(i, PathBuf::from(v));
            }
        }
        Ok(self)
    }

    /// Sets one TLS file (0 CA, 1 client certificate, 2 client key), keeping the others.
    pub(crate) fn tls_slot(&mut self, i: usize, path: PathBuf) {
        let tls = self.tls.get_or_insert_with(RedisTls::default);
        if let Some(slot) = tls.slots().into_iter().nth(i) {
            *slot = Some(path);
        }
    }
}

/// The Redis backend's part of the configuration ([`BackendConfig`]): `redis://`,
/// `rediss://`, `redis+cluster://` and `rediss+cluster://` URLs, [`ENV_VARS`], the options of
/// [`RedisOptionsBuilder`].
pub(crate) struct RedisConfig;

impl BackendConfig for RedisConfig {
    fn kinds(&self) -> &'static [BackendKind] {
        &[BackendKind::Redis, BackendKind::RedisCluster]
    }

    fn family(&self) -> Family {
        Family::Redis
    }

    fn env_vars(&self) -> &'static [&'static str] {
        ENV_VARS
    }

    fn read_vars(
        &self,
        knobs: &mut Knobs,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<()> {
        knobs.redis = knobs.redis.clone().read_vars(get, seen)?;
        Ok(())
    }

    fn parse(
        &self,
        _kind: BackendKind,
        ep: &Endpoint,
        knobs: &Knobs,
        query_timeout: Duration,
    ) -> Result<Arc<dyn ParsedBackend>> {
        let url = RedisUrl::from_endpoint(ep)?;
        let options = knobs.redis.clone().query_timeout(query_timeout).build()?;
        check(&url, &options)?;
        Ok(Arc::new(RedisSettings { url, options }))
    }
}

/// The Redis settings of a [`crate::Config`]: the URL as parsed when the configuration was built
/// (what the backend connects with) and the options.
pub(crate) struct RedisSettings {
    url: RedisUrl,
    pub(crate) options: RedisOptions,
}

impl ParsedBackend for RedisSettings {
    fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        Ok(Arc::new(super::RedisBackend::connect_parsed(self.url.clone(), self.options.clone())?))
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("redis", &self.options);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// What a Redis URL points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// One server: the URL for the driver (without the TLS file parameters).
    Standalone(String),
    /// Redis Cluster: one driver URL per seed node, each with the URL's credentials.
    Cluster(Vec<String>),
}

/// A parsed Redis URL: the target and the TLS files its query names.
#[derive(Debug, Clone)]
pub(crate) struct RedisUrl {
    pub(crate) target: Target,
    pub(crate) tls: RedisTls,
    /// The URL with its secrets hidden.
    pub(crate) shown: String,
}

/// Parses a Redis URL, checking everything that can be checked without I/O (the TLS files are
/// read when the backend is built): `redis://[user:password@]host[:port][/db][?driver params]`,
/// `rediss://…[?ca=…&cert=…&key=…]`, `redis+cluster://[user:password@]h1:p1,h2:p2`,
/// `rediss+cluster://…[?ca=…&cert=…&key=…]`, `unix:///path` and `redis+unix:///path`.
///
/// # Errors
/// `InvalidConfig` naming the rule: a fragment (`#insecure` included), more than one host on a
/// standalone URL, a path that is not a database number, a path on Cluster, query parameters
/// other than the TLS files on Cluster, TLS files on a plaintext URL, a URL of another backend.
pub(crate) fn parse_url(url: &str) -> Result<RedisUrl> {
    let url = url.trim();
    let shown = redact_url(url);
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("unix://") || lower.starts_with("redis+unix://") {
        let (rest, tls) = split_url(url)?;
        check_driver_params(&rest, &["db", "user", "pass", "protocol"], &shown)?;
        return Ok(RedisUrl { target: Target::Standalone(rest), tls, shown });
    }
    // The fragment check first: `#insecure` gets its own answer.
    split_url(url)?;
    RedisUrl::from_endpoint(&parse_endpoint(url)?)
}

impl RedisUrl {
    /// The Redis URL of the parsed URL `ep` (see [`parse_url`] for the rules).
    ///
    /// # Errors
    /// As [`parse_url`].
    pub(crate) fn from_endpoint(ep: &Endpoint) -> Result<RedisUrl> {
        let shown = ep.redacted.clone();
        let (rest, tls) = split_url(&ep.raw.0)?;
        let target = match ep.kind {
        BackendKind::Redis => {
            if ep.hosts.len() > 1 {
                return Err(url_error(&shown, "redis takes one host (use redis+cluster:// for a Redis Cluster)"));
            }
            if !ep.path.is_empty() && ep.path.parse::<u32>().is_err() {
                return Err(url_error(
                    &shown,
                    format!("the path must be a database number, not {:?}", shorten(&ep.path)),
                ));
            }
            check_driver_params(&rest, &["protocol"], &shown)?;
            Target::Standalone(rest)
        }
        BackendKind::RedisCluster => {
            if !ep.path.is_empty() {
                return Err(url_error(&shown, "Redis Cluster has no databases: remove the path"));
            }
            if rest.contains('?') {
                return Err(Error::config(format!(
                    "invalid redis URL {shown}: {}:// takes only the query parameters ca=, cert= and key=",
                    ep.scheme
                )));
            }
            let scheme = if ep.scheme.starts_with("rediss") { "rediss" } else { "redis" };
            let userinfo = ep.raw_userinfo.as_ref().map(|u| format!("{}@", u.0)).unwrap_or_default();
            Target::Cluster(ep.hosts.iter().map(|h| format!("{scheme}://{userinfo}{h}")).collect())
        }
        other => {
            return Err(Error::config(format!(
                "{shown} is a {other} URL, not a Redis one: expected redis://, rediss://, redis+cluster://,                  rediss+cluster:// or unix://"
            )))
        }
    };
        Ok(RedisUrl { target, tls, shown })
    }
}

/// Refuses query parameters of `url` (the TLS files already split off) that the driver does not
/// take (`allowed`): it would ignore them silently, so a typo would go unnoticed.
fn check_driver_params(url: &str, allowed: &[&str], shown: &str) -> Result<()> {
    let Some((_, query)) = url.split_once('?') else { return Ok(()) };
    for (k, _) in url::form_urlencoded::parse(query.as_bytes()) {
        if !allowed.contains(&k.as_ref()) {
            return Err(Error::config(format!(
                "invalid redis URL {shown}: unknown query parameter {:?}; expected ca=, cert=, key= (rediss:// only) \
                 and {}",
                shorten(&k),
                allowed.iter().map(|a| format!("{a}=")).collect::<Vec<_>>().join(", ")
            )));
        }
    }
    Ok(())
}

/// Checks what a URL and the options decide together, before any I/O.
///
/// # Errors
/// `InvalidConfig` when `wait_replicas` is set for a Cluster URL, or a TLS file is set in both
/// with different paths.
pub(crate) fn check(url: &RedisUrl, options: &RedisOptions) -> Result<()> {
    if matches!(url.target, Target::Cluster(_)) && options.wait_replicas() > 0 {
        return Err(Error::config(format!(
            "redis_wait_replicas={} (SIMBA_REDIS_WAIT_REPLICAS) is not available on Redis Cluster: set it to 0 or \
             use a standalone redis:// URL",
            options.wait_replicas()
        )));
    }
    url.tls.clone().merge(options.tls())?;
    Ok(())
}

/// The TLS part of a Redis URL: the URL without `ca`/`cert`/`key` (what the driver parses) and
/// the files they name. `#insecure` (the driver's switch that turns verification off) is refused.
///
/// # Errors
/// `InvalidConfig` for `#insecure`, an empty file parameter, or TLS files on a `redis://` URL.
pub(crate) fn split_url(url: &str) -> Result<(String, RedisTls)> {
    let shown = redact_url(url);
    if url.contains('#') {
        return Err(Error::config(format!(
            "invalid redis URL {shown}: a fragment (#…) is not allowed; certificate verification cannot be turned \
             off (#insecure): give the CA that signs the server's certificate with ?ca=/path/ca.pem"
        )));
    }
    let Some((base, query)) = url.split_once('?') else { return Ok((url.to_string(), RedisTls::default())) };
    let invalid = |d: String| Error::config(format!("invalid redis URL {shown}: {d}"));
    let params = TlsParams { names: URL_TLS_KEYS, normalize: TlsParams::exact, invalid: &invalid };
    let mut kept = Vec::new();
    let files = params.split(query, &mut |k, v| {
        kept.push((k.into_owned(), v.into_owned()));
        Ok(())
    })?;
    let mut tls = RedisTls::default();
    for (slot, file) in tls.slots().into_iter().zip(files) {
        *slot = file;
    }
    if !tls.is_empty() && !tls::is_tls_scheme(base) {
        return Err(Error::config(format!(
            "invalid redis URL {shown}: ca=, cert= and key= need TLS: use rediss:// (rediss+cluster:// on Cluster)"
        )));
    }
    let rest = with_query(base, kept);
    Ok((rest, tls))
}

/// The driver's connection info for the driver URL `url` with the TLS `files` applied (the files
/// are read; no network I/O).
///
/// # Errors
/// `InvalidConfig` when the driver rejects the URL, a TLS file cannot be read or parsed, or
/// `files` names files for a plaintext URL.
pub(crate) fn driver_info(url: &str, files: &RedisTls) -> Result<ConnectionInfo> {
    let shown = redact_url(url);
    let certs = tls::certificates(url, files)?;
    let info = url
        .into_connection_info()
        .map_err(|e| Error::config(format!("invalid redis URL {shown}: {e}")).with_source(e))?;
    tls::apply(info, certs.as_ref(), &shown)
}

/// The application's own connection info, checked (certificate verification stays on), with
/// the TLS `files` applied when it is a TLS address without certificates of its own; and the
/// text that shows it in logs and errors (no credentials).
///
/// # Errors
/// `InvalidConfig` when `info` turns verification off (`insecure`), when `files` are set and
/// `info` has certificates of its own or is not TLS, or a file cannot be read or parsed.
pub(crate) fn own_info(info: ConnectionInfo, files: &RedisTls) -> Result<(ConnectionInfo, String)> {
    let shown = show_info(&info);
    match info.addr() {
        ConnectionAddr::TcpTls { insecure: true, .. } => Err(Error::config(format!(
            "the redis ConnectionInfo of {shown} turns certificate verification off (insecure): simba always verifies \
             the server's certificate and host name; give the CA that signs it instead (redis::Client::build_with_tls, \
             or RedisOptions::tls)"
        ))),
        ConnectionAddr::TcpTls { tls_params, .. } => {
            tls::ensure_provider();
            if files.is_empty() {
                return Ok((info, shown));
            }
            if tls_params.is_some() {
                return Err(Error::config(format!(
                    "the redis TLS certificates of {shown} are set twice: in the ConnectionInfo (built with \
                     redis::Client::build_with_tls) and in RedisOptions::tls / SIMBA_REDIS_TLS_*; keep one"
                )));
            }
            let certs = files.load()?;
            Ok((tls::apply(info, Some(&certs), &shown)?, shown))
        }
        _ if !files.is_empty() => Err(Error::config(format!(
            "redis TLS files are set (RedisOptions::tls, SIMBA_REDIS_TLS_*) but the ConnectionInfo of {shown} is not TLS \
             (ConnectionAddr::TcpTls): use a TLS address or remove them"
        ))),
        _ => Ok((info, shown)),
    }
}

/// `redis://host:port[/db]` (`rediss://` for TLS, `unix://path`) of `info`, without credentials.
pub(crate) fn show_info(info: &ConnectionInfo) -> String {
    let host = |h: &str, p: u16| if h.contains(':') { format!("[{h}]:{p}") } else { format!("{h}:{p}") };
    let base = match info.addr() {
        ConnectionAddr::Tcp(h, p) => format!("redis://{}", host(h, *p)),
        ConnectionAddr::TcpTls { host: h, port, .. } => format!("rediss://{}", host(h, *port)),
        ConnectionAddr::Unix(path) => format!("unix://{}", path.display()),
        _ => "redis://<address>".to_string(),
    };
    match info.redis_settings().db() {
        0 => base,
        db => format!("{base}/{db}"),
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Standalone(u) => f.write_str(&redact_url(u)),
            Target::Cluster(nodes) => {
                let shown: Vec<String> = nodes.iter().map(|n| redact_url(n)).collect();
                write!(f, "redis cluster [{}]", shown.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_parameters_are_split_off() {
        let (u, t) = split_url("rediss://:pw@h:1/0?ca=/a%20b/ca.pem&protocol=resp3&cert=/c&key=/k").unwrap();
        assert_eq!(u, "rediss://:pw@h:1/0?protocol=resp3");
        assert_eq!(t, RedisTls::new().ca("/a b/ca.pem").client_identity("/c", "/k"));
        let (u, t) = split_url("redis://h:1").unwrap();
        assert_eq!((u.as_str(), t.is_empty()), ("redis://h:1", true));
        let e = split_url("redis://h:1?ca=/x").unwrap_err();
        assert!(e.to_string().contains("rediss://"), "{e}");
        let e = split_url("rediss://:secret@h:1#insecure").unwrap_err();
        assert!(e.to_string().contains("cannot be turned off") && !e.to_string().contains("secret"), "{e}");
        assert!(split_url("rediss://h:1?ca=").is_err());
        assert!(split_url("rediss://h:1?ca=/a&ca=/b").is_err());
    }

    #[test]
    fn urls_parse_into_targets() {
        let u = parse_url("redis://:pw@h:1/2?protocol=resp3").unwrap();
        assert_eq!(u.target, Target::Standalone("redis://:pw@h:1/2?protocol=resp3".into()));
        let u = parse_url("rediss+cluster://u:p%40w@a:1,[::1]:2/?ca=/ca.pem").unwrap();
        assert_eq!(u.target, Target::Cluster(vec!["rediss://u:p%40w@a:1".into(), "rediss://u:p%40w@[::1]:2".into()]));
        assert_eq!(u.tls, RedisTls::new().ca("/ca.pem"));
        assert_eq!(parse_url("unix:///tmp/r.sock").unwrap().target, Target::Standalone("unix:///tmp/r.sock".into()));
        assert!(parse_url("redis+unix:///tmp/r.sock?db=2&protocol=resp3").is_ok());
        for (bad, needle) in [
            ("redis://a:1,b:2", "takes one host"),
            ("redis://a:1/x", "database number"),
            ("redis+cluster://a:1/0", "no databases"),
            ("redis+cluster://a:1?protocol=resp3", "only the query parameters"),
            ("redis+cluster://a:1,", "empty host"),
            ("zookeeper://a:1", "not a Redis one"),
            ("redis://h:1?ca=/x", "rediss://"),
            ("redis://h:1?protocl=resp3", "unknown query parameter \"protocl\""),
            ("unix:///tmp/r.sock?x=1", "unknown query parameter"),
        ] {
            let e = parse_url(bad).unwrap_err();
            assert!(e.is_invalid_input() && e.to_string().contains(needle), "{bad}: {e}");
        }
    }

    #[test]
    fn a_config_parses_its_redis_url_once() {
        use crate::settings::endpoint::PARSES;
        // Nothing listens on port 1: connecting fails, after the backend's settings were used.
        for url in ["redis://:secret@127.0.0.1:1/0", "redis+cluster://127.0.0.1:1,127.0.0.1:2"] {
            PARSES.with(|n| n.set(0));
            let config = crate::Config::builder().url(url).query_timeout(Duration::from_millis(200)).build().unwrap();
            assert_eq!(PARSES.with(|n| n.get()), 1, "{url}: built");
            let e = config.connect().err().map(|e| e.to_string()).unwrap_or_default();
            assert!(!e.contains("secret"), "{e}");
            assert_eq!(PARSES.with(|n| n.get()), 1, "{url}: connected ({e})");
        }
        // The backend's own constructor parses the URL it is given, once.
        PARSES.with(|n| n.set(0));
        assert!(super::super::RedisBackend::connect(
            "redis://127.0.0.1:1",
            RedisOptions::builder().query_timeout(Duration::from_millis(200)).build().unwrap()
        )
        .is_err());
        assert_eq!(PARSES.with(|n| n.get()), 1);
    }

    #[test]
    fn variables_are_read() {
        let vars = |k: &str| match k {
            "SIMBA_REDIS_WAIT_REPLICAS" => Some("2".to_string()),
            "SIMBA_REDIS_EVICTION" => Some("Refuse".to_string()),
            "SIMBA_REDIS_MAX_CONNECTION_LIFETIME" => Some("10m".to_string()),
            "SIMBA_REDIS_TLS_KEY" => Some("/k".to_string()),
            "SIMBA_REDIS_TLS_CERT" => Some("/c".to_string()),
            _ => None,
        };
        let o = RedisOptionsBuilder::from_vars(vars).unwrap().build().unwrap();
        assert_eq!((o.wait_replicas(), o.eviction_check()), (2, EvictionCheck::Refuse));
        assert_eq!(o.max_connection_lifetime(), Duration::from_secs(600));
        assert_eq!(o.tls(), &RedisTls::new().client_identity("/c", "/k"));
        let e = RedisOptionsBuilder::from_vars(|k| (k == "SIMBA_REDIS_MAX_CONNECTION_LIFETIME").then(|| "0s".into()))
            .unwrap()
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("at least 1s"), "{e}");
        for v in ENV_VARS {
            assert!(crate::config::ENV_VARS.contains(v), "{v}");
        }
    }
}
