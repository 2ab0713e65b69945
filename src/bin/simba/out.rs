//! What simba prints: human text, or (with `--json`) nothing but JSON lines — progress events and
//! log records on stderr, one result object on the last line of stdout.

use std::io::Write;

use serde_json::{json, Value};
use simba::{display_chain, Error, ErrorKind};

/// Exit codes of simba itself (a supervised command's own exit code is passed through).
pub mod code {
    /// Success.
    pub const OK: u8 = 0;
    /// `check` found a failed item.
    pub const CHECK_FAILED: u8 = 1;
    /// Command-line usage error (clap's code).
    pub const USAGE: u8 = 2;
    /// The backend is unreachable or failed (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// Internal error (EX_SOFTWARE).
    pub const INTERNAL: u8 = 70;
    /// `--timeout` passed before the lock or leadership was acquired (EX_TEMPFAIL).
    pub const TIMEOUT: u8 = 75;
    /// Invalid configuration, name or argument value (EX_CONFIG).
    pub const CONFIG: u8 = 78;
    /// The lock, leadership or membership was lost while the command ran; the command was terminated.
    pub const LOST: u8 = 79;
    /// The command was found but could not be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

/// A failure that ends simba with an exit code.
pub struct Fail {
    pub code: u8,
    pub message: String,
    pub kind: &'static str,
}

impl Fail {
    pub fn new(code: u8, kind: &'static str, message: impl Into<String>) -> Fail {
        Fail { code, kind, message: message.into() }
    }

    /// A configuration error (exit 78).
    pub fn config(message: impl Into<String>) -> Fail {
        Fail::new(code::CONFIG, "config", message)
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let (code, kind) = match e.kind() {
            ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => (code::CONFIG, "config"),
            ErrorKind::LeaseLost | ErrorKind::SessionExpired | ErrorKind::NotLeader => (code::LOST, "lost"),
            ErrorKind::Unavailable | ErrorKind::Backend | ErrorKind::Timeout => (code::UNAVAILABLE, "unavailable"),
            _ => (code::INTERNAL, "internal"),
        };
        Fail { code, kind, message: display_chain(&e) }
    }
}

/// Output helpers: human text on stderr/stdout, or JSON.
#[derive(Clone, Copy)]
pub struct Out {
    pub json: bool,
}

impl Out {
    /// A progress event (stderr): `{"event", "message", fields…}` or `simba: text`, written with
    /// one `write` so that it is never interleaved with what the commands write to the same stderr.
    pub fn progress(&self, event: &str, text: &str, fields: Value) {
        let line = if self.json {
            let mut v = fields;
            if let Value::Object(m) = &mut v {
                m.insert("event".into(), Value::from(event));
                m.insert("message".into(), Value::from(text));
            }
            format!("{v}\n")
        } else if event == "warning" {
            format!("simba: warning: {text}\n")
        } else {
            format!("simba: {text}\n")
        };
        write_line(&line);
    }

    /// The result (stdout): `human` text or the JSON value.
    pub fn result(&self, human: &str, value: Value) {
        let mut out = std::io::stdout().lock();
        if self.json {
            let _ = writeln!(out, "{value}");
        } else if !human.is_empty() {
            let _ = writeln!(out, "{human}");
        }
        let _ = out.flush();
    }

    /// Reports `f` (an `error` event on stderr and, in JSON mode, the error result on stdout)
    /// and returns its exit code.
    pub fn fail(&self, f: &Fail) -> u8 {
        if self.json {
            self.progress("error", &f.message, json!({"kind": f.kind}));
            self.result("", json!({"error": {"kind": f.kind, "message": f.message}, "exit_code": f.code}));
        } else {
            let _ = writeln!(std::io::stderr(), "simba: error: {}", f.message);
        }
        f.code
    }

    /// Installs the logger (`RUST_LOG`, default `warn`): `env_logger`'s format, or in JSON mode one
    /// JSON line per record (`warning` events for warnings and errors, `log` events below).
    pub fn init_logger(&self) {
        let mut b = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"));
        if self.json {
            b.format(|buf, r| {
                let event = if r.level() <= log::Level::Warn { "warning" } else { "log" };
                let v = json!({
                    "event": event,
                    "level": r.level().as_str().to_ascii_lowercase(),
                    "target": r.target(),
                    "message": r.args().to_string(),
                });
                writeln!(buf, "{v}")
            });
        }
        b.init();
    }
}

/// Writes `line` to stderr in one piece: stderr is unbuffered, and `writeln!` would issue one
/// `write` per formatted piece, between which a command's output (sharing the stream) can land.
pub fn write_line(line: &str) {
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

#[cfg(test)]
mod tests {
    use simba::{Error, ErrorKind};

    use super::{code, Fail};

    /// What each error kind exits with (docs/cli.md): a backend that cannot do what was asked — a
    /// third-party backend without `list`, for `simba status` — is a configuration error, 78,
    /// in the backend's words; a backend that fails is 69.
    #[test]
    fn error_kinds_map_to_the_documented_exit_codes() {
        let unsupported = Fail::from(Error::new(ErrorKind::Unsupported, "the acme backend cannot list what it holds"));
        assert_eq!((unsupported.code, unsupported.kind), (code::CONFIG, "config"));
        assert_eq!(code::CONFIG, 78);
        assert!(unsupported.message.contains("acme backend cannot list"), "{}", unsupported.message);
        for kind in [ErrorKind::Unavailable, ErrorKind::Backend, ErrorKind::Timeout] {
            let f = Fail::from(Error::new(kind, "down"));
            assert_eq!((f.code, f.kind), (code::UNAVAILABLE, "unavailable"), "{kind:?}");
        }
        assert_eq!(code::UNAVAILABLE, 69);
        let bad = Fail::from(Error::new(ErrorKind::InvalidName, "invalid name prefix"));
        assert_eq!(bad.code, 78);
    }
}
