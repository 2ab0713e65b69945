//! [`LeaseBackend::list`](crate::backend::LeaseBackend::list) on Redis and Redis Cluster
//! (`simba status`). Two `SCAN` walks of every master's keyspace find the keys: one with
//! `MATCH simba:[lg]*:{<prefix>*` (lease and group keys of the prefix), one with
//! `MATCH simba:session:{*}` (session keys), each at most [`SCAN_BUDGET`]. The names and ids
//! are sorted on the client, then only the first entries are read, with the scripts `holder` and
//! `members` use (`holder.lua`, `members.lua` on standalone; `lease_info.lua`, `group_live.lua`,
//! `session_info.lua` on Cluster), in pipelined batches: at most `limit + 1` entries that count
//! plus an allowance for keys that turn out free or expired ([`gather`]). The whole listing has
//! one deadline, the query timeout. The cost is written in `docs/backends/redis.md` ("Listing").

use std::time::{Duration, Instant};

use redis::Value;

use super::cluster::{decode_lease_info, decode_session_info};
use super::port::ScriptCall;
use super::reply::strings;
use super::scripts::{keys, LuaScript, SCRIPTS};
use super::standalone::{decode_holder, decode_members};
use super::Inner;
use crate::backend::{Holder, ListRequest, ListedGroup, ListedLease, ListedSession, Listing, Member};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId};

/// How far one `SCAN` walk goes: at most `steps` calls of `SCAN … COUNT count` per master.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ScanBudget {
    /// The `COUNT` of each call: about how many keys (matching or not) it examines.
    pub(crate) count: usize,
    /// Calls per master and walk.
    pub(crate) steps: usize,
}

/// A walk examines about 100 000 keys per master (the whole keyspace, whatever the pattern:
/// `MATCH` filters on the server after the keys are read). On a larger keyspace the walk stops
/// there and the sections it feeds are cut (`Listing::truncated` says so).
pub(crate) const SCAN_BUDGET: ScanBudget = ScanBudget { count: 1000, steps: 100 };

/// Entries read per pipelined batch (one round trip per node and batch).
const READ_BATCH: usize = 512;

/// The least number of reads per section that may find nothing (a released lease, whose key
/// stays; a group without live members; a session that expired since the walk) before the
/// section is cut.
const MIN_SKIPS: usize = 100;

/// [`LeaseBackend::list`](crate::backend::LeaseBackend::list) of `request`, walking at most
/// `budget` ([`SCAN_BUDGET`]; smaller in tests).
pub(crate) fn list(inner: &Inner, request: &ListRequest, budget: ScanBudget) -> Result<Listing> {
    let deadline = inner.deadline();
    let want = request.limit().saturating_add(1);
    let what = |e: Error| {
        Error::new(e.kind(), format!("redis {}: list of names from {:?}", inner.scripting.target(), request.prefix()))
            .with_source(e)
    };
    let (named, named_ended) = inner
        .scripting
        .scan(&format!("simba:[lg]*:{{{}*", request.prefix()), budget.count, budget.steps, deadline)
        .map_err(what)?;
    let (mut leases, mut groups) = (Vec::new(), Vec::new());
    for key in &named {
        if let Some(name) = tagged(key, "simba:lease:") {
            leases.push(name_of(key, name)?);
        } else if let Some(name) = tagged(key, "simba:group:") {
            groups.push(name_of(key, name)?);
        } else {
            log::debug!("redis listing: skipped key {key:?}: not of a shape simba writes");
        }
    }
    let (found, ended) =
        inner.scripting.scan("simba:session:{*}", budget.count, budget.steps, deadline).map_err(what)?;
    let mut ids = Vec::new();
    for key in &found {
        match tagged(key, "simba:session:") {
            Some(sid) => ids.push(SessionId::parse(sid).map_err(|e| {
                Error::backend(format!("corrupt session key {key:?} in redis: not a session id")).with_source(e)
            })?),
            None => log::debug!("redis listing: skipped key {key:?}: not of a shape simba writes"),
        }
    }
    for v in [&mut leases, &mut groups] {
        v.retain(|n| request.matches(n.as_str()));
        v.sort();
        v.dedup();
    }
    ids.sort();
    ids.dedup();
    let mut listing = Listing::default();
    let (found, cut) = gather(&leases, want, |batch| held(inner, batch, deadline)).map_err(what)?;
    (listing.leases, listing.truncated.leases) = (found, cut || !named_ended);
    let mut cut_members = false;
    let (found, cut) = gather(&groups, want, |batch| {
        let read = live_groups(inner, batch, want, deadline)?;
        cut_members |= read.iter().flatten().any(|(_, cut)| *cut);
        Ok(read.into_iter().map(|g| g.map(|(g, _)| g)).collect())
    })
    .map_err(what)?;
    (listing.groups, listing.truncated.groups) = (found, cut || cut_members || !named_ended);
    let (found, cut) = gather(&ids, want, |batch| live_sessions(inner, batch, deadline)).map_err(what)?;
    (listing.sessions, listing.truncated.sessions) = (found, cut || !ended);
    Ok(listing.finish(request))
}

