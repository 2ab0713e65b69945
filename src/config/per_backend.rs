//! The backend-specific setters of [`ConfigBuilder`] and accessors of [`Config`]. Each setter
//! forwards to the backend's own options builder (the rules live there, see `backends::*::config`)
//! and records that the setting was made, for the selection rules; each accessor reads the
//! settings the backend parsed when the configuration was built.

#[cfg(feature = "zookeeper")]
use std::path::Path;
#[cfg(any(feature = "redis", feature = "zookeeper", feature = "etcd"))]
use std::path::PathBuf;
#[cfg(any(feature = "postgres", feature = "mysql", feature = "zookeeper", feature = "etcd"))]
use std::time::Duration;

use super::{Config, ConfigBuilder};
use crate::settings::kind::Family;

impl ConfigBuilder {
    /// Records that `setting` (a backend's setter) was set, for the selection rules.
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "redis", feature = "zookeeper", feature = "etcd")),
        allow(dead_code)
    )]
    fn mark(mut self, setting: (Family, &'static str)) -> Self {
        self.specific.insert(setting);
        self
    }
}

impl Config {
    /// The chosen backend's settings, when they are a `T` (what its `BackendConfig::parse` made).
    #[cfg_attr(
        not(any(feature = "postgres", feature = "mysql", feature = "redis", feature = "zookeeper", feature = "etcd")),
        allow(dead_code)
    )]
    fn parsed<T: 'static>(&self) -> Option<&T> {
        self.backend.as_any().downcast_ref()
    }
}

/// The SQL settings (each forwards to [`SqlOptionsBuilder`](crate::backends::sql::SqlOptionsBuilder)).
#[cfg(any(feature = "postgres", feature = "mysql"))]
mod sql {
    use super::*;
    use crate::backends::sql::config::SqlSettings;
    use crate::backends::sql::{SqlBackend, SqlOptions};
    use crate::error::{Error, Result};

    impl ConfigBuilder {
        /// SQL only: minimum time between purges of expired sessions (default 1 min; more than 0, at
        /// most 1 day; [`SqlOptionsBuilder::purge_interval`](crate::backends::sql::SqlOptionsBuilder::purge_interval)).
        #[must_use]
        pub fn purge_interval(mut self, d: Duration) -> Self {
            self.backends.sql = self.backends.sql.purge_interval(d);
            self.mark((Family::Sql, "purge_interval"))
        }

        /// SQL only: connections in the backend's own pool (default 4; 1 to 256;
        /// [`SqlOptionsBuilder::pool_size`](crate::backends::sql::SqlOptionsBuilder::pool_size)).
        #[must_use]
        pub fn sql_pool_size(mut self, n: u32) -> Self {
            self.backends.sql = self.backends.sql.pool_size(n);
            self.mark((Family::Sql, "sql_pool_size"))
        }
    }

    impl Config {
        /// SQL: the purge interval, when set (the backend's default otherwise; `None` for another
        /// backend).
        pub fn purge_interval(&self) -> Option<Duration> {
            self.parsed::<SqlSettings>().and_then(|s| s.purge_interval)
        }

        /// SQL: the backend's options (`None` for another backend).
        pub fn sql_options(&self) -> Option<&SqlOptions> {
            self.parsed::<SqlSettings>().map(|s| &s.options)
        }

        /// Creates the SQL backend itself (for [`init_schema`](SqlBackend::init_schema) and other
        /// SQL-only operations). No I/O happens here.
        ///
        /// # Errors
        /// `InvalidConfig` when the configured backend is not SQL or the URL is rejected by the driver.
        pub fn connect_sql(&self) -> Result<SqlBackend> {
            let Some(settings) = self.parsed::<SqlSettings>() else {
                let other = self.backend_kind();
                return Err(Error::config(format!(
                    "the {other} backend is not a SQL backend (postgres or mysql){}",
                    other
                        .feature()
                        .filter(|_| !other.is_compiled())
                        .map(|f| format!(" and needs the `{f}` feature"))
                        .unwrap_or_default()
                )));
            };
            settings.connect_sql().map_err(|e| self.scrub(e))
        }
    }
}

