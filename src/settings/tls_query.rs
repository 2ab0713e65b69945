//! The TLS files a backend's URL names in its query — a CA, a client certificate and its key —
//! read by one parser for every backend, each naming its own parameters (`ca`/`cert`/`key` for
//! Redis and etcd, `tls_ca`/`tls_cert`/`tls_key` for ZooKeeper, `ssl-ca`/`ssl-cert`/`ssl-key` for
//! MySQL). The rules are the same everywhere: a file parameter needs a value and is given once;
//! every other parameter goes to the backend, in order.

use std::borrow::Cow;
use std::path::PathBuf;

use crate::error::{Error, Result};

/// CA, client certificate and client key, as a URL's query names them.
pub(crate) type TlsFiles = [Option<PathBuf>; 3];

/// Where a query's other parameters go, in order: kept, or refused with an error.
pub(crate) type Others<'a> = dyn FnMut(Cow<'_, str>, Cow<'_, str>) -> Result<()> + 'a;

/// How one backend names its TLS file parameters.
pub(crate) struct TlsParams<'a> {
    /// The parameters of the CA, the client certificate and its key, in that order.
    pub(crate) names: [&'a str; 3],
    /// The name a parameter is compared by (MySQL: case-insensitive, `_` as `-`).
    pub(crate) normalize: fn(&str) -> Cow<'_, str>,
    /// The error for a rule broken, from its detail (`ca= needs a file path`): says which URL.
    pub(crate) invalid: &'a dyn Fn(String) -> Error,
}

impl TlsParams<'_> {
    /// Compares names as written (every backend but MySQL).
    #[cfg_attr(not(any(feature = "redis", feature = "zookeeper", feature = "etcd")), allow(dead_code))]
    pub(crate) fn exact(name: &str) -> Cow<'_, str> {
        Cow::Borrowed(name)
    }

    /// Splits `query` (the text after `?`, form-decoded here) into the TLS files and the other
    /// parameters, which go to `other` in order (it may keep them, or refuse one).
    ///
    /// # Errors
    /// `InvalidConfig` (from `invalid`) for a file parameter without a value or given twice;
    /// whatever `other` returns.
    pub(crate) fn split(&self, query: &str, other: &mut Others<'_>) -> Result<TlsFiles> {
        let mut files: TlsFiles = [None, None, None];
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            let name = (self.normalize)(&k);
            let Some(i) = self.names.iter().position(|n| *n == name) else {
                other(k, v)?;
                continue;
            };
            if v.is_empty() {
                return Err((self.invalid)(format!("{name}= needs a file path")));
            }
            if files[i].is_some() {
                return Err((self.invalid)(format!("{name}= is given twice")));
            }
            files[i] = Some(PathBuf::from(v.as_ref()));
        }
        Ok(files)
    }
}

/// `base` with the query `kept` (none: `base` alone).
#[cfg_attr(not(any(feature = "redis", feature = "mysql")), allow(dead_code))]
pub(crate) fn with_query(base: &str, kept: Vec<(String, String)>) -> String {
    if kept.is_empty() {
        base.to_string()
    } else {
        let q: String = url::form_urlencoded::Serializer::new(String::new()).extend_pairs(kept).finish();
        format!("{base}?{q}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis_like(query: &str) -> Result<(TlsFiles, Vec<(String, String)>)> {
        let invalid = |d: String| Error::config(format!("invalid URL: {d}"));
        let params = TlsParams { names: ["ca", "cert", "key"], normalize: TlsParams::exact, invalid: &invalid };
        let mut kept = Vec::new();
        let files = params.split(query, &mut |k, v| {
            kept.push((k.into_owned(), v.into_owned()));
            Ok(())
        })?;
        Ok((files, kept))
    }

    #[test]
    fn files_are_taken_and_the_rest_kept_in_order() {
        let (files, kept) = redis_like("protocol=resp3&ca=/a%20b.pem&x=1&cert=/c&key=/k").unwrap();
        assert_eq!(files, [Some("/a b.pem".into()), Some("/c".into()), Some("/k".into())]);
        assert_eq!(kept, [("protocol".to_string(), "resp3".to_string()), ("x".to_string(), "1".to_string())]);
        assert_eq!(with_query("redis://h", kept), "redis://h?protocol=resp3&x=1");
        assert_eq!(with_query("redis://h", Vec::new()), "redis://h");
    }

    #[test]
    fn a_file_parameter_needs_a_value_and_is_given_once() {
        let e = redis_like("ca=").unwrap_err();
        assert_eq!(e.to_string(), "invalid URL: ca= needs a file path");
        let e = redis_like("key=/a&key=/b").unwrap_err();
        assert_eq!(e.to_string(), "invalid URL: key= is given twice");
    }

    #[test]
    fn names_compare_as_the_backend_says() {
        let invalid = |d: String| Error::config(d);
        let loose: fn(&str) -> Cow<'_, str> = |n| Cow::Owned(n.to_ascii_lowercase().replace('_', "-"));
        let params = TlsParams { names: ["ssl-ca", "ssl-cert", "ssl-key"], normalize: loose, invalid: &invalid };
        let files = params.split("SSL_CA=/ca", &mut |k, _| Err(Error::config(format!("unexpected {k}")))).unwrap();
        assert_eq!(files[0].as_deref(), Some(std::path::Path::new("/ca")));
        let e = params.split("other=1", &mut |k, _| Err(Error::config(format!("unexpected {k}")))).unwrap_err();
        assert!(e.to_string().contains("unexpected other"), "{e}");
    }
}
