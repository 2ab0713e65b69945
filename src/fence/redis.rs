//! Fencing a Redis resource: the check and the write in one Lua script run.
//!
//! Per resource `R` the largest accepted token lives in the fence key `simba:fence:{R}`
//! ([`fence_key`]). Every key a fenced write touches must carry the same hash tag `{R}` (for
//! example `{R}:data`, `orders:{R}`), so that on Redis Cluster it lives in the fence key's slot and
//! one script can check and write atomically; the helpers refuse other keys before any I/O (the
//! same rule on standalone Redis, so code moves between the two unchanged).
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let token = simba::Token::new(7).unwrap();
//! let mut con = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
//! simba::fence::redis::set(&mut con, "report", token, "{report}:body", "...")?;
//! # Ok(()) }
//! ```
//!
//! Each script starts with `lua/fence_prelude.lua`: it refuses a token smaller than the recorded
//! one (nothing is written), records a larger one, and then runs the body (`SET`, `HSET`, or your
//! own [`Script`]). A script that fails halfway keeps its earlier writes (Redis scripts do not
//! roll back), so a body should check its input before its first write.

use std::sync::LazyLock;

use ::redis::{ConnectionLike, FromRedisValue, RedisError, ToRedisArgs};

use super::{resource_name, FenceError};
use crate::{IntoName, Name, Token};

const PRELUDE: &str = include_str!("../../lua/fence_prelude.lua");
const CHECK_BODY: &str = include_str!("../../lua/fence_check.lua");
const SET_BODY: &str = include_str!("../../lua/fence_set.lua");
const HSET_BODY: &str = include_str!("../../lua/fence_hset.lua");

/// The error code of the prelude's stale reply (`SIMBA_FENCE_STALE <seen>`).
const STALE_CODE: &str = "SIMBA_FENCE_STALE";

static CHECK: LazyLock<Script> = LazyLock::new(|| Script::new(CHECK_BODY));
static SET: LazyLock<Script> = LazyLock::new(|| Script::new(SET_BODY));
static HSET: LazyLock<Script> = LazyLock::new(|| Script::new(HSET_BODY));

/// The key holding the largest token accepted for `resource`: `simba:fence:{resource}`.
///
/// # Errors
/// [`FenceError::Invalid`] when `resource` breaks the naming rule (which also keeps `{`/`}` out).
pub fn fence_key(resource: impl IntoName) -> Result<String, FenceError> {
    Ok(key_of(&resource_name(resource)?))
}

fn key_of(resource: &Name) -> String {
    format!("simba:fence:{{{resource}}}")
}

/// The hash tag of a key by the Cluster rule: the text between the first `{` and the next `}`,
/// when not empty.
fn hash_tag(key: &[u8]) -> Option<&[u8]> {
    let open = key.iter().position(|&b| b == b'{')?;
    let rest = &key[open + 1..];
    let close = rest.iter().position(|&b| b == b'}')?;
    (close > 0).then(|| &rest[..close])
}

/// A fenced script: `lua/fence_prelude.lua` followed by a body of your own.
///
/// The body runs only when the token was accepted and sees its own `KEYS` and `ARGV` (the fence
/// key and the token are removed before it runs); its return value is returned by
/// [`Invocation::invoke`]. Build it once (the SHA is computed once) and reuse it.
///
/// ```no_run
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # let token = simba::Token::new(7).unwrap();
/// # let mut con = redis::Client::open("redis://127.0.0.1/")?.get_connection()?;
/// let append = simba::fence::redis::Script::new("return redis.call('RPUSH', KEYS[1], ARGV[1])");
/// let len: u64 = append.prepare("jobs", token).key("{jobs}:log").arg("entry").invoke(&mut con)?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Script {
    script: ::redis::Script,
}

impl Script {
    /// The fenced script of `body` (Lua, run after the fence check).
    pub fn new(body: &str) -> Script {
        let mut code = String::with_capacity(PRELUDE.len() + body.len() + 1);
        code.push_str(PRELUDE);
        code.push('\n');
        code.push_str(body);
        Script { script: ::redis::Script::new(&code) }
    }

