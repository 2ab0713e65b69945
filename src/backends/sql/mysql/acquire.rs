//! The MySQL acquire: one plain upsert for a free or new lease, the schema's procedure for the
//! rest, and the names this backend saw busy (which skip the upsert).
//!
//! A free or new lease — the uncontended lock — is taken by `acquire-free.sql` alone: one upsert
//! whose OK packet carries the token (`LAST_INSERT_ID`) and no time left, since MySQL has no
//! `RETURNING`. The term lasts as long as the session
//! ([`TermRemaining::WithSession`](crate::backend::TermRemaining)), so no second statement and no stored
//! procedure (whose call and result set cost the server more than the upsert itself) is needed.
//! When the upsert takes nothing — the lease is held (by this session, by a live or by an expired
//! holder) or this session is not alive — the acquire continues with `CALL simba_acquire_v2` (or,
//! without it, its statements), which classifies and, for an expired holder, takes over with the
//! holder's session row locked. That costs a second round trip, so a name the backend has just
//! seen busy goes straight to the procedure next time ([`Contended`]): a waiter polling a held
//! lock pays one round trip per attempt, as before.

use std::collections::HashSet;

use parking_lot::Mutex;

use super::conn::{col, fail, MyConn, KIND};
use super::{q, MyDriver, RawAcquire, Routine};
use crate::backends::sql::pool::Fail;
use crate::error::{Error, Result};
use crate::types::{Name, SessionId};

/// How many busy names [`Contended`] remembers before it starts over.
const CONTENDED_NAMES: usize = 1024;

/// The names whose latest acquire here found them held by another session: their next acquire
/// skips the free-lease upsert (it would only cost a round trip) and calls the procedure at once.
/// A heuristic only — either path answers the same — bounded by starting over when full.
#[derive(Debug, Default)]
pub(super) struct Contended(Mutex<HashSet<Name>>);

impl Contended {
    fn contains(&self, name: &Name) -> bool {
        self.0.lock().contains(name)
    }

    /// Remembers what the full acquire of `name` answered: busy names are remembered, a name
    /// this session got is forgotten (after its release it is most likely free).
    fn answered(&self, name: &Name, reply: &RawAcquire) {
        let mut names = self.0.lock();
        match reply {
            RawAcquire::Busy => {
                if names.len() >= CONTENDED_NAMES {
                    names.clear();
                }
                names.insert(name.clone());
            }
            RawAcquire::Acquired { .. } => {
                names.remove(name);
            }
            RawAcquire::Expired => {}
        }
    }
}

impl MyDriver {
    /// The acquire (see the module doc): the free-lease upsert unless `name` was just seen busy,
    /// then — when it took nothing — the procedure, or its statements while the procedure is
    /// missing.
    pub(super) fn acquire_lease(&self, id: &SessionId, name: &Name) -> Result<RawAcquire> {
        let what = format!("acquire '{name}' for session {id}");
        let try_free = !self.contended.contains(name);
        self.run(&what, |c| {
            if try_free {
                if let Some(token) = take_free(c, id, name, &what)? {
                    return Ok(RawAcquire::Acquired { token, remaining_ms: None });
                }
            }
            let reply = self.acquire_full(c, id, name, &what)?;
            self.contended.answered(name, &reply);
            Ok(reply)
        })
    }

    /// The acquire of a lease that may be held: `CALL simba_acquire_v2`, or its statements.
    fn acquire_full(&self, c: &mut MyConn, id: &SessionId, name: &Name, what: &str) -> Result<RawAcquire, Fail> {
        if self.acquire_routine.usable() {
            match c.call_rows(q::ACQUIRE_CALL, (id.as_str(), name.as_str())) {
                Ok(rows) => {
                    self.acquire_routine.answered();
                    let Some(row) = rows.first() else {
                        return Err(Fail::Stop(Error::backend(format!("{KIND}: {what}: no reply row"))));
                    };
                    let remaining_ms: Option<i64> = col(row, 0, what)?;
                    let token: Option<i64> = col(row, 1, what)?;
                    return Ok(match (remaining_ms, token) {
                        (None, _) => RawAcquire::Expired,
                        (Some(_), None) => RawAcquire::Busy,
                        (Some(remaining_ms), Some(token)) => {
                            RawAcquire::Acquired { token, remaining_ms: Some(remaining_ms) }
                        }
                    });
                }
                Err(e) => match Routine::is_unavailable(&e) {
                    Some(se) => self.acquire_routine.unavailable(se),
                    None => return Err(fail(&mut c.broken, e, what)),
                },
            }
        }
        acquire_statements(c, id, name, what)
    }
}

/// The token of an acquire upsert's term from its OK packet: affected rows 1 = inserted (token 1),
/// 2 = taken (the token is `LAST_INSERT_ID`), anything else = not taken.
fn taken(affected: u64, last_id: u64) -> Option<i64> {
    match (affected, i64::try_from(last_id)) {
        (1, _) => Some(1),
        (2, Ok(token)) if token > 0 => Some(token),
        _ => None,
    }
}

/// `acquire-free.sql`: the token when the upsert took a free row (or inserted a new one).
fn take_free(c: &mut MyConn, id: &SessionId, name: &Name, what: &str) -> Result<Option<i64>, Fail> {
    let (affected, last_id) = c.exec(q::ACQUIRE_FREE, (name.as_str(), id.as_str()), what)?;
    Ok(taken(affected, last_id))
}

/// The acquire as the two statements the procedure replaces: a plain read, then (when the lease
/// looks takeable) the upsert; an upsert that did not take the row is classified by one more read.
fn acquire_statements(c: &mut MyConn, id: &SessionId, name: &Name, what: &str) -> Result<RawAcquire, Fail> {
    for round in 0..2 {
        let rows = c.rows(q::ACQUIRE_OBSERVE, (name.as_str(), id.as_str()), what)?;
        let Some(row) = rows.first() else {
            return Ok(RawAcquire::Expired);
        };
        let remaining_ms: i64 = col(row, 0, what)?;
        let holder: Option<String> = col(row, 1, what)?;
        let token: Option<i64> = col(row, 2, what)?;
        let holder_alive: i64 = col(row, 3, what)?;
        if holder.as_deref() == Some(id.as_str()) {
            if let Some(token) = token {
                return Ok(RawAcquire::Acquired { token, remaining_ms: Some(remaining_ms) });
            }
        }
        if holder_alive != 0 || round == 1 {
            return Ok(RawAcquire::Busy);
        }
        let observed = holder.unwrap_or_default();
        let (affected, last_id) = c.exec(
            q::ACQUIRE,
            (name.as_str(), observed.as_str(), id.as_str(), observed.as_str(), observed.as_str()),
            what,
        )?;
        if let Some(token) = taken(affected, last_id) {
            return Ok(RawAcquire::Acquired { token, remaining_ms: Some(remaining_ms) });
        }
    }
    Ok(RawAcquire::Busy)
}
