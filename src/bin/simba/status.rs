//! `simba status`: what is held on a backend right now (`LeaseBackend::list`) — locks and
//! leaders, semaphores with their permits, partition sets with their owners and members, groups
//! and live sessions — as a table or (`--json`) one object.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};
use simba::backend::{Holder, LeaseBackend, ListRequest, ListedGroup, ListedLease, Listing, MAX_LIST_LIMIT};
use simba::{Config, Name};

use crate::hold::holder_json;
use crate::inspect::{backend_only, Counted, PARTITION_SET, SEMAPHORE};
use crate::out::{code, Fail, Out};

/// The reserved prefixes of the names simba derives: a semaphore's slots, a partition set's
/// partitions and members.
const SEMAPHORE_PREFIX: &str = simba::RESERVED_NAME_PREFIX;
const PARTITION_PREFIX: &str = simba::PARTITION_NAME_PREFIX;

/// `simba status [--prefix P] [--limit N]`.
#[derive(clap::Args, Debug)]
pub struct StatusArgs {
    /// Only names starting with P: locks, leaders and groups named P…, and the semaphores and
    /// partition sets named P… (their reserved lease and group names too). Default: every name
    #[arg(long, value_name = "P", default_value = "")]
    prefix: String,
    /// At most N entries per section (leases, groups, sessions, members of a group), 1 to 10000
    #[arg(long, value_name = "N", default_value_t = 100)]
    limit: usize,
}

/// One listed counted lease: a semaphore's slot or a partition set's partition.
struct Part {
    index: u32,
    lease: ListedLease,
}

/// What the listing shows, grouped.
#[derive(Default)]
struct Grouped {
    leases: Vec<ListedLease>,
    semaphores: BTreeMap<Name, Vec<Part>>,
    sets: BTreeMap<Name, (Vec<Part>, Vec<simba::backend::Member>)>,
    groups: Vec<ListedGroup>,
}

pub fn status(config: &Config, out: &Out, args: &StatusArgs) -> Result<u8, Fail> {
    // Checked before any I/O: the prefix's characters and the limit.
    let requests = requests(&args.prefix, args.limit)?;
    let backend = backend_only(config)?;
    let mut listing = Listing::default();
    for (i, r) in requests.iter().enumerate() {
        let l = backend.list(r)?;
        listing.leases.extend(l.leases);
        listing.groups.extend(l.groups);
        listing.truncated.leases |= l.truncated.leases;
        listing.truncated.groups |= l.truncated.groups;
        if i == 0 {
            listing.sessions = l.sessions;
            listing.truncated.sessions = l.truncated.sessions;
        }
    }
    let grouped = group(listing.leases, listing.groups, requests.len() > 1);
    let counts = Counts::read(&backend, &grouped);
    let url = config.redacted_url().unwrap_or("memory://").to_string();
    let mut human = format!(
        "{} backend at {url}{}\n",
        config.backend_kind(),
        if args.prefix.is_empty() { String::new() } else { format!(", names starting with '{}'", args.prefix) }
    );
    human.push_str(&text(&grouped, &counts, &listing.sessions));
    let mut cut = Vec::new();
    for (cut_here, what) in [
        (listing.truncated.leases, "leases"),
        (listing.truncated.groups, "groups (or members of a group)"),
        (listing.truncated.sessions, "sessions"),
    ] {
        if cut_here {
            cut.push(what);
        }
    }
    if !cut.is_empty() {
        human.push_str(&format!(
            "\nmore {} than --limit {} matched: only the first are shown (narrow --prefix or raise --limit)\n",
            cut.join(", "),
            args.limit
        ));
    }
    let value = json!({
        "backend": config.backend_kind().name(),
        "url": url,
        "prefix": args.prefix,
        "limit": args.limit,
        "leases": grouped.leases.iter().map(lease_json).collect::<Vec<_>>(),
        "semaphores": counted_json(&grouped.semaphores, &counts.semaphores, &SEMAPHORE),
        "partition_sets": grouped.sets.iter().map(|(name, (parts, members))| {
            let mut v = counted_one(name, parts, counts.sets.get(name), &PARTITION_SET);
            if let Value::Object(m) = &mut v {
                m.insert("members".into(), members_json(members));
            }
            v
        }).collect::<Vec<_>>(),
        "groups": grouped.groups.iter().map(|g| json!({"name": g.name.as_str(), "members": members_json(&g.members)})).collect::<Vec<_>>(),
        "sessions": listing.sessions.iter().map(|s| json!({
            "session": s.id.as_str(),
            "remaining_ms": millis(s.remaining),
            "metadata": s.metadata,
        })).collect::<Vec<_>>(),
        "truncated": {
            "leases": listing.truncated.leases,
            "groups": listing.truncated.groups,
            "sessions": listing.truncated.sessions,
        },
    });
    out.result(human.trim_end(), value);
    Ok(code::OK)
}

