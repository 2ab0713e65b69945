//! The etcd backend's options ([`EtcdOptions`], [`EtcdTls`]) and its URL
//! (`etcd://[user[:password]@]host:2379[,host:2379…]/prefix[?ca=…&cert=…&key=…]`, `etcds://` for
//! TLS).

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::error::{Error, Result};
use crate::settings::endpoint::{parse_endpoint, url_error, Endpoint};
use crate::settings::kind::BackendKind;
use crate::settings::tls_query::TlsParams;

/// The default key prefix, `simba`: every key lives under `/simba/`.
pub const DEFAULT_PREFIX: &str = "simba";
/// The default bound on every call (5 s).
pub const DEFAULT_QUERY_TIMEOUT: Duration = Duration::from_secs(5);
/// The default bound on connecting (10 s).
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// The default client port (2379).
pub const DEFAULT_PORT: u16 = 2379;

/// Client TLS of the etcd backend: the CA that signs the members' certificates (the system's
/// roots when none is given), and optionally a client certificate and key for members started
/// with `--client-cert-auth`. Host name verification is always on. The key is never printed.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EtcdTls {
    pub(crate) ca_pem: Option<String>,
    pub(crate) identity: Option<(String, String)>,
}

impl fmt::Debug for EtcdTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdTls")
            .field("ca", &self.ca_pem.as_ref().map(|_| "<pem>"))
            .field("client_certificate", &self.identity.is_some())
            .finish()
    }
}

fn read_pem(path: &Path, what: &str) -> Result<String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::config(format!("cannot read the etcd TLS {what} file {}: {e}", path.display())))?;
    if !text.contains("-----BEGIN ") {
        return Err(Error::config(format!(
            "the etcd TLS {what} file {} holds no PEM block (expected -----BEGIN …-----)",
            path.display()
        )));
    }
    Ok(text)
}

impl EtcdTls {
    /// TLS trusting the system's root certificates.
    pub fn system_roots() -> EtcdTls {
        EtcdTls::default()
    }

    /// TLS trusting the CA certificates in the PEM text `ca_pem`.
    ///
    /// # Errors
    /// `InvalidConfig` when the text holds no PEM block.
    pub fn from_ca_pem(ca_pem: impl Into<String>) -> Result<EtcdTls> {
        let ca = ca_pem.into();
        if !ca.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::config("the etcd TLS CA holds no PEM CERTIFICATE block"));
        }
        Ok(EtcdTls { ca_pem: Some(ca), identity: None })
    }

    /// TLS trusting the CA certificates in the PEM file at `path`.
    ///
    /// # Errors
    /// `InvalidConfig` when the file cannot be read or holds no PEM block.
    pub fn from_ca_file(path: impl AsRef<Path>) -> Result<EtcdTls> {
        Ok(EtcdTls { ca_pem: Some(read_pem(path.as_ref(), "CA")?), identity: None })
    }

    /// Presents the client certificate chain in the PEM file `cert` with the private key in the
    /// PEM file `key`.
    ///
    /// # Errors
    /// `InvalidConfig` when a file cannot be read or holds no PEM block.
    pub fn identity_files(mut self, cert: impl AsRef<Path>, key: impl AsRef<Path>) -> Result<EtcdTls> {
        self.identity = Some((read_pem(cert.as_ref(), "client certificate")?, read_pem(key.as_ref(), "client key")?));
        Ok(self)
    }
}

/// How the etcd backend connects and where it keeps its keys.
#[derive(Clone)]
pub struct EtcdOptions {
    pub(crate) prefix: String,
    pub(crate) query_timeout: Duration,
    pub(crate) connection_timeout: Duration,
    pub(crate) tls: Option<EtcdTls>,
    pub(crate) user: Option<(String, String)>,
}

impl Default for EtcdOptions {
    fn default() -> Self {
        EtcdOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            tls: None,
            user: None,
        }
    }
}

impl fmt::Debug for EtcdOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdOptions")
            .field("prefix", &self.prefix)
            .field("query_timeout", &self.query_timeout)
            .field("connection_timeout", &self.connection_timeout)
            .field("tls", &self.tls)
            .field("user", &self.user.as_ref().map(|(u, _)| u))
            .finish()
    }
}

impl EtcdOptions {
    /// The key prefix (default [`DEFAULT_PREFIX`]): every key of the backend is under
    /// `/<prefix>/`. 1-128 characters of `[A-Za-z0-9._-]` and `/` (no empty segment).
    #[must_use]
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// Bound on every call (default [`DEFAULT_QUERY_TIMEOUT`]).
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = d;
        self
    }

    /// Bound on connecting (default [`DEFAULT_CONNECTION_TIMEOUT`]).
    #[must_use]
    pub fn connection_timeout(mut self, d: Duration) -> Self {
        self.connection_timeout = d;
        self
    }

    /// Connects to every member over TLS.
    #[must_use]
    pub fn tls(mut self, tls: EtcdTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Authenticates as `user` with `password` (etcd's own users, `etcdctl user add`); the token
    /// the server hands out is renewed when it expires.
    #[must_use]
    pub fn user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.user = Some((user.into(), password.into()));
        self
    }

    /// Checks every value (no I/O).
    pub(crate) fn validate(&self) -> Result<()> {
        let p = &self.prefix;
        let ok_chars = p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/'));
        if p.is_empty() || p.len() > 128 || !ok_chars || p.split('/').any(|s| s.is_empty() || s == "." || s == "..") {
            return Err(Error::config(format!(
                "invalid etcd key prefix {:?}: expected 1-128 characters of [A-Za-z0-9._-] in '/'-separated \
                 segments, none empty, '.' or '..' (e.g. simba or apps/simba)",
                p.chars().take(140).collect::<String>()
            )));
        }
        for (what, d) in [("query timeout", self.query_timeout), ("connection timeout", self.connection_timeout)] {
            if d.is_zero() || d > Duration::from_secs(3600) {
                return Err(Error::config(format!(
                    "invalid etcd {what} {d:?}: expected more than 0 and at most 1 hour"
                )));
            }
        }
        if let Some((u, _)) = &self.user {
            if u.is_empty() {
                return Err(Error::config("invalid etcd user: the user name is empty"));
            }
        }
        Ok(())
    }
}

