//! The PostgreSQL backend's TLS: a small `MakeTlsConnect` over tokio-rustls (the `postgres`
//! client runs tokio inside), with rustls and the aws-lc-rs provider the Redis and ZooKeeper
//! backends already use (see `docs/backends/sql.md`, TLS).
//!
//! The verifier follows libpq's `sslmode`: `require` checks nothing (unless a root certificate is
//! given), `verify-ca` the chain, `verify-full` the chain and the host name. The handshake's
//! outcome is recorded per connection, so the pool knows whether a connection is encrypted (for
//! `simba check`) and why a handshake failed (for the error message).

use std::fmt;
use std::future::Future;
use std::io;
use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect, TlsStream};
use postgres::Socket;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::config::{PostgresTls, RootCerts, Verification};
use crate::error::{Error, Result};

/// The loaded TLS setup of a backend: the rustls configuration (none for `sslmode=disable`) and
/// what it verifies. Built once, before any network I/O; every connection uses it.
#[derive(Clone)]
pub(crate) struct TlsSetup {
    pub(crate) settings: PostgresTls,
    pub(crate) verification: Verification,
    client: Option<Arc<ClientConfig>>,
}

impl fmt::Debug for TlsSetup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsSetup").field("settings", &self.settings).finish_non_exhaustive()
    }
}

impl TlsSetup {
    /// Reads the files of `settings` and builds the rustls configuration (no network I/O).
    ///
    /// # Errors
    /// `InvalidConfig` naming the file that cannot be read or holds no usable PEM, or the rule
    /// `settings` breaks; never a file's contents.
    pub(crate) fn load(settings: &PostgresTls) -> Result<TlsSetup> {
        settings.validate()?;
        let verification = settings.verification();
        if verification == Verification::Plain {
            return Ok(TlsSetup { settings: settings.clone(), verification, client: None });
        }
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let webpki = match settings.root_certs() {
            None => None,
            Some(root) => {
                let roots = root_store(root)?;
                let v = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                    .build()
                    .map_err(|e| Error::config(format!("the PostgreSQL TLS root certificates are not usable: {e}")))?;
                Some(v)
            }
        };
        let verifier = Arc::new(PgVerifier { verification, webpki, provider: provider.clone() });
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::config(format!("PostgreSQL TLS: {e}")))?
            .dangerous()
            .with_custom_certificate_verifier(verifier);
        let mut client = match settings.client_identity_files() {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let certs = certificates(cert, "client certificate (sslcert)")?;
                let key = private_key(key)?;
                builder.with_client_auth_cert(certs, key).map_err(|e| {
                    Error::config(format!(
                        "the PostgreSQL TLS client certificate {} and key do not fit together: {e}",
                        cert.display()
                    ))
                })?
            }
        };
        // What libpq 17 sends; servers before 17 ignore it, 17+ need it for sslnegotiation=direct.
        client.alpn_protocols = vec![b"postgresql".to_vec()];
        client.enable_sni = settings.sends_sni();
        Ok(TlsSetup { settings: settings.clone(), verification, client: Some(Arc::new(client)) })
    }

    /// The connector for one connection, with the slot its handshake's outcome goes to. `None`
    /// for `sslmode=disable`.
    pub(crate) fn connector(&self) -> Option<(PgMakeTls, Arc<Mutex<Handshake>>)> {
        let client = self.client.clone()?;
        let outcome = Arc::new(Mutex::new(Handshake::NotStarted));
        Some((PgMakeTls { client, outcome: outcome.clone() }, outcome))
    }

    /// What the roots are, for messages: `sslrootcert=/path` or `the system's roots`.
    pub(crate) fn roots_shown(&self) -> String {
        match self.settings.root_certs() {
            Some(RootCerts::File(p)) => format!("sslrootcert={}", p.display()),
            Some(RootCerts::System) => "the system's trusted roots (sslrootcert=system)".to_string(),
            None => "no root certificate".to_string(),
        }
    }
}

fn root_store(root: &RootCerts) -> Result<RootCertStore> {
    let mut store = RootCertStore::empty();
    match root {
        RootCerts::File(path) => {
            for c in certificates(path, "root certificate (sslrootcert)")? {
                store.add(c).map_err(|e| bad_pem(path, "root certificate (sslrootcert)", &e))?;
            }
        }
        RootCerts::System => {
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = store.add_parsable_certificates(found.certs);
            if added == 0 {
                let why = found.errors.first().map(ToString::to_string).unwrap_or_else(|| "none found".into());
                return Err(Error::config(format!(
                    "sslrootcert=system: the system's trusted root certificates cannot be loaded ({why}): install \
                     the ca-certificates package or give sslrootcert=/path/ca.pem"
                )));
            }
        }
    }
    Ok(store)
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::config(format!("cannot read the PostgreSQL TLS {what} file {}: {e}", path.display())).with_source(e)
    })
}

