//! The shared SQL backend of a test binary (one pool, schema created once), per dialect, and
//! private database servers for tests that restart, misconfigure or pause one (never the shared
//! servers).
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::server::ServerProcess;

use simba::backends::sql::{SqlBackend, SqlOptions};

/// The SQL servers of `scripts/services`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (`SIMBA_TEST_POSTGRES_URL`).
    Postgres,
    /// MySQL/MariaDB (`SIMBA_TEST_MYSQL_URL`).
    Mysql,
}

impl Dialect {
    /// The test URL of this dialect's server.
    pub fn url(self) -> String {
        match self {
            Dialect::Postgres => super::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"),
            Dialect::Mysql => super::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
        }
    }

    fn server(self) -> &'static str {
        match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::Mysql => "MySQL/MariaDB",
        }
    }
}

/// One backend for the whole binary (query timeout 1 s), its schema initialised; fails with a
/// clear message when the server is down.
pub fn shared_backend(dialect: Dialect) -> Arc<SqlBackend> {
    static POSTGRES: OnceLock<Arc<SqlBackend>> = OnceLock::new();
    static MYSQL: OnceLock<Arc<SqlBackend>> = OnceLock::new();
    let cell = match dialect {
        Dialect::Postgres => &POSTGRES,
        Dialect::Mysql => &MYSQL,
    };
    cell.get_or_init(|| {
        let url = dialect.url();
        let addr = url.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
        super::require_tcp(dialect.server(), &addr);
        let options = SqlOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
        let backend = match dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => SqlBackend::postgres(&url, options),
            #[cfg(feature = "mysql")]
            Dialect::Mysql => SqlBackend::mysql(&url, options),
            #[allow(unreachable_patterns)]
            other => panic!("{other:?} needs its cargo feature"),
        }
        .unwrap();
        backend
            .init_schema()
            .unwrap_or_else(|e| panic!("cannot initialise the schema at {url}: {e:?} (run `scripts/services up`)"));
        Arc::new(backend)
    })
    .clone()
}

/// Runs `cmd`; panics with its output unless it succeeds.
pub fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A fresh directory under the system temp dir.
pub fn temp_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(super::unique(&format!("simba-private-{tag}")));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Waits until something accepts connections at `addr`.
pub fn wait_tcp(addr: &str, within: Duration) {
    let deadline = Instant::now() + within;
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "server at {addr} did not come up");
        std::thread::sleep(Duration::from_millis(50));
    }
}

const PG_BIN: &str = "/usr/lib/postgresql";

/// A PostgreSQL tool of the newest installed version.
pub fn pg_bin(tool: &str) -> PathBuf {
    let ver = std::fs::read_dir(PG_BIN)
        .unwrap_or_else(|e| panic!("{PG_BIN}: {e} (run `scripts/services up` to install PostgreSQL)"))
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().to_string())
        .max()
        .expect("a PostgreSQL version");
    Path::new(PG_BIN).join(ver).join("bin").join(tool)
}

/// A private PostgreSQL cluster (`initdb` in a temp dir, its own port), stopped and removed on drop.
pub struct PrivatePostgres {
    /// The cluster's directory (data in `data/`).
    pub dir: PathBuf,
    /// Its port on 127.0.0.1.
    pub port: u16,
}

impl PrivatePostgres {
    /// A new trust-auth cluster on `port`, started.
    pub fn start(port: u16) -> PrivatePostgres {
        Self::start_with(port, |_| {})
    }

    /// A new cluster on `port`; `configure` may rewrite its files (e.g. `pg_hba.conf`) before the
    /// first start.
    pub fn start_with(port: u16, configure: impl FnOnce(&Path)) -> PrivatePostgres {
        let dir = temp_dir("pg");
        run(Command::new("chown").arg("-R").arg("postgres:postgres").arg(&dir));
        run(Command::new("runuser")
            .args(["-u", "postgres", "--"])
            .arg(pg_bin("initdb"))
            .args(["--auth=trust", "-U", "postgres", "-D"])
            .arg(dir.join("data"))
            .stdout(Stdio::null()));
        configure(&dir.join("data"));
        let pg = PrivatePostgres { dir, port };
        pg.ctl(&["start", "-w"]);
        pg
    }

