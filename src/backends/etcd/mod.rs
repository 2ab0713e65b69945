//! The etcd v3 backend (feature `etcd`): a Simba session is an etcd lease, a lease name a key
//! attached to it whose create revision is the fencing token. The mapping and its reasons are in
//! docs/backends/etcd.md.
//!
//! Keys, under `/<prefix>/`:
//! - `s/<session>`: the session's metadata (attached to the session's etcd lease);
//! - `l/<name>`: the holder of lease `name`, its value the holder's session id (attached);
//! - `o/<session>/<name>`: the session's index of what it holds, written in the acquire's
//!   transaction (so with the same create revision, the token) and deleted in the release's
//!   (attached);
//! - `g/<group>/<session>`: a membership (attached);
//! - `sem/<name>`: a semaphore's limit (not attached: kept forever, like tokens).
//!
//! The session id is the etcd lease id as 16 hex digits.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::error::Result;

mod check;
mod client;
pub(crate) mod config;
mod keys;
mod listing;
mod options;
mod proto;
mod route;
mod slots;
mod spi;
mod watch;

pub use options::{
    EtcdOptions, EtcdTls, DEFAULT_CONNECTION_TIMEOUT, DEFAULT_PORT, DEFAULT_PREFIX, DEFAULT_QUERY_TIMEOUT,
};

use client::EtcdClient;
use keys::Keys;
use options::EtcdUrl;
use watch::Watches;

/// etcd's largest lease TTL (`MaxLeaseTTL`, 9 000 000 000 s): a longer session is refused.
pub const MAX_TTL: Duration = Duration::from_secs(9_000_000_000);

/// The etcd v3 backend (etcd 3.4+). See the module docs and docs/backends/etcd.md.
#[derive(Debug, Clone)]
pub struct EtcdBackend {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: EtcdClient,
    keys: Keys,
    /// The watch stream's registrations (docs/backends/etcd.md, "Watches").
    watches: Watches,
    /// The highest store revision a join or keep-alive reply reported: a leave deletes only a
    /// membership created at or before it (`spi.rs`, `leave`).
    seen: AtomicI64,
}

impl Inner {
    /// Notes a reply's store revision.
    fn saw(&self, revision: i64) {
        self.seen.fetch_max(revision, Ordering::SeqCst);
    }
}

impl EtcdBackend {
    /// Connects to the members `members` (`host:port`, port 2379 when left out) with `options`,
    /// checking that the cluster answers (and that the user, when one is set, may log in) within
    /// the connection timeout.
    ///
    /// # Errors
    /// `InvalidConfig` for bad options (before any I/O); `Unavailable` when no member answers in
    /// time; `Backend` when the server refuses (wrong password, TLS refused), in its own words.
    pub fn connect(members: &[&str], options: EtcdOptions) -> Result<EtcdBackend> {
        options.validate()?;
        if members.is_empty() {
            return Err(crate::error::Error::config("no etcd member given: expected at least one host:port"));
        }
        let members: Vec<String> = members
            .iter()
            .map(|m| {
                if m.rsplit_once(':').is_some_and(|(h, _)| !h.ends_with(':')) {
                    m.to_string()
                } else {
                    format!("{m}:{DEFAULT_PORT}")
                }
            })
            .collect();
        let client = EtcdClient::connect(&members, &options)?;
        let keys = Keys::new(&options.prefix);
        let watches = Watches::start(&client, keys.clone());
        Ok(EtcdBackend { inner: Arc::new(Inner { client, keys, watches, seen: AtomicI64::new(0) }) })
    }

    /// Connects as the URL says: `etcd://[user:password@]host:2379[,host:2379…]/prefix`, or
    /// `etcds://…?ca=FILE&cert=FILE&key=FILE` for TLS (every parameter optional: the system's
    /// roots without `ca`, no client certificate without `cert`/`key`). The URL's prefix, user and
    /// TLS files override `options`' (setting one in both is an error).
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed URL, an unknown parameter or a TLS file that cannot be
    /// read; otherwise as [`EtcdBackend::connect`].
    pub fn from_url(url: &str, options: EtcdOptions) -> Result<EtcdBackend> {
        let url = EtcdUrl::parse(url)?;
        let options = url.apply(options)?;
        let members: Vec<&str> = url.members.iter().map(String::as_str).collect();
        EtcdBackend::connect(&members, options)
    }

    /// The key prefix, with its leading and trailing `/`.
    pub fn prefix(&self) -> &str {
        self.inner.keys.root()
    }
}
