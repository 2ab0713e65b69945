//! The commands that only look or administer: `leader`, `holders`, `members`, `schema`, `purge`, `check`.

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use simba::backend::{CheckStatus, LeaseBackend};
use simba::{BackendKind, Config, Error};

use crate::hold::holder_json;
use crate::out::{code, Fail, Out};
use crate::Dialect;

/// A bounded backend call without a session: the backend bounds its own calls by the query timeout.
fn backend_only(config: &Config) -> Result<Arc<dyn LeaseBackend>, Fail> {
    config.connect().map_err(|e| unreachable(config, e))
}

/// A failure to reach the backend, with what a plain TCP connection to each host says when that
/// fails too (a wrong port is "connection refused", not just "timeout").
pub fn unreachable(config: &Config, e: Error) -> Fail {
    let mut f = Fail::from(e);
    if f.code != code::UNAVAILABLE {
        return f;
    }
    let probe = config.query_timeout().min(Duration::from_secs(2));
    let refused: Vec<String> = config
        .hosts()
        .iter()
        .filter_map(|h| {
            let addr =
                if h.contains(':') { h.clone() } else { format!("{h}:{}", default_port(config.backend_kind())?) };
            let sock = addr
                .to_socket_addrs()
                .map_err(|e| format!("{addr}: {e}"))
                .and_then(|mut a| a.next().ok_or_else(|| format!("{addr}: the name resolves to no address")));
            match sock {
                Err(e) => Some(e),
                Ok(s) => TcpStream::connect_timeout(&s, probe).err().map(|e| format!("{addr}: {}", io_error(&e))),
            }
        })
        .collect();
    if !refused.is_empty() {
        f.message.push_str(&format!(
            " (a TCP connection fails too: {}; check the host and port in the URL)",
            refused.join(", ")
        ));
    }
    f
}

/// An I/O error's words without the OS error number.
fn io_error(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
        std::io::ErrorKind::TimedOut => "no answer (timed out)".into(),
        _ => e.to_string(),
    }
}

fn default_port(kind: BackendKind) -> Option<u16> {
    match kind {
        BackendKind::Postgres => Some(5432),
        BackendKind::Mysql => Some(3306),
        BackendKind::Zookeeper => Some(2181),
        BackendKind::Redis | BackendKind::RedisCluster => Some(6379),
        _ => None,
    }
}

pub fn leader(config: &Config, out: &Out, name: &str) -> Result<u8, Fail> {
    let name = simba::Name::new(name)?;
    let backend = backend_only(config)?;
    let holder = backend.holder(&name)?;
    match &holder {
        Some(h) => out.result(
            &format!(
                "{name}: held by session {} (token {}, expires in {}){}",
                h.session,
                h.token,
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX)
                )),
                if h.metadata.is_empty() { String::new() } else { format!(" metadata: {}", h.metadata) }
            ),
            json!({"name": name.as_str(), "leader": holder_json(h)}),
        ),
        None => out.result(&format!("{name}: no holder"), json!({"name": name.as_str(), "leader": null})),
    }
    Ok(code::OK)
}

/// `holders NAME`: the semaphore's stored limit and who holds which slot (one read per slot).
pub fn holders(config: &Config, out: &Out, name: &str) -> Result<u8, Fail> {
    // Validates the name before any I/O.
    simba::semaphore::fence_resource(name, 0)?;
    let name = simba::Name::new(name)?;
    let backend = backend_only(config)?;
    let max = simba::semaphore::MAX_PERMITS;
    let permits = match backend.semaphore_limit(&name, None)? {
        None => {
            out.result(
                &format!(
                    "{name}: no such semaphore (no limit is stored: it was never used; for a lock, see `simba leader {name}`)"
                ),
                json!({"name": name.as_str(), "permits": null, "holders": []}),
            );
            return Ok(code::OK);
        }
        Some(n) if n == 0 || n > max => {
            return Err(Fail::new(
                code::UNAVAILABLE,
                "unavailable",
                format!(
                    "{}: the stored limit of semaphore '{name}' is {n}, which is no valid limit (1 to {max}): the \
                     stored value was changed by something other than simba",
                    config.backend_kind()
                ),
            ))
        }
        Some(n) => n,
    };
    let mut held = Vec::new();
    for slot in 0..permits {
        let lease = simba::semaphore::fence_resource(name.as_str(), slot)?;
        if let Some(h) = backend.holder(&lease)? {
            held.push((slot, lease, h));
        }
    }
    let mut human = format!("{name}: {} of {permits} permits held", held.len());
    for (slot, _, h) in &held {
        human.push_str(&format!(
            "\n  slot {slot}: session {} (token {}, expires in {}){}",
            h.session,
            h.token,
            humantime::format_duration(Duration::from_millis(
                u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX)
            )),
            if h.metadata.is_empty() { String::new() } else { format!(" metadata: {}", h.metadata) }
        ));
    }
    let list: Vec<Value> = held
        .iter()
        .map(|(slot, lease, h)| {
            let mut v = holder_json(h);
            if let Value::Object(m) = &mut v {
                m.insert("slot".into(), json!(slot));
                m.insert("lease".into(), json!(lease.as_str()));
            }
            v
        })
        .collect();
    out.result(&human, json!({"name": name.as_str(), "permits": permits, "holders": list}));
    Ok(code::OK)
}

