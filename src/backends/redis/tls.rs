//! TLS settings of the Redis backend: `rediss://` (standalone) and `rediss+cluster://` (Cluster),
//! a CA and a client identity from the URL (`?ca=…&cert=…&key=…`, parsed in `config.rs`) or [`RedisTls`]. The files are
//! read and parsed before any I/O; their contents never appear in `Debug`, logs or errors (only
//! the paths do). Certificate and host name verification are always on: there is no insecure mode.
//!
//! The driver's rustls needs a crypto provider. This crate compiles in aws-lc-rs (the provider
//! `zookeeper-client`'s rustls already uses, so one provider serves both); when the application
//! has installed no process-wide default provider, the first TLS client installs aws-lc-rs' as
//! the default (redis-rs builds its `rustls::ClientConfig` from the process default).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use redis::{ClientTlsConfig, ConnectionAddr, ConnectionInfo, RedisError, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::error::{Error, Result};

/// TLS files of a Redis connection: the CA that signs the servers' certificates (default: the
/// system's roots) and a client identity for servers that require one (`tls-auth-clients yes`).
/// Only paths are kept here; [`Debug`](fmt::Debug) shows them, never the files' contents.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTls {
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl RedisTls {
    /// No CA file (the system's roots) and no client identity.
    pub fn new() -> RedisTls {
        RedisTls::default()
    }

    /// Trusts only the CA certificate(s) in this PEM file (instead of the system's roots).
    #[must_use]
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(path.into());
        self
    }

    /// Presents this client certificate (PEM chain) and private key (PEM, PKCS#8, PKCS#1 or SEC1).
    #[must_use]
    pub fn client_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// The CA file, if any.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The client certificate and key files, if any.
    pub fn client_identity_files(&self) -> Option<(&Path, &Path)> {
        Some((self.cert.as_deref()?, self.key.as_deref()?))
    }

    /// True when no file is set.
    pub fn is_empty(&self) -> bool {
        self.ca.is_none() && self.cert.is_none() && self.key.is_none()
    }

    /// Joins the settings of the URL with those of the options; a file set in both with
    /// different paths is an error.
    pub(crate) fn merge(self, other: &RedisTls) -> Result<RedisTls> {
        let pick = |what: &str, a: Option<PathBuf>, b: &Option<PathBuf>| match (a, b) {
            (Some(a), Some(b)) if &a != b => Err(Error::config(format!(
                "the redis TLS {what} is set twice with different files: {} in the URL and {} in the options \
                 (SIMBA_REDIS_TLS_*); keep one",
                a.display(),
                b.display()
            ))),
            (Some(a), _) => Ok(Some(a)),
            (None, b) => Ok(b.clone()),
        };
        Ok(RedisTls {
            ca: pick("CA", self.ca, &other.ca)?,
            cert: pick("client certificate", self.cert, &other.cert)?,
            key: pick("client key", self.key, &other.key)?,
        })
    }

    /// Reads and parses the files (no network I/O).
    ///
    /// # Errors
    /// `InvalidConfig` naming the file that cannot be read or holds no usable PEM, or when only one
    /// of certificate and key is set.
    pub(crate) fn load(&self) -> Result<TlsCertificates> {
        let root_cert = match &self.ca {
            Some(path) => {
                let (pem, certs) = certificate_file(path, "CA")?;
                let mut store = rustls::RootCertStore::empty();
                for c in certs {
                    store.add(c).map_err(|e| bad_pem(path, "CA", &e))?;
                }
                Some(pem)
            }
            None => None,
        };
        let client_tls = match (&self.cert, &self.key) {
            (None, None) => None,
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::config(
                    "a redis TLS client identity needs both a certificate and a key (cert= and key= in the URL, \
                     or SIMBA_REDIS_TLS_CERT and SIMBA_REDIS_TLS_KEY)",
                ))
            }
            (Some(cert), Some(key)) => {
                let (client_cert, _) = certificate_file(cert, "client certificate")?;
                let client_key = read(key, "client key")?;
                // The key's own error text may quote the file; say only what kind of problem it is.
                PrivateKeyDer::from_pem_slice(&client_key).map_err(|_| {
                    no_pem(key, "client key", "a private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)")
                })?;
                Some(ClientTlsConfig { client_cert, client_key })
            }
        };
        Ok(TlsCertificates { client_tls, root_cert })
    }

    /// The three file slots (CA, client certificate, client key), for the URL and `SIMBA_REDIS_TLS_*`
    /// parsers; a certificate without its key, or the reverse, is refused when the backend is built.
    pub(crate) fn slots(&mut self) -> [&mut Option<PathBuf>; 3] {
        [&mut self.ca, &mut self.cert, &mut self.key]
    }
}

