//! One simulated Redis node's data: strings, hashes, sets and sorted sets, each key with an
//! optional expiry in the node's own clock (ms), expired lazily as Redis does (a key past its
//! expiry is gone for every command, and removed when a command touches it), and the commands the
//! shipped scripts use, with Redis 7's replies and error words. An unknown command is an error
//! ([`UNKNOWN_COMMAND`]), so a script that starts using a new command fails in the simulation
//! instead of silently misbehaving.

use std::collections::{BTreeMap, BTreeSet};

/// A reply, as Redis produces it (RESP2).
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    /// A nil bulk string (or nil array).
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A status reply (`+OK`).
    Status(String),
    /// An error reply (`-ERR …`).
    Error(String),
    /// An array reply.
    Array(Vec<Reply>),
}

impl Reply {
    /// The reply as the `redis` crate gives it to a client (an error reply anywhere in it, in
    /// the server's words, is `Err`).
    ///
    /// # Errors
    /// The text of the first error reply in it.
    pub fn into_value(self) -> Result<redis::Value, String> {
        use redis::Value;
        Ok(match self {
            Reply::Nil => Value::Nil,
            Reply::Int(i) => Value::Int(i),
            Reply::Bulk(b) => Value::BulkString(b),
            Reply::Status(s) if s == "OK" => Value::Okay,
            Reply::Status(s) => Value::SimpleString(s),
            Reply::Error(e) => return Err(e),
            Reply::Array(items) => Value::Array(items.into_iter().map(Reply::into_value).collect::<Result<_, _>>()?),
        })
    }
}

/// The error of a command the simulated node does not implement (the words of Redis 7 for a
/// command unknown to the server, called from a script).
pub const UNKNOWN_COMMAND: &str = "ERR Unknown Redis command called from script";

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER: &str = "ERR value is not an integer or out of range";
const NOT_FLOAT: &str = "ERR value is not a valid float";
const SYNTAX: &str = "ERR syntax error";

type Hash = BTreeMap<Vec<u8>, Vec<u8>>;
type ZSet = BTreeMap<Vec<u8>, f64>;

#[derive(Debug, Clone)]
enum Data {
    Str(Vec<u8>),
    Hash(Hash),
    Set(BTreeSet<Vec<u8>>),
    ZSet(ZSet),
}

#[derive(Debug, Clone)]
struct Entry {
    data: Data,
    /// Absolute expiry in node ms.
    expires_at: Option<i64>,
}

/// The keyspace of one node, and the node's current time (set before each script).
#[derive(Debug, Clone, Default)]
pub struct Keyspace {
    entries: BTreeMap<Vec<u8>, Entry>,
    /// The node's clock, µs since the Unix epoch.
    now_us: i64,
}

fn int_arg(a: &[u8]) -> Result<i64, Reply> {
    std::str::from_utf8(a).ok().and_then(|s| s.parse::<i64>().ok()).ok_or_else(|| Reply::Error(NOT_INTEGER.into()))
}

fn float_arg(a: &[u8]) -> Result<f64, Reply> {
    let s = std::str::from_utf8(a).map_err(|_| Reply::Error(NOT_FLOAT.into()))?;
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ => s.parse::<f64>().map_err(|_| Reply::Error(NOT_FLOAT.into()))?,
    };
    if v.is_nan() {
        return Err(Reply::Error(NOT_FLOAT.into()));
    }
    Ok(v)
}

/// A score as Redis 7.0 prints it (`%.17g`).
fn score_text(v: f64) -> Vec<u8> {
    super::node::number_text(v).into_bytes()
}

/// One end of a `ZREMRANGEBYSCORE` range: `(x` is exclusive.
fn score_bound(a: &[u8]) -> Result<(f64, bool), Reply> {
    match a.strip_prefix(b"(") {
        Some(rest) => Ok((float_arg(rest).map_err(|_| Reply::Error("ERR min or max is not a float".into()))?, true)),
        None => Ok((float_arg(a).map_err(|_| Reply::Error("ERR min or max is not a float".into()))?, false)),
    }
}

fn arity(name: &str) -> Reply {
    Reply::Error(format!("ERR wrong number of arguments for '{name}' command"))
}

fn bulk(v: &[u8]) -> Reply {
    Reply::Bulk(v.to_vec())
}

/// The index range `start..=stop` (Redis semantics: negative from the end, clamped) of `len`.
fn index_range(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let s = if start < 0 { (len + start).max(0) } else { start };
    let e = if stop < 0 { len + stop } else { stop.min(len - 1) };
    (s <= e && s < len).then_some((s as usize, e as usize))
}

impl Keyspace {
    /// Sets the node's clock (µs since the Unix epoch) for the commands that follow.
    pub fn set_now_us(&mut self, now_us: i64) {
        self.now_us = now_us;
    }

