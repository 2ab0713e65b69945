//! Decoding script replies.

use std::time::Duration;

use redis::Value;

use crate::error::{Error, Result};
use crate::types::{Name, SessionId, Token};

/// An integer reply (integers, or numeric strings).
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.trim().parse().ok(),
        Value::SimpleString(s) => s.trim().parse().ok(),
        Value::Double(d) if d.fract() == 0.0 => Some(*d as i64),
        _ => None,
    }
}

/// A string reply.
pub(crate) fn string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Okay => Some("OK".to_string()),
        Value::Int(i) => Some(i.to_string()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        _ => None,
    }
}

/// A string reply, borrowed (a bulk or simple string of UTF-8).
pub(crate) fn text(v: &Value) -> Option<&str> {
    match v {
        Value::BulkString(b) => std::str::from_utf8(b).ok(),
        Value::SimpleString(s) | Value::VerbatimString { text: s, .. } => Some(s),
        _ => None,
    }
}

/// An array reply (a RESP3 set counts too).
pub(crate) fn array(v: &Value) -> Option<&[Value]> {
    match v {
        Value::Array(a) | Value::Set(a) => Some(a),
        _ => None,
    }
}

/// An error for a reply of the wrong shape.
pub(crate) fn unexpected(script: &str, v: &Value) -> Error {
    let mut shown = format!("{v:?}");
    if shown.len() > 200 {
        let mut cut = 200;
        while !shown.is_char_boundary(cut) {
            cut -= 1;
        }
        shown.truncate(cut);
        shown.push('…');
    }
    Error::backend(format!("unexpected reply from redis script {script}: {shown}"))
}

/// A non-negative millisecond count as a duration, capped at `cap`.
pub(crate) fn millis(ms: i64, cap: Duration) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0)).min(cap)
}

/// A token from an integer or string reply.
pub(crate) fn token(v: &Value, what: &str, script: &str) -> Result<Token> {
    let n = int(v).ok_or_else(|| unexpected(script, v))?;
    Token::from_backend(n, what)
}

/// The list of strings in an array reply.
pub(crate) fn strings(v: &Value, script: &str) -> Result<Vec<String>> {
    array(v)
        .ok_or_else(|| unexpected(script, v))?
        .iter()
        .map(|x| string(x).ok_or_else(|| unexpected(script, x)))
        .collect()
}

/// A lease or group name read from one of the session's indexes (`what`: "lease" or "group").
pub(crate) fn index_name(sid: &SessionId, raw: &str, what: &str) -> Result<Name> {
    Name::new(raw).map_err(|e| {
        Error::backend(format!("session {sid}: corrupt {what} name {raw:?} in its redis index")).with_source(e)
    })
}

/// The group names of a keep-alive reply (an array of strings), sorted and deduplicated.
pub(crate) fn group_names(v: &Value, sid: &SessionId, script: &str) -> Result<Vec<Name>> {
    let mut groups = strings(v, script)?.iter().map(|raw| index_name(sid, raw, "group")).collect::<Result<Vec<_>>>()?;
    groups.sort();
    groups.dedup();
    Ok(groups)
}
