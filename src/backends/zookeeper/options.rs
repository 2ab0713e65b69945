//! Configuration of the ZooKeeper backend: [`ZookeeperOptions`], [`ZookeeperAuth`], [`AclMode`].

use std::fmt;
use std::time::Duration;

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
    /// `InvalidConfig` when the scheme is empty or not plain ASCII letters/digits.
    pub fn new(scheme: impl Into<String>, credentials: impl Into<Vec<u8>>) -> Result<ZookeeperAuth> {
        let scheme = scheme.into();
        if scheme.is_empty() || !scheme.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(Error::config(format!(
                "invalid ZooKeeper auth scheme {scheme:?}: expected ASCII letters and digits, e.g. \"digest\""
            )));
        }
        Ok(ZookeeperAuth { scheme, credentials: credentials.into() })
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AclMode {
    /// `OPEN_ACL_UNSAFE` (`world:anyone` with all permissions): any client that reaches the
    /// ensemble can delete or pre-create lease nodes and forge members. The default.
    #[default]
    Open,
    /// `CREATOR_ALL_ACL` (`auth::` with all permissions): only clients authenticated with the same
    /// identity (e.g. the same digest credentials) can read, create or delete. Needs auth info.
    CreatorAll,
}

/// Options of [`ZookeeperBackend`](super::ZookeeperBackend), built with chained setters from
/// [`ZookeeperOptions::default`] and validated by [`ZookeeperBackend::connect`](super::ZookeeperBackend::connect).
///
/// TLS and SASL are not available: the `zookeeper-client` crate supports them behind its `tls` and
/// `sasl` features, which this crate does not enable (see `docs/backends/zookeeper.md`).
#[derive(Clone, PartialEq, Eq)]
pub struct ZookeeperOptions {
    pub(crate) root: String,
    pub(crate) connection_timeout: Duration,
    pub(crate) query_timeout: Duration,
    pub(crate) auth: Vec<ZookeeperAuth>,
    pub(crate) acl: AclMode,
}

impl Default for ZookeeperOptions {
    fn default() -> Self {
        ZookeeperOptions {
            root: DEFAULT_ROOT.to_string(),
            connection_timeout: DEFAULT_CONNECTION_TIMEOUT,
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            auth: Vec::new(),
            acl: AclMode::Open,
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

    /// The configured root path.
    pub fn root_path(&self) -> &str {
        &self.root
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
        if self.acl == AclMode::CreatorAll && self.auth.is_empty() {
            return Err(Error::config(
                "ZooKeeper ACL mode creator-all needs auth info (e.g. ZookeeperAuth::digest): \
                 without an authenticated identity the server rejects the ACL",
            ));
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