/// A PEM file of one or more certificates: its bytes and the parsed certificates.
fn certificate_file(path: &Path, what: &str) -> Result<(Vec<u8>, Vec<CertificateDer<'static>>)> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad_pem(path, what, &e))?;
    if certs.is_empty() {
        return Err(no_pem(path, what, "a certificate (BEGIN CERTIFICATE)"));
    }
    Ok((pem, certs))
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::config(format!("cannot read the redis TLS {what} file {}: {e}", path.display())).with_source(e)
    })
}

fn bad_pem(path: &Path, what: &str, e: &dyn fmt::Display) -> Error {
    Error::config(format!("the redis TLS {what} file {} is not a valid PEM certificate: {e}", path.display()))
}

fn no_pem(path: &Path, what: &str, expected: &str) -> Error {
    Error::config(format!("the redis TLS {what} file {} holds no {expected}", path.display()))
}

pub(crate) fn is_tls_scheme(url: &str) -> bool {
    url.get(..8).is_some_and(|s| s.eq_ignore_ascii_case("rediss:/")) || url.starts_with("rediss+cluster://")
}

/// The certificates for connections to `url` from the TLS `files`: `None` for a plain
/// `redis://` URL (then `files` must be empty).
///
/// # Errors
/// As [`RedisTls::load`]; `InvalidConfig` when `files` names a file for a `redis://` URL.
pub(crate) fn certificates(url: &str, files: &RedisTls) -> Result<Option<TlsCertificates>> {
    if !is_tls_scheme(url) {
        if !files.is_empty() {
            return Err(Error::config(format!(
                "redis TLS files are set (ca=/cert=/key=, SIMBA_REDIS_TLS_* or RedisOptions::tls) but the URL {} is \
                 not TLS: use rediss:// (rediss+cluster:// on Cluster), or remove them",
                super::port::redact(url)
            )));
        }
        return Ok(None);
    }
    ensure_provider();
    Ok(Some(files.load()?))
}

/// Makes sure redis-rs' rustls finds a crypto provider (see the module docs).
pub(crate) fn ensure_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one meanwhile: that one is used.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// Applies `certs` to a `rediss://` connection info (no I/O).
///
/// # Errors
/// `InvalidConfig` when the driver rejects the certificates.
pub(crate) fn apply(info: ConnectionInfo, certs: Option<&TlsCertificates>, shown: &str) -> Result<ConnectionInfo> {
    let Some(certs) = certs else { return Ok(info) };
    let client = redis::Client::build_with_tls(info, certs.clone())
        .map_err(|e| Error::config(format!("redis TLS settings for {shown} are not usable: {e}")).with_source(e))?;
    Ok(client.get_connection_info().clone())
}

