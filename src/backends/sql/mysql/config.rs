//! The MySQL/MariaDB backend's own settings: how to reach the server ([`MysqlConfig`], from a URL
//! or from the driver's [`mysql::Opts`]) and how the connection is protected ([`MysqlTls`],
//! [`MysqlSslMode`]). Everything here is parsed and checked before any I/O; the TLS files are
//! read to check they hold PEM, but their contents never appear in `Debug`, logs or errors (only
//! their paths do), and neither does the password.
//!
//! URL parameters taken by the backend (the rest of the query goes to the driver):
//!
//! | parameter | meaning |
//! |---|---|
//! | `ssl-mode` | `DISABLED`, `PREFERRED` (default without `ssl-ca`), `REQUIRED`, `VERIFY_CA`, `VERIFY_IDENTITY` (default with `ssl-ca`) |
//! | `ssl-ca` | PEM file of the CA(s) that sign the server's certificate |
//! | `ssl-cert`, `ssl-key` | PEM client certificate (chain) and private key, for accounts that `REQUIRE X509` |
//!
//! `ssl_mode`, `ssl_ca`, `ssl_cert` and `ssl_key` are the same (MySQL option files accept both).
//! The driver's own TLS parameters (`root_cert_path`, `danger_accept_invalid_certs`,
//! `danger_skip_domain_validation`, `cert_chain_path`, `priv_key_path`, `cipher_suites`) and
//! `require_ssl` are refused with the `ssl-*` parameter to use instead: one way to say it, with
//! MySQL's meaning.

use std::borrow::Cow;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use mysql::{ClientIdentity, Opts, OptsBuilder, SslOpts};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::super::redact_url;
use crate::error::{Error, Result};
use crate::settings::tls_query::{with_query, TlsParams};

/// How a MySQL connection uses TLS: MySQL's `--ssl-mode`, with the MySQL client's meaning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MysqlSslMode {
    /// Plain TCP, never TLS.
    Disabled,
    /// TLS when the server offers it, else plain TCP (a man in the middle can force plain). The
    /// certificate is not verified. The default when no CA is given.
    Preferred,
    /// TLS or fail; the certificate is **not** verified (encryption against passive listeners only).
    Required,
    /// TLS or fail; the server's certificate chain must verify against the CA (`ssl-ca`, else the
    /// driver's built-in public roots). The host name is not checked.
    VerifyCa,
    /// As `VerifyCa`, and the certificate must name the host of the URL. The default when a CA is
    /// given, and the one to use for a managed service.
    VerifyIdentity,
}

impl MysqlSslMode {
    /// Every mode, weakest first.
    pub const ALL: [MysqlSslMode; 5] = [
        MysqlSslMode::Disabled,
        MysqlSslMode::Preferred,
        MysqlSslMode::Required,
        MysqlSslMode::VerifyCa,
        MysqlSslMode::VerifyIdentity,
    ];

    /// MySQL's name: `DISABLED`, `PREFERRED`, `REQUIRED`, `VERIFY_CA` or `VERIFY_IDENTITY`.
    pub fn name(self) -> &'static str {
        match self {
            MysqlSslMode::Disabled => "DISABLED",
            MysqlSslMode::Preferred => "PREFERRED",
            MysqlSslMode::Required => "REQUIRED",
            MysqlSslMode::VerifyCa => "VERIFY_CA",
            MysqlSslMode::VerifyIdentity => "VERIFY_IDENTITY",
        }
    }

    /// Whether the server's certificate chain is verified (`VERIFY_CA`, `VERIFY_IDENTITY`).
    pub fn verifies_certificate(self) -> bool {
        matches!(self, MysqlSslMode::VerifyCa | MysqlSslMode::VerifyIdentity)
    }

    /// Whether a connection without TLS is refused (every mode but `DISABLED` and `PREFERRED`).
    pub fn requires_tls(self) -> bool {
        !matches!(self, MysqlSslMode::Disabled | MysqlSslMode::Preferred)
    }
}

impl fmt::Display for MysqlSslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for MysqlSslMode {
    type Err = Error;

    /// Parses MySQL's names, in any case, with `-` or `_` (`verify-identity` = `VERIFY_IDENTITY`).
    fn from_str(s: &str) -> Result<MysqlSslMode> {
        let norm = s.trim().to_ascii_uppercase().replace('-', "_");
        MysqlSslMode::ALL.into_iter().find(|m| m.name() == norm).ok_or_else(|| {
            Error::config(format!(
                "unknown MySQL ssl-mode {:?}: expected DISABLED, PREFERRED, REQUIRED, VERIFY_CA or VERIFY_IDENTITY",
                shorten(s)
            ))
        })
    }
}

