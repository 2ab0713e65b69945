//! What a script did on its node, as the sim's history [`Event`]s: the script's keys are read
//! before and after it ran (without changing them), and the difference, with the script's reply
//! where the data alone does not say it (a refused session, a busy lease, a renewal that confirmed
//! a term without moving its deadline), becomes grants, releases, renewals, joins and leaves. The
//! reads (`lease_info`, `group_live`) are recorded with the answer the backend's follow-up
//! `session_info` calls give at the same instant (a holder or member whose session is gone is not
//! reported), since the backend reports the holder or member only if its session is live.
//!
//! Node clocks in events (`b`, `until`) are ns since the simulation's epoch on that node's clock,
//! at ms resolution (Redis's). A session key counts as dead once the node's ms clock is past its
//! expiry (Redis's `now > when`); a lease term once its node's clock reached `expires` (the
//! scripts' `expires > now`).

use super::cluster::{node_of, EPOCH_US};
use super::keyspace::Reply;
use super::node::Node;
use crate::sim::check::COMPOSITE_READ;
use crate::sim::history::Event;
use crate::sim::shipped::backend::{HistState, History};
use crate::types::{Name, SessionId, Token};

const EPOCH_MS: i64 = EPOCH_US / 1000;

/// A `members` read in progress on one thread: the backend called `group_live`, and now calls
/// `session_info` for each member in order.
#[derive(Debug)]
pub(crate) struct PendingRead {
    group: Name,
    node: usize,
    sids: Vec<String>,
    alive: Vec<u32>,
}

impl PendingRead {
    /// The group being read.
    pub(crate) fn group(&self) -> &Name {
        &self.group
    }
}

/// The group a `group_live` call on `key` reads.
pub(crate) fn group_of(key: &str) -> Option<Name> {
    tagged(key, "simba:group:{").and_then(|g| Name::new(g).ok())
}

/// Follows the `members` read of the calling thread: after a `group_live` whose reply reached the
/// caller, each `session_info` of its members in order; once the last one returned (or at once,
/// with no member) records the backend's answer as a [`COMPOSITE_READ`]. `pending` is this
/// thread's read; any other call ends it.
#[allow(clippy::too_many_arguments)]
pub(crate) fn follow_read(
    h: &mut HistState,
    hist: &History,
    nodes: &[Node],
    node: usize,
    pending: &mut Option<PendingRead>,
    script: &str,
    keys: &[String],
    reply: &Reply,
) {
    let items = match reply {
        Reply::Array(a) => a.as_slice(),
        _ => &[],
    };
    let mut read = match (script, pending.take()) {
        ("group_live", _) => {
            let Some(group) = keys.first().and_then(|k| group_of(k)) else {
                return;
            };
            PendingRead { group, node, sids: items.iter().filter_map(bulk).collect(), alive: Vec::new() }
        }
        ("session_info", Some(mut read)) => {
            let sid = keys.first().and_then(|k| tagged(k, "simba:session:{"));
            if read.sids.first().map(String::as_str) != sid {
                return;
            }
            let sid = read.sids.remove(0);
            if !items.is_empty() {
                read.alive.push(label(h, &sid));
            }
            read
        }
        _ => return,
    };
    if !read.sids.is_empty() {
        *pending = Some(read);
        return;
    }
    read.alive.sort_unstable();
    let b = ms_to_b(now_ms(nodes, read.node));
    let event =
        Event::MembersRead { node: read.node as u8, b, client: COMPOSITE_READ, group: read.group, members: read.alive };
    hist.push(h, event);
}

/// What one key of a script looked like.
#[derive(Debug, Clone, PartialEq)]
enum KeyState {
    /// `simba:session:{sid}`: its expiry (node ms) if live (`Some(None)`: no expiry).
    Session(String, Option<Option<i64>>),
    /// `simba:lease:{name}`: `session`, `token`, `expires`.
    Lease(Name, String, u64, i64),
    /// `simba:group:{name}`: member session ids.
    Group(Name, Vec<String>),
    Other,
}

