//! Real faults: database server restarts, on private instances (never the shared servers).
//!
//! A restart shorter than the lease: the session survives (the pool replaces its dead connections
//! and the next renewal succeeds), the lease keeps its token, and the token counter is durable —
//! the next term's token is larger. A restart longer than the lease: the session expires locally
//! at its deadline and a `Coordinator` recovers with a new session and a larger token.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::{Coordinator, CoordinatorEvent, LeaseBackend, Session, SessionOptions};
use support::server::ServerProcess;

fn options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(6))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_millis(800))
        .build()
        .unwrap()
}

fn sql_options() -> SqlOptions {
    SqlOptions::builder().query_timeout(Duration::from_millis(800)).build().unwrap()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(support::unique(&format!("simba-restart-{tag}")));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn wait_tcp(addr: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "server at {addr} did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The exercise shared by both databases: hold a lease across a short restart, then across a
/// restart longer than the lease (with a coordinator to recover).
fn survive_restarts(backend: Arc<dyn LeaseBackend>, mut restart: impl FnMut(Duration)) {
    let session = Session::open(backend.clone(), options()).unwrap();
    let lease = session.lock("restart-lease").unwrap();
    let t1 = lease.token().unwrap();
    restart(Duration::ZERO);
    // The session renews through fresh connections; the lease and its token survive.
    let deadline = Instant::now() + Duration::from_secs(6);
    loop {
        assert!(lease.token().is_ok(), "lease lost across a short restart");
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(lease.token().unwrap(), t1);
    lease.release().unwrap();
    let t2 = session.lock("restart-lease").unwrap();
    assert!(t2.token().unwrap() > t1, "token counter not durable across the restart");
    drop(t2);
    session.close().unwrap();

    // A restart that outlasts the lease: the coordinator's session expires locally on time, and
    // it recovers on a new session with a larger token once the server is back.
    let coordinator = Coordinator::start(backend, options()).unwrap();
    let events = coordinator.events();
    let election = coordinator.campaign("restart-election").unwrap();
    let e1 = election.wait_elected(Duration::from_secs(10)).unwrap();
    assert!(e1.get() > 0);
    restart(Duration::from_secs(8));
    let e2 = election.wait_elected(Duration::from_secs(30)).unwrap();
    assert!(e2 > e1, "re-election token {e2} not > {e1}");
    let evs: Vec<_> = events.try_iter().collect();
    assert!(evs.iter().any(|e| matches!(e, CoordinatorEvent::SessionLost { .. })), "{evs:?}");
    assert!(evs.iter().any(|e| matches!(e, CoordinatorEvent::Recovered { .. })), "{evs:?}");
    drop(election);
    coordinator.close().unwrap();
}

// ---------------------------------------------------------------- PostgreSQL

struct PrivatePostgres {
    dir: PathBuf,
    port: u16,
}

const PG_BIN: &str = "/usr/lib/postgresql";

fn pg_bin(tool: &str) -> PathBuf {
    let ver = std::fs::read_dir(PG_BIN)
        .unwrap_or_else(|e| panic!("{PG_BIN}: {e} (run `scripts/services up` to install PostgreSQL)"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .max()
        .expect("a PostgreSQL version");
    Path::new(PG_BIN).join(ver).join("bin").join(tool)
}

impl PrivatePostgres {
    fn start(port: u16) -> PrivatePostgres {
        let dir = temp_dir("pg");
        run(Command::new("chown").arg("-R").arg("postgres:postgres").arg(&dir));
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg_bin("initdb"))
            .args(["--auth=trust", "-U", "postgres", "-D"])
            .arg(dir.join("data")));
        let pg = PrivatePostgres { dir, port };
        pg.ctl(&["start", "-w"]);
        pg
    }

    fn ctl(&self, args: &[&str]) {
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .arg("-l")
            .arg(self.dir.join("log"))
            .arg("-o")
            .arg(format!("-p {} -k {} -c listen_addresses=127.0.0.1", self.port, self.dir.display()))
            .args(args));
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg_bin("pg_ctl"))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["stop", "-m", "immediate"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
#[serial_test::serial(postgres_private)]
fn postgres_restarts() {
    let pg = PrivatePostgres::start(5491);
    let backend = Arc::new(SqlBackend::postgres(&pg.url(), sql_options()).unwrap());
    backend.init_schema().unwrap();
    survive_restarts(backend, |down_for| {
        if down_for.is_zero() {
            pg.ctl(&["restart", "-w", "-m", "fast"]);
        } else {
            pg.ctl(&["stop", "-w", "-m", "fast"]);
            std::thread::sleep(down_for);
            pg.ctl(&["start", "-w"]);
        }
    });
}

// ---------------------------------------------------------------- MariaDB

struct PrivateMariadb {
    proc: ServerProcess,
    port: u16,
}

impl PrivateMariadb {
    fn start(port: u16) -> PrivateMariadb {
        let dir = temp_dir("mariadb");
        run(Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg("--user=mysql")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .stdout(Stdio::null()));
        run(Command::new("chown").arg("-R").arg("mysql:mysql").arg(&dir));
        let mut m = PrivateMariadb { proc: ServerProcess::new(dir), port };
        m.launch();
        m
    }

    fn launch(&mut self) {
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg("--user=mysql")
            .arg(format!("--datadir={}", self.proc.dir.join("data").display()))
            .arg(format!("--socket={}", self.proc.dir.join("sock").display()))
            .arg(format!("--pid-file={}", self.proc.dir.join("pid").display()))
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--port={}", self.port))
            .arg("--character-set-server=utf8mb4")
            .arg("--collation-server=utf8mb4_bin")
            .arg("--skip-log-bin")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("mariadbd");
        self.proc.running(child);
        wait_tcp(&format!("127.0.0.1:{}", self.port), Duration::from_secs(30));
    }

    fn stop(&mut self) {
        self.proc.terminate();
    }

    fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }
}

#[test]
#[serial_test::serial(mariadb_private)]
fn mariadb_restarts() {
    let mut db = PrivateMariadb::start(3391);
    let backend = Arc::new(SqlBackend::mysql(&db.url(), sql_options()).unwrap());
    backend.init_schema().unwrap();
    let db_cell = std::cell::RefCell::new(&mut db);
    survive_restarts(backend, |down_for| {
        let mut db = db_cell.borrow_mut();
        db.stop();
        std::thread::sleep(down_for);
        db.launch();
    });
}
