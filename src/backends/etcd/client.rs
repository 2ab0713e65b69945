//! The etcd gRPC client (tonic, pre-generated code in `proto/`): the backend's only bridge from
//! async to blocking code. Every call is bounded by the query timeout and routed to the members
//! (`route.rs`); it runs on the caller's thread on a connection of its own (`slots.rs`), or else
//! spawned on the backend's small runtime, bounded twice there, inside (`tokio::time::timeout`,
//! which drops the request) and outside (the caller waits on a channel until the deadline), so a
//! stuck runtime never holds a caller past its deadline.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::RwLock;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic::{Code, Request, Status};

use super::options::EtcdOptions;
use super::proto::etcdserverpb::auth_client::AuthClient;
use super::proto::etcdserverpb::cluster_client::ClusterClient;
use super::proto::etcdserverpb::kv_client::KvClient;
use super::proto::etcdserverpb::lease_client::LeaseClient;
use super::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use super::proto::etcdserverpb::watch_client::WatchClient;
use super::proto::etcdserverpb::AuthenticateRequest;
use super::route::{Pin, Resend, Route};
use super::slots::Slots;
use crate::error::{display_chain, Error, ErrorKind, Result};

/// Adds the current auth token (etcd's `token` metadata) to every request.
#[derive(Clone, Default)]
pub(crate) struct AuthToken(Arc<RwLock<Option<MetadataValue<Ascii>>>>);

impl tonic::service::Interceptor for AuthToken {
    fn call(&mut self, mut req: Request<()>) -> std::result::Result<Request<()>, Status> {
        if let Some(t) = self.0.read().clone() {
            req.metadata_mut().insert("token", t);
        }
        Ok(req)
    }
}

type Svc = InterceptedService<Channel, AuthToken>;

/// The generated clients over one channel (cheap to clone: each call takes its own copies).
#[derive(Clone)]
pub(crate) struct Clients {
    pub(crate) kv: KvClient<Svc>,
    pub(crate) lease: LeaseClient<Svc>,
    pub(crate) maintenance: MaintenanceClient<Svc>,
    pub(crate) watch: WatchClient<Svc>,
    pub(crate) cluster: ClusterClient<Svc>,
    /// Auth calls made as the logged-in user (`AuthStatus`, `UserGet`); `auth` logs in.
    pub(crate) auth_as_user: AuthClient<Svc>,
    auth: AuthClient<Channel>,
    token: AuthToken,
    user: Option<Arc<(String, String)>>,
}

impl Clients {
    /// The clients over `channel`, sending `token`, logging in as `user`.
    pub(crate) fn over(channel: Channel, token: AuthToken, user: Option<Arc<(String, String)>>) -> Clients {
        Clients {
            kv: KvClient::with_interceptor(channel.clone(), token.clone()),
            lease: LeaseClient::with_interceptor(channel.clone(), token.clone()),
            maintenance: MaintenanceClient::with_interceptor(channel.clone(), token.clone()),
            watch: WatchClient::with_interceptor(channel.clone(), token.clone()),
            cluster: ClusterClient::with_interceptor(channel.clone(), token.clone()),
            auth_as_user: AuthClient::with_interceptor(channel.clone(), token.clone()),
            auth: AuthClient::new(channel),
            token,
            user,
        }
    }

    /// Asks the server for a token for the configured user and uses it from now on.
    pub(crate) async fn authenticate(&self) -> std::result::Result<(), Status> {
        let Some(user) = &self.user else { return Ok(()) };
        let mut auth = self.auth.clone();
        let reply = auth
            .authenticate(AuthenticateRequest { name: user.0.clone(), password: user.1.clone() })
            .await?
            .into_inner();
        let value = MetadataValue::try_from(reply.token.as_str())
            .map_err(|_| Status::internal("etcd returned an auth token that is not valid HTTP header text"))?;
        *self.token.0.write() = Some(value);
        Ok(())
    }