/// TLS settings of a MySQL/MariaDB connection: the [`MysqlSslMode`], the CA that signs the
/// server's certificate and a client identity for accounts that `REQUIRE X509`. Only paths are
/// kept; [`Debug`](fmt::Debug) shows them, never the files' contents.
///
/// Without a mode the mode is `VERIFY_IDENTITY` when a CA is given, `PREFERRED` otherwise (the
/// MySQL client's default). Files are PEM: certificates (`BEGIN CERTIFICATE`) and a private key
/// (PKCS#8, PKCS#1 or SEC1). A PKCS#12 bundle is not supported (convert it with `openssl pkcs12`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MysqlTls {
    mode: Option<MysqlSslMode>,
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
}

impl MysqlTls {
    /// No mode (the default rule), no CA, no client identity.
    pub fn new() -> MysqlTls {
        MysqlTls::default()
    }

    /// The ssl-mode.
    #[must_use]
    pub fn mode(mut self, mode: MysqlSslMode) -> Self {
        self.mode = Some(mode);
        self
    }

    /// Trusts the CA certificate(s) in this PEM file (`ssl-ca`); needs `VERIFY_CA` or
    /// `VERIFY_IDENTITY` (the default with a CA). The driver also trusts its built-in public roots
    /// (webpki-roots): see docs/backends/sql.md, TLS.
    #[must_use]
    pub fn ca(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca = Some(path.into());
        self
    }

    /// Presents this client certificate (PEM chain) and private key (`ssl-cert`, `ssl-key`).
    #[must_use]
    pub fn client_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// The effective mode (the default rule applied).
    pub fn ssl_mode(&self) -> MysqlSslMode {
        self.mode.unwrap_or(if self.ca.is_some() { MysqlSslMode::VerifyIdentity } else { MysqlSslMode::Preferred })
    }

    /// The CA file, if any.
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca.as_deref()
    }

    /// The client certificate and key files, if any.
    pub fn client_identity_files(&self) -> Option<(&Path, &Path)> {
        Some((self.cert.as_deref()?, self.key.as_deref()?))
    }

    /// Checks the combination and reads the files (no network I/O).
    ///
    /// # Errors
    /// `InvalidConfig` for half a client identity, a CA under a mode that does not verify (it
    /// would be ignored), TLS files with `DISABLED`, or a file that cannot be read or holds no
    /// usable PEM (named by path; its contents are never shown).
    pub fn validate(&self) -> Result<()> {
        let mode = self.ssl_mode();
        match (&self.cert, &self.key) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::config(
                    "a MySQL TLS client identity needs both a certificate and a key (ssl-cert and ssl-key)",
                ))
            }
            _ => {}
        }
        if mode == MysqlSslMode::Disabled && (self.ca.is_some() || self.cert.is_some()) {
            return Err(Error::config(
                "ssl-mode=DISABLED never uses TLS, but ssl-ca/ssl-cert/ssl-key are set: remove them or choose \
                 another ssl-mode",
            ));
        }
        if self.ca.is_some() && !mode.verifies_certificate() {
            return Err(Error::config(format!(
                "ssl-mode={mode} does not verify the server's certificate, so ssl-ca would be ignored: use \
                 ssl-mode=VERIFY_IDENTITY (or VERIFY_CA), or remove ssl-ca"
            )));
        }
        if let Some(ca) = &self.ca {
            certificates(ca, "CA")?;
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            certificates(cert, "client certificate")?;
            let bytes = read(key, "client key")?;
            // The key's own error text may quote the file; say only what is missing.
            PrivateKeyDer::from_pem_slice(&bytes).map_err(|_| {
                Error::config(format!(
                    "the MySQL TLS client key file {} holds no private key (BEGIN PRIVATE KEY, RSA PRIVATE KEY or \
                     EC PRIVATE KEY)",
                    key.display()
                ))
            })?;
        }
        Ok(())
    }

    /// The driver's TLS options for this mode (`None`: plain TCP). `PREFERRED` gets options that
    /// accept any certificate; the backend falls back to plain TCP when the server offers no TLS.
    fn ssl_opts(&self) -> Option<SslOpts> {
        let mode = self.ssl_mode();
        if mode == MysqlSslMode::Disabled {
            return None;
        }
        let mut o = SslOpts::default()
            .with_danger_accept_invalid_certs(!mode.verifies_certificate())
            .with_danger_skip_domain_validation(mode != MysqlSslMode::VerifyIdentity)
            .with_root_cert_path(self.ca.clone());
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            o = o.with_client_identity(Some(ClientIdentity::new(cert.clone(), key.clone())));
        }
        Some(o)
    }

    /// What the driver's own TLS options mean, for an application's [`mysql::Opts`].
    fn from_ssl_opts(o: Option<&SslOpts>) -> MysqlTls {
        let Some(o) = o else { return MysqlTls::new().mode(MysqlSslMode::Disabled) };
        let mode = if o.accept_invalid_certs() {
            MysqlSslMode::Required
        } else if o.skip_domain_validation() {
            MysqlSslMode::VerifyCa
        } else {
            MysqlSslMode::VerifyIdentity
        };
        MysqlTls {
            mode: Some(mode),
            ca: o.root_cert_path().map(Path::to_path_buf),
            cert: o.client_identity().map(|i| i.cert_chain_path().to_path_buf()),
            key: o.client_identity().map(|i| i.priv_key_path().to_path_buf()),
        }
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| {
        Error::config(format!("cannot read the MySQL TLS {what} file {}: {e}", path.display())).with_source(e)
    })
}

