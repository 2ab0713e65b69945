//! A private ZooKeeper server for tests that restart it or need a special configuration (TLS,
//! SASL): never the shared server of `scripts/services`.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::server::ServerProcess;

const JAR: &str = "/usr/share/java/zookeeper.jar";
/// Netty jars the Debian package's manifest does not list but `NettyServerCnxnFactory` needs.
const NETTY_EXTRA: &[&str] = &["/usr/share/java/netty-codec.jar", "/usr/share/java/netty-resolver.jar"];

/// How to start a private ZooKeeper.
#[derive(Default, Clone)]
pub struct ZkConfig {
    /// Member of an ensemble: this server's id (1-based) and every member's ports.
    pub ensemble: Option<(usize, Vec<MemberPorts>)>,
    /// Serve TLS on a second port (`secureClientPort`) with these PEM files (Netty factory).
    pub tls: Option<ZkTlsFiles>,
    /// Enable SASL DIGEST-MD5 with these users (`user`, `password`).
    pub sasl_users: Vec<(String, String)>,
    /// `tickTime` in milliseconds (default 250).
    pub tick_ms: Option<u32>,
    /// `syncLimit` in ticks (default 20).
    pub sync_limit: Option<u32>,
    /// Each ensemble member's address (`server.N=` lines; this member's `clientPortAddress` and
    /// the address [`PrivateZk::four_letters`] uses); default 127.0.0.1 for all.
    pub member_hosts: Vec<String>,
    /// Run the server inside this network namespace (see `support::netfault::Netns`).
    pub netns: Option<String>,
}

/// The ports of one ensemble member.
#[derive(Clone, Copy, Debug)]
pub struct MemberPorts {
    pub client: u16,
    pub quorum: u16,
    pub election: u16,
}

/// Server-side TLS files and whether client certificates are required.
#[derive(Clone)]
pub struct ZkTlsFiles {
    /// PEM: the server's private key followed by its certificate.
    pub keystore: PathBuf,
    /// PEM: the CA that signs client certificates.
    pub truststore: PathBuf,
    /// `ssl.clientAuth`: `none`, `want` or `need`.
    pub client_auth: &'static str,
}

