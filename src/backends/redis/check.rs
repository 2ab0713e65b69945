//! The startup safety check (`maxmemory-policy`) and the operational checks of `simba check`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use redis::Value;

use super::reply::{array, int, string};
use super::{EvictionCheck, Inner};
use crate::backend::{CheckItem, CheckStatus};
use crate::error::{Error, ErrorKind, Result};

/// `CONFIG GET <param>` on every master: `(address, value)`; a missing parameter is `None`.
fn config_get(inner: &Inner, param: &str, deadline: Instant) -> Result<Vec<(String, Option<String>)>> {
    let mut cmd = redis::cmd("CONFIG");
    cmd.arg("GET").arg(param);
    let replies = inner.scripting.on_masters(&cmd, deadline)?;
    Ok(replies.into_iter().map(|(addr, v)| (addr, config_value(&v))).collect())
}

fn config_value(v: &Value) -> Option<String> {
    match v {
        Value::Map(entries) => entries.first().and_then(|(_, v)| string(v)),
        other => array(other).and_then(|a| a.get(1)).and_then(string),
    }
}

/// Policies that may evict Simba's keys: `allkeys-*` (a lease hash, restarting its token at 1) and
/// `volatile-*` (a session hash, ending the session early).
fn risky(policy: &str) -> bool {
    policy.starts_with("allkeys-") || policy.starts_with("volatile-")
}

fn policy_problem(addr: &str, policy: &str) -> String {
    let what = if policy.starts_with("allkeys-") {
        "can evict a lease hash, which restarts its fencing token at 1"
    } else {
        "can evict a session hash, which ends the session early while its holder still trusts its leases"
    };
    format!(
        "redis at {addr} has maxmemory-policy {policy}, which {what}; set maxmemory-policy noeviction \
         (or give simba a dedicated instance)"
    )
}

/// Runs at construction: `PING` (fails when unreachable or not authorised), then reads
/// `maxmemory-policy` on every master; warns or refuses (per
/// [`EvictionCheck`]) for `allkeys-*` / `volatile-*`; warns and continues when `CONFIG` is not
/// allowed.
pub(crate) fn startup(inner: &Inner) -> Result<()> {
    let target = inner.scripting.target();
    inner.scripting.on_masters(&redis::cmd("PING"), inner.deadline())?;
    if !inner.scripting.is_clustered() {
        match cluster_enabled(inner) {
            Ok(Some(addr)) => return Err(Error::config(cluster_node_problem(&addr))),
            Ok(None) => {}
            Err(e) if e.kind() == ErrorKind::Unavailable => return Err(e),
            Err(e) => log::warn!(
                "cannot read INFO cluster of {target} ({e}); if it is a Redis Cluster node, connect with \
                 redis+cluster://host:port,… (a plain connection fails every operation that spans slots)"
            ),
        }
    }
    match config_get(inner, "maxmemory-policy", inner.deadline()) {
        Ok(policies) => {
            for (addr, policy) in policies {
                let Some(policy) = policy else {
                    log::warn!("redis at {addr} did not report maxmemory-policy; make sure it is noeviction");
                    continue;
                };
                if risky(&policy) {
                    let problem = policy_problem(&addr, &policy);
                    match inner.options.eviction_check {
                        EvictionCheck::Warn => log::warn!("{problem}"),
                        EvictionCheck::Refuse => {
                            return Err(Error::config(format!("{problem}; refusing to start (EvictionCheck::Refuse)")))
                        }
                    }
                }
            }
            Ok(())
        }
        Err(e) if e.kind() == ErrorKind::Unavailable => Err(e),
        Err(e) => {
            log::warn!(
                "cannot read maxmemory-policy of {target} ({e}); CONFIG may be disabled: make sure the policy \
                 is noeviction, since evicting a lease hash restarts its token at 1"
            );
            Ok(())
        }
    }
}

