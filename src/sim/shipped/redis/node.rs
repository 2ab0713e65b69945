//! One simulated Redis node: a [`Keyspace`] and a Lua 5.1 interpreter (the language Redis runs)
//! that runs scripts as `EVAL` does, with Redis's bridge: `KEYS` and `ARGV`, `redis.call` (a
//! failing command raises a script error), `redis.pcall` (it returns the error as a table
//! `{err = …}`), `redis.error_reply` and `redis.status_reply`, and Redis's conversion rules:
//!
//! * command reply → Lua: integer → number, bulk string → string, **nil bulk → `false`**, array
//!   → table (a nil element → `false`), status → `{ok = …}`, error → `{err = …}` (`pcall` only);
//! * Lua → script reply: number → integer (**truncated** toward zero), string → bulk string,
//!   `true` → integer 1, **`false` and `nil` → nil**, a table with a string field `err` → error
//!   reply, with `ok` → status reply, any other table → array of its elements `1..n` **up to the
//!   first nil**;
//! * `redis.call` arguments must be strings or numbers (a number becomes its `%.17g` text, as
//!   Redis 7.0 writes it).
//!
//! What differs from Redis, on purpose or as a limit: the node's time is frozen during a script
//! (Redis 7 freezes it for key expiry too; `TIME` returns the node clock), scripts are not
//! sandboxed (no read-only globals), `redis.call` raises a string error, not an error table, and
//! only the commands of [`Keyspace`] exist.

use std::collections::HashMap;

use mlua::{Lua, MultiValue, Value as LuaValue};

use super::keyspace::{Keyspace, Reply};

/// Which keys a Cluster node serves (`None`: a standalone server, every key is local).
type Serves = Option<Box<dyn Fn(&[u8]) -> bool + Send>>;

/// A simulated Redis node (see the module docs).
pub struct Node {
    lua: Lua,
    /// Compiled scripts by source (each shipped script is compiled once per node).
    compiled: HashMap<String, mlua::Function>,
}

/// The error Redis 7 gives a cluster script that names a key of a slot its node does not serve.
const NON_LOCAL: &str = "ERR Script attempted to access a non local key in a cluster node script";

/// Redis's check before a command of a script runs on a Cluster node: the command's key (its
/// first argument, for every command the scripts use but `TIME` and `PUBLISH`) must be one the
/// node serves.
fn check_local(lua: &Lua, args: &[Vec<u8>]) -> Option<Reply> {
    let cmd = args.first()?;
    if cmd.eq_ignore_ascii_case(b"TIME") || cmd.eq_ignore_ascii_case(b"PUBLISH") {
        return None;
    }
    let key = args.get(1)?;
    let serves = lua.app_data_ref::<Serves>()?;
    match serves.as_ref() {
        Some(serves) if !serves(key) => Some(Reply::Error(NON_LOCAL.into())),
        _ => None,
    }
}

/// A script's body as Redis 7 compiles it: without its `#!lua flags=…` first line (kept as an
/// empty line, so error line numbers match the file). The simulated node honours no flag but
/// `allow-cross-slot-keys`, and that one by what every Cluster script gets: a key its node does
/// not serve is an error (the non-local check), whatever slot it is in.
fn body(code: &str) -> String {
    match code.strip_prefix("#!") {
        Some(rest) => format!("\n{}", rest.split_once('\n').map_or("", |(_, body)| body)),
        None => code.to_string(),
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node").field("scripts", &self.compiled.len()).finish()
    }
}

