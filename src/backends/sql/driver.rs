//! What each dialect implements ([`Driver`]) and the raw rows it returns before the backend
//! converts them: one bounded call per method.

use std::time::{Duration, Instant};

use crossbeam_channel::Sender;

use crate::backend::{CheckItem, Notification, Topic};
#[allow(unused_imports)] // doc links
use crate::backend::{LeaseBackend, TermRemaining};
use crate::error::Result;
use crate::types::{Name, SessionId};

use super::{ListBounds, RawListing};

/// The server-side limit of a statement (PostgreSQL `statement_timeout`; MariaDB
/// `max_statement_time`, MySQL 8 `max_execution_time`, and `innodb_lock_wait_timeout` in whole
/// seconds, at least 1) for a query timeout `qt`: a little less than `qt` (a quarter of it, at most
/// 250 ms, less), so that a statement waiting for a lock ends with the server's own error before
/// the call's deadline, `qt` from the call's start, ends it on the client.
pub(crate) fn server_limit(qt: Duration) -> Duration {
    qt - (qt / 4).min(Duration::from_millis(250))
}

/// What a dialect's acquire reports, before conversion.
#[derive(Debug)]
pub(crate) enum RawAcquire {
    /// Held with `token`; `remaining_ms` is the session's time left, `None` when the acquire did
    /// not read it (the term lasts as long as the session: [`TermRemaining::WithSession`]).
    Acquired {
        token: i64,
        remaining_ms: Option<i64>,
    },
    Busy,
    Expired,
}

/// A holder row: session id, token, remaining ms, metadata.
pub(crate) type RawHolder = (String, i64, i64, String);

/// What a live session's keep-alive read, before conversion.
#[derive(Debug, Default)]
pub(crate) struct RawAlive {
    /// The session's remaining time (ms).
    pub(crate) remaining_ms: i64,
    /// The owned `(lease name, token)` rows.
    pub(crate) owned: Vec<(String, i64)>,
    /// The group names of the session's membership rows.
    pub(crate) groups: Vec<String>,
    /// The session's time left (ms) when the keep-alive found it, before renewing (`None`: the
    /// dialect's keep-alive does not say).
    pub(crate) before_ms: Option<i64>,
}

/// A keep-alive reply: `None` when expired.
pub(crate) type RawKeepAlive = Option<RawAlive>;

/// One row of a keep-alive result set — `(remaining ms, lease name, token, group name)`, the same
/// shape on both dialects: a lease row has a name and a token, a membership row a group name, and
/// a session owning nothing still yields one row of NULLs (for its remaining time) — added to
/// `alive` (the first row also sets the remaining time).
pub(crate) fn add_keep_alive_row(
    alive: &mut Option<RawAlive>,
    remaining_ms: i64,
    lease: Option<String>,
    token: Option<i64>,
    group: Option<String>,
) {
    let alive = alive.get_or_insert_with(|| RawAlive { remaining_ms, ..RawAlive::default() });
    if let (Some(name), Some(token)) = (lease, token) {
        alive.owned.push((name, token));
    }
    if let Some(group) = group {
        alive.groups.push(group);
    }
}

/// The per-dialect statements. Every method is one bounded call (checkout + statements + retries).
pub(crate) trait Driver: Send + Sync + 'static {
    fn init_schema(&self) -> Result<()>;
    fn open_session(&self, id: &SessionId, lease_ms: i64, metadata: &str) -> Result<()>;
    /// `None` when the session is expired or unknown (and then deleted).
    fn keep_alive(&self, id: &SessionId, lease_ms: i64) -> Result<RawKeepAlive>;
    fn close_session(&self, id: &SessionId) -> Result<()>;
    fn acquire(&self, id: &SessionId, name: &Name) -> Result<RawAcquire>;
    fn release(&self, id: &SessionId, name: &Name, token: i64) -> Result<()>;
    fn holder(&self, name: &Name) -> Result<Option<RawHolder>>;
    /// `false` when the session is not alive.
    fn join(&self, id: &SessionId, group: &Name) -> Result<bool>;
    fn leave(&self, id: &SessionId, group: &Name) -> Result<()>;
    fn members(&self, group: &Name) -> Result<Vec<(String, String)>>;
    fn purge(&self, limit: usize) -> Result<usize>;
    /// The three listing statements (held leases, live members, live sessions) within `bounds`,
    /// one after the other on one connection, each its own snapshot (see [`LeaseBackend::list`]).
    fn list(&self, bounds: &ListBounds) -> Result<RawListing>;
    fn now_ms(&self) -> Result<i64>;
    fn schema_tables(&self) -> Result<i64>;
    /// The stored limit of semaphore `name`, storing `permits` first when given and none is stored.
    fn semaphore_limit(&self, name: &Name, permits: Option<i64>) -> Result<Option<i64>>;
    /// Whether the semaphore table (added after the first release) exists.
    fn semaphore_table(&self) -> Result<bool>;
    /// The name of a stored routine of the schema that is missing (MySQL: the keep-alive
    /// procedure; its absence costs a round trip per keep-alive, nothing else).
    fn missing_routine(&self) -> Result<Option<&'static str>> {
        Ok(None)
    }
    fn server_version(&self) -> Result<String>;
    fn connection_ids(&self) -> Vec<u64>;
    /// Whether the dialect pushes releases (PostgreSQL: `LISTEN`/`NOTIFY`).
    fn push_release(&self) -> bool {
        false
    }
    /// Whether the dialect pushes membership changes (PostgreSQL: `LISTEN`/`NOTIFY`).
    fn push_membership(&self) -> bool {
        false
    }
    /// A one-shot interest in `topic`, a lease's release or a group's change (see
    /// [`LeaseBackend::watch`]); `false` when the dialect cannot push it now (the caller polls).
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let _ = (topic, notify);
        Ok(false)
    }
    /// The server-side id of the notification connection while it is open.
    fn notification_connection_id(&self) -> Option<u64> {
        None
    }
    /// The dialect's own `check` items (the `tls` item: whether a connection is encrypted and the
    /// server certificate verified), after `reachable`.
    fn extra_checks(&self) -> Vec<CheckItem> {
        Vec::new()
    }
    /// How long any one call of this driver can take (see [`LeaseBackend::call_bound`]); `None`
    /// when a call may block indefinitely.
    fn call_bound(&self) -> Option<Duration> {
        None
    }
    /// [`release`](Driver::release) within `deadline` (the dialects that bound their calls end it
    /// by then; the others ignore it).
    fn release_until(&self, id: &SessionId, name: &Name, token: i64, deadline: Instant) -> Result<()> {
        let _ = deadline;
        self.release(id, name, token)
    }
}