fn tagged<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    key.strip_prefix(prefix)?.strip_suffix('}')
}

fn text(v: Option<&Vec<u8>>) -> String {
    v.map(|b| String::from_utf8_lossy(b).into_owned()).unwrap_or_default()
}

/// `renew_slot.lua`'s layout (one call per node, several slots): per slot, its keys (`nl` lease
/// keys to renew, then the terms to release, then the groups) and its `nl`. The first slot's keys
/// are `KEYS`, every other slot's follow its counts and tokens in `ARGV` (see the script).
pub(crate) fn renew_slot_layout(keys: &[String], args: &[String]) -> Vec<(Vec<String>, usize)> {
    // 1-based, as the script counts.
    let num = |i: usize| args.get(i.wrapping_sub(1)).and_then(|v| v.parse::<usize>().ok()).unwrap_or(0);
    let mut out = Vec::new();
    let mut a = 4;
    for s in 1..=num(3) {
        let (nl, nr, ng) = (num(a), num(a + 1), num(a + 2));
        let t0 = a + 2;
        a = t0 + nr + 1;
        let slot_keys = if s == 1 {
            keys.iter().take(nl + nr + ng).cloned().collect()
        } else {
            let k = args.iter().skip(a - 1).take(nl + nr + ng).cloned().collect();
            a += nl + nr + ng;
            k
        };
        out.push((slot_keys, nl));
    }
    out
}

/// The keys a script touches: its `KEYS`, and for `renew_slot` every slot's (see
/// [`renew_slot_layout`]).
pub(crate) fn touched(script: &str, keys: &[String], args: &[String]) -> Vec<String> {
    if script == "renew_slot" {
        renew_slot_layout(keys, args).into_iter().flat_map(|(k, _)| k).collect()
    } else {
        keys.to_vec()
    }
}

/// The script's keys before or after it ran.
#[derive(Debug)]
pub(crate) struct Snapshot(Vec<KeyState>);

impl Snapshot {
    pub(crate) fn take(nodes: &[Node], node: usize, keys: &[String]) -> Snapshot {
        let n = &nodes[node];
        Snapshot(
            keys.iter()
                .map(|k| {
                    if let Some(sid) = tagged(k, "simba:session:{").filter(|s| !s.contains('}')) {
                        return KeyState::Session(sid.into(), n.peek(|ks| ks.peek_expiry(k)).flatten());
                    }
                    if let Some(name) = tagged(k, "simba:lease:{").and_then(|s| Name::new(s).ok()) {
                        let h = n.peek(|ks| ks.peek_hash(k)).unwrap_or_default();
                        let token = text(h.get(&b"token"[..])).parse().unwrap_or(0);
                        let expires = text(h.get(&b"expires"[..])).parse().unwrap_or(0);
                        return KeyState::Lease(name, text(h.get(&b"session"[..])), token, expires);
                    }
                    if let Some(name) = tagged(k, "simba:group:{").and_then(|s| Name::new(s).ok()) {
                        let z = n.peek(|ks| ks.peek_zset(k)).unwrap_or_default();
                        return KeyState::Group(
                            name,
                            z.keys().map(|m| String::from_utf8_lossy(m).into_owned()).collect(),
                        );
                    }
                    KeyState::Other
                })
                .collect(),
        )
    }
}

/// The node's clock now, ms.
fn now_ms(nodes: &[Node], node: usize) -> i64 {
    nodes[node].peek(|ks| ks.now_us()).unwrap_or(EPOCH_US).div_euclid(1000)
}

fn ms_to_b(ms: i64) -> u64 {
    u64::try_from(ms - EPOCH_MS).unwrap_or(0).saturating_mul(1_000_000)
}

fn label(h: &HistState, sid: &str) -> u32 {
    SessionId::parse(sid).ok().and_then(|id| h.labels.get(&id).copied()).unwrap_or(u32::MAX)
}

