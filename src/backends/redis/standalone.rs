//! Operations on a standalone server: one script per operation. A term lives while its session
//! key does, so the session's keep-alive renews the session and its memberships in one call and
//! writes nothing per lease; it lists the session's lease index only when the index changed since
//! the listing this client last received.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::book::{Item, Listing, Logs};
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
    let (abandoned, listing) = inner.books.with(sid, |b| (b.live_abandoned(Instant::now()), b.listing.clone()));
    let known = listing.as_ref().map(|l| l.gen.clone()).unwrap_or_default();
    let mut args = vec![sid.to_string(), ms(d), known];
    for (name, token) in &abandoned {
        args.push(name.to_string());
        args.push(token.to_string());
    }
    let s = sid.as_str();
    let v = inner.scripting.eval(
        script,
        &[keys::session(s), keys::session_terms(s), keys::session_groups(s)],
        &args,
        inner.deadline(),
    )?;
    let Some(Renewed { remaining_ms, gen, owned: listed, groups, before_ms }) =
        decode_keep_alive(script.name(), &v, sid)?
    else {
        inner.books.forget(sid);
        log::info!("redis session {sid} is expired");
        return Ok(KeepAlive::Expired);
    };
    // The index is listed only when it changed since the listing the client named (`gen`);
    // otherwise that listing is still the truth.
    let all = match listed {
        Some(pairs) => {
            let listing = Listing { gen, owned: Arc::new(pairs.into_iter().collect()) };
            let all = listing.owned.clone();
            inner.books.with(sid, |b| b.listing = Some(listing));
            all
        }
        None => match listing {
            Some(l) if l.gen == gen => l.owned,
            _ => return Err(unexpected(script.name(), &v)),
        },
    };
    let mut owned = Vec::with_capacity(all.len());
    // What to log is collected under the books' lock and written after it (see `Logs`).
    let mut logs = Logs::new(module_path!());
    inner.books.with(sid, |b| {
        for (name, token) in all.iter() {
            if abandoned.iter().any(|(a, _)| a == name) {
                continue;
            }
            if b.reportable(name, *token) {
                owned.push((name.clone(), *token));
            } else {
                logs.push(
                    log::Level::Debug,
                    format!("session {sid}: not reporting lease {name} (token {token}): its acquire is in flight"),
                );
            }
        }
    });
    logs.write();
    let remaining_before = Some(Duration::from_millis(before_ms.unsigned_abs()));
    Ok(KeepAlive::Alive {
        remaining: reply::millis(remaining_ms, d),
        owned,
        groups,
        unknown: Vec::new(),
        remaining_before,
    })
}

/// The decoded reply of `keep_alive.lua` for a live session.
#[derive(Debug, PartialEq)]
struct Renewed {
    remaining_ms: i64,
    /// The generation of the session's lease index.
    gen: String,
    /// The lease index — every lease the session owns, with its token (abandoned terms included) —
    /// or `None` when it did not change since the generation the client sent.
    owned: Option<Vec<(Name, Token)>>,
    /// Every group the session is still a member of, sorted.
    groups: Vec<Name>,
    /// The session's time left (ms) when the script found it, before renewing.
    before_ms: i64,
}

/// Decodes `{-1}` (`None`: the session is gone) or
/// `{remaining_ms, gen, {name, token, ...} or nil, {group, ...}, before_ms}`. Any other shape is a
/// `Backend` error.
fn decode_keep_alive(script: &str, v: &redis::Value, sid: &SessionId) -> Result<Option<Renewed>> {
    let items = array(v).ok_or_else(|| unexpected(script, v))?;
    let (first, gen, owned, groups, before) = match items {
        [first] if int(first).is_some_and(|r| r < 0) => return Ok(None),
        [first, gen, owned, groups, before] => (first, gen, owned, groups, before),
        _ => return Err(unexpected(script, v)),
    };
    let remaining_ms = int(first).filter(|r| *r >= 0).ok_or_else(|| unexpected(script, v))?;
    let before_ms = int(before).filter(|r| *r > 0).ok_or_else(|| unexpected(script, v))?;
    let gen = int(gen).filter(|g| *g >= 0).ok_or_else(|| unexpected(script, v))?.to_string();
    let owned = match owned {
        redis::Value::Nil | redis::Value::Boolean(false) => None,
        owned => {
            let pairs = array(owned).ok_or_else(|| unexpected(script, v))?;
            let mut leases = Vec::with_capacity(pairs.len() / 2);
            for pair in pairs.chunks(2) {
                let [n, t] = pair else { return Err(unexpected(script, v)) };
                let name = string(n).ok_or_else(|| unexpected(script, v))?;
                let name = reply::index_name(sid, &name, "lease")?;
                let token = reply::token(t, &format!("lease {name}"), script)?;
                leases.push((name, token));
            }
            Some(leases)
        }
    };
    let groups = reply::group_names(groups, sid, script)?;
    Ok(Some(Renewed { remaining_ms, gen, owned, groups, before_ms }))
}

