//! The commands that only look or administer: `leader`, `holders`, `members`, `schema`, `purge`, `check`
//! (and `status`, in `status.rs`).

use std::net::{TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use simba::backend::{CheckStatus, Holder, LeaseBackend};
use simba::{BackendKind, Config, Error};

use crate::hold::holder_json;
use crate::out::{code, Fail, Out};
use crate::Dialect;

/// A bounded backend call without a session: the backend bounds its own calls by the query timeout.
pub fn backend_only(config: &Config) -> Result<Arc<dyn LeaseBackend>, Fail> {
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
        BackendKind::Etcd => Some(2379),
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
            &format!("{name}: held by {}", describe(h)),
            json!({"name": name.as_str(), "leader": holder_json(h)}),
        ),
        None => out.result(&format!("{name}: no holder"), json!({"name": name.as_str(), "leader": null})),
    }
    Ok(code::OK)
}

/// A holder as `leader` and `holders` show it: `session S (token T, expires in D) metadata: M`.
fn describe(h: &Holder) -> String {
    format!(
        "session {} (token {}, expires in {}){}",
        h.session,
        h.token,
        humantime::format_duration(Duration::from_millis(u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX))),
        if h.metadata.is_empty() { String::new() } else { format!(" metadata: {}", h.metadata) }
    )
}

/// A name's counted leases, as `holders` lists them: a semaphore's slots or a partition set's
/// partitions (each an ordinary lease with a reserved name; the count stored on first use).
pub struct Counted {
    /// What the name names.
    what: &'static str,
    /// One of the leases: "slot", "partition".
    pub one: &'static str,
    /// The count's JSON key and human word: "permits", "partitions".
    pub count_key: &'static str,
    /// The list's JSON key and what its members do: ("holders", "held"), ("owners", "owned").
    pub list_key: &'static str,
    verb: &'static str,
    max: u32,
    /// Where the count is stored for a name.
    pub stored_under: fn(&str) -> simba::Result<simba::Name>,
    /// The lease name of one slot or partition.
    lease: fn(&str, u32) -> simba::Result<simba::Name>,
}

pub const SEMAPHORE: Counted = Counted {
    what: "semaphore",
    one: "slot",
    count_key: "permits",
    list_key: "holders",
    verb: "held",
    max: simba::semaphore::MAX_PERMITS,
    stored_under: |name| simba::Name::new(name),
    lease: |name, i| simba::semaphore::fence_resource(name, i),
};

pub const PARTITION_SET: Counted = Counted {
    what: "partition set",
    one: "partition",
    count_key: "partitions",
    list_key: "owners",
    verb: "owned",
    max: simba::partitions::MAX_PARTITIONS,
    stored_under: |name| simba::Name::new(format!("simba.part:{name}")),
    lease: |name, i| simba::partitions::fence_resource(name, i),
};

/// A held slot or partition: its index, its lease name and its holder.
type Held = (u32, simba::Name, Holder);

/// What `holders` found for one kind of counted name: the stored count (`None`: never used) and
/// who holds which of its leases (one read each).
fn counted_holders(
    config: &Config,
    backend: &Arc<dyn LeaseBackend>,
    name: &simba::Name,
    c: &Counted,
) -> Result<Option<(u32, Vec<Held>)>, Fail> {
    let key = (c.stored_under)(name.as_str())?;
    let count = match backend.semaphore_limit(&key, None)? {
        None => return Ok(None),
        Some(n) if n == 0 || n > c.max => {
            return Err(Fail::new(
                code::UNAVAILABLE,
                "unavailable",
                format!(
                    "{}: the stored {} of {} '{name}' is {n}, which is no valid value (1 to {}): the stored value was \
                     changed by something other than simba",
                    config.backend_kind(),
                    c.count_key,
                    c.what,
                    c.max
                ),
            ))
        }
        Some(n) => n,
    };
    let mut held = Vec::new();
    for i in 0..count {
        let lease = (c.lease)(name.as_str(), i)?;
        if let Some(h) = backend.holder(&lease)? {
            held.push((i, lease, h));
        }
    }
    Ok(Some((count, held)))
}

/// `holders NAME`: the semaphore's stored limit and who holds which slot, and the partition set's
/// stored count and who owns which partition (one read per slot or partition); a name used both
/// ways shows both.
pub fn holders(config: &Config, out: &Out, name: &str) -> Result<u8, Fail> {
    // Validates the name before any I/O: a semaphore name, a partition set name or both.
    let (sem, part) = (simba::semaphore::fence_resource(name, 0), simba::partitions::fence_resource(name, 0));
    let valid = [sem.is_ok(), part.is_ok()];
    if let (Err(e), Err(_)) = (sem, part) {
        return Err(e.into());
    }
    let name = simba::Name::new(name)?;
    let backend = backend_only(config)?;
    let mut human = Vec::new();
    let mut value = json!({"name": name.as_str()});
    for (valid, c) in valid.into_iter().zip([&SEMAPHORE, &PARTITION_SET]) {
        let found = if valid { counted_holders(config, &backend, &name, c)? } else { None };
        let Value::Object(fields) = &mut value else { continue };
        let Some((count, held)) = found else {
            fields.insert(c.count_key.into(), Value::Null);
            fields.insert(c.list_key.into(), json!([]));
            continue;
        };
        let mut text = format!("{name}: {} of {count} {} {}", held.len(), c.count_key, c.verb);
        for (i, _, h) in &held {
            text.push_str(&format!("\n  {} {i}: {}", c.one, describe(h)));
        }
        human.push(text);
        let list: Vec<Value> = held
            .iter()
            .map(|(i, lease, h)| {
                let mut v = holder_json(h);
                if let Value::Object(m) = &mut v {
                    m.insert(c.one.into(), json!(i));
                    m.insert("lease".into(), json!(lease.as_str()));
                }
                v
            })
            .collect();
        fields.insert(c.count_key.into(), json!(count));
        fields.insert(c.list_key.into(), Value::Array(list));
    }
    if human.is_empty() {
        human.push(format!(
            "{name}: no such semaphore or partition set (no limit or count is stored: it was never used; for a lock, \
             see `simba leader {name}`)"
        ));
    }
    out.result(&human.join("\n"), value);
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
