//! Shared helpers of the integration tests: server addresses and unique name prefixes.
//!
//! Real-server tests never skip: when a server is unreachable they fail with a message saying
//! how to start it (`scripts/services up`).
#![allow(dead_code)]

use std::net::{TcpStream, ToSocketAddrs};
use std::time::Duration;

pub mod forward;
pub mod proxy;
pub mod server;
#[cfg(any(feature = "postgres", feature = "mysql"))]
pub mod sql;
pub mod zk;

/// The value of `var`, or `default`.
pub fn env_or(var: &str, default: &str) -> String {
    std::env::var(var).ok().filter(|v| !v.is_empty()).unwrap_or_else(|| default.to_string())
}

/// Panics with a clear message unless something listens on `host:port`.
pub fn require_tcp(what: &str, addr: &str) {
    let ok = addr
        .to_socket_addrs()
        .ok()
        .and_then(|mut a| a.next())
        .map(|a| TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok())
        .unwrap_or(false);
    assert!(ok, "{what} is not reachable at {addr}: run `scripts/services up` (or set the test URL variable)");
}

/// A random prefix so concurrent and repeated runs never see each other's names.
pub fn unique(prefix: &str) -> String {
    let r: u64 = rand::random();
    format!("{prefix}-{r:016x}")
}
