//! Where the etcd backend's settings come from for [`crate::Config`]: the `etcd://`/`etcds://`
//! URL (members, prefix, user in the user info, TLS files in the query; parsed by
//! [`EtcdUrl`](super::options::EtcdUrl), as [`EtcdBackend::from_url`](super::EtcdBackend::from_url)
//! does) and the `SIMBA_ETCD_*` variables ([`ENV_VARS`]).

use std::any::Any;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::options::{EtcdOptions, EtcdTls, EtcdUrl};
use crate::backend::LeaseBackend;
use crate::backends::registry::{BackendConfig, Knobs, ParsedBackend};
use crate::error::{Error, Result};
use crate::settings::endpoint::Endpoint;
use crate::settings::kind::{BackendKind, Family};
use crate::settings::redact::Secret;
use crate::settings::values::parse_duration;

/// The `SIMBA_ETCD_*` variables ([`Config::from_env`](crate::Config::from_env) reads them).
pub(crate) const ENV_VARS: &[&str] = &[
    "SIMBA_ETCD_PREFIX",
    "SIMBA_ETCD_CONNECTION_TIMEOUT",
    "SIMBA_ETCD_USER",
    "SIMBA_ETCD_PASSWORD",
    "SIMBA_ETCD_TLS_CA",
    "SIMBA_ETCD_TLS_CERT",
    "SIMBA_ETCD_TLS_KEY",
];

/// The etcd settings as read from the variables, checked when the configuration is built.
#[derive(Clone, Default)]
pub(crate) struct EtcdSettings {
    pub(crate) prefix: Option<String>,
    pub(crate) connection_timeout: Option<Duration>,
    pub(crate) user: Option<String>,
    pub(crate) password: Option<Secret>,
    /// CA, client certificate, client key (file paths, kept as given: a path from the builder
    /// need not be UTF-8).
    pub(crate) tls: [Option<PathBuf>; 3],
}

impl fmt::Debug for EtcdSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdSettings")
            .field("prefix", &self.prefix)
            .field("connection_timeout", &self.connection_timeout)
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("tls", &self.tls)
            .finish()
    }
}

impl EtcdSettings {
    fn read_vars(mut self, get: &dyn Fn(&str) -> Option<String>, seen: &mut dyn FnMut(&'static str)) -> Result<Self> {
        let mut var = |name: &'static str| {
            let v = get(name);
            if v.is_some() {
                seen(name);
            }
            v
        };
        if let Some(v) = var("SIMBA_ETCD_PREFIX") {
            self.prefix = Some(v);
        }
        if let Some(v) = var("SIMBA_ETCD_CONNECTION_TIMEOUT") {
            self.connection_timeout = Some(parse_duration("SIMBA_ETCD_CONNECTION_TIMEOUT", &v)?);
        }
        if let Some(v) = var("SIMBA_ETCD_USER") {
            self.user = Some(v);
        }
        if let Some(v) = var("SIMBA_ETCD_PASSWORD") {
            self.password = Some(Secret(v));
        }
        for (i, name) in ["SIMBA_ETCD_TLS_CA", "SIMBA_ETCD_TLS_CERT", "SIMBA_ETCD_TLS_KEY"].into_iter().enumerate() {
            if let Some(v) = var(name) {
                self.tls[i] = Some(PathBuf::from(v));
            }
        }
        Ok(self)
    }

