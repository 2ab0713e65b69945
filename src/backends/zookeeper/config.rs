//! Where the ZooKeeper backend's settings come from: the `zookeeper://` URL (hosts, root, digest
//! auth in the user info, TLS files in the query), the `SIMBA_ZOOKEEPER_*` variables
//! ([`ENV_VARS`]) and [`crate::ConfigBuilder`]'s setters (kept in [`ZookeeperSettings`]). Both
//! [`crate::Config`] (through [`ZookeeperConfig`]) and
//! [`ZookeeperBackend::from_url`](super::ZookeeperBackend::from_url) parse URLs here, so a URL
//! means the same everywhere. The options themselves are [`ZookeeperOptions`].

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::options::{AclMode, ZookeeperAuth, ZookeeperOptions, ZookeeperSasl, ZookeeperTls};
use crate::backend::LeaseBackend;
use crate::backends::registry::{BackendConfig, Knobs, ParsedBackend};
use crate::error::{Error, Result};
use crate::settings::endpoint::{parse_endpoint, url_error, Endpoint};
use crate::settings::kind::{BackendKind, Family};
use crate::settings::redact::Secret;
use crate::settings::tls_query::TlsParams;
use crate::settings::values::parse_duration;

/// Default ZooKeeper port, used for URL hosts written without one.
pub const DEFAULT_PORT: u16 = 2181;

/// The `SIMBA_ZOOKEEPER_*` variables ([`Config::from_env`](crate::Config::from_env) reads them).
pub(crate) const ENV_VARS: &[&str] = &[
    "SIMBA_ZOOKEEPER_ROOT",
    "SIMBA_ZOOKEEPER_AUTH",
    "SIMBA_ZOOKEEPER_ACL",
    "SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT",
    "SIMBA_ZOOKEEPER_TLS_CA",
    "SIMBA_ZOOKEEPER_TLS_CERT",
    "SIMBA_ZOOKEEPER_TLS_KEY",
    "SIMBA_ZOOKEEPER_SASL",
];

/// The query parameters a `zookeeper://` URL may carry: the TLS files, as percent-encoded paths.
const URL_QUERY_KEYS: [&str; 3] = ["tls_ca", "tls_cert", "tls_key"];

/// How the TLS files are named in messages: where the CA and the certificate/key pair were set.
struct TlsNames {
    ca: &'static str,
    pair: &'static str,
}

const URL_TLS_NAMES: TlsNames = TlsNames { ca: "URL parameter tls_ca", pair: "URL parameters tls_cert and tls_key" };
const ENV_TLS_NAMES: TlsNames =
    TlsNames { ca: "SIMBA_ZOOKEEPER_TLS_CA", pair: "SIMBA_ZOOKEEPER_TLS_CERT and SIMBA_ZOOKEEPER_TLS_KEY" };

/// The settings of the ZooKeeper backend as given to [`crate::ConfigBuilder`] (variables and
/// setters), before they are checked: the setters cannot fail, so values are checked (and TLS
/// files read) by [`ZookeeperSettings::resolve`], when the configuration is built. Secrets are
/// never printed.
#[derive(Clone, Default)]
pub(crate) struct ZookeeperSettings {
    pub(crate) root: Option<String>,
    /// Scheme and credentials.
    pub(crate) auth: Option<(String, Secret)>,
    pub(crate) acl: Option<AclMode>,
    pub(crate) connection_timeout: Option<Duration>,
    /// CA, client certificate, client key.
    pub(crate) tls: [Option<PathBuf>; 3],
    /// SASL DIGEST-MD5 user and password.
    pub(crate) sasl: Option<(String, Secret)>,
}

impl fmt::Debug for ZookeeperSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZookeeperSettings")
            .field("root", &self.root)
            .field("auth", &self.auth.as_ref().map(|(scheme, _)| format!("{scheme}:<redacted>")))
            .field("acl", &self.acl)
            .field("connection_timeout", &self.connection_timeout)
            .field("tls", &self.tls)
            .field("sasl", &self.sasl.as_ref().map(|(user, _)| format!("DIGEST-MD5 {user}:<redacted>")))
            .finish()
    }
}