/// The session's remaining ms as `session_info` reads it (`None`: gone, `pttl <= 0`).
fn session_pttl(nodes: &[Node], sid: &str) -> Option<i64> {
    let key = format!("simba:session:{{{sid}}}");
    let n = node_of(&key);
    let when = nodes[n].peek(|ks| ks.peek_expiry(&key)).flatten()?;
    let pttl = when.map_or(i64::MAX, |w| w - now_ms(nodes, n));
    (pttl > 0).then_some(pttl)
}

/// Like [`session_pttl`]; a session found gone is recorded as refused by its node (at that node's
/// clock): the backend's `session_info` will treat it as gone, and the checker learns that the
/// session's node clock ran past its expiry.
fn live_pttl(h: &mut HistState, hist: &History, nodes: &[Node], sid: &str) -> Option<i64> {
    let pttl = session_pttl(nodes, sid);
    let sess = label(h, sid);
    if pttl.is_none() && sess != u32::MAX {
        let n = node_of(&format!("simba:session:{{{sid}}}"));
        hist.push(h, Event::Refused { node: n as u8, b: ms_to_b(now_ms(nodes, n)), sess });
    }
    pttl
}

fn int(r: &Reply) -> Option<i64> {
    match r {
        Reply::Int(i) => Some(*i),
        _ => None,
    }
}

fn bulk(r: &Reply) -> Option<String> {
    match r {
        Reply::Bulk(b) => Some(String::from_utf8_lossy(b).into_owned()),
        _ => None,
    }
}

