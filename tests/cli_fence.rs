//! `simba fence check RESOURCE TOKEN` and `simba schema print --fence` against real PostgreSQL,
//! MariaDB/MySQL, Redis and Redis Cluster fences: the exit code says accepted (0) or stale (1);
//! bad input is 78, an unreachable or failing database 69.

mod support;

use std::process::{Output, Stdio};

use serde_json::Value;
use serial_test::serial;
use support::cli::{clean_command, code, stderr, stdout};

const BIN: &str = env!("CARGO_BIN_EXE_simba");

/// A `simba` command with a clean `SIMBA_*` environment.
fn simba(url: Option<&str>, args: &[&str]) -> Output {
    let mut c = clean_command(BIN);
    c.env("SIMBA_QUERY_TIMEOUT", "3s");
    if let Some(u) = url {
        c.env("SIMBA_URL", u);
    }
    c.args(args).stdin(Stdio::null()).output().expect("run simba")
}

fn json(o: &Output) -> Value {
    let out = stdout(o);
    let line = out.lines().last().unwrap_or_else(|| panic!("no stdout; stderr: {}", stderr(o)));
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

fn urls() -> Vec<(&'static str, String)> {
    vec![
        ("postgres", support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test")),
        ("mysql", support::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test")),
        ("redis", support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379")),
        (
            "redis-cluster",
            support::env_or(
                "SIMBA_TEST_REDIS_CLUSTER_URL",
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
            ),
        ),
    ]
}

/// Makes sure the SQL fences have their table (what an operator does once).
fn init_tables() {
    let pg_url = &urls()[0].1;
    let mut pg = postgres::Client::connect(pg_url, postgres::NoTls)
        .unwrap_or_else(|e| panic!("PostgreSQL at {pg_url}: {e} (run `scripts/services up`)"));
    simba::fence::postgres::init(&mut pg).unwrap();
    let my_url = &urls()[1].1;
    let mut my = mysql::Opts::from_url(my_url)
        .map_err(mysql::Error::from)
        .and_then(mysql::Conn::new)
        .unwrap_or_else(|e| panic!("MySQL at {my_url}: {e} (run `scripts/services up`)"));
    simba::fence::mysql::init(&mut my).unwrap();
}

#[test]
#[serial(cli_fence)]
fn exit_code_says_accepted_or_stale() {
    init_tables();
    for (kind, url) in urls() {
        let r = support::unique("cli-fence");
        let check = |token: &str| simba(Some(&url), &["fence", "check", &r, token]);
        let o = check("5");
        assert_eq!(code(&o), 0, "{kind}: first token: {}", stderr(&o));
        assert!(stdout(&o).contains("accepted token 5"), "{kind}: {}", stdout(&o));
        let o = check("5");
        assert_eq!(code(&o), 0, "{kind}: the same term again: {}", stderr(&o));
        let o = check("4");
        assert_eq!(code(&o), 1, "{kind}: a smaller token: {}", stderr(&o));
        assert!(
            stderr(&o).contains("stale token 4") && stderr(&o).contains("accepted token 5"),
            "{kind}: {}",
            stderr(&o)
        );
        let o = simba(Some(&url), &["--json", "fence", "check", &r, "3"]);
        assert_eq!(code(&o), 1, "{kind}");
        let v = json(&o);
        assert_eq!(
            (v["outcome"].as_str(), v["seen"].as_u64(), v["exit_code"].as_u64()),
            (Some("stale"), Some(5), Some(1))
        );
        let o = simba(Some(&url), &["--json", "fence", "check", &r, "6"]);
        assert_eq!(code(&o), 0, "{kind}: a new term: {}", stderr(&o));
        assert_eq!(json(&o)["outcome"], "accepted");
        assert_eq!(code(&check("5")), 1, "{kind}: the old term after the new one");
    }
}

#[test]
#[serial(cli_fence)]
fn bad_input_is_a_configuration_error() {
    let url = urls()[2].1.clone();
    for (args, needle) in [
        (vec!["fence", "check", "r", "0"], "integer >= 1"),
        (vec!["fence", "check", "r", "x7"], "integer >= 1"),
        (vec!["fence", "check", "a b", "7"], "[A-Za-z0-9._:-]"),
    ] {
        let o = simba(Some(&url), &args);
        assert_eq!(code(&o), 78, "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(needle), "{args:?}: {}", stderr(&o));
    }
    let o = simba(Some("memory://"), &["fence", "check", "r", "7"]);
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    assert!(stderr(&o).contains("postgres://, mysql://, redis://"), "{}", stderr(&o));
    let o = simba(Some("zookeeper://127.0.0.1:2181/x"), &["fence", "check", "r", "7"]);
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    let o = simba(None, &["fence", "check", "r"]);
    assert_eq!(code(&o), 2, "usage: {}", stderr(&o));
}

#[test]
#[serial(cli_fence)]
fn unreachable_or_failing_database_is_69() {
    let o = simba(Some("redis://127.0.0.1:1"), &["fence", "check", "r", "7"]);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    // No simba_fence table on the search path: the server's words and the fix.
    let url = format!("{}?options=-c%20search_path%3Dsimba_no_such_schema", urls()[0].1);
    let o = simba(Some(&url), &["fence", "check", "r", "7"]);
    assert_eq!(code(&o), 69, "{}", stderr(&o));
    assert!(stderr(&o).contains("\"simba_fence\" does not exist"), "{}", stderr(&o));
    assert!(stderr(&o).contains("simba schema print --fence"), "{}", stderr(&o));
}

#[test]
#[serial(cli_fence)]
fn schema_print_fence_prints_the_embedded_table() {
    let o = simba(None, &["schema", "print", "--fence", "--dialect", "postgres"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(stdout(&o).trim_end(), simba::fence::postgres::INIT_SQL.trim_end());
    let o = simba(Some(&urls()[1].1), &["--json", "schema", "print", "--fence"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json(&o)["sql"], simba::fence::mysql::INIT_SQL);
    let o = simba(Some(&urls()[2].1), &["schema", "print", "--fence"]);
    assert_eq!(code(&o), 78, "{}", stderr(&o));
    assert!(stderr(&o).contains("--dialect"), "{}", stderr(&o));
}

/// The shell pattern: `simba lock` exports SIMBA_TOKEN, the command checks it at the fence.
#[test]
#[serial(cli_fence)]
fn lock_then_fence_check_in_the_command() {
    let url = urls()[2].1.clone();
    let r = support::unique("cli-fence");
    let script = format!("\"{BIN}\" fence check {r} \"$SIMBA_TOKEN\"");
    let o = simba(Some(&url), &["lock", &r, "--", "sh", "-c", &script]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("accepted token"), "{}", stdout(&o));
    // A later term's token is larger: the first one is now stale.
    let o = simba(Some(&url), &["lock", &r, "--", "sh", "-c", &script]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(code(&simba(Some(&url), &["fence", "check", &r, "1"])), 1);
}
