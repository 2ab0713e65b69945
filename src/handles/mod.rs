//! The handles users hold — [`Session`](crate::Session), [`Lease`](crate::Lease),
//! [`Election`](crate::Election), [`Membership`](crate::Membership),
//! [`Semaphore`](crate::Semaphore) and [`Coordinator`](crate::Coordinator) — over the
//! crate-private `runtime`. The layer above the runtime: a handle may import the runtime, the
//! engine and every module below them; nothing below imports a handle (docs/architecture.md,
//! "Layers"). Each handle's type is re-exported at the crate root (`semaphore`, a public namespace,
//! as a whole), so it has one path.

pub(crate) mod coordinator;
pub(crate) mod election;
pub(crate) mod group;
pub(crate) mod lease;
pub mod partitions;
pub mod semaphore;
pub(crate) mod session;
