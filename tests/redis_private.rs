//! Private `redis-server` instances for tests that restart, pause, reconfigure or fail over a
//! server (never the shared ones). Included by the other `redis_*` tests with
//! `#[path = "redis_private.rs"] mod private;`; compiled alone it tests itself.
#![cfg(feature = "redis")]
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// A `redis-server` child process on its own port and data directory; killed on drop.
pub struct PrivateRedis {
    pub port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

/// A port nothing listens on right now, and never handed out before in this process: a cluster
/// node takes two (its bus port is picked before the node's own), and the kernel may offer a port
/// it just got back again, which would leave the node unable to start.
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        if !given.contains(&port) {
            given.push(port);
            return port;
        }
    }
}

impl PrivateRedis {
    /// Starts a non-persistent server with `extra` arguments (e.g. `["--appendonly", "yes"]`).
    pub fn start(extra: &[&str]) -> PrivateRedis {
        let port = free_port();
        let r: u64 = rand::random();
        let dir = std::env::temp_dir().join(format!("simba-test-redis-{port}-{r:x}"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut redis = PrivateRedis { port, dir, args: extra.iter().map(|s| s.to_string()).collect(), child: None };
        redis.launch();
        redis
    }

    fn launch(&mut self) {
        let mut cmd = Command::new("redis-server");
        cmd.args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .args(["--repl-diskless-sync-delay", "0", "--daemonize", "no"])
            .arg("--logfile")
            .arg(self.dir.join("redis.log"))
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run redis-server ({e}): install it with `scripts/services up redis`"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.answers() {
                return;
            }
            thread::sleep(Duration::from_millis(20));
        }
        panic!("private redis-server on port {} did not answer PING", self.port);
    }

    /// True when the server answers PING (or refuses it for lack of AUTH).
    fn answers(&self) -> bool {
        use std::io::{Read, Write};
        let Ok(mut tcp) = std::net::TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = tcp.set_read_timeout(Some(Duration::from_millis(500)));
        let mut buf = [0u8; 64];
        tcp.write_all(b"PING\r\n").is_ok()
            && tcp.read(&mut buf).is_ok_and(|n| buf[..n].starts_with(b"+PONG") || buf[..n].starts_with(b"-NOAUTH"))
    }

    /// The server's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("redis.log")).unwrap_or_default()
    }

    /// A backend on this server (query timeout 5 s).
    pub fn backend(&self) -> simba::backends::redis::RedisBackend {
        let options = simba::backends::redis::RedisOptions::builder().query_timeout(Duration::from_secs(5)).build();
        let options = options.unwrap_or_else(|e| panic!("redis options: {e}"));
        simba::backends::redis::RedisBackend::connect(&self.url(), options)
            .unwrap_or_else(|e| panic!("cannot connect to the private redis at {}: {e}", self.url()))
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> i32 {
        self.child.as_ref().map(|c| c.id() as i32).unwrap_or(0)
    }

    /// Runs a command; `None` when the server cannot be reached.
    pub fn try_cmd(&self, args: &[&str]) -> Option<String> {
        let client = redis::Client::open(self.url()).ok()?;
        let mut con = client.get_connection_with_timeout(Duration::from_millis(500)).ok()?;
        con.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        let mut cmd = redis::cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        let v: redis::Value = cmd.query(&mut con).ok()?;
        Some(value_string(&v))
    }

    /// True when `n` replicas acknowledge two writes in a row. (A `WAIT` without a write before it
    /// is satisfied by a replica that is still syncing; and after a diskless full sync the primary
    /// streams new writes only once the replica's next `REPLCONF ACK` arrives, up to a second
    /// later, so a write that made it into the snapshot proves nothing about the next one.)
    pub fn replicated(&self, n: usize) -> bool {
        self.probe(n) && self.probe(n)
    }

    fn probe(&self, n: usize) -> bool {
        let Ok(client) = redis::Client::open(self.url()) else { return false };
        let Ok(mut con) = client.get_connection_with_timeout(Duration::from_millis(500)) else { return false };
        let acked: redis::RedisResult<((), usize)> =
            redis::pipe().cmd("SET").arg("simba-test-probe").arg(1).cmd("WAIT").arg(n).arg(200).query(&mut con);
        acked.is_ok_and(|(_, a)| a >= n)
    }

    /// Runs a command, panicking on failure.
    pub fn cmd(&self, args: &[&str]) -> String {
        self.try_cmd(args).unwrap_or_else(|| panic!("private redis {}: {args:?} failed", self.port))
    }

    /// Stops the server abruptly (SIGKILL: nothing is saved).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same port, directory and arguments.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// SIGSTOP / SIGCONT.
    pub fn pause(&self) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGSTOP).unwrap();
    }
    pub fn resume(&self) {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGCONT).unwrap();
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        if self.child.is_some() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.pid()), nix::sys::signal::Signal::SIGCONT);
        }
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A reply as text (arrays joined with newlines).
pub fn value_string(v: &redis::Value) -> String {
    match v {
        redis::Value::Nil => String::new(),
        redis::Value::Int(i) => i.to_string(),
        redis::Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        redis::Value::SimpleString(s) => s.clone(),
        redis::Value::Okay => "OK".into(),
        redis::Value::Array(a) | redis::Value::Set(a) => a.iter().map(value_string).collect::<Vec<_>>().join("\n"),
        redis::Value::Map(m) => {
            m.iter().map(|(k, v)| format!("{}\n{}", value_string(k), value_string(v))).collect::<Vec<_>>().join("\n")
        }
        other => format!("{other:?}"),
    }
}

#[test]
fn private_server_starts_restarts_and_stops() {
    let mut r = PrivateRedis::start(&[]);
    assert_eq!(r.cmd(&["SET", "k", "v"]), "OK");
    r.restart();
    assert_eq!(r.cmd(&["EXISTS", "k"]), "0", "no persistence: a restart loses everything");
    r.kill();
    assert!(r.try_cmd(&["PING"]).is_none());
}

/// The token of an acquire that must have succeeded.
pub fn acquired(r: simba::Result<simba::backend::Acquire>) -> simba::Token {
    match r {
        Ok(simba::backend::Acquire::Acquired { token, .. }) => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

/// The leases a keep-alive of `sid` (lease duration `d`) reports owned, sorted.
pub fn owned(
    b: &simba::backends::redis::RedisBackend,
    sid: &simba::SessionId,
    d: Duration,
) -> Vec<(simba::Name, simba::Token)> {
    use simba::backend::LeaseBackend;
    match b.keep_alive(sid, d) {
        Ok(simba::backend::KeepAlive::Alive { mut owned, .. }) => {
            owned.sort();
            owned
        }
        other => panic!("keep-alive of session {sid}: expected Alive, got {other:?}"),
    }
}
