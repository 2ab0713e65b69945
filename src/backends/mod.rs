//! The backends: each folder owns its options and their URL and `SIMBA_*` parsing. The in-process
//! [`memory`] backend is always compiled (and also reachable as `simba::memory`); the others are
//! behind features.

pub mod memory;

pub(crate) mod registry;

#[cfg(any(feature = "redis", feature = "postgres", feature = "zookeeper"))]
pub(crate) mod notifier;

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "zookeeper")]
pub mod zookeeper;

#[cfg(feature = "etcd")]
pub mod etcd;
