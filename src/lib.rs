//! # simba — leases with fencing tokens, leader election, locks and groups
//!
//! A synchronous library for distributed coordination between processes: [`Session`]s renewed by
//! a background thread, named leases ([`Lease`]) carrying fencing [`Token`]s, and on top of them
//! locks, leader election ([`Election`]), counted semaphores ([`semaphore::Semaphore`], a fencing
//! token per [`semaphore::Permit`]) and group membership ([`Membership`]). Backends implement
//! one SPI, [`backend::LeaseBackend`], and pass one conformance kit (`simba::tck`): the in-process
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
//!
//! # Where things are
//!
//! The handles and the types their users name are at the crate root: [`Session`], [`Lease`],
//! [`Election`], [`Membership`], [`Coordinator`], their events and [`Events`], [`Error`],
//! [`Token`], [`Name`]. **The modules that define handles are private** (session, election, group,
//! coordinator, events), so a handle has one path: `simba::Session`, never also
//! `simba::session::Session`. The public modules are namespaces with items and documentation of
//! their own:
//!
//! - [`config`]: selection rules, [`config::ENV_VARS`] (every variable read), [`config::redact_url`];
//!   its headline types [`Config`], [`ConfigBuilder`], [`BackendKind`] are also at the root;
//! - [`options`]: defaults and limits; [`SessionOptions`] is also at the root;
//! - [`semaphore`]: counted semaphores, one path each: [`semaphore::Semaphore`],
//!   [`semaphore::Permit`], the slots and their names;
//! - [`partitions`]: partition sets (fenced work assignment), one path each:
//!   [`partitions::Partitions`], [`partitions::Partition`], their events, options and names;
//! - [`backend`]: the SPI, one path each: [`backend::LeaseBackend`] and every type of its calls
//!   (including [`backend::Holder`] and [`backend::Member`], which `holder()`, `members()` and a
//!   [`GroupChange`] hand to applications too); nothing of it is at the root;
//! - [`channel`]: the channel types of the API (crossbeam-channel's, re-exported on purpose);
//! - [`backends`]: one module per backend with everything of that backend (its backend type,
//!   options, TLS settings, defaults: `backends::zookeeper::DEFAULT_ROOT`,
//!   `backends::redis::EvictionCheck`); only the always-compiled [`MemoryBackend`] is also at the root;
//! - [`fence`]: the resource side of fencing;
//! - `tck` (feature `tck`): the conformance kit for backends.
//!
//! Not public: test machinery (the conformance kit aside, which is opt-in), SQL text, the Redis
//! scripting port and its Lua scripts, CLI helpers. Integration tests that need such plumbing use
//! the crate-internal test seam `simba::testing`, compiled only with the feature
//! `internal-testing`: never default, hidden from these docs, not API, no stability promise.
//!
//! The public API is listed item by item in `docs/public-api.txt`, which CI keeps equal to the code
//! (`scripts/public-api --check`), so every API change is a visible diff.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod backends;
mod cancel;
pub mod channel;
pub mod config;
pub(crate) mod engine;
mod error;
mod events;
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
mod handles;
pub mod listener;
mod observe;
pub mod options;
mod runtime;
mod settings;
/// The deterministic simulation of the shipped runtime (test machinery: the `sim` and `explore`
/// features with `--cfg simba_explore` only; see docs/testing.md).
#[cfg(all(feature = "sim", feature = "explore", simba_explore))]
pub mod sim;
mod state;
pub mod status;
mod sync;
#[cfg(feature = "tck")]
pub mod tck;
/// The README's example, compiled and run as a doctest (`cargo test --doc`).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExample;
/// The crate-internal test seam (feature `internal-testing`; not part of the API).
#[cfg(feature = "internal-testing")]
#[doc(hidden)]
pub mod testing;
mod types;

pub use backends::memory::MemoryBackend;
pub use cancel::{Attempt, Cancel};
pub use config::{BackendKind, Config, ConfigBuilder};
pub use error::{display_chain, Error, ErrorKind, Result};
pub use events::Events;
pub use handles::coordinator::{Coordinator, CoordinatorEvent};
pub use handles::election::{Election, ElectionEvent, LeaderContext, LeaderTask, RevokeReason, Schedule};
pub use handles::group::{GroupChange, MemberWatch, Membership};
pub use handles::lease::Lease;
pub use handles::partitions;
pub use handles::semaphore;
pub use handles::session::Session;
pub use options::SessionOptions;
pub use state::{LossReason, SessionEvent, SessionState};
pub use types::{
    validate_metadata, IntoName, Name, SessionId, Token, MAX_METADATA_LEN, MAX_NAME_LEN, PARTITION_NAME_PREFIX,
    RESERVED_NAME_PREFIX,
};
