//! The channel types of the API: [`crossbeam-channel`](https://docs.rs/crossbeam-channel/0.5)'s,
//! re-exported on purpose.
//!
//! Every stream the library hands out is a crossbeam channel: [`Events`](crate::Events) (a
//! session's, an election's or a coordinator's events) dereferences to a [`Receiver`],
//! [`MemberWatch::receiver`](crate::MemberWatch::receiver) is one, and a backend's
//! [`LeaseBackend::watch`](crate::backend::LeaseBackend::watch) pushes into a [`Sender`]. That is
//! the point, not an accident: an application waits on a session's events, an election's events,
//! a member watch and its own channels in **one** [`select!`] (or a [`Select`]), with the
//! `recv` / `try_recv` / `recv_timeout` / `recv_deadline` / `iter` / `try_iter` it already knows.
//! Types of the library's own would have to give that up or re-implement `select!`.
//!
//! This module names those types, so an application needs no `crossbeam-channel` dependency of its
//! own to spell them (the error types of `recv_timeout`, a `Sender` for a test backend's `watch`),
//! and one that has one gets the very same types as long as it depends on `crossbeam-channel`
//! 0.5 (Cargo unifies the two). The crate depends on `crossbeam-channel` `0.5` (any 0.5.x): moving
//! to another major version (0.6) changes these types, so it is a breaking change of `simba`,
//! made only in a major release and said so in the changelog.
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use simba::channel::{select, unbounded, RecvTimeoutError};
//! use simba::{MemoryBackend, Session, SessionEvent, SessionOptions};
//!
//! # fn main() -> simba::Result<()> {
//! let options = SessionOptions::builder().lease_duration(Duration::from_secs(2)).build()?;
//! let session = Session::open(Arc::new(MemoryBackend::new()), options)?;
//! let events = session.events();
//! let (stop_tx, stop_rx) = unbounded::<()>();
//! stop_tx.send(()).ok();
//! let woken_by = select! {
//!     recv(&*events) -> ev => format!("session event: {ev:?}"),
//!     recv(stop_rx) -> _ => "stop".to_string(),
//! };
//! assert!(!woken_by.is_empty());
//! session.close()?;
//! assert_eq!(events.recv_timeout(Duration::from_secs(5)), Ok(SessionEvent::Closed));
//! let next = events.recv_timeout(Duration::from_millis(1));
//! assert!(matches!(next, Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected)));
//! # Ok(())
//! # }
//! ```

pub use crossbeam_channel::{
    bounded, never, select, unbounded, IntoIter, Iter, Receiver, RecvError, RecvTimeoutError, Select, SendError,
    Sender, TryIter, TryRecvError, TrySendError,
};
