//! The backends [`Config`](crate::Config) can select ([`BackendKind`]) and the settings
//! families of the selection rules.

use std::fmt;
use std::str::FromStr;

use super::values::shorten;
use crate::error::{Error, Result};

/// The backends [`Config`](crate::Config) can select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum BackendKind {
    /// PostgreSQL 14+ (`postgres://`, `postgresql://`; feature `postgres`).
    Postgres,
    /// MySQL 8 / MariaDB 10.11 (`mysql://`; feature `mysql`).
    Mysql,
    /// Redis 7 standalone (`redis://`; feature `redis`).
    Redis,
    /// Redis Cluster (`redis+cluster://h1:p,h2:p`; feature `redis`).
    RedisCluster,
    /// ZooKeeper 3.8 (`zookeeper://h1:2181,h2:2181/root`; feature `zookeeper`).
    Zookeeper,
    /// etcd v3 (`etcd://h1:2379,h2:2379/prefix`, `etcds://` for TLS; feature `etcd`).
    Etcd,
    /// The in-process memory backend (`memory://`; always compiled). Process-local: two processes
    /// never see each other's leases.
    Memory,
}

impl BackendKind {
    /// Every kind.
    pub const ALL: [BackendKind; 7] = [
        BackendKind::Postgres,
        BackendKind::Mysql,
        BackendKind::Redis,
        BackendKind::RedisCluster,
        BackendKind::Zookeeper,
        BackendKind::Etcd,
        BackendKind::Memory,
    ];

    /// The name used by `SIMBA_BACKEND`, e.g. `"redis-cluster"`.
    pub fn name(self) -> &'static str {
        match self {
            BackendKind::Postgres => "postgres",
            BackendKind::Mysql => "mysql",
            BackendKind::Redis => "redis",
            BackendKind::RedisCluster => "redis-cluster",
            BackendKind::Zookeeper => "zookeeper",
            BackendKind::Etcd => "etcd",
            BackendKind::Memory => "memory",
        }
    }

    /// The Cargo feature that compiles this backend in (`None` for memory, which is always there).
    pub fn feature(self) -> Option<&'static str> {
        match self {
            BackendKind::Postgres => Some("postgres"),
            BackendKind::Mysql => Some("mysql"),
            BackendKind::Redis | BackendKind::RedisCluster => Some("redis"),
            BackendKind::Zookeeper => Some("zookeeper"),
            BackendKind::Etcd => Some("etcd"),
            BackendKind::Memory => None,
        }
    }

    /// True when this build contains the backend.
    pub fn is_compiled(self) -> bool {
        match self {
            BackendKind::Postgres => cfg!(feature = "postgres"),
            BackendKind::Mysql => cfg!(feature = "mysql"),
            BackendKind::Redis | BackendKind::RedisCluster => cfg!(feature = "redis"),
            BackendKind::Zookeeper => cfg!(feature = "zookeeper"),
            BackendKind::Etcd => cfg!(feature = "etcd"),
            BackendKind::Memory => true,
        }
    }

    /// True for PostgreSQL and MySQL (the backends with a schema).
    pub fn is_sql(self) -> bool {
        matches!(self, BackendKind::Postgres | BackendKind::Mysql)
    }

    /// The kind of a URL scheme (case-insensitive), compiled in or not: `postgres`/`postgresql`,
    /// `mysql`/`mariadb`, `redis`/`rediss`, `redis+cluster`/`rediss+cluster`, `zookeeper`/`zk`,
    /// `etcd`/`etcds`, `memory`. (A backend not compiled in still has its schemes, so its URL gets the error that
    /// names its feature.)
    pub(crate) fn from_scheme(scheme: &str) -> Option<BackendKind> {
        match scheme.to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Some(BackendKind::Postgres),
            "mysql" | "mariadb" => Some(BackendKind::Mysql),
            "redis" | "rediss" => Some(BackendKind::Redis),
            "redis+cluster" | "rediss+cluster" => Some(BackendKind::RedisCluster),
            "zookeeper" | "zk" => Some(BackendKind::Zookeeper),
            "etcd" | "etcds" => Some(BackendKind::Etcd),
            "memory" => Some(BackendKind::Memory),
            _ => None,
        }
    }

    /// The backend's settings family (for the selection rules and `SIMBA_<FAMILY>_ENABLED`).
    pub(crate) fn family(self) -> Family {
        match self {
            BackendKind::Postgres => Family::Postgres,
            BackendKind::Mysql => Family::Mysql,
            BackendKind::Redis | BackendKind::RedisCluster => Family::Redis,
            BackendKind::Zookeeper => Family::Zookeeper,
            BackendKind::Etcd => Family::Etcd,
            BackendKind::Memory => Family::Memory,
        }
    }

    /// Whether an explicit choice `self` (from `SIMBA_BACKEND`) agrees with a URL of kind `url`:
    /// equal, or `redis` for a `redis+cluster://` URL.
    pub(crate) fn agrees_with(self, url: BackendKind) -> bool {
        self == url || (self == BackendKind::Redis && url == BackendKind::RedisCluster)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for BackendKind {
    type Err = Error;

    /// Parses `postgres` (or `postgresql`), `mysql`, `redis`, `redis-cluster`, `zookeeper`,
    /// `etcd`, `memory`; case-insensitive.
    fn from_str(s: &str) -> Result<BackendKind> {
        match s.trim().to_ascii_lowercase().as_str() {
            "postgres" | "postgresql" => Ok(BackendKind::Postgres),
            "mysql" => Ok(BackendKind::Mysql),
            "redis" => Ok(BackendKind::Redis),
            "redis-cluster" => Ok(BackendKind::RedisCluster),
            "zookeeper" => Ok(BackendKind::Zookeeper),
            "etcd" => Ok(BackendKind::Etcd),
            "memory" => Ok(BackendKind::Memory),
            _ => Err(Error::config(format!(
                "unknown backend {:?}: expected one of postgres, mysql, redis, redis-cluster, zookeeper, etcd, memory",
                shorten(s)
            ))),
        }
    }
}

/// A group of settings that belong to one backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Family {
    Postgres,
    Mysql,
    Sql,
    Redis,
    Zookeeper,
    Etcd,
    Memory,
}