    /// The node's clock, µs since the Unix epoch.
    pub fn now_us(&self) -> i64 {
        self.now_us
    }

    fn now_ms(&self) -> i64 {
        self.now_us.div_euclid(1000)
    }

    /// Redis: a key is expired once the clock is past its expiry (`now > when`).
    fn expired(&self, e: &Entry) -> bool {
        e.expires_at.is_some_and(|w| self.now_ms() > w)
    }

    /// The live entry of `key`, removing it first when it expired (lazy expiry).
    fn live(&mut self, key: &[u8]) -> Option<&mut Entry> {
        if self.entries.get(key).is_some_and(|e| self.expired(e)) {
            self.entries.remove(key);
        }
        self.entries.get_mut(key)
    }

    /// Removes `key` when its collection became empty (Redis deletes empty aggregates).
    fn drop_if_empty(&mut self, key: &[u8]) {
        let empty = match self.entries.get(key).map(|e| &e.data) {
            Some(Data::Hash(h)) => h.is_empty(),
            Some(Data::Set(s)) => s.is_empty(),
            Some(Data::ZSet(z)) => z.is_empty(),
            _ => false,
        };
        if empty {
            self.entries.remove(key);
        }
    }

    fn hash(&mut self, key: &[u8], create: bool) -> Result<Option<&mut Hash>, Reply> {
        if self.live(key).is_none() {
            if !create {
                return Ok(None);
            }
            self.entries.insert(key.to_vec(), Entry { data: Data::Hash(BTreeMap::new()), expires_at: None });
        }
        match self.entries.get_mut(key).map(|e| &mut e.data) {
            Some(Data::Hash(h)) => Ok(Some(h)),
            _ => Err(Reply::Error(WRONGTYPE.into())),
        }
    }

    fn set(&mut self, key: &[u8], create: bool) -> Result<Option<&mut BTreeSet<Vec<u8>>>, Reply> {
        if self.live(key).is_none() {
            if !create {
                return Ok(None);
            }
            self.entries.insert(key.to_vec(), Entry { data: Data::Set(BTreeSet::new()), expires_at: None });
        }
        match self.entries.get_mut(key).map(|e| &mut e.data) {
            Some(Data::Set(s)) => Ok(Some(s)),
            _ => Err(Reply::Error(WRONGTYPE.into())),
        }
    }

    fn zset(&mut self, key: &[u8], create: bool) -> Result<Option<&mut ZSet>, Reply> {
        if self.live(key).is_none() {
            if !create {
                return Ok(None);
            }
            self.entries.insert(key.to_vec(), Entry { data: Data::ZSet(BTreeMap::new()), expires_at: None });
        }
        match self.entries.get_mut(key).map(|e| &mut e.data) {
            Some(Data::ZSet(z)) => Ok(Some(z)),
            _ => Err(Reply::Error(WRONGTYPE.into())),
        }
    }

    /// Runs one command (`args[0]` is its name, any case) and returns its reply; errors are
    /// [`Reply::Error`].
    pub fn command(&mut self, args: &[Vec<u8>]) -> Reply {
        match self.run(args) {
            Ok(r) | Err(r) => r,
        }
    }

