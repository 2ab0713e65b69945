//! The PostgreSQL backend's own settings: its URL (or libpq `key=value` string) with the TLS
//! parameters libpq knows (`sslmode`, `sslrootcert`, `sslcert`, `sslkey`, `sslsni`), and
//! [`PostgresTls`], the same settings in code.
//!
//! The `postgres` driver's own parser knows only `sslmode=disable|prefer|require` and no files:
//! this module takes the TLS parameters out of the text, hands the rest to
//! [`postgres::Config`]'s parser unchanged, and validates the TLS choice before any I/O.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::settings::redact::redact_url;

/// libpq's `sslmode`: whether the connection is encrypted and what is verified.
///
/// The default is [`Prefer`](SslMode::Prefer), as in libpq.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum SslMode {
    /// Never TLS.
    Disable,
    /// TLS when the server offers it, plaintext otherwise (and when the TLS handshake fails); the
    /// server certificate is not verified unless a root certificate is given, as in libpq.
    #[default]
    Prefer,
    /// TLS or no connection. The server certificate is not verified — unless a root certificate
    /// (`sslrootcert`) is given: then, as in libpq, its chain is verified as with
    /// [`VerifyCa`](SslMode::VerifyCa).
    Require,
    /// TLS, and the server certificate must chain to the root certificate (`sslrootcert`); the
    /// host name is not checked.
    VerifyCa,
    /// TLS, the certificate chain verified and the host name (or IP address) checked against the
    /// certificate: the only mode that stops a man in the middle holding any certificate of the CA.
    VerifyFull,
}

impl SslMode {
    /// The libpq name: `disable`, `prefer`, `require`, `verify-ca` or `verify-full`.
    pub fn name(self) -> &'static str {
        match self {
            SslMode::Disable => "disable",
            SslMode::Prefer => "prefer",
            SslMode::Require => "require",
            SslMode::VerifyCa => "verify-ca",
            SslMode::VerifyFull => "verify-full",
        }
    }
}

impl fmt::Display for SslMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for SslMode {
    type Err = Error;

    /// Parses the libpq names (case-insensitive). libpq's `allow` (plaintext first, TLS only when
    /// the server insists) is not supported: use `prefer`.
    fn from_str(s: &str) -> Result<SslMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "disable" => Ok(SslMode::Disable),
            "prefer" => Ok(SslMode::Prefer),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            "allow" => Err(Error::config(
                "sslmode=allow is not supported (it tries plaintext first): use sslmode=prefer, require, verify-ca \
                 or verify-full",
            )),
            _ => Err(Error::config(format!(
                "invalid sslmode {:?}: expected disable, prefer, require, verify-ca or verify-full",
                shorten(s)
            ))),
        }
    }
}

/// Where the trusted root certificates come from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RootCerts {
    /// The CA certificate(s) in this PEM file only (libpq's `sslrootcert=/path/ca.pem`).
    File(PathBuf),
    /// The operating system's trust store (libpq 16's `sslrootcert=system`), for a managed service
    /// whose certificate a public CA signs. As in libpq, it implies `verify-full`.
    System,
}

/// The TLS settings of a PostgreSQL connection, in code: what the URL's `sslmode`,
/// `sslrootcert`, `sslcert`, `sslkey` and `sslsni` say (see `docs/configuration.md`).
///
/// Only paths are kept; [`Debug`](fmt::Debug) shows them, never a file's contents. The files are
/// read when the backend is built, before any network I/O.
///
/// ```
/// use simba::backends::sql::{PostgresTls, SslMode};
/// let tls = PostgresTls::new(SslMode::VerifyFull)
///     .root_cert("/etc/ssl/rds-global-bundle.pem")
///     .client_identity("/etc/simba/client.pem", "/etc/simba/client.key");
/// assert_eq!(tls.mode(), SslMode::VerifyFull);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct PostgresTls {
    mode: Option<SslMode>,
    root: Option<RootCerts>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    sni: Option<bool>,
}

impl PostgresTls {
    /// TLS settings with this `sslmode` and no files.
    pub fn new(mode: SslMode) -> PostgresTls {
        PostgresTls { mode: Some(mode), ..PostgresTls::default() }
    }

