//! Configuration of the ZooKeeper backend: [`ZookeeperOptions`], [`ZookeeperAuth`], [`AclMode`],
//! [`AclEntry`], [`ZookeeperTls`], [`ZookeeperSasl`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine as _;
use sha1::Digest as _;
use zookeeper_client::{Acl, AuthId, Permission, SaslOptions, TlsOptions};

use crate::error::{Error, Result};
use crate::options::DEFAULT_QUERY_TIMEOUT;

/// Default root path of every node the backend creates.
pub const DEFAULT_ROOT: &str = "/simba";
/// Default bound on opening a ZooKeeper session (connect + handshake + session node).
pub const DEFAULT_CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Session timeout requested for the backend's shared reader client (holder, members, watches).
pub const SHARED_SESSION_TIMEOUT: Duration = Duration::from_secs(10);

/// One ZooKeeper auth info (`addAuthInfo`): a scheme and its credentials, e.g. `digest` and
/// `user:password`. The credentials are never printed (`Debug` redacts them).
#[derive(Clone, PartialEq, Eq)]
pub struct ZookeeperAuth {
    scheme: String,
    credentials: Vec<u8>,
}

impl ZookeeperAuth {
    /// An auth info of `scheme` with raw `credentials`.
    ///
    /// # Errors
    /// `InvalidConfig` when the scheme is empty or not plain ASCII letters/digits, the credentials
    /// are empty, or `digest` credentials are not `user:password` (the credentials are never
    /// echoed in the message).
    pub fn new(scheme: impl Into<String>, credentials: impl Into<Vec<u8>>) -> Result<ZookeeperAuth> {
        let scheme = scheme.into();
        let credentials = credentials.into();
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::config(format!(
                "invalid ZooKeeper auth: the scheme {:?} must be ASCII letters and digits; expected \
                 scheme:credentials, e.g. digest:user:password",
                scheme.chars().take(64).collect::<String>()
            )));
        }
        if credentials.is_empty() {
            return Err(Error::config(
                "invalid ZooKeeper auth: empty credentials; expected scheme:credentials, e.g. digest:user:password",
            ));
        }
        if scheme == "digest" && !credentials.contains(&b':') {
            return Err(Error::config(
                "invalid ZooKeeper auth: digest credentials must be user:password (the value is not shown)",
            ));
        }
        Ok(ZookeeperAuth { scheme, credentials })
    }

    /// The `digest` scheme with `user:password`.
    ///
    /// # Errors
    /// `InvalidConfig` when `user` is empty or contains `:`.
    pub fn digest(user: &str, password: &str) -> Result<ZookeeperAuth> {
        if user.is_empty() || user.contains(':') {
            return Err(Error::config(format!(
                "invalid ZooKeeper digest user {user:?}: must be non-empty and contain no ':'"
            )));
        }
        ZookeeperAuth::new("digest", format!("{user}:{password}").into_bytes())
    }

    /// Parses `scheme:credentials`, e.g. `digest:simba:secret` (the form of `SIMBA_ZOOKEEPER_AUTH`).
    ///
    /// # Errors
    /// `InvalidConfig` when there is no `:` or the scheme is invalid (the credentials are never
    /// echoed in the message).
    pub fn parse(s: &str) -> Result<ZookeeperAuth> {
        match s.split_once(':') {
            Some((scheme, creds)) if !creds.is_empty() => ZookeeperAuth::new(scheme, creds.as_bytes().to_vec()),
            _ => {
                Err(Error::config("invalid ZooKeeper auth: expected 'scheme:credentials', e.g. 'digest:user:password'"))
            }
        }
    }

    /// The scheme, e.g. `digest`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    pub(crate) fn credentials(&self) -> &[u8] {
        &self.credentials
    }
}

impl fmt::Debug for ZookeeperAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperAuth").field("scheme", &self.scheme).field("credentials", &"<redacted>").finish()
    }
}