/// The listings to read for `prefix`: the prefix itself, and — unless it names a reserved
/// prefix already — the semaphores' and partition sets' names with it.
fn requests(prefix: &str, limit: usize) -> Result<Vec<ListRequest>, Fail> {
    if limit == 0 || limit > MAX_LIST_LIMIT {
        return Err(Fail::config(format!("--limit {limit} is out of range: allowed is 1 to {MAX_LIST_LIMIT}")));
    }
    let mut out = vec![ListRequest::new(prefix, limit)?];
    if !prefix.is_empty() && !prefix.starts_with("simba.") {
        for reserved in [SEMAPHORE_PREFIX, PARTITION_PREFIX] {
            // A prefix too long to be a semaphore or set name matches none: nothing to read.
            if let Ok(r) = ListRequest::new(format!("{reserved}{prefix}"), limit) {
                out.push(r);
            }
        }
    }
    Ok(out)
}

/// Sorts the listed leases and groups into locks, semaphores, partition sets and groups (a
/// name counts once even when two listings both returned it).
fn group(leases: Vec<ListedLease>, groups: Vec<ListedGroup>, dedup: bool) -> Grouped {
    let mut g = Grouped::default();
    let mut seen = std::collections::HashSet::new();
    for l in leases {
        if dedup && !seen.insert(l.name.clone()) {
            continue;
        }
        if let Some((sem, slot)) = simba::semaphore::slot_of(&l.name) {
            g.semaphores.entry(sem).or_default().push(Part { index: slot, lease: l });
        } else if let Some((set, index)) = simba::partitions::partition_of(&l.name) {
            g.sets.entry(set).or_default().0.push(Part { index, lease: l });
        } else {
            g.leases.push(l);
        }
    }
    let mut seen = std::collections::HashSet::new();
    for group in groups {
        if dedup && !seen.insert(group.name.clone()) {
            continue;
        }
        match group.name.as_str().strip_prefix(PARTITION_PREFIX).and_then(|s| Name::new(s).ok()) {
            Some(set) => g.sets.entry(set).or_default().1 = group.members,
            None => g.groups.push(group),
        }
    }
    g.leases.sort_by(|a, b| a.name.cmp(&b.name));
    g.groups.sort_by(|a, b| a.name.cmp(&b.name));
    for parts in g.semaphores.values_mut().chain(g.sets.values_mut().map(|(p, _)| p)) {
        parts.sort_by_key(|p| p.index);
    }
    g
}

/// The stored permits of each listed semaphore and partitions of each listed set: a count that
/// cannot be read is shown as unavailable, with the reason, and the rest of the status stands.
struct Counts {
    semaphores: BTreeMap<Name, Result<Option<u32>, String>>,
    sets: BTreeMap<Name, Result<Option<u32>, String>>,
}