/// `INFO cluster` on a standalone connection: `Some(address)` when the server is a Redis Cluster
/// node (`cluster_enabled:1`), where a plain connection would fail every multi-key script with
/// `CROSSSLOT`.
fn cluster_enabled(inner: &Inner) -> Result<Option<String>> {
    let mut cmd = redis::cmd("INFO");
    cmd.arg("cluster");
    let replies = inner.scripting.on_masters(&cmd, inner.deadline())?;
    Ok(replies
        .into_iter()
        .find(|(_, v)| string(v).and_then(|i| info_field(&i, "cluster_enabled")).as_deref() == Some("1"))
        .map(|(addr, _)| addr))
}

fn cluster_node_problem(addr: &str) -> String {
    let hosts = addr.split_once("://").map_or(addr, |(_, rest)| rest);
    format!(
        "{addr} is a Redis Cluster node (INFO cluster: cluster_enabled:1): use redis+cluster://{hosts} (add more \
         nodes after commas) to connect to the cluster; a plain redis:// connection fails every operation whose \
         keys span hash slots (CROSSSLOT)"
    )
}

fn item(name: &str, status: CheckStatus, detail: impl Into<String>) -> CheckItem {
    CheckItem { name: name.to_string(), status, detail: detail.into() }
}

/// The checks of `simba check`: reachable, maxmemory-policy, appendonly, clock (informational),
/// and replicas (with `wait_replicas`) or cluster state (Cluster).
pub(crate) fn check(inner: &Inner) -> Vec<CheckItem> {
    let target = inner.scripting.target();
    let mut items = Vec::new();
    let started = Instant::now();
    match inner.scripting.on_masters(&redis::cmd("PING"), inner.deadline()) {
        Ok(r) => items.push(item(
            "reachable",
            CheckStatus::Ok,
            format!("{target}: {} master(s) answered PING in {:?}", r.len(), started.elapsed()),
        )),
        Err(e) => {
            items.push(item("reachable", CheckStatus::Fail, format!("{target}: {}", crate::display_chain(&e))));
            return items;
        }
    }

    items.push(transport(inner, &target));
    if inner.push {
        items.push(inner.watchers.check_item());
    }

    if !inner.scripting.is_clustered() {
        items.push(match cluster_enabled(inner) {
            Ok(Some(addr)) => item("mode", CheckStatus::Fail, cluster_node_problem(&addr)),
            Ok(None) => item("mode", CheckStatus::Ok, format!("{target}: standalone server (cluster_enabled:0)")),
            Err(e) => item("mode", CheckStatus::Warn, format!("cannot read INFO cluster ({e})")),
        });
    }

    match config_get(inner, "maxmemory-policy", inner.deadline()) {
        Ok(policies) => {
            for (addr, policy) in policies {
                items.push(match policy {
                    Some(p) if risky(&p) => item("maxmemory-policy", CheckStatus::Warn, policy_problem(&addr, &p)),
                    Some(p) => item("maxmemory-policy", CheckStatus::Ok, format!("{addr}: {p}")),
                    None => item("maxmemory-policy", CheckStatus::Warn, format!("{addr}: not reported")),
                });
            }
        }
        Err(e) => items.push(item(
            "maxmemory-policy",
            CheckStatus::Warn,
            format!("cannot read it ({e}); make sure it is noeviction"),
        )),
    }

    match config_get(inner, "appendonly", inner.deadline()) {
        Ok(values) => {
            for (addr, v) in values {
                items.push(if v.as_deref() == Some("yes") {
                    item("appendonly", CheckStatus::Ok, format!("{addr}: AOF persistence is on"))
                } else {
                    item(
                        "appendonly",
                        CheckStatus::Warn,
                        format!(
                            "{addr}: appendonly is {}; a restart without persistence loses lease hashes and \
                             restarts tokens at 1 (enable AOF)",
                            v.as_deref().unwrap_or("unknown")
                        ),
                    )
                });
            }
        }
        Err(e) => items.push(item("appendonly", CheckStatus::Warn, format!("cannot read it ({e})"))),
    }

    let sent = SystemTime::now();
    match inner.scripting.on_masters(&redis::cmd("TIME"), inner.deadline()) {
        Ok(times) => {
            let back = SystemTime::now();
            let local_ms = |t: SystemTime| t.duration_since(UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0);
            let mid = (local_ms(sent) + local_ms(back)) / 2;
            for (addr, v) in times {
                let server = array(&v).and_then(|a| Some((int(a.first()?)?, int(a.get(1)?)?)));
                items.push(match server {
                    Some((s, us)) => item(
                        "clock",
                        CheckStatus::Ok,
                        format!(
                            "{addr}: server clock minus local clock = {:+} ms (informational: simba measures \
                             leases with Redis TIME only; a server clock step shortens or lengthens all leases)",
                            s * 1000 + us / 1000 - mid
                        ),
                    ),
                    None => item("clock", CheckStatus::Warn, format!("{addr}: unexpected TIME reply {v:?}")),
                });
            }
        }
        Err(e) => items.push(item("clock", CheckStatus::Warn, format!("cannot read TIME ({e})"))),
    }

    let wait = inner.options.wait_replicas;
    if wait > 0 {
        let mut cmd = redis::cmd("INFO");
        cmd.arg("replication");
        items.push(match inner.scripting.on_masters(&cmd, inner.deadline()) {
            Ok(r) => {
                let connected = r
                    .first()
                    .and_then(|(_, v)| string(v))
                    .and_then(|info| info_field(&info, "connected_slaves"))
                    .and_then(|v| v.parse::<u32>().ok())
                    .unwrap_or(0);
                let status = if connected >= wait { CheckStatus::Ok } else { CheckStatus::Fail };
                item("replicas", status, format!("{connected} replica(s) connected; wait_replicas = {wait}"))
            }
            Err(e) => item("replicas", CheckStatus::Fail, format!("cannot read INFO replication ({e})")),
        });
    }

    if inner.scripting.is_clustered() {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("INFO");
        items.push(match inner.scripting.on_masters(&cmd, inner.deadline()) {
            Ok(r) => {
                let bad: Vec<String> = r
                    .iter()
                    .filter(|(_, v)| string(v).and_then(|i| info_field(&i, "cluster_state")).as_deref() != Some("ok"))
                    .map(|(a, _)| a.clone())
                    .collect();
                if bad.is_empty() {
                    item("cluster-state", CheckStatus::Ok, format!("{} master(s) report cluster_state:ok", r.len()))
                } else {
                    item("cluster-state", CheckStatus::Fail, format!("cluster_state is not ok on {}", bad.join(", ")))
                }
            }
            Err(e) => item("cluster-state", CheckStatus::Fail, format!("cannot read CLUSTER INFO ({e})")),
        });
    }
    items
}