/// A number as Redis 7.0 passes it to a command: C's `%.17g`.
pub(crate) fn number_text(v: f64) -> String {
    if v.is_nan() {
        return if v.is_sign_negative() { "-nan".into() } else { "nan".into() };
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let trim = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((sci.as_str(), "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim(mantissa.to_string()), exp.abs());
    }
    trim(format!("{v:.*}", (16 - exp) as usize))
}

/// `redis.call`'s arguments as Redis reads them: strings, or numbers as `%.17g` text.
fn command_args(args: MultiValue) -> mlua::Result<Vec<Vec<u8>>> {
    if args.is_empty() {
        return Err(mlua::Error::RuntimeError("Please specify at least one argument for this redis lib call".into()));
    }
    args.into_iter()
        .map(|a| match a {
            LuaValue::String(s) => Ok(s.as_bytes().to_vec()),
            LuaValue::Integer(i) => Ok(number_text(i as f64).into_bytes()),
            LuaValue::Number(n) => Ok(number_text(n).into_bytes()),
            _ => Err(mlua::Error::RuntimeError("Lua redis lib command arguments must be strings or integers".into())),
        })
        .collect()
}

/// A command reply as Lua sees it.
fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<LuaValue> {
    Ok(match r {
        Reply::Nil => LuaValue::Boolean(false),
        Reply::Int(i) => LuaValue::Number(i as f64),
        Reply::Bulk(b) => LuaValue::String(lua.create_string(&b)?),
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", s)?;
            LuaValue::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", e)?;
            LuaValue::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table()?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            LuaValue::Table(t)
        }
    })
}

/// A script's return value as the reply Redis sends.
fn from_lua(v: LuaValue) -> mlua::Result<Reply> {
    Ok(match v {
        LuaValue::Nil | LuaValue::Boolean(false) => Reply::Nil,
        LuaValue::Boolean(true) => Reply::Int(1),
        LuaValue::Integer(i) => Reply::Int(i),
        // `(long long)` of the double: truncation toward zero.
        LuaValue::Number(n) => Reply::Int(n as i64),
        LuaValue::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        LuaValue::Table(t) => {
            if let LuaValue::String(e) = t.raw_get::<LuaValue>("err")? {
                return Ok(Reply::Error(e.to_string_lossy()));
            }
            if let LuaValue::String(s) = t.raw_get::<LuaValue>("ok")? {
                return Ok(Reply::Status(s.to_string_lossy()));
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<LuaValue>(i)? {
                    LuaValue::Nil => break,
                    item => items.push(from_lua(item)?),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    })
}

fn with_keyspace<R>(lua: &Lua, f: impl FnOnce(&mut Keyspace) -> R) -> mlua::Result<R> {
    let mut ks = lua
        .app_data_mut::<Keyspace>()
        .ok_or_else(|| mlua::Error::RuntimeError("the node's keyspace is not attached".into()))?;
    Ok(f(&mut ks))
}

/// The root cause's words of a Lua error.
fn words(e: &mlua::Error) -> String {
    match e {
        mlua::Error::CallbackError { cause, .. } => words(cause),
        mlua::Error::RuntimeError(m) => m.clone(),
        other => other.to_string(),
    }
}

impl Node {
    /// An empty node whose clock reads `now_us` (µs since the Unix epoch).
    ///
    /// # Errors
    /// When the Lua interpreter cannot be set up (out of memory).
    pub fn new(now_us: i64) -> mlua::Result<Node> {
        Node::serving(now_us, None)
    }

    /// A node of a Cluster that serves the keys for which `serves` is true: a script flagged
    /// `allow-cross-slot-keys` that names another key gets Redis's non-local-key error there.
    ///
    /// # Errors
    /// As [`Node::new`].
    pub fn in_cluster(now_us: i64, serves: impl Fn(&[u8]) -> bool + Send + 'static) -> mlua::Result<Node> {
        Node::serving(now_us, Some(Box::new(serves)))
    }

    fn serving(now_us: i64, serves: Serves) -> mlua::Result<Node> {
        let lua = Lua::new();
        let mut ks = Keyspace::default();
        ks.set_now_us(now_us);
        lua.set_app_data(ks);
        lua.set_app_data(serves);
        let redis = lua.create_table()?;
        let call = lua.create_function(|lua, args: MultiValue| {
            let args = command_args(args)?;
            let r = match check_local(lua, &args) {
                Some(refused) => refused,
                None => with_keyspace(lua, |ks| ks.command(&args))?,
            };
            match r {
                Reply::Error(e) => Err(mlua::Error::RuntimeError(e)),
                r => to_lua(lua, r),
            }
        })?;
        let pcall = lua.create_function(|lua, args: MultiValue| match command_args(args) {
            Ok(args) => {
                let r = match check_local(lua, &args) {
                    Some(refused) => refused,
                    None => with_keyspace(lua, |ks| ks.command(&args))?,
                };
                to_lua(lua, r)
            }
            Err(e) => to_lua(lua, Reply::Error(words(&e))),
        })?;
        let error_reply =
            lua.create_function(|lua, e: mlua::LuaString| to_lua(lua, Reply::Error(e.to_string_lossy())))?;
        let status_reply =
            lua.create_function(|lua, s: mlua::LuaString| to_lua(lua, Reply::Status(s.to_string_lossy())))?;
        redis.raw_set("call", call)?;
        redis.raw_set("pcall", pcall)?;
        redis.raw_set("error_reply", error_reply)?;
        redis.raw_set("status_reply", status_reply)?;
        lua.globals().raw_set("redis", redis)?;
        Ok(Node { lua, compiled: HashMap::new() })
    }

    /// Sets the node's clock (µs since the Unix epoch).
    pub fn set_now_us(&mut self, now_us: i64) {
        if let Some(mut ks) = self.lua.app_data_mut::<Keyspace>() {
            ks.set_now_us(now_us);
        }
    }

    /// Runs `code` as `EVAL code len(keys) keys… args…` does and returns its reply; a script error
    /// (a compile or runtime error, a failing `redis.call`, an unknown command) is an
    /// `Reply::Error` with Redis's words, as is a reply that returns one.
    pub fn eval(&mut self, code: &str, keys: &[String], args: &[String]) -> Reply {
        match self.try_eval(code, keys, args) {
            Ok(r) => r,
            Err(e) => Reply::Error(format!("ERR {} (simulated script error)", words(&e))),
        }
    }

    fn try_eval(&mut self, code: &str, keys: &[String], args: &[String]) -> mlua::Result<Reply> {
        let f = match self.compiled.get(code) {
            Some(f) => f.clone(),
            None => {
                let f = self.lua.load(body(code)).set_name("@user_script").into_function()?;
                self.compiled.insert(code.to_string(), f.clone());
                f
            }
        };
        let g = self.lua.globals();
        g.raw_set("KEYS", self.lua.create_sequence_from(keys.iter().map(String::as_str))?)?;
        g.raw_set("ARGV", self.lua.create_sequence_from(args.iter().map(String::as_str))?)?;
        from_lua(f.call::<LuaValue>(())?)
    }

    /// Runs one plain command on the keyspace (outside any script).
    pub fn command(&mut self, args: &[&str]) -> Reply {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        match self.lua.app_data_mut::<Keyspace>() {
            Some(mut ks) => ks.command(&args),
            None => Reply::Error("ERR the node's keyspace is not attached".into()),
        }
    }

    /// Reads the keyspace without changing it (no lazy expiry): for the history recorder.
    pub fn peek<R>(&self, f: impl FnOnce(&Keyspace) -> R) -> Option<R> {
        self.lua.app_data_ref::<Keyspace>().map(|ks| f(&ks))
    }
}