fn certificates(path: &Path, what: &str) -> Result<()> {
    let pem = read(path, what)?;
    let certs = CertificateDer::pem_slice_iter(&pem).collect::<std::result::Result<Vec<_>, _>>().map_err(|e| {
        Error::config(format!("the MySQL TLS {what} file {} is not a valid PEM certificate: {e}", path.display()))
    })?;
    if certs.is_empty() {
        return Err(Error::config(format!(
            "the MySQL TLS {what} file {} holds no certificate (BEGIN CERTIFICATE)",
            path.display()
        )));
    }
    Ok(())
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(40).collect();
    if s.chars().count() > 40 {
        out.push('…');
    }
    out
}

/// How to reach a MySQL/MariaDB server: the driver's [`mysql::Opts`] and the [`MysqlTls`]
/// settings. Build it from a URL ([`from_url`](MysqlConfig::from_url)) or from the
/// application's own `Opts`/`OptsBuilder` ([`from_opts`](MysqlConfig::from_opts)); the backend
/// adds the settings it depends on when it connects (see
/// [`SqlBackend::mysql_config`](crate::backends::sql::SqlBackend::mysql_config)).
///
/// `Debug` shows the user, host, port, database and TLS files, never the password.
#[derive(Clone)]
pub struct MysqlConfig {
    opts: Opts,
    tls: MysqlTls,
    /// The TLS options are the application's own (`from_opts` with `SslOpts`): kept as given.
    own_ssl_opts: bool,
}

