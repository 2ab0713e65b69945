//! `simba check` on etcd: the server's version, its auth (and whether the configured user may do
//! what the backend needs under the prefix), and the cluster's health as each configured member
//! reports it (members, leader, alarms; a member that does not answer is named).

use std::collections::BTreeMap;

use tonic::Code;

use super::client::EtcdClient;
use super::keys::Keys;
use super::proto::etcdserverpb::{
    alarm_request, AlarmRequest, AlarmType, AuthStatusRequest, DeleteRangeRequest, LeaseGrantRequest,
    LeaseRevokeRequest, MemberListRequest, PutRequest, RangeRequest, StatusRequest, StatusResponse,
};
use crate::backend::{CheckItem, CheckStatus};

/// Raises `status` to `to` when `to` is worse (Ok < Warn < Fail).
fn worse(status: &mut CheckStatus, to: CheckStatus) {
    let rank = |s: &CheckStatus| match s {
        CheckStatus::Ok => 0,
        CheckStatus::Warn => 1,
        CheckStatus::Fail => 2,
    };
    if rank(&to) > rank(status) {
        *status = to;
    }
}

fn item(name: &str, status: CheckStatus, detail: String) -> CheckItem {
    CheckItem { name: name.into(), status, detail }
}

/// Every check, in order: `reachable` (a member answers, with its version), `auth`, `cluster`.
pub(super) fn check(client: &EtcdClient, keys: &Keys) -> Vec<CheckItem> {
    let addrs = client.member_addrs();
    // Each configured member on its own connection: which answer, and what each says.
    let statuses: Vec<(String, crate::error::Result<StatusResponse>)> = addrs
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let s = client.call_member(i, "status", |c| async move {
                let mut m = c.maintenance.clone();
                m.status(StatusRequest {}).await.map(|r| r.into_inner())
            });
            (a.clone(), s)
        })
        .collect();
    let Some((addr, first)) = statuses.iter().find_map(|(a, s)| s.as_ref().ok().map(|s| (a, s))) else {
        let why: Vec<String> = statuses.iter().filter_map(|(_, s)| s.as_ref().err().map(|e| e.to_string())).collect();
        return vec![item("reachable", CheckStatus::Fail, why.join("; "))];
    };
    let mut items = vec![item(
        "reachable",
        CheckStatus::Ok,
        format!(
            "etcd {} at {addr} (of {}): member {:x}, raft term {}",
            first.version,
            client.members,
            first.header.as_ref().map_or(0, |h| h.member_id),
            first.raft_term
        ),
    )];
    items.push(auth(client, keys));
    items.push(cluster(client, &statuses));
    items
}

/// Whether auth is on (`AuthStatus`, etcd 3.5+; on 3.4 told by whether a user is configured and
/// accepted) and a probe of what the backend does: grant a 1 s lease, write and delete a key under
/// the prefix attached to it, read the prefix, revoke the lease.
fn auth(client: &EtcdClient, keys: &Keys) -> CheckItem {
    let enabled = client.call("auth status", |c| async move {
        let mut a = c.auth_as_user.clone();
        match a.auth_status(AuthStatusRequest {}).await {
            Ok(r) => Ok(Some(r.into_inner().enabled)),
            Err(s) if s.code() == Code::Unimplemented => Ok(None),
            Err(s) => Err(s),
        }
    });
    let user = client.user();
    let state = match (&enabled, user) {
        (Ok(Some(true)), Some(u)) => format!("auth enabled, logged in as {u}"),
        (Ok(Some(true)), None) => "auth enabled, no user configured".to_string(),
        (Ok(Some(false)), _) => "auth disabled: anyone who reaches a member may read and write".to_string(),
        // etcd 3.4 has no AuthStatus: a configured user that logged in means auth is on.
        (Ok(None), Some(u)) => format!("auth enabled, logged in as {u}"),
        (Ok(None), None) => "no user configured (the server is too old to tell whether auth is on)".to_string(),
        (Err(e), Some(u)) => format!("logged in as {u}; auth status refused: {e}"),
        (Err(e), None) => format!("auth status refused: {e}"),
    };
    let probe_key = keys.root().as_bytes().iter().chain(b"check").copied().collect::<Vec<u8>>();
    let root = keys.root().as_bytes().to_vec();
    // Four calls one after the other (each a write through the leader on a cluster): a query
    // timeout for each.
    // Not sent twice: it grants a lease.
    let probe = client.call_once("permission probe", client.query_timeout() * 4, move |c| {
        let (key, root) = (probe_key.clone(), root.clone());
        async move {
            let mut lease = c.lease.clone();
            let mut kv = c.kv.clone();
            let g = lease.lease_grant(LeaseGrantRequest { ttl: 1, id: 0 }).await?.into_inner();
            let written = async {
                kv.put(PutRequest { key: key.clone(), lease: g.id, ..Default::default() }).await?;
                kv.delete_range(DeleteRangeRequest { key, ..Default::default() }).await?;
                let range_end = super::keys::prefix_end(&root);
                kv.range(RangeRequest { key: root, range_end, limit: 1, keys_only: true, ..Default::default() }).await
            }
            .await;
            let _ = lease.lease_revoke(LeaseRevokeRequest { id: g.id }).await;
            written.map(|_| ())
        }
    });
    // Without AuthStatus (etcd 3.4), a probe that wrote without a user proves auth is off.
    let disabled = matches!(enabled, Ok(Some(false))) || (matches!(enabled, Ok(None)) && user.is_none());
    match probe {
        Ok(()) if disabled => item(
            "auth",
            CheckStatus::Warn,
            format!(
                "auth disabled: anyone who reaches a member may read and write; may grant leases and read and \
                 write under {}",
                keys.root()
            ),
        ),
        Ok(()) => {
            item("auth", CheckStatus::Ok, format!("{state}; may grant leases and read and write under {}", keys.root()))
        }
        Err(e) => {
            item("auth", CheckStatus::Fail, format!("{state}; cannot do what simba needs under {}: {e}", keys.root()))
        }
    }
}

