//! Redis 7 backend (feature `redis`), standalone and Redis Cluster.
//!
//! Keys (braces are real hash tags, so a session's keys share one Cluster slot):
//!
//! | key | type | content |
//! |---|---|---|
//! | `simba:lease:{name}` | hash, never expires | `session`, `token`, `expires` (Cluster: Redis `TIME`, ms; standalone: 2⁵³−1, the term lives with its session); release clears only `session` |
//! | `simba:session:{sid}` | hash, `PX` = lease duration | `metadata`, `duration`, standalone `gen`; once gone, renew, acquire and join fail (standalone: and its terms end) |
//! | `simba:session:{sid}:terms` | hash, same slot | standalone: the session's leases, name → token |
//! | `simba:session:{sid}:leases` | set, same slot | Cluster: the session's leases |
//! | `simba:session:{sid}:groups` | set, same slot | the session's groups |
//! | `simba:group:{group}` | sorted set | members (session ids) scored by expiry in Redis time |
//!
//! Every operation is a Lua script from `lua/` (run by SHA) and every time decision inside the
//! scripts uses Redis `TIME`. Standalone runs one script per operation, and a term lives while
//! its session key does, so renewal writes nothing per lease; on Cluster an operation
//! first calls the session's slot, then one script per other slot involved (see
//! `docs/backends/redis.md`). Release publishes `released` on channel `simba:lease:{name}`; joins
//! and leaves publish on `simba:group:{group}` (on Cluster with `SPUBLISH`, on the key's own shard
//! channel, received by `SSUBSCRIBE` on the slot's master); a dedicated pub/sub thread serves
//! [`LeaseBackend::watch`].
//!
//! TLS: `rediss://` and `rediss+cluster://` with a CA and a client identity ([`RedisTls`], or
//! `?ca=…&cert=…&key=…` in the URL) over rustls; every connection (pool, Cluster router, pub/sub)
//! uses it and the server's certificate is always verified.
//!
//! ```no_run
//! use simba::backends::redis::{RedisBackend, RedisOptions};
//! let backend = RedisBackend::connect("redis://127.0.0.1:6379", RedisOptions::default())?;
//! # Ok::<(), simba::Error>(())
//! ```

mod book;
mod check;
mod cluster;
pub(crate) mod config;
mod conn;
mod listing;
mod pool;
pub(crate) mod port;
mod reply;
mod router;
pub(crate) mod scripts;
mod standalone;
mod tls;
mod watch;

#[cfg(test)]
mod prop_tests;

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

pub use self::config::{EvictionCheck, RedisOptions, RedisOptionsBuilder, DEFAULT_MAX_CONNECTIONS};
pub(crate) use port::{ClusteredScripting, RedisScripting, StandaloneScripting};
pub use tls::RedisTls;

/// The hash slot of a key (the simulated cluster routes by it).
#[cfg(all(feature = "sim-redis", simba_explore))]
pub(crate) use self::router::slot_of;

use self::book::Books;
use self::config::Target;
use self::watch::Watchers;
use crate::backend::{
    Acquire, Capabilities, CheckItem, Holder, KeepAlive, LeaseBackend, ListRequest, Listing, Member, Notification,
    SessionGrant, Topic,
};
use crate::error::{Error, Result};
use crate::types::{validate_metadata, Name, SessionId, Token};

/// The Redis backend. Cheap to clone (clones share connections and the pub/sub thread, which
/// stops once the last clone is dropped).
#[derive(Clone)]
pub struct RedisBackend {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) scripting: Arc<dyn RedisScripting>,
    pub(crate) options: RedisOptions,
    pub(crate) books: Books,
    watchers: Arc<Watchers>,
    /// Whether the scripting port offered a server to subscribe on (no pub/sub thread otherwise,
    /// and candidates poll).
    push: bool,
    /// The TLS files in use (URL and options), for `check()`.
    pub(crate) tls: RedisTls,
}

impl RedisBackend {
    /// Connects to a standalone server (`redis://[user:password@]host:port[/db]`, `unix:///path`, or
    /// over TLS `rediss://…[?ca=/path&cert=/path&key=/path]`), or to a cluster with
    /// `redis+cluster://host1:port,host2:port` (`rediss+cluster://…` over TLS). TLS files come from
    /// the URL and [`RedisOptionsBuilder::tls`]; they are read before any I/O, and the server's
    /// certificate is always verified. Runs the startup check (see [`EvictionCheck`]) and starts
    /// the pub/sub thread.
    ///
    /// # Errors
    /// `InvalidConfig` for a bad URL or options, a TLS file that cannot be read or parsed (named in
    /// the message), or a refused eviction policy; `Unavailable` when the server cannot be reached;
    /// `Backend` when the TLS handshake fails (an unknown CA, a required client certificate).
    pub fn connect(url: &str, options: RedisOptions) -> Result<RedisBackend> {
        RedisBackend::connect_parsed(config::parse_url(url)?, options)
    }

