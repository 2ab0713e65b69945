//! The TLS probe: one TLS handshake of our own (rustls, blocking, bounded) to a host of the
//! connect string before the first session connects. `zookeeper-client` retries a refused TLS
//! handshake until the connection timeout and never says why; the probe sees the cause (an
//! untrusted or misnamed server certificate, the server's alert for a missing or untrusted client
//! certificate, a port that does not speak TLS) and the backend fails at once with it. A probe
//! that cannot reach a host, or times out, decides nothing: the normal connect runs as before.

use std::fmt;
use std::io::{self, ErrorKind as IoKind};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustls::client::{ClientSessionStore, Resumption, Tls12ClientSessionValue, Tls13ClientSessionValue};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, CertificateRevocationListDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, ClientConnection, NamedGroup, RootCertStore};

use super::options::ZookeeperTls;

/// How long the probe waits after a TLS 1.3 handshake for the server's first record (its session
/// ticket, or the alert refusing the client certificate, which TLS 1.3 sends only after the
/// client's `Finished`). A server that sends neither costs this much once per backend.
const AFTER_HANDSHAKE: Duration = Duration::from_secs(1);

/// A conclusive refusal: the host, rustls' words, and what to check.
pub(crate) struct Refusal {
    pub(crate) host: String,
    pub(crate) cause: String,
    pub(crate) hint: &'static str,
    /// The server closed the connection without a TLS answer: most likely a plaintext port, but a
    /// server at its connection limit closes the same way, so it is reported as transient.
    pub(crate) transient: bool,
}