/// The ACL given to every node the backend creates (including parents it creates). Existing
/// nodes keep their ACL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum AclMode {
    /// `CreatorAll` when the options carry auth info or SASL, `Open` otherwise: the default of
    /// [`Config`](crate::Config) (`SIMBA_ZOOKEEPER_ACL=auto`). Only the options are looked at: the
    /// credentials of an application's own client connector
    /// ([`ZookeeperBackend::with_connector`](super::ZookeeperBackend::with_connector)) are not
    /// visible to the backend, so set the mode explicitly there.
    Auto,
    /// `OPEN_ACL_UNSAFE` (`world:anyone` with all permissions): any client that reaches the
    /// ensemble can delete or pre-create lease nodes and forge members. The default of
    /// [`ZookeeperOptions`].
    #[default]
    Open,
    /// `CREATOR_ALL_ACL` (`auth::` with all permissions): only clients authenticated with the same
    /// identity (e.g. the same digest credentials) can read, create or delete. Needs auth info.
    CreatorAll,
    /// An explicit ACL list, e.g. the backend's digest identity with all permissions plus
    /// `world:anyone` read-only, so that monitoring tools can see holders and members but not
    /// change them. The list must give some entry every permission the backend needs on its own
    /// nodes (create, delete, read; see `docs/backends/zookeeper.md`).
    Custom(Vec<AclEntry>),
}

impl AclMode {
    /// `Open` or `CreatorAll` in place of `Auto`, after whether an identity (auth info or SASL) is
    /// configured; every other mode as it is.
    pub fn resolve(self, has_identity: bool) -> AclMode {
        match self {
            AclMode::Auto if has_identity => AclMode::CreatorAll,
            AclMode::Auto => AclMode::Open,
            other => other,
        }
    }

    /// The ZooKeeper ACL list of this mode (`Auto` must be resolved first; it counts as `Open`).
    pub(crate) fn to_acls(&self) -> Vec<Acl> {
        match self {
            AclMode::Auto | AclMode::Open => vec![Acl::new(Permission::ALL, AuthId::anyone())],
            AclMode::CreatorAll => vec![Acl::new(Permission::ALL, AuthId::authed())],
            AclMode::Custom(list) => list.iter().map(AclEntry::to_acl).collect(),
        }
    }

    /// A short description for `check` and logs, e.g. `creator-all` or `custom (2 entries)`.
    pub(crate) fn describe(&self) -> String {
        match self {
            AclMode::Auto | AclMode::Open => "open (OPEN_ACL_UNSAFE)".into(),
            AclMode::CreatorAll => "creator-all".into(),
            AclMode::Custom(list) => {
                let items: Vec<String> = list.iter().map(ToString::to_string).collect();
                format!("custom [{}]", items.join(", "))
            }
        }
    }
}

impl std::str::FromStr for AclMode {
    type Err = Error;

    /// Parses `auto`, `open` or `creator-all` (case-insensitive), or a comma-separated list of
    /// `scheme:id:permissions` entries (e.g. `world:anyone:r,sasl:simba:cdrwa`), the values of
    /// `SIMBA_ZOOKEEPER_ACL`.
    fn from_str(s: &str) -> Result<AclMode> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(AclMode::Auto),
            "open" => Ok(AclMode::Open),
            "creator-all" | "creator_all" => Ok(AclMode::CreatorAll),
            _ if s.contains(':') => Ok(AclMode::Custom(s.split(',').map(AclEntry::parse).collect::<Result<_>>()?)),
            _ => Err(Error::config(format!(
                "invalid ZooKeeper ACL mode {:?}: expected auto, open, creator-all or a list of \
                 scheme:id:permissions entries",
                s.chars().take(64).collect::<String>()
            ))),
        }
    }
}

/// The permissions an [`AclEntry`] grants, in ZooKeeper's letters: `c`reate, `d`elete, `r`ead,
/// `w`rite, `a`dmin.
const PERMISSION_LETTERS: [(char, Permission); 5] = [
    ('c', Permission::CREATE),
    ('d', Permission::DELETE),
    ('r', Permission::READ),
    ('w', Permission::WRITE),
    ('a', Permission::ADMIN),
];

/// One entry of a custom ACL list: a scheme, an id and the permissions granted to it, e.g.
/// `world:anyone:r` or `digest:simba:<base64 sha1>:cdrwa`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclEntry {
    scheme: String,
    id: String,
    permissions: Permission,
}

