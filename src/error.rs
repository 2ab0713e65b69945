//! The one error type of the crate.

use std::error::Error as StdError;
use std::fmt;

/// What went wrong, in a form the caller can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A lease or group name broke the naming rule (1–128 of `[A-Za-z0-9._:-]`, not `.`/`..`).
    InvalidName,
    /// A setting, URL, duration or metadata value was rejected before any I/O.
    InvalidConfig,
    /// The session is expired (by the backend or by the local deadline). It never revives.
    SessionExpired,
    /// The session (or the handle) was closed by the application.
    Closed,
    /// The lease may no longer be ours: lost, released, or its local deadline passed.
    LeaseLost,
    /// An election handle was asked for a token while not leading.
    NotLeader,
    /// A blocking call reached its timeout or deadline.
    Timeout,
    /// The backend could not be reached or answered with a transient failure. Retryable.
    Unavailable,
    /// The backend answered with an error that is not transient (bad schema, permission, corrupt data).
    Backend,
    /// The backend does not support the requested operation or option.
    Unsupported,
    /// This session already holds the lease (locks are not reentrant).
    AlreadyHeld,
    /// A wait was cancelled through its [`Cancel`](crate::Cancel) token
    /// ([`Session::lock_cancellable`](crate::Session::lock_cancellable),
    /// [`Semaphore::acquire_cancellable`](crate::semaphore::Semaphore::acquire_cancellable)). Not retryable:
    /// the caller asked it to stop.
    Cancelled,
}

impl ErrorKind {
    fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidName => "invalid name",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::SessionExpired => "session expired",
            ErrorKind::Closed => "closed",
            ErrorKind::LeaseLost => "lease lost",
            ErrorKind::NotLeader => "not leader",
            ErrorKind::Timeout => "timed out",
            ErrorKind::Unavailable => "backend unavailable",
            ErrorKind::Backend => "backend error",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::AlreadyHeld => "already held",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The error of every fallible operation in this crate.
///
/// Opaque, with a [`kind`](Error::kind) and `is_*` questions to act on, a human message and an
/// optional boxed source. `Display` prints the message only; walk [`source`](StdError::source)
/// for the cause (so the cause is never printed twice).
pub struct Error {
    kind: ErrorKind,
    message: String,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
}

/// `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// Creates an error of `kind` with a message saying what was wrong.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error { kind, message: message.into(), source: None }
    }

    /// Attaches the underlying cause.
    #[must_use]
    pub fn with_source(mut self, source: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Error {
        self.source = Some(source.into());
        self
    }

    /// A transient backend failure (connection refused, I/O error, timeout inside the driver).
    pub fn unavailable(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unavailable, message)
    }

    /// A non-transient backend failure.
    pub fn backend(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Backend, message)
    }

    /// An invalid setting or input.
    pub fn config(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::InvalidConfig, message)
    }

    /// The session is expired.
    pub fn session_expired(session: impl fmt::Display) -> Error {
        Error::new(ErrorKind::SessionExpired, format!("session {session} expired"))
    }

    /// The error of a call on a coordinator's current session: that session expiring under the
    /// call is `Unavailable` (the coordinator replaces it; retry), with the expiry as its source,
    /// as a call made while it is being replaced is. Any other error is returned as it is.
    pub(crate) fn on_replaced_session(self) -> Error {
        if self.kind != ErrorKind::SessionExpired {
            return self;
        }
        Error::unavailable("the coordinator's session expired during the call and is being replaced").with_source(self)
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The message, without the source.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True when retrying later may succeed (`Unavailable` or `Timeout`).
    pub fn is_retryable(&self) -> bool {
        matches!(self.kind, ErrorKind::Unavailable | ErrorKind::Timeout)
    }

    /// True for [`ErrorKind::SessionExpired`].
    pub fn is_session_expired(&self) -> bool {
        self.kind == ErrorKind::SessionExpired
    }

    /// True for [`ErrorKind::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        self.kind == ErrorKind::LeaseLost
    }

    /// True for [`ErrorKind::Timeout`].
    pub fn is_timeout(&self) -> bool {
        self.kind == ErrorKind::Timeout
    }

    /// True for [`ErrorKind::Closed`].
    pub fn is_closed(&self) -> bool {
        self.kind == ErrorKind::Closed
    }

    /// True for [`ErrorKind::InvalidName`] and [`ErrorKind::InvalidConfig`].
    pub fn is_invalid_input(&self) -> bool {
        matches!(self.kind, ErrorKind::InvalidName | ErrorKind::InvalidConfig)
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Error");
        d.field("kind", &self.kind).field("message", &self.message);
        if let Some(s) = &self.source {
            d.field("source", s);
        }
        d.finish()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source.as_deref().map(|e| e as &(dyn StdError + 'static))
    }
}

/// Formats an error with its whole source chain, `a: b: c` (for logs and the CLI).
pub fn display_chain(err: &(dyn StdError + 'static)) -> String {
    let mut out = err.to_string();
    let mut cur = err.source();
    while let Some(e) = cur {
        let s = e.to_string();
        if !out.ends_with(&s) {
            out.push_str(": ");
            out.push_str(&s);
        }
        cur = e.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_does_not_repeat_source() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let e = Error::unavailable("cannot reach redis at 127.0.0.1:1").with_source(io);
        assert_eq!(e.to_string(), "cannot reach redis at 127.0.0.1:1");
        assert!(e.source().is_some());
        assert_eq!(display_chain(&e), "cannot reach redis at 127.0.0.1:1: refused");
        assert!(e.is_retryable());
    }
}
