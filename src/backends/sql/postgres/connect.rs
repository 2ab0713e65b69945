//! The one place PostgreSQL connections are opened: [`PgConnector::connect`] (the blocking
//! `postgres` client, for the `LISTEN` connection) and [`PgConnector::connect_async`]
//! (`tokio-postgres` on a runtime of the caller's, for the pool, whose every call is bounded). Both
//! go through one configuration, so they use the same TLS setup, timeouts and startup options.

use std::fmt;

use postgres::{Client, NoTls};

use super::config::{SslMode, Verification};
use super::tls::{Handshake, TlsSetup};

/// How an open connection is protected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Transport {
    /// Not encrypted (`sslmode=disable`, or `prefer` and the server declined or failed TLS).
    Plain,
    /// Encrypted: the protocol version and cipher suite, and what was verified.
    Tls { protocol: String, cipher: String, verification: Verification },
}

/// An open `tokio-postgres` connection (its connection task spawned on the runtime given to
/// [`PgConnector::connect_async`], which drives it whenever that runtime runs) and how it is
/// protected.
pub(crate) struct AsyncConnected {
    pub(crate) client: tokio_postgres::Client,
    pub(crate) transport: Transport,
}

/// An open connection and how it is protected.
pub(crate) struct Connected {
    pub(crate) client: Client,
    pub(crate) transport: Transport,
}

/// A failed connect: the driver's error and what became of the TLS handshake.
#[derive(Debug)]
pub(crate) struct ConnectError {
    pub(crate) error: postgres::Error,
    pub(crate) handshake: Handshake,
}

impl fmt::Display for ConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.error, f)
    }
}

impl std::error::Error for ConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        std::error::Error::source(&self.error)
    }
}

/// A failed [`PgConnector::connect_async`].
#[derive(Debug)]
pub(crate) enum AsyncConnectError {
    /// The driver's error.
    Failed(ConnectError),
    /// No connection within the connect timeout (startup and authentication included).
    TimedOut,
    /// The connection's runtime could not be built.
    Runtime(std::io::Error),
}

impl fmt::Display for AsyncConnectError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AsyncConnectError::Failed(e) => fmt::Display::fmt(e, f),
            AsyncConnectError::TimedOut => f.write_str("no connection within the connect timeout"),
            AsyncConnectError::Runtime(e) => write!(f, "cannot start the connection's runtime: {e}"),
        }
    }
}

impl std::error::Error for AsyncConnectError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            AsyncConnectError::Failed(e) => std::error::Error::source(e),
            AsyncConnectError::TimedOut => None,
            AsyncConnectError::Runtime(e) => Some(e),
        }
    }
}

/// Opens connections with one driver configuration and one TLS setup.
#[derive(Clone)]
pub(crate) struct PgConnector {
    config: postgres::Config,
    /// The same configuration for `tokio-postgres` (see [`async_config`]).
    async_config: tokio_postgres::Config,
    tls: TlsSetup,
}

/// `config` as a `tokio-postgres` configuration (the `postgres` client wraps one but does not
/// hand it out): every setting `postgres::Config` has a getter for.
fn async_config(config: &postgres::Config) -> tokio_postgres::Config {
    let mut c = tokio_postgres::Config::new();
    if let Some(v) = config.get_user() {
        c.user(v);
    }
    if let Some(v) = config.get_password() {
        c.password(v);
    }
    if let Some(v) = config.get_dbname() {
        c.dbname(v);
    }
    if let Some(v) = config.get_options() {
        c.options(v);
    }
    if let Some(v) = config.get_application_name() {
        c.application_name(v);
    }
    c.ssl_mode(config.get_ssl_mode());
    c.ssl_negotiation(config.get_ssl_negotiation());
    for host in config.get_hosts() {
        match host {
            postgres::config::Host::Tcp(h) => c.host(h),
            postgres::config::Host::Unix(p) => c.host_path(p),
        };
    }
    for addr in config.get_hostaddrs() {
        c.hostaddr(*addr);
    }
    for port in config.get_ports() {
        c.port(*port);
    }
    if let Some(v) = config.get_connect_timeout() {
        c.connect_timeout(*v);
    }
    if let Some(v) = config.get_tcp_user_timeout() {
        c.tcp_user_timeout(*v);
    }
    c.keepalives(config.get_keepalives());
    c.keepalives_idle(config.get_keepalives_idle());
    if let Some(v) = config.get_keepalives_interval() {
        c.keepalives_interval(v);
    }
    if let Some(v) = config.get_keepalives_retries() {
        c.keepalives_retries(v);
    }
    c.target_session_attrs(config.get_target_session_attrs());
    c.channel_binding(config.get_channel_binding());
    c.load_balance_hosts(config.get_load_balance_hosts());
    c
}

impl fmt::Debug for PgConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // postgres::Config's Debug redacts the password; the TLS setup shows paths only.
        f.debug_struct("PgConnector").field("config", &self.config).field("tls", &self.tls).finish()
    }
}