impl AclEntry {
    /// An entry granting `permissions` (letters out of `cdrwa`, e.g. `"cdrwa"` or `"r"`) to
    /// `scheme:id`, e.g. `("world", "anyone")`, `("ip", "10.0.0.0/8")` or
    /// `("digest", "user:base64-sha1")`.
    ///
    /// # Errors
    /// `InvalidConfig` when the scheme is not ASCII letters/digits, the id is empty or has control
    /// characters, or the permissions are empty or use a letter outside `cdrwa`.
    pub fn new(scheme: &str, id: &str, permissions: &str) -> Result<AclEntry> {
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::config(format!(
                "invalid ZooKeeper ACL scheme {scheme:?}: expected ASCII letters and digits, e.g. world, digest, ip"
            )));
        }
        if id.is_empty() || id.chars().any(char::is_control) {
            return Err(Error::config(format!(
                "invalid ZooKeeper ACL id {id:?} for scheme {scheme}: must be non-empty without control characters"
            )));
        }
        let mut bits = Permission::NONE;
        for c in permissions.chars() {
            match PERMISSION_LETTERS.iter().find(|(l, _)| *l == c.to_ascii_lowercase()) {
                Some((_, p)) => bits = bits | *p,
                None => {
                    return Err(Error::config(format!(
                        "invalid ZooKeeper ACL permissions {permissions:?}: expected letters out of cdrwa \
                         (create, delete, read, write, admin)"
                    )))
                }
            }
        }
        if bits == Permission::NONE {
            return Err(Error::config(
                "invalid ZooKeeper ACL permissions \"\": expected at least one letter out of cdrwa",
            ));
        }
        Ok(AclEntry { scheme: scheme.to_string(), id: id.to_string(), permissions: bits })
    }

    /// The `digest` entry of `user` with `password` (the id is `user:base64(sha1(user:password))`,
    /// as ZooKeeper's `DigestAuthenticationProvider` computes it); clients authenticate with
    /// [`ZookeeperAuth::digest`] and the same user and password. The password is not kept.
    ///
    /// # Errors
    /// `InvalidConfig` when `user` is empty or contains `:`, or the permissions are invalid (see
    /// [`AclEntry::new`]).
    pub fn digest(user: &str, password: &str, permissions: &str) -> Result<AclEntry> {
        if user.is_empty() || user.contains(':') {
            return Err(Error::config(format!(
                "invalid ZooKeeper digest user {user:?}: must be non-empty and contain no ':'"
            )));
        }
        let hash = sha1::Sha1::digest(format!("{user}:{password}").as_bytes());
        let id = format!("{user}:{}", base64::engine::general_purpose::STANDARD.encode(hash));
        AclEntry::new("digest", &id, permissions)
    }

    /// Parses `scheme:id:permissions`, e.g. `world:anyone:r` or `digest:simba:<hash>:cdrwa` (the
    /// id may contain `:`; the scheme ends at the first `:`, the permissions follow the last).
    ///
    /// # Errors
    /// `InvalidConfig` when a part is missing or invalid (see [`AclEntry::new`]).
    pub fn parse(s: &str) -> Result<AclEntry> {
        let s = s.trim();
        match s.split_once(':').and_then(|(scheme, rest)| rest.rsplit_once(':').map(|(id, p)| (scheme, id, p))) {
            Some((scheme, id, perms)) => AclEntry::new(scheme, id, perms),
            None => Err(Error::config(format!(
                "invalid ZooKeeper ACL entry {s:?}: expected scheme:id:permissions, e.g. world:anyone:r"
            ))),
        }
    }

    /// The scheme, e.g. `world`.
    pub fn scheme(&self) -> &str {
        &self.scheme
    }

    /// The id, e.g. `anyone`.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Whether the entry grants every permission in `letters` (out of `cdrwa`).
    pub fn grants(&self, letters: &str) -> bool {
        letters
            .chars()
            .all(|c| PERMISSION_LETTERS.iter().any(|(l, p)| *l == c.to_ascii_lowercase() && self.permissions.has(*p)))
    }

    fn to_acl(&self) -> Acl {
        Acl::new(self.permissions, AuthId::new(&self.scheme, &self.id))
    }
}

impl fmt::Display for AclEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let letters: String =
            PERMISSION_LETTERS.iter().filter(|(_, p)| self.permissions.has(*p)).map(|(l, _)| *l).collect();
        write!(f, "{}:{}:{letters}", self.scheme, self.id)
    }
}

/// Client TLS of the ZooKeeper backend (the server's `secureClientPort`, Netty): the CA that signs
/// the servers' certificates, optionally a client certificate and key for servers that require
/// client authentication. The server's certificate must name the host (DNS name or IP address, as
/// written in the connect string) in its subject alternative names: host name verification is
/// always on. Built from PEM text or PEM files; the key is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ZookeeperTls {
    ca_pem: String,
    /// The file the CA came from, when it came from one.
    ca_file: Option<PathBuf>,
    identity: Option<(String, String)>,
}

