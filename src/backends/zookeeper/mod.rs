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
//! min(lease duration, negotiated session timeout): ZooKeeper measures session timeouts with the
//! ensemble's elapsed time, so no clock is compared with anything.
//!
//! Keep-alive reports the session's leases and groups from the server (`getEphemerals` of
//! `{root}`, pipelined with its `sync`), so a lease or member node deleted behind the session's
//! back is reported lost at the next renewal, never from memory.
//!
//! The ZooKeeper client heartbeats by itself; a local watchdog therefore closes any session whose
//! [`keep_alive`](LeaseBackend::keep_alive) was not called within its lease duration, so a stuck
//! process never keeps its leases through the client's own pings. See `docs/backends/zookeeper.md`.

pub(crate) mod config;
mod exec;
mod options;
mod paths;
mod probe;
mod semaphores;
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
pub use self::config::{DEFAULT_PORT, ENV_VARS};
pub use self::options::{
    AclEntry, AclMode, ZookeeperAuth, ZookeeperOptions, ZookeeperSasl, ZookeeperTls, DEFAULT_CONNECTION_TIMEOUT,
    DEFAULT_ROOT,
};

use self::config::ZookeeperUrl;
use self::exec::run_until;
use self::options::SHARED_SESSION_TIMEOUT;
use self::paths::{decode_session, encode_session, parent, Paths};
use self::watch::Watches;
use crate::backend::{
    Acquire, Capabilities, CheckItem, CheckStatus, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant,
    Topic,
};
use crate::error::{Error, ErrorKind, Result};
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

/// Why a ZooKeeper call did not succeed.
#[derive(Debug)]
enum Fail {
    Zk(ZkError),
    /// Our deadline passed; the request may still take effect.
    Timeout,
}

impl From<ZkError> for Fail {
    fn from(e: ZkError) -> Fail {
        Fail::Zk(e)
    }
}

impl Fail {
    /// The session is gone for good (expired, closed, moved or failed authentication).
    fn is_session_end(&self) -> bool {
        matches!(
            self,
            Fail::Zk(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved | ZkError::AuthFailed)
        )
    }

    /// The outcome of a write is unknown: it may or may not have been applied.
    fn is_unknown_outcome(&self) -> bool {
        match self {
            Fail::Timeout => true,
            Fail::Zk(e) => is_transient(e),
        }
    }

    fn into_error(self, what: &str, timeout: Duration, who: &str) -> Error {
        match self {
            Fail::Timeout => Error::unavailable(format!("ZooKeeper {what} did not complete within {timeout:?}")),
            Fail::Zk(e) => zk_error(e, what, who),
        }
    }
}

/// Errors of the connection rather than of the request: the request may or may not have been
/// applied, and retrying later may succeed. The client reports I/O errors of its connection (a
/// broken pipe, a reset, "no response from connection") to the requests in flight as `Custom`.
fn is_transient(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::ConnectionLoss
            | ZkError::Timeout
            | ZkError::NoHosts
            | ZkError::Throttled
            | ZkError::Custom(_)
            | ZkError::UnexpectedError(_)
            | ZkError::UnmarshalError { .. }
    )
}

/// Maps a client error to ours, with the client error as source; `who` describes the backend's
/// identity (see [`describe_identity`]) for denials.
fn zk_error(e: ZkError, what: &str, who: &str) -> Error {
    let kind = match &e {
        e if is_transient(e) => ErrorKind::Unavailable,
        ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved => ErrorKind::SessionExpired,
        _ => ErrorKind::Backend,
    };
    let msg = match &e {
        ZkError::NoAuth => format!(
            "ZooKeeper denied {what} to the backend's identity ({who}): the ACL of the node or of its parent \
             does not grant it; check the credentials (ZookeeperOptions::auth / SIMBA_ZOOKEEPER_AUTH, \
             ZookeeperOptions::sasl / SIMBA_ZOOKEEPER_SASL) and the ACLs under the root (retrying cannot help)"
        ),
        ZkError::InvalidAcl => format!(
            "ZooKeeper rejected the ACL of {what} for the backend's identity ({who}): creator-all and auth ACL \
             entries need an identity the server authenticated; check SIMBA_ZOOKEEPER_ACL and the credentials"
        ),
        ZkError::AuthFailed => {
            format!("ZooKeeper rejected the backend's authentication ({who}) during {what}; {AUTH_FAILED_HINT}")
        }
        ZkError::BadArguments(_) => format!("ZooKeeper rejected the arguments of {what}"),
        _ => format!("ZooKeeper {what} failed"),
    };
    Error::new(kind, msg).with_source(e)
}

