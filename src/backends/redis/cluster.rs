//! Operations on Redis Cluster. Every script call stays inside one hash slot: an operation first
//! calls the session's slot, then runs one script per other slot involved. Later scripts may
//! arrive long after the first (the session may be dead by then, and the nodes' clocks differ),
//! so only durations pass between nodes:
//!
//! * acquire and join grant a full lease duration by the lease (group) node's own clock;
//! * renewal follow-ups carry the session's remaining duration minus the time measured since the
//!   session call returned; each node caps the lease at its own now plus that duration;
//! * once the time since the session call was sent reaches the session's remaining duration,
//!   acquire and join send nothing more and fail; an acquire that returns later than that releases
//!   the term it started and fails, and renewals never report that term;
//! * a renewal whose follow-up fails is reported as failed (the engine retries; leases keep their
//!   previous deadlines); once a lease's follow-ups have failed for a third of the lease duration it
//!   is left out of `owned` instead (lost), so one dead node does not end the session;
//! * renewal drops lost leases from the session index (at once when the lease is no longer ours,
//!   after one lease period when its node keeps failing);
//! * renewal reports as `groups` the memberships its follow-ups found live, plus every membership
//!   of a slot whose follow-up failed (unknown is not lost); a membership a follow-up found gone or
//!   expired is not reported and leaves the index.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use redis::cluster_routing::Slot;

use super::book::{Index, IndexChanges, Item, Logs};
use super::port::ScriptCall;
use super::reply::{self, array, int, string, strings, unexpected};
use super::scripts::{keys, SCRIPTS};
use super::{ms, Inner};
use crate::backend::{Acquire, Holder, KeepAlive, Member};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId, Token};

fn slot(key: &str) -> Slot {
    Slot::for_key(key.as_bytes())
}

/// The work of one renewal follow-up (one slot).
#[derive(Default)]
struct SlotWork {
    slot: u16,
    renew: Vec<Name>,
    release: Vec<(Name, Token)>,
    groups: Vec<Name>,
}

/// Follow-up work grouped by slot, in the order slots were first seen.
/// (A renewal of 10,000 leases places each one: past a few slots a table by slot, not a map, and
/// slots computed from the names, not from formatted keys. A small renewal scans its few slots
/// and never allocates the table.)
#[derive(Default)]
struct Plan {
    /// The index in `work` of each slot's entry, `u32::MAX` for none yet; empty until `work` has
    /// more than [`SCANNED_SLOTS`] entries.
    index: Vec<u32>,
    work: Vec<SlotWork>,
}

/// Slots a [`Plan`] finds by scanning its work before it builds its table by slot.
const SCANNED_SLOTS: usize = 32;

impl Plan {
    fn at(&mut self, slot: u16) -> &mut SlotWork {
        let i = if self.index.is_empty() {
            match self.work.iter().position(|w| w.slot == slot) {
                Some(i) => i,
                None => {
                    self.work.push(SlotWork { slot, ..SlotWork::default() });
                    if self.work.len() > SCANNED_SLOTS {
                        self.index = vec![u32::MAX; 16384];
                        for (i, w) in self.work.iter().enumerate() {
                            // At most 16,384 entries: one per slot.
                            self.index[usize::from(w.slot) % 16384] = i as u32;
                        }
                    }
                    self.work.len() - 1
                }
            }
        } else {
            let entry = &mut self.index[usize::from(slot) % 16384];
            if *entry == u32::MAX {
                *entry = self.work.len() as u32;
                self.work.push(SlotWork { slot, ..SlotWork::default() });
            }
            *entry as usize
        };
        &mut self.work[i]
    }
}

