//! ZooKeeper 3.8 backend (feature `zookeeper`): [`ZookeeperBackend`].
//!
//! One Simba session is one ZooKeeper session on a dedicated client, never reconnected to another
//! session; the session id is the ZooKeeper session id as 16 hex digits. Nodes:
//!
//! | path | type | content |
//! |---|---|---|
//! | `{root}/leases/{name}` | ephemeral | the holder's session id; holder = `ephemeralOwner`, **token = `czxid`** |
//! | `{root}/groups/{group}` | container | reaped by the server once empty |
//! | `{root}/groups/{group}/{sessionId}` | ephemeral | the member's metadata |
//! | `{root}/sessions/{sessionId}` | ephemeral | `"{bound_ms}\n{metadata}"`, read by `holder` (an upper bound on the remaining time) |
//! | `{root}/semaphores/{name}` | persistent | a semaphore's limit in decimal, written by its first use, never changed |
//!
//! Tokens are `czxid`s: zxids are global, so a new term always gets a larger token, even after
//! the parent was deleted or the container reaped (not contiguous). Remaining times are
//! min(lease duration, negotiated session timeout − staleness), where the staleness is how much
//! older the leader's last touch of the session can be than a keep-alive served by a follower
//! (half the servers' tickTime plus the client's ping interval; see the `tick` module): ZooKeeper
//! measures session timeouts with the ensemble's elapsed time, so no clock is compared with
//! anything.
//!
//! Keep-alive reports the session's leases and groups from the server (`getEphemerals` of
//! `{root}`, pipelined with its `sync`), so a lease or member node deleted behind the session's
//! back is reported lost at the next renewal, never from memory.
//!
//! The ZooKeeper client heartbeats by itself; a local watchdog therefore closes any session whose
//! [`keep_alive`](LeaseBackend::keep_alive) was not called within its lease duration, so a stuck
//! process never keeps its leases through the client's own pings. See `docs/backends/zookeeper.md`.

mod barrier;
pub(crate) mod config;
mod errors;
mod exec;
mod listing;
mod liveness;
mod options;
mod paths;
mod probe;
mod semaphores;
mod session;
mod spi;
mod tick;
mod watch;

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use futures::future::{join_all, Either};
use parking_lot::{Condvar, Mutex};
use zookeeper_client::{
    Acl, Client, CreateMode, CreateOptions, Error as ZkError, SaslOptions, SessionState, StateWatcher, TlsOptions,
};

pub(crate) use self::config::ZookeeperSettings;
pub use self::config::DEFAULT_PORT;
pub use self::options::{
    AclEntry, AclMode, ZookeeperAuth, ZookeeperOptions, ZookeeperSasl, ZookeeperTls, DEFAULT_CONNECTION_TIMEOUT,
    DEFAULT_ROOT,
};

use self::barrier::{barrier, barrier_then_read};
use self::config::ZookeeperUrl;
use self::errors::{describe_identity, token_of, zk_error, Fail, AUTH_FAILED_HINT};
use self::exec::run_until;
use self::options::SHARED_SESSION_TIMEOUT;
use self::paths::{decode_session, encode_session, parent, Paths};
use self::session::watchdog;
use self::watch::Watches;
use crate::backend::{
    Acquire, Capabilities, CheckItem, CheckStatus, Holder, KeepAlive, LeaseBackend, ListRequest, Listing, Member,
    Notification, SessionGrant, Topic,
};
use crate::error::{Error, Result};
use crate::types::{validate_metadata, Name, SessionId, Token};

/// Longest the watchdog sleeps between checks (it is woken early when a session opens or the
/// backend is dropped).
const WATCHDOG_MAX_SLEEP: Duration = Duration::from_secs(1);
/// Entries of the connect string the clients get (each host repeated; see [`connect_string`]).
const CONNECT_STRING_ENTRIES: usize = 20;
/// Attempts of a create whose parent keeps vanishing (container reaping) or whose node keeps
/// changing between `create` and `getData`.
const CREATE_ATTEMPTS: usize = 4;

/// The ZooKeeper [`LeaseBackend`]. See the [module docs](self).
///
/// Construct with [`ZookeeperBackend::connect`] or [`ZookeeperBackend::from_url`]; share it with
/// `Arc`. Dropping it closes every session it opened (their ephemeral nodes vanish) and stops its
/// watchdog and watch threads.
pub struct ZookeeperBackend {
    inner: Arc<Inner>,
}

