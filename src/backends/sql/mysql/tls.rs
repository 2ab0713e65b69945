//! TLS of the MySQL backend at run time: the crypto provider, what a failed handshake means (in
//! rustls' words, with what to change) and how `check` describes a connection.
//!
//! The driver (`mysql` with `rustls-tls`) builds its `rustls::ClientConfig` from the process-wide
//! default provider when one is installed, else from rustls' crate features. This crate compiles
//! in aws-lc-rs (the provider Redis and ZooKeeper use); when the application has installed no
//! default, the first TLS connection installs aws-lc-rs' — so an application that also enables
//! rustls' `ring` feature does not make the driver panic.

use super::config::{MysqlSslMode, MysqlTls};

/// Makes sure the driver's rustls finds a crypto provider (see the module docs).
pub(super) fn ensure_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Err means another thread installed one meanwhile: that one is used.
        let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
    }
}

/// The rustls error behind a driver error, if the TLS layer failed (the driver returns it
/// directly, or inside the I/O error of the handshake's first read or write, itself inside the
/// packet codec's error). `mysql::Error` has no `source()`: its variants are opened here.
fn rustls_error(e: &mysql::Error) -> Option<&rustls::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = match e {
        mysql::Error::IoError(io) => Some(io),
        mysql::Error::CodecError(c) => Some(c),
        mysql::Error::TlsError(t) => Some(t),
        _ => None,
    };
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<rustls::Error>() {
            return Some(t);
        }
        if let Some(t) = err
            .downcast_ref::<std::io::Error>()
            .and_then(|io| io.get_ref())
            .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        {
            return Some(t);
        }
        cur = err.source();
    }
    None
}

/// The driver found that the server offers no TLS (its handshake lacks `CLIENT_SSL`).
pub(super) fn server_has_no_tls(e: &mysql::Error) -> bool {
    matches!(e, mysql::Error::DriverError(mysql::DriverError::TlsNotSupported))
}

/// What to change when the TLS handshake failed: `None` when `e` is no TLS failure. These never
/// heal by retrying.
pub(super) fn handshake_hint(e: &mysql::Error, tls: &MysqlTls) -> Option<String> {
    use rustls::{AlertDescription as A, CertificateError as C, Error as T};
    if server_has_no_tls(e) {
        return Some(format!(
            "the server offers no TLS (have_ssl is DISABLED: it has no ssl-cert/ssl-key), but ssl-mode={} \
             requires it: configure TLS on the server, or use ssl-mode=PREFERRED or DISABLED",
            tls.ssl_mode()
        ));
    }
    let roots = match tls.ca_file() {
        Some(ca) => format!("the CA in {} (and the driver's built-in public roots)", ca.display()),
        None => "the driver's built-in public roots (no ssl-ca given)".to_string(),
    };
    Some(match rustls_error(e)? {
        T::InvalidCertificate(C::NotValidForName | C::NotValidForNameContext { .. }) => {
            "the server's certificate does not name the host in the URL (ssl-mode=VERIFY_IDENTITY checks it): \
             connect by a name or address the certificate lists"
                .to_string()
        }
        T::InvalidCertificate(
            C::Expired | C::ExpiredContext { .. } | C::NotValidYet | C::NotValidYetContext { .. },
        ) => "the server's certificate is outside its validity period (check the server's certificate and both \
              clocks)"
            .to_string(),
        T::InvalidCertificate(_) => format!(
            "the server's certificate does not verify against {roots}: give the CA that signs it with \
             ssl-ca=/path/ca.pem (MysqlTls::ca)"
        ),
        T::AlertReceived(
            A::CertificateRequired | A::BadCertificate | A::UnknownCA | A::CertificateUnknown | A::AccessDenied,
        ) => "the server refused this client's certificate, or requires one: give ssl-cert and ssl-key signed by \
              a CA the server trusts (its ssl-ca)"
            .to_string(),
        T::InvalidMessage(_) | T::InappropriateMessage { .. } | T::InappropriateHandshakeMessage { .. } => {
            "the server did not answer in TLS (is this a MySQL port?)".to_string()
        }
        _ => "check the TLS settings (ssl-mode, ssl-ca, ssl-cert, ssl-key) and the server's ssl-* configuration"
            .to_string(),
    })
}

/// What to add to an "access denied" answer about TLS: MariaDB answers a plain connection to a
/// server with `require_secure_transport=ON`, and a connection without a client certificate for
/// an account that `REQUIRE`s X509, with the same error as a wrong password.
pub(super) fn login_hint(tls: &MysqlTls, encrypted: bool) -> &'static str {
    if !encrypted {
        "; this connection is not encrypted, and servers that require TLS (require_secure_transport, an account \
         with REQUIRE SSL/X509) answer the same: connect with ssl-mode=VERIFY_IDENTITY and ssl-ca"
    } else if tls.client_identity_files().is_none() {
        "; no client certificate was presented, and an account with REQUIRE X509 (or ISSUER/SUBJECT) is refused \
         the same way: give ssl-cert and ssl-key"
    } else {
        ""
    }
}

/// `check`'s description of the connection: the server's own view (`Ssl_version`, `Ssl_cipher`
/// of the session) and what the client verified. Returns (encrypted, verified, text).
pub(super) fn describe(tls: &MysqlTls, version: &str, cipher: &str) -> (bool, bool, String) {
    let mode = tls.ssl_mode();
    let identity = match tls.client_identity_files() {
        Some((cert, _)) => format!("client certificate {} presented", cert.display()),
        None => "no client certificate".to_string(),
    };
    if cipher.is_empty() {
        let why = match mode {
            MysqlSslMode::Disabled => "ssl-mode=DISABLED".to_string(),
            MysqlSslMode::Preferred => "ssl-mode=PREFERRED, and the server offers no TLS".to_string(),
            m => format!("ssl-mode={m}, yet the server reports no TLS (a Unix socket?)"),
        };
        return (false, false, format!("not encrypted ({why}; the server's Ssl_cipher is empty)"));
    }
    let verified = match mode {
        MysqlSslMode::VerifyIdentity => {
            format!("server certificate and host name verified (VERIFY_IDENTITY) against {}", roots(tls))
        }
        MysqlSslMode::VerifyCa => {
            format!("server certificate chain verified against {}, host name NOT checked (VERIFY_CA)", roots(tls))
        }
        m => format!("the server certificate is NOT verified (ssl-mode={m}): use VERIFY_IDENTITY with ssl-ca"),
    };
    (true, mode.verifies_certificate(), format!("encrypted ({version}, {cipher}; rustls); {verified}; {identity}"))
}

fn roots(tls: &MysqlTls) -> String {
    match tls.ca_file() {
        Some(ca) => format!("the CA in {} and the built-in public roots", ca.display()),
        None => "the driver's built-in public roots".to_string(),
    }
}