    /// Runs `pg_ctl` on the cluster (port, socket dir and loopback address on every start).
    pub fn ctl(&self, args: &[&str]) {
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

    /// A URL as superuser `postgres` to database `postgres`.
    pub fn url(&self) -> String {
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

/// A private MariaDB server (`mariadb-install-db` in a temp dir, its own port), killed and removed
/// on drop.
pub struct PrivateMariadb {
    /// The server process and its directory.
    pub proc: ServerProcess,
    /// Its port on 127.0.0.1.
    pub port: u16,
    extra: Vec<String>,
}

impl PrivateMariadb {
    /// A new server on `port`, started.
    pub fn start(port: u16) -> PrivateMariadb {
        Self::start_with(port, &[])
    }

    /// A new server on `port` started with the extra `mariadbd` options `extra` (e.g.
    /// `--autocommit=0`).
    pub fn start_with(port: u16, extra: &[&str]) -> PrivateMariadb {
        let dir = temp_dir("mariadb");
        run(Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg("--user=mysql")
            .arg(format!("--datadir={}", dir.join("data").display()))
            .arg("--auth-root-authentication-method=normal")
            .arg("--skip-test-db")
            .stdout(Stdio::null()));
        run(Command::new("chown").arg("-R").arg("mysql:mysql").arg(&dir));
        let mut m = PrivateMariadb {
            proc: ServerProcess::new(dir),
            port,
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        m.launch();
        m
    }

    /// Starts (again) the server process. A process that exits before it accepts connections
    /// (e.g. on a loaded machine, the previous one's files not yet free) is started again, for up
    /// to two minutes; the panic then shows the end of the server's own log.
    pub fn launch(&mut self) {
        let addr = format!("127.0.0.1:{}", self.port);
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.spawn();
            while std::net::TcpStream::connect(&addr).is_err() {
                if self.proc.exited() || Instant::now() >= deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if std::net::TcpStream::connect(&addr).is_ok() {
                return;
            }
            let log = std::fs::read_to_string(self.proc.dir.join("mariadbd.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            assert!(
                Instant::now() < deadline,
                "private MariaDB at {addr} did not come up within 2 minutes; its log ends:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    fn spawn(&mut self) {
        let log = std::fs::File::create(self.proc.dir.join("mariadbd.log")).expect("mariadbd.log");
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
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::from(log))
            .spawn()
            .expect("mariadbd");
        self.proc.running(child);
    }

    /// Stops the server gracefully.
    pub fn stop(&mut self) {
        self.proc.terminate();
    }

    /// A URL as `root` (no password) to database `mysql`.
    pub fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}/mysql", self.port)
    }
}

/// A database of its own on the shared MySQL/MariaDB server (random name, dropped on drop), for
/// tests that count or lock rows other test binaries' purges might touch.
#[cfg(feature = "mysql")]
pub struct MysqlDatabase {
    /// The URL of the database (the shared server's URL with its path replaced).
    pub url: String,
    name: String,
    admin: mysql::Conn,
}

#[cfg(feature = "mysql")]
impl MysqlDatabase {
    /// Creates the database on the server of `Dialect::Mysql.url()`.
    pub fn create() -> MysqlDatabase {
        use mysql::prelude::Queryable;
        let base = Dialect::Mysql.url();
        let addr = base.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
        super::require_tcp(Dialect::Mysql.server(), &addr);
        let name = format!("simba_it_{:012x}", rand::random::<u64>() >> 16);
        let mut admin = mysql::Conn::new(mysql::Opts::from_url(&base).unwrap()).unwrap();
        admin.query_drop(format!("CREATE DATABASE {name}")).unwrap();
        let mut u = url::Url::parse(&base).unwrap();
        u.set_path(&format!("/{name}"));
        MysqlDatabase { url: u.to_string(), name, admin }
    }

    /// A raw connection to the database.
    pub fn connect(&self) -> mysql::Conn {
        mysql::Conn::new(mysql::Opts::from_url(&self.url).unwrap()).unwrap()
    }
}

#[cfg(feature = "mysql")]
impl Drop for MysqlDatabase {
    fn drop(&mut self) {
        use mysql::prelude::Queryable;
        let _ = self.admin.query_drop(format!("DROP DATABASE {}", self.name));
    }
}