impl Family {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Family::Postgres => "postgres",
            Family::Mysql => "mysql",
            Family::Sql => "sql (postgres/mysql)",
            Family::Redis => "redis",
            Family::Zookeeper => "zookeeper",
            Family::Etcd => "etcd",
            Family::Memory => "memory",
        }
    }

    pub(crate) fn applies_to(self, kind: BackendKind) -> bool {
        match self {
            Family::Sql => kind.is_sql(),
            f => kind.family() == f,
        }
    }

    /// The family of a `SIMBA_REDIS_*`, `SIMBA_ZOOKEEPER_*` or SQL (`SIMBA_SQL_*`,
    /// `SIMBA_PURGE_INTERVAL`) variable `name` when that backend is not compiled in (so this build
    /// cannot know its variables).
    pub(crate) fn not_compiled_owner(name: &str) -> Option<Family> {
        let family = if name.starts_with("SIMBA_REDIS_") {
            Family::Redis
        } else if name.starts_with("SIMBA_ZOOKEEPER_") {
            Family::Zookeeper
        } else if name.starts_with("SIMBA_ETCD_") {
            Family::Etcd
        } else if name.starts_with("SIMBA_SQL_") || name == "SIMBA_PURGE_INTERVAL" {
            Family::Sql
        } else {
            return None;
        };
        // One arm per family, whatever the features: with some of them off, the arms are
        // constants and clippy would have them be a `matches!`.
        #[allow(clippy::match_like_matches_macro)]
        let compiled = match family {
            Family::Redis => cfg!(feature = "redis"),
            Family::Sql => cfg!(any(feature = "postgres", feature = "mysql")),
            Family::Etcd => cfg!(feature = "etcd"),
            _ => cfg!(feature = "zookeeper"),
        };
        (!compiled && !name.ends_with("_ENABLED")).then_some(family)
    }

    pub(crate) fn enabled_var(self) -> &'static str {
        match self {
            Family::Postgres => "SIMBA_POSTGRES_ENABLED",
            Family::Mysql => "SIMBA_MYSQL_ENABLED",
            Family::Redis => "SIMBA_REDIS_ENABLED",
            Family::Zookeeper => "SIMBA_ZOOKEEPER_ENABLED",
            Family::Etcd => "SIMBA_ETCD_ENABLED",
            Family::Memory | Family::Sql => "SIMBA_MEMORY_ENABLED",
        }
    }
}

/// An example URL of `kind`, for messages.
pub(crate) fn example_url(kind: BackendKind) -> &'static str {
    match kind {
        BackendKind::Postgres => "postgres://user@127.0.0.1:5432/db",
        BackendKind::Mysql => "mysql://user@127.0.0.1:3306/db",
        BackendKind::Redis => "redis://127.0.0.1:6379",
        BackendKind::RedisCluster => "redis+cluster://127.0.0.1:7000,127.0.0.1:7001",
        BackendKind::Zookeeper => "zookeeper://127.0.0.1:2181/simba",
        BackendKind::Etcd => "etcd://127.0.0.1:2379/simba",
        BackendKind::Memory => "memory://",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_of_backends_not_compiled_still_have_an_owner() {
        let sql = cfg!(any(feature = "postgres", feature = "mysql"));
        for (name, family, compiled) in [
            ("SIMBA_PURGE_INTERVAL", Family::Sql, sql),
            ("SIMBA_SQL_POOL_SIZE", Family::Sql, sql),
            ("SIMBA_REDIS_EVICTION", Family::Redis, cfg!(feature = "redis")),
            ("SIMBA_ZOOKEEPER_ROOT", Family::Zookeeper, cfg!(feature = "zookeeper")),
        ] {
            assert_eq!(Family::not_compiled_owner(name), (!compiled).then_some(family), "{name}");
        }
        for name in ["SIMBA_REDIS_ENABLED", "SIMBA_PURGE", "SIMBA_LEASE_DURATION", "SIMBA_POSTGRES_ENABLED"] {
            assert_eq!(Family::not_compiled_owner(name), None, "{name}");
        }
    }
}