/// What to check when the server rejects the backend's authentication.
const AUTH_FAILED_HINT: &str = "check the SASL user and password (ZookeeperOptions::sasl / SIMBA_ZOOKEEPER_SASL) \
     against the server's JAAS configuration and the auth info (ZookeeperOptions::auth / SIMBA_ZOOKEEPER_AUTH) \
     against its auth providers (retrying cannot help)";

/// The backend's identity as the server sees it, for messages: e.g. `digest user simba`, `SASL
/// user simba`, or anonymous. Never the credentials.
fn describe_identity(opts: &ZookeeperOptions) -> String {
    let mut parts: Vec<String> = opts
        .auth
        .iter()
        .map(|a| match a.scheme() {
            "digest" => {
                let creds = String::from_utf8_lossy(a.credentials());
                format!("digest user {}", creds.split(':').next().unwrap_or_default())
            }
            scheme => format!("auth scheme {scheme}"),
        })
        .collect();
    if let Some(sasl) = &opts.sasl {
        parts.push(format!("SASL user {}", sasl.user()));
    }
    if parts.is_empty() {
        "no credentials: anonymous, only world:anyone entries apply".into()
    } else {
        parts.join(" + ")
    }
}

fn token_of(czxid: i64, what: &str) -> Result<Token> {
    Token::from_backend(czxid, what)
}

impl ZkSession {
    /// The client if the session can be used now: `SessionExpired` once closed, expired or past
    /// its watchdog deadline (which closes it), `Unavailable` while disconnected.
    fn gate(&self) -> Result<Client> {
        let dropped;
        {
            let mut life = self.life.lock();
            if !life.closed && Instant::now() >= life.deadline {
                log::warn!(
                    "zookeeper session {}: not renewed within its lease duration {:?}; closing it (watchdog)",
                    self.id,
                    life.lease_duration
                );
                life.closed = true;
            }
            if life.closed {
                dropped = self.client.lock().take();
            } else {
                let guard = self.client.lock();
                let Some(client) = guard.as_ref() else {
                    return Err(Error::session_expired(&self.id));
                };
                let state = client.state();
                return match state {
                    SessionState::SyncConnected => Ok(client.clone()),
                    s if s.is_terminated() => Err(Error::session_expired(&self.id)),
                    s => Err(Error::unavailable(format!(
                        "ZooKeeper session {} is not connected ({s}); retry when it reconnects",
                        self.id
                    ))),
                };
            }
        }
        drop(dropped);
        Err(Error::session_expired(&self.id))
    }

    /// Marks the session closed and drops its client (ZooKeeper then closes the session and its
    /// ephemeral nodes vanish). Idempotent.
    fn shut(&self) {
        let client = {
            let mut life = self.life.lock();
            life.closed = true;
            self.client.lock().take()
        };
        drop(client);
    }

    /// Remaining time from `sent`, bounded by the watchdog deadline so that a lease never outlives
    /// the instant at which the watchdog would close its session. `None` once closed.
    fn remaining_from(&self, sent: Instant) -> Option<Duration> {
        let life = self.life.lock();
        if life.closed {
            return None;
        }
        let bound = life.deadline.saturating_duration_since(sent);
        Some(life.lease_duration.min(self.negotiated).min(bound))
    }

    fn begin_create(&self, name: &Name) {
        *self.leases.lock().pending.entry(name.clone()).or_insert(0) += 1;
    }