/// A parsed etcd URL: its members and the options it sets.
#[derive(Debug, Clone)]
pub(crate) struct EtcdUrl {
    /// `host:port` of every member, as written (port defaulted to 2379).
    pub(crate) members: Vec<String>,
    pub(crate) tls: bool,
    pub(crate) prefix: Option<String>,
    pub(crate) user: Option<(String, String)>,
    /// The TLS files `ca=`, `cert=` and `key=` name (paths as written: a query is text).
    pub(crate) ca: Option<PathBuf>,
    pub(crate) cert: Option<PathBuf>,
    pub(crate) key: Option<PathBuf>,
}

impl EtcdUrl {
    /// Parses `url` (no I/O).
    pub(crate) fn parse(url: &str) -> Result<EtcdUrl> {
        let ep = parse_endpoint(url)?;
        EtcdUrl::from_endpoint(&ep)
    }

    /// The etcd settings of a split URL.
    pub(crate) fn from_endpoint(ep: &Endpoint) -> Result<EtcdUrl> {
        if ep.kind != BackendKind::Etcd {
            return Err(url_error(&ep.redacted, "not an etcd:// or etcds:// URL"));
        }
        let members = ep
            .hosts
            .iter()
            .map(|h| {
                let host = if h.host.contains(':') { format!("[{}]", h.host) } else { h.host.clone() };
                format!("{host}:{}", h.port.unwrap_or(DEFAULT_PORT))
            })
            .collect();
        let user = match (&ep.username, &ep.password) {
            (Some(u), Some(p)) => Some((u.clone(), p.0.clone())),
            (Some(_), None) => {
                return Err(url_error(&ep.redacted, "an etcd user needs a password (etcd://user:password@host:2379)"))
            }
            (None, Some(_)) => return Err(url_error(&ep.redacted, "a password without a user name")),
            (None, None) => None,
        };
        let mut out = EtcdUrl {
            members,
            tls: ep.scheme == "etcds",
            prefix: (!ep.path.is_empty()).then(|| ep.path.trim_end_matches('/').to_string()),
            user,
            ca: None,
            cert: None,
            key: None,
        };
        let invalid = |d: String| url_error(&ep.redacted, d);
        let params = TlsParams { names: ["ca", "cert", "key"], normalize: TlsParams::exact, invalid: &invalid };
        [out.ca, out.cert, out.key] = params.split(ep.query.as_deref().unwrap_or(""), &mut |k, _| {
            Err(invalid(format!(
                "unknown etcd URL parameter {:?} (known: ca, cert, key)",
                k.chars().take(64).collect::<String>()
            )))
        })?;
        if !out.tls && (out.ca.is_some() || out.cert.is_some() || out.key.is_some()) {
            return Err(url_error(&ep.redacted, "ca, cert and key are TLS files: use etcds:// for TLS"));
        }
        if out.cert.is_some() != out.key.is_some() {
            return Err(url_error(&ep.redacted, "cert and key go together (the client certificate and its key)"));
        }
        Ok(out)
    }

    /// `options` with what this URL sets.
    ///
    /// # Errors
    /// `InvalidConfig` when a TLS file cannot be read, or TLS or a user is set both in the URL
    /// and in `options`.
    pub(crate) fn apply(&self, mut options: EtcdOptions) -> Result<EtcdOptions> {
        if let Some(p) = &self.prefix {
            options.prefix = p.clone();
        }
        if let Some(user) = &self.user {
            if options.user.is_some() {
                return Err(Error::config("the etcd user is set both in the URL and in the options: set it once"));
            }
            options.user = Some(user.clone());
        }
        if self.tls {
            if options.tls.is_some() && (self.ca.is_some() || self.cert.is_some()) {
                return Err(Error::config(
                    "etcd TLS files are set both in the URL (ca, cert, key) and in the options: set them once",
                ));
            }
            if options.tls.is_none() {
                let mut tls = match &self.ca {
                    Some(ca) => EtcdTls::from_ca_file(ca)?,
                    None => EtcdTls::system_roots(),
                };
                if let (Some(c), Some(k)) = (&self.cert, &self.key) {
                    tls = tls.identity_files(c, k)?;
                }
                options.tls = Some(tls);
            }
        } else if options.tls.is_some() {
            return Err(Error::config("etcd TLS options were given for an etcd:// URL: use etcds:// for TLS"));
        }
        options.validate()?;
        Ok(options)
    }
}
