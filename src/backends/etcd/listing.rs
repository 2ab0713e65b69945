//! [`LeaseBackend::list`](crate::backend::LeaseBackend::list) on etcd (`simba status`), with
//! linearizable range reads under the prefix, each bounded by the request's limit, all in one
//! call (one deadline: the query timeout). The cost is written in docs/backends/etcd.md
//! ("Listing").
//!
//! - Leases: one range of the lease keys whose names start with the request's prefix, at most
//!   `limit + 1` (key order is name order: nothing follows the name in the key).
//! - Sessions: one range of the session keys, at most `limit + 1`.
//! - Groups: a walk of the member keys (`g/<group>/<session>`, keys only) in pages, taking at
//!   most `limit + 1` members of a group (then skipping past it) and stopping at `limit + 1`
//!   groups. Key order is not name order there (the `/` after a group's name sorts after `-` and
//!   `.`): a group that precedes a collected one by name but follows it by key is a prefix of its
//!   name followed by `-` or `.`, so those prefixes are read too ([`shadowed`]).
//! - Then the time left of every lease id found (`LeaseTimeToLive`, a few at a time) and the
//!   metadata of the holders' and members' sessions (their session keys, in transactions of
//!   ranges). An entry whose session is gone meanwhile is left out.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use tonic::Status;

use super::client::{Clients, EtcdClient};
use super::keys::{lease_id, prefix_end, session_id, Keys};
use super::proto::etcdserverpb::{LeaseTimeToLiveRequest, RangeRequest};
use super::spi::{is_session_id, range_prefix, secs, session_metadata, text, token_of};
use crate::backend::{Holder, ListRequest, ListedGroup, ListedLease, ListedSession, Listing, Member};
use crate::error::Result;
use crate::types::{Name, SessionId};

/// Member keys read per page of the group walk.
const PAGE: i64 = 512;

/// `LeaseTimeToLive` calls in flight at once.
const TTL_CALLS: usize = 16;

/// [`LeaseBackend::list`](crate::backend::LeaseBackend::list) of `request`.
pub(crate) fn list(client: &EtcdClient, keys: &Keys, request: &ListRequest) -> Result<Listing> {
    let (k, r) = (keys.clone(), request.clone());
    let listing = client.call("list", move |c| gather(c, k.clone(), r.clone()))?;
    Ok(listing.finish(request))
}

/// The time left of a live etcd lease: etcd tells it in whole seconds, cut down (`ttl` ≤ time
/// left < `ttl + 1`), so the middle of that second, but never more than the granted TTL.
fn time_left(ttl: i64, granted: i64) -> Duration {
    (secs(ttl) + Duration::from_millis(500)).min(secs(granted))
}

/// The key range of the names under `prefix` (a key prefix) that start with the request's prefix.
fn name_range(prefix: &str, request: &ListRequest) -> (Vec<u8>, Vec<u8>) {
    let from = format!("{prefix}{}", request.prefix()).into_bytes();
    let to = match request.upper_bound() {
        Some(u) => format!("{prefix}{u}").into_bytes(),
        None => prefix_end(prefix.as_bytes()),
    };
    (from, to)
}

/// The proper prefixes of `name` that a group's name may be while it sorts before `name` by name
/// but after it by key: those followed in `name` by `-` or `.` (which sort before `/`).
fn shadowed(name: &str) -> impl Iterator<Item = &str> {
    name.char_indices().filter(|(_, c)| matches!(c, '-' | '.')).map(move |(i, _)| &name[..i])
}