fn certificates(path: &Path, what: &str) -> Result<Vec<CertificateDer<'static>>> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad_pem(path, what, &e))?;
    if certs.is_empty() {
        return Err(Error::config(format!(
            "the PostgreSQL TLS {what} file {} holds no certificate (BEGIN CERTIFICATE)",
            path.display()
        )));
    }
    Ok(certs)
}

fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let what = "client key (sslkey)";
    let pem = read(path, what)?;
    // The parser's own error text may quote the file: say only what kind of problem it is.
    PrivateKeyDer::from_pem_slice(&pem).map_err(|_| {
        let encrypted = pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED");
        Error::config(format!(
            "the PostgreSQL TLS {what} file {} holds no {}",
            path.display(),
            if encrypted {
                "unencrypted private key: it is encrypted, and sslpassword is not supported (decrypt it, e.g. \
                 `openssl pkey -in key.pem -out plain.pem`, and keep that file readable only by the application)"
            } else {
                "private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY)"
            }
        ))
    })
}

fn bad_pem(path: &Path, what: &str, e: &dyn fmt::Display) -> Error {
    Error::config(format!("the PostgreSQL TLS {what} file {} is not a valid PEM certificate: {e}", path.display()))
}

/// The server certificate check of one [`Verification`] level.
#[derive(Debug)]
struct PgVerifier {
    verification: Verification,
    /// The chain (and name) check against the root certificates, when there are some.
    webpki: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PgVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> std::result::Result<ServerCertVerified, rustls::Error> {
        let webpki = match (self.verification, &self.webpki) {
            // sslmode=prefer/require without a root certificate: encrypted, nothing verified (libpq).
            (Verification::Nothing | Verification::Plain, _) => return Ok(ServerCertVerified::assertion()),
            (_, Some(w)) => w,
            (_, None) => {
                return Err(rustls::Error::General(
                    "internal: certificate verification without root certificates".into(),
                ))
            }
        };
        let checked = webpki.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now);
        match (self.verification, checked) {
            // verify-ca: the chain verified (webpki checks the name only after the chain).
            (
                Verification::Chain,
                Err(rustls::Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                )),
            ) => Ok(ServerCertVerified::assertion()),
            (_, r) => r,
        }
    }

    // The handshake signatures are always checked: the server proves it holds the key of the
    // certificate it sent, whatever the certificate is.
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> std::result::Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// What became of one connection's TLS handshake.
#[derive(Debug, Clone, Default)]
pub(crate) enum Handshake {
    /// Not started (`sslmode=prefer` and the server declined TLS, or the connect failed before).
    #[default]
    NotStarted,
    /// Done: the protocol version and cipher suite.
    Done { protocol: String, cipher: String },
    /// Failed in the TLS layer: rustls' reason (`None` for a plain I/O failure mid-handshake).
    Failed { rustls: Option<rustls::Error>, text: String },
}

/// The `MakeTlsConnect` of one connection attempt (tokio-postgres calls it once per host).
pub(crate) struct PgMakeTls {
    client: Arc<ClientConfig>,
    outcome: Arc<Mutex<Handshake>>,
}

impl MakeTlsConnect<Socket> for PgMakeTls {
    type Stream = PgTlsStream;
    type TlsConnect = PgTlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> io::Result<PgTlsConnect> {
        // A bracketed IPv6 literal or a name; an IP address is checked against the IP SANs.
        let host = domain.trim_start_matches('[').trim_end_matches(']');
        let name = ServerName::try_from(host.to_string()).map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{host:?} is no valid TLS server name: {e}"))
        })?;
        Ok(PgTlsConnect {
            connector: tokio_rustls::TlsConnector::from(self.client.clone()),
            name,
            outcome: self.outcome.clone(),
        })
    }
}

/// One TLS handshake.
pub(crate) struct PgTlsConnect {
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
    outcome: Arc<Mutex<Handshake>>,
}

type HandshakeFuture = Pin<Box<dyn Future<Output = io::Result<PgTlsStream>> + Send>>;

impl TlsConnect<Socket> for PgTlsConnect {
    type Stream = PgTlsStream;
    type Error = io::Error;
    type Future = HandshakeFuture;