pub(crate) fn keep_alive(inner: &Inner, sid: &SessionId, d: Duration) -> Result<KeepAlive> {
    let deadline = inner.deadline();
    let s = sid.as_str();
    let (changes, index) = inner.books.with(sid, |b| (b.take_index_changes(crate::sync::now()), b.index.clone()));
    let known = index.as_ref().map(|i| i.gen.clone()).unwrap_or_default();
    let (drop_leases, drop_groups) = IndexChanges::split(&changes.drops);
    let (add_leases, add_groups) = IndexChanges::split(&changes.reindex);
    let mut args =
        vec![ms(d), known, drop_leases.len().to_string(), drop_groups.len().to_string(), add_leases.len().to_string()];
    for names in [drop_leases, drop_groups, add_leases, add_groups] {
        args.extend(names.into_iter().map(Name::to_string));
    }
    let script = &SCRIPTS.keep_alive_session;
    let started = crate::sync::now();
    let called = inner.scripting.eval(
        script,
        &[keys::session(s), keys::session_leases(s), keys::session_groups(s)],
        &args,
        deadline,
    );
    inner.books.with(sid, |b| b.index_changes_sent(changes, called.is_ok()));
    let v = called?;
    let returned = crate::sync::now();
    let items = array(&v).ok_or_else(|| unexpected(script.name(), &v))?;
    let first = items.first().and_then(int).ok_or_else(|| unexpected(script.name(), &v))?;
    if first < 0 {
        inner.books.forget(sid);
        log::info!("redis session {sid} is expired");
        return Ok(KeepAlive::Expired);
    }
    let [_, gen, leases, groups, before] = items else {
        return Err(unexpected(script.name(), &v));
    };
    let before = int(before).filter(|b| *b > 0).ok_or_else(|| unexpected(script.name(), &v))?;
    let remaining_before = Some(Duration::from_millis(before.unsigned_abs()));
    let remaining = reply::millis(first, d);
    // The lease index, listed again only when it changed since the client's listing.
    let leases = match (leases, index) {
        (redis::Value::Nil, Some(index)) => index.leases,
        (listed, _) => {
            let gen = string(gen).ok_or_else(|| unexpected(script.name(), &v))?;
            let listed = array(listed).ok_or_else(|| unexpected(script.name(), &v))?;
            let mut leases = Vec::with_capacity(listed.len());
            for raw in listed {
                let raw = reply::text(raw).ok_or_else(|| unexpected(script.name(), raw))?;
                leases.push((reply::index_name(sid, raw, "lease")?, keys::lease_slot(raw)));
            }
            let leases = std::sync::Arc::new(leases);
            inner.books.with(sid, |b| b.index = Some(Index { gen, leases: leases.clone() }));
            leases
        }
    };
    let groups = strings(groups, script.name())?;

    let abandoned = inner.books.with(sid, |b| {
        b.prune_finished(started.checked_sub(d * 2).unwrap_or(started));
        b.live_abandoned(returned)
    });
    let mut plan = Plan::default();
    for (name, slot) in leases.iter() {
        if !abandoned.iter().any(|(a, _)| a == name) {
            plan.at(*slot).renew.push(name.clone());
        }
    }
    for (name, token) in &abandoned {
        plan.at(keys::lease_slot(name.as_str())).release.push((name.clone(), *token));
    }
    for raw in &groups {
        let name = reply::index_name(sid, raw, "group")?;
        plan.at(keys::group_slot(raw)).groups.push(name);
    }

    let mut owned = Vec::with_capacity(leases.len());
    let mut members = Vec::with_capacity(groups.len());
    // The leases of follow-ups that failed: neither owned nor lost (finding 2 of issue #36).
    let mut unknown = Vec::new();
    // A follow-up failure younger than this fails the whole renewal (the engine retries and the
    // leases keep their previous deadlines); older ones only drop the affected leases from `owned`,
    // so one dead node does not end the session.
    let give_up = d / 3;
    let mut transient: Option<Error> = None;
    // Each follow-up carries the session's remaining less the time since the session call
    // returned, as of its sending; none is sent once that has passed. On Cluster they all go at
    // once, one call per node in use (see `follow_up`).
    let outcomes = follow_up::run(
        inner,
        sid,
        &plan.work,
        &mut || {
            let elapsed = crate::sync::now().saturating_duration_since(returned);
            if elapsed >= remaining {
                return Err(Error::unavailable(format!(
                    "session {sid}: renewal follow-up not sent: {elapsed:?} passed since the session call \
                     returned, the session's remaining was {remaining:?}"
                )));
            }
            Ok(remaining - elapsed)
        },
        deadline,
    )?;
    for (work, outcome) in plan.work.into_iter().zip(outcomes) {
        let now = crate::sync::now();
        // A reply that arrived but cannot be read is a `Backend` error for the whole renewal (as
        // a malformed reply of the session call is), not a failed follow-up.
        let outcome = match outcome {
            Ok(v) => Ok(decode_renew_slot(SCRIPTS.renew_slot.name(), &v, &work)?),
            Err(e) => Err(e),
        };
        // What to log is collected under the books' lock and written after it (see `Logs`).
        let mut logs = Logs::new(module_path!());
        match outcome {
            Ok((tokens, group_ok)) => inner.books.with(sid, |b| {
                for (name, token) in work.renew.iter().zip(tokens) {
                    b.failing.remove(name);
                    match token {
                        Some(t) if b.reportable(name, t) => owned.push((name.clone(), t)),
                        Some(t) => logs.push(
                            log::Level::Debug,
                            format!("session {sid}: not reporting lease {name} (token {t}): its acquire is in flight"),
                        ),
                        None => {
                            if b.schedule_drop(Item::Lease(name.clone()), started) {
                                logs.push(
                                    log::Level::Debug,
                                    format!(
                                        "session {sid}: lease {name} is no longer held; dropping it from the index"
                                    ),
                                );
                            }
                        }
                    }
                }
                for (group, ok) in work.groups.iter().zip(group_ok) {
                    if ok {
                        members.push(group.clone());
                    } else if b.schedule_drop(Item::Group(group.clone()), started) {
                        logs.push(
                            log::Level::Warn,
                            format!("session {sid}: membership of group {group} expired; dropping it from the index"),
                        );
                    }
                }
            }),
            Err(e) => {
                let names: Vec<&str> = work.renew.iter().map(Name::as_str).collect();
                let group_names: Vec<&str> = work.groups.iter().map(Name::as_str).collect();
                log::warn!(
                    "session {sid}: renewal follow-up for lease(s) {names:?} and group(s) {group_names:?} failed: {}",
                    crate::display_chain(&e)
                );
                // Unknown is not lost: this slot's memberships may well be alive (the call may have
                // run, or may run late, or the node may answer the next renewal), so they are listed
                // as the session's index names them. Leases differ because they fence: a lease whose
                // node cannot be reached fails the renewal for a third of the lease duration and is
                // then reported `unknown`, not owned: its term is not extended, so its holder stops
                // acting on it at its deadline, before it can expire on its node. A membership fences nothing; reporting it lost would only make the
                // session re-join against the same failing node and report a gap that may not exist.
                // It stays in the index, and the first follow-up that reaches its node tells: if the
                // entry is gone or expired by then, it is no longer listed (and leaves the index).
                members.extend(work.groups.iter().cloned());
                // Its leases are not listed as owned (they could not be renewed), but they are
                // not gone either: the node may still hold them, a given-up or released term
                // included, so the engine must not forget such a term (finding 2 of issue #36).
                unknown.extend(work.renew.iter().cloned());
                unknown.extend(work.release.iter().map(|(name, _)| name.clone()));
                let recent = inner.books.with(sid, |b| {
                    let mut recent = false;
                    for name in &work.renew {
                        let since = *b.failing.entry(name.clone()).or_insert(now);
                        let failing_for = now.saturating_duration_since(since);
                        recent |= failing_for < give_up;
                        if failing_for >= d {
                            b.failing.remove(name);
                            if b.schedule_drop(Item::Lease(name.clone()), started) {
                                logs.push(
                                    log::Level::Warn,
                                    format!(
                                        "session {sid}: lease {name} could not be renewed for one lease period; \
                                         dropping it from the index"
                                    ),
                                );
                            }
                        }
                    }
                    recent
                });
                if recent && transient.is_none() {
                    transient = Some(
                        Error::unavailable(format!(
                            "session {sid}: the session was renewed but the follow-up for lease(s) {names:?} failed; \
                             retry"
                        ))
                        .with_source(e),
                    );
                }
            }
        }
        logs.write();
    }
    if let Some(e) = transient {
        return Err(e);
    }
    members.sort();
    members.dedup();
    unknown.sort();
    unknown.dedup();
    Ok(KeepAlive::Alive { remaining, owned, groups: members, unknown, remaining_before })
}

