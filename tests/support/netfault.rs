//! Real network faults on this machine (SPEC §8, "Network faults"): a network namespace joined to
//! the host by a veth pair, and `iptables` rules that cut chosen traffic between them.
//!
//! Everything is tagged with [`TAG`] and the creating process id (namespace and interface names,
//! rule comments), removed on drop (also when the test panics), and a previous run's leftovers
//! whose process is gone are removed by [`require_root`] before a test creates its own. Needs root
//! (and the `ip` and `iptables` commands): a test that needs them fails with a clear message,
//! never skips.
#![allow(dead_code)]

use std::process::Command;

/// The tag of every namespace, interface and rule made here: `snf<pid>…`.
pub const TAG: &str = "snf";

/// Fails (with what to do) unless this process is root and has `ip` and `iptables`; then removes
/// the namespaces, interfaces and rules of earlier runs whose process no longer exists.
pub fn require_root(what: &str) {
    assert!(
        effective_uid() == Some(0),
        "{what} makes a real network partition (network namespaces, iptables): run it as root"
    );
    for (cmd, pkg) in [("ip", "iproute2"), ("iptables", "iptables")] {
        let ok = Command::new(cmd).arg("--version").output().is_ok_and(|o| o.status.success())
            || Command::new(cmd).arg("-V").output().is_ok_and(|o| o.status.success());
        assert!(ok, "{what} needs the `{cmd}` command: apt-get install -y {pkg} (run scripts/services up zookeeper)");
    }
    clean_stale();
}

/// The effective uid of this process (from `/proc/self/status`).
fn effective_uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(2)?.parse().ok()
}

fn run(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0]).args(&args[1..]).output().map_err(|e| format!("{args:?}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!("{args:?}: {}", String::from_utf8_lossy(&out.stderr).trim()))
    }
}

fn must(args: &[&str]) -> String {
    run(args).unwrap_or_else(|e| panic!("network fault setup failed: {e}"))
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

/// The pid in a tagged name `snf<pid>x…`, if any.
fn owner(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TAG)?;
    rest.split('x').next()?.parse().ok()
}

/// Removes the namespaces, host interfaces and iptables rules tagged by processes that are gone.
pub fn clean_stale() {
    for line in run(&["ip", "netns", "list"]).unwrap_or_default().lines() {
        let name = line.split_whitespace().next().unwrap_or_default();
        if owner(name).is_some_and(|pid| !alive(pid)) {
            let _ = run(&["ip", "netns", "del", name]);
        }
    }
    for line in run(&["ip", "-o", "link", "show"]).unwrap_or_default().lines() {
        // `12: snf123x0h@if11: <…>`
        let name = line.split(':').nth(1).unwrap_or_default().trim().split('@').next().unwrap_or_default();
        if owner(name).is_some_and(|pid| !alive(pid)) {
            let _ = run(&["ip", "link", "del", name]);
        }
    }
    for chain in ["INPUT", "OUTPUT", "FORWARD"] {
        for rule in run(&["iptables", "-S", chain]).unwrap_or_default().lines() {
            let Some(tag) = comment_of(rule) else { continue };
            if owner(&tag).is_some_and(|pid| !alive(pid)) {
                let spec: Vec<String> = shell_words(rule.strip_prefix("-A ").unwrap_or(rule));
                let mut args = vec!["iptables".to_string(), "-D".to_string()];
                args.extend(spec);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let _ = run(&args);
            }
        }
    }
}

/// The `--comment` of an `iptables -S` line, when it is one of ours.
fn comment_of(rule: &str) -> Option<String> {
    let words = shell_words(rule);
    let i = words.iter().position(|w| w == "--comment")?;
    let c = words.get(i + 1)?;
    c.starts_with(TAG).then(|| c.clone())
}

