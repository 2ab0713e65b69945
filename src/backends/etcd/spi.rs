//! [`LeaseBackend`] for [`EtcdBackend`]: each method is one [`EtcdClient::call`] (one bounded
//! future on the backend's runtime), its requests pipelined where they do not depend on each other.

use std::collections::BTreeSet;
use std::time::Duration;

use tonic::{Code, Status};

use super::client::Clients;
use super::keys::{lease_id, prefix_end, session_id, Keys};
use super::proto::etcdserverpb::{
    compare, request_op, response_op, Compare, DeleteRangeRequest, LeaseGrantRequest, LeaseKeepAliveRequest,
    LeaseRevokeRequest, LeaseTimeToLiveRequest, PutRequest, RangeRequest, RangeResponse, RequestOp, TxnRequest,
    TxnResponse,
};
use super::proto::mvccpb::KeyValue;
use super::{EtcdBackend, MAX_TTL};
use crate::backend::{
    Acquire, Capabilities, CheckItem, Holder, KeepAlive, LeaseBackend, ListRequest, Listing, Member, Notification,
    SessionGrant, TermRemaining, Topic,
};
use crate::channel::Sender;
use crate::error::{Error, Result};
use crate::types::{Name, SessionId, Token};

/// Most operations etcd accepts in one transaction (its `--max-txn-ops` default).
pub(super) const MAX_TXN_OPS: usize = 128;

/// etcd's answer to a write attached to a lease that does not exist (expired or revoked).
fn lease_not_found(s: &Status) -> bool {
    s.code() == Code::NotFound && s.message().contains("lease not found")
}

/// etcd's answer to a grant of a lease id it already has.
fn lease_exists(s: &Status) -> bool {
    s.code() == Code::FailedPrecondition && s.message().contains("lease already exists")
}

/// A random lease id for a new session: positive, 63 bits (etcd's ids are `int64`, 0 meaning
/// "choose one").
fn new_lease_id() -> i64 {
    let id = (crate::sync::random_id() as u64 >> 1) as i64;
    id.max(1)
}

pub(super) fn range(key: Vec<u8>) -> RangeRequest {
    RangeRequest { key, ..Default::default() }
}

pub(super) fn range_prefix(prefix: &str) -> RangeRequest {
    let key = prefix.as_bytes().to_vec();
    RangeRequest { range_end: prefix_end(&key), key, ..Default::default() }
}

pub(super) fn op_range(r: RangeRequest) -> RequestOp {
    RequestOp { request: Some(request_op::Request::RequestRange(r)) }
}

fn op_put(key: Vec<u8>, value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp { request: Some(request_op::Request::RequestPut(PutRequest { key, value, lease, ..Default::default() })) }
}

fn op_delete(key: Vec<u8>) -> RequestOp {
    RequestOp {
        request: Some(request_op::Request::RequestDeleteRange(DeleteRangeRequest { key, ..Default::default() })),
    }
}

fn op_txn(t: TxnRequest) -> RequestOp {
    RequestOp { request: Some(request_op::Request::RequestTxn(t)) }
}

fn cmp(key: Vec<u8>, result: compare::CompareResult, target: compare::TargetUnion) -> Compare {
    let t = match target {
        compare::TargetUnion::Version(_) => compare::CompareTarget::Version,
        compare::TargetUnion::CreateRevision(_) => compare::CompareTarget::Create,
        compare::TargetUnion::ModRevision(_) => compare::CompareTarget::Mod,
        compare::TargetUnion::Value(_) => compare::CompareTarget::Value,
        compare::TargetUnion::Lease(_) => compare::CompareTarget::Lease,
    };
    Compare { result: result as i32, target: t as i32, key, range_end: Vec::new(), target_union: Some(target) }
}

fn created_at(key: Vec<u8>, revision: i64) -> Compare {
    cmp(key, compare::CompareResult::Equal, compare::TargetUnion::CreateRevision(revision))
}