    /// No TLS at all (`sslmode=disable`).
    pub fn disable() -> PostgresTls {
        PostgresTls::new(SslMode::Disable)
    }

    /// Trusts only the CA certificate(s) in this PEM file (`sslrootcert`).
    #[must_use]
    pub fn root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.root = Some(RootCerts::File(path.into()));
        self
    }

    /// Trusts the operating system's root certificates (`sslrootcert=system`; implies
    /// `verify-full`, and a weaker mode is refused, as in libpq).
    #[must_use]
    pub fn system_roots(mut self) -> Self {
        self.root = Some(RootCerts::System);
        self
    }

    /// Presents this client certificate (PEM chain) and private key (PEM: PKCS#8, PKCS#1 or SEC1;
    /// not encrypted) — `sslcert` and `sslkey`.
    #[must_use]
    pub fn client_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        self.cert = Some(cert.into());
        self.key = Some(key.into());
        self
    }

    /// Whether to send the host name in the TLS handshake (SNI; `sslsni`, default on). Never sent
    /// for an IP address.
    #[must_use]
    pub fn sni(mut self, on: bool) -> Self {
        self.sni = Some(on);
        self
    }

    /// The effective `sslmode`: as set, else `verify-full` with system roots, else `prefer`.
    pub fn mode(&self) -> SslMode {
        match (self.mode, &self.root) {
            (Some(m), _) => m,
            (None, Some(RootCerts::System)) => SslMode::VerifyFull,
            (None, _) => SslMode::Prefer,
        }
    }

    /// The root certificates, if set.
    pub fn root_certs(&self) -> Option<&RootCerts> {
        self.root.as_ref()
    }

    /// The client certificate and key files, if set.
    pub fn client_identity_files(&self) -> Option<(&Path, &Path)> {
        Some((self.cert.as_deref()?, self.key.as_deref()?))
    }

    /// Whether SNI is sent (default `true`).
    pub fn sends_sni(&self) -> bool {
        self.sni.unwrap_or(true)
    }

    /// What is verified, after libpq's rules: `None` without TLS; otherwise whether the chain and
    /// the host name are checked.
    pub(crate) fn verification(&self) -> Verification {
        match (self.mode(), &self.root) {
            (SslMode::Disable, _) => Verification::Plain,
            (SslMode::VerifyFull, _) => Verification::Full,
            (SslMode::VerifyCa, _) => Verification::Chain,
            // libpq: with a root certificate, require (and prefer) verify the chain like verify-ca.
            (SslMode::Require | SslMode::Prefer, Some(_)) => Verification::Chain,
            (SslMode::Require | SslMode::Prefer, None) => Verification::Nothing,
        }
    }

    /// The settings of the text (URL) joined with those given in code; one set in both with
    /// different values is an error.
    pub(crate) fn merge(self, code: &PostgresTls) -> Result<PostgresTls> {
        fn pick<T: PartialEq + Clone + fmt::Debug>(what: &str, url: Option<T>, code: &Option<T>) -> Result<Option<T>> {
            match (url, code) {
                (Some(a), Some(b)) if &a != b => Err(Error::config(format!(
                    "the PostgreSQL {what} is set twice with different values: {a:?} in the URL and {b:?} in \
                     PostgresTls; keep one"
                ))),
                (Some(a), _) => Ok(Some(a)),
                (None, b) => Ok(b.clone()),
            }
        }
        Ok(PostgresTls {
            mode: pick("sslmode", self.mode, &code.mode)?,
            root: pick("sslrootcert", self.root, &code.root)?,
            cert: pick("sslcert", self.cert, &code.cert)?,
            key: pick("sslkey", self.key, &code.key)?,
            sni: pick("sslsni", self.sni, &code.sni)?,
        })
    }

    /// The libpq rules that need no file: a certificate needs its key, verify modes need roots,
    /// system roots need verify-full.
    ///
    /// # Errors
    /// `InvalidConfig` naming the rule.
    pub(crate) fn validate(&self) -> Result<()> {
        let mode = self.mode();
        match (&self.cert, &self.key) {
            (Some(_), None) | (None, Some(_)) => {
                return Err(Error::config(
                    "a PostgreSQL TLS client identity needs both a certificate and a key (sslcert= and sslkey=, or \
                     PostgresTls::client_identity)",
                ))
            }
            _ => {}
        }
        match (&self.root, mode) {
            (None, SslMode::VerifyCa | SslMode::VerifyFull) => Err(Error::config(format!(
                "sslmode={mode} needs the CA that signs the server's certificate: sslrootcert=/path/ca.pem (or \
                 sslrootcert=system for the system's trusted roots); simba does not read ~/.postgresql/root.crt"
            ))),
            (Some(RootCerts::System), m) if m != SslMode::VerifyFull => Err(Error::config(format!(
                "sslrootcert=system needs sslmode=verify-full (it trusts every public CA, so the host name must be \
                 checked); weak sslmode {m} may not be used with it, as in libpq"
            ))),
            _ => Ok(()),
        }
    }
}