/// A private ZooKeeper process and its directory.
pub struct PrivateZk {
    pub proc: ServerProcess,
    /// Plaintext client port (always served; the readiness check uses it).
    pub port: u16,
    /// TLS client port, when TLS is configured.
    pub secure_port: Option<u16>,
    /// The address the server serves clients on (127.0.0.1 unless `member_hosts` says otherwise).
    pub host: String,
    config: ZkConfig,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl PrivateZk {
    /// Starts a plain private ZooKeeper in a fresh directory named after `label`.
    pub fn start(label: &str) -> PrivateZk {
        PrivateZk::start_with(label, ZkConfig::default())
    }

    /// Starts a private ZooKeeper with `config`.
    pub fn start_with(label: &str, config: ZkConfig) -> PrivateZk {
        let mut zk = PrivateZk::configure(label, config);
        zk.launch();
        zk
    }

    /// Writes the configuration of a private ZooKeeper in a fresh directory; starts nothing.
    pub fn configure(label: &str, config: ZkConfig) -> PrivateZk {
        let dir = std::env::temp_dir().join(super::unique(label));
        std::fs::create_dir_all(dir.join("data")).unwrap();
        let port = match &config.ensemble {
            Some((id, members)) => members[id - 1].client,
            None => free_port(),
        };
        let secure_port = config.tls.as_ref().map(|_| free_port());
        let host_of = |i: usize| config.member_hosts.get(i).cloned().unwrap_or_else(|| "127.0.0.1".to_string());
        let host = config.ensemble.as_ref().map_or_else(|| host_of(usize::MAX), |(id, _)| host_of(id - 1));
        let mut cfg = match (config.tick_ms, config.sync_limit) {
            (None, None) => format!(
                "tickTime=250\ninitLimit=40\nsyncLimit=20\ndataDir={}\nclientPort={port}\nclientPortAddress={host}\n\
                 minSessionTimeout=500\nmaxSessionTimeout=60000\nmaxClientCnxns=0\nadmin.enableServer=false\n\
                 4lw.commands.whitelist=srvr,cons\n",
                dir.join("data").display()
            ),
            // A realistic tick: ZooKeeper's default session timeout bounds (2 and 20 ticks).
            (tick, sync) => format!(
                "tickTime={}\ninitLimit=10\nsyncLimit={}\ndataDir={}\nclientPort={port}\nclientPortAddress={host}\n\
                 maxClientCnxns=0\nadmin.enableServer=false\n4lw.commands.whitelist=srvr,cons,conf\n",
                tick.unwrap_or(2000),
                sync.unwrap_or(5),
                dir.join("data").display()
            ),
        };
        if let Some((id, members)) = &config.ensemble {
            for (i, m) in members.iter().enumerate() {
                cfg.push_str(&format!("server.{}={}:{}:{}\n", i + 1, host_of(i), m.quorum, m.election));
            }
            std::fs::write(dir.join("data").join("myid"), format!("{id}\n")).unwrap();
        }
        if let Some(p) = secure_port {
            cfg.push_str(&format!("secureClientPort={p}\nsecureClientPortAddress=127.0.0.1\n"));
        }
        std::fs::write(dir.join("zoo.cfg"), cfg).unwrap();
        if !config.sasl_users.is_empty() {
            let users: String =
                config.sasl_users.iter().map(|(u, p)| format!("    user_{u}=\"{p}\"\n")).collect::<Vec<_>>().join("");
            let jaas = format!(
                "Server {{\n    org.apache.zookeeper.server.auth.DigestLoginModule required\n{}    ;\n}};\n",
                users
            );
            std::fs::write(dir.join("jaas.conf"), jaas).unwrap();
        }
        PrivateZk { proc: ServerProcess::new(dir), port, secure_port, host, config }
    }

    /// Starts (or restarts) the process and waits until it serves.
    pub fn launch(&mut self) {
        self.spawn();
        self.wait_ready();
    }

    /// Starts (or restarts) the process without waiting (an ensemble member serves only once a
    /// quorum runs).
    pub fn spawn(&mut self) {
        assert!(Path::new(JAR).exists(), "{JAR} missing: run `scripts/services up zookeeper`");
        let mut cp = JAR.to_string();
        for j in NETTY_EXTRA {
            if Path::new(j).exists() {
                cp.push(':');
                cp.push_str(j);
            }
        }
        let mut cmd = match &self.config.netns {
            Some(ns) => {
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, "java"]);
                c
            }
            None => Command::new("java"),
        };
        cmd.args(["-Xms32m", "-Xmx256m", "-XX:+UseSerialGC"]);
        if let Some(t) = &self.config.tls {
            cmd.arg("-Dzookeeper.serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory")
                .arg(format!("-Dzookeeper.ssl.keyStore.location={}", t.keystore.display()))
                .arg("-Dzookeeper.ssl.keyStore.type=PEM")
                .arg(format!("-Dzookeeper.ssl.trustStore.location={}", t.truststore.display()))
                .arg("-Dzookeeper.ssl.trustStore.type=PEM")
                .arg(format!("-Dzookeeper.ssl.clientAuth={}", t.client_auth));
        }
        if !self.config.sasl_users.is_empty() {
            cmd.arg(format!("-Djava.security.auth.login.config={}", self.proc.dir.join("jaas.conf").display()))
                .arg("-Dzookeeper.authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider");
        }
        let log = std::fs::File::create(self.proc.dir.join("zookeeper.log")).unwrap();
        let child = cmd
            .args(["-cp", &cp, "org.apache.zookeeper.server.quorum.QuorumPeerMain"])
            .arg(self.proc.dir.join("zoo.cfg"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("java");
        self.proc.running(child);
    }

    /// Waits until the server serves clients (up to 60 s).
    pub fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !self.ready() {
            assert!(
                Instant::now() < deadline,
                "private ZooKeeper on {} did not start; its log: {}",
                self.port,
                self.proc.dir.join("zookeeper.log").display()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn ready(&self) -> bool {
        let plain = self.four_letters("srvr").is_some_and(|out| out.contains("Mode:"));
        plain && self.secure_port.is_none_or(|p| std::net::TcpStream::connect(("127.0.0.1", p)).is_ok())
    }

    /// The answer to a four-letter command (`srvr`, `cons`), `None` when the server does not answer.
    pub fn four_letters(&self, cmd: &str) -> Option<String> {
        four_letters_at(&self.host, self.port, cmd)
    }

    /// `leader`, `follower` or `standalone` (from `srvr`), `None` while not serving.
    pub fn mode(&self) -> Option<String> {
        let out = self.four_letters("srvr")?;
        out.lines().find_map(|l| l.strip_prefix("Mode: ")).map(|m| m.trim().to_string())
    }

    /// The ids of the ZooKeeper sessions connected to this server (from `cons`).
    pub fn connected_sessions(&self) -> Vec<u64> {
        parse_sessions(&self.four_letters("cons").unwrap_or_default())
    }

    /// Stops the process gracefully.
    pub fn stop(&mut self) {
        self.proc.terminate();
    }

    /// `zookeeper://<host>:<plain port>/simba`.
    pub fn url(&self) -> String {
        format!("zookeeper://{}:{}/simba", self.host, self.port)
    }

    /// `127.0.0.1:<TLS port>`.
    pub fn secure_hosts(&self) -> String {
        format!("127.0.0.1:{}", self.secure_port.expect("TLS not configured"))
    }
}

/// The answer of the ZooKeeper on `127.0.0.1:port` to a four-letter command.
pub fn four_letters(port: u16, cmd: &str) -> Option<String> {
    four_letters_at("127.0.0.1", port, cmd)
}

/// The answer of the ZooKeeper on `host:port` to a four-letter command.
pub fn four_letters_at(host: &str, port: u16, cmd: &str) -> Option<String> {
    use std::io::{Read, Write};
    let addr: std::net::SocketAddr = format!("{host}:{port}").parse().ok()?;
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    let _ = s.set_read_timeout(Some(Duration::from_secs(2)));
    let mut out = String::new();
    s.write_all(cmd.as_bytes()).ok()?;
    s.read_to_string(&mut out).ok()?;
    Some(out)
}

/// The ids of the sessions connected to the ZooKeeper on `127.0.0.1:port` (its `cons` answer:
/// `…(…,sid=0x1000…,…)` per connection; the `cons` connection itself has none).
pub fn connected_sessions(port: u16) -> Vec<u64> {
    parse_sessions(&four_letters(port, "cons").unwrap_or_default())
}

fn parse_sessions(out: &str) -> Vec<u64> {
    out.split("sid=0x")
        .skip(1)
        .filter_map(|rest| {
            let hex: String = rest.chars().take_while(char::is_ascii_hexdigit).collect();
            u64::from_str_radix(&hex, 16).ok()
        })
        .collect()
}

/// Waits until `session` renews with a keep-alive sent after `down` (the instant its server went
/// away): the client reconnected. Meanwhile the session must stay active and `lease` keep
/// `token`; `what` says what happened at `down`, for the failure message.
pub fn assert_renewed_after(
    session: &simba::Session,
    lease: &simba::Lease,
    token: simba::Token,
    down: Instant,
    what: &str,
) {
    let lease_duration = session.options().lease_duration();
    loop {
        assert_eq!(
            session.state(),
            simba::SessionState::Active,
            "session {} ended {:?} after {what} (lease {lease_duration:?})",
            session.id(),
            down.elapsed()
        );
        assert_eq!(lease.token().unwrap(), token, "lease {} lost or changed after {what}", lease.name());
        // The remaining time exceeds what is left of a renewal sent before `down`.
        let renewed_after_down = lease_duration.saturating_sub(down.elapsed()) + Duration::from_millis(200);
        if session.remaining().is_some_and(|r| r > renewed_after_down) {
            return;
        }
        assert!(down.elapsed() < lease_duration + Duration::from_secs(2), "neither a renewal nor an expiry");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A private 3-server ZooKeeper ensemble on loopback, for tests that stop members (never the
/// shared ensemble of `scripts/services`).
pub struct PrivateEnsemble {
    pub members: Vec<PrivateZk>,
}

impl PrivateEnsemble {
    /// Starts three members and waits until each serves (a leader is elected).
    pub fn start(label: &str) -> PrivateEnsemble {
        let ports: Vec<MemberPorts> =
            (0..3).map(|_| MemberPorts { client: free_port(), quorum: free_port(), election: free_port() }).collect();
        let mut members: Vec<PrivateZk> = (1..=3)
            .map(|id| {
                PrivateZk::configure(label, ZkConfig { ensemble: Some((id, ports.clone())), ..ZkConfig::default() })
            })
            .collect();
        for m in &mut members {
            m.spawn();
        }
        for m in &members {
            m.wait_ready();
        }
        PrivateEnsemble { members }
    }

    /// `zookeeper://127.0.0.1:a,127.0.0.1:b,127.0.0.1:c/simba`.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self.members.iter().map(|m| format!("127.0.0.1:{}", m.port)).collect();
        format!("zookeeper://{}/simba", hosts.join(","))
    }

    /// The index of the current leader, waiting up to 60 s for one.
    pub fn leader(&self) -> usize {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(i) = self.members.iter().position(|m| m.mode().as_deref() == Some("leader")) {
                return i;
            }
            assert!(Instant::now() < deadline, "no ZooKeeper leader within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A test PKI made with the `openssl` command: a CA, a server certificate for 127.0.0.1 and
/// localhost, a client certificate, and an unrelated second CA.
pub struct TestPki {
    pub dir: PathBuf,
}

impl TestPki {
    /// Creates the files under `dir` (which must exist).
    pub fn create(dir: &Path) -> TestPki {
        let run = |args: &[&str]| {
            let out = Command::new("openssl").args(args).current_dir(dir).output().expect("the openssl command");
            assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        };
        for ca in ["ca", "other-ca"] {
            run(&[
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{ca}.key"),
                "-out",
                &format!("{ca}.pem"),
                "-days",
                "2",
                "-subj",
                &format!("/CN=simba-test-{ca}"),
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            ]);
        }
        for (who, eku) in [("server", "serverAuth"), ("client", "clientAuth")] {
            run(&[
                "req",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                &format!("{who}.key"),
                "-out",
                &format!("{who}.csr"),
                "-subj",
                &format!("/CN={who}"),
            ]);
            std::fs::write(
                dir.join(format!("{who}.ext")),
                format!(
                    "subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\n\
                     keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={eku}\n"
                ),
            )
            .unwrap();
            run(&[
                "x509",
                "-req",
                "-in",
                &format!("{who}.csr"),
                "-CA",
                "ca.pem",
                "-CAkey",
                "ca.key",
                "-CAcreateserial",
                "-out",
                &format!("{who}.pem"),
                "-days",
                "2",
                "-extfile",
                &format!("{who}.ext"),
            ]);
        }
        let keystore = [
            std::fs::read_to_string(dir.join("server.key")).unwrap(),
            std::fs::read_to_string(dir.join("server.pem")).unwrap(),
        ]
        .concat();
        std::fs::write(dir.join("server-keystore.pem"), keystore).unwrap();
        TestPki { dir: dir.to_path_buf() }
    }

    /// The path of one of the files (`ca.pem`, `other-ca.pem`, `client.pem`, `client.key`, …).
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }

    /// Server TLS files with `client_auth` (`none`, `want`, `need`).
    pub fn server(&self, client_auth: &'static str) -> ZkTlsFiles {
        ZkTlsFiles { keystore: self.path("server-keystore.pem"), truststore: self.path("ca.pem"), client_auth }
    }
}

impl Drop for TestPki {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