/// The Redis settings (each forwards to [`RedisOptionsBuilder`](crate::backends::redis::RedisOptionsBuilder)).
#[cfg(feature = "redis")]
mod redis {
    use super::*;
    use crate::backends::redis::config::RedisSettings;
    use crate::backends::redis::{EvictionCheck, RedisOptions};

    impl ConfigBuilder {
        /// Redis: most connections open at once, to the server or to each Cluster node (default 8;
        /// [`RedisOptionsBuilder::max_connections`](crate::backends::redis::RedisOptionsBuilder::max_connections)).
        #[must_use]
        pub fn redis_max_connections(mut self, n: u32) -> Self {
            self.backends.redis = self.backends.redis.max_connections(usize::try_from(n).unwrap_or(usize::MAX));
            self.mark((Family::Redis, "redis_max_connections"))
        }

        /// Redis: how long a pooled connection is reused before it is replaced (default forever;
        /// [`RedisOptionsBuilder::max_connection_lifetime`](crate::backends::redis::RedisOptionsBuilder::max_connection_lifetime)).
        #[must_use]
        pub fn redis_max_connection_lifetime(mut self, d: std::time::Duration) -> Self {
            self.backends.redis = self.backends.redis.max_connection_lifetime(d);
            self.mark((Family::Redis, "redis_max_connection_lifetime"))
        }

        /// Redis standalone only: a new term counts only after this many replicas acknowledged it
        /// with `WAIT` (default 0 = off;
        /// [`RedisOptionsBuilder::wait_replicas`](crate::backends::redis::RedisOptionsBuilder::wait_replicas)).
        #[must_use]
        pub fn redis_wait_replicas(mut self, n: u32) -> Self {
            self.backends.redis = self.backends.redis.wait_replicas(n);
            self.mark((Family::Redis, "redis_wait_replicas"))
        }

        /// Redis: what to do when `maxmemory-policy` may evict Simba's keys (default warn;
        /// [`RedisOptionsBuilder::eviction_check`](crate::backends::redis::RedisOptionsBuilder::eviction_check)).
        #[must_use]
        pub fn redis_eviction(mut self, e: EvictionCheck) -> Self {
            self.backends.redis = self.backends.redis.eviction_check(e);
            self.mark((Family::Redis, "redis_eviction"))
        }

        /// Redis over TLS (`rediss://`, `rediss+cluster://`): trust only the CA certificate(s) in this
        /// PEM file instead of the system's roots (the URL's `ca=` does the same).
        #[must_use]
        pub fn redis_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
            self.backends.redis.tls_slot(0, ca.into());
            self.mark((Family::Redis, "redis_tls_ca"))
        }

        /// Redis over TLS: present this client certificate and key (PEM files; the URL's `cert=` and
        /// `key=` do the same).
        #[must_use]
        pub fn redis_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
            self.backends.redis.tls_slot(1, cert.into());
            self.backends.redis.tls_slot(2, key.into());
            self.mark((Family::Redis, "redis_tls_identity"))
        }
    }

    impl Config {
        /// Redis: the backend's options (`None` for another backend).
        pub fn redis_options(&self) -> Option<&RedisOptions> {
            self.parsed::<RedisSettings>().map(|s| &s.options)
        }

        /// Redis: replicas that must acknowledge a new term (0 = off, and for another backend).
        pub fn redis_wait_replicas(&self) -> u32 {
            self.redis_options().map_or(0, RedisOptions::wait_replicas)
        }

        /// Redis: the eviction-policy check mode (the default for another backend).
        pub fn redis_eviction(&self) -> EvictionCheck {
            self.redis_options().map(RedisOptions::eviction_check).unwrap_or_default()
        }
    }
}

/// The ZooKeeper settings (checked by [`build`](ConfigBuilder::build), as the backend's own
/// constructors check them).
#[cfg(feature = "zookeeper")]
mod zookeeper {
    use super::*;
    use crate::backends::zookeeper::config::ZookeeperParsed;
    use crate::backends::zookeeper::{AclMode, ZookeeperOptions, DEFAULT_ROOT};
    use crate::settings::redact::Secret;

