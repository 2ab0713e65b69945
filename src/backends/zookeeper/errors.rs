//! How ZooKeeper client errors become ours: which are transient (the outcome of a write is
//! unknown), which end the session, and the messages for denials and failed authentication,
//! naming the backend's identity (never its credentials).

use std::time::Duration;

use zookeeper_client::Error as ZkError;

use super::ZookeeperOptions;
use crate::error::{Error, ErrorKind, Result};
use crate::types::Token;

/// Why a ZooKeeper call did not succeed.
#[derive(Debug)]
pub(super) enum Fail {
    Zk(ZkError),
    /// Our deadline passed; the request may still take effect.
    Timeout,
}

impl From<ZkError> for Fail {
    fn from(e: ZkError) -> Fail {
        Fail::Zk(e)
    }
}

impl Fail {
    /// The session is gone for good (expired, closed, moved or failed authentication).
    pub(super) fn is_session_end(&self) -> bool {
        matches!(
            self,
            Fail::Zk(ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved | ZkError::AuthFailed)
        )
    }

    /// The outcome of a write is unknown: it may or may not have been applied.
    pub(super) fn is_unknown_outcome(&self) -> bool {
        match self {
            Fail::Timeout => true,
            Fail::Zk(e) => is_transient(e),
        }
    }

    pub(super) fn into_error(self, what: &str, timeout: Duration, who: &str) -> Error {
        match self {
            Fail::Timeout => Error::unavailable(format!("ZooKeeper {what} did not complete within {timeout:?}")),
            Fail::Zk(e) => zk_error(e, what, who),
        }
    }
}

/// Errors of the connection rather than of the request: the request may or may not have been
/// applied, and retrying later may succeed. The client reports I/O errors of its connection (a
/// broken pipe, a reset, "no response from connection") to the requests in flight as `Custom`.
pub(super) fn is_transient(e: &ZkError) -> bool {
    matches!(
        e,
        ZkError::ConnectionLoss
            | ZkError::Timeout
            | ZkError::NoHosts
            | ZkError::Throttled
            | ZkError::Custom(_)
            | ZkError::UnexpectedError(_)
            | ZkError::UnmarshalError { .. }
    )
}

/// Maps a client error to ours, with the client error as source; `who` describes the backend's
/// identity (see [`describe_identity`]) for denials.
pub(super) fn zk_error(e: ZkError, what: &str, who: &str) -> Error {
    let kind = match &e {
        e if is_transient(e) => ErrorKind::Unavailable,
        ZkError::SessionExpired | ZkError::ClientClosed | ZkError::SessionMoved => ErrorKind::SessionExpired,
        _ => ErrorKind::Backend,
    };
    let msg = match &e {
        ZkError::NoAuth => format!(
            "ZooKeeper denied {what} to the backend's identity ({who}): the ACL of the node or of its parent \
             does not grant it; check the credentials (ZookeeperOptions::auth / SIMBA_ZOOKEEPER_AUTH, \
             ZookeeperOptions::sasl / SIMBA_ZOOKEEPER_SASL) and the ACLs under the root (retrying cannot help)"
        ),
        ZkError::InvalidAcl => format!(
            "ZooKeeper rejected the ACL of {what} for the backend's identity ({who}): creator-all and auth ACL \
             entries need an identity the server authenticated; check SIMBA_ZOOKEEPER_ACL and the credentials"
        ),
        ZkError::AuthFailed => {
            format!("ZooKeeper rejected the backend's authentication ({who}) during {what}; {AUTH_FAILED_HINT}")
        }
        ZkError::BadArguments(_) => format!("ZooKeeper rejected the arguments of {what}"),
        _ => format!("ZooKeeper {what} failed"),
    };
    Error::new(kind, msg).with_source(e)
}

/// What to check when the server rejects the backend's authentication.
pub(super) const AUTH_FAILED_HINT: &str =
    "check the SASL user and password (ZookeeperOptions::sasl / SIMBA_ZOOKEEPER_SASL) \
     against the server's JAAS configuration and the auth info (ZookeeperOptions::auth / SIMBA_ZOOKEEPER_AUTH) \
     against its auth providers (retrying cannot help)";

/// The backend's identity as the server sees it, for messages: e.g. `digest user simba`, `SASL
/// user simba`, or anonymous. Never the credentials.
pub(super) fn describe_identity(opts: &ZookeeperOptions) -> String {
    let mut parts: Vec<String> = opts
        .auth
        .iter()
        .map(|a| match a.scheme() {
            "digest" => {
                let creds = String::from_utf8_lossy(a.credentials());
                format!("digest user {}", creds.split(':').next().unwrap_or_default())
            }
            scheme => format!("auth scheme {scheme}"),
        })
        .collect();
    if let Some(sasl) = &opts.sasl {
        parts.push(format!("SASL user {}", sasl.user()));
    }
    if parts.is_empty() {
        "no credentials: anonymous, only world:anyone entries apply".into()
    } else {
        parts.join(" + ")
    }
}

pub(super) fn token_of(czxid: i64, what: &str) -> Result<Token> {
    Token::from_backend(czxid, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_kinds() {
        assert_eq!(zk_error(ZkError::ConnectionLoss, "x", "me").kind(), ErrorKind::Unavailable);
        assert_eq!(zk_error(ZkError::SessionExpired, "x", "me").kind(), ErrorKind::SessionExpired);
        let e = zk_error(ZkError::NoAuth, "create of /a", "digest user u");
        assert!(e.to_string().contains("(digest user u)"), "{e}");
        assert_eq!(e.kind(), ErrorKind::Backend);
        assert!(e.to_string().contains("denied create of /a"), "{e}");
        assert!(!e.to_string().contains("not authorized"), "Display must not repeat the source: {e}");
    }
}
