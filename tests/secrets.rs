//! Secrets stay secret (issue 15, item 4): passwords, client keys and ZooKeeper digest/SASL
//! secrets never appear in `Debug`, `Display`, logs, error messages, `simba check`, `simba --help`
//! or the CLI's error output — for every backend.
//!
//! Every test plants one distinctive secret and collects everything a user could see: the
//! `Debug` of the builder, the `Config`, the backend options, the backend and the session, the
//! `Display`/`Debug` and source chain of the errors of bad URLs and of connection failures against
//! the real servers (a wrong password where the shared server checks one, a closed port where it
//! does not), the backend's `check()` items, every log record (a capturing `log::Log`), and the
//! stdout/stderr of the built `simba` binary. No shared server is changed: a wrong password only
//! fails a login, and ZooKeeper nodes are made under a random root with an open ACL.
//!
//! Real servers are needed (`scripts/services up`); the tests fail when one is down.

mod support;

use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use serial_test::serial;
use simba::backend::LeaseBackend;
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::backends::sql::{SqlBackend, SqlOptions};
use simba::backends::zookeeper::{ZookeeperAuth, ZookeeperBackend, ZookeeperOptions, ZookeeperSasl};
use simba::{display_chain, Config, ConfigBuilder, Error, Session, SessionOptions};

/// The planted secret. Distinctive, URL-safe (so its percent-encoding is itself).
const SECRET: &str = "Zq7pW9xK4mVs";
/// A secret with characters that must be percent-encoded in a URL (`@`, `:`, `/`, space), and
/// its encoded form.
const SPECIAL: &str = "Yt3@r:9/ k";
const SPECIAL_ENCODED: &str = "Yt3%40r%3A9%2F%20k";

const BIN: &str = env!("CARGO_BIN_EXE_simba");

// ---------------------------------------------------------------- collecting what a user sees

/// Everything logged in this process (every level, every target).
struct Capture(Mutex<Vec<String>>);

impl log::Log for Capture {
    fn enabled(&self, _: &log::Metadata<'_>) -> bool {
        true
    }
    fn log(&self, r: &log::Record<'_>) {
        if let Ok(mut v) = self.0.lock() {
            v.push(format!("{} {}: {}", r.level(), r.target(), r.args()));
        }
    }
    fn flush(&self) {}
}

fn capture() -> &'static Capture {
    static CAPTURE: OnceLock<&'static Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c: &'static Capture = Box::leak(Box::new(Capture(Mutex::new(Vec::new()))));
        log::set_logger(c).expect("the only logger of this test binary");
        log::set_max_level(log::LevelFilter::Trace);
        c
    })
}

/// What one test saw, labelled; checked at once by [`Seen::assert_clean`]. The log records
/// counted are those logged since the `Seen` was made (the tests run serially).
struct Seen {
    texts: Vec<(String, String)>,
    /// Where this test's log records start.
    log_mark: usize,
    /// Sessions opened on a real server (the tests assert the connected paths ran).
    sessions: usize,
}

impl Seen {
    fn new() -> Seen {
        let log_mark = capture().0.lock().map(|v| v.len()).unwrap_or_default();
        Seen { texts: Vec::new(), log_mark, sessions: 0 }
    }

    fn add(&mut self, what: impl Into<String>, text: impl Into<String>) {
        self.texts.push((what.into(), text.into()));
    }

    fn debug(&mut self, what: &str, v: &impl std::fmt::Debug) {
        self.add(format!("{what} (Debug)"), format!("{v:?}"));
        self.add(format!("{what} (alternate Debug)"), format!("{v:#?}"));
    }

    fn error(&mut self, what: &str, e: &Error) {
        self.add(format!("{what} (Display)"), e.to_string());
        self.add(format!("{what} (chain)"), display_chain(e));
        self.debug(what, e);
    }

    fn result<T: std::fmt::Debug>(&mut self, what: &str, r: &simba::Result<T>) {
        match r {
            Ok(v) => self.debug(what, v),
            Err(e) => self.error(what, e),
        }
    }

    fn backend(&mut self, what: &str, b: &Arc<dyn LeaseBackend>) {
        self.debug(what, b);
        for item in b.check() {
            self.add(format!("{what} check {}", item.name), format!("{item:?} {}", item.detail));
        }
    }

    fn output(&mut self, what: &str, o: &Output) {
        self.add(format!("{what} stdout"), String::from_utf8_lossy(&o.stdout));
        self.add(format!("{what} stderr"), String::from_utf8_lossy(&o.stderr));
    }