async fn gather(c: Clients, keys: Keys, request: ListRequest) -> std::result::Result<Listing, Status> {
    let want = request.limit().saturating_add(1);
    let limit = i64::try_from(want).unwrap_or(i64::MAX);
    let mut kv = c.kv.clone();
    let mut listing = Listing::default();

    let (key, range_end) = name_range(&keys.lease_prefix(), &request);
    let leases = kv.range(RangeRequest { key, range_end, limit, ..Default::default() }).await?.into_inner();
    listing.truncated.leases = leases.more;
    let sessions = kv.range(RangeRequest { limit, ..range_prefix(&keys.sessions_prefix()) }).await?.into_inner();
    listing.truncated.sessions = sessions.more;
    let (groups, more_groups) = walk_groups(&c, &keys, &request, want).await?;
    listing.truncated.groups = more_groups;

    // Time left of the holders' and the sessions' leases.
    let ids: BTreeSet<i64> = leases.kvs.iter().chain(&sessions.kvs).map(|kv| kv.lease).filter(|&l| l != 0).collect();
    let ttls: HashMap<i64, Option<Duration>> = futures::stream::iter(ids)
        .map(|id| {
            let mut lease = c.lease.clone();
            async move {
                let r = lease.lease_time_to_live(LeaseTimeToLiveRequest { id, keys: false }).await?.into_inner();
                Ok::<_, Status>((id, (r.ttl >= 0).then(|| time_left(r.ttl, r.granted_ttl))))
            }
        })
        .buffer_unordered(TTL_CALLS)
        .try_collect()
        .await?;

    // Session metadata: from the session range, and read for the holders and members not in it.
    let mut metadata: HashMap<SessionId, String> = HashMap::new();
    let sessions_prefix = keys.sessions_prefix();
    for s in &sessions.kvs {
        let Some(sid) = std::str::from_utf8(&s.key).ok().and_then(|k| k.strip_prefix(sessions_prefix.as_str())) else {
            continue;
        };
        if !is_session_id(sid) || s.lease == 0 {
            continue;
        }
        let id = session_id(s.lease);
        let meta = text(s, "session metadata")?;
        if let Some(&Some(remaining)) = ttls.get(&s.lease) {
            listing.sessions.push(ListedSession { id: id.clone(), remaining, metadata: meta.clone() });
        }
        metadata.insert(id, meta);
    }
    let mut holders = Vec::new();
    for l in &leases.kvs {
        let sid = text(l, "lease holder")?;
        if !is_session_id(&sid) || session_id(l.lease).as_str() != sid {
            return Err(Status::internal(format!("corrupt lease holder {sid:?}: not an etcd session id")));
        }
        let name = std::str::from_utf8(&l.key)
            .ok()
            .and_then(|k| k.strip_prefix(keys.lease_prefix().as_str()))
            .and_then(|n| Name::new(n).ok())
            .ok_or_else(|| Status::internal(format!("corrupt lease key {:?}", String::from_utf8_lossy(&l.key))))?;
        holders.push((name, session_id(l.lease), token_of(l)?, l.lease));
    }
    let unknown: BTreeSet<SessionId> = holders
        .iter()
        .map(|h| h.1.clone())
        .chain(groups.values().flatten().cloned())
        .filter(|s| !metadata.contains_key(s))
        .collect();
    let unknown: Vec<SessionId> = unknown.into_iter().collect();
    metadata.extend(session_metadata(&c, &keys, &unknown).await?);

    for (name, session, token, lease) in holders {
        let (Some(&Some(remaining)), Some(meta)) = (ttls.get(&lease), metadata.get(&session)) else { continue };
        let holder = Holder { session, token, remaining, metadata: meta.clone() };
        listing.leases.push(ListedLease { name, holder });
    }
    for (name, members) in groups {
        let members: Vec<Member> = members
            .into_iter()
            .filter_map(|s| metadata.get(&s).map(|m| Member { session: s.clone(), metadata: m.clone() }))
            .collect();
        if !members.is_empty() {
            listing.groups.push(ListedGroup { name, members });
        }
    }
    Ok(listing)
}