struct Inner {
    hosts: String,
    /// What the clients connect to: `hosts` with each host repeated (see [`connect_string`]).
    connect_string: String,
    /// The backend's identity for messages ([`describe_identity`]).
    who: String,
    opts: ZookeeperOptions,
    paths: Paths,
    acls: Vec<Acl>,
    tls: Option<TlsOptions>,
    sasl: Option<SaslOptions>,
    /// The application's own client options ([`ZookeeperBackend::with_connector`]), cloned for
    /// every client. Never printed: its `Debug` would show SASL passwords.
    connector: Option<zookeeper_client::Connector>,
    sessions: Mutex<HashMap<SessionId, Arc<ZkSession>>>,
    /// Client of the backend's own ZooKeeper session for holder/members/watch reads; replaced
    /// when that session ends. Never used for anything a Simba session owns.
    shared: Mutex<Option<Client>>,
    watches: Watches,
    watchdog: Arc<Signal>,
    /// The servers' `tickTime` as far as known ([`tick`]).
    tick: Mutex<TickState>,
}

/// What the backend knows of the servers' `tickTime`.
#[derive(Default)]
struct TickState {
    tick: Option<Duration>,
    /// A server told it, or every server refused to: not asked again.
    settled: bool,
    asked: Option<Instant>,
}

/// Wakes or stops the watchdog thread.
#[derive(Default)]
struct Signal {
    stop: Mutex<bool>,
    cv: Condvar,
}

/// One Simba session: a dedicated ZooKeeper client.
struct ZkSession {
    id: SessionId,
    zk_id: i64,
    metadata: String,
    negotiated: Duration,
    /// The longest remaining a keep-alive reports: the negotiated timeout less how much older the
    /// leader's last touch of the session can be than the keep-alive ([`tick::safe_timeout`]).
    safe: Duration,
    /// Kept to observe the end of the session after the client was dropped.
    state: StateWatcher,
    client: Mutex<Option<Client>>,
    life: Mutex<Life>,
    leases: Mutex<Leases>,
    /// Groups this session sent a join for and has not confirmedly left since (a superset of its
    /// memberships). Only the fallback of a keep-alive whose membership read failed reports it;
    /// otherwise keep-alive reports what the server has.
    joined: Mutex<HashSet<Name>>,
    /// Releases of one session run one at a time.
    release_lock: Mutex<()>,
}

struct Life {
    /// Closed by the application or the watchdog: never used again.
    closed: bool,
    /// The watchdog closes the session at this instant unless a keep-alive moves it.
    deadline: Instant,
    lease_duration: Duration,
}

#[derive(Default)]
struct Leases {
    /// Leases this session created (name → czxid).
    known: HashMap<Name, Token>,
    /// "Possibly owned": a create was sent and its outcome is unknown (or still in flight: the
    /// count of creates in flight). The next keep-alive checks the owner of those with count 0.
    pending: HashMap<Name, u32>,
}

impl ZookeeperBackend {
    /// Connects to the ensemble `hosts` (`host:port[,host:port…]`, no chroot: put the path in
    /// [`ZookeeperOptions::root`]). Opens the backend's shared reader session at once, so a bad
    /// address fails here.
    ///
    /// # Errors
    /// `InvalidConfig` for invalid options or hosts; `Unavailable` when no session could be opened
    /// within the connection timeout; `Backend` when authentication fails, at once when TLS is
    /// configured and a probe handshake is refused (the server's certificate does not verify, the
    /// server's alert for the client certificate, no TLS at the port; in rustls' words), and after
    /// the connection timeout when a plaintext client meets a host that answers TLS.
    pub fn connect(hosts: &str, options: ZookeeperOptions) -> Result<ZookeeperBackend> {
        options.validate()?;
        validate_hosts(hosts, false)?;
        ZookeeperBackend::start(hosts, options, None)
    }