    /// Runs `op` on these clients; logs in again and runs it once more when the server refused
    /// the auth token (expired, or a member that does not know it).
    pub(crate) async fn run<T, F, Fut>(&self, op: &F) -> std::result::Result<T, Status>
    where
        F: Fn(Clients) -> Fut,
        Fut: Future<Output = std::result::Result<T, Status>>,
    {
        match op(self.clone()).await {
            Err(s) if token_expired(&s) && self.user.is_some() => {
                log::debug!("etcd refused the auth token ({}): logging in again", s.message());
                self.authenticate().await?;
                op(self.clone()).await
            }
            r => r,
        }
    }
}

/// True for the error etcd answers when a token expired (or a member restarted and forgot it).
pub(crate) fn token_expired(s: &Status) -> bool {
    s.code() == Code::Unauthenticated && s.message().contains("invalid auth token")
}

/// The client: its runtime and its route to the members, and the connections its callers drive
/// (`slots.rs`).
pub(crate) struct EtcdClient {
    /// The backend's runtime: a current-thread runtime driven by its own thread (`simba-etcd`),
    /// which stops when this is dropped.
    rt: tokio::runtime::Handle,
    /// Ends the runtime's thread (dropped with the client).
    _stop: tokio::sync::oneshot::Sender<()>,
    route: Arc<Route>,
    slots: Slots,
    query_timeout: Duration,
    /// The members, for messages.
    pub(crate) members: String,
    /// One endpoint per member, in the order given (for `check`, which asks each member).
    endpoints: Vec<(String, Endpoint)>,
    /// TLS: `Some(whether a client certificate is configured)`; `None` for plain text.
    tls: Option<bool>,
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient").field("members", &self.members).finish_non_exhaustive()
    }
}

/// Maps a gRPC status to the crate's errors, in the server's (or the transport's) own words.
/// A certificate the TLS stack rejects is permanent (`Backend`): retrying cannot fix it.
pub(crate) fn status_error(what: &str, members: &str, s: &Status) -> Error {
    let words = words(s);
    if transient_in(s, &words) {
        Error::unavailable(format!("etcd {what} at {members} failed: {words}"))
    } else {
        let code = s.code();
        Error::backend(format!("etcd {what} at {members} was refused: {words} (gRPC {code:?})"))
    }
}

/// Whether `s` is a failure that may pass (`Unavailable` to the caller; another member may
/// answer): not the server's refusal, and not a certificate the TLS stack rejects.
pub(crate) fn transient(s: &Status) -> bool {
    transient_in(s, &words(s))
}

/// The status's message with its source chain (the transport's own words), each said once.
fn words(s: &Status) -> String {
    let message = s.message();
    match s.source().map(display_chain) {
        None => message.to_string(),
        Some(chain) if chain.contains(message) => chain,
        Some(chain) if message.contains(&chain) => message.to_string(),
        Some(chain) => format!("{message} ({chain})"),
    }
}

/// [`transient`], given the status's words with its source chain.
fn transient_in(s: &Status, words: &str) -> bool {
    match s.code() {
        _ if tls_failure(words) => false,
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted | Code::ResourceExhausted => true,
        // tonic reports transport failures (connection refused or reset) as Unknown with the
        // cause in the source chain.
        Code::Unknown => s.source().is_some(),
        _ => false,
    }
}

use std::error::Error as _;

/// Whether the request never left: the connection to the member it was routed to could not be
/// made (refused: the member is down or restarting).
pub(crate) fn never_sent(s: &Status) -> bool {
    let words = words(s);
    words.contains("tcp connect error") || words.contains("Connection refused")
}

/// Whether a transport error chain is a TLS failure (rustls' words, or a plain member's answer
/// to a TLS client): permanent, unlike a refused or reset connection.
fn tls_failure(words: &str) -> bool {
    ["certificate", "InvalidContentType", "received fatal alert", "corrupt message", "tls handshake eof"]
        .iter()
        .any(|w| words.contains(w))
}