/// The rustls error behind a driver error, if the TLS layer failed.
fn rustls_error(e: &RedisError) -> Option<&rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        // redis-rs keeps its I/O error as `Arc<dyn Error + Send + Sync>`; rustls' error is inside.
        type Shared = Arc<dyn std::error::Error + Send + Sync>;
        let io = err
            .downcast_ref::<std::io::Error>()
            .or_else(|| err.downcast_ref::<Shared>().and_then(|a| a.downcast_ref::<std::io::Error>()));
        if let Some(t) = io.and_then(|io| io.get_ref()).and_then(|inner| inner.downcast_ref::<rustls::Error>()) {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// What to change when the TLS handshake (or the TLS layer) failed: `None` when `e` is not a TLS
/// failure. These never heal by retrying.
pub(crate) fn handshake_hint(e: &RedisError) -> Option<&'static str> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as T};
    Some(match rustls_error(e)? {
        T::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate does not name the host in the URL: connect by a name or address the \
             certificate lists (host name verification cannot be turned off)"
        }
        T::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => "the server's certificate is outside its validity period (check the server's certificate and both clocks)",
        T::InvalidCertificate(_) => {
            "the server's certificate does not verify against the trusted CAs: give the CA that signs it with \
             ?ca=/path/ca.pem (or SIMBA_REDIS_TLS_CA, RedisTls::ca); without one the system's roots are used"
        }
        T::AlertReceived(
            A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied,
        ) => {
            "the server requires a client certificate it trusts (tls-auth-clients): give one with \
             cert=/path/client.pem&key=/path/client.key (or SIMBA_REDIS_TLS_CERT and SIMBA_REDIS_TLS_KEY)"
        }
        T::InvalidMessage(_) | T::InappropriateMessage { .. } | T::InappropriateHandshakeMessage { .. } => {
            "the server did not answer in TLS: if it does not accept TLS on this port, use redis://"
        }
        _ => "check the TLS settings (ca=, cert=, key=) and the server's tls-* configuration",
    })
}

/// How a connection to `info` is protected, for `simba check`: `None` for plain TCP (or a Unix
/// socket).
pub(crate) fn describe(info: &ConnectionInfo, tls: &RedisTls) -> Option<String> {
    let ConnectionAddr::TcpTls { insecure, tls_params, .. } = info.addr() else { return None };
    if tls.is_empty() && tls_params.is_some() {
        // The application's own ConnectionInfo (built with `redis::Client::build_with_tls`).
        return Some(
            "encrypted (TLS, rustls); server certificate and host name verified against the certificates of the \
             application's ConnectionInfo; client identity as set there"
                .to_string(),
        );
    }
    let roots = match tls.ca_file() {
        Some(ca) => format!("the CA in {}", ca.display()),
        None => "the system's root certificates".to_string(),
    };
    let verified = if *insecure {
        "the server certificate is NOT verified".to_string()
    } else {
        format!("server certificate and host name verified against {roots}")
    };
    let identity = match tls.client_identity_files() {
        Some((cert, _)) => format!("client certificate {} presented", cert.display()),
        None => "no client certificate".to_string(),
    };
    Some(format!("encrypted (TLS, rustls); {verified}; {identity}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_checked_before_any_io() {
        let dir = std::env::temp_dir().join(format!("simba-redis-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "SECRET-MATERIAL not a pem").unwrap();
        let missing = dir.join("missing.pem");
        let e = RedisTls::new().ca(&missing).load().unwrap_err();
        assert!(e.to_string().contains("missing.pem") && e.to_string().contains("CA"), "{e}");
        let e = RedisTls::new().ca(&junk).load().unwrap_err();
        assert!(e.to_string().contains("junk.pem") && !e.to_string().contains("SECRET"), "{e}");
        let e = RedisTls::new().client_identity(&junk, &junk).load().unwrap_err();
        assert!(e.to_string().contains("junk.pem") && !e.to_string().contains("SECRET"), "{e}");
        let half = RedisTls { cert: Some(junk.clone()), ..RedisTls::default() };
        assert!(half.load().unwrap_err().to_string().contains("both"));
        let e = RedisTls::new().ca("/a").merge(&RedisTls::new().ca("/b")).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert_eq!(RedisTls::new().ca("/a").merge(&RedisTls::new().ca("/a")).unwrap(), RedisTls::new().ca("/a"));
        std::fs::remove_dir_all(&dir).ok();
    }
}