/// The metadata of those of `sids` whose session key still exists, in their order: one read of
/// their session keys per [`MAX_TXN_OPS`] (a session gone meanwhile is left out).
pub(crate) async fn session_metadata(
    c: &Clients,
    keys: &Keys,
    sids: &[SessionId],
) -> std::result::Result<Vec<(SessionId, String)>, Status> {
    let mut kv = c.kv.clone();
    let mut out = Vec::with_capacity(sids.len());
    for chunk in sids.chunks(MAX_TXN_OPS) {
        let txn = TxnRequest {
            compare: Vec::new(),
            success: chunk.iter().map(|s| op_range(range(keys.session(s)))).collect(),
            failure: Vec::new(),
        };
        let reply = kv.txn(txn).await?.into_inner();
        for (i, sid) in chunk.iter().enumerate() {
            if let Some(m) = txn_range(&reply, i)?.kvs.first() {
                out.push((sid.clone(), text(m, "session metadata")?));
            }
        }
    }
    Ok(out)
}

/// The range reply at `i` of a transaction's replies.
pub(super) fn txn_range(t: &TxnResponse, i: usize) -> std::result::Result<&RangeResponse, Status> {
    match t.responses.get(i).and_then(|r| r.response.as_ref()) {
        Some(response_op::Response::ResponseRange(r)) => Ok(r),
        _ => Err(Status::internal(format!("etcd's transaction reply has no range reply at position {i}"))),
    }
}

pub(super) fn text(kv: &KeyValue, what: &str) -> std::result::Result<String, Status> {
    String::from_utf8(kv.value.clone()).map_err(|_| {
        Status::internal(format!(
            "corrupt {what}: the value of key {:?} is not UTF-8",
            String::from_utf8_lossy(&kv.key)
        ))
    })
}

pub(super) fn token_of(kv: &KeyValue) -> std::result::Result<Token, Status> {
    u64::try_from(kv.create_revision)
        .ok()
        .and_then(Token::new)
        .ok_or_else(|| Status::internal(format!("etcd reported create revision {} for a key", kv.create_revision)))
}

pub(super) fn secs(ttl: i64) -> Duration {
    Duration::from_secs(u64::try_from(ttl).unwrap_or(0))
}

