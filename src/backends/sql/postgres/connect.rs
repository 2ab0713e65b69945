//! The one place PostgreSQL connections are opened: [`PgConnector::connect`]. The pool's
//! connections and any dedicated connection (e.g. a `LISTEN` connection) go through it, so they
//! all use the same TLS setup, timeouts and startup options.

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

/// Opens connections with one driver configuration and one TLS setup.
#[derive(Clone)]
pub(crate) struct PgConnector {
    config: postgres::Config,
    tls: TlsSetup,
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
        PgConnector { config, tls }
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

    fn plain(&self, config: &postgres::Config) -> Result<Connected, ConnectError> {
        match config.connect(NoTls) {
            Ok(client) => Ok(Connected { client, transport: Transport::Plain }),
            Err(error) => Err(ConnectError { error, handshake: Handshake::NotStarted }),
        }
    }
}