    /// Records the outcome of a create started with `begin_create`.
    fn end_create(&self, name: &Name, owned: Option<Token>, definitive: bool) {
        let mut l = self.leases.lock();
        if let Some(t) = owned {
            l.known.insert(name.clone(), t);
        }
        let remove = match l.pending.get_mut(name) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0 && (definitive || owned.is_some())
            }
            None => false,
        };
        if remove {
            l.pending.remove(name);
        }
    }
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

    /// Runs `sync` pipelined with `read` (one round trip; the read then sees everything that
    /// returned on any server of the ensemble), bounded by `deadline`. `Ok(None)` when the node
    /// does not exist.
    fn synced_read<S, T>(
        &self,
        sync: impl Future<Output = S>,
        read: impl Future<Output = std::result::Result<T, ZkError>>,
        deadline: Instant,
        what: &str,
    ) -> Result<Option<T>> {
        let res = run_until(
            async move {
                let _ = sync.await;
                read.await
            },
            deadline,
        );
        match res {
            None => Err(self.fail(Fail::Timeout, what, self.opts.query_timeout)),
            Some(Err(ZkError::NoNode)) => Ok(None),
            Some(Err(e)) => Err(self.zk_error(e, what)),
            Some(Ok(v)) => Ok(Some(v)),
        }
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
        if let Some(c) = guard.as_ref() {
            if !c.state().is_terminated() {
                return Ok(c.clone());
            }
            log::info!("zookeeper shared reader session {:?} ended ({}); opening a new one", c.session_id(), c.state());
        }
        let c = self.connect_client(SHARED_SESSION_TIMEOUT, deadline)?;
        *guard = Some(c.clone());
        Ok(c)
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

    /// Waits until `state` reports the end of the session, up to `deadline`.
    fn wait_terminated(state: &StateWatcher, deadline: Instant) -> bool {
        let mut w = state.clone();
        loop {
            if w.peek_state().is_terminated() {
                return true;
            }
            if run_until(w.changed(), deadline).is_none() {
                return w.peek_state().is_terminated();
            }
        }
    }

    /// One watchdog pass: closes sessions past their deadline, forgets ended ones, and returns
    /// the next deadline.
    fn watchdog_tick(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut to_close = Vec::new();
        let mut ended = Vec::new();
        for (id, s) in self.sessions.lock().iter() {
            let life = s.life.lock();
            if life.closed {
                if s.state.peek_state().is_terminated() {
                    ended.push(id.clone());
                }
                continue;
            }
            if now >= life.deadline {
                to_close.push((Arc::clone(s), life.lease_duration));
            } else {
                next = Some(next.map_or(life.deadline, |n| n.min(life.deadline)));
            }
        }
        for (s, lease) in to_close {
            let still_due = {
                let life = s.life.lock();
                !life.closed && Instant::now() >= life.deadline
            };
            if still_due {
                log::warn!(
                    "zookeeper session {}: keep-alive not called within the lease duration {lease:?}; \
                     closing it so its leases are freed (watchdog)",
                    s.id
                );
                s.shut();
            }
        }
        if !ended.is_empty() {
            let mut map = self.sessions.lock();
            for id in ended {
                map.remove(&id);
            }
        }
        next
    }
}

fn watchdog(inner: Weak<Inner>, signal: Arc<Signal>) {
    loop {
        let next = match inner.upgrade() {
            Some(inner) => inner.watchdog_tick(),
            None => return,
        };
        let mut stop = signal.stop.lock();
        if *stop {
            return;
        }
        let wait = next.map_or(WATCHDOG_MAX_SLEEP, |d| d.saturating_duration_since(Instant::now()));
        // A little past the deadline so the pass finds it due.
        let wait = (wait + Duration::from_millis(1)).min(WATCHDOG_MAX_SLEEP);
        signal.cv.wait_for(&mut stop, wait);
        if *stop {
            return;
        }
    }
}

