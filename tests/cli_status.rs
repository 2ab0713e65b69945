//! End-to-end tests of `simba status` (issue #39 item 4): what is held on a backend right now, on
//! every network backend compiled in, read by the `simba` process while this test process holds
//! a lock, a semaphore permit, a partition set and a membership through the library. Bad input is
//! exit 78 before any I/O. A server that is down fails the test with "run `scripts/services up`".

mod support;

use std::time::Duration;

use serde_json::Value;
use simba::{Config, Session};
use support::cli::{code, json_result, prepare, run, simba, stderr, stdout};

/// A bad prefix or limit is a configuration error found before any I/O (the closed port would
/// answer 69), naming what is allowed.
#[test]
fn status_bad_input_exits_78_before_any_io() {
    let closed = if cfg!(feature = "redis") {
        "redis://127.0.0.1:1"
    } else if cfg!(feature = "postgres") {
        "postgres://simba@127.0.0.1:1/simba"
    } else {
        "memory://"
    };
    let long = "p".repeat(simba::MAX_NAME_LEN + 1);
    for (args, expected) in [
        (vec!["--prefix", "jobs*"], "character '*' is not allowed"),
        (vec!["--prefix", "a b"], "character ' ' is not allowed"),
        (vec!["--prefix", long.as_str()], "names have at most 128"),
        (vec!["--limit", "0"], "--limit 0 is out of range: allowed is 1 to 10000"),
        (vec!["--limit", "10001"], "--limit 10001 is out of range"),
    ] {
        for json in [false, true] {
            let o = run({
                let mut c = simba(Some(closed));
                if json {
                    c.arg("--json");
                }
                c.args(["--query-timeout", "300ms", "status"]).args(&args);
                c
            });
            assert_eq!(code(&o), 78, "{args:?}: {}", stderr(&o));
            if json {
                assert_eq!(json_result(&o)["error"]["kind"], "config", "{}", stdout(&o));
            } else {
                assert!(stderr(&o).contains(expected), "{args:?}: expected {expected:?} in {}", stderr(&o));
            }
        }
    }
    let o = run({
        let mut c = simba(Some(closed));
        c.args(["status", "--limit", "many"]);
        c
    });
    assert_eq!(code(&o), 2, "a limit that is no number is a usage error: {}", stderr(&o));
}

/// What this process holds, as `simba status --prefix P` must show it.
struct Held {
    prefix: String,
    session: Session,
    other: Session,
    _lock: simba::Lease,
    permit: simba::semaphore::Permit,
    parts: simba::partitions::Partitions,
    _member: std::sync::Arc<simba::Membership>,
}

fn hold(url: &str) -> Held {
    prepare(url);
    let prefix = support::unique("st");
    let config = Config::from_url(url).unwrap_or_else(|e| panic!("bad test URL {url}: {e}"));
    let backend = config.connect().unwrap_or_else(|e| panic!("{url}: {e} (run `scripts/services up`)"));
    let options = |m: &str| {
        simba::SessionOptions::builder()
            .lease_duration(Duration::from_secs(10))
            .renew_interval(Duration::from_secs(2))
            .metadata(format!("{prefix} {m}"))
            .build()
            .unwrap()
    };
    let session = Session::open(backend.clone(), options("holder")).unwrap();
    let other = Session::open(backend, options("idle")).unwrap();
    let lock = session.lock(format!("{prefix}-lock")).unwrap();
    let permit = session.semaphore(format!("{prefix}-sem"), 2).unwrap().acquire().unwrap();
    let parts = session.partitions(format!("{prefix}-parts"), 3).unwrap();
    assert!(
        support::eventually(Duration::from_secs(30), || parts.owned().len() == 3),
        "the only member never owned every partition: {:?}",
        parts.owned()
    );
    let member = std::sync::Arc::new(session.join(format!("{prefix}-grp")).unwrap());
    Held { prefix, session, other, _lock: lock, permit, parts, _member: member }
}

fn status_json(url: &str, args: &[&str]) -> Value {
    let o = run({
        let mut c = simba(Some(url));
        c.args(["--json", "status"]).args(args);
        c
    });
    assert_eq!(code(&o), 0, "status {args:?}: {}", stderr(&o));
    json_result(&o)
}