    /// As [`connect`](RedisBackend::connect), for a URL already parsed (by
    /// [`connect`](RedisBackend::connect) or [`crate::Config`]).
    pub(crate) fn connect_parsed(parsed: config::RedisUrl, options: RedisOptions) -> Result<RedisBackend> {
        config::check(&parsed, &options)?;
        let files = parsed.tls.merge(&options.tls)?;
        let limits = options.pool_limits();
        let scripting: Arc<dyn RedisScripting> = match &parsed.target {
            Target::Standalone(url) => Arc::new(StandaloneScripting::open(url, &files, limits)?),
            Target::Cluster(nodes) => Arc::new(ClusteredScripting::open_nodes(nodes, &files, limits)?),
        };
        RedisBackend::build(scripting, options, files)
    }

    /// Connects to Redis Cluster through any of `nodes` (`host:port`, `redis://…`, or
    /// `rediss://…` over TLS, with the TLS files of `options` and of each node's URL).
    ///
    /// # Errors
    /// As [`connect`](RedisBackend::connect); `InvalidConfig` when `wait_replicas` is set (not
    /// available on Cluster) or `nodes` is empty.
    pub fn clustered<S: AsRef<str>>(nodes: &[S], options: RedisOptions) -> Result<RedisBackend> {
        let urls = port::node_urls(nodes);
        let scripting = ClusteredScripting::open(&urls, &options.tls, options.pool_limits())?;
        let files = options.tls.clone();
        RedisBackend::build(Arc::new(scripting), options, files)
    }

    /// Connects to a standalone server described by the application's own
    /// [`redis::ConnectionInfo`] (bring your own configuration: address, credentials, database,
    /// protocol). For TLS, give a `ConnectionAddr::TcpTls` address: with the certificates the
    /// application built into it (`redis::Client::build_with_tls(..).get_connection_info()`), or
    /// without, and then the system's roots or the files of [`RedisOptionsBuilder::tls`]. The
    /// backend still owns its connections: a pool of [`RedisOptions::max_connections`], each
    /// reused for at most [`RedisOptions::max_connection_lifetime`], and its pub/sub connection
    /// (same address and TLS). Runs the startup check and starts the pub/sub thread.
    ///
    /// # Errors
    /// `InvalidConfig` when `info` turns certificate verification off (`insecure`), when
    /// `options.tls()` names files and `info` is not TLS or has certificates of its own, or a file
    /// cannot be read or parsed; otherwise as [`connect`](RedisBackend::connect).
    pub fn from_connection_info(info: redis::ConnectionInfo, options: RedisOptions) -> Result<RedisBackend> {
        let (info, target) = config::own_info(info, &options.tls)?;
        let scripting = StandaloneScripting::from_info(info, target, options.pool_limits())?;
        let files = options.tls.clone();
        RedisBackend::build(Arc::new(scripting), options, files)
    }

    /// Connects to Redis Cluster through the application's own node infos (see
    /// [`from_connection_info`](RedisBackend::from_connection_info); any reachable nodes, the rest
    /// are discovered and reached with the first node's settings: credentials and TLS).
    ///
    /// # Errors
    /// As [`from_connection_info`](RedisBackend::from_connection_info); `InvalidConfig` when
    /// `nodes` is empty, a node is not TCP, the nodes mix plaintext and TLS, or `wait_replicas` is
    /// set (not available on Cluster).
    pub fn cluster_from_connection_infos(
        nodes: Vec<redis::ConnectionInfo>,
        options: RedisOptions,
    ) -> Result<RedisBackend> {
        let own = nodes.into_iter().map(|i| config::own_info(i, &options.tls)).collect::<Result<Vec<_>>>()?;
        let scripting = ClusteredScripting::from_infos(own, options.pool_limits())?;
        let files = options.tls.clone();
        RedisBackend::build(Arc::new(scripting), options, files)
    }

    /// Builds the backend on a custom [`RedisScripting`] (another driver adapter, or a wrapper
    /// that injects faults in tests). Runs the startup check and starts the pub/sub thread. The
    /// adapter owns its connections, so `options.tls()` is not applied to them (build the adapter
    /// with [`StandaloneScripting::with_tls`] / [`ClusteredScripting::with_tls`]); `check()` reports
    /// those files as the ones in use.
    ///
    /// # Errors
    /// As [`connect`](RedisBackend::connect).
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // the test seam and the simulation
    pub(crate) fn with_scripting(scripting: Arc<dyn RedisScripting>, options: RedisOptions) -> Result<RedisBackend> {
        let files = options.tls.clone();
        RedisBackend::build(scripting, options, files)
    }