/// The cluster as the members see it: the member list, the leader every answering member names,
/// each member's status and alarms; a configured member that does not answer is named.
fn cluster(client: &EtcdClient, statuses: &[(String, crate::error::Result<StatusResponse>)]) -> CheckItem {
    let list = client.call("member list", |c| async move {
        let mut cl = c.cluster.clone();
        cl.member_list(MemberListRequest { linearizable: false }).await.map(|r| r.into_inner().members)
    });
    let alarms = client.call("alarm list", |c| async move {
        let mut m = c.maintenance.clone();
        let req = AlarmRequest { action: alarm_request::AlarmAction::Get as i32, member_id: 0, alarm: 0 };
        m.alarm(req).await.map(|r| r.into_inner().alarms)
    });
    let members = match list {
        Ok(m) => m,
        Err(e) => return item("cluster", CheckStatus::Fail, format!("cannot list the members: {e}")),
    };
    let names: BTreeMap<u64, String> = members
        .iter()
        .map(|m| (m.id, if m.name.is_empty() { format!("{:x} (not started)", m.id) } else { m.name.clone() }))
        .collect();
    let name_of = |id: u64| names.get(&id).cloned().unwrap_or_else(|| format!("{id:x}"));
    let mut status = CheckStatus::Ok;
    let mut parts = Vec::new();
    let mut leaders = Vec::new();
    let mut answered = Vec::new();
    for (addr, s) in statuses {
        match s {
            Ok(s) => {
                let id = s.header.as_ref().map_or(0, |h| h.member_id);
                answered.push(id);
                leaders.push(s.leader);
                let role = if s.leader == id { "leader" } else { "follower" };
                let mut line =
                    format!("{} at {addr}: {role}, etcd {}, raft index {}", name_of(id), s.version, s.raft_index);
                if !s.errors.is_empty() {
                    worse(&mut status, CheckStatus::Warn);
                    line.push_str(&format!(", errors: {}", s.errors.join("; ")));
                }
                parts.push(line);
            }
            Err(e) => {
                worse(&mut status, CheckStatus::Warn);
                let who = members
                    .iter()
                    .find(|m| m.client_ur_ls.iter().any(|u| u.ends_with(addr.as_str())))
                    .map_or_else(|| "member".to_string(), |m| name_of(m.id));
                parts.push(format!("{who} at {addr} UNREACHABLE: {e}"));
            }
        }
    }
    // Members of the cluster that no configured address reached.
    for m in &members {
        if !answered.contains(&m.id) && !m.client_ur_ls.is_empty() {
            let urls = m.client_ur_ls.join(",");
            if !statuses.iter().any(|(a, s)| s.is_err() && urls.contains(a.as_str())) {
                parts.push(format!("{} ({urls}) not checked: not among the configured members", name_of(m.id)));
            }
        }
    }
    leaders.sort_unstable();
    leaders.dedup();
    let leader = match leaders.as_slice() {
        [l] if *l != 0 => format!("leader {}", name_of(*l)),
        [_] => {
            worse(&mut status, CheckStatus::Fail);
            "NO LEADER (no quorum: writes and renewals fail)".to_string()
        }
        _ => {
            worse(&mut status, CheckStatus::Warn);
            format!("members disagree on the leader ({}: an election is under way)", leaders.len())
        }
    };
    match alarms {
        Ok(a) if a.is_empty() => {}
        Ok(a) => {
            worse(&mut status, CheckStatus::Fail);
            for al in a {
                let kind = AlarmType::try_from(al.alarm)
                    .map_or_else(|_| format!("alarm {}", al.alarm), |t| t.as_str_name().to_string());
                parts.push(format!("ALARM {kind} on {} (writes refused until disarmed)", name_of(al.member_id)));
            }
        }
        Err(e) => {
            worse(&mut status, CheckStatus::Warn);
            parts.push(format!("alarms not readable: {e}"));
        }
    }
    item("cluster", status, format!("{} members, {leader}; {}", members.len(), parts.join("; ")))
}