/// What the TLS setup verifies (after libpq's rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verification {
    /// No TLS (`sslmode=disable`).
    Plain,
    /// Encrypted, nothing verified (`prefer`/`require` without a root certificate).
    Nothing,
    /// The certificate chain, not the host name.
    Chain,
    /// The chain and the host name.
    Full,
}

/// libpq TLS parameters this crate does not support, with what to do instead.
const UNSUPPORTED: &[(&str, &str)] = &[
    ("sslpassword", "encrypted client keys are not supported: give an unencrypted PEM key file (sslkey=) readable only by the application"),
    ("sslcrl", "certificate revocation lists are not supported"),
    ("sslcrldir", "certificate revocation lists are not supported"),
    ("sslcertmode", "the client certificate is sent whenever sslcert= and sslkey= are given"),
    ("sslcompression", "TLS compression is not supported (and insecure)"),
    ("ssl_min_protocol_version", "TLS 1.2 and 1.3 are always allowed, nothing older"),
    ("ssl_max_protocol_version", "TLS 1.2 and 1.3 are always allowed, nothing older"),
    ("requiressl", "use sslmode=require"),
    ("gssencmode", "GSSAPI encryption is not supported"),
];

/// A URL or libpq `key=value` string split into the driver's configuration and the TLS settings.
///
/// # Errors
/// `InvalidConfig` (the text redacted) for a TLS parameter that is malformed, unsupported or
/// given twice, or when the driver's parser rejects the rest. The rules between the TLS settings
/// ([`PostgresTls::validate`]) are checked once they are joined with those given in code.
pub(crate) fn parse(text: &str) -> Result<(postgres::Config, PostgresTls)> {
    let shown = redact_url(text);
    let (rest, tls) = split(text).map_err(|why| Error::config(format!("invalid PostgreSQL URL {shown}: {why}")))?;
    let config = postgres::Config::from_str(&rest)
        .map_err(|e| Error::config(format!("invalid PostgreSQL URL {shown}")).with_source(e))?;
    Ok((config, tls))
}