/// Decodes a `renew_slot` reply for `work`: the token of each renewed lease still ours (`None`:
/// no longer ours), and whether each membership is still live. Any other shape (wrong lengths,
/// a membership flag other than 0 or 1, a token that is not a number) is a `Backend` error.
fn decode_renew_slot(script: &str, v: &redis::Value, work: &SlotWork) -> Result<(Vec<Option<Token>>, Vec<bool>)> {
    let parts = array(v).ok_or_else(|| unexpected(script, v))?;
    let [leases, _released, groups] = parts else { return Err(unexpected(script, v)) };
    let leases = array(leases).ok_or_else(|| unexpected(script, v))?;
    let groups = array(groups).ok_or_else(|| unexpected(script, v))?;
    if leases.len() != work.renew.len() || groups.len() != work.groups.len() {
        return Err(unexpected(script, v));
    }
    let mut tokens = Vec::with_capacity(leases.len());
    for (name, t) in work.renew.iter().zip(leases) {
        let raw = reply::text(t).ok_or_else(|| unexpected(script, v))?;
        tokens.push(if raw.is_empty() {
            None
        } else {
            // The lease's name is formatted only for the error (this runs once per renewed lease).
            Some(match int(t).and_then(|n| u64::try_from(n).ok()).and_then(Token::new) {
                Some(token) => token,
                None => reply::token(t, &format!("lease {name}"), script)?,
            })
        });
    }
    let live = groups
        .iter()
        .map(|g| match int(g) {
            Some(1) => Ok(true),
            Some(0) => Ok(false),
            _ => Err(unexpected(script, v)),
        })
        .collect::<Result<Vec<bool>>>()?;
    Ok((tokens, live))
}

