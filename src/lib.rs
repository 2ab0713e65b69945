//! # simba — leases with fencing tokens, leader election, locks and groups
//!
//! A synchronous library for distributed coordination between processes. See the crate README
//! and `docs/` for the guarantees and the backends.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod backend;
pub mod backends;
mod error;
pub mod options;
mod types;

pub use backend::{Acquire, Capabilities, Holder, KeepAlive, LeaseBackend, Member, Notification, SessionGrant, Topic};
pub use error::{display_chain, Error, ErrorKind, Result};
pub use options::SessionOptions;
pub use types::{validate_metadata, IntoName, Name, SessionId, Token, MAX_METADATA_LEN, MAX_NAME_LEN};

pub mod engine;
mod exec;
pub mod memory;

pub use memory::MemoryBackend;
pub mod election;
pub mod group;
mod lease;
pub mod session;

pub use election::{Election, ElectionEvent, Leader, LeaderContext, LeaderTask, RevokeReason, Schedule};
pub use engine::{LossReason, SessionState};
pub use group::{GroupChange, MemberWatch, Membership};
pub use lease::Lease;
pub use session::{Session, SessionEvent};
pub mod coordinator;
pub use coordinator::{Coordinator, CoordinatorEvent};

pub mod config;
#[cfg(feature = "tck")]
pub mod tck;
pub use config::{BackendKind, Config, ConfigBuilder, RedisEviction, ZookeeperAcl};
pub mod sim;