    /// Connects with the application's own client options (bring your own configuration): every
    /// client the backend opens — one per Simba session and its shared reader — is a clone of
    /// `connector`, so its TLS, SASL, auth infos and connection timeout apply. The backend then
    /// sets the session timeout of each clone (it follows the lease duration) and adds what
    /// `options` configure (auth, SASL, TLS) on top. `connect_string` is `host:port[,host:port…]`
    /// without a chroot, each host optionally written `tcp://host:port` or `tcp+tls://host:port`
    /// (the crate's syntax: hosts without a prefix are TLS when `options` configure TLS,
    /// plaintext otherwise, so a connector with its own TLS needs `tcp+tls://` hosts). The backend
    /// still owns its clients (one ZooKeeper session per Simba session), so the application cannot
    /// starve renewals.
    ///
    /// Not supported (the crate offers no way to read them back, so they are not refused): a
    /// connector that resumes a session (`with_session`), is read-only (`with_readonly`) or
    /// detached (`with_detached`) breaks the one-session-per-Simba-session rule or cannot create
    /// the backend's nodes. [`AclMode::Auto`] looks only at `options`' auth and SASL: set the ACL
    /// mode explicitly when the identity is on the connector.
    ///
    /// # Errors
    /// As [`ZookeeperBackend::connect`].
    pub fn with_connector(
        connect_string: &str,
        connector: zookeeper_client::Connector,
        options: ZookeeperOptions,
    ) -> Result<ZookeeperBackend> {
        options.validate()?;
        validate_hosts(connect_string, true)?;
        ZookeeperBackend::start(connect_string, options, Some(connector))
    }

    fn start(
        hosts: &str,
        options: ZookeeperOptions,
        connector: Option<zookeeper_client::Connector>,
    ) -> Result<ZookeeperBackend> {
        let acls = options.effective_acl().to_acls();
        let tls = options.tls.as_ref().map(ZookeeperTls::to_client_options).transpose()?;
        let sasl = options.sasl.as_ref().map(ZookeeperSasl::to_client_options);
        let watches =
            Watches::start().map_err(|e| Error::backend("cannot start the ZooKeeper watch thread").with_source(e))?;
        let inner = Arc::new(Inner {
            hosts: hosts.to_string(),
            connect_string: connect_string(hosts),
            who: describe_identity(&options),
            paths: Paths::new(&options.root),
            opts: options,
            acls,
            tls,
            sasl,
            connector,
            sessions: Mutex::new(HashMap::new()),
            shared: Mutex::new(None),
            tick: Mutex::new(TickState::default()),
            watches,
            watchdog: Arc::new(Signal::default()),
        });
        let deadline = Instant::now() + inner.opts.connection_timeout;
        if let Some(tls) = &inner.opts.tls {
            inner.probe_tls(tls, deadline)?;
        }
        inner.shared(deadline)?;
        let weak = Arc::downgrade(&inner);
        let signal = Arc::clone(&inner.watchdog);
        thread::Builder::new()
            .name("simba-zk-watchdog".into())
            .spawn(move || watchdog(weak, signal))
            .map_err(|e| Error::backend("cannot start the ZooKeeper watchdog thread").with_source(e))?;
        log::debug!("zookeeper backend connected to {} (root {})", inner.hosts, inner.paths.root());
        Ok(ZookeeperBackend { inner })
    }

    /// Connects using a URL `zookeeper://[user:password@]host1:2181,host2:2181/root` (also
    /// `zk://`; a host without a port uses 2181). The URL's path, when present, replaces
    /// `options`' root; `user:password@` is digest auth (like [`ZookeeperAuth::digest`]). The query
    /// may turn TLS on with percent-encoded PEM file paths: `?tls_ca=/etc/simba/ca.pem` (the CA of
    /// the servers' certificates), plus `&tls_cert=…&tls_key=…` for a client certificate (like
    /// [`ZookeeperOptions::tls`] with [`ZookeeperTls::from_ca_file`] and
    /// [`ZookeeperTls::identity_files`]). The URL means the same as in [`crate::Config`].
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed URL, an unknown query parameter, a TLS file that cannot be
    /// read or parsed (naming it), or auth or TLS set both in the URL and in `options`; otherwise
    /// as [`ZookeeperBackend::connect`].
    pub fn from_url(url: &str, options: ZookeeperOptions) -> Result<ZookeeperBackend> {
        let url = ZookeeperUrl::parse(url)?;
        let hosts = url.hosts.clone();
        ZookeeperBackend::connect(&hosts, url.apply(options)?)
    }

    /// The root path of the backend's nodes.
    pub fn root(&self) -> &str {
        self.inner.paths.root()
    }

    /// The ensemble address this backend connects to.
    pub fn hosts(&self) -> &str {
        &self.inner.hosts
    }
}