/// Releases leases (with a token, or `None` for any term of the session) and leaves groups, one
/// `release_slot` call per slot.
fn release_all(
    inner: &Inner,
    sid: &SessionId,
    leases: &[(Name, Option<Token>)],
    groups: &[Name],
    deadline: Instant,
) -> Result<()> {
    #[derive(Default)]
    struct Work {
        leases: Vec<(String, String)>,
        groups: Vec<String>,
    }
    let mut index: HashMap<Slot, usize> = HashMap::new();
    let mut work: Vec<Work> = Vec::new();
    let mut at = |key: &str| {
        let next = work.len();
        let i = *index.entry(slot(key)).or_insert(next);
        if i == next {
            work.push(Work::default());
        }
        i
    };
    let mut placed = Vec::new();
    for (name, token) in leases {
        let key = keys::lease(name.as_str());
        placed.push((at(&key), key, token.map_or_else(|| "0".to_string(), |t| t.to_string())));
    }
    let mut placed_groups = Vec::new();
    for g in groups {
        let key = keys::group(g.as_str());
        placed_groups.push((at(&key), key));
    }
    for (i, key, token) in placed {
        work[i].leases.push((key, token));
    }
    for (i, key) in placed_groups {
        work[i].groups.push(key);
    }
    let calls: Vec<ScriptCall<'_>> = work
        .into_iter()
        .map(|w| {
            let mut keys_: Vec<String> = w.leases.iter().map(|(k, _)| k.clone()).collect();
            keys_.extend(w.groups);
            let mut args = vec![sid.to_string(), w.leases.len().to_string()];
            args.extend(w.leases.into_iter().map(|(_, t)| t));
            ScriptCall { script: &SCRIPTS.release_slot, keys: keys_, args }
        })
        .collect();
    // One pipeline per node; the first failure is the call's.
    inner
        .scripting
        .eval_each(calls.len(), &mut |i| Ok(calls[i].clone()), deadline)
        .into_iter()
        .try_for_each(|r| r.map(drop))
}

pub(crate) fn close_session(inner: &Inner, sid: &SessionId) -> Result<()> {
    let deadline = inner.deadline();
    let s = sid.as_str();
    let script = &SCRIPTS.close_session_begin;
    let v = inner.scripting.eval(
        script,
        &[keys::session(s), keys::session_leases(s), keys::session_groups(s)],
        &[],
        deadline,
    )?;
    let [leases, groups] = array(&v).ok_or_else(|| unexpected(script.name(), &v))? else {
        return Err(unexpected(script.name(), &v));
    };
    let mut releases: Vec<(Name, Option<Token>)> = Vec::new();
    for raw in strings(leases, script.name())? {
        releases.push((reply::index_name(sid, &raw, "lease")?, None));
    }
    // Abandoned terms, and what a renewal removed from the indexes while this client acquired or
    // joined it again (to be indexed again by the next renewal): the index does not list them.
    let (abandoned, reindex) = inner
        .books
        .with(sid, |b| (b.abandoned.iter().map(|(n, (t, _))| (n.clone(), *t)).collect::<Vec<_>>(), b.reindex.clone()));
    for (name, token) in abandoned {
        if !releases.iter().any(|(n, _)| *n == name) {
            releases.push((name, Some(token)));
        }
    }
    let mut left = Vec::new();
    for raw in strings(groups, script.name())? {
        left.push(reply::index_name(sid, &raw, "group")?);
    }
    for item in reindex {
        match item {
            Item::Lease(name) if !releases.iter().any(|(n, _)| *n == name) => releases.push((name, None)),
            Item::Group(name) if !left.contains(&name) => left.push(name),
            _ => {}
        }
    }
    release_all(inner, sid, &releases, &left, deadline).map_err(|e| {
        Error::new(
            e.kind(),
            format!("session {sid}: close deleted the session but did not finish releasing; close again to finish"),
        )
        .with_source(e)
    })?;
    inner.scripting.eval(
        &SCRIPTS.close_session_end,
        &[keys::session_leases(s), keys::session_groups(s)],
        &[],
        deadline,
    )?;
    inner.books.forget(sid);
    log::debug!("redis session {sid} closed");
    Ok(())
}