impl EtcdClient {
    /// Builds the runtime and the channel, authenticates, and checks the cluster answers (one
    /// status call) within the connection timeout.
    pub(crate) fn connect(members: &[String], options: &EtcdOptions) -> Result<EtcdClient> {
        let (rt, stop) = start_runtime()?;
        let scheme = if options.tls.is_some() { "https" } else { "http" };
        let mut endpoints = Vec::with_capacity(members.len());
        // Slots' connections have no HTTP/2 keep-alive: they are driven only during calls, so a
        // ping's answer could wait in the socket past its timeout (slots.rs).
        let mut slot_endpoints = Vec::with_capacity(members.len());
        for m in members {
            let uri = format!("{scheme}://{m}");
            let mut ep = Endpoint::from_shared(uri.clone())
                .map_err(|e| Error::config(format!("invalid etcd member address {uri}: {e}")))?
                .connect_timeout(options.connection_timeout)
                .tcp_nodelay(true);
            if let Some(tls) = &options.tls {
                let host =
                    m.rsplit_once(':').map_or(m.as_str(), |(h, _)| h).trim_start_matches('[').trim_end_matches(']');
                let mut cfg = ClientTlsConfig::new().domain_name(host.to_string());
                cfg = match &tls.ca_pem {
                    Some(ca) => cfg.ca_certificate(Certificate::from_pem(ca)),
                    None => cfg.with_native_roots(),
                };
                if let Some((cert, key)) = &tls.identity {
                    cfg = cfg.identity(Identity::from_pem(cert, key));
                }
                ep = ep
                    .tls_config(cfg)
                    .map_err(|e| Error::config(format!("invalid etcd TLS settings for {m}: {}", display_chain(&e))))?;
            }
            slot_endpoints.push(ep.clone());
            let ep = ep
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(options.query_timeout)
                .keep_alive_while_idle(true);
            endpoints.push((m.clone(), ep));
        }
        let (token, user) = (AuthToken::default(), options.user.clone().map(Arc::new));
        let members_clients = {
            let _guard = rt.enter();
            endpoints.iter().map(|(_, ep)| Clients::over(ep.connect_lazy(), token.clone(), user.clone())).collect()
        };
        let pin = Arc::new(Pin::new(options.query_timeout / HEDGE_DIVISOR));
        let route = Arc::new(Route::new(members_clients, pin.clone()));
        let slots = Slots::new(slot_endpoints, token, user, pin);
        let client = EtcdClient {
            rt,
            _stop: stop,
            route,
            slots,
            query_timeout: options.query_timeout,
            members: members.join(","),
            endpoints,
            tls: options.tls.as_ref().map(|t| t.identity.is_some()),
        };
        let checked = client.call_within("connect", options.connection_timeout, move |c| async move {
            c.authenticate().await?;
            let mut m = c.maintenance.clone();
            m.status(super::proto::etcdserverpb::StatusRequest {}).await.map(|_| ())
        });
        match checked {
            Ok(()) => Ok(client),
            Err(e) => Err(client.why_not_connected(e, options.connection_timeout)),
        }
    }

