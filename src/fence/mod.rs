//! The resource side of fencing: check a [`Token`] where the write happens.
//!
//! A fencing token only protects a resource that checks it. A holder can be paused (GC, SIGSTOP,
//! a slow disk) past the end of its lease and resume with a token that is no longer current; the
//! only place that can still refuse its write is the resource itself. Each helper here keeps, per
//! *resource* (a name of your choosing, 1–128 of `[A-Za-z0-9._:-]`, the lease naming rule), the
//! largest token it has accepted, and accepts a write only with a token at least that large:
//!
//! - a larger token (a new term) is recorded and accepted;
//! - an equal token (the same term) is accepted again, so a holder keeps writing;
//! - a smaller token is refused with [`FenceError::Stale`], and the write does not happen.
//!
//! The check and the write are one atomic step, which is the whole point (a check followed by a
//! separate write lets a new holder slip in between):
//!
//! - `fence::postgres` / `fence::mysql` (features `postgres` / `mysql`): a `simba_fence(resource,
//!   token)` table (its SQL: `INIT_SQL` in each module) and a `check` that runs inside the caller's
//!   own transaction, so the write and the check commit or roll back together; plus `update_row`,
//!   the one-statement form for a row that carries its own `fence_token` column.
//! - `fence::redis` (feature `redis`): Lua scripts that check the token and perform the write
//!   (`SET`, `HSET`, or your own script's body) in one script run; Cluster-safe because every key
//!   involved carries the resource's hash tag `{resource}`.
//! - [`Memory`]: the same rule in process memory, for examples and tests.
//!
//! The token may come from any simba backend: a ZooKeeper lease's token can fence a PostgreSQL
//! table. Use one fence per resource, fed by one lease name: tokens of different lease names are
//! not comparable. `docs/fencing.md` explains the failure modes this closes, the ones it cannot,
//! and the pattern for other resources (files, HTTP services, object stores).

use std::error::Error as StdError;
use std::fmt;

use crate::{Error, ErrorKind, IntoName, Name, Token};

mod memory;
#[cfg(feature = "mysql")]
pub mod mysql;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

pub use memory::Memory;

/// Why a fenced write was refused or could not run.
#[derive(Debug)]
#[non_exhaustive]
pub enum FenceError {
    /// The token is smaller than the largest the resource has accepted: the holder's lease is
    /// over (another holder has written since). Nothing was written; in a SQL transaction, return
    /// this error and let the transaction roll back.
    Stale {
        /// The fenced resource.
        resource: String,
        /// The token that was refused.
        token: Token,
        /// The largest token the resource has accepted (`> token`); `None` where the check cannot
        /// read it (the one-statement `update_row` forms: no row matched the token condition).
        seen: Option<Token>,
    },
    /// The input was rejected before any I/O (a bad resource name, a token the database cannot
    /// store, a Redis key outside the resource's hash tag).
    Invalid {
        /// What was wrong and what is allowed.
        message: String,
    },
    /// The database failed (the source has the server's own words). The write did not happen, or
    /// the transaction is now unusable: roll it back; retry when [`is_retryable`](FenceError::is_retryable).
    Database {
        /// What was being done.
        message: String,
        /// Whether retrying (the whole transaction) may succeed: a deadlock, a serialization
        /// failure, a lock wait timeout or a lost connection.
        retryable: bool,
        /// The driver's error.
        source: Box<dyn StdError + Send + Sync + 'static>,
    },
}

impl FenceError {
    /// True for [`FenceError::Stale`].
    pub fn is_stale(&self) -> bool {
        matches!(self, FenceError::Stale { .. })
    }

    /// True when retrying the whole transaction (or script) may succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self, FenceError::Database { retryable: true, .. })
    }

    fn invalid(message: impl Into<String>) -> FenceError {
        FenceError::Invalid { message: message.into() }
    }

    #[allow(dead_code)] // unused when no database feature is compiled in
    fn database(
        message: impl Into<String>,
        retryable: bool,
        source: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> FenceError {
        FenceError::Database { message: message.into(), retryable, source: source.into() }
    }
}

