//! Operations on a standalone server: one script per operation (the session's keep-alive renews
//! the session, every lease it holds and every membership in one call).

use std::time::{Duration, Instant};

use super::book::Item;
use super::reply::{self, array, int, string, unexpected};
use super::scripts::{keys, SCRIPTS};
use super::{ms, Inner};
use crate::backend::{Acquire, Holder, KeepAlive, Member, SessionGrant};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId, Token};

/// Opens a session (the same single script on standalone and Cluster).
pub(crate) fn open_session(inner: &Inner, d: Duration, metadata: &str) -> Result<SessionGrant> {
    let sid = SessionId::random();
    let script = &SCRIPTS.open_session;
    let v = inner.scripting.eval(
        script,
        &[keys::session(sid.as_str())],
        &[ms(d), metadata.to_string()],
        inner.deadline(),
    )?;
    let remaining = int(&v).ok_or_else(|| unexpected(script.name(), &v))?;
    log::debug!("redis session {sid} opened (lease duration {d:?})");
    Ok(SessionGrant { id: sid, remaining: reply::millis(remaining, d) })
}

pub(crate) fn keep_alive(inner: &Inner, sid: &SessionId, d: Duration) -> Result<KeepAlive> {
    let script = &SCRIPTS.keep_alive;
    let abandoned = inner.books.with(sid, |b| b.live_abandoned(Instant::now()));
    let mut args = vec![sid.to_string(), ms(d)];
    for (name, token) in &abandoned {
        args.push(name.to_string());
        args.push(token.to_string());
    }
    let s = sid.as_str();
    let v = inner.scripting.eval(
        script,
        &[keys::session(s), keys::session_leases(s), keys::session_groups(s)],
        &args,
        inner.deadline(),
    )?;
    let items = array(&v).ok_or_else(|| unexpected(script.name(), &v))?;
    let first = items.first().and_then(int).ok_or_else(|| unexpected(script.name(), &v))?;
    if first < 0 {
        inner.books.forget(sid);
        log::info!("redis session {sid} is expired");
        return Ok(KeepAlive::Expired);
    }
    let mut owned = Vec::with_capacity(items.len() / 2);
    let mut pairs = Vec::with_capacity(items.len() / 2);
    for pair in items[1..].chunks(2) {
        let [n, t] = pair else { return Err(unexpected(script.name(), &v)) };
        let name = string(n).ok_or_else(|| unexpected(script.name(), &v))?;
        let name = Name::new(&name).map_err(|e| {
            Error::backend(format!("session {sid}: corrupt lease name {name:?} in its redis index")).with_source(e)
        })?;
        let token = reply::token(t, &format!("lease {name}"), script.name())?;
        if !abandoned.iter().any(|(a, _)| *a == name) {
            pairs.push((name, token));
        }
    }
    inner.books.with(sid, |b| {
        for (name, token) in pairs {
            if b.reportable(&name, token) {
                owned.push((name, token));
            } else {
                log::debug!("session {sid}: not reporting lease {name} (token {token}): its acquire is in flight");
            }
        }
    });
    Ok(KeepAlive::Alive { remaining: reply::millis(first, d), owned })
}

pub(crate) fn close_session(inner: &Inner, sid: &SessionId) -> Result<()> {
    let s = sid.as_str();
    inner.scripting.eval(
        &SCRIPTS.close_session,
        &[keys::session(s), keys::session_leases(s), keys::session_groups(s)],
        &[sid.to_string()],
        inner.deadline(),
    )?;
    inner.books.forget(sid);
    log::debug!("redis session {sid} closed");
    Ok(())
}

/// The decoded reply of an acquire script.
pub(crate) enum Acquired {
    Expired,
    Busy,
    Term { token: Token, remaining_ms: i64, new: bool, duration_ms: i64 },
}

fn decode_acquire(script: &str, v: &redis::Value, name: &Name) -> Result<Acquired> {
    let items = array(v).ok_or_else(|| unexpected(script, v))?;
    match items.first().and_then(int) {
        Some(-1) => Ok(Acquired::Expired),
        Some(0) => Ok(Acquired::Busy),
        Some(1) if items.len() >= 5 => Ok(Acquired::Term {
            token: reply::token(&items[1], &format!("lease {name}"), script)?,
            remaining_ms: int(&items[2]).ok_or_else(|| unexpected(script, v))?,
            new: int(&items[3]) == Some(1),
            duration_ms: int(&items[4]).ok_or_else(|| unexpected(script, v))?,
        }),
        _ => Err(unexpected(script, v)),
    }
}