    /// When connecting failed below gRPC, tonic's status says only "transport error" (the balanced
    /// channel keeps the cause to itself): connects to each member directly, once, to get the
    /// transport's own error chain, the TLS stack's words for a certificate or protocol mismatch
    /// (unknown issuer, a plain member spoken to in TLS, a client certificate the member
    /// requires). A TLS failure is permanent (`Backend`): retrying cannot fix it. A call that
    /// timed out, or that the server refused, is returned as it is.
    fn why_not_connected(&self, e: Error, bound: Duration) -> Error {
        let text = e.to_string();
        if (e.kind() != ErrorKind::Unavailable && !tls_failure(&text)) || text.contains("did not answer within") {
            return e;
        }
        let endpoints = self.endpoints.clone();
        let (tx, rx) = crossbeam_channel::bounded(1);
        self.rt.spawn(async move {
            let tries = endpoints.into_iter().map(|(m, ep)| async move {
                match tokio::time::timeout(bound, ep.connect()).await {
                    Ok(Err(err)) => Some((m, display_chain(&err))),
                    Ok(Ok(_)) | Err(_) => None,
                }
            });
            let failed: Vec<(String, String)> = futures::future::join_all(tries).await.into_iter().flatten().collect();
            let _ = tx.send(failed);
        });
        let failed = rx.recv_deadline(Instant::now() + bound + Duration::from_millis(20)).unwrap_or_default();
        const EOF_HINT: &str =
            " (the member closed the connection in the TLS handshake: does it serve plain text? then use etcd://)";
        if let Some((member, words)) = failed.iter().find(|(_, w)| tls_failure(w)) {
            let hint = if words.contains("tls handshake eof") { EOF_HINT } else { "" };
            return Error::backend(format!("etcd connect at {member} failed in the TLS handshake: {words}{hint}"));
        }
        if tls_failure(&text) {
            let hint = if text.contains("tls handshake eof") { EOF_HINT } else { "" };
            return Error::backend(format!("{text}: failed in the TLS handshake{hint}"));
        }
        // Every member accepted a connection (and a TLS handshake), then closed it at the first
        // request: what members do to a client that lacks what they require. Neither side says
        // more (the member's TLS alert, when there is one, may not reach the client in time).
        let closed =
            ["connection closed", "connection reset", "broken pipe", "stream closed"].iter().any(|w| text.contains(w));
        if failed.is_empty() && closed {
            match self.tls {
                Some(false) => {
                    return Error::backend(format!(
                        "{text}: the members at {} closed the connection after the TLS handshake; no client \
                         certificate was given (cert= and key=), which a member started with --client-cert-auth \
                         requires",
                        self.members
                    ))
                }
                None => {
                    return Error::backend(format!(
                        "{text}: the members at {} closed the connection at the first plain-text request; a \
                         member that serves TLS only does that (then use etcds://)",
                        self.members
                    ))
                }
                Some(true) => {}
            }
        }
        match failed.first() {
            Some((member, words)) => Error::unavailable(format!("etcd connect at {member} failed: {words}")),
            None => e,
        }
    }

    /// The configured user's name, when there is one.
    pub(crate) fn user(&self) -> Option<&str> {
        self.route.member(0).and_then(|c| c.user.as_deref()).map(|u| u.0.as_str())
    }

    /// The members' addresses, in the order given.
    pub(crate) fn member_addrs(&self) -> Vec<String> {
        self.endpoints.iter().map(|(m, _)| m.clone()).collect()
    }

    /// Runs `op` on the clients of member `i` alone, bounded by the query timeout; for `check`.
    pub(crate) fn call_member<T, F, Fut>(&self, i: usize, what: &str, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        let (Some((addr, _)), Some(clients)) = (self.endpoints.get(i), self.route.member(i)) else {
            return Err(Error::backend(format!("no etcd member number {i}")));
        };
        // Errors name the member alone, not the whole list.
        self.run(what, addr, self.query_timeout, Target::Member(Box::new(clients.clone())), op)
    }

    /// The query timeout.
    pub(crate) fn query_timeout(&self) -> Duration {
        self.query_timeout
    }