impl Drop for ZookeeperBackend {
    fn drop(&mut self) {
        *self.inner.watchdog.stop.lock() = true;
        self.inner.watchdog.cv.notify_all();
    }
}

impl fmt::Debug for ZookeeperBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperBackend")
            .field("hosts", &self.inner.hosts)
            .field("options", &self.inner.opts)
            .field("sessions", &self.inner.sessions.lock().len())
            .field("watched_topics", &self.inner.watches.len())
            .finish()
    }
}

/// The connect string given to the clients: `hosts` with each host repeated until there are at
/// least [`CONNECT_STRING_ENTRIES`] entries (`a:1,b:2` → `a:1,b:2,a:1,b:2,…`).
///
/// Why: after a connection loss the client reconnects by itself, cycling through its entries; it
/// waits `50 ms × position` (+ jitter) before each entry of a cycle, but before the *first* entry
/// of every cycle `min(1 s, entries × 100 ms) × 2^(cycle - 1)`, without a cap but the session's
/// expiry, and it has no setting for that. With one entry every attempt is the first of a cycle, so
/// the waits double from 0.1 s (0.1, 0.2, … 6.4 s): a server back after 7 s was retried only at
/// ~12.7 s, after a 12 s lease (`tests/zk_faults.rs`, `reconnects_within_the_lease_once_the_server_is_back`
/// recorded the attempts at 0, 0.15, 0.4, 0.8, 1.7, 3.3 and 6.6 s). With 20 entries the
/// client tries again at most ~1 s after the previous attempt during the first ~10 s of an
/// outage (a cycle: 1 s, then 50, 100, … 950 ms), at most ~2 s during the next ~11 s, and so on.
/// Repeated entries are the same server: ZooKeeper does not care which entry reconnected.
fn connect_string(hosts: &str) -> String {
    let list: Vec<&str> = hosts.split(',').collect();
    let repeat = CONNECT_STRING_ENTRIES.div_ceil(list.len().max(1));
    let mut out = Vec::with_capacity(repeat * list.len());
    for _ in 0..repeat {
        out.extend_from_slice(&list);
    }
    out.join(",")
}

/// Whether an ACL entry lets every client change nodes (`world:anyone` with more than read).
fn writable_by_anyone(a: &Acl) -> bool {
    use zookeeper_client::Permission;
    a.scheme() == "world"
        && a.id() == "anyone"
        && a.permission() != Permission::READ
        && a.permission() != Permission::NONE
}

/// How long a failed plaintext connect looks for a TLS answer ([`probe::speaks_tls`]).
const SNIFF_TIMEOUT: Duration = Duration::from_secs(2);

/// Checks a connect string `host:port[,…]`; with `prefixes`, each host may be written
/// `tcp://host:port` or `tcp+tls://host:port`.
fn validate_hosts(hosts: &str, prefixes: bool) -> Result<()> {
    if hosts.contains('@') {
        return Err(Error::config(
            "invalid ZooKeeper hosts (not shown: they contain user info, which may hold a password): \
             user:password@ is not supported in the connect string; set auth with SIMBA_ZOOKEEPER_AUTH (ZookeeperOptions::auth in code)",
        ));
    }
    let shown: String = hosts.chars().take(200).collect();
    let bad = |why: &str| {
        Err(Error::config(format!(
            "invalid ZooKeeper hosts {shown:?}: {why}; expected host:port[,host:port…] (the root goes in the options)"
        )))
    };
    if hosts.is_empty() {
        return bad("empty");
    }
    for h in hosts.split(',') {
        let h =
            if prefixes { h.strip_prefix("tcp+tls://").or_else(|| h.strip_prefix("tcp://")).unwrap_or(h) } else { h };
        let Some((host, port)) = h.rsplit_once(':') else {
            return bad("missing :port");
        };
        if host.is_empty() || host.contains(['/', ' ']) {
            return bad("bad host");
        }
        if port.parse::<u16>().map(|p| p == 0).unwrap_or(true) {
            return bad("bad port");
        }
    }
    Ok(())
}

impl Inner {
    /// [`zk_error`] naming this backend's identity.
    fn zk_error(&self, e: ZkError, what: &str) -> Error {
        zk_error(e, what, &self.who)
    }

    /// [`Fail::into_error`] naming this backend's identity.
    fn fail(&self, f: Fail, what: &str, timeout: Duration) -> Error {
        f.into_error(what, timeout, &self.who)
    }