    /// An invocation for `resource` with `token`; add the body's keys and arguments, then
    /// [`invoke`](Invocation::invoke) it.
    pub fn prepare(&self, resource: impl IntoName, token: Token) -> Invocation<'_> {
        let (inv, resource, error) = match resource_name(resource) {
            Ok(r) => {
                let mut inv = self.script.key(key_of(&r));
                inv.arg(token.get());
                (inv, Some(r), None)
            }
            Err(e) => (self.script.prepare_invoke(), None, Some(e.to_string())),
        };
        Invocation { inv, resource, token, error }
    }
}

/// A prepared run of a fenced [`Script`] (its keys and arguments), like `redis::ScriptInvocation`.
pub struct Invocation<'a> {
    inv: ::redis::ScriptInvocation<'a>,
    resource: Option<Name>,
    token: Token,
    /// The first input error, reported by `invoke` before any I/O.
    error: Option<String>,
}

impl Invocation<'_> {
    /// Adds a key for the body (`KEYS[1]`, `KEYS[2]`, …). It must carry the resource's hash tag
    /// `{resource}`, else [`invoke`](Invocation::invoke) fails before any I/O.
    pub fn key(&mut self, key: &str) -> &mut Self {
        if let (Some(r), None) = (&self.resource, &self.error) {
            if hash_tag(key.as_bytes()) != Some(r.as_str().as_bytes()) {
                self.error = Some(format!(
                    "key '{key}' is not fenced by resource '{r}': its hash tag must be {{{r}}} \
                     (e.g. '{{{r}}}:data'), so it lives in the slot of the fence key {}",
                    key_of(r)
                ));
            }
        }
        self.inv.key(key);
        self
    }

    /// Adds an argument for the body (`ARGV[1]`, …; a tuple or slice adds several).
    pub fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.inv.arg(arg);
        self
    }

    /// Runs the script: the fence check, then the body when the token is accepted.
    ///
    /// # Errors
    /// [`FenceError::Stale`] with `seen` when a larger token was recorded (the body did not run);
    /// [`FenceError::Invalid`] before any I/O for a bad resource name or a key without the
    /// resource's hash tag `{resource}`; [`FenceError::Database`] for a Redis error (the body's
    /// own errors included, with Redis's words).
    pub fn invoke<T: FromRedisValue>(&self, con: &mut dyn ConnectionLike) -> Result<T, FenceError> {
        match (&self.error, &self.resource) {
            (None, Some(resource)) => self.inv.invoke(con).map_err(|e| error(resource, self.token, e)),
            (Some(e), _) => Err(FenceError::invalid(e.clone())),
            (None, None) => Err(FenceError::invalid("fence resource: missing")),
        }
    }
}

/// Accepts `token` for `resource` when it is at least the largest recorded (recording it),
/// writing nothing else. Alone this guards nothing: prefer [`set`], [`hset`] or a [`Script`],
/// which check and write in one step.
///
/// # Errors
/// As [`Invocation::invoke`].
pub fn check(con: &mut dyn ConnectionLike, resource: impl IntoName, token: Token) -> Result<(), FenceError> {
    CHECK.prepare(resource, token).invoke::<i64>(con).map(drop)
}

/// `SET key value` when `token` is accepted for `resource` (`key` must carry the hash tag
/// `{resource}`).
///
/// # Errors
/// As [`Invocation::invoke`].
pub fn set(
    con: &mut dyn ConnectionLike,
    resource: impl IntoName,
    token: Token,
    key: &str,
    value: impl ToRedisArgs,
) -> Result<(), FenceError> {
    SET.prepare(resource, token).key(key).arg(value).invoke(con)
}

