//! Backends behind features. The memory backend lives in [`crate::memory`] and is always compiled.

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;

#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "zookeeper")]
pub mod zookeeper;
