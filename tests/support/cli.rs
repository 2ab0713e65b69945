//! Running the `simba` binary from tests: a clean `SIMBA_*` environment and readable results.

use std::process::{Command, Output};

/// `bin` as a command with every `SIMBA_*` variable of the test's own environment removed and
/// `RUST_LOG=warn`, so a developer's settings never leak into a test.
pub fn clean_command(bin: &str) -> Command {
    let mut c = Command::new(bin);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SIMBA_") {
            c.env_remove(k);
        }
    }
    c.env("RUST_LOG", "warn");
    c
}

/// The exit code, or -1 when the process was killed by a signal.
pub fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

/// Standard error as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Standard output as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}