/// The name inside the braces of `key` when it is exactly `<prefix>{…}`.
fn tagged<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let inside = key.strip_prefix(prefix)?.strip_prefix('{')?.strip_suffix('}')?;
    (!inside.contains(['{', '}'])).then_some(inside)
}

/// The lease or group name of a key of simba's shape.
///
/// # Errors
/// `Backend` naming the key when what is inside its braces is no name.
fn name_of(key: &str, name: &str) -> Result<Name> {
    Name::new(name).map_err(|e| Error::backend(format!("corrupt key {key:?} in redis: not a name")).with_source(e))
}

/// Reads `candidates` in order with `read` (a batch at a time, at most [`READ_BATCH`]), until
/// `want` of them gave an entry or none is left. A read that gives none costs from an allowance of
/// `max(want, MIN_SKIPS)` such reads: at most `want + max(want, MIN_SKIPS)` reads in all. Returns
/// the entries in candidate order and whether candidates were left unread when the allowance ran
/// out (the section is then cut: more may match).
///
/// # Errors
/// The first error of a batch (it ends the listing).
fn gather<C, T>(
    candidates: &[C],
    want: usize,
    mut read: impl FnMut(&[C]) -> Result<Vec<Option<T>>>,
) -> Result<(Vec<T>, bool)> {
    let budget = want.saturating_add(want.max(MIN_SKIPS));
    let mut found = Vec::new();
    let mut next = 0;
    while found.len() < want && next < candidates.len() && next < budget {
        let n = (want - found.len()).min(READ_BATCH).min(budget - next).min(candidates.len() - next);
        found.extend(read(&candidates[next..next + n])?.into_iter().flatten());
        next += n;
    }
    let cut = found.len() < want && next < candidates.len();
    Ok((found, cut))
}

/// Runs `script` once per key of `keys`, pipelined; each reply, or the first error naming `what`
/// of its entry.
fn each(inner: &Inner, script: &LuaScript, keys: &[String], deadline: Instant) -> Result<Vec<Value>> {
    inner
        .scripting
        .eval_each(keys.len(), &mut |i| Ok(ScriptCall { script, keys: vec![keys[i].clone()], args: vec![] }), deadline)
        .into_iter()
        .zip(keys)
        .map(|(r, key)| r.map_err(|e| Error::new(e.kind(), format!("read of {key}")).with_source(e)))
        .collect()
}

/// The live holders of leases `names` (`None`: free), as `holder` reports them.
fn held(inner: &Inner, names: &[Name], deadline: Instant) -> Result<Vec<Option<ListedLease>>> {
    let lease_keys: Vec<String> = names.iter().map(|n| keys::lease(n.as_str())).collect();
    if !inner.scripting.is_clustered() {
        let replies = each(inner, &SCRIPTS.holder, &lease_keys, deadline)?;
        return names
            .iter()
            .zip(&replies)
            .map(|(name, v)| Ok(decode_holder(name, v)?.map(|holder| ListedLease { name: name.clone(), holder })))
            .collect();
    }
    // Cluster: the term on the lease's slot, then its session on the session's slot.
    let replies = each(inner, &SCRIPTS.lease_info, &lease_keys, deadline)?;
    let terms = names.iter().zip(&replies).map(|(n, v)| decode_lease_info(n, v)).collect::<Result<Vec<_>>>()?;
    let sessions: Vec<String> = terms.iter().flatten().map(|(sid, _, _)| keys::session(sid.as_str())).collect();
    let mut infos = each(inner, &SCRIPTS.session_info, &sessions, deadline)?.into_iter();
    let mut out = Vec::with_capacity(names.len());
    for (name, term) in names.iter().zip(terms) {
        let Some((session, token, rem)) = term else {
            out.push(None);
            continue;
        };
        let info = infos.next().map(|v| decode_session_info(&v)).transpose()?.flatten();
        out.push(info.map(|(pttl, metadata)| ListedLease {
            name: name.clone(),
            holder: Holder { session, token, remaining: rem.min(pttl), metadata },
        }));
    }
    Ok(out)
}