impl fmt::Debug for MysqlConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MysqlConfig")
            .field("user", &self.opts.get_user())
            .field("host", &self.opts.get_ip_or_hostname())
            .field("port", &self.opts.get_tcp_port())
            .field("database", &self.opts.get_db_name())
            .field("password", &self.opts.get_pass().map(|_| "***"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl MysqlConfig {
    /// Parses `mysql://user:password@host:port/db?ssl-mode=…&ssl-ca=…` (`mariadb://` is the same).
    /// The `ssl-*` parameters (module docs) are the backend's; the other query parameters go to
    /// the driver (see the `mysql` crate's URL docs). Reads the TLS files to check them; no network
    /// I/O.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed URL, an unknown or refused parameter, or bad TLS settings
    /// (see [`MysqlTls::validate`]); the message shows the URL redacted.
    pub fn from_url(url: &str) -> Result<MysqlConfig> {
        let shown = redact_url(url);
        let (base, tls) = split_url(url, &shown)?;
        let opts = Opts::from_url(&base)
            .map_err(|e| Error::config(format!("invalid MySQL URL {shown}: {e}")).with_source(e))?;
        let config = MysqlConfig { opts, tls: MysqlTls::new(), own_ssl_opts: false };
        config.with_tls(tls).map_err(|e| Error::config(format!("invalid MySQL URL {shown}: {e}")))
    }

    /// The application's own driver options (host, credentials, database, timeouts it wants, its
    /// `SslOpts`…). TLS is as its `SslOpts` say: none means plain TCP (`DISABLED`); with them,
    /// TLS is required and verified as their `danger_*` flags say, and nothing falls back. Use
    /// [`with_tls`](MysqlConfig::with_tls) to give MySQL-style TLS settings instead.
    pub fn from_opts(opts: impl Into<Opts>) -> MysqlConfig {
        let opts = opts.into();
        let tls = MysqlTls::from_ssl_opts(opts.get_ssl_opts());
        let own_ssl_opts = opts.get_ssl_opts().is_some();
        MysqlConfig { opts, tls, own_ssl_opts }
    }

    /// Replaces the TLS settings (and any `SslOpts` of the driver options).
    ///
    /// # Errors
    /// As [`MysqlTls::validate`].
    pub fn with_tls(mut self, tls: MysqlTls) -> Result<MysqlConfig> {
        tls.validate()?;
        self.opts = OptsBuilder::from_opts(self.opts).ssl_opts(tls.ssl_opts()).into();
        self.tls = tls;
        self.own_ssl_opts = false;
        Ok(self)
    }

    /// The TLS settings (for options given as `SslOpts`, what they mean).
    pub fn tls(&self) -> &MysqlTls {
        &self.tls
    }

    /// The effective ssl-mode.
    pub fn ssl_mode(&self) -> MysqlSslMode {
        self.tls.ssl_mode()
    }

    /// The user name, if any.
    pub fn user(&self) -> Option<&str> {
        self.opts.get_user()
    }

    /// The database name, if any.
    pub fn database(&self) -> Option<&str> {
        self.opts.get_db_name()
    }

    /// `mysql://user@host:port/db?ssl-mode=…`: where this configuration connects, without the
    /// password (for `Debug`, logs and `check`).
    pub fn display_url(&self) -> String {
        let user = self.opts.get_user().map(|u| format!("{u}@")).unwrap_or_default();
        let host = self.opts.get_ip_or_hostname();
        let host = if host.contains(':') { format!("[{host}]") } else { host.to_string() };
        format!(
            "mysql://{user}{host}:{}/{}?ssl-mode={}",
            self.opts.get_tcp_port(),
            self.opts.get_db_name().unwrap_or_default(),
            self.ssl_mode()
        )
    }

    /// Whether the TLS options came from the application's `SslOpts` (then they are used as given).
    pub(crate) fn own_ssl_opts(&self) -> bool {
        self.own_ssl_opts
    }

    pub(crate) fn opts(&self) -> &Opts {
        &self.opts
    }
}

/// Driver TLS parameters refused in a URL, with what to write instead.
const DRIVER_TLS_PARAMETERS: [(&str, &str); 8] = [
    ("require_ssl", "ssl-mode=REQUIRED (or VERIFY_IDENTITY with ssl-ca)"),
    ("root_cert_path", "ssl-ca"),
    ("danger_accept_invalid_certs", "ssl-mode=REQUIRED"),
    ("danger_skip_domain_validation", "ssl-mode=VERIFY_CA"),
    ("cert_chain_path", "ssl-cert"),
    ("priv_key_path", "ssl-key"),
    ("pkcs12_path", "ssl-cert and ssl-key (PEM; PKCS#12 is not supported)"),
    ("cipher_suites", "the driver's SslOpts::with_cipher_suites through SqlBackend::mysql_opts"),
];

/// The URL without the backend's `ssl-*` parameters (what the driver parses, with the scheme
/// `mysql://`) and the TLS settings they give.
fn split_url(url: &str, shown: &str) -> Result<(String, MysqlTls)> {
    let url = url.trim();
    let url = match url.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("mariadb") || scheme.eq_ignore_ascii_case("mysql") => {
            format!("mysql://{rest}")
        }
        _ => url.to_string(),
    };
    if url.contains('#') {
        return Err(Error::config(format!("invalid MySQL URL {shown}: a fragment (#…) is not allowed")));
    }
    let Some((base, query)) = url.split_once('?') else { return Ok((url, MysqlTls::new())) };
    let mut mode = None;
    let mut kept = Vec::new();
    let invalid = |d: String| Error::config(format!("invalid MySQL URL {shown}: {d}"));
    let loose: fn(&str) -> Cow<'_, str> = |k| Cow::Owned(k.to_ascii_lowercase().replace('_', "-"));
    let params = TlsParams { names: ["ssl-ca", "ssl-cert", "ssl-key"], normalize: loose, invalid: &invalid };
    let [ca, cert, key] = params.split(query, &mut |k, v| {
        let name = loose(&k);
        if let Some((driver, instead)) = DRIVER_TLS_PARAMETERS.iter().find(|(n, _)| n.replace('_', "-") == name) {
            return Err(invalid(format!("{driver}= is not taken here; use {instead} (docs/configuration.md, MySQL)")));
        }
        if name == "ssl-mode" {
            if mode.is_some() {
                return Err(invalid("ssl-mode= is given twice".to_string()));
            }
            mode = Some(v.parse::<MysqlSslMode>().map_err(|e| invalid(e.to_string()))?);
        } else {
            kept.push((k.into_owned(), v.into_owned()));
        }
        Ok(())
    })?;
    let mut tls = MysqlTls::new();
    (tls.ca, tls.cert, tls.key, tls.mode) = (ca, cert, key, mode);
    let rest = with_query(base, kept);
    Ok((rest, tls))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_parse_with_mysql_names() {
        for m in MysqlSslMode::ALL {
            assert_eq!(m.name().parse::<MysqlSslMode>().unwrap(), m);
            assert_eq!(m.name().to_lowercase().replace('_', "-").parse::<MysqlSslMode>().unwrap(), m);
        }
        let e = "verify_full".parse::<MysqlSslMode>().unwrap_err();
        assert!(e.to_string().contains("VERIFY_IDENTITY"), "{e}");
    }

    #[test]
    fn url_parameters_are_split_off() {
        let (u, t) =
            split_url("mariadb://u:pw@h:3307/db?ssl-mode=verify_ca&ssl_ca=/a%20b/ca.pem&compress=true", "x").unwrap();
        assert_eq!(u, "mysql://u:pw@h:3307/db?compress=true");
        assert_eq!(t, MysqlTls::new().mode(MysqlSslMode::VerifyCa).ca("/a b/ca.pem"));
        let (u, t) = split_url("mysql://h/db", "x").unwrap();
        assert_eq!((u.as_str(), t.ssl_mode()), ("mysql://h/db", MysqlSslMode::Preferred));
        let (_, t) = split_url("mysql://h/db?ssl-ca=/ca&ssl-cert=/c&ssl-key=/k", "x").unwrap();
        assert_eq!(t.ssl_mode(), MysqlSslMode::VerifyIdentity);
        assert_eq!(t.client_identity_files(), Some((Path::new("/c"), Path::new("/k"))));
        for bad in [
            "mysql://h/db?ssl-mode=on",
            "mysql://h/db?ssl-mode=REQUIRED&ssl-mode=DISABLED",
            "mysql://h/db?ssl-ca=",
            "mysql://h/db?ssl-ca=/a&ssl-ca=/b",
            "mysql://h/db?require_ssl=true",
            "mysql://h/db?danger_accept_invalid_certs=true",
            "mysql://h/db?root_cert_path=/ca",
            "mysql://h/db#frag",
        ] {
            assert!(split_url(bad, "shown").is_err(), "{bad}");
        }
        let e = split_url("mysql://h/db?require_ssl=true", "shown").unwrap_err();
        assert!(e.to_string().contains("ssl-mode=REQUIRED"), "{e}");
    }

    #[test]
    fn combinations_are_checked_before_any_io() {
        let half = MysqlTls { cert: Some("/c".into()), ..MysqlTls::default() };
        assert!(half.validate().unwrap_err().to_string().contains("both"));
        let e = MysqlTls::new().mode(MysqlSslMode::Required).ca("/ca").validate().unwrap_err();
        assert!(e.to_string().contains("VERIFY_IDENTITY"), "{e}");
        let e = MysqlTls::new().mode(MysqlSslMode::Disabled).client_identity("/c", "/k").validate().unwrap_err();
        assert!(e.to_string().contains("DISABLED"), "{e}");
        let e = MysqlTls::new().ca("/nonexistent/ca.pem").validate().unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        assert!(MysqlTls::new().mode(MysqlSslMode::Required).validate().is_ok());
    }

    #[test]
    fn modes_map_to_the_drivers_flags_and_back() {
        assert!(MysqlTls::new().mode(MysqlSslMode::Disabled).ssl_opts().is_none());
        for m in [MysqlSslMode::Required, MysqlSslMode::VerifyCa, MysqlSslMode::VerifyIdentity] {
            let o = MysqlTls::new().mode(m).ssl_opts().unwrap();
            assert_eq!(MysqlTls::from_ssl_opts(Some(&o)).ssl_mode(), m);
        }
        let o = MysqlTls::new().ssl_opts().unwrap();
        assert!(o.accept_invalid_certs(), "PREFERRED does not verify");
        assert_eq!(MysqlTls::from_ssl_opts(None).ssl_mode(), MysqlSslMode::Disabled);
    }

    #[test]
    fn debug_and_display_hide_the_password() {
        let c = MysqlConfig::from_url("mysql://app:s3cr3t-pw@db.example:3306/simba?ssl-mode=REQUIRED").unwrap();
        assert!(!format!("{c:?}").contains("s3cr3t"), "{c:?}");
        assert_eq!(c.display_url(), "mysql://app@db.example:3306/simba?ssl-mode=REQUIRED");
        let e = MysqlConfig::from_url("mysql://app:s3cr3t-pw@db.example:3306/simba?pool_min=x").unwrap_err();
        assert!(!crate::error::display_chain(&e).contains("s3cr3t"), "{e}");
    }
}
