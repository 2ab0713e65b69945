//! How much of the negotiated session timeout a keep-alive may report (issue #36, finding 4).
//!
//! The leader alone expires sessions (its session tracker), and it learns of a session's
//! activity at a follower only from the follower's answers to its pings, sent every tickTime/2;
//! a request the follower forwards (the keep-alive's `sync`, a write) checks the session at the
//! leader but does not touch it there. A session connected to a follower is touched there by
//! every packet its client sends — the keep-alive, and the client's idle pings. So when the
//! follower is cut from the leader right after a keep-alive, the leader's last touch of the
//! session can be older than the keep-alive's send instant by half a tick (the keep-alive's own
//! touch never reached the leader: no ping round between it and the cut) plus the client's longest
//! gap between two packets (the touch before the keep-alive was carried by the round after it),
//! and the leader expires the session a session timeout after that touch. A keep-alive therefore
//! reports at most `negotiated − staleness` ([`safe_timeout`]).
//!
//! The tickTime is read from the servers with the `conf` four-letter command where they allow it
//! (`4lw.commands.whitelist`); otherwise ZooKeeper's default, 2 s, is assumed, never more than
//! half the negotiated timeout (by default a server negotiates at least two ticks).

use std::io::{Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

/// ZooKeeper's default `tickTime`, assumed when no server tells its own.
pub(super) const DEFAULT_TICK: Duration = Duration::from_secs(2);
/// Connect and read bound of one `conf` query.
const CONF_TIMEOUT: Duration = Duration::from_millis(500);
/// A backend asks again after this long when a host could not be reached (and none told a tick).
pub(super) const RETRY_AFTER: Duration = Duration::from_secs(30);

/// How much older than a keep-alive's send instant the leader's last touch of the session can be,
/// for a session of `negotiated` timeout: half the server's tick (`tick`, or the default bounded by
/// half the timeout) plus the client's longest gap between two packets. `zookeeper-client` pings
/// after `min(10 s, 3 ticks)` without sending, checked every client tick (`negotiated / 20`, or
/// `connection timeout / 8` — at most `3 × negotiated / 40` — when the application's connector
/// sets a connection timeout): its gap is at most the ping delay plus one client tick; one more
/// client tick covers the leader's rounds being a little more than half a tick apart and the
/// scheduling of both.
pub(super) fn staleness(negotiated: Duration, tick: Option<Duration>, own_connector: bool) -> Duration {
    let client_tick = if own_connector { negotiated * 3 / 40 } else { negotiated / 20 };
    let ping = (client_tick * 3).min(Duration::from_secs(10));
    let tick = tick.unwrap_or_else(|| DEFAULT_TICK.min(negotiated / 2));
    ping + client_tick * 2 + tick / 2
}

/// The longest remaining a keep-alive (or an open) may report for a session of `negotiated`
/// timeout: `negotiated − staleness`, and never less than a tenth of it (a server whose tick
/// exceeds half the session timeout — only with a lowered `minSessionTimeout` — gets that much,
/// and a warning at open).
pub(super) fn safe_timeout(negotiated: Duration, staleness: Duration) -> Duration {
    negotiated.saturating_sub(staleness).max(negotiated / 10)
}

/// What the `conf` queries found: the largest `tickTime` any host told, and whether every host
/// answered (told a tick or refused the command: asking again would find the same).
pub(super) struct TickRead {
    pub(super) tick: Option<Duration>,
    pub(super) settled: bool,
    /// Why a host told no tick: the first such host with the server's own words, or that it did
    /// not answer (`None` when every host told one, or there was none to ask).
    pub(super) why_not: Option<String>,
}

/// Asks each plaintext host of `hosts` (`host:port[,…]`, optionally `tcp://host:port`; TLS hosts
/// are skipped) for its configuration with the `conf` four-letter command, each bounded by
/// [`CONF_TIMEOUT`].
pub(super) fn read_tick(hosts: &str) -> TickRead {
    let mut read = TickRead { tick: None, settled: true, why_not: None };
    for host in hosts.split(',').map(str::trim).filter(|h| !h.is_empty()) {
        if host.starts_with("tcp+tls://") {
            continue;
        }
        let host = host.strip_prefix("tcp://").unwrap_or(host);
        let why = match conf(host) {
            Some(text) => match parse_tick(&text) {
                Some(t) => {
                    read.tick = Some(read.tick.map_or(t, |k| k.max(t)));
                    None
                }
                None => Some(format!("{host} answered conf with {:?}", first_line(&text))),
            },
            None => {
                read.settled = false;
                Some(format!("{host} did not answer conf within {CONF_TIMEOUT:?}"))
            }
        };
        if read.why_not.is_none() {
            read.why_not = why;
        }
    }
    read
}

/// The first non-empty line of a four-letter answer, at most 200 characters (what a server says
/// when it refuses: "conf is not executed because it is not in the whitelist.").
fn first_line(text: &str) -> String {
    let line = text.lines().map(str::trim).find(|l| !l.is_empty()).unwrap_or("nothing");
    line.chars().take(200).collect()
}

/// The `conf` answer of `host`, `None` when it cannot be reached or does not answer in time.
fn conf(host: &str) -> Option<String> {
    let deadline = Instant::now() + CONF_TIMEOUT;
    let addr = host.to_socket_addrs().ok()?.next()?;
    let mut s = TcpStream::connect_timeout(&addr, CONF_TIMEOUT).ok()?;
    s.set_read_timeout(Some(CONF_TIMEOUT)).ok()?;
    s.set_write_timeout(Some(CONF_TIMEOUT)).ok()?;
    s.write_all(b"conf").ok()?;
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) if out.len() < 64 * 1024 => out.extend_from_slice(&buf[..n]),
            Ok(_) => break,
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            break;
        }
    }
    Some(String::from_utf8_lossy(&out).into_owned())
}