/// Remaining and lease duration from an `acquire_session` / `join_session` reply; `None` when the
/// session is gone.
fn session_reply(script: &str, v: &redis::Value) -> Result<Option<(Duration, Duration)>> {
    let items = array(v).ok_or_else(|| unexpected(script, v))?;
    match items {
        [r] if int(r).is_some_and(|r| r < 0) => Ok(None),
        [r, d] => {
            let r = int(r).ok_or_else(|| unexpected(script, v))?;
            let d = int(d).ok_or_else(|| unexpected(script, v))?;
            if r <= 0 {
                return Ok(None);
            }
            let d = reply::millis(d, Duration::MAX);
            Ok(Some((reply::millis(r, d), d)))
        }
        _ => Err(unexpected(script, v)),
    }
}

/// Acquire: the session call (`acquire_session.lua`, on the session's slot: is the session
/// alive, and the name indexed) and the lease call (`acquire_lease.lua`, on the lease's slot).
/// Once the session's lease duration is known (from its open, or a later session call) the two go out
/// together, so an acquire costs one round trip to each node at the same time (one in all when
/// both slots are on one node) instead of two in a row. The lease call may then run before the
/// session call, even when the session is gone: a term it started is released again, and the
/// acquire fails as the session call says. A term of a dead session holds no one's lease: it only
/// delays other sessions until that release (or, if the release fails, its expiry).
pub(crate) fn acquire(inner: &Inner, sid: &SessionId, name: &Name) -> Result<Acquire> {
    let deadline = inner.deadline();
    let guard = inner.books.inflight(sid, Item::Lease(name.clone()));
    let s = sid.as_str();
    let sent = crate::sync::now();
    let session_script = &SCRIPTS.acquire_session;
    let session_call = ScriptCall {
        script: session_script,
        keys: vec![keys::session(s), keys::session_leases(s)],
        args: vec![name.to_string()],
    };
    let lease_key = keys::lease(name.as_str());
    let known = inner.books.with(sid, |b| b.duration);
    let (remaining, d, v) = match known {
        Some(d) => {
            let mut calls = [Some(session_call), Some(lease_call(sid, &lease_key, d))];
            let mut replies = inner
                .scripting
                .eval_each(
                    2,
                    &mut |i| {
                        calls
                            .get_mut(i)
                            .and_then(Option::take)
                            .ok_or_else(|| Error::backend("redis cluster: an acquire's call was built twice"))
                    },
                    deadline,
                )
                .into_iter();
            let (Some(session), Some(granted)) = (replies.next(), replies.next()) else {
                return Err(Error::backend("redis cluster: an acquire's batched call was lost"));
            };
            match session.and_then(|v| session_reply(session_script.name(), &v)) {
                Ok(Some((remaining, now_d))) if now_d == d => (remaining, d, granted?),
                Ok(Some((remaining, now_d))) => {
                    // The duration changed since it was cached: grant again with the session's
                    // own (a live term of this session is only ever extended).
                    inner.books.with(sid, |b| b.duration = Some(now_d));
                    let lease = lease_call(sid, &lease_key, now_d);
                    (remaining, now_d, inner.scripting.eval(lease.script, &lease.keys, &lease.args, deadline)?)
                }
                gone => {
                    if let Ok(v) = &granted {
                        if let Ok(Some((token, true))) = granted_term(name, v) {
                            abandon(inner, sid, name, &lease_key, token, d, deadline);
                        }
                    }
                    return Err(match gone {
                        Err(e) => e,
                        _ => Error::session_expired(sid),
                    });
                }
            }
        }
        None => {
            let v = inner.scripting.eval(session_script, &session_call.keys, &session_call.args, deadline)?;
            let Some((remaining, d)) = session_reply(session_script.name(), &v)? else {
                return Err(Error::session_expired(sid));
            };
            inner.books.with(sid, |b| b.duration = Some(d));
            let took = crate::sync::now().saturating_duration_since(sent);
            if took >= remaining {
                return Err(Error::unavailable(format!(
                    "session {sid}: acquire of lease {name} gave up: the session call took {took:?}, as long as \
                     the session's remaining {remaining:?}; no lease call was sent"
                )));
            }
            let lease = lease_call(sid, &lease_key, d);
            (remaining, d, inner.scripting.eval(lease.script, &lease.keys, &lease.args, deadline)?)
        }
    };
    match granted_term(name, &v)? {
        None => {
            if guard.alone() {
                let removed = inner.scripting.eval(
                    &SCRIPTS.index_remove,
                    &[keys::session_leases(s), keys::session(s)],
                    &[name.to_string()],
                    inner.cleanup_deadline(deadline),
                );
                if let Err(e) = removed {
                    log::debug!("session {sid}: could not unindex busy lease {name} ({e}); a renewal will");
                }
            }
            Ok(Acquire::Busy)
        }
        Some((token, new)) => {
            let took = crate::sync::now().saturating_duration_since(sent);
            if took >= remaining {
                // Abandon (and release) the term only if no other acquire of this session
                // reported it meanwhile: that one holds it legitimately.
                let abandoned = new && abandon(inner, sid, name, &lease_key, token, d, deadline);
                return Err(Error::unavailable(format!(
                    "session {sid}: acquire of lease {name} returned after {took:?}, later than the session's \
                     remaining {remaining:?}; {}",
                    if abandoned { "the term it started was released" } else { "the existing term is not confirmed" }
                )));
            }
            if !inner.books.with(sid, |b| b.try_confirm(name, token)) {
                return Err(Error::unavailable(format!(
                    "session {sid}: lease {name} (token {token}) was abandoned by a late acquire of this session \
                     and is being released; try again"
                )));
            }
            Ok(Acquire::Acquired { token, remaining: remaining.into() })
        }
    }
}