impl ZookeeperSettings {
    /// Reads the `SIMBA_ZOOKEEPER_*` variables through `get` (which yields only non-empty values),
    /// telling `seen` the name of each one that is set. Values are checked as far as they can be
    /// without the rest of the configuration.
    ///
    /// # Errors
    /// `InvalidConfig` naming the variable and the rule (never a secret).
    pub(crate) fn read_vars(
        mut self,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<ZookeeperSettings> {
        let mut var = |name: &'static str| {
            let v = get(name);
            if v.is_some() {
                seen(name);
            }
            v
        };
        if let Some(v) = var("SIMBA_ZOOKEEPER_ROOT") {
            self.root = Some(v);
        }
        if let Some(v) = var("SIMBA_ZOOKEEPER_AUTH") {
            // Without a ':' the value may be just a password: never echo it as a scheme.
            let Some((scheme, creds)) = v.split_once(':') else {
                return Err(Error::config(
                    "invalid SIMBA_ZOOKEEPER_AUTH (the value is not shown): expected scheme:credentials, e.g. \
                     digest:user:password",
                ));
            };
            ZookeeperAuth::new(scheme, creds.as_bytes())
                .map_err(|e| Error::config(format!("SIMBA_ZOOKEEPER_AUTH: {e}")))?;
            self.auth = Some((scheme.to_string(), Secret(creds.to_string())));
        }
        if let Some(v) = var("SIMBA_ZOOKEEPER_ACL") {
            let acl = v.parse::<AclMode>().map_err(|e| Error::config(format!("SIMBA_ZOOKEEPER_ACL: {e}")))?;
            self.acl = Some(acl);
        }
        if let Some(v) = var("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT") {
            self.connection_timeout = Some(parse_duration("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", &v)?);
        }
        for (i, name) in
            ["SIMBA_ZOOKEEPER_TLS_CA", "SIMBA_ZOOKEEPER_TLS_CERT", "SIMBA_ZOOKEEPER_TLS_KEY"].into_iter().enumerate()
        {
            if let Some(v) = var(name) {
                self.tls[i] = Some(PathBuf::from(v));
            }
        }
        if let Some(v) = var("SIMBA_ZOOKEEPER_SASL") {
            let Some((user, password)) = v.split_once(':') else {
                return Err(Error::config(
                    "SIMBA_ZOOKEEPER_SASL: expected user:password (SASL DIGEST-MD5, the server's JAAS user)",
                ));
            };
            self.sasl = Some((user.to_string(), Secret(password.to_string())));
        }
        Ok(self)
    }

    /// The secrets of these settings: the SASL password, the auth credentials and their part
    /// after the first `:` (a digest password).
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut s = Vec::new();
        if let Some((_, p)) = &self.sasl {
            s.push(p.0.clone());
        }
        if let Some((_, c)) = &self.auth {
            s.push(c.0.clone());
            if let Some((_, p)) = c.0.split_once(':') {
                s.push(p.to_string());
            }
        }
        s
    }

    /// The connect string and the options of the URL `ep` with these settings, each value checked
    /// and the TLS files read (no network I/O). `query_timeout` is the sessions' query timeout.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule: a value set both in the URL and in the
    /// settings (root with different values, auth, TLS), an invalid root, auth, ACL, SASL user or
    /// timeout, a TLS file that cannot be read or parsed, creator-all without an identity.
    pub(crate) fn resolve(&self, ep: &Endpoint, query_timeout: Duration) -> Result<(String, ZookeeperOptions)> {
        let url = ZookeeperUrl::from_endpoint(ep)?;
        let mut o = ZookeeperOptions::default().query_timeout(query_timeout).acl(AclMode::Auto);
        if let Some(d) = self.connection_timeout {
            if d.is_zero() {
                return Err(Error::config(
                    "zookeeper_connection_timeout must be > 0 (SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT, e.g. 10s)",
                ));
            }
            o = o.connection_timeout(d);
        }
        if let (Some(u), Some(s)) = (&url.root, &self.root) {
            if u != s {
                return Err(Error::config(format!(
                    "the ZooKeeper root is set twice with different values: {u:?} in the URL and {s:?} in \
                     SIMBA_ZOOKEEPER_ROOT/zookeeper_root; keep one"
                )));
            }
        }
        if let Some(root) = &self.root {
            o = o.root(root.clone());
        }
        if let Some((scheme, creds)) = &self.auth {
            o = o.auth(ZookeeperAuth::new(scheme.clone(), creds.0.as_bytes())?);
        }
        if let Some(acl) = &self.acl {
            o = o.acl(acl.clone());
        }
        if let Some((user, password)) = &self.sasl {
            o = o.sasl(ZookeeperSasl::digest_md5(user, &password.0)?);
        }
        let [ca, cert, key] = self.tls.clone();
        if let Some(tls) = tls_from_files(ca, cert, key, &ENV_TLS_NAMES)? {
            o = o.tls(tls);
        }
        let hosts = url.hosts.clone();
        let o = url.apply(o)?;
        o.validate()?;
        Ok((hosts, o))
    }
}

/// The ZooKeeper backend's part of the configuration ([`BackendConfig`]): `zookeeper://` and
/// `zk://` URLs, [`ENV_VARS`], the settings of [`ZookeeperSettings`].
pub(crate) struct ZookeeperConfig;

