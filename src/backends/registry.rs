//! The backends [`crate::Config`] can build, each owning its configuration: one
//! [`BackendConfig`] per backend (its kinds, its `SIMBA_*` variables, how it reads them, how it
//! turns a parsed URL into its own settings, its secrets, how it connects with what it parsed), and
//! the [`REGISTRY`] of those compiled in. The configuration asks the registry; it has no branch per
//! backend. (This module imports `settings`, below it; the configuration imports this one.)

use std::any::Any;
use std::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crate::backend::LeaseBackend;
use crate::error::Result;
use crate::settings::endpoint::Endpoint;
use crate::settings::kind::{BackendKind, Family};

/// The configuration one backend owns. Implemented by a unit struct in each backend's `config`
/// module (the memory backend's in `memory.rs`).
pub(crate) trait BackendConfig: Sync {
    /// The kinds this backend serves (their URL schemes are [`BackendKind::from_scheme`]'s).
    fn kinds(&self) -> &'static [BackendKind];

    /// The settings family of its variables and setters (for the selection rules).
    fn family(&self) -> Family;

    /// Its `SIMBA_*` variables (all of them are in [`crate::config::ENV_VARS`]).
    fn env_vars(&self) -> &'static [&'static str];

    /// Reads its variables into its part of `knobs` through `get` (which yields only non-empty
    /// values), telling `seen` the name of each one that is set.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule.
    fn read_vars(
        &self,
        knobs: &mut Knobs,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<()>;

    /// The secrets among its part of `knobs` (to scrub from third-party messages whichever
    /// backend is chosen).
    fn secrets(&self, _knobs: &Knobs) -> Vec<String> {
        Vec::new()
    }

    /// Its settings for the URL `ep` of kind `kind` with its part of `knobs`, every value
    /// checked; no network I/O. What this returns is what [`ParsedBackend::connect`] connects
    /// with: the URL is not parsed again.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule.
    fn parse(
        &self,
        kind: BackendKind,
        ep: &Endpoint,
        knobs: &Knobs,
        query_timeout: Duration,
    ) -> Result<Arc<dyn ParsedBackend>>;

    /// Its settings when it was chosen without a URL (`SIMBA_BACKEND=memory`, say). Only the
    /// memory backend can be; for the others the selection rules never get here.
    ///
    /// # Errors
    /// `InvalidConfig`, for a backend that needs a URL.
    fn parse_without_url(&self, kind: BackendKind, _knobs: &Knobs) -> Result<Arc<dyn ParsedBackend>> {
        Err(crate::error::Error::config(format!("internal: the {kind} backend was chosen without a URL")))
    }
}

/// A backend's settings, parsed and checked by its [`BackendConfig::parse`].
pub(crate) trait ParsedBackend: Send + Sync + RefUnwindSafe + UnwindSafe + Any {
    /// Creates the backend with these settings.
    ///
    /// # Errors
    /// The backend's errors.
    fn connect(&self) -> Result<Arc<dyn LeaseBackend>>;

    /// Adds its settings (never a secret) to `Config`'s `Debug`.
    fn debug_fields(&self, _d: &mut fmt::DebugStruct<'_, '_>) {}

    /// For the backend-specific accessors of [`crate::Config`].
    fn as_any(&self) -> &dyn Any;
}

/// The backends compiled into this build.
pub(crate) static REGISTRY: &[&dyn BackendConfig] = &[
    &super::memory::MemoryConfig,
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    &super::sql::config::SqlConfig,
    #[cfg(feature = "redis")]
    &super::redis::config::RedisConfig,
    #[cfg(feature = "zookeeper")]
    &super::zookeeper::config::ZookeeperConfig,
    #[cfg(feature = "etcd")]
    &super::etcd::config::EtcdConfig,
];

/// The backend of `kind`, when it is compiled in.
pub(crate) fn backend_of(kind: BackendKind) -> Option<&'static dyn BackendConfig> {
    REGISTRY.iter().copied().find(|b| b.kinds().contains(&kind))
}

/// The settings of every compiled-in backend, as given to [`crate::ConfigBuilder`] (variables and
/// setters) before they are checked: each backend's own options builder.
#[derive(Clone, Default)]
pub(crate) struct Knobs {
    /// The SQL backends' options builder.
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    pub(crate) sql: super::sql::SqlOptionsBuilder,
    /// The Redis backend's options builder.
    #[cfg(feature = "redis")]
    pub(crate) redis: super::redis::RedisOptionsBuilder,
    /// The ZooKeeper backend's settings (checked when parsed).
    #[cfg(feature = "zookeeper")]
    pub(crate) zookeeper: super::zookeeper::ZookeeperSettings,
    /// The etcd backend's settings (checked when parsed).
    #[cfg(feature = "etcd")]
    pub(crate) etcd: super::etcd::config::EtcdSettings,
}

impl Knobs {
    /// Adds every backend's settings (never a secret) to `ConfigBuilder`'s `Debug`.
    pub(crate) fn debug_fields(&self, _d: &mut fmt::DebugStruct<'_, '_>) {
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        _d.field("sql", &self.sql);
        #[cfg(feature = "redis")]
        _d.field("redis", &self.redis);
        #[cfg(feature = "zookeeper")]
        _d.field("zookeeper", &self.zookeeper);
        #[cfg(feature = "etcd")]
        _d.field("etcd", &self.etcd);
    }
}

/// Every compiled-in backend's variables, in registry order (a constant, for
/// [`crate::config::ENV_VARS`]).
pub(crate) const BACKEND_VARS: &[&[&str]] = &[
    #[cfg(any(feature = "postgres", feature = "mysql"))]
    super::sql::config::ENV_VARS,
    #[cfg(feature = "redis")]
    super::redis::config::ENV_VARS,
    #[cfg(feature = "zookeeper")]
    super::zookeeper::config::ENV_VARS,
    #[cfg(feature = "etcd")]
    super::etcd::config::ENV_VARS,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_compiled_in_has_one_backend_and_its_variables_are_listed() {
        for kind in BackendKind::ALL {
            let n = REGISTRY.iter().filter(|b| b.kinds().contains(&kind)).count();
            assert_eq!(n, usize::from(kind.is_compiled()), "{kind}");
        }
        let listed: Vec<&str> = BACKEND_VARS.iter().flat_map(|v| v.iter().copied()).collect();
        let owned: Vec<&str> = REGISTRY.iter().flat_map(|b| b.env_vars().iter().copied()).collect();
        assert_eq!(listed, owned);
        for v in owned {
            assert!(crate::config::ENV_VARS.contains(&v), "{v}");
        }
    }
}