/// The lease call of an acquire: a term of `d` for `sid` on the lease's slot.
fn lease_call<'a>(sid: &SessionId, lease_key: &str, d: Duration) -> ScriptCall<'a> {
    // `Bug::LeaseSeconds` (a deliberately broken argument, explorer builds only): seconds for ms.
    let grant = crate::sync::pick_with(crate::sync::Bug::LeaseSeconds, || d.as_secs().to_string(), || ms(d));
    ScriptCall { script: &SCRIPTS.acquire_lease, keys: vec![lease_key.to_string()], args: vec![sid.to_string(), grant] }
}

/// An `acquire_lease.lua` reply: `None` when another session's term is live, else the term's
/// token and whether the call started it.
fn granted_term(name: &Name, v: &redis::Value) -> Result<Option<(Token, bool)>> {
    let script = SCRIPTS.acquire_lease.name();
    match array(v).ok_or_else(|| unexpected(script, v))? {
        [busy] if int(busy) == Some(0) => Ok(None),
        [ok, token, new] if int(ok) == Some(1) => {
            Ok(Some((reply::token(token, &format!("lease {name}"), script)?, int(new) == Some(1))))
        }
        _ => Err(unexpected(script, v)),
    }
}

/// Abandons the term `token` an acquire started and failed to report, and releases it — unless
/// another acquire of this session already reported that term (it is then held legitimately).
/// Returns whether it was abandoned. A failed release is logged: renewals keep releasing the term
/// and never report it.
fn abandon(
    inner: &Inner,
    sid: &SessionId,
    name: &Name,
    lease_key: &str,
    token: Token,
    d: Duration,
    deadline: Instant,
) -> bool {
    if !inner.books.with(sid, |b| b.try_abandon(name.clone(), token, d)) {
        return false;
    }
    let released = inner.scripting.eval(
        &SCRIPTS.release_slot,
        &[lease_key.to_string()],
        &[sid.to_string(), "1".to_string(), token.to_string()],
        inner.cleanup_deadline(deadline),
    );
    if let Err(e) = released {
        log::warn!(
            "session {sid}: releasing the late term of lease {name} (token {token}) failed ({e}); renewals keep \
             releasing it and never report it"
        );
    }
    true
}