/// `HSET key field value …` when `token` is accepted for `resource` (`key` must carry the hash
/// tag `{resource}`); returns the number of fields added.
///
/// # Errors
/// As [`Invocation::invoke`]; [`FenceError::Invalid`] for no fields.
pub fn hset<F: ToRedisArgs, V: ToRedisArgs>(
    con: &mut dyn ConnectionLike,
    resource: impl IntoName,
    token: Token,
    key: &str,
    fields: &[(F, V)],
) -> Result<u64, FenceError> {
    if fields.is_empty() {
        return Err(FenceError::invalid(format!("fenced HSET of '{key}' needs at least one field")));
    }
    HSET.prepare(resource, token).key(key).arg(fields).invoke(con)
}

/// The largest token recorded for `resource`, `None` before the first.
///
/// # Errors
/// [`FenceError::Invalid`] for a bad resource name or a fence key that does not hold a token;
/// [`FenceError::Database`] for a Redis error.
pub fn seen(con: &mut dyn ConnectionLike, resource: impl IntoName) -> Result<Option<Token>, FenceError> {
    let resource = resource_name(resource)?;
    let key = key_of(&resource);
    let v: Option<String> = ::redis::cmd("GET")
        .arg(&key)
        .query(con)
        .map_err(|e| FenceError::database(format!("reading the fence key {key}"), retryable(&e), e))?;
    v.map(|s| {
        s.parse::<u64>()
            .ok()
            .and_then(Token::new)
            .ok_or_else(|| FenceError::invalid(format!("the fence key {key} holds {s:?}, not a token")))
    })
    .transpose()
}

fn error(resource: &Name, token: Token, e: RedisError) -> FenceError {
    if e.code() == Some(STALE_CODE) {
        if let Some(seen) = e.detail().and_then(|d| d.trim().parse::<u64>().ok()).and_then(Token::new) {
            return FenceError::Stale { resource: resource.to_string(), token, seen: Some(seen) };
        }
    }
    FenceError::database(format!("fenced Redis write of resource '{resource}' with token {token}"), retryable(&e), e)
}

fn retryable(e: &RedisError) -> bool {
    e.is_io_error() || e.is_timeout() || e.is_connection_dropped()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_tags_follow_the_cluster_rule() {
        assert_eq!(hash_tag(b"{r}:data"), Some(&b"r"[..]));
        assert_eq!(hash_tag(b"x:{r}:y{z}"), Some(&b"r"[..]));
        assert_eq!(hash_tag(b"{}r"), None);
        assert_eq!(hash_tag(b"r"), None);
        assert_eq!(hash_tag(b"{r"), None);
        assert_eq!(fence_key("jobs").unwrap(), "simba:fence:{jobs}");
        assert_eq!(hash_tag(fence_key("jobs").unwrap().as_bytes()), Some(&b"jobs"[..]));
    }

    #[test]
    fn keys_outside_the_tag_are_refused_before_any_io() {
        // A connection that fails every call: the check must not reach it.
        struct NoIo;
        impl ConnectionLike for NoIo {
            fn req_packed_command(&mut self, _: &[u8]) -> ::redis::RedisResult<::redis::Value> {
                panic!("I/O attempted")
            }
            fn req_packed_commands(
                &mut self,
                _: &[u8],
                _: usize,
                _: usize,
            ) -> ::redis::RedisResult<Vec<::redis::Value>> {
                panic!("I/O attempted")
            }
            fn get_db(&self) -> i64 {
                0
            }
            fn check_connection(&mut self) -> bool {
                false
            }
            fn is_open(&self) -> bool {
                false
            }
        }
        let t = Token::new(1).unwrap();
        let e = set(&mut NoIo, "jobs", t, "jobs:data", "v").unwrap_err();
        assert!(matches!(e, FenceError::Invalid { .. }), "{e:?}");
        assert!(e.to_string().contains("{jobs}"), "{e}");
        assert!(matches!(set(&mut NoIo, "a b", t, "{a b}", "v"), Err(FenceError::Invalid { .. })));
        let none: &[(&str, &str)] = &[];
        assert!(matches!(hset(&mut NoIo, "jobs", t, "{jobs}", none), Err(FenceError::Invalid { .. })));
    }
}
