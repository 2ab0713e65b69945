//! The etcd gRPC client (tonic, pre-generated code in `proto/`) on the backend's own small tokio
//! runtime: the backend's only bridge from async to blocking code. Every call is spawned on that
//! runtime and bounded by the query timeout twice, inside (`tokio::time::timeout`, which drops the
//! request) and outside (the caller waits on a channel until the deadline), so a stuck runtime
//! never holds a caller past its deadline.

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
use super::proto::etcdserverpb::kv_client::KvClient;
use super::proto::etcdserverpb::lease_client::LeaseClient;
use super::proto::etcdserverpb::maintenance_client::MaintenanceClient;
use super::proto::etcdserverpb::watch_client::WatchClient;
use super::proto::etcdserverpb::AuthenticateRequest;
use crate::error::{display_chain, Error, Result};

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
    auth: AuthClient<Channel>,
    token: AuthToken,
    user: Option<Arc<(String, String)>>,
}

impl Clients {
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
}

/// True for the error etcd answers when a token expired (or a member restarted and forgot it).
pub(crate) fn token_expired(s: &Status) -> bool {
    s.code() == Code::Unauthenticated && s.message().contains("invalid auth token")
}

/// The client: its runtime and its clients.
pub(crate) struct EtcdClient {
    rt: tokio::runtime::Runtime,
    clients: Clients,
    query_timeout: Duration,
    /// The members, for messages.
    pub(crate) members: String,
}

impl Drop for EtcdClient {
    fn drop(&mut self) {
        // Never wait for the runtime's tasks (a drop may happen on any thread, even a runtime's).
        let rt = std::mem::replace(
            &mut self.rt,
            match tokio::runtime::Builder::new_current_thread().build() {
                Ok(rt) => rt,
                Err(_) => return,
            },
        );
        rt.shutdown_background();
    }
}

impl std::fmt::Debug for EtcdClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdClient").field("members", &self.members).finish_non_exhaustive()
    }
}

/// Maps a gRPC status to the crate's errors, in the server's (or the transport's) own words.
/// A certificate the TLS stack rejects is permanent (`Backend`): retrying cannot fix it.
pub(crate) fn status_error(what: &str, members: &str, s: &Status) -> Error {
    let mut words = s.message().to_string();
    if let Some(src) = s.source() {
        let chain = display_chain(src);
        if chain.contains(&words) {
            words = chain;
        } else if !words.contains(&chain) {
            words = format!("{words} ({chain})");
        }
    }
    let certificate = words.contains("certificate");
    match s.code() {
        Code::Unavailable | Code::DeadlineExceeded | Code::Cancelled | Code::Aborted | Code::ResourceExhausted
            if !certificate =>
        {
            Error::unavailable(format!("etcd {what} at {members} failed: {words}"))
        }
        // tonic reports transport failures (connection refused or reset) as Unknown with the
        // cause in the source chain.
        Code::Unknown if s.source().is_some() && !certificate => {
            Error::unavailable(format!("etcd {what} at {members} failed: {words}"))
        }
        code => Error::backend(format!("etcd {what} at {members} was refused: {words} (gRPC {code:?})")),
    }
}

use std::error::Error as _;

impl EtcdClient {
    /// Builds the runtime and the channel, authenticates, and checks the cluster answers (one
    /// status call) within the connection timeout.
    pub(crate) fn connect(members: &[String], options: &EtcdOptions) -> Result<EtcdClient> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("simba-etcd")
            .enable_all()
            .build()
            .map_err(|e| Error::backend(format!("cannot start the etcd client's runtime: {e}")))?;
        let scheme = if options.tls.is_some() { "https" } else { "http" };
        let mut endpoints = Vec::with_capacity(members.len());
        for m in members {
            let uri = format!("{scheme}://{m}");
            let mut ep = Endpoint::from_shared(uri.clone())
                .map_err(|e| Error::config(format!("invalid etcd member address {uri}: {e}")))?
                .connect_timeout(options.connection_timeout)
                .tcp_nodelay(true)
                .http2_keep_alive_interval(Duration::from_secs(10))
                .keep_alive_timeout(options.query_timeout)
                .keep_alive_while_idle(true);
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
            endpoints.push(ep);
        }
        let channel = {
            let _guard = rt.enter();
            Channel::balance_list(endpoints.into_iter())
        };
        let token = AuthToken::default();
        let clients = Clients {
            kv: KvClient::with_interceptor(channel.clone(), token.clone()),
            lease: LeaseClient::with_interceptor(channel.clone(), token.clone()),
            maintenance: MaintenanceClient::with_interceptor(channel.clone(), token.clone()),
            watch: WatchClient::with_interceptor(channel.clone(), token.clone()),
            auth: AuthClient::new(channel),
            token,
            user: options.user.clone().map(Arc::new),
        };
        let client = EtcdClient { rt, clients, query_timeout: options.query_timeout, members: members.join(",") };
        let c = client.clients.clone();
        client.call_within("connect", options.connection_timeout, move |_| {
            let c = c.clone();
            async move {
                c.authenticate().await?;
                let mut m = c.maintenance.clone();
                m.status(super::proto::etcdserverpb::StatusRequest {}).await.map(|_| ())
            }
        })?;
        Ok(client)
    }

    /// The query timeout.
    pub(crate) fn query_timeout(&self) -> Duration {
        self.query_timeout
    }

    /// Spawns the long-lived task `task` (the watch stream's) on the runtime, with the clients; it
    /// ends with the runtime, when the client is dropped.
    pub(crate) fn spawn<F, Fut>(&self, task: F)
    where
        F: FnOnce(Clients) -> Fut,
        Fut: Future<Output = ()> + Send + 'static,
    {
        self.rt.spawn(task(self.clients.clone()));
    }

    /// Runs `op` on the runtime, bounded by the query timeout; re-authenticates once when the
    /// token expired.
    pub(crate) fn call<T, F, Fut>(&self, what: &str, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        self.call_within(what, self.query_timeout, op)
    }

    fn call_within<T, F, Fut>(&self, what: &str, bound: Duration, op: F) -> Result<T>
    where
        F: Fn(Clients) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<T, Status>> + Send + 'static,
        T: Send + 'static,
    {
        let deadline = Instant::now() + bound;
        let (tx, rx) = crossbeam_channel::bounded(1);
        let clients = self.clients.clone();
        self.rt.spawn(async move {
            let run = async {
                match op(clients.clone()).await {
                    Err(s) if token_expired(&s) && clients.user.is_some() => {
                        log::debug!("etcd refused the auth token ({}): logging in again", s.message());
                        clients.authenticate().await?;
                        op(clients).await
                    }
                    r => r,
                }
            };
            let _ = tx.send(tokio::time::timeout(bound, run).await);
        });
        // A little past the inner timeout, so that its answer (rather than ours) is the one seen.
        match rx.recv_deadline(deadline + Duration::from_millis(20)) {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(s))) => Err(status_error(what, &self.members, &s)),
            Ok(Err(_)) | Err(_) => {
                Err(Error::unavailable(format!("etcd {what} at {} did not answer within {bound:?}", self.members)))
            }
        }
    }
}