    /// The members and options of the URL `ep` with these settings (no network I/O).
    fn resolve(&self, ep: &Endpoint, query_timeout: Duration) -> Result<(Vec<String>, EtcdOptions)> {
        let url = EtcdUrl::from_endpoint(ep)?;
        let mut o = EtcdOptions::default().query_timeout(query_timeout);
        if let Some(d) = self.connection_timeout {
            o = o.connection_timeout(d);
        }
        if let (Some(u), Some(s)) = (&url.prefix, &self.prefix) {
            if u != s {
                return Err(Error::config(format!(
                    "the etcd prefix is set twice with different values: {u:?} in the URL and {s:?} in \
                     SIMBA_ETCD_PREFIX/etcd_prefix; keep one"
                )));
            }
        }
        if let Some(p) = &self.prefix {
            o = o.prefix(p.clone());
        }
        match (&self.user, &self.password) {
            (Some(u), Some(p)) => o = o.user(u.clone(), p.0.clone()),
            (None, None) => {}
            _ => return Err(Error::config("SIMBA_ETCD_USER and SIMBA_ETCD_PASSWORD go together: set both or neither")),
        }
        let [ca, cert, key] = &self.tls;
        if ca.is_some() || cert.is_some() || key.is_some() {
            if !url.tls {
                return Err(Error::config("SIMBA_ETCD_TLS_* (or etcd_tls_ca/etcd_tls_identity) are set for an etcd:// URL: use etcds:// for TLS"));
            }
            let mut tls = match ca {
                Some(ca) => EtcdTls::from_ca_file(ca)?,
                None => EtcdTls::system_roots(),
            };
            match (cert, key) {
                (Some(c), Some(k)) => tls = tls.identity_files(c, k)?,
                (None, None) => {}
                _ => {
                    return Err(Error::config(
                        "SIMBA_ETCD_TLS_CERT and SIMBA_ETCD_TLS_KEY go together: set both or neither",
                    ))
                }
            }
            o = o.tls(tls);
        }
        let o = url.apply(o)?;
        o.validate()?;
        Ok((url.members, o))
    }
}

/// The etcd backend's part of the configuration ([`BackendConfig`]).
pub(crate) struct EtcdConfig;

impl BackendConfig for EtcdConfig {
    fn kinds(&self) -> &'static [BackendKind] {
        &[BackendKind::Etcd]
    }

    fn family(&self) -> Family {
        Family::Etcd
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
        knobs.etcd = knobs.etcd.clone().read_vars(get, seen)?;
        Ok(())
    }

    fn secrets(&self, knobs: &Knobs) -> Vec<String> {
        knobs.etcd.password.iter().map(|p| p.0.clone()).collect()
    }

    fn parse(
        &self,
        _kind: BackendKind,
        ep: &Endpoint,
        knobs: &Knobs,
        query_timeout: Duration,
    ) -> Result<Arc<dyn ParsedBackend>> {
        let (members, options) = knobs.etcd.resolve(ep, query_timeout)?;
        Ok(Arc::new(EtcdParsed { members, options }))
    }
}

/// The etcd settings of a [`crate::Config`], parsed and checked.
pub(crate) struct EtcdParsed {
    pub(crate) members: Vec<String>,
    pub(crate) options: EtcdOptions,
}

impl ParsedBackend for EtcdParsed {
    fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        let members: Vec<&str> = self.members.iter().map(String::as_str).collect();
        Ok(Arc::new(super::EtcdBackend::connect(&members, self.options.clone())?))
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("etcd_members", &self.members).field("etcd", &self.options);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    /// The TLS files given through the builder reach the open calls as given: names that are not
    /// UTF-8 (a byte 0xff) are read, not replaced by U+FFFD (names where no file is).
    #[cfg(unix)]
    #[test]
    fn builder_tls_paths_reach_the_open_calls_unchanged() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;

        let dir = std::env::temp_dir().join(format!("simba-etcd-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = |stem: &str, pem: &str| {
            let path = dir.join(OsStr::from_bytes(&[stem.as_bytes(), b"-\xff.pem"].concat()));
            std::fs::write(&path, format!("-----BEGIN {pem}-----\n{stem}\n-----END {pem}-----\n")).unwrap();
            assert!(!std::path::Path::new(&*path.to_string_lossy()).exists(), "no file at the lossy name");
            path
        };
        let (ca, cert, key) = (file("ca", "CERTIFICATE"), file("cert", "CERTIFICATE"), file("key", "PRIVATE KEY"));
        let built = crate::Config::builder()
            .url("etcds://127.0.0.1:2379/p")
            .etcd_tls_ca(&ca)
            .etcd_tls_identity(&cert, &key)
            .build();
        std::fs::remove_dir_all(&dir).ok();
        let config = built.unwrap_or_else(|e| panic!("the files are read: {e}"));
        let tls = config.etcd_options().and_then(|o| o.tls.as_ref()).expect("TLS options");
        assert!(tls.ca_pem.as_deref().is_some_and(|p| p.contains("\nca\n")), "{tls:?}");
        let (c, k) = tls.identity.as_ref().expect("a client identity");
        assert!(c.contains("\ncert\n") && k.contains("\nkey\n"), "{tls:?}");
    }
}
