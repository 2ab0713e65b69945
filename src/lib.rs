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