    fn run(&mut self, args: &[Vec<u8>]) -> Result<Reply, Reply> {
        let Some(name) = args.first() else { return Err(Reply::Error(UNKNOWN_COMMAND.into())) };
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let a = &args[1..];
        let need = |ok: bool| if ok { Ok(()) } else { Err(arity(&name)) };
        match name.as_str() {
            "time" => {
                need(a.is_empty())?;
                let (s, us) = (self.now_us.div_euclid(1_000_000), self.now_us.rem_euclid(1_000_000));
                Ok(Reply::Array(vec![bulk(s.to_string().as_bytes()), bulk(us.to_string().as_bytes())]))
            }
            "exists" => {
                need(!a.is_empty())?;
                Ok(Reply::Int(a.iter().filter(|k| self.live(k).is_some()).count() as i64))
            }
            "del" => {
                need(!a.is_empty())?;
                Ok(Reply::Int(
                    a.iter().filter(|k| self.live(k).is_some() && self.entries.remove(*k).is_some()).count() as i64
                ))
            }
            "type" => {
                need(a.len() == 1)?;
                let t = match self.live(&a[0]).map(|e| &e.data) {
                    None => "none",
                    Some(Data::Str(_)) => "string",
                    Some(Data::Hash(_)) => "hash",
                    Some(Data::Set(_)) => "set",
                    Some(Data::ZSet(_)) => "zset",
                };
                Ok(Reply::Status(t.into()))
            }
            "pexpire" => {
                need(a.len() == 2)?;
                let ms = int_arg(&a[1])?;
                let now = self.now_ms();
                match self.live(&a[0]) {
                    None => Ok(Reply::Int(0)),
                    Some(_) if ms <= 0 => {
                        self.entries.remove(&a[0]);
                        Ok(Reply::Int(1))
                    }
                    Some(e) => {
                        e.expires_at = Some(now.saturating_add(ms));
                        Ok(Reply::Int(1))
                    }
                }
            }
            "pttl" => {
                need(a.len() == 1)?;
                let now = self.now_ms();
                Ok(Reply::Int(match self.live(&a[0]) {
                    None => -2,
                    Some(Entry { expires_at: None, .. }) => -1,
                    Some(Entry { expires_at: Some(w), .. }) => (*w - now).max(0),
                }))
            }
            "get" => {
                need(a.len() == 1)?;
                match self.live(&a[0]).map(|e| &e.data) {
                    None => Ok(Reply::Nil),
                    Some(Data::Str(s)) => Ok(bulk(s)),
                    Some(_) => Err(Reply::Error(WRONGTYPE.into())),
                }
            }
            "set" => {
                need(a.len() == 2)?;
                self.entries.insert(a[0].clone(), Entry { data: Data::Str(a[1].clone()), expires_at: None });
                Ok(Reply::Status("OK".into()))
            }
            "hset" => {
                need(a.len() >= 3 && a.len() % 2 == 1)?;
                let h = self.hash(&a[0], true)?.ok_or_else(|| arity(&name))?;
                let added = a[1..].chunks(2).filter(|fv| h.insert(fv[0].clone(), fv[1].clone()).is_none()).count();
                Ok(Reply::Int(added as i64))
            }
            "hget" => {
                need(a.len() == 2)?;
                Ok(self.hash(&a[0], false)?.and_then(|h| h.get(&a[1]).map(|v| bulk(v))).unwrap_or(Reply::Nil))
            }
            "hmget" => {
                need(a.len() >= 2)?;
                let h = self.hash(&a[0], false)?;
                Ok(Reply::Array(
                    a[1..].iter().map(|f| h.as_ref().and_then(|h| h.get(f)).map_or(Reply::Nil, |v| bulk(v))).collect(),
                ))
            }
            "hincrby" => {
                need(a.len() == 3)?;
                let by = int_arg(&a[2])?;
                let h = self.hash(&a[0], true)?.ok_or_else(|| arity(&name))?;
                let cur = match h.get(&a[1]) {
                    None => 0,
                    Some(v) => int_arg(v).map_err(|_| Reply::Error("ERR hash value is not an integer".into()))?,
                };
                let new = cur
                    .checked_add(by)
                    .ok_or_else(|| Reply::Error("ERR increment or decrement would overflow".into()))?;
                h.insert(a[1].clone(), new.to_string().into_bytes());
                Ok(Reply::Int(new))
            }
            "hdel" => {
                need(a.len() >= 2)?;
                let n = match self.hash(&a[0], false)? {
                    None => 0,
                    Some(h) => a[1..].iter().filter(|f| h.remove(*f).is_some()).count(),
                };
                self.drop_if_empty(&a[0]);
                Ok(Reply::Int(n as i64))
            }
            "hkeys" | "hgetall" => {
                need(a.len() == 1)?;
                let all = name == "hgetall";
                let h = self.hash(&a[0], false)?;
                let mut out = Vec::new();
                for (f, v) in h.into_iter().flatten() {
                    out.push(bulk(f));
                    if all {
                        out.push(bulk(v));
                    }
                }
                Ok(Reply::Array(out))
            }
            "hrandfield" => {
                // Redis picks at random; the simulation takes the first fields in order (one of the
                // answers Redis may give, and deterministic).
                need(!a.is_empty() && a.len() <= 3)?;
                let count = a.get(1).map(|c| int_arg(c)).transpose()?;
                let values = match a.get(2) {
                    None => false,
                    Some(w) if w.eq_ignore_ascii_case(b"withvalues") => true,
                    Some(_) => return Err(Reply::Error(SYNTAX.into())),
                };
                let h = self.hash(&a[0], false)?;
                let Some(count) = count else {
                    return Ok(h.and_then(|h| h.keys().next().map(|k| bulk(k))).unwrap_or(Reply::Nil));
                };
                if count < 0 {
                    return Err(Reply::Error("ERR negative HRANDFIELD counts are not simulated".into()));
                }
                let mut out = Vec::new();
                for (f, v) in h.into_iter().flatten().take(count as usize) {
                    out.push(bulk(f));
                    if values {
                        out.push(bulk(v));
                    }
                }
                Ok(Reply::Array(out))
            }
            "sadd" => {
                need(a.len() >= 2)?;
                let s = self.set(&a[0], true)?.ok_or_else(|| arity(&name))?;
                Ok(Reply::Int(a[1..].iter().filter(|m| s.insert((*m).clone())).count() as i64))
            }
            "srem" => {
                need(a.len() >= 2)?;
                let n = match self.set(&a[0], false)? {
                    None => 0,
                    Some(s) => a[1..].iter().filter(|m| s.remove(*m)).count(),
                };
                self.drop_if_empty(&a[0]);
                Ok(Reply::Int(n as i64))
            }
            "smembers" => {
                need(a.len() == 1)?;
                Ok(Reply::Array(
                    self.set(&a[0], false)?.map(|s| s.iter().map(|m| bulk(m)).collect()).unwrap_or_default(),
                ))
            }
            "zadd" => {
                need(a.len() >= 3 && a.len() % 2 == 1)?;
                let pairs = a[1..]
                    .chunks(2)
                    .map(|p| Ok((float_arg(&p[0])?, p[1].clone())))
                    .collect::<Result<Vec<_>, Reply>>()?;
                let z = self.zset(&a[0], true)?.ok_or_else(|| arity(&name))?;
                Ok(Reply::Int(pairs.into_iter().filter(|(s, m)| z.insert(m.clone(), *s).is_none()).count() as i64))
            }
            "zrem" => {
                need(a.len() >= 2)?;
                let n = match self.zset(&a[0], false)? {
                    None => 0,
                    Some(z) => a[1..].iter().filter(|m| z.remove(*m).is_some()).count(),
                };
                self.drop_if_empty(&a[0]);
                Ok(Reply::Int(n as i64))
            }
            "zscore" => {
                need(a.len() == 2)?;
                Ok(self
                    .zset(&a[0], false)?
                    .and_then(|z| z.get(&a[1]).map(|s| Reply::Bulk(score_text(*s))))
                    .unwrap_or(Reply::Nil))
            }
            "zrange" => {
                if a.len() != 3 {
                    return Err(if a.len() < 3 {
                        arity(&name)
                    } else {
                        Reply::Error("ERR ZRANGE options are not simulated".into())
                    });
                }
                let (start, stop) = (int_arg(&a[1])?, int_arg(&a[2])?);
                let z = self.zset(&a[0], false)?;
                let mut sorted: Vec<(f64, Vec<u8>)> = z.into_iter().flatten().map(|(m, s)| (*s, m.clone())).collect();
                sorted.sort_by(|x, y| x.0.total_cmp(&y.0).then_with(|| x.1.cmp(&y.1)));
                let out = match index_range(start, stop, sorted.len()) {
                    None => Vec::new(),
                    Some((s, e)) => sorted[s..=e].iter().map(|(_, m)| bulk(m)).collect(),
                };
                Ok(Reply::Array(out))
            }
            "zremrangebyscore" => {
                need(a.len() == 3)?;
                let ((min, min_ex), (max, max_ex)) = (score_bound(&a[1])?, score_bound(&a[2])?);
                let inside =
                    |s: f64| (if min_ex { s > min } else { s >= min }) && (if max_ex { s < max } else { s <= max });
                let n = match self.zset(&a[0], false)? {
                    None => 0,
                    Some(z) => {
                        let before = z.len();
                        z.retain(|_, s| !inside(*s));
                        before - z.len()
                    }
                };
                self.drop_if_empty(&a[0]);
                Ok(Reply::Int(n as i64))
            }
            "publish" | "spublish" => {
                // No subscriber in the simulation (no pub/sub): nobody receives it. (A Cluster
                // node checks SPUBLISH's channel like a key: the node's non-local check does.)
                need(a.len() == 2)?;
                Ok(Reply::Int(0))
            }
            _ => Err(Reply::Error(UNKNOWN_COMMAND.into())),
        }
    }

    // ----- read-only views for the history recorder (no lazy expiry, no change) -----

    fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.entries.get(key).filter(|e| !self.expired(e))
    }

    /// The fields of a live hash (empty when missing, expired or not a hash).
    pub fn peek_hash(&self, key: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
        match self.peek(key.as_bytes()).map(|e| &e.data) {
            Some(Data::Hash(h)) => h.clone(),
            _ => BTreeMap::new(),
        }
    }

    /// A live key's expiry (node ms): `None` when the key is missing or expired, `Some(None)` when
    /// it has no expiry.
    pub fn peek_expiry(&self, key: &str) -> Option<Option<i64>> {
        self.peek(key.as_bytes()).map(|e| e.expires_at)
    }

    /// The members and scores of a live sorted set (empty when missing).
    pub fn peek_zset(&self, key: &str) -> BTreeMap<Vec<u8>, f64> {
        match self.peek(key.as_bytes()).map(|e| &e.data) {
            Some(Data::ZSet(z)) => z.clone(),
            _ => BTreeMap::new(),
        }
    }
}