impl Counts {
    fn read(backend: &Arc<dyn LeaseBackend>, g: &Grouped) -> Counts {
        let read = |name: &Name, c: &Counted| -> Result<Option<u32>, String> {
            let key = (c.stored_under)(name.as_str()).map_err(|e| simba::display_chain(&e))?;
            backend.semaphore_limit(&key, None).map_err(|e| simba::display_chain(&e))
        };
        Counts {
            semaphores: g.semaphores.keys().map(|n| (n.clone(), read(n, &SEMAPHORE))).collect(),
            sets: g.sets.keys().map(|n| (n.clone(), read(n, &PARTITION_SET))).collect(),
        }
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

fn left(d: Duration) -> String {
    humantime::format_duration(Duration::from_millis(millis(d))).to_string()
}

fn lease_json(l: &ListedLease) -> Value {
    let mut v = holder_json(&l.holder);
    if let Value::Object(m) = &mut v {
        m.insert("name".into(), json!(l.name.as_str()));
    }
    v
}

fn members_json(members: &[simba::backend::Member]) -> Value {
    members.iter().map(|m| json!({"session": m.session.as_str(), "metadata": m.metadata})).collect()
}

fn count_json(count: Option<&Result<Option<u32>, String>>) -> Value {
    match count {
        Some(Ok(Some(n))) => json!(n),
        Some(Err(reason)) => json!({"unavailable": reason}),
        _ => Value::Null,
    }
}

fn counted_one(name: &Name, parts: &[Part], count: Option<&Result<Option<u32>, String>>, c: &Counted) -> Value {
    let list: Vec<Value> = parts
        .iter()
        .map(|p| {
            let mut v = lease_json(&p.lease);
            if let Value::Object(m) = &mut v {
                m.insert(c.one.into(), json!(p.index));
            }
            v
        })
        .collect();
    json!({"name": name.as_str(), c.count_key: count_json(count), c.list_key: list})
}

fn counted_json(
    all: &BTreeMap<Name, Vec<Part>>,
    counts: &BTreeMap<Name, Result<Option<u32>, String>>,
    c: &Counted,
) -> Vec<Value> {
    all.iter().map(|(name, parts)| counted_one(name, parts, counts.get(name), c)).collect()
}

fn count_text(count: Option<&Result<Option<u32>, String>>, what: &str) -> String {
    match count {
        Some(Ok(Some(n))) => format!("{n} {what}"),
        Some(Err(reason)) => format!("{what}: unavailable ({reason})"),
        _ => format!("{what}: none stored"),
    }
}

/// A holder's columns: session, token, time left, metadata.
fn holder_row(h: &Holder) -> [String; 4] {
    [h.session.to_string(), h.token.to_string(), left(h.remaining), h.metadata.clone()]
}

/// Rows as aligned columns, indented by two spaces, under a header.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut width: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let last = cells.len().saturating_sub(1);
        let mut s = String::from("  ");
        for (i, (c, w)) in cells.iter().zip(&width).enumerate() {
            if i == last {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  "));
            }
        }
        format!("{}\n", s.trim_end())
    };
    let mut s = line(header.iter().map(|h| h.to_string()).collect());
    for r in rows {
        s.push_str(&line(r.clone()));
    }
    s
}

fn text(g: &Grouped, counts: &Counts, sessions: &[simba::backend::ListedSession]) -> String {
    let mut s = String::new();
    s.push_str(&format!("\nLocks and leaders ({})\n", g.leases.len()));
    if !g.leases.is_empty() {
        let rows: Vec<Vec<String>> = g
            .leases
            .iter()
            .map(|l| std::iter::once(l.name.to_string()).chain(holder_row(&l.holder)).collect())
            .collect();
        s.push_str(&table(&["NAME", "SESSION", "TOKEN", "EXPIRES IN", "METADATA"], &rows));
    }
    s.push_str(&format!("\nSemaphores ({})\n", g.semaphores.len()));
    for (name, parts) in &g.semaphores {
        let count = count_text(counts.semaphores.get(name), "permits");
        s.push_str(&format!("  {name}: {} held, {count}\n", parts.len()));
        let rows: Vec<Vec<String>> = parts
            .iter()
            .map(|p| std::iter::once(p.index.to_string()).chain(holder_row(&p.lease.holder)).collect())
            .collect();
        s.push_str(&indent(&table(&["SLOT", "SESSION", "TOKEN", "EXPIRES IN", "METADATA"], &rows)));
    }
    s.push_str(&format!("\nPartition sets ({})\n", g.sets.len()));
    for (name, (parts, members)) in &g.sets {
        let count = count_text(counts.sets.get(name), "partitions");
        s.push_str(&format!("  {name}: {} owned, {count}, {} members\n", parts.len(), members.len()));
        let rows: Vec<Vec<String>> = parts
            .iter()
            .map(|p| std::iter::once(p.index.to_string()).chain(holder_row(&p.lease.holder)).collect())
            .collect();
        s.push_str(&indent(&table(&["PARTITION", "SESSION", "TOKEN", "EXPIRES IN", "METADATA"], &rows)));
    }
    s.push_str(&format!("\nGroups ({})\n", g.groups.len()));
    for group in &g.groups {
        s.push_str(&format!("  {}: {} members\n", group.name, group.members.len()));
        let rows: Vec<Vec<String>> =
            group.members.iter().map(|m| vec![m.session.to_string(), m.metadata.clone()]).collect();
        s.push_str(&indent(&table(&["SESSION", "METADATA"], &rows)));
    }
    s.push_str(&format!("\nLive sessions ({})\n", sessions.len()));
    if !sessions.is_empty() {
        let rows: Vec<Vec<String>> =
            sessions.iter().map(|x| vec![x.id.to_string(), left(x.remaining), x.metadata.clone()]).collect();
        s.push_str(&table(&["SESSION", "EXPIRES IN", "METADATA"], &rows));
    }
    s
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}