/// The `tls` item: whether the connections are encrypted and the server certificate verified.
/// It follows a successful `PING`, so over TLS the handshake (with its verification) succeeded.
fn transport(inner: &Inner, target: &str) -> CheckItem {
    let endpoints = inner.scripting.subscriber_endpoints();
    match endpoints.first().and_then(|info| super::tls::describe(info, &inner.tls)) {
        Some(d) => item("tls", CheckStatus::Ok, format!("{target}: {d}; the TLS handshake succeeded")),
        None => {
            let local = endpoints.iter().all(|i| match i.addr() {
                redis::ConnectionAddr::Tcp(host, _) => {
                    host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
                }
                _ => true,
            });
            let (status, why) = if local {
                (CheckStatus::Ok, "a loopback address or Unix socket")
            } else {
                (CheckStatus::Warn, "passwords and data cross the network in clear: use rediss:// (rediss+cluster://)")
            };
            item("tls", status, format!("{target}: not encrypted (plain redis://); {why}"))
        }
    }
}

fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| l.strip_prefix(field)?.strip_prefix(':').map(|v| v.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies() {
        assert!(risky("allkeys-lru"));
        assert!(risky("volatile-ttl"));
        assert!(!risky("noeviction"));
        assert_eq!(
            config_value(&Value::Array(vec![
                Value::BulkString(b"maxmemory-policy".to_vec()),
                Value::BulkString(b"noeviction".to_vec())
            ])),
            Some("noeviction".to_string())
        );
        assert_eq!(config_value(&Value::Array(vec![])), None);
        assert_eq!(info_field("# R\r\nrole:master\r\nconnected_slaves:2\r\n", "connected_slaves"), Some("2".into()));
    }
}