    /// Fails naming every text that contains a secret, after adding this process's log.
    fn assert_clean(mut self) {
        let log = capture().0.lock().map(|v| v[self.log_mark.min(v.len())..].join("\n")).unwrap_or_default();
        self.add("log records", log);
        let forms = [SECRET, SPECIAL, SPECIAL_ENCODED, "Yt3@r", "Yt3%40r"];
        let leaks: Vec<String> = self
            .texts
            .iter()
            .filter(|(_, text)| forms.iter().any(|s| text.contains(s)))
            .map(|(what, text)| format!("{what}: {text}"))
            .collect();
        assert!(leaks.is_empty(), "a secret was shown in {} place(s):\n{}", leaks.len(), leaks.join("\n---\n"));
        assert!(self.texts.len() > 2, "nothing was collected");
    }
}

fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
}

/// A configuration from `SIMBA_*` pairs, with short timeouts; its builder's and its own `Debug`
/// go into `seen`.
fn config(seen: &mut Seen, pairs: &[(&str, &str)]) -> simba::Result<Config> {
    let b = ConfigBuilder::from_vars(vars(pairs)).map(|b| b.query_timeout(Duration::from_secs(1)));
    seen.result("ConfigBuilder", &b);
    let c = b.and_then(ConfigBuilder::build);
    seen.result("Config", &c);
    c
}

/// Connects `config`; on success opens a session, takes a lock and closes it, collecting the
/// `Debug` of the backend, its check items, the session and the lease.
fn exercise(seen: &mut Seen, what: &str, c: &Config) {
    let b = c.connect();
    seen.result(&format!("{what} connect"), &b);
    let Ok(b) = b else { return };
    seen.backend(what, &b);
    let s = Session::open(b.clone(), c.session_options());
    seen.result(&format!("{what} session"), &s);
    let Ok(s) = s else { return };
    seen.sessions += 1;
    let lease = s.lock(support::unique("secrets").as_str());
    seen.result(&format!("{what} lease"), &lease);
    if let Ok(l) = lease {
        seen.result(&format!("{what} release"), &l.release());
    }
    seen.result(&format!("{what} close"), &s.close());
}

/// Runs `url` through `Config` (built and, when it builds, exercised) and through `direct` (the
/// backend's own constructors).
fn try_url(seen: &mut Seen, what: &str, url: &str, direct: &dyn Fn(&mut Seen, &str)) {
    if let Ok(c) = config(seen, &[("SIMBA_URL", url)]) {
        exercise(seen, what, &c);
    }
    direct(seen, url);
}

/// Creates the schema with `backend` (a login that needs no secret), or fails saying where.
fn init_schema(backend: simba::Result<SqlBackend>, server: &str) {
    if let Err(e) = backend.and_then(|b| b.init_schema()) {
        panic!("cannot create the schema on {server}: {e} (run `scripts/services up`)");
    }
}

fn url_of(var: &str, default: &str) -> String {
    support::env_or(var, default)
}

/// `url` with `user:password@` put in front of its hosts.
fn with_userinfo(url: &str, userinfo: &str) -> String {
    let (scheme, rest) = url.split_once("://").expect("test URL with scheme");
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    format!("{scheme}://{userinfo}@{rest}")
}

fn first_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
    rest.split(['/', '?', ',']).next().unwrap_or_default().to_string()
}

// ---------------------------------------------------------------- the library, per backend