enum Outcome {
    Passed,
    Inconclusive,
    Refused(String, &'static str),
}

/// Probes `hosts` (`host:port`, without `tcp://` / `tcp+tls://` prefixes) in order until one
/// answers conclusively, all before `deadline`: `Some` when that one refused the TLS connection.
pub(crate) fn probe(hosts: &[&str], tls: &ZookeeperTls, deadline: Instant) -> Option<Refusal> {
    let ticket = Arc::new(TicketSeen::default());
    let config = Arc::new(client_config(tls, Arc::clone(&ticket))?);
    for host in hosts {
        let Some((name, addrs)) = resolve(host) else { continue };
        for addr in addrs {
            ticket.0.store(false, Ordering::SeqCst);
            match handshake(&config, &name, addr, &ticket, tls.has_identity(), deadline) {
                Outcome::Passed => return None,
                Outcome::Refused(cause, hint) => {
                    let transient = hint == NOT_TLS;
                    return Some(Refusal { host: host.to_string(), cause, hint, transient });
                }
                Outcome::Inconclusive => {}
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
    None
}

fn resolve(host: &str) -> Option<(ServerName<'static>, Vec<SocketAddr>)> {
    let (name, port) = host.rsplit_once(':')?;
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let port: u16 = port.parse().ok()?;
    let server = ServerName::try_from(name.to_string()).ok()?;
    let addrs = (name, port).to_socket_addrs().ok()?.collect();
    Some((server, addrs))
}

/// The client configuration of the probe: the same CA, CRLs and identity as the sessions'
/// (already checked by [`ZookeeperTls`], so a failure here only skips the probe).
fn client_config(tls: &ZookeeperTls, ticket: Arc<TicketSeen>) -> Option<ClientConfig> {
    let (ca, identity) = tls.pems();
    let mut roots = RootCertStore::empty();
    for c in CertificateDer::pem_slice_iter(ca.as_bytes()) {
        roots.add(c.ok()?).ok()?;
    }
    let crls = CertificateRevocationListDer::pem_slice_iter(ca.as_bytes()).collect::<Result<Vec<_>, _>>().ok()?;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = rustls::client::WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .with_crls(crls)
        .build()
        .ok()?;
    let builder = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .with_webpki_verifier(verifier);
    let mut config = match identity {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(cert.as_bytes()).collect::<Result<Vec<_>, _>>().ok()?;
            let key = PrivateKeyDer::from_pem_slice(key.as_bytes()).ok()?;
            builder.with_client_auth_cert(chain, key).ok()?
        }
        None => builder.with_no_client_auth(),
    };
    config.resumption = Resumption::store(ticket);
    Some(config)
}

fn handshake(
    config: &Arc<ClientConfig>,
    name: &ServerName<'static>,
    addr: SocketAddr,
    ticket: &TicketSeen,
    has_identity: bool,
    deadline: Instant,
) -> Outcome {
    let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
    let Ok(mut sock) = TcpStream::connect_timeout(&addr, left()) else { return Outcome::Inconclusive };
    let Ok(mut conn) = ClientConnection::new(Arc::clone(config), name.clone()) else { return Outcome::Inconclusive };
    let mut received = false;
    while conn.is_handshaking() {
        if sock.set_read_timeout(Some(left())).and(sock.set_write_timeout(Some(left()))).is_err() {
            return Outcome::Inconclusive;
        }
        match conn.complete_io(&mut sock) {
            Ok((_, rd)) => received |= rd > 0,
            Err(e) => return failed(&e, received, has_identity),
        }
    }
    if conn.protocol_version() == Some(rustls::ProtocolVersion::TLSv1_3) {
        // Wait for the server's first post-handshake record: a ticket (accepted) or an alert.
        let until = deadline.min(Instant::now() + AFTER_HANDSHAKE);
        while !ticket.0.load(Ordering::SeqCst) {
            let now = Instant::now();
            if now >= until || sock.set_read_timeout(Some(until - now)).is_err() {
                break;
            }
            match conn.read_tls(&mut sock) {
                Ok(0) => break,
                Ok(_) => {
                    if let Err(e) = conn.process_new_packets() {
                        return refused(&e, has_identity);
                    }
                }
                Err(_) => break,
            }
        }
    }
    conn.send_close_notify();
    let _ = conn.write_tls(&mut sock);
    Outcome::Passed
}

fn failed(e: &io::Error, received: bool, has_identity: bool) -> Outcome {
    if let Some(t) = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
        return refused(t, has_identity);
    }
    match e.kind() {
        // Closed before any answer: a plaintext ZooKeeper reads the ClientHello as an oversized
        // request and closes the connection.
        IoKind::UnexpectedEof | IoKind::ConnectionReset | IoKind::ConnectionAborted if !received => {
            Outcome::Refused(format!("the server closed the connection without a TLS answer ({e})"), NOT_TLS)
        }
        _ => Outcome::Inconclusive,
    }
}

const NOT_TLS: &str = "the port does not speak TLS (a plaintext clientPort?): connect to the servers' \
                       secureClientPort, or remove the TLS settings for a plaintext port (a server at its \
                       connection limit closes the same way: retry if the port is known to speak TLS)";

fn refused(e: &rustls::Error, has_identity: bool) -> Outcome {
    use rustls::{AlertDescription as A, CertificateError as C, Error as T};
    let hint = match e {
        T::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate does not name the host as written in the connect string (subject \
             alternative name): connect by a name or address the certificate lists (host name verification \
             cannot be turned off)"
        }
        T::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => "the server's certificate is outside its validity period: check the server's certificate and both clocks",
        T::InvalidCertificate(C::Revoked) => "the server's certificate is revoked by a CRL in the CA PEM",
        T::InvalidCertificate(_) => {
            "the server's certificate does not verify against the configured CA: give the CA that signed it \
             (ZookeeperTls::from_ca_file / SIMBA_ZOOKEEPER_TLS_CA / tls_ca)"
        }
        T::AlertReceived(
            A::CertificateRequired
            | A::BadCertificate
            | A::UnknownCA
            | A::CertificateUnknown
            | A::AccessDenied
            | A::HandshakeFailure
            | A::UnsupportedCertificate
            | A::CertificateExpired
            | A::CertificateRevoked,
        ) if has_identity => {
            "the server does not accept the client certificate: it must be signed by a CA in the server's \
             trust store (ssl.trustStore) and be valid"
        }
        T::AlertReceived(A::CertificateRequired | A::BadCertificate | A::HandshakeFailure | A::CertificateUnknown) => {
            "the server requires a client certificate (ssl.clientAuth=need): configure one \
             (ZookeeperTls::identity_files / SIMBA_ZOOKEEPER_TLS_CERT and _KEY / tls_cert and tls_key)"
        }
        T::InvalidMessage(_) | T::InappropriateMessage { .. } | T::InappropriateHandshakeMessage { .. } => NOT_TLS,
        _ => "check the TLS settings (CA, client certificate) and the server's ssl.* configuration",
    };
    Outcome::Refused(e.to_string(), hint)
}

/// A session store that keeps nothing and notes that a TLS 1.3 ticket arrived.
#[derive(Default)]
struct TicketSeen(AtomicBool);

impl fmt::Debug for TicketSeen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("TicketSeen")
    }
}