    impl ConfigBuilder {
        /// ZooKeeper: root path of every node (default `/simba`; a `zookeeper://` URL path sets it too).
        #[must_use]
        pub fn zookeeper_root(mut self, root: impl Into<String>) -> Self {
            self.backends.zookeeper.root = Some(root.into());
            self.mark((Family::Zookeeper, "zookeeper_root"))
        }

        /// ZooKeeper: auth info sent by every client, e.g. `("digest", "user:password")`. The
        /// credentials are never printed. Validated by [`build`](ConfigBuilder::build) (as
        /// [`ZookeeperAuth::new`](crate::backends::zookeeper::ZookeeperAuth::new)).
        #[must_use]
        pub fn zookeeper_auth(mut self, scheme: impl Into<String>, credentials: impl Into<String>) -> Self {
            self.backends.zookeeper.auth = Some((scheme.into(), Secret(credentials.into())));
            self.mark((Family::Zookeeper, "zookeeper_auth"))
        }

        /// ZooKeeper: ACL of the nodes the backend creates (default [`AclMode::Auto`]).
        #[must_use]
        pub fn zookeeper_acl(mut self, acl: AclMode) -> Self {
            self.backends.zookeeper.acl = Some(acl);
            self.mark((Family::Zookeeper, "zookeeper_acl"))
        }

        /// ZooKeeper: bound on opening a session (default 10 s).
        #[must_use]
        pub fn zookeeper_connection_timeout(mut self, d: Duration) -> Self {
            self.backends.zookeeper.connection_timeout = Some(d);
            self.mark((Family::Zookeeper, "zookeeper_connection_timeout"))
        }

        /// ZooKeeper: connect over TLS, trusting the CA certificates in the PEM file `ca` (like
        /// `SIMBA_ZOOKEEPER_TLS_CA`). The file is read when the configuration is built.
        #[must_use]
        pub fn zookeeper_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
            self.backends.zookeeper.tls[0] = Some(ca.into());
            self.mark((Family::Zookeeper, "zookeeper_tls_ca"))
        }

        /// ZooKeeper: the TLS client certificate chain and private key, PEM files (like
        /// `SIMBA_ZOOKEEPER_TLS_CERT` and `SIMBA_ZOOKEEPER_TLS_KEY`). Needs a CA.
        #[must_use]
        pub fn zookeeper_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
            self.backends.zookeeper.tls[1] = Some(cert.into());
            self.backends.zookeeper.tls[2] = Some(key.into());
            self.mark((Family::Zookeeper, "zookeeper_tls_identity"))
        }

        /// ZooKeeper: SASL DIGEST-MD5 authentication of every client (like
        /// `SIMBA_ZOOKEEPER_SASL=user:password`). The password is never printed.
        #[must_use]
        pub fn zookeeper_sasl(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
            self.backends.zookeeper.sasl = Some((user.into(), Secret(password.into())));
            self.mark((Family::Zookeeper, "zookeeper_sasl"))
        }
    }

    impl Config {
        /// ZooKeeper: the backend's options (`None` for another backend).
        pub fn zookeeper_options(&self) -> Option<&ZookeeperOptions> {
            self.parsed::<ZookeeperParsed>().map(|z| &z.options)
        }

        /// ZooKeeper: the root path (the default for another backend).
        pub fn zookeeper_root(&self) -> &str {
            self.zookeeper_options().map_or(DEFAULT_ROOT, ZookeeperOptions::root_path)
        }

        /// ZooKeeper: the effective ACL mode ([`AclMode::Auto`] resolved: `creator-all` with auth or
        /// SASL, else `open`).
        pub fn zookeeper_acl(&self) -> AclMode {
            self.zookeeper_options().map(ZookeeperOptions::effective_acl).unwrap_or_default()
        }

        /// ZooKeeper: the TLS CA file, when TLS is configured by a file (URL or variable).
        pub fn zookeeper_tls_ca(&self) -> Option<&Path> {
            self.zookeeper_options().and_then(|o| o.tls.as_ref()).and_then(|t| t.ca_file())
        }

        /// ZooKeeper: the SASL user, when SASL is configured (the password is never exposed).
        pub fn zookeeper_sasl_user(&self) -> Option<&str> {
            self.zookeeper_options().and_then(|o| o.sasl.as_ref()).map(|s| s.user())
        }

        /// ZooKeeper: the auth scheme, when auth is configured (the credentials are never exposed).
        pub fn zookeeper_auth_scheme(&self) -> Option<&str> {
            self.zookeeper_options().and_then(|o| o.auth.first()).map(|a| a.scheme())
        }

        /// ZooKeeper: the connection timeout.
        pub fn zookeeper_connection_timeout(&self) -> Option<Duration> {
            self.zookeeper_options().map(|o| o.connection_timeout)
        }
    }
}