/// Every lease, permit, partition, member and session this process holds is listed with its
/// holder, token and time left; another prefix shows none of it; the human table names them;
/// `--limit 1` cuts the sessions and says so.
fn status_shows_what_is_held(url: &str) {
    let h = hold(url);
    let p = h.prefix.as_str();
    let me = h.session.id().to_string();
    let v = status_json(url, &["--prefix", p]);
    let ours = |x: &Value| x["session"] == me.as_str();
    // Locks and leaders.
    let leases = v["leases"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{v}");
    assert_eq!(leases[0]["name"], format!("{p}-lock"), "{v}");
    assert!(ours(&leases[0]) && leases[0]["token"].as_u64().unwrap() >= 1, "{v}");
    let left = leases[0]["remaining_ms"].as_u64().unwrap();
    assert!(left > 0 && left <= 10_000, "time left {left} ms: {v}");
    assert_eq!(leases[0]["metadata"], format!("{p} holder"), "{v}");
    // The semaphore: its stored limit and the one permit.
    let sems = v["semaphores"].as_array().unwrap();
    assert_eq!(sems.len(), 1, "{v}");
    assert_eq!((&sems[0]["name"], &sems[0]["permits"]), (&Value::from(format!("{p}-sem")), &Value::from(2)), "{v}");
    let holders = sems[0]["holders"].as_array().unwrap();
    assert_eq!(holders.len(), 1, "{v}");
    assert_eq!(holders[0]["slot"], h.permit.slot(), "{v}");
    assert_eq!(holders[0]["token"], h.permit.granted_token().get(), "{v}");
    // The partition set: its count, every partition's owner and token, its one member.
    let sets = v["partition_sets"].as_array().unwrap();
    assert_eq!(sets.len(), 1, "{v}");
    assert_eq!(
        (&sets[0]["name"], &sets[0]["partitions"]),
        (&Value::from(format!("{p}-parts")), &Value::from(3)),
        "{v}"
    );
    let owners = sets[0]["owners"].as_array().unwrap();
    let mut owned: Vec<(u64, u64)> =
        h.parts.owned().iter().map(|x| (u64::from(x.index()), x.granted_token().get())).collect();
    owned.sort_unstable();
    let listed: Vec<(u64, u64)> = owners
        .iter()
        .inspect(|o| assert!(ours(o), "{v}"))
        .map(|o| (o["partition"].as_u64().unwrap(), o["token"].as_u64().unwrap()))
        .collect();
    assert_eq!(listed, owned, "{v}");
    assert_eq!(sets[0]["members"].as_array().unwrap().iter().filter(|m| ours(m)).count(), 1, "{v}");
    // The group, and nothing of the partition set's group among the groups.
    let groups = v["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 1, "{v}");
    assert_eq!(groups[0]["name"], format!("{p}-grp"), "{v}");
    assert!(groups[0]["members"].as_array().unwrap().iter().any(ours), "{v}");
    // Sessions: both of ours (the idle one too), with their metadata.
    let other = h.other.id().to_string();
    let sessions = v["sessions"].as_array().unwrap();
    for (id, m) in [(&me, "holder"), (&other, "idle")] {
        let s = sessions.iter().find(|s| s["session"] == id.as_str());
        let s = s.unwrap_or_else(|| panic!("session {id} is not listed: {v}"));
        assert_eq!(s["metadata"], format!("{p} {m}"), "{v}");
    }
    assert_eq!(v["truncated"], serde_json::json!({"leases": false, "groups": false, "sessions": false}), "{v}");
    // Another prefix: none of it.
    let none = status_json(url, &["--prefix", &support::unique("st")]);
    for section in ["leases", "semaphores", "partition_sets", "groups"] {
        assert_eq!(none[section], serde_json::json!([]), "{section}: {none}");
    }
    // The human table.
    let o = run({
        let mut c = simba(Some(url));
        c.args(["status", "--prefix", p]);
        c
    });
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    for expected in [
        format!("{p}-lock"),
        format!("{p}-sem: 1 held, 2 permits"),
        format!("{p}-parts: 3 owned, 3 partitions, 1 members"),
        format!("{p}-grp: 1 members"),
        me.clone(),
    ] {
        assert!(text.contains(&expected), "expected {expected:?} in:\n{text}");
    }
    // Two sessions are live at least: a limit of 1 cuts them, and says so.
    let cut = status_json(url, &["--prefix", p, "--limit", "1"]);
    assert_eq!(cut["sessions"].as_array().unwrap().len(), 1, "{cut}");
    assert_eq!(cut["truncated"]["sessions"], true, "{cut}");
    let o = run({
        let mut c = simba(Some(url));
        c.args(["status", "--prefix", p, "--limit", "1"]);
        c
    });
    let text = stdout(&o);
    assert!(text.contains("sessions than --limit 1 matched") && text.contains("narrow --prefix"), "{text}");
    drop(h.parts);
    let _ = h.session.close();
    let _ = h.other.close();
}

macro_rules! backend_tests {
    ($($m:ident, $feature:literal, $var:literal, $default:literal, $test:ident;)*) => {$(
        #[cfg(feature = $feature)]
        mod $m {
            #[test]
            #[serial_test::serial($m)]
            fn $test() {
                crate::$test(&crate::support::env_or($var, $default));
            }
        }
    )*};
}

backend_tests! {
    postgres, "postgres", "SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test", status_shows_what_is_held;
    mysql, "mysql", "SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test", status_shows_what_is_held;
    redis, "redis", "SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379", status_shows_what_is_held;
    redis_cluster, "redis", "SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
        status_shows_what_is_held;
    zookeeper, "zookeeper", "SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test", status_shows_what_is_held;
    etcd, "etcd", "SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379/simba-test", status_shows_what_is_held;
}