pub fn members(config: &Config, out: &Out, group: &str) -> Result<u8, Fail> {
    let group = simba::Name::new(group)?;
    let backend = backend_only(config)?;
    let members = backend.members(&group)?;
    let human: Vec<String> = members
        .iter()
        .map(|m| if m.metadata.is_empty() { m.session.to_string() } else { format!("{}  {}", m.session, m.metadata) })
        .collect();
    let list: Vec<Value> =
        members.iter().map(|m| json!({"session": m.session.as_str(), "metadata": m.metadata})).collect();
    let human = if human.is_empty() { format!("{group}: no members") } else { human.join("\n") };
    out.result(&human, json!({"name": group.as_str(), "members": list}));
    Ok(code::OK)
}

pub fn schema_print(out: &Out, d: Dialect) -> u8 {
    let (name, file, sql) = schema_text(d);
    match sql {
        Some(sql) => {
            let human = sql.trim_end();
            out.result(human, json!({"dialect": name, "file": file, "sql": sql}));
            code::OK
        }
        None => {
            let f =
                Fail::config(format!("the {name} schema needs the `{name}` feature: cargo build --features {name}"));
            out.fail(&f)
        }
    }
}

/// The embedded init SQL of a dialect, when that dialect is compiled in.
fn schema_text(d: Dialect) -> (&'static str, &'static str, Option<&'static str>) {
    match d {
        Dialect::Postgres => ("postgres", "init-simba-postgresql.sql", sql_of(d)),
        Dialect::Mysql => ("mysql", "init-simba-mysql.sql", sql_of(d)),
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn sql_of(d: Dialect) -> Option<&'static str> {
    use simba::backends::sql::Dialect as D;
    Some(match d {
        Dialect::Postgres => D::Postgres.init_sql(),
        Dialect::Mysql => D::Mysql.init_sql(),
    })
}

#[cfg(not(any(feature = "postgres", feature = "mysql")))]
fn sql_of(_: Dialect) -> Option<&'static str> {
    None
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
pub fn schema_apply(config: &Config, out: &Out) -> Result<u8, Fail> {
    if !config.backend_kind().is_sql() {
        return Err(crate::not_sql(config.backend_kind()));
    }
    let backend = config.connect_sql()?;
    backend.init_schema()?;
    let dialect = backend.dialect().name();
    out.result(
        &format!("schema ready ({dialect}, {})", backend.dialect().init_script_name()),
        json!({"dialect": dialect, "applied": true}),
    );
    Ok(code::OK)
}

#[cfg(not(any(feature = "postgres", feature = "mysql")))]
pub fn schema_apply(config: &Config, _out: &Out) -> Result<u8, Fail> {
    Err(crate::not_sql(config.backend_kind()))
}

pub fn purge(config: &Config, out: &Out) -> Result<u8, Fail> {
    let backend = backend_only(config)?;
    let mut total = 0usize;
    // One call deletes at most one batch; repeat until a call deletes nothing (bounded).
    for _ in 0..10_000 {
        let n = backend.purge_expired()?;
        total += n;
        if n == 0 {
            break;
        }
    }
    out.result(&format!("purged {total} expired sessions"), json!({"purged": total}));
    Ok(code::OK)
}

pub fn check(config: &Config, out: &Out) -> Result<u8, Fail> {
    let url = config.redacted_url().unwrap_or("memory://").to_string();
    let kind = config.backend_kind();
    let mut items: Vec<(String, CheckStatus, String)> = Vec::new();
    match config.connect().map_err(|e| unreachable(config, e)) {
        Ok(backend) => {
            for i in backend.check() {
                items.push((i.name, i.status, i.detail));
            }
            if items.is_empty() {
                items.push(("reachable".into(), CheckStatus::Ok, "connected (the backend reports no checks)".into()));
            }
        }
        Err(f) => items.push(("reachable".into(), CheckStatus::Fail, f.message)),
    }
    for w in config.warnings() {
        items.push(("configuration".into(), CheckStatus::Warn, w.clone()));
    }
    let failed = items.iter().any(|(_, s, _)| *s == CheckStatus::Fail);
    let status_str = |s: CheckStatus| match s {
        CheckStatus::Ok => "ok",
        CheckStatus::Warn => "warn",
        CheckStatus::Fail => "fail",
    };
    let width = items.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    let mut human = format!("{kind} backend at {url}\n");
    for (n, s, d) in &items {
        human.push_str(&format!("  {:<4}  {n:<width$}  {d}\n", status_str(*s)));
    }
    human.push_str(if failed { "FAILED" } else { "OK" });
    let list: Vec<Value> =
        items.iter().map(|(n, s, d)| json!({"name": n, "status": status_str(*s), "detail": d})).collect();
    out.result(&human, json!({"backend": kind.name(), "url": url, "ok": !failed, "items": list}));
    Ok(if failed { code::CHECK_FAILED } else { code::OK })
}