/// The etcd settings (checked by [`build`](ConfigBuilder::build), as
/// [`EtcdBackend::connect`](crate::backends::etcd::EtcdBackend::connect) checks them).
#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use crate::backends::etcd::config::EtcdParsed;
    use crate::backends::etcd::{EtcdOptions, DEFAULT_PREFIX};
    use crate::settings::redact::Secret;

    impl ConfigBuilder {
        /// etcd: the key prefix (default [`DEFAULT_PREFIX`]; like `SIMBA_ETCD_PREFIX`, and an
        /// `etcd://` URL path sets it too: both set and different is an error).
        #[must_use]
        pub fn etcd_prefix(mut self, prefix: impl Into<String>) -> Self {
            self.backends.etcd.prefix = Some(prefix.into());
            self.mark((Family::Etcd, "etcd_prefix"))
        }

        /// etcd: bound on connecting (default
        /// [`DEFAULT_CONNECTION_TIMEOUT`](crate::backends::etcd::DEFAULT_CONNECTION_TIMEOUT); like
        /// `SIMBA_ETCD_CONNECTION_TIMEOUT`).
        #[must_use]
        pub fn etcd_connection_timeout(mut self, d: Duration) -> Self {
            self.backends.etcd.connection_timeout = Some(d);
            self.mark((Family::Etcd, "etcd_connection_timeout"))
        }

        /// etcd: log in as `user` with `password` (like `SIMBA_ETCD_USER` and
        /// `SIMBA_ETCD_PASSWORD`; a user in the URL as well is an error). The password is never
        /// printed.
        #[must_use]
        pub fn etcd_user(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
            self.backends.etcd.user = Some(user.into());
            self.backends.etcd.password = Some(Secret(password.into()));
            self.mark((Family::Etcd, "etcd_user"))
        }

        /// etcd over TLS (`etcds://`): trust only the CA certificate(s) in this PEM file instead
        /// of the system's roots (like `SIMBA_ETCD_TLS_CA` and the URL's `ca=`). The file is read
        /// when the configuration is built.
        #[must_use]
        pub fn etcd_tls_ca(mut self, ca: impl Into<PathBuf>) -> Self {
            self.backends.etcd.tls[0] = Some(ca.into());
            self.mark((Family::Etcd, "etcd_tls_ca"))
        }

        /// etcd over TLS: present this client certificate chain and key (PEM files; like
        /// `SIMBA_ETCD_TLS_CERT` and `SIMBA_ETCD_TLS_KEY`, and the URL's `cert=` and `key=`).
        #[must_use]
        pub fn etcd_tls_identity(mut self, cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
            self.backends.etcd.tls[1] = Some(cert.into());
            self.backends.etcd.tls[2] = Some(key.into());
            self.mark((Family::Etcd, "etcd_tls_identity"))
        }
    }

    impl Config {
        /// etcd: the backend's options (`None` for another backend).
        pub fn etcd_options(&self) -> Option<&EtcdOptions> {
            self.parsed::<EtcdParsed>().map(|e| &e.options)
        }

        /// etcd: the members (`host:port`) the URL names (empty for another backend).
        pub fn etcd_members(&self) -> &[String] {
            self.parsed::<EtcdParsed>().map_or(&[], |e| &e.members)
        }

        /// etcd: the key prefix (the default for another backend).
        pub fn etcd_prefix(&self) -> &str {
            self.etcd_options().map_or(DEFAULT_PREFIX, |o| o.prefix.as_str())
        }

        /// etcd: the connection timeout (`None` for another backend).
        pub fn etcd_connection_timeout(&self) -> Option<Duration> {
            self.etcd_options().map(|o| o.connection_timeout)
        }
    }
}
