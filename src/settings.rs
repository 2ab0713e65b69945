//! The pieces of configuration that both the front door ([`crate::config`]) and the backends use:
//! the backend kinds and settings families ([`kind`]), the generic URL splitter ([`endpoint`]),
//! value parsers ([`values`]), redaction ([`redact`]) and the TLS file parameters of a URL's
//! query ([`tls_query`]). This module sits below both and imports
//! neither: each backend applies its own rules to a parsed [`endpoint::Endpoint`], and the
//! configuration finds the backends through their registry (`backends::registry`).

pub(crate) mod endpoint;
pub(crate) mod kind;
pub(crate) mod redact;
#[cfg(any(feature = "redis", feature = "mysql", feature = "zookeeper", feature = "etcd"))]
pub(crate) mod tls_query;
pub(crate) mod values;