/// Splits an `iptables -S` line into words (double quotes group, as iptables prints comments).
fn shell_words(s: &str) -> Vec<String> {
    let (mut words, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    for ch in s.chars() {
        match ch {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// A network namespace joined to the host by a veth pair: the host side has [`Netns::host_ip`],
/// the namespace side [`Netns::ns_ip`] (a /30 of 10.213.0.0/16); loopback is up inside. Removed
/// (with the pair) on drop.
pub struct Netns {
    pub name: String,
    host_if: String,
    pub host_ip: String,
    pub ns_ip: String,
}

impl Netns {
    /// Creates a namespace; `n` distinguishes several in one process (0..=9).
    pub fn create(n: u8) -> Netns {
        let pid = std::process::id();
        let name = format!("{TAG}{pid}x{n}");
        let (host_if, ns_if) = (format!("{name}h"), format!("{name}n"));
        // A /30 chosen from the pid; the next one when taken (another test's namespace).
        let used = run(&["ip", "-o", "addr", "show"]).unwrap_or_default();
        let mut k = (pid as usize * 10 + n as usize) % 16000;
        let (host_ip, ns_ip) = loop {
            let (a, b) = (k / 64, (k % 64) * 4);
            let host = format!("10.213.{a}.{}", b + 1);
            if !used.contains(&format!("{host}/")) {
                break (host, format!("10.213.{a}.{}", b + 2));
            }
            k = (k + 1) % 16000;
        };
        let guard = Netns { name: name.clone(), host_if: host_if.clone(), host_ip: host_ip.clone(), ns_ip };
        must(&["ip", "netns", "add", &name]);
        must(&["ip", "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if]);
        must(&["ip", "link", "set", &ns_if, "netns", &name]);
        must(&["ip", "addr", "add", &format!("{host_ip}/30"), "dev", &host_if]);
        must(&["ip", "link", "set", &host_if, "up"]);
        let inside = |args: &[&str]| {
            let mut all = vec!["ip", "netns", "exec", &name];
            all.extend_from_slice(args);
            must(&all);
        };
        inside(&["ip", "addr", "add", &format!("{}/30", guard.ns_ip), "dev", &ns_if]);
        inside(&["ip", "link", "set", &ns_if, "up"]);
        inside(&["ip", "link", "set", "lo", "up"]);
        guard
    }

    /// A command that runs `program` inside the namespace (`ip netns exec` execs it: the child's
    /// pid is the program's).
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["ip", "link", "del", &self.host_if]);
        let _ = run(&["ip", "netns", "del", &self.name]);
    }
}

/// `iptables` rules in force until dropped (also on a panic), each tagged with a comment naming
/// this process.
pub struct Rules {
    rules: Vec<Vec<String>>,
}

impl Rules {
    /// Inserts `rules` (each `CHAIN match… -j TARGET`, e.g. `INPUT -s 10.0.0.2 -p tcp -j DROP`)
    /// at the head of their chains.
    pub fn insert(rules: &[&[&str]]) -> Rules {
        let tag = format!("{TAG}{}x", std::process::id());
        let mut guard = Rules { rules: Vec::new() };
        for r in rules {
            let mut spec: Vec<String> = r.iter().map(|s| s.to_string()).collect();
            spec.extend(["-m", "comment", "--comment", &tag].map(String::from));
            let mut args = vec!["iptables".to_string(), "-I".to_string()];
            args.extend(spec.iter().cloned());
            must(&args.iter().map(String::as_str).collect::<Vec<_>>());
            guard.rules.push(spec);
        }
        guard
    }

    /// Removes the rules now.
    pub fn remove(mut self) {
        self.clear();
    }

    fn clear(&mut self) {
        for spec in self.rules.drain(..) {
            let mut args = vec!["iptables".to_string(), "-D".to_string()];
            args.extend(spec);
            let _ = run(&args.iter().map(String::as_str).collect::<Vec<_>>());
        }
    }
}

impl Drop for Rules {
    fn drop(&mut self) {
        self.clear();
    }
}

/// Cuts every TCP packet between `ns` and the host except those of the namespace's `keep_port`
/// (a server in the namespace that keeps serving the host's clients): the namespace's processes
/// cannot reach the host's and the host's cannot reach them, but for that one port.
pub fn isolate_except(ns: &Netns, keep_port: u16) -> Rules {
    let keep = keep_port.to_string();
    Rules::insert(&[
        &["INPUT", "-s", &ns.ns_ip, "-p", "tcp", "!", "--sport", &keep, "-j", "DROP"],
        &["OUTPUT", "-d", &ns.ns_ip, "-p", "tcp", "!", "--dport", &keep, "-j", "DROP"],
    ])
}

/// Silently drops every packet of one TCP connection on this machine, both ways: the one from
/// this machine's `client_port` to the server at `server_ip:server_port` (a loopback address).
/// The rules are in `INPUT`, so the packets are sent and vanish on arrival: writes succeed, no
/// error and no RST reaches either end, and both keep retransmitting into the void — a
/// blackholed connection, not a refused one. Every other connection to the server is untouched.
pub fn blackhole_connection(server_ip: &str, server_port: u16, client_port: u16) -> Rules {
    let (server, client) = (server_port.to_string(), client_port.to_string());
    Rules::insert(&[
        &["INPUT", "-p", "tcp", "-d", server_ip, "--dport", &server, "--sport", &client, "-j", "DROP"],
        &["INPUT", "-p", "tcp", "-s", server_ip, "--sport", &server, "--dport", &client, "-j", "DROP"],
    ])
}

/// Silently drops every TCP packet to and from `server_ip:server_port` (a loopback address of
/// this machine), both ways, in `INPUT` as [`blackhole_connection`] does: every open connection
/// to that address is blackholed, and a new one never gets past its SYN. The server stays
/// reachable at its other addresses.
pub fn blackhole_server(server_ip: &str, server_port: u16) -> Rules {
    let server = server_port.to_string();
    Rules::insert(&[
        &["INPUT", "-p", "tcp", "-d", server_ip, "--dport", &server, "-j", "DROP"],
        &["INPUT", "-p", "tcp", "-s", server_ip, "--sport", &server, "-j", "DROP"],
    ])
}

/// The `iptables -S` lines (every chain of the filter table) tagged by this process: empty once
/// every [`Rules`] it made is gone.
pub fn own_rules() -> Vec<String> {
    let tag = format!("{TAG}{}x", std::process::id());
    must(&["iptables", "-S"])
        .lines()
        .filter(|r| comment_of(r).as_deref() == Some(tag.as_str()))
        .map(String::from)
        .collect()
}