pub(crate) fn close_session(inner: &Inner, sid: &SessionId) -> Result<()> {
    let s = sid.as_str();
    inner.scripting.eval(
        &SCRIPTS.close_session,
        &[keys::session(s), keys::session_terms(s), keys::session_groups(s), keys::session_leases(s)],
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
    /// `gen`: the index's generation after this acquire indexed the term, 0 when it changed
    /// nothing in the index.
    Term {
        token: Token,
        remaining_ms: i64,
        new: bool,
        duration_ms: i64,
        gen: i64,
    },
}

fn decode_acquire(script: &str, v: &redis::Value, name: &Name) -> Result<Acquired> {
    let items = array(v).ok_or_else(|| unexpected(script, v))?;
    match items.first().and_then(int) {
        Some(-1) => Ok(Acquired::Expired),
        Some(0) => Ok(Acquired::Busy),
        Some(1) if items.len() >= 6 => Ok(Acquired::Term {
            token: reply::token(&items[1], &format!("lease {name}"), script)?,
            remaining_ms: int(&items[2]).ok_or_else(|| unexpected(script, v))?,
            new: int(&items[3]) == Some(1),
            duration_ms: int(&items[4]).ok_or_else(|| unexpected(script, v))?,
            gen: int(&items[5]).filter(|g| *g >= 0).ok_or_else(|| unexpected(script, v))?,
        }),
        _ => Err(unexpected(script, v)),
    }
}

pub(crate) fn acquire(inner: &Inner, sid: &SessionId, name: &Name) -> Result<Acquire> {
    let script = &SCRIPTS.acquire;
    let s = sid.as_str();
    let keys = [keys::session(s), keys::session_terms(s), keys::lease(name.as_str())];
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
        Acquired::Term { token, remaining_ms, new, duration_ms, gen } => {
            // The script indexed the term: the listing follows, so the next renewal need not
            // list the index again for this client's own change.
            inner.books.with(sid, |b| {
                b.follow_index(gen, |owned| {
                    owned.insert(name.clone(), token);
                })
            });
            let d = reply::millis(duration_ms, Duration::MAX);
            if let Some(acked) = acked.filter(|a| *a < wait) {
                let what = if new { "new term" } else { "term" };
                // Abandon (and release) the term only if no other acquire of this session
                // reported it meanwhile: that one holds it legitimately.
                let abandoned = new && inner.books.with(sid, |b| b.try_abandon(name.clone(), token, d));
                if abandoned {
                    let released = inner.scripting.eval(
                        &SCRIPTS.release,
                        &[keys::session(s), keys::session_terms(s), keys::lease(name.as_str())],
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
            Ok(Acquire::Acquired { token, remaining: reply::millis(remaining_ms, d).into() })
        }
    }
}

pub(crate) fn release(inner: &Inner, sid: &SessionId, name: &Name, token: Token) -> Result<()> {
    let s = sid.as_str();
    let script = &SCRIPTS.release;
    let v = inner.scripting.eval(
        script,
        &[keys::session(s), keys::session_terms(s), keys::lease(name.as_str())],
        &[sid.to_string(), name.to_string(), token.to_string()],
        inner.deadline(),
    )?;
    let gen = decode_release(script.name(), &v);
    inner.books.with(sid, |b| {
        b.released(name, token);
        // The script removed the name from the index: the listing follows (see `acquire`).
        if let Ok(gen) = gen {
            b.follow_index(gen, |owned| {
                owned.remove(name);
            });
        }
    });
    gen.map(|_| ())
}

/// The index generation of `release.lua`'s reply `{released, gen}` (0: the index did not change).
fn decode_release(script: &str, v: &redis::Value) -> Result<i64> {
    match array(v) {
        Some([released, gen]) if matches!(int(released), Some(0 | 1)) => {
            int(gen).filter(|g| *g >= 0).ok_or_else(|| unexpected(script, v))
        }
        _ => Err(unexpected(script, v)),
    }
}

pub(crate) fn holder(inner: &Inner, name: &Name) -> Result<Option<Holder>> {
    let v = inner.scripting.eval(&SCRIPTS.holder, &[keys::lease(name.as_str())], &[], inner.deadline())?;
    decode_holder(name, &v)
}

/// The reply of `holder.lua` for lease `name`.
pub(crate) fn decode_holder(name: &Name, v: &redis::Value) -> Result<Option<Holder>> {
    let script = &SCRIPTS.holder;
    let items = array(v).ok_or_else(|| unexpected(script.name(), v))?;
    if items.is_empty() {
        return Ok(None);
    }
    let [sid, token, remaining, metadata] = items else { return Err(unexpected(script.name(), v)) };
    let sid = string(sid).ok_or_else(|| unexpected(script.name(), v))?;
    Ok(Some(Holder {
        session: SessionId::parse(&sid)
            .map_err(|e| Error::backend(format!("lease {name}: corrupt holder {sid:?} in redis")).with_source(e))?,
        token: reply::token(token, &format!("lease {name}"), script.name())?,
        remaining: reply::millis(int(remaining).ok_or_else(|| unexpected(script.name(), v))?, Duration::MAX),
        metadata: string(metadata).unwrap_or_default(),
    }))
}

/// Stores (with `permits`) or reads a semaphore's limit: one key, the same script on standalone
/// and Cluster. With `wait_replicas`, a stored limit counts only once the replicas have it (a
/// failover that lost it would let another client store a different one).
pub(crate) fn semaphore_limit(inner: &Inner, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
    let script = &SCRIPTS.semaphore_limit;
    let keys = [keys::semaphore(name.as_str())];
    let args = [permits.map(|p| p.to_string()).unwrap_or_default()];
    let deadline = inner.deadline();
    let named = |e: Error| Error::new(e.kind(), format!("limit of semaphore '{name}' failed")).with_source(e);
    let wait = inner.options.wait_replicas;
    let v = if wait > 0 && permits.is_some() {
        let (v, acked) = inner.scripting.eval_and_wait(script, &keys, &args, wait, deadline).map_err(named)?;
        if acked < wait {
            return Err(Error::unavailable(format!(
                "the limit of semaphore '{name}' reached {acked} of the {wait} replicas wait_replicas asks for; retry"
            )));
        }
        v
    } else {
        inner.scripting.eval(script, &keys, &args, deadline).map_err(named)?
    };
    if v == redis::Value::Nil {
        return Ok(None);
    }
    let raw = string(&v).ok_or_else(|| unexpected(script.name(), &v))?;
    match raw.parse::<u32>() {
        Ok(p) if p > 0 => Ok(Some(p)),
        _ => Err(Error::backend(format!(
            "corrupt limit {raw:?} of semaphore '{name}' in redis key {}: limits are integers > 0",
            keys[0]
        ))),
    }
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
    let v = inner.scripting.eval(&SCRIPTS.members, &[keys::group(group.as_str())], &[], inner.deadline())?;
    decode_members(group, &v)
}

/// The reply of `members.lua` for `group`: its live members, sorted.
pub(crate) fn decode_members(group: &Name, v: &redis::Value) -> Result<Vec<Member>> {
    let script = &SCRIPTS.members;
    let items = array(v).ok_or_else(|| unexpected(script.name(), v))?;
    let mut members = Vec::with_capacity(items.len() / 2);
    for pair in items.chunks(2) {
        let [sid, metadata] = pair else { return Err(unexpected(script.name(), v)) };
        let sid = string(sid).ok_or_else(|| unexpected(script.name(), v))?;
        let session = SessionId::parse(&sid)
            .map_err(|e| Error::backend(format!("group {group}: corrupt member {sid:?} in redis")).with_source(e))?;
        members.push(Member { session, metadata: string(metadata).unwrap_or_default() });
    }
    members.sort();
    Ok(members)
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn name(s: &str) -> Name {
        Name::new(s).unwrap()
    }

    #[test]
    fn release_replies_name_the_index_generation_or_are_rejected() {
        let reply = |r: i64, g: i64| Value::Array(vec![Value::Int(r), Value::Int(g)]);
        assert_eq!(decode_release("release.lua", &reply(1, 9)).unwrap(), 9);
        assert_eq!(decode_release("release.lua", &reply(0, 0)).unwrap(), 0);
        for bad in [reply(2, 1), reply(1, -1), Value::Int(1), Value::Array(vec![Value::Int(1)]), Value::Nil] {
            let e = decode_release("release.lua", &bad).unwrap_err();
            assert!(e.to_string().contains("release.lua"), "{e}");
        }
    }

    #[test]
    fn keep_alive_replies_decode() {
        let sid = SessionId::random();
        let d = |v: Value| decode_keep_alive("keep_alive", &v, &sid);
        assert_eq!(d(Value::Array(vec![Value::Int(-1)])).unwrap(), None);
        let v = Value::Array(vec![
            Value::Int(900),
            Value::Int(3),
            Value::Array(vec![bulk("a"), bulk("7")]),
            Value::Array(vec![bulk("g2"), bulk("g1"), bulk("g2")]),
            Value::Int(640),
        ]);
        assert_eq!(
            d(v).unwrap(),
            Some(Renewed {
                remaining_ms: 900,
                gen: "3".into(),
                owned: Some(vec![(name("a"), Token::new(7).unwrap())]),
                groups: vec![name("g1"), name("g2")],
                before_ms: 640,
            })
        );
        let empty =
            Value::Array(vec![Value::Int(5), bulk("0"), Value::Array(vec![]), Value::Array(vec![]), Value::Int(3)]);
        assert_eq!(
            d(empty).unwrap(),
            Some(Renewed { remaining_ms: 5, gen: "0".into(), owned: Some(vec![]), groups: vec![], before_ms: 3 })
        );
        let unchanged =
            Value::Array(vec![Value::Int(5), Value::Int(12), Value::Nil, Value::Array(vec![]), Value::Int(4)]);
        assert_eq!(
            d(unchanged).unwrap(),
            Some(Renewed { remaining_ms: 5, gen: "12".into(), owned: None, groups: vec![], before_ms: 4 })
        );
    }

    #[test]
    fn malformed_keep_alive_replies_are_backend_errors() {
        let sid = SessionId::random();
        let ok_leases = || Value::Array(vec![bulk("a"), bulk("7")]);
        let ok_groups = || Value::Array(vec![bulk("g")]);
        let gen = || Value::Int(1);
        let before = || Value::Int(800);
        let bad = [
            Value::Nil,
            Value::Int(5),
            Value::Array(vec![]),
            // the flat format before the groups, and the format before the index generation
            Value::Array(vec![Value::Int(5), bulk("a"), bulk("7")]),
            Value::Array(vec![Value::Int(5), ok_leases(), ok_groups()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), ok_groups(), Value::Array(vec![])]),
            // the format before before_ms, and a before_ms that is no time left
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), ok_groups()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), ok_groups(), Value::Int(0)]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), ok_groups(), bulk("x")]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), ok_groups(), before(), before()]),
            Value::Array(vec![bulk("x"), gen(), ok_leases(), ok_groups(), before()]),
            Value::Array(vec![Value::Int(-1), gen(), ok_leases(), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), bulk("x"), ok_leases(), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), Value::Int(-2), ok_leases(), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), Value::Nil, ok_leases(), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), gen(), bulk("a"), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), gen(), Value::Array(vec![bulk("a")]), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), gen(), Value::Array(vec![bulk("a"), Value::Nil]), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), gen(), Value::Array(vec![bulk("a"), bulk("x")]), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), gen(), Value::Array(vec![bulk(""), bulk("7")]), ok_groups(), before()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), bulk("g"), before()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), Value::Array(vec![Value::Nil]), before()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), Value::Array(vec![bulk("")]), before()]),
            Value::Array(vec![Value::Int(5), gen(), ok_leases(), Value::Array(vec![Value::Array(vec![])]), before()]),
        ];
        for v in bad {
            let e = decode_keep_alive("keep_alive", &v, &sid).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::Backend, "{v:?}: {e}");
        }
    }
}

#[cfg(test)]
mod prop_tests;