/// `tickTime=<ms>` of a `conf` answer (a positive number of milliseconds).
pub(super) fn parse_tick(conf: &str) -> Option<Duration> {
    conf.lines()
        .find_map(|l| l.trim().strip_prefix("tickTime="))
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staleness_is_half_a_tick_plus_the_clients_gap() {
        let s = Duration::from_secs;
        // 6 s timeout, 2 s tick: 1 s + 0.9 s (ping after 3 client ticks of 0.3 s) + 0.6 s.
        assert_eq!(staleness(s(6), Some(s(2)), false), Duration::from_millis(2500));
        // No tick told: the default, bounded by half the timeout.
        assert_eq!(staleness(s(6), None, false), Duration::from_millis(2500));
        assert_eq!(staleness(s(1), None, false), Duration::from_millis(500));
        // The client's ping delay stops at 10 s.
        assert_eq!(staleness(s(100), Some(s(2)), false), s(1) + s(10) + s(10));
        assert_eq!(safe_timeout(s(6), Duration::from_millis(2500)), Duration::from_millis(3500));
        assert_eq!(safe_timeout(s(1), s(5)), Duration::from_millis(100));
    }

    #[test]
    fn the_tick_is_read_from_a_conf_answer() {
        assert_eq!(
            parse_tick("clientPort=2181\ndataDir=/x\ntickTime=2000\nmaxClientCnxns=0\n"),
            Some(Duration::from_secs(2))
        );
        assert_eq!(parse_tick("conf is not executed because it is not in the whitelist.\n"), None);
        assert_eq!(parse_tick("tickTime=0\n"), None);
        assert_eq!(parse_tick("tickTime=abc\n"), None);
    }

    /// A loopback server answering one four-letter command with `answer`; its `host:port`.
    fn answering(answer: &'static str) -> String {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            if let Ok((mut s, _)) = listener.accept() {
                let mut cmd = [0u8; 4];
                if s.read_exact(&mut cmd).is_ok() {
                    let _ = s.write_all(answer.as_bytes());
                }
            }
        });
        addr
    }

    #[test]
    fn a_host_that_tells_no_tick_says_why() {
        let told = answering("clientPort=2181\ntickTime=3000\n");
        let read = read_tick(&told);
        assert_eq!((read.tick, read.settled, read.why_not), (Some(Duration::from_secs(3)), true, None));
        let refused = answering("conf is not executed because it is not in the whitelist.\n");
        let read = read_tick(&format!("tcp://{refused},tcp+tls://127.0.0.1:1"));
        assert_eq!((read.tick, read.settled), (None, true));
        let why = read.why_not.unwrap();
        assert!(why.contains(&refused) && why.contains("not in the whitelist"), "{why}");
        // Nothing listens there: not settled (asked again later), and said so.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().to_string();
        let told = answering("tickTime=2000\n");
        let read = read_tick(&format!("{closed},{told}"));
        assert_eq!((read.tick, read.settled), (Some(Duration::from_secs(2)), false));
        assert!(read.why_not.unwrap().contains("did not answer conf"));
    }
}