    fn query_deadline(&self) -> Instant {
        Instant::now() + self.opts.query_timeout
    }

    fn create_options(&self, mode: CreateMode) -> CreateOptions<'_> {
        mode.with_acls(self.acls.as_slice().into())
    }

    /// Runs `read` after a [`barrier()`], pipelined (the read then sees every write that returned
    /// on any server of the ensemble), bounded by `deadline`. `Ok(None)`
    /// when the node does not exist.
    fn synced_read<'c, T, F>(
        &self,
        client: &'c Client,
        read: impl FnOnce() -> F,
        deadline: Instant,
        what: &str,
    ) -> Result<Option<T>>
    where
        F: Future<Output = std::result::Result<T, ZkError>> + 'c,
    {
        // Sent in this order: the barrier first.
        let barrier = barrier(client, self.paths.root());
        let res = run_until(barrier_then_read(barrier, read()), deadline);
        match res {
            None => Err(self.fail(Fail::Timeout, what, self.opts.query_timeout)),
            Some(Err(ZkError::NoNode)) => Ok(None),
            Some(Err(e)) => Err(self.zk_error(e, what)),
            Some(Ok(v)) => Ok(Some(v)),
        }
    }

    /// The servers' `tickTime` if one told it (`conf`, [`tick::read_tick`]); asked at the first
    /// open, and again at most every [`tick::RETRY_AFTER`] while a host could not be reached and
    /// none told it. Never asked over TLS (the four-letter commands are plaintext here).
    fn server_tick(&self) -> Option<Duration> {
        if self.tls.is_some() {
            return None;
        }
        {
            let t = self.tick.lock();
            if t.settled || t.asked.is_some_and(|a| a.elapsed() < tick::RETRY_AFTER) {
                return t.tick;
            }
        }
        let read = tick::read_tick(&self.hosts);
        let (known, first) = {
            let mut t = self.tick.lock();
            let first = t.asked.is_none();
            t.tick = read.tick.or(t.tick);
            t.settled = t.tick.is_some() || read.settled;
            t.asked = Some(Instant::now());
            (t.tick, first)
        };
        if first {
            match known {
                Some(tick) => log::debug!("zookeeper at {}: tickTime {tick:?} (conf)", self.hosts),
                None => log::debug!(
                    "zookeeper at {}: no server told its tickTime (conf not allowed by 4lw.commands.whitelist, or \
                     unreachable); assuming ZooKeeper's default {:?}, at most half the session timeout",
                    self.hosts,
                    tick::DEFAULT_TICK
                ),
            }
        }
        known
    }

    /// `simba check`'s `tick` item: the servers' `tickTime`, asked now, which bounds how much of
    /// the negotiated timeout a keep-alive reports ([`tick`]); a server that does not tell it is
    /// "unavailable" with its reason (a warning: the default assumed may be too small).
    fn tick_item(&self) -> CheckItem {
        let assumed = format!(
            "assuming ZooKeeper's default tickTime {:?}, at most half the negotiated timeout: if the servers' \
             tickTime is larger, a keep-alive may report more time than the leader gives the session",
            tick::DEFAULT_TICK
        );
        let (status, detail) = if self.tls.is_some() {
            (
                CheckStatus::Warn,
                format!(
                    "unavailable: the four-letter command conf is asked on plaintext client ports only and this \
                     backend connects with TLS; {assumed}"
                ),
            )
        } else {
            let read = tick::read_tick(&self.hosts);
            match (read.tick, read.why_not) {
                (Some(t), None) => (CheckStatus::Ok, format!("tickTime {t:?} (conf of every server)")),
                (Some(t), Some(why)) => (
                    CheckStatus::Ok,
                    format!("tickTime {t:?}, the largest a server told (conf; not every server told it: {why})"),
                ),
                (None, why) => (
                    CheckStatus::Warn,
                    format!(
                        "unavailable: {} (add conf to 4lw.commands.whitelist); {assumed}",
                        why.unwrap_or_else(|| "no server to ask".into())
                    ),
                ),
            }
        };
        CheckItem { name: "tick".into(), status, detail }
    }

    /// Opens a new ZooKeeper session (a new client) requesting `session_timeout`.
    fn connect_client(&self, session_timeout: Duration, deadline: Instant) -> Result<Client> {
        let template = self.connector.clone().unwrap_or_else(Client::connector);
        let mut c = template.with_session_timeout(session_timeout);
        for a in &self.opts.auth {
            c = c.with_auth(a.scheme(), a.credentials());
        }
        if let Some(sasl) = &self.sasl {
            c = c.with_sasl(sasl.clone());
        }
        let connecting = match &self.tls {
            Some(tls) => Either::Left(c.with_tls(tls.clone()).secure_connect(&self.connect_string)),
            None => Either::Right(c.connect(&self.connect_string)),
        };
        match run_until(connecting, deadline) {
            Some(Ok(client)) => Ok(client),
            Some(Err(ZkError::BadArguments(_))) => {
                Err(Error::config(format!("invalid ZooKeeper connect string {:?}", self.hosts)))
            }
            Some(Err(e @ ZkError::AuthFailed)) => Err(Error::backend(format!(
                "ZooKeeper at {} rejected the backend's authentication ({}); {AUTH_FAILED_HINT}",
                self.hosts, self.who
            ))
            .with_source(e)),
            // Building the TLS client configuration failed before any I/O (e.g. a client key
            // that does not belong to the certificate).
            Some(Err(e @ ZkError::Custom(_))) if self.tls.is_some() => Err(Error::config(format!(
                "the ZooKeeper TLS settings cannot be used: {e}; check that the client key belongs to the \
                 client certificate (ZookeeperTls::identity_files / SIMBA_ZOOKEEPER_TLS_CERT and _KEY / tls_cert \
                 and tls_key)"
            ))),
            Some(Err(e)) => Err(Error::unavailable(format!(
                "cannot open a ZooKeeper session at {} ({}); {}",
                self.hosts,
                self.transport(),
                self.connect_hint()
            ))
            .with_source(e)),
            None if self.tls.is_none() && self.connector.is_none() => {
                // A plaintext connect that timed out: if a host answers TLS, say so (permanent).
                let hosts: Vec<&str> = self.hosts.split(',').collect();
                match probe::speaks_tls(&hosts, Instant::now() + SNIFF_TIMEOUT) {
                    Some(host) => Err(Error::backend(format!(
                        "cannot open a ZooKeeper session at {} within {:?} (plaintext TCP): the server at {host} \
                         answers TLS (a secureClientPort, which closes plaintext connections); configure TLS for \
                         it (ZookeeperOptions::tls / SIMBA_ZOOKEEPER_TLS_CA / tls_ca=…)",
                        self.hosts, self.opts.connection_timeout
                    ))),
                    None => Err(Error::unavailable(format!(
                        "cannot open a ZooKeeper session at {} within {:?} ({}); {}",
                        self.hosts,
                        self.opts.connection_timeout,
                        self.transport(),
                        self.connect_hint()
                    ))),
                }
            }
            None => Err(Error::unavailable(format!(
                "cannot open a ZooKeeper session at {} within {:?} ({}); {}",
                self.hosts,
                self.opts.connection_timeout,
                self.transport(),
                self.connect_hint()
            ))),
        }
    }

    /// Runs the TLS probe ([`probe`]) against the TLS hosts: a conclusive refusal fails at once,
    /// anything else leaves it to the session connect.
    ///
    /// # Errors
    /// `Backend` naming the host, rustls' words (the certificate error or the server's alert) and
    /// what to check.
    fn probe_tls(&self, tls: &ZookeeperTls, deadline: Instant) -> Result<()> {
        let hosts: Vec<&str> = self
            .hosts
            .split(',')
            .filter(|h| !h.starts_with("tcp://"))
            .map(|h| h.strip_prefix("tcp+tls://").unwrap_or(h))
            .collect();
        match probe::probe(&hosts, tls, deadline) {
            None => Ok(()),
            Some(r) => {
                let message = format!(
                    "the ZooKeeper server at {} refused the TLS connection ({}): {}; {}",
                    r.host,
                    if tls.has_identity() { "client certificate presented" } else { "no client certificate" },
                    r.cause,
                    r.hint
                );
                // A certificate refusal is permanent; a connection closed without an answer may be
                // a server at its connection limit.
                Err(if r.transient { Error::unavailable(message) } else { Error::backend(message) })
            }
        }
    }

    /// How the clients connect, for messages and `check`.
    fn transport(&self) -> &'static str {
        match &self.opts.tls {
            Some(t) if t.has_identity() => "TLS, server certificate verified, client certificate presented",
            Some(_) => "TLS, server certificate verified, no client certificate",
            None if self.hosts.contains("tcp+tls://") => "TLS as configured on the application's connector",
            None => "plaintext TCP",
        }
    }

    /// What to check when no session opens. The client library retries every failed connection
    /// attempt (refused TCP connect, refused TLS handshake, connection closed by the server) until
    /// the connection timeout and does not report why an attempt failed, so the message lists the
    /// causes instead of naming one.
    fn connect_hint(&self) -> &'static str {
        if self.opts.tls.is_some() {
            "check that the servers run and that every host is a TLS port (secureClientPort), that the CA \
             (ZookeeperTls / SIMBA_ZOOKEEPER_TLS_CA / tls_ca) signed the server's certificate and that the \
             certificate names the host as written (subject alternative name), and that a client \
             certificate is configured (SIMBA_ZOOKEEPER_TLS_CERT and _KEY / tls_cert and tls_key) when the \
             server requires one (ssl.clientAuth=need); the ZooKeeper client retries a refused TLS \
             handshake until the connection timeout without reporting why it failed"
        } else {
            "check that the servers run and that the hosts are their plaintext client ports (clientPort): a \
             TLS-only server (secureClientPort) closes plaintext connections, configure TLS for it \
             (ZookeeperOptions::tls / SIMBA_ZOOKEEPER_TLS_CA / tls_ca=…)"
        }
    }

    /// The shared reader client, reconnected when its session ended.
    fn shared(&self, deadline: Instant) -> Result<Client> {
        let Some(mut guard) = self.shared.try_lock_until(deadline) else {
            return Err(Error::unavailable(format!(
                "the ZooKeeper reader session at {} is being reopened; retry",
                self.hosts
            )));
        };
        let mut ended = None;
        if let Some(c) = guard.as_ref() {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            ended = Some(format!("zookeeper shared reader session {:?} ended ({})", c.session_id(), c.state()));
        }
        let connected = self.connect_client(SHARED_SESSION_TIMEOUT, deadline);
        if let Ok(c) = &connected {
            *guard = Some(c.clone());
        }
        drop(guard);
        // Logged once the lock is released: the application's logger is user code (issue #36,
        // finding 6).
        if let Some(ended) = ended {
            match &connected {
                Ok(_) => log::info!("{ended}; opened a new one"),
                Err(e) => log::info!("{ended}; opening a new one failed: {e}"),
            }
        }
        connected
    }

    fn session(&self, id: &SessionId) -> Option<Arc<ZkSession>> {
        self.sessions.lock().get(id).cloned()
    }

    /// Creates `dir` (mode `mode`) and its missing ancestors (persistent), all with our ACL.
    fn ensure_dir(&self, client: &Client, dir: &str, mode: CreateMode, deadline: Instant) -> Result<(), Fail> {
        let opts = self.create_options(mode);
        for _ in 0..CREATE_ATTEMPTS {
            match run_until(client.create(dir, &[], &opts), deadline) {
                None => return Err(Fail::Timeout),
                Some(Ok(_)) | Some(Err(ZkError::NodeExists)) => return Ok(()),
                Some(Err(ZkError::NoNode)) => {
                    if let Some(p) = parent(dir) {
                        let popts = self.create_options(CreateMode::Persistent);
                        match run_until(client.mkdir(p, &popts), deadline) {
                            None => return Err(Fail::Timeout),
                            Some(Ok(())) => {}
                            Some(Err(e)) => return Err(Fail::Zk(e)),
                        }
                    }
                }
                Some(Err(e)) => return Err(Fail::Zk(e)),
            }
        }
        Err(Fail::Zk(ZkError::NoNode))
    }

    /// Creates the ephemeral node `path`; creates its parent `dir` (mode `dir_mode`) when missing.
    /// `Ok(Some(czxid, owner))` when created, `Ok(None)` when it exists.
    fn create_ephemeral(
        &self,
        client: &Client,
        path: &str,
        data: &[u8],
        dir_mode: CreateMode,
        deadline: Instant,
    ) -> Result<Option<i64>, Fail> {
        let opts = self.create_options(CreateMode::Ephemeral);
        for _ in 0..CREATE_ATTEMPTS {
            match run_until(client.create(path, data, &opts), deadline) {
                None => return Err(Fail::Timeout),
                Some(Ok((stat, _))) => return Ok(Some(stat.czxid)),
                Some(Err(ZkError::NodeExists)) => return Ok(None),
                Some(Err(ZkError::NoNode)) => match parent(path) {
                    Some(dir) => self.ensure_dir(client, dir, dir_mode, deadline)?,
                    None => return Err(Fail::Zk(ZkError::NoNode)),
                },
                Some(Err(e)) => return Err(Fail::Zk(e)),
            }
        }
        Err(Fail::Zk(ZkError::NoNode))
    }

    fn acquire_once(
        &self,
        s: &ZkSession,
        client: &Client,
        name: &Name,
        deadline: Instant,
    ) -> Result<Option<i64>, Fail> {
        let path = self.paths.lease(name);
        for _ in 0..CREATE_ATTEMPTS {
            if let Some(czxid) =
                self.create_ephemeral(client, &path, s.id.as_str().as_bytes(), CreateMode::Persistent, deadline)?
            {
                return Ok(Some(czxid));
            }
            // It exists: ours (idempotent re-acquire, or a create whose reply was lost) or busy.
            match run_until(client.get_data(&path), deadline) {
                None => return Err(Fail::Timeout),
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id => return Ok(Some(stat.czxid)),
                Some(Ok(_)) => return Ok(None),
                Some(Err(ZkError::NoNode)) => continue, // freed meanwhile: try again
                Some(Err(e)) => return Err(Fail::Zk(e)),
            }
        }
        Err(Fail::Timeout)
    }

    /// `check`'s probe of what opening a session and acquiring a lease need: it creates and deletes
    /// an ephemeral node in `{root}/sessions` and in `{root}/leases` (creating those when missing,
    /// as the first session would), so a denial shows the same words as the failing operation.
    /// The probe nodes are `#check-{reader session}`: `#` is outside the name alphabet, so they
    /// never collide with a session or a lease, and `holder` never sees them.
    fn access_item(&self, client: &Client, deadline: Instant) -> CheckItem {
        let reader = SessionId::from_u64(client.session_id().0 as u64);
        let fail = |e: Error| CheckItem {
            name: "access".into(),
            status: CheckStatus::Fail,
            detail: crate::error::display_chain(&e),
        };
        for dir in [self.paths.sessions_dir(), self.paths.leases_dir()] {
            let path = format!("{dir}/#check-{reader}");
            let what = format!("create of probe node {path}");
            // `Ok(None)`: a leftover of this reader session (a probe whose delete was lost).
            if let Err(f) = self.create_ephemeral(client, &path, b"", CreateMode::Persistent, deadline) {
                return fail(self.fail(f, &what, self.opts.query_timeout));
            }
            let what = format!("delete of probe node {path}");
            match run_until(client.delete(&path, None), deadline) {
                Some(Ok(())) | Some(Err(ZkError::NoNode)) => {}
                Some(Err(e)) => return fail(self.zk_error(e, &what)),
                None => return fail(self.fail(Fail::Timeout, &what, self.opts.query_timeout)),
            }
        }
        CheckItem {
            name: "access".into(),
            status: CheckStatus::Ok,
            detail: format!(
                "the backend's identity ({}) can create and delete its nodes in {} and {}",
                self.who,
                self.paths.sessions_dir(),
                self.paths.leases_dir()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_and_connect_strings() {
        assert!(validate_hosts("a:1,b:2", false).is_ok());
        assert!(validate_hosts("tcp+tls://a:1,tcp://b:2", true).is_ok());
        assert!(validate_hosts("tcp+tls://a:1", false).is_err());
        assert!(validate_hosts("a:1,", false).is_err());
        assert!(validate_hosts("a:0", false).is_err());
        let one = connect_string("a:1");
        assert_eq!(one.split(',').count(), CONNECT_STRING_ENTRIES);
        assert!(one.split(',').all(|h| h == "a:1"), "{one}");
        let three = connect_string("a:1,b:2,c:3");
        assert_eq!(three.split(',').count(), 21);
        assert!(three.starts_with("a:1,b:2,c:3,a:1,b:2,c:3,"), "{three}");
        assert_eq!(connect_string(&vec!["h:1"; 25].join(",")).split(',').count(), 25);
    }
}

#[cfg(test)]
mod prop_tests;