/// Releases the term on the lease's slot only. The name leaves the session's index at the next
/// renewal (which sees it is no longer held): removing it here could unindex a newer term of the
/// same session acquired meanwhile.
pub(crate) fn release(inner: &Inner, sid: &SessionId, name: &Name, token: Token) -> Result<()> {
    inner.scripting.eval(
        &SCRIPTS.release_slot,
        &[keys::lease(name.as_str())],
        &[sid.to_string(), "1".to_string(), token.to_string()],
        inner.deadline(),
    )?;
    inner.books.with(sid, |b| b.released(name, token));
    Ok(())
}

/// `{remaining_ms, metadata}` of a live session, from its own slot.
fn session_info(inner: &Inner, sid: &str, deadline: Instant) -> Result<Option<(Duration, String)>> {
    decode_session_info(&inner.scripting.eval(&SCRIPTS.session_info, &[keys::session(sid)], &[], deadline)?)
}

/// The reply of `session_info.lua`: `{remaining, metadata}` of a live session.
pub(crate) fn decode_session_info(v: &redis::Value) -> Result<Option<(Duration, String)>> {
    let script = &SCRIPTS.session_info;
    match array(v).ok_or_else(|| unexpected(script.name(), v))? {
        [] => Ok(None),
        [r, m] => Ok(Some((
            reply::millis(int(r).ok_or_else(|| unexpected(script.name(), v))?, Duration::MAX),
            string(m).unwrap_or_default(),
        ))),
        _ => Err(unexpected(script.name(), v)),
    }
}

pub(crate) fn holder(inner: &Inner, name: &Name) -> Result<Option<Holder>> {
    let deadline = inner.deadline();
    let v = inner.scripting.eval(&SCRIPTS.lease_info, &[keys::lease(name.as_str())], &[], deadline)?;
    let Some((session, token, rem)) = decode_lease_info(name, &v)? else { return Ok(None) };
    Ok(session_info(inner, session.as_str(), deadline)?.map(|(pttl, metadata)| Holder {
        session,
        token,
        remaining: rem.min(pttl),
        metadata,
    }))
}

/// The reply of `lease_info.lua` for lease `name`: its term's session, token and time left by
/// the lease's node (the holder's session is still to be asked: [`decode_session_info`]).
pub(crate) fn decode_lease_info(name: &Name, v: &redis::Value) -> Result<Option<(SessionId, Token, Duration)>> {
    let script = &SCRIPTS.lease_info;
    let (sid, token, rem) = match array(v).ok_or_else(|| unexpected(script.name(), v))? {
        [] => return Ok(None),
        [sid, token, rem] => (
            string(sid).ok_or_else(|| unexpected(script.name(), v))?,
            reply::token(token, &format!("lease {name}"), script.name())?,
            reply::millis(int(rem).ok_or_else(|| unexpected(script.name(), v))?, Duration::MAX),
        ),
        _ => return Err(unexpected(script.name(), v)),
    };
    let session = SessionId::parse(&sid)
        .map_err(|e| Error::backend(format!("lease {name}: corrupt holder {sid:?} in redis")).with_source(e))?;
    Ok(Some((session, token, rem)))
}

pub(crate) fn join(inner: &Inner, sid: &SessionId, group: &Name) -> Result<()> {
    let deadline = inner.deadline();
    let _guard = inner.books.inflight(sid, Item::Group(group.clone()));
    let s = sid.as_str();
    let sent = crate::sync::now();
    let script = &SCRIPTS.join_session;
    let v =
        inner.scripting.eval(script, &[keys::session(s), keys::session_groups(s)], &[group.to_string()], deadline)?;
    let Some((remaining, d)) = session_reply(script.name(), &v)? else {
        return Err(Error::session_expired(sid));
    };
    let took = crate::sync::now().saturating_duration_since(sent);
    if took >= remaining {
        return Err(Error::unavailable(format!(
            "session {sid}: join of group {group} gave up: the session call took {took:?}, as long as the \
             session's remaining {remaining:?}; no group call was sent"
        )));
    }
    inner.scripting.eval(&SCRIPTS.join_group, &[keys::group(group.as_str())], &[sid.to_string(), ms(d)], deadline)?;
    Ok(())
}