impl ZookeeperTls {
    /// TLS trusting the CA certificates in `ca_pem` (PEM, one or more `CERTIFICATE` blocks, CRLs
    /// allowed).
    ///
    /// # Errors
    /// `InvalidConfig` when the PEM holds no usable CA certificate.
    pub fn from_pem(ca_pem: impl Into<String>) -> Result<ZookeeperTls> {
        let tls = ZookeeperTls { ca_pem: ca_pem.into(), ca_file: None, identity: None };
        tls.parse("", "")?;
        Ok(tls)
    }

    /// TLS trusting the CA certificates in the PEM file at `ca_path`.
    ///
    /// # Errors
    /// `InvalidConfig` when the file cannot be read or holds no usable CA certificate.
    pub fn from_ca_file(ca_path: impl AsRef<Path>) -> Result<ZookeeperTls> {
        let path = ca_path.as_ref();
        let tls = ZookeeperTls { ca_pem: read_pem(path, "CA")?, ca_file: Some(path.to_path_buf()), identity: None };
        tls.parse(&format!(" file {}", path.display()), "")?;
        Ok(tls)
    }

    /// Presents the client certificate chain `cert_pem` with its private key `key_pem` (PKCS#8,
    /// PKCS#1 or SEC1 PEM) to servers that require client authentication.
    ///
    /// # Errors
    /// `InvalidConfig` when either PEM holds no certificate or key.
    pub fn identity_pem(self, cert_pem: impl Into<String>, key_pem: impl Into<String>) -> Result<ZookeeperTls> {
        self.set_identity(cert_pem.into(), key_pem.into(), "")
    }

    /// [`ZookeeperTls::identity_pem`] from PEM files.
    ///
    /// # Errors
    /// `InvalidConfig` when a file cannot be read or holds no certificate or key.
    pub fn identity_files(self, cert_path: impl AsRef<Path>, key_path: impl AsRef<Path>) -> Result<ZookeeperTls> {
        let (cert_path, key_path) = (cert_path.as_ref(), key_path.as_ref());
        let cert = read_pem(cert_path, "client certificate")?;
        let key = read_pem(key_path, "client key")?;
        self.set_identity(cert, key, &format!(" files {} and {}", cert_path.display(), key_path.display()))
    }

    /// Sets the identity and checks it; `from` says where the PEM came from, for errors.
    fn set_identity(mut self, cert: String, key: String, from: &str) -> Result<ZookeeperTls> {
        // The client library accepts a PEM without certificates here and fails only when connecting.
        if !cert.contains("-----BEGIN CERTIFICATE-----") {
            return Err(Error::config(format!(
                "invalid ZooKeeper TLS client certificate{from}: no CERTIFICATE block; expected the PEM certificate chain"
            )));
        }
        self.identity = Some((cert, key));
        self.parse("", from)?;
        Ok(self)
    }

    /// The CA file, when the CA was read from one ([`ZookeeperTls::from_ca_file`]).
    pub fn ca_file(&self) -> Option<&Path> {
        self.ca_file.as_deref()
    }

    /// Whether a client certificate is presented.
    pub fn has_identity(&self) -> bool {
        self.identity.is_some()
    }

    /// The CA PEM and the identity's certificate and key PEM, for the TLS probe.
    pub(crate) fn pems(&self) -> (&str, Option<(&str, &str)>) {
        (&self.ca_pem, self.identity.as_ref().map(|(c, k)| (c.as_str(), k.as_str())))
    }

    pub(crate) fn to_client_options(&self) -> Result<TlsOptions> {
        self.parse("", "")
    }

    /// The client library's options; `ca_from` / `identity_from` say where the PEM came from in
    /// errors (e.g. " file /etc/simba/ca.pem"). The client's own message never quotes the PEM.
    fn parse(&self, ca_from: &str, identity_from: &str) -> Result<TlsOptions> {
        let bad = |what: &str, from: &str, e: zookeeper_client::Error| {
            Error::config(format!(
                "invalid ZooKeeper TLS {what}{from}: {e}; expected PEM (CERTIFICATE blocks{})",
                if what == "CA" { "" } else { ", and a PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY block" }
            ))
        };
        let mut o = TlsOptions::default().with_pem_ca(&self.ca_pem).map_err(|e| bad("CA", ca_from, e))?;
        if let Some((cert, key)) = &self.identity {
            o = o.with_pem_identity(cert, key).map_err(|e| bad("client certificate or key", identity_from, e))?;
        }
        Ok(o)
    }
}

impl fmt::Debug for ZookeeperTls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperTls")
            .field("ca", &"<pem>")
            .field("identity", &self.identity.as_ref().map(|_| "<cert + redacted key>"))
            .finish()
    }
}