/// Records what `script` did on `node` (see the module docs).
#[allow(clippy::too_many_arguments)]
pub(crate) fn effects(
    h: &mut HistState,
    hist: &History,
    nodes: &[Node],
    node: usize,
    script: &str,
    keys: &[String],
    args: &[String],
    reply: &Reply,
    before: &Snapshot,
    after: &Snapshot,
) {
    let n8 = node as u8;
    let b = ms_to_b(now_ms(nodes, node));
    let items = match reply {
        Reply::Array(a) => a.as_slice(),
        _ => &[],
    };
    // Sessions.
    for (pre, post) in before.0.iter().zip(&after.0) {
        let (KeyState::Session(sid, pre), KeyState::Session(_, post)) = (pre, post) else { continue };
        let until = |when: &Option<i64>| when.map_or(u64::MAX, |w| ms_to_b(w + 1));
        match (pre, post) {
            (None, Some(when)) => {
                let sess = match SessionId::parse(sid) {
                    Ok(id) => h.new_label(id),
                    Err(_) => u32::MAX,
                };
                hist.push(h, Event::Opened { node: n8, b, sess, until: until(when) });
            }
            (Some(a), Some(w)) if a != w => {
                let sess = label(h, sid);
                hist.push(h, Event::Renewed { node: n8, b, sess, until: until(w) });
            }
            (Some(_), None) => {
                let sess = label(h, sid);
                hist.push(h, Event::Deleted { node: n8, b, sess, frees_leases: false });
            }
            _ => {}
        }
    }
    let session_arg = |h: &HistState| keys.first().and_then(|k| tagged(k, "simba:session:{")).map(|s| label(h, s));
    match (script, items) {
        ("keep_alive_session" | "acquire_session" | "join_session", [r]) if int(r) == Some(-1) => {
            let sess = session_arg(h).unwrap_or(u32::MAX);
            h.counts.backend_expiries += 1;
            hist.push(h, Event::Refused { node: n8, b, sess });
        }
        ("acquire_session", [_, _]) => {
            let sess = session_arg(h).unwrap_or(u32::MAX);
            hist.push(h, Event::SessionChecked { node: n8, b, sess });
        }
        _ => {}
    }
    // Leases: new terms, re-grants, releases, renewals. For `renew_slot`, each touched key's
    // slot entry in the reply, its position in that slot, and the slot's `nl`.
    let renewed_at: Vec<Option<(usize, usize, usize)>> = if script == "renew_slot" {
        renew_slot_layout(keys, args)
            .iter()
            .enumerate()
            .flat_map(|(slot, (k, nl))| (0..k.len()).map(move |at| Some((slot, at, *nl))))
            .collect()
    } else {
        Vec::new()
    };
    for (i, (pre, post)) in before.0.iter().zip(&after.0).enumerate() {
        let (KeyState::Lease(name, ps, pt, _), KeyState::Lease(_, qs, qt, qe)) = (pre, post) else { continue };
        let token = Token::new(*qt);
        if qt > pt {
            if let Some(token) = token {
                let sess = label(h, qs);
                hist.push(h, Event::Granted { node: n8, b, sess, name: name.clone(), token, until: ms_to_b(*qe) });
            }
        } else if script == "acquire_lease" {
            let sess = args.first().map_or(u32::MAX, |s| label(h, s));
            match items {
                [ok, _, _] if int(ok) == Some(1) => {
                    if let Some(token) = token {
                        let until = ms_to_b(*qe);
                        hist.push(h, Event::Granted { node: n8, b, sess, name: name.clone(), token, until });
                    }
                }
                _ => hist.push(h, Event::Busy { node: n8, b, sess, name: name.clone() }),
            }
        }
        if !ps.is_empty() && qs.is_empty() {
            let sess = label(h, ps);
            hist.push(h, Event::Released { node: n8, b, sess, name: name.clone(), token: Token::new(*pt) });
        }
        if let Some((slot, at, nl)) = renewed_at.get(i).copied().flatten() {
            // The slot's entry: {{token or '' per renewed lease}, ...}, or its error text.
            let renewed = match items.get(slot) {
                Some(Reply::Array(entry)) => match entry.first() {
                    Some(Reply::Array(tokens)) => tokens.get(at).and_then(bulk),
                    _ => None,
                },
                _ => None,
            };
            if let (true, Some(t)) = (at < nl, renewed.filter(|t| !t.is_empty())) {
                if let Some(token) = t.parse().ok().and_then(Token::new) {
                    let sess = args.first().map_or(u32::MAX, |s| label(h, s));
                    hist.push(h, Event::Extended { node: n8, b, sess, name: name.clone(), token, until: ms_to_b(*qe) });
                }
            }
        }
    }
    // Groups: joins (of live sessions) and leaves (left, or expired and removed).
    for (pre, post) in before.0.iter().zip(&after.0) {
        let (KeyState::Group(group, pm), KeyState::Group(_, qm)) = (pre, post) else { continue };
        for m in qm.iter().filter(|m| !pm.contains(m)) {
            if session_pttl(nodes, m).is_some() {
                let sess = label(h, m);
                hist.push(h, Event::Joined { node: n8, b, sess, group: group.clone() });
            }
        }
        for m in pm.iter().filter(|m| !qm.contains(m)) {
            let sess = label(h, m);
            hist.push(h, Event::Left { node: n8, b, sess, group: group.clone() });
        }
    }
    // Reads, as the backend will report them.
    match script {
        "lease_info" => {
            let Some(KeyState::Lease(name, ..)) = after.0.first() else { return };
            let holder = match items {
                [sid, token, rem] => {
                    let (Some(sid), Some(rem)) = (bulk(sid), int(rem)) else { return };
                    let token = bulk(token).and_then(|t| t.parse().ok()).and_then(Token::new);
                    match (live_pttl(h, hist, nodes, &sid), token) {
                        (Some(pttl), Some(token)) => {
                            Some((label(h, &sid), token, u64::try_from(rem.min(pttl)).unwrap_or(0) * 1_000_000))
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            hist.push(h, Event::HolderRead { node: n8, b, client: u8::MAX, name: name.clone(), holder });
        }
        "group_live" => {
            let Some(KeyState::Group(group, _)) = after.0.first() else { return };
            let mut members: Vec<u32> = Vec::new();
            for sid in items.iter().filter_map(bulk) {
                if live_pttl(h, hist, nodes, &sid).is_some() {
                    members.push(label(h, &sid));
                }
            }
            members.sort_unstable();
            hist.push(h, Event::MembersRead { node: n8, b, client: u8::MAX, group: group.clone(), members });
        }
        _ => {}
    }
}