impl BackendConfig for ZookeeperConfig {
    fn kinds(&self) -> &'static [BackendKind] {
        &[BackendKind::Zookeeper]
    }

    fn family(&self) -> Family {
        Family::Zookeeper
    }

    fn env_vars(&self) -> &'static [&'static str] {
        ENV_VARS
    }

    fn read_vars(
        &self,
        knobs: &mut Knobs,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<()> {
        knobs.zookeeper = knobs.zookeeper.clone().read_vars(get, seen)?;
        Ok(())
    }

    fn parse(
        &self,
        _kind: BackendKind,
        ep: &Endpoint,
        knobs: &Knobs,
        query_timeout: Duration,
    ) -> Result<Arc<dyn ParsedBackend>> {
        let (hosts, options) = knobs.zookeeper.resolve(ep, query_timeout)?;
        Ok(Arc::new(ZookeeperParsed { hosts, options }))
    }

    fn secrets(&self, knobs: &Knobs) -> Vec<String> {
        knobs.zookeeper.secrets()
    }
}

/// The ZooKeeper settings of a [`crate::Config`]: the connect string and the options, as parsed
/// and checked when the configuration was built (what the backend connects with).
pub(crate) struct ZookeeperParsed {
    hosts: String,
    pub(crate) options: ZookeeperOptions,
}

impl ParsedBackend for ZookeeperParsed {
    fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        Ok(Arc::new(super::ZookeeperBackend::connect(&self.hosts, self.options.clone())?))
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("zookeeper_hosts", &self.hosts).field("zookeeper", &self.options);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

/// A parsed `zookeeper://` (or `zk://`) URL.
#[derive(Debug, Clone)]
pub(crate) struct ZookeeperUrl {
    /// `host:port[,host:port…]`, each host with its port (default [`DEFAULT_PORT`]).
    pub(crate) hosts: String,
    /// The path, when there is one (`/` alone is none).
    pub(crate) root: Option<String>,
    /// Digest auth from `user:password@`.
    auth: Option<ZookeeperAuth>,
    /// TLS from `?tls_ca=…[&tls_cert=…&tls_key=…]`, its files read and checked.
    pub(crate) tls: Option<ZookeeperTls>,
}

impl ZookeeperUrl {
    /// Parses `zookeeper://[user:password@]h1[:port][,h2[:port]…][/root][?tls_ca=…&tls_cert=…&tls_key=…]`.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed URL, a user without a password, an unknown or repeated
    /// query parameter, or a TLS file that cannot be read or parsed (naming it).
    pub(crate) fn parse(url: &str) -> Result<ZookeeperUrl> {
        let ep = parse_endpoint(url)?;
        if ep.kind != BackendKind::Zookeeper {
            return Err(Error::config(format!(
                "{} is a {} URL, not a ZooKeeper one: expected zookeeper://host:port[,host:port…][/root]",
                ep.redacted, ep.kind
            )));
        }
        ZookeeperUrl::from_endpoint(&ep)
    }

    fn from_endpoint(ep: &Endpoint) -> Result<ZookeeperUrl> {
        let auth = match (&ep.username, &ep.password) {
            (Some(u), Some(p)) => Some(
                ZookeeperAuth::digest(u, &p.0)
                    .map_err(|_| url_error(&ep.redacted, "the ZooKeeper digest user must be non-empty without ':'"))?,
            ),
            (_, None) if ep.raw_userinfo.is_some() => {
                return Err(url_error(&ep.redacted, "ZooKeeper digest auth needs user:password@"))
            }
            (None, Some(_)) => return Err(url_error(&ep.redacted, "ZooKeeper digest auth needs user:password@")),
            _ => None,
        };
        let hosts: Vec<String> = ep
            .hosts
            .iter()
            .map(|h| {
                let mut h = h.clone();
                h.port = Some(h.port.unwrap_or(DEFAULT_PORT));
                h.to_string()
            })
            .collect();
        let root = Some(format!("/{}", ep.path)).filter(|r| r != "/");
        let tls = tls_from_url_query(ep.query.as_deref().unwrap_or_default())?;
        Ok(ZookeeperUrl { hosts: hosts.join(","), root, auth, tls })
    }

