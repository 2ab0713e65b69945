//! The crate-internal test seam: what some integration tests (`tests/`) need of the crate's plumbing
//! and what is not public API — the SQL text, the Redis scripting port and its Lua scripts, the
//! memory backend's watch count, the value parsers.
//!
//! Compiled only with the feature `internal-testing`, which is never default and not documented
//! for users; hidden from the docs; no stability promise. `cargo test --all-features` (what
//! `scripts/test` runs) turns it on; a test that needs it says so (`required-features` in
//! Cargo.toml, or `#[cfg(feature = "internal-testing")]` on the test). Code that can be tested
//! from inside the crate is tested there instead.

use std::time::Duration;

use crate::backends::memory::MemoryBackend;
use crate::error::Result;

/// The SQL statements of the backends (the files under `sql/<dialect>/`).
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql {
    pub use crate::backends::sql::queries::{mysql, postgres};
}

/// The Redis backend's scripting port (the one door to the driver) and its Lua scripts.
#[cfg(feature = "redis")]
pub mod redis {
    use std::sync::Arc;

    use crate::backends::redis::{RedisBackend, RedisOptions};
    use crate::error::Result;

    pub use crate::backends::redis::port::{ClusteredScripting, RedisScripting, ScriptCall, StandaloneScripting};
    pub use crate::backends::redis::scripts::{lua, LuaScript};

    /// [`RedisBackend`] on a custom scripting port (e.g. one that injects faults).
    ///
    /// # Errors
    /// As `RedisBackend::connect`.
    pub fn backend_with_scripting(scripting: Arc<dyn RedisScripting>, options: RedisOptions) -> Result<RedisBackend> {
        RedisBackend::with_scripting(scripting, options)
    }

    /// `backend.list(request)` with a `SCAN` walk of at most `steps` calls of `COUNT count` per
    /// master (instead of the backend's budget), so that a test can run it out.
    ///
    /// # Errors
    /// As `LeaseBackend::list`.
    pub fn list_within(
        backend: &RedisBackend,
        request: &crate::backend::ListRequest,
        count: usize,
        steps: usize,
    ) -> Result<crate::backend::Listing> {
        backend.list_within(request, count, steps)
    }
}

/// Watch registrations waiting for a notification in `backend`, over every topic (leak tests).
pub fn memory_watcher_count(backend: &MemoryBackend) -> usize {
    backend.watcher_count()
}

/// `SIMBA_*`'s duration parser (humantime syntax, a unit required), naming `what` in its errors.
///
/// # Errors
/// `InvalidConfig` naming `what` and the value.
pub fn parse_duration(what: &str, value: &str) -> Result<Duration> {
    crate::settings::values::parse_duration(what, value)
}