impl fmt::Display for FenceError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FenceError::Stale { resource, token, seen: Some(seen) } => {
                write!(f, "stale token {token} for resource '{resource}': it has accepted token {seen}")
            }
            FenceError::Stale { resource, token, seen: None } => {
                write!(f, "stale token {token} for resource '{resource}': its fence_token is larger")
            }
            FenceError::Invalid { message } | FenceError::Database { message, .. } => f.write_str(message),
        }
    }
}

impl StdError for FenceError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            FenceError::Database { source, .. } => Some(source.as_ref()),
            _ => None,
        }
    }
}

/// For `?` in code returning [`crate::Result`]: `Stale` becomes [`ErrorKind::LeaseLost`] (the
/// lease behind the token is over), `Invalid` [`ErrorKind::InvalidConfig`], `Database`
/// [`ErrorKind::Unavailable`] when retryable, else [`ErrorKind::Backend`].
impl From<FenceError> for Error {
    fn from(e: FenceError) -> Error {
        let kind = match &e {
            FenceError::Stale { .. } => ErrorKind::LeaseLost,
            FenceError::Invalid { .. } => ErrorKind::InvalidConfig,
            FenceError::Database { retryable: true, .. } => ErrorKind::Unavailable,
            FenceError::Database { .. } => ErrorKind::Backend,
        };
        let message = e.to_string();
        match e {
            FenceError::Database { source, .. } => Error::new(kind, message).with_source(source),
            _ => Error::new(kind, message),
        }
    }
}

/// Validates a resource name (the lease naming rule).
fn resource_name(resource: impl IntoName) -> Result<Name, FenceError> {
    resource.into_name().map_err(|e| FenceError::invalid(format!("fence resource: {e}")))
}

/// The token as a SQL `bigint`.
#[allow(dead_code)] // unused when no SQL feature is compiled in
fn sql_token(resource: &Name, token: Token) -> Result<i64, FenceError> {
    i64::try_from(token.get()).map_err(|_| {
        FenceError::invalid(format!(
            "token {token} for resource '{resource}' does not fit the fence's bigint column (at most {})",
            i64::MAX
        ))
    })
}

/// The `seen` token read back from a database: `> token`, or the fence row is corrupt.
#[allow(dead_code)] // unused when no SQL feature is compiled in
fn stale(resource: &Name, token: Token, seen: i64) -> FenceError {
    match u64::try_from(seen).ok().and_then(Token::new) {
        Some(seen) if seen > token => FenceError::Stale { resource: resource.to_string(), token, seen: Some(seen) },
        _ => FenceError::invalid(format!(
            "the fence row of resource '{resource}' holds {seen}, which did not refuse token {token}: \
             the row was changed by something other than simba::fence"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_never_repeats_the_source() {
        let io = std::io::Error::other("server said no");
        let e = FenceError::database("fence check of resource 'r' failed", false, io);
        assert_eq!(e.to_string(), "fence check of resource 'r' failed");
        assert_eq!(crate::display_chain(&e), "fence check of resource 'r' failed: server said no");
        let simba: Error = e.into();
        assert_eq!(simba.kind(), ErrorKind::Backend);
        assert_eq!(crate::display_chain(&simba), "fence check of resource 'r' failed: server said no");
    }

    #[test]
    fn stale_converts_to_lease_lost() {
        let t = |v| Token::new(v).unwrap();
        let e = FenceError::Stale { resource: "r".into(), token: t(3), seen: Some(t(5)) };
        assert!(e.is_stale() && !e.is_retryable());
        assert_eq!(e.to_string(), "stale token 3 for resource 'r': it has accepted token 5");
        assert_eq!(Error::from(e).kind(), ErrorKind::LeaseLost);
    }

    #[test]
    fn bad_input_is_rejected_with_the_rule() {
        let e = resource_name("a b").unwrap_err();
        assert!(matches!(e, FenceError::Invalid { .. }), "{e:?}");
        assert!(e.to_string().starts_with("fence resource: "), "{e}");
        let r = resource_name("r").unwrap();
        let big = Token::new(u64::MAX).unwrap();
        assert!(sql_token(&r, big).unwrap_err().to_string().contains("bigint"));
        assert_eq!(sql_token(&r, Token::new(7).unwrap()).unwrap(), 7);
        assert!(matches!(stale(&r, Token::new(7).unwrap(), 7), FenceError::Invalid { .. }));
        assert!(stale(&r, Token::new(7).unwrap(), 8).is_stale());
    }
}