    /// `options` with what the URL sets: its root replaces the options' root; its auth and TLS
    /// are added, and may not be set in the options too.
    ///
    /// # Errors
    /// `InvalidConfig` when auth or TLS is set both in the URL and in `options`.
    pub(crate) fn apply(self, mut options: ZookeeperOptions) -> Result<ZookeeperOptions> {
        if let Some(root) = self.root {
            options = options.root(root);
        }
        if let Some(auth) = self.auth {
            if !options.auth.is_empty() {
                return Err(Error::config(
                    "ZooKeeper auth is set twice: in the URL (user:password@) and in SIMBA_ZOOKEEPER_AUTH, \
                     ConfigBuilder::zookeeper_auth or ZookeeperOptions::auth; keep one",
                ));
            }
            options = options.auth(auth);
        }
        if let Some(tls) = self.tls {
            if options.tls.is_some() {
                return Err(Error::config(
                    "ZooKeeper TLS is set twice: in the URL (tls_ca=…) and in SIMBA_ZOOKEEPER_TLS_CA, \
                     ConfigBuilder::zookeeper_tls_ca or ZookeeperOptions::tls; keep one",
                ));
            }
            options = options.tls(tls);
        }
        Ok(options)
    }
}

/// Parses the query of a `zookeeper://` URL (the text after `?`): `tls_ca=PATH` turns TLS on
/// trusting that CA file, `tls_cert=PATH&tls_key=PATH` add a client certificate. Reads and checks
/// the files. `None` when the query is empty.
///
/// # Errors
/// `InvalidConfig` for an unknown or repeated key, a certificate without its key (or the reverse),
/// a client certificate without `tls_ca`, or a file that cannot be read or parsed (naming it).
fn tls_from_url_query(query: &str) -> Result<Option<ZookeeperTls>> {
    let invalid = |d: String| Error::config(format!("invalid ZooKeeper URL parameter: {d}"));
    let params = TlsParams { names: URL_QUERY_KEYS, normalize: TlsParams::exact, invalid: &invalid };
    let files = params.split(query, &mut |k, _| {
        Err(Error::config(format!(
            "unknown ZooKeeper URL parameter {:?}: expected {}",
            k.chars().take(64).collect::<String>(),
            URL_QUERY_KEYS.join(", ")
        )))
    })?;
    let [ca, cert, key] = files;
    tls_from_files(ca, cert, key, &URL_TLS_NAMES)
}

/// TLS from the PEM files `ca`, `cert`, `key` (read and checked); `None` when none is set.
fn tls_from_files(
    ca: Option<PathBuf>,
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    names: &TlsNames,
) -> Result<Option<ZookeeperTls>> {
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        _ => {
            return Err(Error::config(format!(
                "a ZooKeeper TLS client identity needs both a certificate and a key (both {})",
                names.pair
            )))
        }
    };
    match (ca, identity) {
        (None, None) => Ok(None),
        (None, Some(_)) => Err(Error::config(format!(
            "a ZooKeeper TLS client certificate needs the CA that signs the servers' certificates ({})",
            names.ca
        ))),
        (Some(ca), identity) => {
            let tls = ZookeeperTls::from_ca_file(&ca)?;
            match identity {
                Some((c, k)) => tls.identity_files(c, k).map(Some),
                None => Ok(Some(tls)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() {
        let u = ZookeeperUrl::parse("zookeeper://127.0.0.1:2181,zk2/simba-test").unwrap();
        assert_eq!(u.hosts, "127.0.0.1:2181,zk2:2181");
        assert_eq!(u.root.as_deref(), Some("/simba-test"));
        assert!(u.tls.is_none() && u.auth.is_none());
        let u = ZookeeperUrl::parse("zk://simba:pw@[::1]:2182/").unwrap();
        assert_eq!((u.hosts.as_str(), u.root), ("[::1]:2182", None));
        assert_eq!(u.auth, Some(ZookeeperAuth::digest("simba", "pw").unwrap()));
        // The query holds only the TLS files, checked when parsed.
        let e = ZookeeperUrl::parse("zookeeper://a:1/r?tls_ca=/nonexistent/ca.pem").unwrap_err();
        assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
        let e = ZookeeperUrl::parse("zookeeper://a:1?tls_key=/k.pem").unwrap_err();
        assert!(e.to_string().contains("tls_cert and tls_key"), "{e}");
        for bad in [
            "redis://a:1",
            "zookeeper://",
            "zookeeper://a:x",
            "zookeeper://u@a:1",
            "zookeeper://:p@a:1",
            "zookeeper://a:1?x=1",
        ] {
            let e = ZookeeperUrl::parse(bad).unwrap_err();
            assert!(e.is_invalid_input(), "{bad}: {e}");
            assert!(!e.to_string().contains(":p@"), "{e}");
        }
        for v in ENV_VARS {
            assert!(crate::config::ENV_VARS.contains(v), "{v}");
        }
    }

    #[test]
    fn set_twice() {
        let u = ZookeeperUrl::parse("zookeeper://u:p@a:1").unwrap();
        let e = u.apply(ZookeeperOptions::default().auth(ZookeeperAuth::digest("v", "q").unwrap())).unwrap_err();
        assert!(e.to_string().contains("auth is set twice"), "{e}");
        let u = ZookeeperUrl::parse("zookeeper://a:1/x").unwrap();
        assert_eq!(u.apply(ZookeeperOptions::default().root("/y")).unwrap().root_path(), "/x");
    }
}