    fn connect(self, stream: Socket) -> HandshakeFuture {
        Box::pin(async move {
            match self.connector.connect(self.name, stream).await {
                Ok(s) => {
                    let (_, conn) = s.get_ref();
                    let protocol = conn.protocol_version().map(|v| format!("{v:?}")).unwrap_or_default();
                    let cipher = conn.negotiated_cipher_suite().map(|c| format!("{:?}", c.suite())).unwrap_or_default();
                    *self.outcome.lock() = Handshake::Done { protocol: protocol.replace('_', "."), cipher };
                    Ok(PgTlsStream(Box::new(s)))
                }
                Err(e) => {
                    let rustls = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()).cloned();
                    *self.outcome.lock() = Handshake::Failed { rustls, text: e.to_string() };
                    Err(e)
                }
            }
        })
    }
}

/// An encrypted connection to the server.
pub(crate) struct PgTlsStream(Box<tokio_rustls::client::TlsStream<Socket>>);

impl TlsStream for PgTlsStream {
    /// `tls-server-end-point` (RFC 5929): the hash of the server's certificate, so SCRAM-SHA-256-PLUS
    /// ties the password exchange to this TLS connection (a man in the middle cannot relay it).
    fn channel_binding(&self) -> ChannelBinding {
        let (_, conn) = self.0.get_ref();
        match conn.peer_certificates().and_then(|c| c.first()).and_then(|c| end_point_hash(c.as_ref())) {
            Some(hash) => ChannelBinding::tls_server_end_point(hash),
            None => ChannelBinding::none(),
        }
    }
}

/// The `tls-server-end-point` hash of a DER certificate: by the hash of its signature algorithm,
/// MD5 and SHA-1 raised to SHA-256 (RFC 5929, 4.1), as the server computes it. `None` for a
/// signature algorithm without one hash (RSASSA-PSS, Ed25519) or bytes that are no certificate:
/// SCRAM then runs without channel binding.
pub(crate) fn end_point_hash(der: &[u8]) -> Option<Vec<u8>> {
    use sha2::Digest;
    // 1.2.840.113549.1.1.{4,5,11,12,13}: md5/sha1/sha256/sha384/sha512 with RSA.
    const RSA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01];
    // 1.2.840.10045.4.1 (ecdsa-with-SHA1) and 1.2.840.10045.4.3.{2,3,4} (SHA-256/384/512).
    const ECDSA: &[u8] = &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04];
    let oid = signature_algorithm(der)?;
    let bits = match (oid.strip_prefix(RSA), oid.strip_prefix(ECDSA)) {
        (Some([4 | 5 | 11]), _) | (_, Some([1] | [3, 2])) => 256,
        (Some([12]), _) | (_, Some([3, 3])) => 384,
        (Some([13]), _) | (_, Some([3, 4])) => 512,
        _ => return None,
    };
    Some(match bits {
        256 => sha2::Sha256::digest(der).to_vec(),
        384 => sha2::Sha384::digest(der).to_vec(),
        _ => sha2::Sha512::digest(der).to_vec(),
    })
}

/// The OID of a DER certificate's `signatureAlgorithm` (`Certificate ::= SEQUENCE { tbsCertificate,
/// signatureAlgorithm SEQUENCE { algorithm OID, … }, signature }`).
fn signature_algorithm(der: &[u8]) -> Option<&[u8]> {
    let (0x30, cert, _) = tlv(der)? else { return None };
    let (0x30, _tbs, rest) = tlv(cert)? else { return None };
    let (0x30, algorithm, _) = tlv(rest)? else { return None };
    let (0x06, oid, _) = tlv(algorithm)? else { return None };
    Some(oid)
}

/// One DER tag-length-value: the tag, the value and what follows (`None` when truncated or the
/// length is not DER's definite form of at most 4 bytes).
fn tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*b.get(2 + i)?);
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    Some((tag, b.get(header..end)?, b.get(end..)?))
}

impl AsyncRead for PgTlsStream {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_read(cx, buf)
    }
}

impl AsyncWrite for PgTlsStream {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut *self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut *self.0).poll_shutdown(cx)
    }
}