pub(crate) fn read_pem(path: &Path, what: &str) -> Result<String> {
    std::fs::read_to_string(path)
        .map_err(|e| Error::config(format!("cannot read the ZooKeeper TLS {what} file {}: {e}", path.display())))
}

/// SASL authentication of every client of the backend. Only `DIGEST-MD5` (the server's
/// `DigestLoginModule` users in its JAAS `Server` section) is available; Kerberos (GSSAPI) is not
/// (see `docs/backends/zookeeper.md`). The password is never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct ZookeeperSasl {
    user: String,
    password: String,
}

impl ZookeeperSasl {
    /// `DIGEST-MD5` as `user` with `password`. The identity the server sees is `sasl:user`, e.g.
    /// for an [`AclEntry`] `sasl:user:cdrwa`.
    ///
    /// # Errors
    /// `InvalidConfig` when `user` is empty or has control characters.
    pub fn digest_md5(user: &str, password: &str) -> Result<ZookeeperSasl> {
        if user.is_empty() || user.chars().any(char::is_control) {
            return Err(Error::config(format!(
                "invalid ZooKeeper SASL user {user:?}: must be non-empty without control characters"
            )));
        }
        Ok(ZookeeperSasl { user: user.to_string(), password: password.to_string() })
    }

    /// The SASL user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    pub(crate) fn to_client_options(&self) -> SaslOptions {
        SaslOptions::digest_md5(self.user.clone(), self.password.clone()).into()
    }
}

impl fmt::Debug for ZookeeperSasl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperSasl")
            .field("mechanism", &"DIGEST-MD5")
            .field("user", &self.user)
            .field("password", &"<redacted>")
            .finish()
    }
}

/// Options of [`ZookeeperBackend`](super::ZookeeperBackend), built with chained setters from
/// [`ZookeeperOptions::default`] and validated by [`ZookeeperBackend::connect`](super::ZookeeperBackend::connect).
#[derive(Clone, PartialEq, Eq)]
pub struct ZookeeperOptions {
    pub(crate) root: String,
    pub(crate) connection_timeout: Duration,
    pub(crate) query_timeout: Duration,
    pub(crate) auth: Vec<ZookeeperAuth>,
    pub(crate) acl: AclMode,
    pub(crate) tls: Option<ZookeeperTls>,
    pub(crate) sasl: Option<ZookeeperSasl>,
}

impl Default for ZookeeperOptions {
    fn default() -> Self {
        ZookeeperOptions {
            root: DEFAULT_ROOT.to_string(),
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            auth: Vec::new(),
            acl: AclMode::Open,
            tls: None,
            sasl: None,
        }
    }
}

impl fmt::Debug for ZookeeperOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperOptions")
            .field("root", &self.root)
            .field("connection_timeout", &self.connection_timeout)
            .field("query_timeout", &self.query_timeout)
            .field("auth", &self.auth)
            .field("acl", &self.acl)
            .field("tls", &self.tls)
            .field("sasl", &self.sasl)
            .finish()
    }
}

impl ZookeeperOptions {
    /// Root path of every node (default `/simba`): an absolute ZooKeeper path without a trailing
    /// `/`, not under `/zookeeper`.
    #[must_use]
    pub fn root(mut self, root: impl Into<String>) -> Self {
        self.root = root.into();
        self
    }

    /// Bound on opening a session (default 10 s).
    #[must_use]
    pub fn connection_timeout(mut self, d: Duration) -> Self {
        self.connection_timeout = d;
        self
    }

