//! Redaction: the one place that hides secrets in URLs and messages.

use std::fmt;

use super::values::shorten;

/// A string that is never printed.
#[derive(Clone, PartialEq, Eq, Default)]
pub(crate) struct Secret(pub(crate) String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("\"<redacted>\"")
    }
}

/// The TLS file parameters of every backend's URL: they name files, not secrets.
#[rustfmt::skip]
const FILE_KEYS: [&str; 12] = [
    "sslrootcert", "sslcert", "sslkey", // PostgreSQL (libpq)
    "ssl-ca", "ssl-cert", "ssl-key",    // MySQL
    "ca", "cert", "key",                // Redis
    "tls_ca", "tls_cert", "tls_key",    // ZooKeeper
];

/// Query keys whose values are hidden in redacted URLs. The TLS file parameters
/// ([`FILE_KEYS`]: `sslkey`, `ssl-key`, `key`, `tls_key`, …) name files, not secrets: they stay
/// visible, so errors about those files can name them (`sslpassword` is hidden).
pub(crate) fn sensitive_key(key: &str) -> bool {
    let k = key.to_ascii_lowercase();
    if FILE_KEYS.contains(&k.as_str()) {
        return false;
    }
    ["pass", "secret", "token", "auth", "key", "credential", "cert"].iter().any(|s| k.contains(s))
}

/// `raw` with its secrets replaced by `***`: the password of the URL's userinfo, the values of
/// sensitive query parameters (`password`, `sslpassword`, `token`, …) and, in a libpq-style
/// `key=value` list, the values of sensitive keys. Works on text that is not a valid URL too
/// (best effort, erring on hiding too much): the userinfo ends at the *last* `@`, so a password
/// with an unencoded `/`, `?` or `@` is still hidden, and text without `://` shows only a
/// scheme-like prefix. This is the one redaction helper of the crate: every backend, the
/// configuration and the CLI show URLs through it.
pub fn redact_url(raw: &str) -> String {
    let is_scheme = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    // "…://…" is a URL unless what precedes "://" is a key=value list (an odd value).
    let url = raw.split_once("://").filter(|(s, _)| !s.contains(|c: char| c == '=' || c.is_whitespace()));
    let Some((scheme, rest)) = url else {
        if raw.split_whitespace().next().is_some_and(|t| t.contains('=')) {
            return redact_key_values(raw);
        }
        // Without "://" there is no userinfo to find; show only a scheme-like prefix.
        return match raw.split_once(':') {
            Some((s, _)) if is_scheme(s) => format!("{}:…", shorten(s)),
            _ => "<unparsable URL>".to_string(),
        };
    };
    // Up to the last '@' is user info when a ':' comes before any '/', '?' or '#' (everything
    // after that ':' is hidden, so an unencoded '/', '?', '#' or '@' in a password is too) or
    // when it is a plain user name; otherwise the '@' belongs to the path or query (whose
    // sensitive values are hidden below).
    let (userinfo, rest) = match rest.rfind('@').map(|at| rest.split_at(at)) {
        Some((userinfo, hosts)) => {
            let delim = userinfo.find(['/', '?', '#']);
            match userinfo.split_once(':') {
                Some((user, _)) if delim.is_none_or(|d| user.len() < d) => (format!("{user}:***"), hosts),
                None if delim.is_none() => (userinfo.to_string(), hosts),
                _ => (String::new(), rest),
            }
        }
        None => (String::new(), rest),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (hosts, tail) = rest.split_at(end);
    let (path, query) = match tail.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (tail, None),
    };
    let path = path.split('#').next().unwrap_or_default();
    let mut out = format!("{scheme}://{userinfo}{hosts}{path}");
    if let Some(q) = query {
        let q = q.split('#').next().unwrap_or_default();
        let parts: Vec<String> = q
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if sensitive_key(k) => format!("{k}=***"),
                _ => kv.to_string(),
            })
            .collect();
        out.push('?');
        out.push_str(&parts.join("&"));
    }
    out
}

/// A libpq-style `key=value key2='quoted value'` list with the values of sensitive keys hidden
/// (all of a quoted value, and, when a quote is not closed, everything after it).
fn redact_key_values(raw: &str) -> String {
    let mut in_secret_quote = false;
    raw.split_whitespace()
        .map(|word| {
            if in_secret_quote {
                in_secret_quote = !word.ends_with('\'');
                return "***".to_string();
            }
            match word.split_once('=') {
                Some((k, v)) if sensitive_key(k) => {
                    in_secret_quote = v.starts_with('\'') && (v.len() == 1 || !v.ends_with('\''));
                    format!("{k}=***")
                }
                _ => word.to_string(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}