/// Whether `s` is a session id this backend makes (16 hex digits).
pub(super) fn is_session_id(s: &str) -> bool {
    s.len() == 16 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

impl EtcdBackend {
    fn expired(session: &SessionId) -> Error {
        Error::session_expired(session)
    }
}

impl LeaseBackend for EtcdBackend {
    fn kind(&self) -> &'static str {
        "etcd"
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        if lease_duration.is_zero() || lease_duration > MAX_TTL {
            return Err(Error::config(format!(
                "etcd cannot grant a lease of {lease_duration:?}: its TTLs are 1 to {} whole seconds",
                MAX_TTL.as_secs()
            )));
        }
        // etcd's TTLs are whole seconds: round up (the session then lives at most a second longer
        // on the server than asked; the local deadline still uses the lease duration).
        let asked = i64::try_from(lease_duration.as_secs() + u64::from(lease_duration.subsec_nanos() > 0))
            .map_err(|_| Error::config("lease duration too long for etcd"))?;
        let keys = self.inner.keys.clone();
        let metadata = metadata.as_bytes().to_vec();
        // The lease id is chosen here, so that a grant sent to a second member (the first did not
        // answer in time: route.rs) cannot grant a second lease: etcd refuses an id it has
        // ("lease already exists"), and the grant then reads the granted TTL instead.
        let id = new_lease_id();
        let granted = self.inner.client.call("open session", move |c| {
            let (metadata, keys) = (metadata.clone(), keys.clone());
            async move {
                let mut lease = c.lease.clone();
                let ttl = match lease.lease_grant(LeaseGrantRequest { ttl: asked, id }).await {
                    Ok(g) => {
                        let g = g.into_inner();
                        if !g.error.is_empty() {
                            return Err(Status::failed_precondition(g.error));
                        }
                        g.ttl
                    }
                    Err(s) if lease_exists(&s) => {
                        lease
                            .lease_time_to_live(LeaseTimeToLiveRequest { id, keys: false })
                            .await?
                            .into_inner()
                            .granted_ttl
                    }
                    Err(s) => return Err(s),
                };
                if ttl != asked {
                    // The server raised the TTL to its minimum: refuse rather than hold longer.
                    let _ = lease.lease_revoke(LeaseRevokeRequest { id }).await;
                    return Ok(Err((ttl, asked)));
                }
                let key = keys.session(&session_id(id));
                let mut kv = c.kv.clone();
                if let Err(e) = kv.put(PutRequest { key, value: metadata, lease: id, ..Default::default() }).await {
                    let _ = lease.lease_revoke(LeaseRevokeRequest { id }).await;
                    return Err(e);
                }
                Ok(Ok((id, ttl)))
            }
        })?;
        match granted {
            Ok((id, ttl)) => Ok(SessionGrant { id: session_id(id), remaining: secs(ttl).min(lease_duration) }),
            Err((granted, asked)) => Err(Error::config(format!(
                "etcd granted a {granted} s lease when asked for {asked} s (lease duration {lease_duration:?}): its \
                 minimum lease TTL, 1.5 election timeouts rounded up to whole seconds, is longer; use a lease \
                 duration of at least {granted} s, or a shorter --election-timeout on the server"
            ))),
        }
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        let Some(id) = lease_id(session) else { return Ok(KeepAlive::Expired) };
        let owned_prefix = self.inner.keys.owned_prefix(session);
        let lease_prefix = self.inner.keys.lease_prefix();
        let groups_prefix = self.inner.keys.groups_prefix();
        let sid = session.to_string();
        // Three requests pipelined on one connection (one round trip): LeaseKeepAlive renews,
        // LeaseTimeToLive lists the keys attached to the lease (what the server says the session
        // holds), and a range reads the session's index of tokens.
        let reply = self.inner.client.call("keep-alive", move |c| {
            let owned_prefix = owned_prefix.clone();
            async move {
                let mut lease = c.lease.clone();
                let mut lease2 = c.lease.clone();
                let mut kv = c.kv.clone();
                let renew = async move {
                    let mut stream = lease
                        .lease_keep_alive(futures::stream::iter([LeaseKeepAliveRequest { id }]))
                        .await?
                        .into_inner();
                    stream.message().await?.ok_or_else(|| Status::unavailable("etcd closed the keep-alive stream"))
                };
                let attached = lease2.lease_time_to_live(LeaseTimeToLiveRequest { id, keys: true });
                let index = kv.range(range_prefix(&owned_prefix));
                let (renew, attached, index) = futures::future::join3(renew, attached, index).await;
                Ok((renew?, attached?.into_inner(), index?.into_inner()))
            }
        })?;
        let (renew, attached, index) = reply;
        for header in [&renew.header, &attached.header, &index.header].into_iter().flatten() {
            self.inner.saw(header.revision);
        }
        if renew.ttl <= 0 || attached.ttl < 0 {
            return Ok(KeepAlive::Expired);
        }
        let mut held = BTreeSet::new();
        let mut groups = BTreeSet::new();
        let suffix = format!("/{sid}");
        for k in &attached.keys {
            let Ok(k) = std::str::from_utf8(k) else { continue };
            if let Some(n) = k.strip_prefix(lease_prefix.as_str()) {
                held.insert(n.to_string());
            } else if let Some(g) = k.strip_prefix(groups_prefix.as_str()).and_then(|r| r.strip_suffix(suffix.as_str()))
            {
                if let Ok(g) = Name::new(g) {
                    groups.insert(g);
                }
            }
        }
        let own_prefix = self.inner.keys.owned_prefix(session);
        let mut owned = Vec::new();
        for kv in &index.kvs {
            let Some(n) = std::str::from_utf8(&kv.key).ok().and_then(|k| k.strip_prefix(own_prefix.as_str())) else {
                continue;
            };
            if !held.contains(n) {
                continue; // the lease key is gone (deleted behind the session): lost
            }
            let name = Name::new(n).map_err(|e| Error::backend(format!("corrupt etcd index key: {e}")))?;
            let token = token_of(kv).map_err(|s| Error::backend(s.message().to_string()))?;
            owned.push((name, token));
        }
        Ok(KeepAlive::Alive {
            remaining: secs(renew.ttl).min(lease_duration),
            owned,
            groups: groups.into_iter().collect(),
            unknown: Vec::new(),
            // etcd tells a lease's time left in whole seconds only: too coarse to compare clocks.
            remaining_before: None,
        })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        let Some(id) = lease_id(session) else { return Ok(()) };
        self.inner.client.call("lease revoke", move |c| async move {
            let mut lease = c.lease.clone();
            match lease.lease_revoke(LeaseRevokeRequest { id }).await {
                Ok(_) => Ok(()),
                Err(s) if lease_not_found(&s) => Ok(()),
                Err(s) => Err(s),
            }
        })
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        let Some(id) = lease_id(session) else { return Err(Self::expired(session)) };
        let key = self.inner.keys.lease(name);
        let index = self.inner.keys.owned(session, name);
        let sid = session.to_string();
        // One transaction: create the lease key and the session's index entry (same revision),
        // both attached to the session's etcd lease, only when the lease key is absent (a session
        // whose etcd lease is gone is refused "lease not found"); else read the key and whether
        // the session's key exists (it does exactly while its etcd lease lives). The puts'
        // revision, the reply header's, is the key's create revision: the token.
        let session_key = RangeRequest { count_only: true, ..range(self.inner.keys.session(session)) };
        let txn = TxnRequest {
            compare: vec![created_at(key.clone(), 0)],
            success: vec![op_put(key.clone(), sid.clone().into_bytes(), id), op_put(index, Vec::new(), id)],
            failure: vec![op_range(range(key)), op_range(session_key)],
        };
        let reply = self.inner.client.call("acquire", move |c| {
            let txn = txn.clone();
            async move {
                let mut kv = c.kv.clone();
                match kv.txn(txn).await {
                    Ok(r) => Ok(Some(r.into_inner())),
                    Err(s) if lease_not_found(&s) => Ok(None),
                    Err(s) => Err(s),
                }
            }
        })?;
        let Some(reply) = reply else { return Err(Self::expired(session)) };
        let backend = |s: Status| Error::backend(s.message().to_string());
        if reply.succeeded {
            let revision = reply.header.as_ref().map_or(0, |h| h.revision);
            let token = u64::try_from(revision).ok().and_then(Token::new).ok_or_else(|| {
                Error::backend(format!("etcd reported revision {revision} for the acquire of '{name}'"))
            })?;
            // The key is attached to the session's lease: it ends exactly with the session.
            return Ok(Acquire::Acquired { token, remaining: TermRemaining::WithSession });
        }
        if txn_range(&reply, 1).map_err(backend)?.count == 0 {
            // Gone: another session's key must not make this answer `Busy`.
            return Err(Self::expired(session));
        }
        let read = txn_range(&reply, 0).map_err(backend)?;
        match read.kvs.first() {
            // Already this session's (the same acquire sent twice, route.rs).
            Some(kv) if kv.lease == id && kv.value == sid.as_bytes() => {
                Ok(Acquire::Acquired { token: token_of(kv).map_err(backend)?, remaining: TermRemaining::WithSession })
            }
            Some(_) => Ok(Acquire::Busy),
            // Deleted between the compare and the read cannot happen within one transaction.
            None => Err(Error::backend(format!("etcd lost the key of lease '{name}' within its own transaction"))),
        }
    }

    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        let rev =
            i64::try_from(token.get()).map_err(|_| Error::backend(format!("token {token} is not an etcd revision")))?;
        let key = self.inner.keys.lease(name);
        let index = self.inner.keys.owned(session, name);
        // Deletes the key only in this term (its create revision is the token), with the index
        // entry; when the key is already gone, still drops this term's index entry.
        let txn = TxnRequest {
            compare: vec![
                created_at(key.clone(), rev),
                cmp(
                    key.clone(),
                    compare::CompareResult::Equal,
                    compare::TargetUnion::Value(session.to_string().into_bytes()),
                ),
            ],
            success: vec![op_delete(key), op_delete(index.clone())],
            failure: vec![op_txn(TxnRequest {
                compare: vec![created_at(index.clone(), rev)],
                success: vec![op_delete(index)],
                failure: Vec::new(),
            })],
        };
        self.inner.client.call("release", move |c| {
            let txn = txn.clone();
            async move {
                let mut kv = c.kv.clone();
                kv.txn(txn).await.map(|_| ())
            }
        })
    }

    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        let key = self.inner.keys.lease(name);
        let keys = self.inner.keys.clone();
        self.inner.client.call("holder", move |c| {
            let (key, keys) = (key.clone(), keys.clone());
            async move {
                let mut kv = c.kv.clone();
                let read = kv.range(range(key)).await?.into_inner();
                let Some(held) = read.kvs.first() else { return Ok(None) };
                let sid = text(held, "lease holder")?;
                if !is_session_id(&sid) || lease_id(&SessionId::from_u64(held.lease as u64)).is_none() {
                    return Err(Status::internal(format!("corrupt lease holder {sid:?}: not an etcd session id")));
                }
                let session = SessionId::from_u64(held.lease as u64);
                let mut lease = c.lease.clone();
                let ttl = lease.lease_time_to_live(LeaseTimeToLiveRequest { id: held.lease, keys: false });
                let meta = kv.range(range(keys.session(&session)));
                let (ttl, meta) = futures::future::join(ttl, meta).await;
                let ttl = ttl?.into_inner();
                if ttl.ttl < 0 {
                    return Ok(None);
                }
                let metadata = match meta?.into_inner().kvs.first() {
                    Some(m) => text(m, "session metadata")?,
                    None => return Ok(None),
                };
                Ok(Some(Holder { session, token: token_of(held)?, remaining: secs(ttl.ttl), metadata }))
            }
        })
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        let Some(id) = lease_id(session) else { return Err(Self::expired(session)) };
        let key = self.inner.keys.member(group, session);
        let joined = self.inner.client.call("join", move |c| {
            let key = key.clone();
            async move {
                let mut kv = c.kv.clone();
                match kv.put(PutRequest { key, value: Vec::new(), lease: id, ..Default::default() }).await {
                    Ok(r) => Ok(Some(r.into_inner().header.map_or(0, |h| h.revision))),
                    Err(s) if lease_not_found(&s) => Ok(None),
                    Err(s) => Err(s),
                }
            }
        })?;
        match joined {
            Some(revision) => {
                self.inner.saw(revision);
                Ok(())
            }
            None => Err(Self::expired(session)),
        }
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        let key = self.inner.keys.member(group, session);
        // Deletes the membership only when it was created at or before the last revision a join
        // or keep-alive reply showed: every membership this leave means. A copy of this leave
        // that reaches a member late (sent on after the hedge delay, route.rs) then cannot
        // delete a membership the session joined again after the leave returned. A membership
        // this leave misses (a join's copy landing late) is a stray: the next keep-alive lists
        // it and the engine leaves it again (`LeaveStray`), with the keep-alive's revision seen.
        let seen = self.inner.seen.load(std::sync::atomic::Ordering::SeqCst);
        let txn = TxnRequest {
            compare: vec![cmp(
                key.clone(),
                compare::CompareResult::Less,
                compare::TargetUnion::CreateRevision(seen.saturating_add(1)),
            )],
            success: vec![op_delete(key)],
            failure: Vec::new(),
        };
        self.inner.client.call("leave", move |c| {
            let txn = txn.clone();
            async move {
                let mut kv = c.kv.clone();
                kv.txn(txn).await.map(|_| ())
            }
        })
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        let prefix = self.inner.keys.group_prefix(group);
        let keys = self.inner.keys.clone();
        self.inner.client.call("members", move |c| {
            let (prefix, keys) = (prefix.clone(), keys.clone());
            async move {
                let mut kv = c.kv.clone();
                let read = kv.range(range_prefix(&prefix)).await?.into_inner();
                let sids: Vec<SessionId> = read
                    .kvs
                    .iter()
                    .filter_map(|m| std::str::from_utf8(&m.key).ok()?.strip_prefix(prefix.as_str()))
                    .filter(|s| is_session_id(s))
                    .filter_map(|s| SessionId::parse(s).ok())
                    .collect();
                // The members' metadata, from their session keys (a session gone meanwhile is
                // not alive: left out).
                let known = session_metadata(&c, &keys, &sids).await?;
                Ok(known.into_iter().map(|(session, metadata)| Member { session, metadata }).collect())
            }
        })
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        let key = self.inner.keys.semaphore(name);
        let txn = match permits {
            Some(p) => TxnRequest {
                compare: vec![created_at(key.clone(), 0)],
                success: vec![op_put(key.clone(), p.to_string().into_bytes(), 0), op_range(range(key.clone()))],
                failure: vec![op_range(range(key))],
            },
            None => TxnRequest { compare: Vec::new(), success: vec![op_range(range(key))], failure: Vec::new() },
        };
        let reply = self.inner.client.call("semaphore limit", move |c| {
            let txn = txn.clone();
            async move {
                let mut kv = c.kv.clone();
                kv.txn(txn).await.map(|r| r.into_inner())
            }
        })?;
        let pos = if reply.succeeded && permits.is_some() { 1 } else { 0 };
        let read = txn_range(&reply, pos).map_err(|s| Error::backend(s.message().to_string()))?;
        let Some(kv) = read.kvs.first() else { return Ok(None) };
        let v = String::from_utf8_lossy(&kv.value);
        // The range is the caller's to check (`stored_limit`: a semaphore's or a partition set's).
        match v.parse::<u32>() {
            Ok(n) if n > 0 => Ok(Some(n)),
            _ => Err(Error::backend(format!(
                "corrupt limit {:?} of semaphore '{name}' in etcd key {}: limits are integers > 0",
                v.chars().take(40).collect::<String>(),
                String::from_utf8_lossy(&kv.key)
            ))),
        }
    }

    fn call_bound(&self) -> Option<Duration> {
        // Every call ends by the query timeout: on the caller's thread by its own timer
        // (slots.rs), on the backend's runtime by the inner timeout and the caller's wait, 20 ms
        // later (client.rs), which is thread scheduling. With more, the engine would hand every
        // call to a worker whenever the session's query timeout equals etcd's.
        Some(self.inner.client.query_timeout())
    }

    fn capabilities(&self) -> Capabilities {
        // Watches on one stream, resynchronised when it breaks (watch.rs); a lease registration
        // reads the key first; listing with range reads (listing.rs).
        Capabilities { push_release: true, push_membership: true, watch_checks_lease: true, list: true }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        self.inner.watches.register(&self.inner.client, topic, notify)
    }

    fn list(&self, request: &ListRequest) -> Result<Listing> {
        super::listing::list(&self.inner.client, &self.inner.keys, request)
    }

    fn check(&self) -> Vec<CheckItem> {
        super::check::check(&self.inner.client, &self.inner.keys)
    }
}