    /// Bound on every other call (default [`DEFAULT_QUERY_TIMEOUT`], 5 s).
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = d;
        self
    }

    /// Adds an auth info sent by every client of the backend (per-session clients and the shared
    /// reader).
    #[must_use]
    pub fn auth(mut self, auth: ZookeeperAuth) -> Self {
        self.auth.push(auth);
        self
    }

    /// The ACL of every node the backend creates (default [`AclMode::Open`]).
    #[must_use]
    pub fn acl(mut self, acl: AclMode) -> Self {
        self.acl = acl;
        self
    }

    /// Connects over TLS to every host (they must be the servers' `secureClientPort`s).
    #[must_use]
    pub fn tls(mut self, tls: ZookeeperTls) -> Self {
        self.tls = Some(tls);
        self
    }

    /// Authenticates every client of the backend with SASL (see [`ZookeeperSasl`]).
    #[must_use]
    pub fn sasl(mut self, sasl: ZookeeperSasl) -> Self {
        self.sasl = Some(sasl);
        self
    }

    /// The configured root path.
    pub fn root_path(&self) -> &str {
        &self.root
    }

    /// The ACL mode in effect: [`AclMode::Auto`] resolved against the auth info and SASL of
    /// these options.
    pub fn effective_acl(&self) -> AclMode {
        self.acl.clone().resolve(!self.auth.is_empty() || self.sasl.is_some())
    }

    /// Checks every value.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule it breaks.
    pub fn validate(&self) -> Result<()> {
        validate_root(&self.root)?;
        if self.connection_timeout.is_zero() {
            return Err(Error::config("ZooKeeper connection_timeout must be > 0"));
        }
        if self.query_timeout.is_zero() {
            return Err(Error::config("ZooKeeper query_timeout must be > 0"));
        }
        if self.acl == AclMode::CreatorAll && self.auth.is_empty() && self.sasl.is_none() {
            return Err(Error::config(
                "ZooKeeper ACL mode creator-all needs auth info (ZookeeperAuth::digest, SIMBA_ZOOKEEPER_AUTH=digest:user:\
                 password or zookeeper://user:password@host) or SASL (ZookeeperSasl, SIMBA_ZOOKEEPER_SASL): without an \
                 authenticated identity the server rejects the ACL",
            ));
        }
        if let AclMode::Custom(list) = &self.acl {
            if list.is_empty() {
                return Err(Error::config(
                    "ZooKeeper custom ACL list is empty: give at least one entry, e.g. world:anyone:cdrwa",
                ));
            }
        }
        Ok(())
    }
}

/// Validates a ZooKeeper root path.
pub(crate) fn validate_root(root: &str) -> Result<()> {
    let rule = "the ZooKeeper root must be an absolute path like /simba: starts with '/', no trailing '/', \
                no empty, '.' or '..' segments, no control characters, not under /zookeeper";
    let bad = |why: &str| Err(Error::config(format!("invalid ZooKeeper root {root:?}: {why}; {rule}")));
    if root == "/" {
        return Ok(());
    }
    if !root.starts_with('/') {
        return bad("not absolute");
    }
    if root.ends_with('/') {
        return bad("trailing '/'");
    }
    if root
        .chars()
        .any(|c| c.is_control() || ('\u{e000}'..='\u{f8ff}').contains(&c) || ('\u{fff0}'..='\u{ffff}').contains(&c))
    {
        return bad("forbidden character");
    }
    for seg in root[1..].split('/') {
        if seg.is_empty() || seg == "." || seg == ".." {
            return bad("empty, '.' or '..' segment");
        }
    }
    if root == "/zookeeper" || root.starts_with("/zookeeper/") {
        return bad("/zookeeper is reserved by the server");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots() {
        for ok in ["/", "/simba", "/a/b.c/d-e", "/simba-test/x"] {
            assert!(validate_root(ok).is_ok(), "{ok}");
        }
        for bad in ["", "simba", "/simba/", "//a", "/a//b", "/a/./b", "/a/..", "/zookeeper", "/zookeeper/x", "/a\0b"] {
            let e = validate_root(bad).unwrap_err();
            assert!(e.to_string().contains("ZooKeeper root"), "{e}");
        }
    }

    #[test]
    fn auth_is_redacted_and_validated() {
        let a = ZookeeperAuth::digest("simba", "secret").unwrap();
        let dbg = format!("{:?}", ZookeeperOptions::default().auth(a.clone()));
        assert!(!dbg.contains("secret"), "{dbg}");
        assert!(dbg.contains("digest"), "{dbg}");
        assert_eq!(ZookeeperAuth::parse("digest:simba:secret").unwrap(), a);
        let e = ZookeeperAuth::parse("nocolon").unwrap_err();
        assert!(!e.to_string().contains("nocolon"));
        assert!(ZookeeperAuth::digest("a:b", "x").is_err());
        assert!(ZookeeperAuth::new("di gest", b"x".to_vec()).is_err());
    }

    #[test]
    fn creator_all_needs_auth() {
        let o = ZookeeperOptions::default().acl(AclMode::CreatorAll);
        assert!(o.validate().unwrap_err().to_string().contains("creator-all"));
        let o = o.auth(ZookeeperAuth::digest("u", "p").unwrap());
        assert!(o.validate().is_ok());
        assert!(ZookeeperOptions::default().query_timeout(Duration::ZERO).validate().is_err());
    }
}
