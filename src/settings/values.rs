//! Parsers of setting values: durations, drifts, counts, booleans.

use std::time::Duration;

use crate::error::{Error, Result};

/// Parses a duration like `15s`, `500ms`, `1m 30s` (humantime syntax; a unit is required).
///
/// # Errors
/// `InvalidConfig` naming `what` and the value.
pub fn parse_duration(what: &str, value: &str) -> Result<Duration> {
    humantime::parse_duration(value.trim()).map_err(|e| {
        Error::config(format!("{what}={:?} is not a duration ({e}): write e.g. 15s, 500ms or 1m 30s", shorten(value)))
    })
}

/// Parses a drift like `0.01` or `1%` (a fraction, or a percentage with `%`); `SIMBA_DRIFT` and
/// the CLI's `--drift` both use it.
///
/// # Errors
/// `InvalidConfig` naming `what` and the value.
pub fn parse_drift(what: &str, value: &str) -> Result<f64> {
    let v = value.trim();
    let parsed = match v.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => v.parse::<f64>(),
    };
    parsed.map_err(|_| {
        Error::config(format!(
            "{what}={:?} is not a number: write a fraction like 0.01 or a percentage like 1%",
            shorten(v)
        ))
    })
}

/// Parses a whole number (0 or more) for `what`.
pub(crate) fn parse_count(what: &str, value: &str) -> Result<u32> {
    value
        .trim()
        .parse::<u32>()
        .map_err(|_| Error::config(format!("{what}={:?} is not a whole number (0 or more)", shorten(value))))
}

/// Parses a boolean (`true`/`false`, `yes`/`no`, `on`/`off`, `1`/`0`) for `what`.
pub(crate) fn parse_bool(what: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(Error::config(format!("{what}={:?} is not a boolean: write true or false", shorten(value)))),
    }
}

/// `s` cut to 64 characters (for echoing input in messages).
pub(crate) fn shorten(s: &str) -> String {
    let mut out: String = s.chars().take(64).collect();
    if s.chars().count() > 64 {
        out.push('…');
    }
    out
}