pub(crate) fn acquire(inner: &Inner, sid: &SessionId, name: &Name) -> Result<Acquire> {
    let script = &SCRIPTS.acquire;
    let s = sid.as_str();
    let keys = [keys::session(s), keys::session_leases(s), keys::lease(name.as_str())];
    let args = [sid.to_string(), name.to_string()];
    let deadline = inner.deadline();
    let _guard = inner.books.inflight(sid, Item::Lease(name.clone()));
    let wait = inner.options.wait_replicas;
    // Name the lease: a script error here is usually data someone else corrupted under this key.
    let named = |e: Error| Error::new(e.kind(), format!("acquire of lease '{name}' failed")).with_source(e);
    let (v, acked) = if wait > 0 {
        let (v, n) = inner.scripting.eval_and_wait(script, &keys, &args, wait, deadline).map_err(named)?;
        (v, Some(n))
    } else {
        (inner.scripting.eval(script, &keys, &args, deadline).map_err(named)?, None)
    };
    match decode_acquire(script.name(), &v, name)? {
        Acquired::Expired => Err(Error::session_expired(sid)),
        Acquired::Busy => Ok(Acquire::Busy),
        Acquired::Term { token, remaining_ms, new, duration_ms } => {
            let d = reply::millis(duration_ms, Duration::MAX);
            if let Some(acked) = acked.filter(|a| *a < wait) {
                let what = if new { "new term" } else { "term" };
                // Abandon (and release) the term only if no other acquire of this session
                // reported it meanwhile: that one holds it legitimately.
                let abandoned = new && inner.books.with(sid, |b| b.try_abandon(name.clone(), token, d));
                if abandoned {
                    let released = inner.scripting.eval(
                        &SCRIPTS.release,
                        &[keys::session_leases(s), keys::lease(name.as_str())],
                        &[sid.to_string(), name.to_string(), token.to_string()],
                        inner.cleanup_deadline(deadline),
                    );
                    if let Err(e) = released {
                        log::warn!(
                            "session {sid}: releasing lease {name} (token {token}) after a failed WAIT failed ({e}); \
                             renewals keep releasing it and never report it"
                        );
                    }
                }
                return Err(Error::unavailable(format!(
                    "session {sid}: only {acked} of {wait} redis replicas acknowledged the {what} of lease {name} \
                     (token {token}) within {:?}; the acquire failed{}",
                    inner.options.query_timeout,
                    if abandoned { " and the term was released" } else { "" }
                )));
            }
            if !inner.books.with(sid, |b| b.try_confirm(name, token)) {
                return Err(Error::unavailable(format!(
                    "session {sid}: lease {name} (token {token}) was abandoned by a late acquire of this session \
                     and is being released; try again"
                )));
            }
            Ok(Acquire::Acquired { token, remaining: reply::millis(remaining_ms, d) })
        }
    }
}

pub(crate) fn release(inner: &Inner, sid: &SessionId, name: &Name, token: Token) -> Result<()> {
    let s = sid.as_str();
    inner.scripting.eval(
        &SCRIPTS.release,
        &[keys::session_leases(s), keys::lease(name.as_str())],
        &[sid.to_string(), name.to_string(), token.to_string()],
        inner.deadline(),
    )?;
    inner.books.with(sid, |b| b.released(name, token));
    Ok(())
}

pub(crate) fn holder(inner: &Inner, name: &Name) -> Result<Option<Holder>> {
    let script = &SCRIPTS.holder;
    let v = inner.scripting.eval(script, &[keys::lease(name.as_str())], &[], inner.deadline())?;
    let items = array(&v).ok_or_else(|| unexpected(script.name(), &v))?;
    if items.is_empty() {
        return Ok(None);
    }
    let [sid, token, remaining, metadata] = items else { return Err(unexpected(script.name(), &v)) };
    let sid = string(sid).ok_or_else(|| unexpected(script.name(), &v))?;
    Ok(Some(Holder {
        session: SessionId::parse(&sid)
            .map_err(|e| Error::backend(format!("lease {name}: corrupt holder {sid:?} in redis")).with_source(e))?,
        token: reply::token(token, &format!("lease {name}"), script.name())?,
        remaining: reply::millis(int(remaining).ok_or_else(|| unexpected(script.name(), &v))?, Duration::MAX),
        metadata: string(metadata).unwrap_or_default(),
    }))
}

pub(crate) fn join(inner: &Inner, sid: &SessionId, group: &Name) -> Result<()> {
    let script = &SCRIPTS.join;
    let s = sid.as_str();
    let v = inner.scripting.eval(
        script,
        &[keys::session(s), keys::session_groups(s), keys::group(group.as_str())],
        &[sid.to_string(), group.to_string()],
        inner.deadline(),
    )?;
    match int(&v) {
        Some(r) if r < 0 => Err(Error::session_expired(sid)),
        Some(_) => Ok(()),
        None => Err(unexpected(script.name(), &v)),
    }
}

pub(crate) fn leave(inner: &Inner, sid: &SessionId, group: &Name) -> Result<()> {
    inner.scripting.eval(
        &SCRIPTS.leave,
        &[keys::session_groups(sid.as_str()), keys::group(group.as_str())],
        &[sid.to_string(), group.to_string()],
        inner.deadline(),
    )?;
    Ok(())
}

pub(crate) fn members(inner: &Inner, group: &Name) -> Result<Vec<Member>> {
    let script = &SCRIPTS.members;
    let v = inner.scripting.eval(script, &[keys::group(group.as_str())], &[], inner.deadline())?;
    let items = array(&v).ok_or_else(|| unexpected(script.name(), &v))?;
    let mut members = Vec::with_capacity(items.len() / 2);
    for pair in items.chunks(2) {
        let [sid, metadata] = pair else { return Err(unexpected(script.name(), &v)) };
        let sid = string(sid).ok_or_else(|| unexpected(script.name(), &v))?;
        let session = SessionId::parse(&sid)
            .map_err(|e| Error::backend(format!("group {group}: corrupt member {sid:?} in redis")).with_source(e))?;
        members.push(Member { session, metadata: string(metadata).unwrap_or_default() });
    }
    members.sort();
    Ok(members)
}