    fn build(scripting: Arc<dyn RedisScripting>, options: RedisOptions, tls: RedisTls) -> Result<RedisBackend> {
        if scripting.is_clustered() && options.wait_replicas > 0 {
            return Err(Error::config(format!(
                "redis wait_replicas = {} is not available on Redis Cluster ({})",
                options.wait_replicas,
                scripting.target()
            )));
        }
        let books = Books::new(scripting.is_clustered());
        let endpoints = scripting.subscriber_endpoints();
        let push = !endpoints.is_empty();
        let inner = Inner { scripting, options, books, watchers: Watchers::new(), push, tls };
        check::startup(&inner)?;
        if push {
            let sharded = inner.scripting.is_clustered();
            watch::spawn(&inner.watchers, endpoints, inner.options.query_timeout, inner.scripting.target(), sharded)
                .map_err(|e| Error::unavailable("cannot start the redis pub/sub thread").with_source(e))?;
        } else {
            log::warn!(
                "redis {}: the scripting port offers no server to subscribe on; no pub/sub thread, candidates poll",
                inner.scripting.target()
            );
        }
        Ok(RedisBackend { inner: Arc::new(inner) })
    }

    /// The options this backend was built with.
    pub fn options(&self) -> &RedisOptions {
        &self.inner.options
    }

    /// True when connected to Redis Cluster.
    pub fn is_clustered(&self) -> bool {
        self.inner.scripting.is_clustered()
    }
}

impl RedisBackend {
    /// `list` with a `SCAN` walk of at most `steps` calls of `COUNT count` per master (the test
    /// seam: a budget small enough to run out on a test server).
    #[cfg(feature = "internal-testing")]
    pub(crate) fn list_within(&self, request: &ListRequest, count: usize, steps: usize) -> Result<Listing> {
        listing::list(&self.inner, request, listing::ScanBudget { count, steps })
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisBackend")
            .field("target", &self.inner.scripting.target())
            .field("clustered", &self.inner.scripting.is_clustered())
            .field("options", &self.inner.options)
            .finish()
    }
}

impl Inner {
    pub(crate) fn deadline(&self) -> Instant {
        crate::sync::now() + self.options.query_timeout
    }

    /// The deadline of a best-effort clean-up step (releasing a term the call will not report):
    /// the call's own `deadline` while any of it is left, so the clean-up stays within the call's
    /// bound. Only when the call already ran past its deadline — every I/O step ends by it, so the
    /// calling thread itself was held up (scheduling, or a wrapper that delays replies) — does the
    /// clean-up get half a query timeout from now: the call has overrun already, and releasing
    /// the term at once frees the name for others sooner than the next renewal would.
    pub(crate) fn cleanup_deadline(&self, deadline: Instant) -> Instant {
        let now = crate::sync::now();
        if deadline.saturating_duration_since(now) >= Duration::from_millis(1) {
            deadline
        } else {
            now + self.options.query_timeout / 2
        }
    }
}

pub(crate) fn ms(d: Duration) -> String {
    d.as_millis().max(1).to_string()
}