    /// Spawns the long-lived task `task` (the watch stream's) on the runtime, with the route; it
    /// ends with the runtime, when the client is dropped.
    pub(crate) fn spawn<F, Fut>(&self, task: F)
    where
        F: FnOnce(Arc<Route>) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(task(self.route.clone()));
    }

    /// Runs `op` on the runtime, bounded by the query timeout, routed to the members (`route.rs`;
    /// `op` may run on more than one); re-authenticates once when the token expired.
    pub(crate) fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        self.call_within(what, self.query_timeout, op)
    }

    /// As [`EtcdClient::call`] for an `op` that must not run twice (it is sent to another member
    /// only when it could not be sent at all).
    pub(crate) fn call_once<T, F, Fut>(&self, what: &str, bound: Duration, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        self.run(what, &self.members, bound, Target::Routed(Resend::Once), op)
    }

    /// As [`EtcdClient::call`], bounded by `bound` (inside and outside).
    pub(crate) fn call_within<T, F, Fut>(&self, what: &str, bound: Duration, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        self.run(what, &self.members, bound, Target::Routed(Resend::Idempotent), op)
    }

    fn run<T, F, Fut>(&self, what: &str, members: &str, bound: Duration, target: Target, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        // The last failure that made the call go on to another member (route.rs): for the
        // message when the bound ends the call.
        let here = parking_lot::Mutex::new(None);
        let answered = match target {
            Target::Routed(resend) => self.slots.run(&op, resend, bound, &here),
            Target::Member(_) => None,
        };
        let (answer, last) = match answered {
            Some(answer) => (answer, here.into_inner()),
            None => {
                let last: Arc<parking_lot::Mutex<Option<Status>>> = Arc::default();
                let answer = self.spawned(bound, target, op, last.clone());
                let last = last.lock().take();
                (answer, last)
            }
        };
        match answer {
            Some(Ok(v)) => Ok(v),
            Some(Err(s)) => Err(status_error(what, members, &s)),
            None => match last {
                Some(s) => Err(status_error(&format!("{what} (sent for {bound:?})"), members, &s)),
                None => Err(Error::unavailable(format!("etcd {what} at {members} did not answer within {bound:?}"))),
            },
        }
    }

    /// Runs `op` on the backend's runtime, bounded by `bound` inside and outside (the caller
    /// waits on a channel until the deadline): `None` when it did not finish in time.
    fn spawned<T, F, Fut>(
        &self,
        bound: Duration,
        target: Target,
        op: F,
        last: Arc<parking_lot::Mutex<Option<Status>>>,
    ) -> Option<std::result::Result<T, Status>>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        let deadline = Instant::now() + bound;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let route = self.route.clone();
        self.rt.spawn(async move {
            let run = async {
                match target {
                    Target::Routed(resend) => route.call(&op, resend, &last).await,
                    Target::Member(clients) => clients.run(&op).await,
                }
            };
            let _ = tx.send(tokio::time::timeout(bound, run).await);
        });
        // A little past the inner timeout, so that its answer (rather than ours) is the one seen.
        rx.recv_deadline(deadline + Duration::from_millis(20)).ok().and_then(|r| r.ok())
    }
}

/// Starts the backend's runtime: a current-thread runtime that a thread of its own
/// (`simba-etcd`) drives until the returned sender is dropped, then shuts down without waiting
/// for its tasks. Current-thread rather than a one-worker multi-thread runtime: with the
/// multi-thread scheduler reading the watch stream, the hand-off's p99 was ~0.8 ms longer on a
/// 2-core machine, all of it on the way from the watch event to the waiting caller
/// (docs/benchmarks.md, "etcd", session 29).
fn start_runtime() -> Result<(tokio::runtime::Handle, tokio::sync::oneshot::Sender<()>)> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::backend(format!("cannot start the etcd client's runtime: {e}")))?;
    let handle = rt.handle().clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    std::thread::Builder::new()
        .name("simba-etcd".into())
        .spawn(move || {
            // Ends when the client drops `stop` (an error: nothing is ever sent).
            let _ = rt.block_on(stopped);
            rt.shutdown_background();
        })
        .map_err(|e| Error::backend(format!("cannot start the etcd client's runtime thread: {e}")))?;
    Ok((handle, stop))
}

/// Where [`EtcdClient::run`] sends a call.
enum Target {
    /// Routed to the members (`route.rs`).
    Routed(Resend),
    /// To this member alone.
    Member(Box<Clients>),
}

/// The hedge delay is the query timeout divided by this (`route.rs`).
const HEDGE_DIVISOR: u32 = 4;