pub(crate) fn leave(inner: &Inner, sid: &SessionId, group: &Name) -> Result<()> {
    let deadline = inner.deadline();
    inner.scripting.eval(
        &SCRIPTS.index_remove,
        &[keys::session_groups(sid.as_str())],
        &[group.to_string()],
        deadline,
    )?;
    inner.scripting.eval(
        &SCRIPTS.release_slot,
        &[keys::group(group.as_str())],
        &[sid.to_string(), "0".to_string()],
        deadline,
    )?;
    Ok(())
}

pub(crate) fn members(inner: &Inner, group: &Name) -> Result<Vec<Member>> {
    let deadline = inner.deadline();
    let script = &SCRIPTS.group_live;
    let v = inner.scripting.eval(script, &[keys::group(group.as_str())], &[], deadline)?;
    let mut members = Vec::new();
    for raw in strings(&v, script.name())? {
        let session = SessionId::parse(&raw)
            .map_err(|e| Error::backend(format!("group {group}: corrupt member {raw:?} in redis")).with_source(e))?;
        if let Some((_, metadata)) = session_info(inner, &raw, deadline)? {
            members.push(Member { session, metadata });
        }
    }
    members.sort();
    Ok(members)
}

#[cfg(test)]
mod tests {
    use redis::Value;

    use super::*;
    use crate::error::ErrorKind;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    fn work() -> SlotWork {
        SlotWork {
            slot: 0,
            renew: vec![Name::new("a").unwrap(), Name::new("b").unwrap()],
            release: vec![],
            groups: vec![Name::new("g1").unwrap(), Name::new("g2").unwrap()],
        }
    }

    fn reply(leases: Vec<Value>, groups: Vec<Value>) -> Value {
        Value::Array(vec![Value::Array(leases), Value::Array(vec![]), Value::Array(groups)])
    }

    #[test]
    fn plans_group_by_slot_in_first_seen_order_with_and_without_the_table() {
        for slots in [5usize, SCANNED_SLOTS, SCANNED_SLOTS + 1, 500] {
            let mut plan = Plan::default();
            // Every slot three times, interleaved: 7, 7 + 13, ... then again.
            let order: Vec<u16> = (0..slots).map(|k| ((7 + 13 * k) % 16384) as u16).collect();
            for round in 0..3 {
                for (k, slot) in order.iter().enumerate() {
                    plan.at(*slot).renew.push(Name::new(format!("l-{round}-{k}")).unwrap());
                }
            }
            assert_eq!(plan.work.iter().map(|w| w.slot).collect::<Vec<_>>(), order, "{slots} slots");
            assert!(plan.work.iter().all(|w| w.renew.len() == 3), "{slots} slots");
            assert_eq!(plan.index.is_empty(), slots <= SCANNED_SLOTS, "{slots} slots: table built");
        }
    }

    #[test]
    fn renew_slot_replies_decode() {
        let v = reply(vec![bulk("3"), bulk("")], vec![Value::Int(1), Value::Int(0)]);
        let (tokens, live) = decode_renew_slot("renew_slot", &v, &work()).unwrap();
        assert_eq!(tokens, vec![Some(Token::new(3).unwrap()), None]);
        assert_eq!(live, vec![true, false]);
    }

    #[test]
    fn malformed_renew_slot_replies_are_backend_errors() {
        let leases = || vec![bulk("3"), bulk("")];
        let groups = || vec![Value::Int(1), Value::Int(0)];
        let bad = [
            Value::Nil,
            Value::Array(vec![]),
            Value::Array(vec![Value::Array(leases()), Value::Array(groups())]),
            reply(vec![bulk("3")], groups()),
            reply(leases(), vec![Value::Int(1)]),
            reply(leases(), vec![Value::Int(1), Value::Int(2)]),
            reply(leases(), vec![Value::Int(1), bulk("yes")]),
            reply(leases(), vec![Value::Int(1), Value::Nil]),
            reply(vec![bulk("3"), Value::Nil], groups()),
            reply(vec![bulk("x"), bulk("")], groups()),
            reply(vec![bulk("0"), bulk("")], groups()),
            Value::Array(vec![Value::Array(leases()), Value::Array(vec![]), Value::Int(1)]),
        ];
        for v in bad {
            let e = decode_renew_slot("renew_slot", &v, &work()).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Backend, "{v:?}: {e}");
        }
    }
}

mod follow_up;

#[cfg(test)]
mod prop_tests;