impl ClientSessionStore for TicketSeen {
    fn set_kx_hint(&self, _: ServerName<'static>, _: NamedGroup) {}
    fn kx_hint(&self, _: &ServerName<'_>) -> Option<NamedGroup> {
        None
    }
    fn set_tls12_session(&self, _: ServerName<'static>, _: Tls12ClientSessionValue) {}
    fn tls12_session(&self, _: &ServerName<'_>) -> Option<Tls12ClientSessionValue> {
        None
    }
    fn remove_tls12_session(&self, _: &ServerName<'static>) {}
    fn insert_tls13_ticket(&self, _: ServerName<'static>, _: Tls13ClientSessionValue) {
        self.0.store(true, Ordering::SeqCst);
    }
    fn take_tls13_ticket(&self, _: &ServerName<'static>) -> Option<Tls13ClientSessionValue> {
        None
    }
}

/// Whether a host of `hosts` answers a TLS ClientHello with a certificate before `deadline`, for
/// the message of a plaintext connect that failed: `Some(host)` names the first that does (a TLS
/// port, `secureClientPort`). The certificate is never trusted: the handshake stops at it.
pub(crate) fn speaks_tls(hosts: &[&str], deadline: Instant) -> Option<String> {
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let schemes = provider.signature_verification_algorithms.supported_schemes();
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(StopAtCertificate(schemes)))
        .with_no_client_auth();
    let config = Arc::new(config);
    for host in hosts {
        let Some((name, addrs)) = resolve(host) else { continue };
        for addr in addrs {
            let left = || deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let Ok(mut sock) = TcpStream::connect_timeout(&addr, left()) else { continue };
            let Ok(mut conn) = ClientConnection::new(Arc::clone(&config), name.clone()) else { continue };
            while conn.is_handshaking() {
                if sock.set_read_timeout(Some(left())).and(sock.set_write_timeout(Some(left()))).is_err() {
                    break;
                }
                if let Err(e) = conn.complete_io(&mut sock) {
                    let ours = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
                    if matches!(ours, Some(rustls::Error::General(m)) if m == STOPPED) {
                        return Some(host.to_string());
                    }
                    break;
                }
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }
    None
}

const STOPPED: &str = "simba TLS probe: certificate received";

/// A verifier that refuses every certificate with [`STOPPED`]: seeing it proves the server
/// answered in TLS.
#[derive(Debug)]
struct StopAtCertificate(Vec<rustls::SignatureScheme>);

impl rustls::client::danger::ServerCertVerifier for StopAtCertificate {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Err(rustls::Error::General(STOPPED.to_string()))
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(STOPPED.to_string()))
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General(STOPPED.to_string()))
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::{AlertDescription as A, CertificateError as C, Error as T};

    fn hint(e: T, has_identity: bool) -> (String, &'static str) {
        match refused(&e, has_identity) {
            Outcome::Refused(cause, hint) => (cause, hint),
            _ => panic!("{e:?} not a refusal"),
        }
    }

    /// The causes the shared TLS server cannot produce (tests/zk_tls.rs covers the others).
    #[test]
    fn each_cause_gets_its_hint_in_rustls_words() {
        let (cause, h) = hint(T::InvalidCertificate(C::NotValidForName), true);
        assert!(cause.contains("NotValidForName") && h.contains("does not name the host"), "{cause}: {h}");
        assert!(hint(T::InvalidCertificate(C::Expired), true).1.contains("validity period"));
        assert!(hint(T::InvalidCertificate(C::UnknownIssuer), true).1.contains("configured CA"));
        let (cause, h) = hint(T::AlertReceived(A::CertificateRequired), false);
        assert!(cause.contains("CertificateRequired") && h.contains("requires a client certificate"), "{cause}");
        assert!(hint(T::AlertReceived(A::CertificateRequired), true).1.contains("does not accept"));
        assert_eq!(hint(T::InvalidMessage(rustls::InvalidMessage::InvalidContentType), false).1, NOT_TLS);
        let eof = io::Error::new(IoKind::UnexpectedEof, "eof");
        assert!(matches!(failed(&eof, false, false), Outcome::Refused(_, NOT_TLS)));
        assert!(matches!(failed(&eof, true, false), Outcome::Inconclusive), "closed after an answer");
        assert!(matches!(failed(&io::Error::from(IoKind::TimedOut), false, false), Outcome::Inconclusive));
    }
}