/// Groups `names` with their first `want` live members by session id and whether more were
/// left unread (`None`: no live member), as `members` reports them. A group's entries are read
/// in one script call (atomic: no member is skipped while others expire).
fn live_groups(
    inner: &Inner,
    names: &[Name],
    want: usize,
    deadline: Instant,
) -> Result<Vec<Option<(ListedGroup, bool)>>> {
    let group_keys: Vec<String> = names.iter().map(|n| keys::group(n.as_str())).collect();
    let listed = |name: &Name, members: Vec<Member>, cut: bool| {
        (!members.is_empty()).then(|| (ListedGroup { name: name.clone(), members }, cut))
    };
    if !inner.scripting.is_clustered() {
        let replies = each(inner, &SCRIPTS.members, &group_keys, deadline)?;
        return names.iter().zip(&replies).map(|(n, v)| Ok(listed(n, decode_members(n, v)?, false))).collect();
    }
    // Cluster: the unexpired entries on the group's slot, then the first ones' sessions.
    let replies = each(inner, &SCRIPTS.group_live, &group_keys, deadline)?;
    let mut out = Vec::with_capacity(names.len());
    for (name, v) in names.iter().zip(&replies) {
        let mut ids = strings(v, SCRIPTS.group_live.name())?
            .iter()
            .map(|raw| {
                SessionId::parse(raw).map_err(|e| {
                    Error::backend(format!("group {name}: corrupt member {raw:?} in redis")).with_source(e)
                })
            })
            .collect::<Result<Vec<_>>>()?;
        ids.sort();
        ids.dedup();
        let (members, cut) = gather(&ids, want, |batch| {
            let infos = live_sessions(inner, batch, deadline)?;
            Ok(infos.into_iter().map(|s| s.map(|s| Member { session: s.id, metadata: s.metadata })).collect())
        })?;
        out.push(listed(name, members, cut));
    }
    Ok(out)
}

/// Sessions `ids` with their time left and metadata (`None`: expired or closed).
fn live_sessions(inner: &Inner, ids: &[SessionId], deadline: Instant) -> Result<Vec<Option<ListedSession>>> {
    let session_keys: Vec<String> = ids.iter().map(|id| keys::session(id.as_str())).collect();
    let replies = each(inner, &SCRIPTS.session_info, &session_keys, deadline)?;
    ids.iter()
        .zip(&replies)
        .map(|(id, v)| {
            let info: Option<(Duration, String)> = decode_session_info(v)?;
            Ok(info.map(|(remaining, metadata)| ListedSession { id: id.clone(), remaining, metadata }))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_keys_of_simbas_shape_are_tagged() {
        assert_eq!(tagged("simba:lease:{a.b}", "simba:lease:"), Some("a.b"));
        assert_eq!(tagged("simba:group:{g}", "simba:group:"), Some("g"));
        for key in ["simba:lease:{a}:x", "simba:leases:{a}", "simba:lease:a", "simba:lease:{a{b}", "simba:lease:{a"] {
            assert_eq!(tagged(key, "simba:lease:"), None, "{key}");
        }
        assert_eq!(tagged("simba:session:{ff}:groups", "simba:session:"), None);
        let e = name_of("simba:lease:{a b}", "a b").unwrap_err();
        assert!(e.to_string().contains("simba:lease:{a b}"), "{e}");
    }

    #[test]
    fn gather_reads_only_what_it_needs_and_bounds_the_skips() {
        let candidates: Vec<usize> = (0..100_000).collect();
        let run = |want: usize, gone: fn(usize) -> bool| {
            let mut reads = 0;
            let (found, cut) = gather(&candidates, want, |batch| {
                reads += batch.len();
                Ok(batch.iter().map(|&i| (!gone(i)).then_some(i)).collect())
            })
            .unwrap();
            (found.len(), cut, reads)
        };
        assert_eq!(run(3, |_| false), (3, false, 3));
        assert_eq!(run(3, |i| i % 2 == 0), (3, false, 6));
        assert_eq!(run(3, |_| true), (0, true, 3 + MIN_SKIPS));
        assert_eq!(run(2000, |i| i % 4 != 0), (1000, true, 4000));
        let few = [1, 2];
        assert_eq!(gather(&few, 5, |b| Ok(b.iter().map(|&i| Some(i)).collect())).unwrap(), (vec![1, 2], false));
    }
}