impl LeaseBackend for ZookeeperBackend {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        validate_metadata(metadata)?;
        if lease_duration.is_zero() {
            return Err(Error::config("lease_duration must be > 0"));
        }
        let inner = &self.inner;
        let t0 = Instant::now();
        let deadline = t0 + inner.opts.connection_timeout;
        let client = inner.connect_client(lease_duration, deadline)?;
        let id = SessionId::from_u64(client.session_id().0 as u64);
        let negotiated = client.session_timeout();
        let remaining = lease_duration.min(negotiated);
        // What `holder` reports to other processes: the longest this session's nodes can outlive
        // a renewal that is never followed by another (the watchdog closes the session after the
        // lease duration; a dead process's session ends after the negotiated timeout).
        let data = encode_session(lease_duration.max(negotiated), metadata);
        let path = inner.paths.session(&id);
        match inner.create_ephemeral(&client, &path, &data, CreateMode::Persistent, deadline) {
            Ok(_) => {}
            Err(f) => {
                drop(client);
                return Err(inner.fail(f, &format!("create of session node {path}"), inner.opts.connection_timeout));
            }
        }
        let session = Arc::new(ZkSession {
            id: id.clone(),
            zk_id: client.session_id().0,
            metadata: metadata.to_string(),
            negotiated,
            state: client.state_watcher(),
            client: Mutex::new(Some(client)),
            life: Mutex::new(Life { closed: false, deadline: t0 + lease_duration, lease_duration }),
            leases: Mutex::new(Leases::default()),
            joined: Mutex::new(HashSet::new()),
            release_lock: Mutex::new(()),
        });
        inner.sessions.lock().insert(id.clone(), session);
        inner.watchdog.cv.notify_all();
        if negotiated != lease_duration {
            log::info!(
                "zookeeper session {id}: requested timeout {lease_duration:?}, the ensemble negotiated {negotiated:?}"
            );
        }
        log::debug!("zookeeper session {id} opened (remaining {remaining:?})");
        Ok(SessionGrant { id, remaining })
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(KeepAlive::Expired);
        };
        let t0 = Instant::now();
        let client = match s.gate() {
            Ok(c) => c,
            Err(e) if e.is_session_expired() => return Ok(KeepAlive::Expired),
            Err(e) => return Err(e),
        };
        let deadline = t0 + inner.opts.query_timeout;
        let to_check: Vec<Name> =
            s.leases.lock().pending.iter().filter(|(_, n)| **n == 0).map(|(k, _)| k.clone()).collect();
        // The leases this session holds as far as it knows, taken before the list is sent: only
        // these can be found missing by this keep-alive (a lease acquired meanwhile is newer than
        // the list's answer and stays reported).
        let held: Vec<(Name, Token)> = s.leases.lock().known.iter().map(|(n, t)| (n.clone(), *t)).collect();
        // One pipelined round trip: `sync` (through the leader, which checks the session) proves
        // the session is alive; the session's own nodes are listed and possibly-owned names
        // checked alongside. Each request is sent when its future is created, in this order, and
        // ZooKeeper answers one session's requests in the order they were sent.
        //
        // Leases and groups are reported from the server: `getEphemerals` (ZooKeeper 3.6+) lists
        // the ephemeral nodes *owned by this ZooKeeper session* whose path starts with `{root}`.
        // Sent after the `sync`, it reads the server's tree after every request this session
        // sent before the keep-alive, so: an acquire or join that returned is listed; one whose
        // reply was lost is listed exactly when its create was applied; a release or leave that
        // returned is not listed; a lease or member node deleted behind the session's back
        // (another client, an operator, a shared identity) is not listed, so the lease is
        // reported lost and the membership re-joined; and another session's nodes never are,
        // even one forged at this session's path (ownership, not the path, decides). If that
        // read alone fails, what survived is unknown, and unknown is not lost: the leases this
        // session created and the groups it joined and has not confirmedly left are reported.
        //
        // A session that holds no lease and never joined a group (or confirmedly left them all:
        // `joined` is filled before a join's create is sent and emptied only by a confirmed
        // leave) has nothing to list, so it sends the `sync` alone. Otherwise the list follows it
        // without waiting for its reply (the client's writer may flush the second request
        // separately, i.e. two round trips on the wire).
        let list = !held.is_empty() || !s.joined.lock().is_empty();
        let sync = client.sync(inner.paths.root());
        let ephemerals = list.then(|| client.list_ephemerals(inner.paths.ephemerals_prefix()));
        let checks: Vec<_> = to_check.iter().map(|n| client.get_data(&inner.paths.lease(n))).collect();
        let res = run_until(
            async move {
                let synced = sync.await;
                let ephemerals = match ephemerals {
                    Some(list) => Some(list.await),
                    None => None,
                };
                (synced, ephemerals, join_all(checks).await)
            },
            deadline,
        );
        let (synced, ephemerals, checks) = match res {
            Some(r) => r,
            None => {
                return Err(inner.fail(
                    Fail::Timeout,
                    &format!("keep-alive of session {session}"),
                    inner.opts.query_timeout,
                ))
            }
        };
        if let Err(e) = synced {
            let f = Fail::Zk(e);
            if f.is_session_end() {
                log::warn!("zookeeper session {session}: ZooKeeper reports it ended ({f:?})");
                s.shut();
                return Ok(KeepAlive::Expired);
            }
            return Err(inner.fail(f, &format!("keep-alive of session {session}"), inner.opts.query_timeout));
        }
        // What the server lists: (groups, lease names); `None` when the list failed (unknown).
        let listed: Option<(BTreeSet<Name>, HashSet<Name>)> = match ephemerals {
            None => Some(Default::default()),
            Some(Ok(paths)) => {
                let (mut groups, mut leases) = (BTreeSet::new(), HashSet::new());
                for p in paths {
                    if let Some(g) = inner.paths.member_group(&p, session) {
                        groups.insert(g);
                    } else if let Some(n) = inner.paths.lease_name(&p) {
                        leases.insert(n);
                    } else if p != inner.paths.session(session) {
                        log::debug!("zookeeper session {session}: ignoring its ephemeral node {p:?}");
                    }
                }
                Some((groups, leases))
            }
            Some(Err(e)) => {
                let f = Fail::Zk(e);
                if f.is_session_end() {
                    log::warn!("zookeeper session {session}: ZooKeeper reports it ended ({f:?})");
                    s.shut();
                    return Ok(KeepAlive::Expired);
                }
                log::info!(
                    "zookeeper session {session}: cannot list its nodes ({f:?}); reporting every lease it created \
                     and every group it joined and did not leave (unknown is not lost)"
                );
                None
            }
        };
        {
            let mut life = s.life.lock();
            if life.closed {
                return Ok(KeepAlive::Expired);
            }
            life.deadline = life.deadline.max(t0 + lease_duration);
            life.lease_duration = lease_duration;
        }
        let mut l = s.leases.lock();
        for (name, r) in to_check.into_iter().zip(checks) {
            let idle = l.pending.get(&name) == Some(&0);
            match r {
                Ok((_, stat)) if stat.ephemeral_owner == s.zk_id => {
                    if let Ok(t) = token_of(stat.czxid, name.as_str()) {
                        log::info!(
                            "zookeeper session {session}: lease {name} (token {t}) whose create outcome was unknown \
                             is owned; reporting it"
                        );
                        l.known.insert(name.clone(), t);
                    }
                    if idle {
                        l.pending.remove(&name);
                    }
                }
                Ok(_) | Err(ZkError::NoNode) => {
                    if idle {
                        l.pending.remove(&name);
                    }
                }
                Err(e) => log::debug!("zookeeper session {session}: cannot check possibly owned lease {name}: {e}"),
            }
        }
        if let Some((_, leases)) = &listed {
            for (name, token) in held {
                // Still the same term in memory (not released or re-acquired meanwhile), and its
                // node is no longer this session's on the server: lost.
                if !leases.contains(&name) && l.known.get(&name) == Some(&token) {
                    log::warn!(
                        "zookeeper session {session}: the node of lease {name} (token {token}) is gone from the \
                         server (deleted by another client); reporting the lease lost"
                    );
                    l.known.remove(&name);
                }
            }
        }
        let mut owned: Vec<(Name, Token)> = l.known.iter().map(|(n, t)| (n.clone(), *t)).collect();
        drop(l);
        owned.sort();
        let groups = match listed {
            Some((groups, _)) => groups,
            None => s.joined.lock().iter().cloned().collect(),
        };
        let remaining = lease_duration.min(s.negotiated);
        Ok(KeepAlive::Alive { remaining, owned, groups: groups.into_iter().collect() })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(());
        };
        s.shut();
        let deadline = inner.query_deadline();
        if Inner::wait_terminated(&s.state, deadline) {
            inner.sessions.lock().remove(session);
            log::debug!("zookeeper session {session} closed");
            Ok(())
        } else {
            Err(Error::unavailable(format!(
                "ZooKeeper did not confirm closing session {session} within {:?}; its ephemeral nodes vanish \
                 when the ensemble ends the session",
                inner.opts.query_timeout
            )))
        }
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        let inner = &self.inner;
        let s = inner.session(session).ok_or_else(|| Error::session_expired(session))?;
        let client = s.gate()?;
        let t0 = Instant::now();
        let deadline = t0 + inner.opts.query_timeout;
        s.begin_create(name);
        let res = inner.acquire_once(&s, &client, name, deadline);
        match res {
            Ok(Some(czxid)) => {
                let token = match token_of(czxid, name.as_str()) {
                    Ok(t) => t,
                    Err(e) => {
                        s.end_create(name, None, false);
                        return Err(e);
                    }
                };
                s.end_create(name, Some(token), true);
                match s.remaining_from(t0) {
                    Some(remaining) if !remaining.is_zero() => {
                        log::debug!("zookeeper session {session}: acquired lease {name} (token {token})");
                        Ok(Acquire::Acquired { token, remaining })
                    }
                    // Closed (or due) meanwhile: the node vanishes with the session.
                    _ => Err(Error::session_expired(session)),
                }
            }
            Ok(None) => {
                s.end_create(name, None, true);
                Ok(Acquire::Busy)
            }
            Err(f) => {
                let unknown = f.is_unknown_outcome();
                s.end_create(name, None, !unknown);
                if f.is_session_end() {
                    s.shut();
                    return Err(Error::session_expired(session));
                }
                if unknown {
                    log::info!("zookeeper session {session}: outcome of acquiring lease {name} unknown; the next keep-alive checks it");
                }
                Err(inner.fail(f, &format!("acquire of lease {name} by session {session}"), inner.opts.query_timeout))
            }
        }
    }

    /// Term-scoped: the term of `token` is the node with that `czxid`. A late delete can never hit
    /// a newer term of the same session: ZooKeeper executes one session's requests in the order
    /// they were sent, and the client never resends a request after a connection loss.
    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(());
        };
        let deadline = inner.query_deadline();
        let Some(_one_at_a_time) = s.release_lock.try_lock_until(deadline) else {
            return Err(Error::unavailable(format!(
                "release of lease {name} by session {session}: other releases of the session did not finish within {:?}",
                inner.opts.query_timeout
            )));
        };
        let known = {
            let mut l = s.leases.lock();
            match l.known.get(name).copied() {
                Some(t) if t == token => {
                    l.known.remove(name);
                    // Until the delete is confirmed the name is "possibly owned".
                    l.pending.entry(name.clone()).or_insert(0);
                    Some(t)
                }
                Some(_) => return Ok(()), // another term of this session
                None if l.pending.contains_key(name) => None,
                None => return Ok(()),
            }
        };
        let client = match s.gate() {
            Ok(c) => c,
            Err(e) if e.is_session_expired() => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = inner.paths.lease(name);
        let what = format!("release of lease {name} by session {session}");
        let version = if known.is_some() {
            // We created it and only we delete it while the session lives.
            None
        } else {
            match run_until(client.get_data(&path), deadline) {
                None => return Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id && stat.czxid == token.get() as i64 => {
                    Some(stat.version)
                }
                // Ours in another term: the next keep-alive reports it (with its token).
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id => return Ok(()),
                Some(Ok(_)) | Some(Err(ZkError::NoNode)) => {
                    s.leases.lock().pending.remove(name);
                    return Ok(());
                }
                Some(Err(e)) => return Err(inner.fail(Fail::Zk(e), &what, inner.opts.query_timeout)),
            }
        };
        match run_until(client.delete(&path, version), deadline) {
            Some(Ok(())) | Some(Err(ZkError::NoNode)) => {
                let mut l = s.leases.lock();
                if l.pending.get(name) == Some(&0) {
                    l.pending.remove(name);
                }
                log::debug!("zookeeper session {session}: released lease {name} (token {token})");
                Ok(())
            }
            Some(Err(e)) => {
                let f = Fail::Zk(e);
                if f.is_session_end() {
                    s.shut();
                    return Ok(());
                }
                if !f.is_unknown_outcome() {
                    // Definitely not deleted (e.g. denied): it is still ours.
                    if let Some(t) = known {
                        let mut l = s.leases.lock();
                        l.known.insert(name.clone(), t);
                        if l.pending.get(name) == Some(&0) {
                            l.pending.remove(name);
                        }
                    }
                }
                Err(inner.fail(f, &what, inner.opts.query_timeout))
            }
            None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        }
    }

    /// `remaining` is what this backend can know. For a holder session of this backend it is
    /// exact: the time left before the session's deadline (its last renewal plus the lease
    /// duration, when the watchdog closes it). For a session of another process it is **an upper
    /// bound**, `max(lease duration, negotiated session timeout)`, written in the session's node
    /// when it opened: ZooKeeper does not tell clients when a session was last renewed or when it
    /// expires (its leader tracks that internally; only the `dump` four-letter command on the
    /// leader shows expiry times, as wall-clock times, and it is off by default), so a holder
    /// that died a moment ago is reported with the full bound. See `docs/backends/zookeeper.md`.
    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        let inner = &self.inner;
        let deadline = inner.query_deadline();
        let client = inner.shared(deadline)?;
        let path = inner.paths.lease(name);
        let what = format!("read of lease {name}");
        let Some((_, stat)) = inner.synced_read(client.sync(&path), client.get_data(&path), deadline, &what)? else {
            return Ok(None);
        };
        if stat.ephemeral_owner == 0 {
            return Err(Error::backend(format!(
                "lease node {path} is not ephemeral: it was not created by simba; delete it"
            )));
        }
        let sid = SessionId::from_u64(stat.ephemeral_owner as u64);
        let token = token_of(stat.czxid, name.as_str())?;
        let spath = inner.paths.session(&sid);
        let (remaining, metadata) = match run_until(client.get_data(&spath), deadline) {
            None => return Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
            // The holder's session ended after we read the lease: its node is gone too.
            Some(Err(ZkError::NoNode)) => return Ok(None),
            Some(Err(e)) => return Err(inner.zk_error(e, &format!("read of session node {spath}"))),
            Some(Ok((data, _))) => decode_session(&data),
        };
        let remaining = match (inner.session(&sid), remaining) {
            (Some(s), _) => s.remaining_from(Instant::now()).unwrap_or_default(),
            (None, Some(r)) => r,
            (None, None) => client.session_timeout(),
        };
        Ok(Some(Holder { session: sid, token, remaining, metadata }))
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        let inner = &self.inner;
        let s = inner.session(session).ok_or_else(|| Error::session_expired(session))?;
        let client = s.gate()?;
        let deadline = inner.query_deadline();
        let path = inner.paths.member(group, session);
        let what = format!("join of group {group} by session {session}");
        // Before the create is sent: from now on the membership may exist (see `joined`).
        s.joined.lock().insert(group.clone());
        match inner.create_ephemeral(&client, &path, s.metadata.as_bytes(), CreateMode::Container, deadline) {
            Ok(Some(_)) => {
                log::debug!("zookeeper session {session}: joined group {group}");
                Ok(())
            }
            Ok(None) => match run_until(client.get_data(&path), deadline) {
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id => Ok(()),
                Some(Ok(_)) => Err(Error::backend(format!(
                    "member node {path} exists but belongs to another ZooKeeper session; delete it"
                ))),
                Some(Err(ZkError::NoNode)) => {
                    Err(Error::unavailable(format!("member node {path} vanished during {what}; retry")))
                }
                Some(Err(e)) => Err(inner.zk_error(e, &what)),
                None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
            },
            Err(f) => {
                if f.is_session_end() {
                    s.shut();
                    return Err(Error::session_expired(session));
                }
                Err(inner.fail(f, &what, inner.opts.query_timeout))
            }
        }
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(());
        };
        let client = match s.gate() {
            Ok(c) => c,
            Err(e) if e.is_session_expired() => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = inner.paths.member(group, session);
        let what = format!("leave of group {group} by session {session}");
        match run_until(client.delete(&path, None), inner.query_deadline()) {
            Some(Ok(())) | Some(Err(ZkError::NoNode)) => {
                s.joined.lock().remove(group);
                log::debug!("zookeeper session {session}: left group {group}");
                Ok(())
            }
            Some(Err(e)) => {
                let f = Fail::Zk(e);
                if f.is_session_end() {
                    s.shut();
                    return Ok(());
                }
                Err(inner.fail(f, &what, inner.opts.query_timeout))
            }
            None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        }
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        let inner = &self.inner;
        let deadline = inner.query_deadline();
        let client = inner.shared(deadline)?;
        let path = inner.paths.group(group);
        let what = format!("read of group {group}");
        // `sync` first, so a join that returned on any server is visible here.
        let Some(children) = inner.synced_read(client.sync(&path), client.list_children(&path), deadline, &what)?
        else {
            return Ok(Vec::new());
        };
        let ids: Vec<SessionId> = children
            .iter()
            .filter_map(|c| match SessionId::parse(c) {
                Ok(id) => Some(id),
                Err(_) => {
                    log::warn!("zookeeper group {group}: ignoring foreign child node {c:?}");
                    None
                }
            })
            .collect();
        let reads: Vec<_> = ids.iter().map(|id| client.get_data(&inner.paths.member(group, id))).collect();
        let datas = match run_until(join_all(reads), deadline) {
            Some(d) => d,
            None => return Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        };
        let mut members = Vec::with_capacity(ids.len());
        for (id, r) in ids.into_iter().zip(datas) {
            match r {
                Ok((data, _)) => {
                    members.push(Member { session: id, metadata: String::from_utf8_lossy(&data).into_owned() })
                }
                Err(ZkError::NoNode) => {} // left (or its session ended) meanwhile
                Err(e) => return Err(inner.zk_error(e, &what)),
            }
        }
        members.sort();
        Ok(members)
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        self.inner.semaphore_limit(name, permits)
    }

    fn call_bound(&self) -> Option<Duration> {
        // Every call waits for its replies with `run_until` against one deadline of `query_timeout`.
        Some(self.inner.opts.query_timeout)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { push_release: true, push_membership: true }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let inner = &self.inner;
        if !inner.watches.add(topic, notify) {
            return Ok(true); // a watch is already armed for this topic
        }
        let deadline = inner.query_deadline();
        let client = match inner.shared(deadline) {
            Ok(c) => c,
            Err(e) => {
                inner.watches.fire(topic);
                return Err(e);
            }
        };
        let (path, what) = match topic {
            Topic::Lease(n) => (inner.paths.lease(n), format!("watch of lease {n}")),
            Topic::Group(g) => (inner.paths.group(g), format!("watch of group {g}")),
        };
        let fail = |f: Fail| {
            inner.watches.fire(topic);
            Err(inner.fail(f, &what, inner.opts.query_timeout))
        };
        match topic {
            Topic::Lease(_) => match run_until(client.check_and_watch_stat(&path), deadline) {
                Some(Ok((None, _))) => inner.watches.fire(topic), // free already: tell at once
                Some(Ok((Some(_), w))) => inner.watches.fire_after(topic.clone(), async move {
                    let _ = w.changed().await;
                }),
                Some(Err(e)) => return fail(Fail::Zk(e)),
                None => return fail(Fail::Timeout),
            },
            Topic::Group(_) => match run_until(client.get_and_watch_children(&path), deadline) {
                Some(Ok((_, _, w))) => inner.watches.fire_after(topic.clone(), async move {
                    let _ = w.changed().await;
                }),
                // The group does not exist yet: watch its creation.
                Some(Err(ZkError::NoNode)) => match run_until(client.check_and_watch_stat(&path), deadline) {
                    Some(Ok((None, w))) => inner.watches.fire_after(topic.clone(), async move {
                        let _ = w.changed().await;
                    }),
                    Some(Ok((Some(_), _))) => inner.watches.fire(topic), // created meanwhile
                    Some(Err(e)) => return fail(Fail::Zk(e)),
                    None => return fail(Fail::Timeout),
                },
                Some(Err(e)) => return fail(Fail::Zk(e)),
                None => return fail(Fail::Timeout),
            },
        }
        Ok(true)
    }

    fn check(&self) -> Vec<CheckItem> {
        let inner = &self.inner;
        let mut items = Vec::new();
        let deadline = inner.query_deadline();
        let client = match inner.shared(deadline) {
            Ok(c) => c,
            Err(e) => {
                items.push(CheckItem {
                    name: "reachable".into(),
                    status: CheckStatus::Fail,
                    detail: crate::error::display_chain(&e),
                });
                return items;
            }
        };
        match run_until(client.sync("/"), deadline) {
            Some(Ok(())) => items.push(CheckItem {
                name: "reachable".into(),
                status: CheckStatus::Ok,
                detail: format!(
                    "ZooKeeper at {} answered (session {:?}, negotiated timeout {:?})",
                    inner.hosts,
                    client.session_id(),
                    client.session_timeout()
                ),
            }),
            r => {
                let detail = match r {
                    Some(Err(e)) => format!("sync failed: {e}"),
                    _ => format!("no answer within {:?}", inner.opts.query_timeout),
                };
                items.push(CheckItem { name: "reachable".into(), status: CheckStatus::Fail, detail });
                return items;
            }
        }
        let root = inner.paths.root();
        let mode = inner.opts.effective_acl().describe();
        let anyone_can_write = inner.acls.iter().any(writable_by_anyone);
        let acl_item = match run_until(client.get_acl(root), deadline) {
            None => CheckItem {
                name: "acl".into(),
                status: CheckStatus::Fail,
                detail: format!("no answer reading the ACL of {root} within {:?}", inner.opts.query_timeout),
            },
            Some(Err(ZkError::NoNode)) => CheckItem {
                name: "acl".into(),
                status: if anyone_can_write { CheckStatus::Warn } else { CheckStatus::Ok },
                detail: format!(
                    "{root} does not exist yet; the backend creates it with ACL mode {mode}{}",
                    if anyone_can_write {
                        ": any client can delete or pre-create lease nodes; use auth + creator-all on a shared ensemble"
                    } else {
                        ""
                    }
                ),
            },
            Some(Err(e)) => CheckItem {
                name: "acl".into(),
                status: CheckStatus::Fail,
                detail: crate::error::display_chain(&inner.zk_error(e, &format!("read of the ACL of {root}"))),
            },
            Some(Ok((acls, _))) => {
                let open = acls.iter().any(writable_by_anyone);
                let shown: Vec<String> =
                    acls.iter().map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission())).collect();
                CheckItem {
                    name: "acl".into(),
                    status: if open { CheckStatus::Warn } else { CheckStatus::Ok },
                    detail: format!(
                        "ACL of {root}: [{}]; backend ACL mode {mode}{}",
                        shown.join(", "),
                        if open {
                            "; the root is writable by anyone: any client can delete or pre-create lease nodes \
                             (existing nodes keep their ACL: recreate them with the backend's identity or set their ACL)"
                        } else {
                            ""
                        }
                    ),
                }
            }
        };
        items.push(acl_item);
        items.push(inner.access_item(&client, deadline));
        items.push(CheckItem {
            name: "transport".into(),
            status: CheckStatus::Ok,
            // The reader session above is open, so a TLS handshake verified the server.
            detail: match &inner.opts.tls {
                Some(_) => format!(
                    "encrypted: {} (rustls, TLS 1.2/1.3; the server's certificate chains to the configured CA \
                     and names the host)",
                    inner.transport()
                ),
                None => format!(
                    "not encrypted: {}, the server is not authenticated (set ZookeeperOptions::tls / \
                     SIMBA_ZOOKEEPER_TLS_CA for the servers' secureClientPort)",
                    inner.transport()
                ),
            },
        });
        items.push(CheckItem {
            name: "clock".into(),
            status: CheckStatus::Ok,
            detail: "ZooKeeper is clock-independent: session timeouts are measured by the ensemble's elapsed time, \
                     so no wall clock is compared"
                .into(),
        });
        items
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

    #[test]
    fn error_kinds() {
        assert_eq!(zk_error(ZkError::ConnectionLoss, "x", "me").kind(), ErrorKind::Unavailable);
        assert_eq!(zk_error(ZkError::SessionExpired, "x", "me").kind(), ErrorKind::SessionExpired);
        let e = zk_error(ZkError::NoAuth, "create of /a", "digest user u");
        assert!(e.to_string().contains("(digest user u)"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.to_string().contains("denied create of /a"), "{e}");
        assert!(!e.to_string().contains("not authorized"), "Display must not repeat the source: {e}");
    }
}

#[cfg(test)]
mod prop_tests;