impl LeaseBackend for RedisBackend {
    fn kind(&self) -> &'static str {
        "redis"
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        validate_metadata(metadata)?;
        if lease_duration < Duration::from_millis(1) {
            return Err(Error::config(format!("lease duration {lease_duration:?} must be at least 1ms")));
        }
        let grant = standalone::open_session(&self.inner, lease_duration, metadata)?;
        if self.is_clustered() {
            // The session hash now holds this duration: the session's first acquire can send its
            // session and lease calls together, like every later one (cluster::acquire).
            self.inner.books.with(&grant.id, |b| b.duration = Some(lease_duration));
        }
        Ok(grant)
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        if lease_duration < Duration::from_millis(1) {
            return Err(Error::config(format!("lease duration {lease_duration:?} must be at least 1ms")));
        }
        if self.is_clustered() {
            cluster::keep_alive(&self.inner, session, lease_duration)
        } else {
            standalone::keep_alive(&self.inner, session, lease_duration)
        }
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        if self.is_clustered() {
            cluster::close_session(&self.inner, session)
        } else {
            standalone::close_session(&self.inner, session)
        }
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        if self.is_clustered() {
            cluster::acquire(&self.inner, session, name)
        } else {
            standalone::acquire(&self.inner, session, name)
        }
    }

    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        if self.is_clustered() {
            cluster::release(&self.inner, session, name, token)
        } else {
            standalone::release(&self.inner, session, name, token)
        }
    }

    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        if self.is_clustered() {
            cluster::holder(&self.inner, name)
        } else {
            standalone::holder(&self.inner, name)
        }
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        if self.is_clustered() {
            cluster::join(&self.inner, session, group)
        } else {
            standalone::join(&self.inner, session, group)
        }
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        if self.is_clustered() {
            cluster::leave(&self.inner, session, group)
        } else {
            standalone::leave(&self.inner, session, group)
        }
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        if self.is_clustered() {
            cluster::members(&self.inner, group)
        } else {
            standalone::members(&self.inner, group)
        }
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        // One key on both deployments: the same script.
        standalone::semaphore_limit(&self.inner, name, permits)
    }

    fn call_bound(&self) -> Option<Duration> {
        // Every operation takes one deadline, `query_timeout` from its start, and carries it through
        // every script it runs (Cluster: the session's slot, then one script per other slot, and
        // `members`' one call per member). Both scripting ports give each blocking step only the
        // time left before it: the wait for a pooled connection, a connect (a quarter of the time
        // left: redis-rs applies the connect timeout again to each of up to four setup replies),
        // and each command's write and read (its socket timeouts are set to the time left before
        // every command: `EVALSHA`, `SCRIPT LOAD` on `NOSCRIPT`, `ASKING`, `WAIT`). Cluster routing
        // is the backend's own (`router.rs`): re-reading the slot map after a failure or a `MOVED`,
        // and following `MOVED`/`ASK` redirects, are such steps too. A step that would start with
        // less than a millisecond left is not started, with two exceptions. The read of a small
        // batch's node whose turn comes after another node's read used up the deadline waits up
        // to 2 ms more (`router::DRAIN`): its replies are usually in already. A best-effort release
        // after a reply the calling thread saw only after the deadline only runs once the call has
        // already overrun by scheduling (see `Inner::cleanup_deadline`).
        Some(self.inner.options.query_timeout)
    }

    fn capabilities(&self) -> Capabilities {
        let push = self.inner.push;
        Capabilities { push_release: push, push_membership: push, watch_checks_lease: false, list: true }
    }

    /// Two `SCAN` walks of every master's keyspace (lease and group keys of the prefix, session
    /// keys), each at most about 100 000 keys examined per master (a larger keyspace cuts the
    /// sections it feeds, and `truncated` says so); then the first names and ids in order are
    /// read with the scripts of `holder` and `members`, in pipelined batches. One deadline, the
    /// query timeout, bounds the whole listing. A key `simba:lease:{…}`, `simba:group:{…}` or
    /// `simba:session:{…}` whose inside is no name (session id) fails the listing, naming it;
    /// other keys the walk matches are skipped. See `docs/backends/redis.md` ("Listing").
    fn list(&self, request: &ListRequest) -> Result<Listing> {
        listing::list(&self.inner, request, listing::SCAN_BUDGET)
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        if !self.inner.push {
            return Ok(false);
        }
        self.inner.watchers.register(topic, notify, self.inner.deadline())
    }

    fn check(&self) -> Vec<CheckItem> {
        check::check(&self.inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::DEFAULT_QUERY_TIMEOUT;

    #[test]
    fn options_validate() {
        let o = RedisOptions::builder().build().unwrap();
        assert_eq!(o.query_timeout(), DEFAULT_QUERY_TIMEOUT);
        assert_eq!(o.wait_replicas(), 0);
        assert_eq!(o.eviction_check(), EvictionCheck::Warn);
        assert!(RedisOptions::builder().query_timeout(Duration::ZERO).build().is_err());
        assert!(RedisOptions::builder().max_connections(0).build().is_err());
        let e = RedisOptions::builder().wait_replicas(5000).build().unwrap_err();
        assert!(e.to_string().contains("wait_replicas"), "{e}");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(port::redact("redis://:secret@h:1/0"), "redis://:***@h:1/0");
        assert_eq!(port::redact("redis://u:secret@h:1"), "redis://u:***@h:1");
        assert_eq!(port::redact("redis://h:1"), "redis://h:1");
        let s = StandaloneScripting::new("redis://:secret@127.0.0.1:1", 1).unwrap();
        assert!(!format!("{s:?}").contains("secret"));
        let c = ClusteredScripting::new(&["redis://:secret@127.0.0.1:1"], 1, Duration::from_secs(1)).unwrap();
        assert!(!format!("{c:?}").contains("secret"));
    }

    #[test]
    fn keys_and_tags() {
        assert_eq!(scripts::keys::lease("a.b"), "simba:lease:{a.b}");
        assert_eq!(scripts::keys::session_leases("ff"), "simba:session:{ff}:leases");
        assert_eq!(scripts::keys::session_terms("ff"), "simba:session:{ff}:terms");
        assert_eq!(scripts::keys::tag("simba:group:{g}"), Some("g"));
        assert_eq!(scripts::keys::semaphore("s:1"), "simba:semaphore:{s:1}");
        for s in scripts::SCRIPTS.clustered() {
            assert_eq!(s.sha().len(), 40, "{}", s.name());
        }
    }
}