/// What to change when a handshake failed for `reason`; `None` when retrying may help (an I/O
/// failure mid-handshake). `roots` is how the setup names its root certificates.
pub(crate) fn handshake_hint(reason: Option<&rustls::Error>, host: &str, roots: &str) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as T};
    Some(match reason? {
        T::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => format!(
            "the server's certificate does not name the host \"{host}\" (sslmode=verify-full checks it): connect by a \
             name or address the certificate lists, or use sslmode=verify-ca to check the chain only"
        ),
        T::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => "the server's certificate is outside its validity period (check the server's certificate and both clocks)"
            .to_string(),
        T::InvalidCertificate(_) => format!(
            "the server's certificate does not verify against {roots}: give the CA that signs it with \
             sslrootcert=/path/ca.pem"
        ),
        T::AlertReceived(
            A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied,
        ) => "the server refused the TLS client certificate (or its absence): give one the server's ssl_ca_file \
              trusts with sslcert=/path/client.pem&sslkey=/path/client.key"
            .to_string(),
        T::InvalidMessage(_) | T::InappropriateMessage { .. } | T::InappropriateHandshakeMessage { .. } => {
            "the server did not answer in TLS".to_string()
        }
        _ => {
            "check the TLS settings (sslmode, sslrootcert, sslcert, sslkey) and the server's ssl_* settings".to_string()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::sql::postgres::config::SslMode;

    #[test]
    fn files_are_checked_before_any_io() {
        let dir = std::env::temp_dir().join(format!("simba-pg-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let junk = dir.join("junk.pem");
        std::fs::write(&junk, "SECRET-MATERIAL not a pem").unwrap();
        let encrypted = dir.join("encrypted.key");
        std::fs::write(
            &encrypted,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nSECRET\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let missing = dir.join("missing.pem");
        let verify = PostgresTls::new(SslMode::VerifyFull);
        let e = TlsSetup::load(&verify.clone().root_cert(&missing)).unwrap_err();
        assert!(e.to_string().contains("missing.pem") && e.to_string().contains("sslrootcert"), "{e}");
        let e = TlsSetup::load(&verify.clone().root_cert(&junk)).unwrap_err();
        assert!(e.to_string().contains("junk.pem") && !e.to_string().contains("SECRET"), "{e}");
        let e = TlsSetup::load(&PostgresTls::new(SslMode::Require).client_identity(&junk, &junk)).unwrap_err();
        assert!(e.to_string().contains("junk.pem") && !e.to_string().contains("SECRET"), "{e}");
        let e = TlsSetup::load(&verify.clone()).unwrap_err();
        assert!(e.to_string().contains("sslrootcert"), "{e}");
        assert!(TlsSetup::load(&PostgresTls::disable().root_cert(&missing)).is_ok(), "disable reads no file (libpq)");
        assert!(TlsSetup::load(&PostgresTls::new(SslMode::Require)).is_ok());
        let e = private_key(&encrypted).unwrap_err();
        assert!(e.to_string().contains("sslpassword") && !e.to_string().contains("SECRET"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn channel_binding_hashes_the_certificate_by_its_signature_algorithm() {
        use sha2::Digest;
        // A minimal certificate shape: SEQUENCE { SEQUENCE {} , SEQUENCE { OID } , BIT STRING }.
        let cert = |oid: &[u8]| {
            let mut alg = vec![0x06, oid.len() as u8];
            alg.extend_from_slice(oid);
            let mut body = vec![0x30, 0x00, 0x30, alg.len() as u8];
            body.extend_from_slice(&alg);
            body.extend_from_slice(&[0x03, 0x01, 0x00]);
            let mut der = vec![0x30, body.len() as u8];
            der.extend_from_slice(&body);
            der
        };
        let ecdsa256 = cert(&[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]);
        assert_eq!(end_point_hash(&ecdsa256), Some(sha2::Sha256::digest(&ecdsa256).to_vec()));
        let rsa384 = cert(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0c]);
        assert_eq!(end_point_hash(&rsa384), Some(sha2::Sha384::digest(&rsa384).to_vec()));
        let sha1 = cert(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x05]);
        assert_eq!(end_point_hash(&sha1).map(|h| h.len()), Some(32), "SHA-1 is raised to SHA-256");
        let pss = cert(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x0a]);
        assert_eq!(end_point_hash(&pss), None);
        let ed25519 = cert(&[0x2b, 0x65, 0x70]);
        assert_eq!(end_point_hash(&ed25519), None);
        assert_eq!(end_point_hash(&ecdsa256[..ecdsa256.len() - 1]), None, "truncated");
        assert_eq!(end_point_hash(&[]), None);
        assert_eq!(end_point_hash(&[0x30, 0x85, 1, 2, 3, 4, 5]), None, "length of 5 bytes");
    }

    proptest::proptest! {
        /// Any bytes: a hash or none, never a panic.
        #[test]
        fn any_bytes_hash_or_none(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            let _ = end_point_hash(&bytes);
            let mut framed = vec![0x30, bytes.len() as u8];
            framed.extend_from_slice(&bytes);
            let _ = end_point_hash(&framed);
        }
    }

    #[test]
    fn hints_name_the_problem() {
        let name = rustls::Error::InvalidCertificate(CertificateError::NotValidForName);
        assert!(handshake_hint(Some(&name), "db.example", "x").unwrap().contains("db.example"));
        let ca = rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer);
        assert!(handshake_hint(Some(&ca), "h", "sslrootcert=/ca.pem").unwrap().contains("/ca.pem"));
        assert!(handshake_hint(None, "h", "x").is_none());
    }
}