/// The text without its TLS parameters (what the driver parses) and those parameters. Errors are
/// the reason only (no part of the text).
fn split(text: &str) -> std::result::Result<(String, PostgresTls), String> {
    let text = text.trim();
    let is_url =
        ["postgres://", "postgresql://"].iter().any(|p| text.get(..p.len()).is_some_and(|s| s.eq_ignore_ascii_case(p)));
    if is_url {
        let Some((base, query)) = text.split_once('?') else { return Ok((text.to_string(), PostgresTls::default())) };
        let mut tls = PostgresTls::default();
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            let key = decode(k);
            if !take(&mut tls, &key, &decode(v))? {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() { base.to_string() } else { format!("{base}?{}", kept.join("&")) };
        Ok((rest, tls))
    } else {
        let mut tls = PostgresTls::default();
        let mut kept = Vec::new();
        for (k, v) in key_values(text)? {
            if !take(&mut tls, &k, &v)? {
                kept.push(format!("{k}='{}'", v.replace('\\', "\\\\").replace('\'', "\\'")));
            }
        }
        Ok((kept.join(" "), tls))
    }
}

/// Records the TLS parameter `key` in `tls`: `Ok(false)` when it is not one.
fn take(tls: &mut PostgresTls, key: &str, value: &str) -> std::result::Result<bool, String> {
    if let Some((k, why)) = UNSUPPORTED.iter().find(|(k, _)| *k == key) {
        return Err(format!("{k} is not supported: {why}"));
    }
    let empty = || format!("{key}= needs a value");
    let twice = || format!("{key}= is given twice");
    match key {
        "sslmode" => {
            if tls.mode.is_some() {
                return Err(twice());
            }
            tls.mode = Some(value.parse::<SslMode>().map_err(|e| e.to_string())?);
        }
        "sslrootcert" => {
            if value.is_empty() {
                return Err(empty());
            }
            if tls.root.is_some() {
                return Err(twice());
            }
            tls.root = Some(if value == "system" { RootCerts::System } else { RootCerts::File(value.into()) });
        }
        "sslcert" | "sslkey" => {
            if value.is_empty() {
                return Err(empty());
            }
            let slot = if key == "sslcert" { &mut tls.cert } else { &mut tls.key };
            if slot.is_some() {
                return Err(twice());
            }
            *slot = Some(value.into());
        }
        "sslsni" => {
            if tls.sni.is_some() {
                return Err(twice());
            }
            tls.sni = Some(match value {
                "1" => true,
                "0" => false,
                _ => return Err(format!("invalid sslsni {:?}: expected 1 or 0", shorten(value))),
            });
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// Percent-decoding as the driver does it (`+` stays `+`); invalid escapes stay as written.
fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            if let (Some(h), Some(l)) = (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A libpq `key = value key2 = 'quoted \' value'` string as pairs (libpq's rules: optional spaces
/// around `=`, single quotes, backslash escapes).
fn key_values(text: &str) -> std::result::Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut chars = text.chars().peekable();
    loop {
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.peek().is_none() {
            return Ok(out);
        }
        let mut key = String::new();
        while let Some(c) = chars.next_if(|c| *c != '=' && !c.is_whitespace()) {
            key.push(c);
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        if chars.next() != Some('=') {
            return Err(format!("expected key=value after {:?}", shorten(&key)));
        }
        while chars.next_if(|c| c.is_whitespace()).is_some() {}
        let mut value = String::new();
        if chars.next_if_eq(&'\'').is_some() {
            loop {
                match chars.next() {
                    None => return Err(format!("the value of {:?} has no closing quote", shorten(&key))),
                    Some('\'') => break,
                    Some('\\') => match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(format!("the value of {:?} ends in a backslash", shorten(&key))),
                    },
                    Some(c) => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.next_if(|c| !c.is_whitespace()) {
                if c == '\\' {
                    match chars.next() {
                        Some(c) => value.push(c),
                        None => return Err(format!("the value of {:?} ends in a backslash", shorten(&key))),
                    }
                } else {
                    value.push(c);
                }
            }
        }
        out.push((key, value));
    }
}

fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any text: split and parsed or a clear error, never a panic (issue 15, item 5).
        #[test]
        fn any_text_splits_or_is_an_error(text in ".{0,120}") {
            let _ = split(&text);
            let _ = parse(&text);
            let _ = parse(&format!("postgres://h/db?{text}"));
        }

        /// Values with quotes, backslashes and spaces survive the key=value round trip: what is
        /// left for the driver reads back the same.
        #[test]
        fn key_value_values_round_trip(user in "[a-z]{1,8}", app in "[ -~]{0,24}", root in "/[ -~]{1,24}") {
            let quote = |v: &str| format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"));
            let text = format!("user={} application_name = {} sslrootcert={} host=h", quote(&user), quote(&app), quote(&root));
            let (rest, tls) = split(&text).unwrap();
            prop_assert_eq!(tls.root_certs(), Some(&RootCerts::File(root.clone().into())));
            let config = postgres::Config::from_str(&rest).unwrap();
            prop_assert_eq!(config.get_user(), Some(user.as_str()));
            prop_assert_eq!(config.get_application_name(), Some(app.as_str()));
        }
    }

    fn checked(text: &str) -> Result<PostgresTls> {
        let (_, t) = parse(text)?;
        t.validate()?;
        Ok(t)
    }

    fn tls(text: &str) -> PostgresTls {
        checked(text).unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn url_parameters_are_taken_out_for_the_driver() {
        let (rest, t) = split(
            "postgres://u:pw@h:5433/db?sslmode=verify-full&sslrootcert=/a%20b/ca.pem&application_name=x&sslcert=/c&sslkey=/k",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u:pw@h:5433/db?application_name=x");
        assert_eq!(t, PostgresTls::new(SslMode::VerifyFull).root_cert("/a b/ca.pem").client_identity("/c", "/k"));
        let (rest, t) = split("postgres://h/db").unwrap();
        assert_eq!((rest.as_str(), t), ("postgres://h/db", PostgresTls::default()));
        let (rest, t) = split("postgresql://h/db?sslmode=require").unwrap();
        assert_eq!((rest.as_str(), t.mode()), ("postgresql://h/db", SslMode::Require));
        let (config, _) = parse("postgres://u@h:1/db?sslmode=verify-ca&sslrootcert=/x&connect_timeout=3").unwrap();
        assert_eq!(config.get_connect_timeout(), Some(&std::time::Duration::from_secs(3)));
    }

    #[test]
    fn key_value_strings_are_taken_apart_too() {
        let (rest, t) =
            split("host=h  user = 'o\\'neil' sslmode=verify-ca sslrootcert='/with space/ca.pem' dbname=d").unwrap();
        assert_eq!(rest, "host='h' user='o\\'neil' dbname='d'");
        assert_eq!(t, PostgresTls::new(SslMode::VerifyCa).root_cert("/with space/ca.pem"));
        let (config, _) = parse(&rest).unwrap();
        assert_eq!(config.get_user(), Some("o'neil"));
        assert!(split("host=h user='x").is_err());
        assert!(split("host").is_err());
    }

    #[test]
    fn libpq_rules() {
        assert_eq!(tls("postgres://h/db").verification(), Verification::Nothing);
        assert_eq!(tls("postgres://h/db?sslmode=disable").verification(), Verification::Plain);
        assert_eq!(tls("postgres://h/db?sslmode=require").verification(), Verification::Nothing);
        assert_eq!(tls("postgres://h/db?sslmode=require&sslrootcert=/ca").verification(), Verification::Chain);
        assert_eq!(tls("postgres://h/db?sslmode=verify-ca&sslrootcert=/ca").verification(), Verification::Chain);
        assert_eq!(tls("postgres://h/db?sslmode=verify-full&sslrootcert=/ca").verification(), Verification::Full);
        let system = tls("postgres://h/db?sslrootcert=system");
        assert_eq!((system.mode(), system.verification()), (SslMode::VerifyFull, Verification::Full));
        for (url, words) in [
            ("postgres://h/db?sslmode=verify-full", "needs the CA"),
            ("postgres://h/db?sslmode=require&sslrootcert=system", "verify-full"),
            ("postgres://h/db?sslcert=/c", "both"),
            ("postgres://h/db?sslmode=bogus", "expected disable, prefer"),
            ("postgres://h/db?sslmode=allow", "not supported"),
            ("postgres://h/db?sslmode=require&sslmode=disable", "twice"),
            ("postgres://h/db?sslrootcert=", "needs a value"),
            ("postgres://h/db?sslcrl=/x", "revocation"),
            ("postgres://h/db?sslsni=2", "sslsni"),
            ("postgres://h/db?no_such_option=1", "invalid PostgreSQL URL"),
        ] {
            let e = checked(url).expect_err(url);
            assert!(crate::error::display_chain(&e).contains(words), "{url}: {e}");
        }
    }

    #[test]
    fn secrets_stay_out_of_errors() {
        for url in ["postgres://u:hunter2@h/db?sslpassword=hunter3", "password=hunter2 sslpassword=hunter3 host=h"] {
            let e = crate::error::display_chain(&parse(url).expect_err(url));
            assert!(!e.contains("hunter2") && !e.contains("hunter3"), "{url}: {e}");
        }
    }

    #[test]
    fn code_and_url_merge() {
        let url = PostgresTls::new(SslMode::VerifyFull);
        let code = PostgresTls::default().root_cert("/ca");
        assert_eq!(url.clone().merge(&code).unwrap(), PostgresTls::new(SslMode::VerifyFull).root_cert("/ca"));
        let e = url.merge(&PostgresTls::new(SslMode::Require)).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
        assert_eq!(decode("%2Fa+b%zz%4"), "/a+b%zz%4");
    }
}