#[test]
#[serial(secrets)]
fn postgres_secrets_stay_secret() {
    let base = url_of("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
    support::require_tcp("PostgreSQL", &first_host(&base));
    // The sessions below need the schema on both servers; no other test may be relied on to
    // have created it (this test failed alone against a fresh server).
    support::sql::shared_backend(support::sql::Dialect::Postgres);
    let tls_dir = support::tls::dir();
    // As the TLS tests' own user (client certificate), never as `postgres`: tables a superuser
    // created there would belong to it, and the certificate user's `init_schema` in
    // tests/postgres_tls.rs would then fail ("must be owner of table simba_session") whenever
    // this test ran first on a fresh server.
    let tls_client = url_of(
        "SIMBA_TEST_POSTGRES_TLS_URL",
        &format!(
            "postgres://simba-test-client@127.0.0.1:5433/test?sslmode=verify-full&sslrootcert={tls_dir}/ca.pem\
             &sslcert={tls_dir}/client.pem&sslkey={tls_dir}/client.key"
        ),
    );
    init_schema(SqlBackend::postgres(&tls_client, SqlOptions::default()), "the TLS-only PostgreSQL");
    let mut seen = Seen::new();
    // The shared server trusts every login: the password is sent but accepted, so this path
    // shows the backend, session and check output of a configuration holding a password.
    let user = base.split_once("://").and_then(|(_, r)| r.split_once('@')).map_or("postgres", |(u, _)| u);
    let user = user.split(':').next().unwrap_or("postgres");
    for url in
        [with_userinfo(&base, &format!("{user}:{SECRET}")), with_userinfo(&base, &format!("{user}:{SPECIAL_ENCODED}"))]
    {
        if let Ok(c) = config(&mut seen, &[("SIMBA_URL", &url)]) {
            exercise(&mut seen, "postgres", &c);
        }
    }
    let query = format!("{}?password={SECRET}&application_name=simba", base.split('?').next().unwrap_or(&base));
    if let Ok(c) = config(&mut seen, &[("SIMBA_URL", &query)]) {
        exercise(&mut seen, "postgres (password parameter)", &c);
    }
    // Over verified TLS (the TLS-only server trusts postgres too): the check's tls item and the
    // TLS errors hold no password either.
    support::require_tcp("TLS-only PostgreSQL (scripts/services up postgres-tls)", "127.0.0.1:5433");
    let tls =
        format!("postgres://postgres:{SECRET}@127.0.0.1:5433/test?sslmode=verify-full&sslrootcert={tls_dir}/ca.pem");
    if let Ok(c) = config(&mut seen, &[("SIMBA_URL", &tls)]) {
        exercise(&mut seen, "postgres (TLS)", &c);
    }
    let wrong_ca = format!(
        "postgres://postgres:{SECRET}@127.0.0.1:5433/test?sslmode=verify-full&sslrootcert={tls_dir}/other-ca.pem"
    );
    let c = config(&mut seen, &[("SIMBA_URL", &wrong_ca)]).unwrap();
    exercise(&mut seen, "postgres (TLS, wrong CA)", &c);
    let plain = format!("postgres://postgres:{SECRET}@127.0.0.1:5433/test?sslmode=disable");
    let c = config(&mut seen, &[("SIMBA_URL", &plain)]).unwrap();
    exercise(&mut seen, "postgres (plaintext against TLS only)", &c);
    // Connection failures: nothing listens on port 1.
    let c = config(&mut seen, &[("SIMBA_URL", &format!("postgres://simba:{SECRET}@127.0.0.1:1/db"))]).unwrap();
    exercise(&mut seen, "postgres (closed port)", &c);
    // Bad URLs, through Config and straight to the backend's constructor.
    for url in [
        format!("postgres://simba:{SECRET}@127.0.0.1:99999/db"),
        format!("postgres://simba:{SECRET}@h1,h2:x/db"),
        format!("postgres://simba:{SECRET}@127.0.0.1/db?connect_timeout=abc"),
        format!("postgres://simba:{SECRET}@127.0.0.1/db?sslmode=bogus"),
        format!("postgres://simba:{SECRET}@127.0.0.1/db?sslpassword={SECRET}"),
        format!("postgres://simba:{SECRET}@127.0.0.1/db?sslmode=verify-full"),
        format!("postgres://simba:{SECRET}@127.0.0.1/db?sslmode=require&sslrootcert=/nonexistent/ca.pem"),
        format!("host=127.0.0.1 user=simba password={SECRET} sslpassword='{SECRET}' dbname=db"),
        format!("postgres://simba:{SPECIAL}@127.0.0.1/db"),
        format!("host=127.0.0.1 user=simba password={SECRET} dbname"),
        format!("postgres://simba:{SECRET}@[::1/db"),
    ] {
        try_url(&mut seen, "postgres (bad URL)", &url, &|seen, url| {
            seen.result("SqlBackend::postgres", &SqlBackend::postgres(url, SqlOptions::default()));
            seen.result("SqlBackend::from_url", &SqlBackend::from_url(url, SqlOptions::default()));
        });
    }
    assert!(seen.sessions >= 3, "only {} postgres sessions were opened", seen.sessions);
    seen.assert_clean();
}

#[test]
#[serial(secrets)]
fn mysql_secrets_stay_secret() {
    let base = url_of("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
    support::require_tcp("MySQL/MariaDB", &first_host(&base));
    let mut seen = Seen::new();
    // The shared server's root has no password: a password is a failed login ("Access denied").
    for pw in [SECRET, SPECIAL_ENCODED] {
        let url = with_userinfo(&base, &format!("root:{pw}"));
        let c = config(&mut seen, &[("SIMBA_URL", &url)]).unwrap();
        exercise(&mut seen, "mysql (wrong password)", &c);
        let short = SqlOptions::builder().query_timeout(Duration::from_millis(500)).build().unwrap();
        let b = SqlBackend::mysql(&url, short).unwrap();
        seen.debug("SqlBackend::mysql", &b);
        seen.result("mysql open_session", &b.open_session(Duration::from_secs(2), "m"));
        seen.result("mysql init_schema", &b.init_schema());
        for item in b.check() {
            seen.add("mysql check", format!("{item:?}"));
        }
    }
    let c = config(&mut seen, &[("SIMBA_URL", &format!("mysql://simba:{SECRET}@127.0.0.1:1/db"))]).unwrap();
    exercise(&mut seen, "mysql (closed port)", &c);
    for url in [
        format!("mysql://simba:{SECRET}@127.0.0.1:99999/db"),
        format!("mysql://simba:{SECRET}@h1,h2/db"),
        format!("mysql://simba:{SECRET}@127.0.0.1/db?prefer_socket=maybe"),
        format!("mysql://simba:{SPECIAL}@127.0.0.1/db"),
        format!("mariadb://simba:{SECRET}@[::1/db"),
    ] {
        try_url(&mut seen, "mysql (bad URL)", &url, &|seen, url| {
            seen.result("SqlBackend::mysql", &SqlBackend::mysql(url, SqlOptions::default()));
            seen.result("SqlBackend::from_url", &SqlBackend::from_url(url, SqlOptions::default()));
        });
    }
    mysql_tls_secrets(&mut seen);
    seen.assert_clean();
}

/// The TLS-only MariaDB (`scripts/services up mysql-tls`): a password login over TLS (a throwaway
/// user whose password is the secret), a wrong password over TLS, the application's own
/// `mysql::Opts` with a password, and a client key file whose content is the secret.
fn mysql_tls_secrets(seen: &mut Seen) {
    use mysql::prelude::Queryable;
    use simba::backends::sql::MysqlConfig;
    let dir = support::tls::dir();
    support::require_tcp("TLS-only MariaDB (scripts/services up mysql-tls)", "127.0.0.1:3307");
    let ca = format!("{dir}/ca.pem");
    let ssl = mysql::SslOpts::default().with_root_cert_path(Some(std::path::PathBuf::from(&ca)));
    let opts = |user: &str, pass: &str| {
        mysql::OptsBuilder::new()
            .ip_or_hostname(Some("127.0.0.1"))
            .tcp_port(3307)
            .user(Some(user))
            .pass(Some(pass))
            .db_name(Some("test"))
            .ssl_opts(ssl.clone())
    };
    let user = format!("simba_secret_{:08x}", rand::random::<u32>());
    init_schema(SqlBackend::mysql_opts(opts("root", ""), SqlOptions::default()), "the TLS-only MariaDB");
    let mut admin = mysql::Conn::new(opts("root", "")).expect("root over TLS on the TLS-only MariaDB");
    admin.query_drop(format!("CREATE USER '{user}'@'127.0.0.1' IDENTIFIED BY '{SECRET}'")).unwrap();
    admin.query_drop(format!("GRANT ALL PRIVILEGES ON test.* TO '{user}'@'127.0.0.1'")).unwrap();
    let tls = format!("ssl-mode=VERIFY_IDENTITY&ssl-ca={ca}");
    let before = seen.sessions;
    for (what, url) in [
        ("mysql TLS", format!("mysql://{user}:{SECRET}@127.0.0.1:3307/test?{tls}")),
        ("mysql TLS (wrong password)", format!("mysql://root:{SECRET}@127.0.0.1:3307/test?{tls}")),
    ] {
        let c = config(seen, &[("SIMBA_URL", &url)]).unwrap();
        exercise(seen, what, &c);
    }
    for (user, what) in [(user.as_str(), "mysql_opts"), ("root", "mysql_opts (wrong password)")] {
        seen.debug("MysqlConfig::from_opts", &MysqlConfig::from_opts(opts(user, SECRET)));
        let short = SqlOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
        let b: Arc<dyn LeaseBackend> = Arc::new(SqlBackend::mysql_opts(opts(user, SECRET), short).unwrap());
        seen.backend(what, &b);
        let s = Session::open(b, SessionOptions::default());
        seen.result(&format!("{what} session"), &s);
        if let Ok(s) = s {
            seen.sessions += 1;
            seen.result(&format!("{what} close"), &s.close());
        }
    }
    assert!(seen.sessions >= before + 2, "the password logins over TLS did not open sessions");
    // A client key file holding the secret, and bad TLS parameters beside a password.
    let tmp = std::env::temp_dir().join(support::unique("simba-secrets-mysql"));
    std::fs::create_dir_all(&tmp).unwrap();
    let key = tmp.join("client.key");
    std::fs::write(&key, format!("-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n")).unwrap();
    let key = key.display();
    for url in [
        format!("mysql://{user}@127.0.0.1:3307/test?{tls}&ssl-cert={dir}/client.pem&ssl-key={key}"),
        format!("mysql://{user}@127.0.0.1:3307/test?ssl-mode=VERIFY_CA&ssl-ca={key}"),
        format!("mysql://{user}:{SECRET}@127.0.0.1:3307/test?ssl-mode=bogus"),
        format!("mysql://{user}:{SECRET}@127.0.0.1:3307/test?require_ssl=true"),
        format!("mysql://{user}:{SECRET}@127.0.0.1:3307/test?ssl-mode=REQUIRED&ssl-ca={ca}"),
    ] {
        try_url(seen, "mysql TLS (bad settings)", &url, &|seen, url| {
            seen.result("SqlBackend::mysql", &SqlBackend::mysql(url, SqlOptions::default()));
            seen.result("MysqlConfig::from_url", &MysqlConfig::from_url(url));
        });
    }
    std::fs::remove_dir_all(&tmp).ok();
    admin.query_drop(format!("DROP USER '{user}'@'127.0.0.1'")).unwrap();
}

#[test]
#[serial(secrets)]
fn redis_secrets_stay_secret() {
    let base = url_of("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    support::require_tcp("Redis", &first_host(&base));
    let mut seen = Seen::new();
    // `default` has no password on the shared server: any password is accepted (AUTH default x
    // is OK), so this path shows the backend and session; an unknown user is WRONGPASS.
    for userinfo in [
        format!("default:{SECRET}"),
        format!(":{SECRET}"),
        format!("simba-no-such-user:{SECRET}"),
        format!("simba-no-such-user:{SPECIAL_ENCODED}"),
    ] {
        try_url(&mut seen, "redis", &with_userinfo(&base, &userinfo), &|seen, url| {
            seen.result("RedisBackend::connect", &RedisBackend::connect(url, RedisOptions::default()))
        });
    }
    let c = config(&mut seen, &[("SIMBA_URL", &format!("redis://u:{SECRET}@127.0.0.1:1"))]).unwrap();
    exercise(&mut seen, "redis (closed port)", &c);
    for url in [
        format!("redis://u:{SECRET}@127.0.0.1:99999"),
        format!("redis://u:{SECRET}@h1:1,h2:2"),
        format!("redis://u:{SECRET}@127.0.0.1/notanumber"),
        format!("redis://u:{SPECIAL}@127.0.0.1"),
        format!("rediss://u:{SECRET}@127.0.0.1"),
        format!("redis://u:{SECRET}@[::1"),
        format!("redis:u:{SECRET}@h"),
    ] {
        try_url(&mut seen, "redis (bad URL)", &url, &|seen, url| {
            seen.result("RedisBackend::connect", &RedisBackend::connect(url, RedisOptions::default()))
        });
    }
    assert!(seen.sessions >= 1, "only {} redis sessions were opened", seen.sessions);
    seen.assert_clean();
}

#[test]
#[serial(secrets)]
fn redis_cluster_secrets_stay_secret() {
    let base = url_of("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    support::require_tcp("Redis Cluster", &first_host(&base));
    let mut seen = Seen::new();
    for userinfo in [format!("default:{SECRET}"), format!("simba-no-such-user:{SECRET}")] {
        let url = with_userinfo(&base, &userinfo);
        if let Ok(c) = config(&mut seen, &[("SIMBA_URL", &url)]) {
            exercise(&mut seen, "redis cluster", &c);
        }
        let hosts = url.split_once('@').map_or("", |(_, h)| h);
        let nodes: Vec<String> = hosts.split(',').map(|h| format!("redis://{userinfo}@{h}")).collect();
        seen.result("RedisBackend::clustered", &RedisBackend::clustered(&nodes, RedisOptions::default()));
    }
    let c = config(&mut seen, &[("SIMBA_URL", &format!("redis+cluster://u:{SECRET}@127.0.0.1:1,127.0.0.1:2"))]);
    if let Ok(c) = c {
        exercise(&mut seen, "redis cluster (closed ports)", &c);
    }
    for url in [
        format!("redis+cluster://u:{SECRET}@h1:99999,h2:1"),
        format!("redis+cluster://u:{SECRET}@h1:1/0"),
        format!("redis+cluster://u:{SECRET}@h1:1?x=1"),
        format!("rediss+cluster://u:{SECRET}@h1:1"),
    ] {
        try_url(&mut seen, "cluster (bad URL)", &url, &|_, _| {});
    }
    seen.result(
        "RedisBackend::clustered (bad node)",
        &RedisBackend::clustered(&[format!("redis://u:{SECRET}@[::1")], RedisOptions::default()),
    );
    assert!(seen.sessions >= 1, "only {} redis cluster sessions were opened", seen.sessions);
    seen.assert_clean();
}

#[test]
#[serial(secrets)]
fn zookeeper_secrets_stay_secret() {
    let base = url_of("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    let host = first_host(&base);
    support::require_tcp("ZooKeeper", &host);
    let mut seen = Seen::new();
    let root = format!("/{}", support::unique("simba-secrets"));
    let url = format!("zookeeper://{host}{root}");
    let auth = format!("digest:simba:{SECRET}");
    let sasl = format!("simba:{SECRET}");
    // Digest auth is accepted by any server (it only sets the identity); the ACL stays open so
    // that nothing this test leaves behind is locked away from others.
    let cases: Vec<Vec<(&str, &str)>> = vec![
        vec![("SIMBA_URL", &url), ("SIMBA_ZOOKEEPER_AUTH", &auth), ("SIMBA_ZOOKEEPER_ACL", "open")],
        vec![("SIMBA_URL", &url), ("SIMBA_ZOOKEEPER_AUTH", "digest:simba:Yt3@r:9/ k"), ("SIMBA_ZOOKEEPER_ACL", "open")],
        vec![("SIMBA_URL", &url), ("SIMBA_ZOOKEEPER_SASL", &sasl), ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "3s")],
    ];
    for pairs in &cases {
        if let Ok(c) = config(&mut seen, pairs) {
            exercise(&mut seen, "zookeeper", &c);
        }
    }
    let in_url = format!("zookeeper://simba:{SECRET}@{host}{root}");
    if let Ok(c) = config(&mut seen, &[("SIMBA_URL", &in_url), ("SIMBA_ZOOKEEPER_ACL", "open")]) {
        exercise(&mut seen, "zookeeper (URL auth)", &c);
    }
    // The backend's own option types.
    let opts = ZookeeperOptions::default()
        .root(root.clone())
        .auth(ZookeeperAuth::new("digest", format!("simba:{SECRET}").into_bytes()).unwrap())
        .sasl(ZookeeperSasl::digest_md5("simba", SECRET).unwrap());
    seen.debug("ZookeeperOptions", &opts);
    seen.result("ZookeeperAuth::parse", &ZookeeperAuth::parse(&auth));
    seen.result("ZookeeperAuth::parse (bad)", &ZookeeperAuth::parse(&format!("bad scheme!:{SECRET}")));
    seen.result("ZookeeperAuth::new (bad)", &ZookeeperAuth::new("", SECRET.as_bytes().to_vec()));
    seen.result(
        "ZookeeperBackend::connect (closed port)",
        &ZookeeperBackend::connect("127.0.0.1:1", opts.clone().connection_timeout(Duration::from_secs(1))),
    );
    // The backend's own URL parser and connect string (user info is not supported there).
    let short = opts.clone().connection_timeout(Duration::from_secs(1));
    seen.result("ZookeeperBackend::from_url (user info)", &ZookeeperBackend::from_url(&in_url, short.clone()));
    seen.result(
        "ZookeeperBackend::connect (user info)",
        &ZookeeperBackend::connect(&format!("simba:{SECRET}@{host}"), short.clone()),
    );
    seen.result(
        "ZookeeperBackend::from_url (no scheme)",
        &ZookeeperBackend::from_url(&format!("zk:u:{SECRET}@h"), short),
    );
    // TLS files that hold a secret but are no valid PEM: the errors name the files, never
    // their content.
    let dir = std::env::temp_dir().join(support::unique("simba-secrets-tls"));
    std::fs::create_dir_all(&dir).unwrap();
    let pem = format!("-----BEGIN PRIVATE KEY-----\n{SECRET}\n-----END PRIVATE KEY-----\n");
    let files: Vec<String> = ["ca.pem", "cert.pem", "key.pem"]
        .iter()
        .map(|f| {
            let p = dir.join(f);
            std::fs::write(&p, &pem).unwrap();
            p.display().to_string()
        })
        .collect();
    let _ = config(
        &mut seen,
        &[
            ("SIMBA_URL", &url),
            ("SIMBA_ZOOKEEPER_TLS_CA", &files[0]),
            ("SIMBA_ZOOKEEPER_TLS_CERT", &files[1]),
            ("SIMBA_ZOOKEEPER_TLS_KEY", &files[2]),
        ],
    )
    .map(|c| exercise(&mut seen, "zookeeper (bad TLS files)", &c));
    let _ = std::fs::remove_dir_all(&dir);
    // Bad values of the secret-bearing settings, and bad URLs.
    for pairs in [
        vec![("SIMBA_URL", url.as_str()), ("SIMBA_ZOOKEEPER_AUTH", "digest")],
        vec![("SIMBA_URL", url.as_str()), ("SIMBA_ZOOKEEPER_AUTH", "digest:Zq7pW9xK4mVs")],
        vec![("SIMBA_URL", url.as_str()), ("SIMBA_ZOOKEEPER_AUTH", "b@d:Zq7pW9xK4mVs")],
        // Only a password, without `scheme:` (a likely mistake): it must not be shown as a scheme.
        vec![("SIMBA_URL", url.as_str()), ("SIMBA_ZOOKEEPER_AUTH", "Yt3@r/9 k")],
        vec![("SIMBA_URL", url.as_str()), ("SIMBA_ZOOKEEPER_SASL", "Zq7pW9xK4mVs")],
        vec![("SIMBA_URL", url.as_str()), ("SIMBA_ZOOKEEPER_SASL", ":Zq7pW9xK4mVs")],
        vec![("SIMBA_URL", &in_url), ("SIMBA_ZOOKEEPER_AUTH", &auth)],
        vec![("SIMBA_URL", "zookeeper://:Zq7pW9xK4mVs@h:2181/x")],
        vec![("SIMBA_URL", "zookeeper://u:Zq7pW9xK4mVs@h:99999/x")],
        vec![("SIMBA_URL", "zookeeper://u:Zq7pW9xK4mVs@h:2181/x?a=b")],
        vec![("SIMBA_URL", "zookeeper://u:Zq7pW9xK4mVs@h:2181/zookeeper")],
        vec![("SIMBA_URL", "memory://u:Zq7pW9xK4mVs@h"), ("SIMBA_ZOOKEEPER_SASL", &sasl)],
        vec![("SIMBA_ZOOKEEPER_SASL", &sasl), ("SIMBA_REDIS_EVICTION", "warn")],
        vec![("SIMBA_URL", "redis://h:1"), ("SIMBA_BACKEND", "zookeeper"), ("SIMBA_ZOOKEEPER_AUTH", &auth)],
    ] {
        let _ = config(&mut seen, &pairs);
    }
    assert!(seen.sessions >= 3, "only {} zookeeper sessions were opened", seen.sessions);
    seen.assert_clean();
}

#[test]
#[serial(secrets)]
fn config_secrets_stay_secret_for_every_setting() {
    let mut seen = Seen::new();
    // Settings of a backend that is not chosen are ignored with a warning: the warning names
    // the setting, never its value.
    let auth = format!("digest:simba:{SECRET}");
    let sasl = format!("simba:{SECRET}");
    let c = config(
        &mut seen,
        &[("SIMBA_URL", "memory://"), ("SIMBA_ZOOKEEPER_AUTH", &auth), ("SIMBA_ZOOKEEPER_SASL", &sasl)],
    )
    .unwrap();
    seen.add("warnings", c.warnings().join("\n"));
    c.log_warnings();
    // The builder in code, before and after build().
    let b = Config::builder()
        .url(format!("redis://u:{SECRET}@h:6379"))
        .zookeeper_auth("digest", format!("u:{SECRET}"))
        .zookeeper_sasl("u", SECRET);
    seen.debug("ConfigBuilder (code)", &b);
    seen.result("ConfigBuilder::build (code)", &b.build());
    // Every accessor that returns text.
    let c = Config::from_url(&format!("postgres://u:{SECRET}@h/db?password={SECRET}&sslmode=require")).unwrap();
    seen.add("accessors", format!("{:?} {:?} {:?}", c.redacted_url(), c.hosts(), c.database()));
    seen.add("redact_url", simba::config::redact_url(&format!("mysql://u:{SPECIAL}@h/db")));
    seen.add("redact_url (no scheme)", simba::config::redact_url(&format!("u:{SECRET}@h")));
    seen.add("redact_url (key=value)", simba::config::redact_url(&format!("host=h password={SECRET} user=u")));
    seen.assert_clean();
}

// ---------------------------------------------------------------- the CLI

/// A `simba` command with a clean `SIMBA_*` environment and every log level on stderr.
fn simba() -> Command {
    let mut c = Command::new(BIN);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("SIMBA_") {
            c.env_remove(k);
        }
    }
    c.env("RUST_LOG", "trace").env("SIMBA_QUERY_TIMEOUT", "2s").stdin(Stdio::null());
    c
}

#[test]
#[serial(secrets)]
fn cli_never_shows_secrets() {
    let mut seen = Seen::new();
    let pg = with_userinfo(
        &url_of("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"),
        &format!("postgres:{SECRET}"),
    );
    let my =
        with_userinfo(&url_of("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"), &format!("root:{SECRET}"));
    let rd = with_userinfo(&url_of("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379"), &format!("default:{SECRET}"));
    let cl = with_userinfo(
        &url_of("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002"),
        &format!("default:{SECRET}"),
    );
    let zk_host = first_host(&url_of("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test"));
    let zk = format!("zookeeper://{zk_host}/{}", support::unique("simba-secrets"));
    let auth = format!("digest:simba:{SECRET}");
    let sasl = format!("simba:{SECRET}");
    for (what, url, extra) in [
        ("postgres", pg.as_str(), vec![]),
        ("mysql (wrong password)", my.as_str(), vec![]),
        ("redis", rd.as_str(), vec![]),
        ("redis cluster", cl.as_str(), vec![]),
        (
            "zookeeper digest",
            zk.as_str(),
            vec![("SIMBA_ZOOKEEPER_AUTH", auth.as_str()), ("SIMBA_ZOOKEEPER_ACL", "open")],
        ),
        (
            "zookeeper sasl",
            zk.as_str(),
            vec![("SIMBA_ZOOKEEPER_SASL", sasl.as_str()), ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "3s")],
        ),
    ] {
        for json in [false, true] {
            // The URL as an argument, and in the environment.
            let mut c = simba();
            c.args(["--url", url, "check"]).envs(extra.clone());
            if json {
                c.arg("--json");
            }
            seen.output(&format!("simba check {what} --url json={json}"), &c.output().expect("run simba"));
            let mut c = simba();
            c.arg("check").env("SIMBA_URL", url).envs(extra.clone());
            if json {
                c.arg("--json");
            }
            seen.output(&format!("simba check {what} SIMBA_URL json={json}"), &c.output().expect("run simba"));
        }
        let mut c = simba();
        c.args(["leader", "secrets-probe"]).env("SIMBA_URL", url).envs(extra.clone());
        seen.output(&format!("simba leader {what}"), &c.output().expect("run simba"));
    }
    // --help (of the binary and of every subcommand) with every secret in the environment.
    for args in [vec!["--help"], vec!["-h"], vec!["check", "--help"], vec!["lock", "--help"], vec!["fence", "--help"]] {
        let mut c = simba();
        c.args(&args).env("SIMBA_URL", &rd).env("SIMBA_ZOOKEEPER_AUTH", &auth).env("SIMBA_ZOOKEEPER_SASL", &sasl);
        let o = c.output().expect("run simba");
        assert!(String::from_utf8_lossy(&o.stdout).contains("Usage"), "{args:?}: {o:?}");
        seen.output(&format!("simba {args:?}"), &o);
    }
    // Errors: bad URLs, bad secret-bearing settings, a closed port.
    for (args, env) in [
        (vec!["--url".to_string(), format!("mysql://u:{SECRET}@h1,h2/db"), "check".into()], vec![]),
        (vec!["--url".to_string(), format!("redis://u:{SECRET}@h:99999"), "check".into()], vec![]),
        (vec!["--url".to_string(), format!("http://u:{SECRET}@h"), "check".into()], vec![]),
        (vec!["--url".to_string(), format!("redis:u:{SECRET}@h"), "check".into()], vec![]),
        (vec!["--url".to_string(), format!("redis://u:{SECRET}@127.0.0.1:1"), "check".into()], vec![]),
        (vec!["--url".to_string(), format!("postgres://u:{SECRET}@127.0.0.1:1/db"), "purge".into()], vec![]),
        (vec!["check".to_string()], vec![("SIMBA_URL", zk.clone()), ("SIMBA_ZOOKEEPER_AUTH", format!("b@d:{SECRET}"))]),
        (vec!["check".to_string()], vec![("SIMBA_URL", zk.clone()), ("SIMBA_ZOOKEEPER_SASL", SECRET.to_string())]),
        (vec!["check".to_string()], vec![("SIMBA_ZOOKEEPER_AUTH", auth.clone())]),
        (vec!["--url".to_string(), rd.clone(), "lock".into()], vec![]),
        (vec!["--url".to_string(), rd.clone(), "--no-such-flag".into()], vec![]),
    ] {
        let mut c = simba();
        c.args(&args).envs(env);
        seen.output(&format!("simba {args:?}"), &c.output().expect("run simba"));
    }
    seen.assert_clean();
}
