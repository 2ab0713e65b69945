//! # simba — leases with fencing tokens, leader election, locks and groups
//!
//! A synchronous library for distributed coordination between processes: [`Session`]s renewed by
//! a background thread, named leases ([`Lease`]) carrying fencing [`Token`]s, and on top of them
//! locks, leader election ([`Election`]), counted semaphores ([`Semaphore`], a fencing token per
//! [`Permit`]) and group membership ([`Membership`]). Backends implement
//! one SPI, [`LeaseBackend`], and pass one conformance kit (`simba::tck`): the in-process
//! [`MemoryBackend`] (always compiled), PostgreSQL and MySQL/MariaDB (`backends::sql`, features
//! `postgres`/`mysql`), Redis standalone and Cluster (`backends::redis`, feature `redis`) and
//! ZooKeeper (`backends::zookeeper`, feature `zookeeper`).
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use simba::{MemoryBackend, Session, SessionOptions};
//!
//! # fn main() -> simba::Result<()> {
//! let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
//! let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
//! let lease = session.lock("report")?;
//! let token = lease.token()?; // right before each write; pass it to the resource
//! assert!(token.get() > 0);
//! lease.release()?;
//! session.close()
//! # }
//! ```
//!
//! The guarantees, the threads and the backends are explained in `docs/` (architecture, locks,
//! election, groups, failure modes, one page per backend).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod backends;
mod cancel;
pub mod config;
pub mod coordinator;
pub mod election;
pub(crate) mod engine;
mod error;
pub mod events;
/// The schedule explorer's controls (the `explore` feature with `--cfg simba_explore` only; see
/// docs/testing.md): the virtual clock and the switches that bring fixed bugs back.
#[cfg(all(feature = "explore", simba_explore))]
#[doc(hidden)]
pub mod explore {
    use std::time::{Duration, Instant};

    pub use crate::sync::Bug;

    /// The virtual now the runtime reads inside an explored execution.
    pub fn now() -> Instant {
        crate::sync::now()
    }

    /// Moves the virtual clock forward by `d`, waking every timed wait whose deadline it passes.
    pub fn advance(d: Duration) {
        crate::sync::advance(d)
    }

    /// Switches `bug`'s old (pre-fix) behaviour back on for the rest of this execution.
    pub fn reintroduce(bug: Bug) {
        crate::sync::reintroduce(bug)
    }
}
pub mod fence;
pub mod group;
mod lease;
/// The in-process memory backend (moved to [`backends::memory`]; this path is kept).
pub use backends::memory;
pub mod options;
mod runtime;
pub mod semaphore;
pub mod session;
/// The deterministic simulation of the shipped runtime (test machinery: the `sim` and `explore`
/// features with `--cfg simba_explore` only; see docs/testing.md).
#[cfg(all(feature = "sim", feature = "explore", simba_explore))]
pub mod sim;
mod state;
mod sync;
#[cfg(feature = "tck")]
pub mod tck;
mod types;

pub use backend::{
    Acquire, Capabilities, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant, TermRemaining, Topic,
};
pub use cancel::{Attempt, Cancel};
#[cfg(feature = "redis")]
pub use config::RedisEviction;
#[cfg(feature = "zookeeper")]
pub use config::ZookeeperAcl;
pub use config::{BackendKind, Config, ConfigBuilder};
pub use coordinator::{Coordinator, CoordinatorEvent};
pub use election::{Election, ElectionEvent, Leader, LeaderContext, LeaderTask, RevokeReason, Schedule};
pub use error::{display_chain, Error, ErrorKind, Result};
pub use events::Events;
pub use group::{GroupChange, MemberWatch, Membership};
pub use lease::Lease;
pub use memory::MemoryBackend;
pub use options::SessionOptions;
pub use semaphore::{Permit, Semaphore};
pub use session::{Session, SessionEvent};
pub use state::{LossReason, SessionState};
pub use types::{
    validate_metadata, IntoName, Name, SessionId, Token, MAX_METADATA_LEN, MAX_NAME_LEN, RESERVED_NAME_PREFIX,
};