impl PgConnector {
    /// A connector for `config` (timeouts and startup options already applied) over `tls`.
    pub(crate) fn new(mut config: postgres::Config, tls: TlsSetup) -> PgConnector {
        config.ssl_mode(match tls.settings.mode() {
            SslMode::Disable => postgres::config::SslMode::Disable,
            SslMode::Prefer => postgres::config::SslMode::Prefer,
            SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull => postgres::config::SslMode::Require,
        });
        let async_config = async_config(&config);
        PgConnector { config, async_config, tls }
    }

    /// The driver configuration (user, database, hosts) this connector uses.
    pub(crate) fn config(&self) -> &postgres::Config {
        &self.config
    }

    /// The TLS setup every connection uses.
    pub(crate) fn tls(&self) -> &TlsSetup {
        &self.tls
    }

    /// Opens one connection (blocking, bounded by the configuration's connect timeout).
    ///
    /// `sslmode=prefer` behaves as in libpq: TLS when the server offers it, plaintext when it
    /// declines — and, when the TLS handshake itself fails, one more attempt without TLS.
    ///
    /// # Errors
    /// The driver's error, with the handshake's outcome for the message.
    pub(crate) fn connect(&self) -> Result<Connected, ConnectError> {
        let Some((make_tls, outcome)) = self.tls.connector() else {
            return self.plain(&self.config);
        };
        match self.config.connect(make_tls) {
            Ok(client) => {
                let transport = match outcome.lock().clone() {
                    Handshake::Done { protocol, cipher } => {
                        Transport::Tls { protocol, cipher, verification: self.tls.verification }
                    }
                    _ => Transport::Plain,
                };
                Ok(Connected { client, transport })
            }
            Err(error) => {
                let handshake = outcome.lock().clone();
                if self.tls.settings.mode() == SslMode::Prefer && matches!(handshake, Handshake::Failed { .. }) {
                    log::debug!(
                        "simba postgres: TLS handshake failed under sslmode=prefer ({error}); trying without TLS"
                    );
                    let mut plain = self.config.clone();
                    plain.ssl_mode(postgres::config::SslMode::Disable);
                    return self.plain(&plain);
                }
                Err(ConnectError { error, handshake })
            }
        }
    }

    /// Opens one `tokio-postgres` connection on `rt` (blocking, bounded by `within`), as
    /// [`connect`](Self::connect) does with the same configuration and TLS setup, and spawns its
    /// connection task on `rt`.
    ///
    /// # Errors
    /// [`AsyncConnectError::Failed`]: the driver's error, with the handshake's outcome for the
    /// message; [`AsyncConnectError::TimedOut`]: nothing within `within`.
    pub(crate) fn connect_async(
        &self,
        rt: &tokio::runtime::Runtime,
        within: std::time::Duration,
    ) -> Result<AsyncConnected, AsyncConnectError> {
        let Some((make_tls, outcome)) = self.tls.connector() else {
            return self.plain_async(rt, &self.async_config, within);
        };
        match rt.block_on(async { tokio::time::timeout(within, self.async_config.connect(make_tls)).await }) {
            Err(_) => Err(AsyncConnectError::TimedOut),
            Ok(Ok((client, connection))) => {
                rt.spawn(connection);
                let transport = match outcome.lock().clone() {
                    Handshake::Done { protocol, cipher } => {
                        Transport::Tls { protocol, cipher, verification: self.tls.verification }
                    }
                    _ => Transport::Plain,
                };
                Ok(AsyncConnected { client, transport })
            }
            Ok(Err(error)) => {
                let handshake = outcome.lock().clone();
                if self.tls.settings.mode() == SslMode::Prefer && matches!(handshake, Handshake::Failed { .. }) {
                    log::debug!(
                        "simba postgres: TLS handshake failed under sslmode=prefer ({error}); trying without TLS"
                    );
                    let mut plain = self.async_config.clone();
                    plain.ssl_mode(postgres::config::SslMode::Disable);
                    return self.plain_async(rt, &plain, within);
                }
                Err(AsyncConnectError::Failed(ConnectError { error, handshake }))
            }
        }
    }

    fn plain_async(
        &self,
        rt: &tokio::runtime::Runtime,
        config: &tokio_postgres::Config,
        within: std::time::Duration,
    ) -> Result<AsyncConnected, AsyncConnectError> {
        match rt.block_on(async { tokio::time::timeout(within, config.connect(tokio_postgres::NoTls)).await }) {
            Err(_) => Err(AsyncConnectError::TimedOut),
            Ok(Ok((client, connection))) => {
                rt.spawn(connection);
                Ok(AsyncConnected { client, transport: Transport::Plain })
            }
            Ok(Err(error)) => Err(AsyncConnectError::Failed(ConnectError { error, handshake: Handshake::NotStarted })),
        }
    }

    fn plain(&self, config: &postgres::Config) -> Result<Connected, ConnectError> {
        match config.connect(NoTls) {
            Ok(client) => Ok(Connected { client, transport: Transport::Plain }),
            Err(error) => Err(ConnectError { error, handshake: Handshake::NotStarted }),
        }
    }
}