/// The groups whose names start with the request's prefix: the first `want` by key order, each
/// with its first `want` member sessions, plus the groups [`shadowed`] by them; and whether more
/// groups were left.
async fn walk_groups(
    c: &Clients,
    keys: &Keys,
    request: &ListRequest,
    want: usize,
) -> std::result::Result<(BTreeMap<Name, Vec<SessionId>>, bool), Status> {
    let gp = keys.groups_prefix();
    let (mut from, to) = name_range(&gp, request);
    let mut kv = c.kv.clone();
    let mut groups: BTreeMap<Name, Vec<SessionId>> = BTreeMap::new();
    let mut more = false;
    'walk: loop {
        let page = kv
            .range(RangeRequest {
                key: from.clone(),
                range_end: to.clone(),
                limit: PAGE,
                keys_only: true,
                ..Default::default()
            })
            .await?
            .into_inner();
        let mut next = None;
        for m in &page.kvs {
            let Some((group, sid)) = member_of(&m.key, &gp) else { continue };
            if !groups.contains_key(&group) && groups.len() == want {
                more = true;
                break 'walk;
            }
            let members = groups.entry(group.clone()).or_default();
            members.push(sid);
            if members.len() == want {
                // Enough of this group (finish() cuts it and says so): skip past its keys.
                next = Some(prefix_end(keys.group_prefix(&group).as_bytes()));
                break;
            }
        }
        from = match next {
            Some(n) => n,
            None if page.more => match page.kvs.last() {
                Some(last) => [last.key.as_slice(), &[0]].concat(),
                None => break,
            },
            None => break,
        };
    }
    if more {
        let names: BTreeSet<String> =
            groups.keys().flat_map(|g| shadowed(g.as_str()).map(str::to_string).collect::<Vec<_>>()).collect();
        for n in names {
            let Ok(name) = Name::new(&n) else { continue };
            if groups.contains_key(&name) || !request.matches(&n) {
                continue;
            }
            let read = kv
                .range(RangeRequest {
                    limit: i64::try_from(want).unwrap_or(i64::MAX),
                    keys_only: true,
                    ..range_prefix(&keys.group_prefix(&name))
                })
                .await?
                .into_inner();
            let members: Vec<SessionId> =
                read.kvs.iter().filter_map(|m| member_of(&m.key, &gp)).map(|(_, s)| s).collect();
            if !members.is_empty() {
                groups.insert(name, members);
            }
        }
    }
    Ok((groups, more))
}

/// The group and session of a member key (`<groups prefix><group>/<session>`), or `None` for a
/// key of another shape.
fn member_of(key: &[u8], groups_prefix: &str) -> Option<(Name, SessionId)> {
    let rest = std::str::from_utf8(key).ok()?.strip_prefix(groups_prefix)?;
    let (group, sid) = rest.split_once('/')?;
    if !is_session_id(sid) {
        return None;
    }
    let sid = SessionId::parse(sid).ok().filter(|s| lease_id(s).is_some())?;
    Some((Name::new(group).ok()?, sid))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shadowed_names_are_the_prefixes_before_a_dash_or_dot() {
        assert_eq!(shadowed("a-b.c").collect::<Vec<_>>(), vec!["a", "a-b"]);
        assert_eq!(shadowed("abc").count(), 0);
        // Why: by key, "a-b/…" sorts before "a/…", by name "a" sorts before "a-b".
        assert!(b"/p/g/a-b/".as_slice() < b"/p/g/a/".as_slice() && "a" < "a-b");
    }

    #[test]
    fn member_keys_of_another_shape_are_skipped() {
        let gp = "/p/g/";
        let (g, s) = member_of(b"/p/g/grp/00000000000000ff", gp).unwrap();
        assert_eq!((g.as_str(), s.as_str()), ("grp", "00000000000000ff"));
        assert!(member_of(b"/p/g/grp/xyz", gp).is_none());
        assert!(member_of(b"/p/g/grp", gp).is_none());
        assert!(member_of(b"/p/g/bad name/00000000000000ff", gp).is_none());
        assert!(member_of(&[0xff, 0xfe], gp).is_none());
    }

    #[test]
    fn time_left_is_the_middle_of_etcds_second_at_most_the_granted_ttl() {
        assert_eq!(time_left(0, 10), Duration::from_millis(500));
        assert_eq!(time_left(4, 10), Duration::from_millis(4500));
        assert_eq!(time_left(10, 10), Duration::from_secs(10));
    }

    #[test]
    fn name_ranges_cover_exactly_the_prefix() {
        let r = ListRequest::new("job", 1).unwrap();
        assert_eq!(name_range("/p/l/", &r), (b"/p/l/job".to_vec(), b"/p/l/joc".to_vec()));
        let all = ListRequest::new("", 1).unwrap();
        assert_eq!(name_range("/p/l/", &all), (b"/p/l/".to_vec(), b"/p/l0".to_vec()));
    }
}
