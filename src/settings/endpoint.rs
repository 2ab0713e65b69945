//! The generic splitter of backend URLs, `scheme://[user[:password]@]host[:port][,host…][/path][?query]`:
//! the scheme chooses the backend; each backend's own `config` module applies its rules to the
//! parts (which hosts, what the path and the query mean).

use std::fmt;

use super::kind::BackendKind;
use super::redact::{redact_url, sensitive_key, Secret};
use super::values::shorten;
use crate::error::{Error, Result};

/// One host of a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HostPort {
    pub(crate) host: String,
    pub(crate) port: Option<u16>,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let bracket = self.host.contains(':') && !self.host.starts_with('[');
        match (bracket, self.port) {
            (true, Some(p)) => write!(f, "[{}]:{p}", self.host),
            (true, None) => write!(f, "[{}]", self.host),
            (false, Some(p)) => write!(f, "{}:{p}", self.host),
            (false, None) => f.write_str(&self.host),
        }
    }
}

/// A parsed backend URL. `raw` holds the original text (with secrets) for the drivers.
#[derive(Clone)]
pub(crate) struct Endpoint {
    pub(crate) kind: BackendKind,
    /// The scheme as written, lower-cased (e.g. `rediss+cluster`).
    #[cfg_attr(not(feature = "redis"), allow(dead_code))]
    pub(crate) scheme: String,
    pub(crate) raw: Secret,
    /// The userinfo exactly as written (percent-encoded), for rebuilding per-host URLs.
    pub(crate) raw_userinfo: Option<Secret>,
    pub(crate) hosts: Vec<HostPort>,
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
    pub(crate) username: Option<String>,
    pub(crate) password: Option<Secret>,
    /// Percent-decoded path without the leading `/` of the authority ("" when none).
    pub(crate) path: String,
    /// The query as written (percent-encoded, without the `?`), when there is one.
    #[cfg_attr(not(feature = "zookeeper"), allow(dead_code))]
    pub(crate) query: Option<String>,
    pub(crate) redacted: String,
}

impl Endpoint {
    /// The secrets of the URL: its password (decoded and as written) and the values of sensitive
    /// query parameters (decoded and as written).
    pub(crate) fn secrets(&self) -> Vec<String> {
        let mut s = Vec::new();
        if let Some(p) = &self.password {
            s.push(p.0.clone());
        }
        if let Some(u) = &self.raw_userinfo {
            if let Some((_, p)) = u.0.split_once(':') {
                s.push(p.to_string());
            }
        }
        if let Some(q) = self.raw.0.split_once('?').map(|(_, q)| q) {
            for kv in q.split('&') {
                if let Some((k, v)) = kv.split_once('=') {
                    if sensitive_key(k) {
                        s.push(v.to_string());
                        s.push(percent_decode(v));
                    }
                }
            }
        }
        s.retain(|x| !x.is_empty());
        s
    }
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted)
    }
}

/// An `InvalidConfig` error for the URL shown as `redacted`, saying `why` and what is expected.
pub(crate) fn url_error(redacted: &str, why: impl fmt::Display) -> Error {
    Error::config(format!(
        "invalid backend URL {redacted}: {why}; expected e.g. postgres://user@host:5432/db, mysql://user@host:3306/db, \
         redis://host:6379, redis+cluster://h1:7000,h2:7001, zookeeper://h1:2181,h2:2181/root, etcd://h1:2379,h2:2379/prefix or memory://"
    ))
}

/// `s` with its percent escapes decoded (`+` stays `+`).
pub(crate) fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

fn parse_host(host: &str, redacted: &str) -> Result<HostPort> {
    if host.is_empty() {
        return Err(url_error(redacted, "empty host"));
    }
    let u =
        url::Url::parse(&format!("simba://{host}")).map_err(|e| url_error(redacted, format!("host {host:?}: {e}")))?;
    let h = u.host_str().unwrap_or_default();
    if h.is_empty() {
        return Err(url_error(redacted, format!("host {host:?} has no host name")));
    }
    if !u.username().is_empty() || u.password().is_some() || !matches!(u.path(), "" | "/") {
        return Err(url_error(redacted, format!("host {host:?} is not host[:port]")));
    }
    let h = h.trim_start_matches('[').trim_end_matches(']').to_string();
    Ok(HostPort { host: h, port: u.port() })
}

#[cfg(test)]
thread_local! {
    /// How many times this thread called [`parse_endpoint`] (tests check that a URL is parsed once).
    pub(crate) static PARSES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Splits a backend URL (see the module docs for the forms), checking only what every backend
/// shares; the backend's own parser checks the rest.
pub(crate) fn parse_endpoint(raw: &str) -> Result<Endpoint> {
    #[cfg(test)]
    PARSES.with(|n| n.set(n.get() + 1));
    let raw = raw.trim();
    let redacted = redact_url(raw);
    let Some((scheme, rest)) = raw.split_once("://") else {
        return Err(url_error(&redacted, "missing scheme:// (the backend is never guessed)"));
    };
    let Some(kind) = BackendKind::from_scheme(scheme) else {
        return Err(url_error(&redacted, format!("unknown scheme {:?}", shorten(scheme))));
    };
    if rest.contains('#') {
        return Err(url_error(&redacted, "a fragment (#…) is not allowed"));
    }
    if kind == BackendKind::Memory {
        if !rest.is_empty() && rest != "/" {
            return Err(url_error(&redacted, "memory:// takes nothing after the scheme"));
        }
        return Ok(Endpoint {
            kind,
            scheme: scheme.to_ascii_lowercase(),
            raw: Secret(raw.to_string()),
            raw_userinfo: None,
            hosts: Vec::new(),
            username: None,
            password: None,
            path: String::new(),
            query: None,
            redacted,
        });
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(at) => (Some(&authority[..at]), &authority[at + 1..]),
        None => (None, authority),
    };
    if userinfo.is_none() && tail.contains('@') {
        // The authority ends at the first '/' or '?', so `user:pa/ss@host` has its '@' here: what
        // looks like a host, path or query would hold part of the password. Show none of it.
        return Err(url_error(
            &redacted,
            "an '@' after the host: percent-encode '/', '?', '#' and '@' in the user name and password \
             (%2F, %3F, %23, %40), and '@' anywhere else",
        ));
    }
    let (username, password) = match userinfo {
        None => (None, None),
        Some(ui) => {
            let (u, p) = match ui.split_once(':') {
                Some((u, p)) => (u, Some(p)),
                None => (ui, None),
            };
            let user = percent_decode(u);
            (Some(user).filter(|u| !u.is_empty()), p.map(|p| Secret(percent_decode(p))))
        }
    };
    let hosts = hostlist.split(',').map(|h| parse_host(h, &redacted)).collect::<Result<Vec<_>>>()?;
    // The query belongs to the backend (its own options parse it: TLS files, libpq options).
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q.to_string())),
        None => (tail, None),
    };
    let path = percent_decode(path.strip_prefix('/').unwrap_or(path));
    // Each backend's own rules are in its `config` module.
    Ok(Endpoint {
        kind,
        scheme: scheme.to_ascii_lowercase(),
        raw: Secret(raw.to_string()),
        raw_userinfo: userinfo.map(|u| Secret(u.to_string())),
        hosts,
        username,
        password,
        path,
        query,
        redacted,
    })
}
