//! Configuration: URL and variable parsing, the selection rules, validation messages and secret
//! redaction. No server is needed (nothing here does I/O except the memory backend).

use std::collections::HashMap;
use std::time::Duration;

#[cfg(feature = "redis")]
use simba::backends::redis::EvictionCheck;
#[cfg(feature = "zookeeper")]
use simba::backends::zookeeper::AclEntry;
#[cfg(feature = "zookeeper")]
use simba::backends::zookeeper::AclMode;
use simba::config::{redact_url, ENV_VARS};
use simba::{BackendKind, Config, ErrorKind, Session};

fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    move |k: &str| m.get(k).cloned()
}

fn from(pairs: &[(&str, &str)]) -> simba::Result<Config> {
    Config::from_vars(vars(pairs))
}

/// The error message of a config that must fail with `InvalidConfig`.
#[track_caller]
fn err(pairs: &[(&str, &str)]) -> String {
    let e = from(pairs).expect_err("must be rejected");
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    e.to_string()
}

#[track_caller]
fn assert_contains(haystack: &str, needles: &[&str]) {
    for n in needles {
        assert!(haystack.contains(n), "expected {n:?} in: {haystack}");
    }
}

fn compiled(kind: BackendKind) -> bool {
    kind.is_compiled()
}

/// Whether a SQL backend is compiled in (the SQL variables are theirs).
fn sql_compiled() -> bool {
    compiled(BackendKind::Postgres) || compiled(BackendKind::Mysql)
}

fn is_sql_var(v: &str) -> bool {
    v == "SIMBA_PURGE_INTERVAL" || v.starts_with("SIMBA_SQL_")
}

// ---------------------------------------------------------------- URLs and backend kinds

#[test]
fn url_schemes_choose_the_backend() {
    let cases = [
        ("memory://", BackendKind::Memory),
        ("postgres://u@127.0.0.1:5432/test", BackendKind::Postgres),
        ("postgresql://u@db/test", BackendKind::Postgres),
        ("mysql://root@127.0.0.1:3306/test", BackendKind::Mysql),
        ("mariadb://root@127.0.0.1/test", BackendKind::Mysql),
        ("redis://127.0.0.1:6379", BackendKind::Redis),
        ("redis://127.0.0.1:6379/2", BackendKind::Redis),
        ("redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002", BackendKind::RedisCluster),
        ("zookeeper://127.0.0.1:2181,127.0.0.1:2182/simba-test", BackendKind::Zookeeper),
        ("zk://127.0.0.1/x", BackendKind::Zookeeper),
    ];
    for (url, kind) in cases {
        match Config::from_url(url) {
            Ok(c) => {
                assert!(compiled(kind), "{url} accepted without its feature");
                assert_eq!(c.backend_kind(), kind, "{url}");
            }
            Err(e) => {
                assert!(!compiled(kind), "{url}: {e}");
                let f = kind.feature().unwrap_or_default();
                assert_contains(
                    &e.to_string(),
                    &[&format!("needs the `{f}` feature"), &format!("cargo build --features {f}")],
                );
            }
        }
    }
}

#[test]
fn hosts_database_and_zookeeper_root_come_from_the_url() {
    if compiled(BackendKind::RedisCluster) {
        let c = Config::from_url("redis+cluster://127.0.0.1:7000,[::1]:7001,node3:7002").unwrap();
        assert_eq!(c.hosts(), ["127.0.0.1:7000", "[::1]:7001", "node3:7002"]);
    }
    #[cfg(feature = "zookeeper")]
    {
        let c = Config::from_url("zookeeper://h1:2181,h2/simba-test/app").unwrap();
        assert_eq!(c.hosts(), ["h1:2181", "h2"]);
        assert_eq!(c.zookeeper_root(), "/simba-test/app");
        let c = Config::from_url("zookeeper://h1:2181").unwrap();
        assert_eq!(c.zookeeper_root(), "/simba");
        let c = Config::from_url("zookeeper://h1:2181/").unwrap();
        assert_eq!(c.zookeeper_root(), "/simba");
    }
    if compiled(BackendKind::Postgres) {
        let c = Config::from_url("postgres://u:pw@db.example:5433/app?sslmode=disable").unwrap();
        assert_eq!(c.database(), Some("app"));
        assert_eq!(c.hosts(), ["db.example:5433"]);
    }
}

#[test]
fn malformed_urls_are_rejected_with_the_rule() {
    let cases: &[(&str, &[&str])] = &[
        ("127.0.0.1:6379", &["missing scheme://", "never guessed"]),
        ("http://127.0.0.1", &["unknown scheme \"http\"", "redis://host:6379"]),
        ("memory://somewhere", &["memory:// takes nothing"]),
        ("rediss://h1:1,h2:2", &["takes one host", "redis+cluster://"]),
        ("redis://", &["empty host"]),
        ("redis://h1:1,h2:2", &["takes one host", "redis+cluster://"]),
        ("redis://h:6379/abc", &["database number", "\"abc\""]),
        ("redis+cluster://h1:7000/0", &["no databases"]),
        ("redis+cluster://h1:7000,", &["empty host"]),
        ("redis://h:99999", &["invalid port"]),
        ("postgres://u@db", &["missing database name"]),
        ("mysql://a@h1,h2/db", &["takes one host"]),
        ("redis://h:6379#frag", &["fragment"]),
    ];
    for (url, needles) in cases {
        // The Redis and SQL rules are the backends' own (without the backend, the URL needs its feature).
        if (url.starts_with("redis") && !compiled(BackendKind::Redis))
            || (url.starts_with("postgres") && !compiled(BackendKind::Postgres))
            || (url.starts_with("mysql") && !compiled(BackendKind::Mysql))
        {
            continue;
        }
        let e = Config::from_url(url).expect_err(url);
        assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{url}");
        assert_contains(&e.to_string(), needles);
        assert_contains(&e.to_string(), &["invalid backend URL"]);
    }
}

#[test]
fn backend_kind_names_round_trip() {
    for k in BackendKind::ALL {
        assert_eq!(k.name().parse::<BackendKind>().unwrap(), k);
        assert_eq!(k.to_string(), k.name());
    }
    assert_eq!("PostgreSQL".parse::<BackendKind>().unwrap(), BackendKind::Postgres);
    assert_eq!("etcd".parse::<BackendKind>().unwrap(), BackendKind::Etcd);
    let e = "consul".parse::<BackendKind>().unwrap_err();
    assert_contains(&e.to_string(), &["unknown backend \"consul\"", "postgres, mysql, redis", "etcd"]);
    assert_eq!(BackendKind::Memory.feature(), None);
    assert!(BackendKind::Memory.is_compiled());
    assert_eq!(BackendKind::RedisCluster.feature(), Some("redis"));
}

// ---------------------------------------------------------------- selection rules

#[test]
fn nothing_chosen_is_an_error() {
    assert_contains(&err(&[]), &["no backend chosen", "SIMBA_URL", "memory://"]);
    // Timing settings alone choose nothing.
    assert_contains(&err(&[("SIMBA_LEASE_DURATION", "10s")]), &["no backend chosen"]);
    // Empty values count as unset.
    assert_contains(&err(&[("SIMBA_URL", ""), ("SIMBA_BACKEND", "  ")]), &["no backend chosen"]);
}

/// Backend settings are the backends' own: a build knows the variables of the backends it
/// contains (`from_env` also recognises other backends' `SIMBA_REDIS_*`/`SIMBA_ZOOKEEPER_*`).
#[cfg(all(feature = "redis", feature = "zookeeper"))]
#[test]
fn settings_for_two_backends_without_a_choice_are_an_error() {
    let m = err(&[("SIMBA_REDIS_WAIT_REPLICAS", "1"), ("SIMBA_ZOOKEEPER_ROOT", "/x")]);
    assert_contains(
        &m,
        &[
            "settings for 2 backends but no backend chosen",
            "redis (SIMBA_REDIS_WAIT_REPLICAS)",
            "zookeeper (SIMBA_ZOOKEEPER_ROOT)",
            "SIMBA_URL or SIMBA_BACKEND",
        ],
    );
    if sql_compiled() {
        let m = err(&[("SIMBA_PURGE_INTERVAL", "1m"), ("SIMBA_REDIS_EVICTION", "refuse")]);
        assert_contains(&m, &["sql (postgres/mysql) (SIMBA_PURGE_INTERVAL)", "redis (SIMBA_REDIS_EVICTION)"]);
    }
    // One backend's settings still do not choose it.
    let m = err(&[("SIMBA_ZOOKEEPER_AUTH", "digest:u:p")]);
    assert_contains(&m, &["zookeeper settings are set but no backend is chosen", "never guessed"]);
    assert!(!m.contains("u:p"), "{m}");
}

#[cfg(all(feature = "redis", feature = "zookeeper"))]
#[test]
fn with_an_explicit_choice_other_backends_settings_are_ignored_with_a_warning() {
    let c = from(&[("SIMBA_URL", "memory://"), ("SIMBA_REDIS_WAIT_REPLICAS", "1"), ("SIMBA_ZOOKEEPER_ROOT", "/x")])
        .unwrap();
    assert_eq!(c.backend_kind(), BackendKind::Memory);
    let w = c.warnings().join("\n");
    assert_contains(
        &w,
        &["SIMBA_REDIS_WAIT_REPLICAS is a redis setting", "SIMBA_ZOOKEEPER_ROOT is a zookeeper setting"],
    );
}

#[test]
fn simba_backend_alone_and_with_a_url() {
    let c = from(&[("SIMBA_BACKEND", "memory")]).unwrap();
    assert_eq!(c.backend_kind(), BackendKind::Memory);
    assert_eq!(c.redacted_url(), None);
    let c = from(&[("SIMBA_BACKEND", "memory"), ("SIMBA_URL", "memory://")]).unwrap();
    assert_eq!(c.backend_kind(), BackendKind::Memory);
    // A network backend needs its URL.
    assert_contains(
        &err(&[("SIMBA_BACKEND", "redis")]),
        &["SIMBA_BACKEND=redis needs a URL", "redis://127.0.0.1:6379"],
    );
    assert_contains(&err(&[("SIMBA_BACKEND", "nope")]), &["SIMBA_BACKEND", "unknown backend \"nope\""]);
}

#[test]
fn simba_backend_contradicting_the_url_is_an_error() {
    let m = err(&[("SIMBA_BACKEND", "zookeeper"), ("SIMBA_URL", "memory://")]);
    assert_contains(&m, &["SIMBA_BACKEND=zookeeper contradicts SIMBA_URL=memory://", "choose one backend"]);
    let m = err(&[("SIMBA_BACKEND", "postgres"), ("SIMBA_URL", "redis://u:hunter2@h:6379")]);
    assert_contains(&m, &["SIMBA_BACKEND=postgres contradicts SIMBA_URL=redis://u:***@h:6379"]);
    assert!(!m.contains("hunter2"), "{m}");
    // Builder labels.
    let e = Config::builder().url("memory://").backend(BackendKind::Mysql).build().unwrap_err();
    assert_contains(&e.to_string(), &["backend=mysql contradicts url=memory://"]);
    if compiled(BackendKind::Redis) {
        // `redis` agrees with a cluster URL; `redis-cluster` does not agree with a standalone one.
        let c = from(&[("SIMBA_BACKEND", "redis"), ("SIMBA_URL", "redis+cluster://h:7000")]).unwrap();
        assert_eq!(c.backend_kind(), BackendKind::RedisCluster);
        assert_contains(&err(&[("SIMBA_BACKEND", "redis-cluster"), ("SIMBA_URL", "redis://h:6379")]), &["contradicts"]);
    }
}

#[test]
fn disabled_backends_are_an_error() {
    let m = err(&[("SIMBA_URL", "memory://"), ("SIMBA_MEMORY_ENABLED", "false")]);
    assert_contains(&m, &["the memory backend is disabled (SIMBA_MEMORY_ENABLED=false)"]);
    let m = err(&[("SIMBA_URL", "memory://"), ("SIMBA_ENABLED", "no")]);
    assert_contains(&m, &["disabled (SIMBA_ENABLED=false)"]);
    assert!(from(&[("SIMBA_URL", "memory://"), ("SIMBA_REDIS_ENABLED", "false")]).is_ok());
    assert!(from(&[("SIMBA_URL", "memory://"), ("SIMBA_MEMORY_ENABLED", "true")]).is_ok());
    assert_contains(
        &err(&[("SIMBA_URL", "memory://"), ("SIMBA_ENABLED", "maybe")]),
        &["SIMBA_ENABLED", "not a boolean"],
    );
    let e = Config::builder().url("memory://").disable(BackendKind::Memory).build().unwrap_err();
    assert_contains(&e.to_string(), &["disabled (ConfigBuilder::disable)"]);
}

#[test]
fn a_backend_without_its_feature_names_the_feature() {
    for (kind, url) in [
        (BackendKind::Postgres, "postgres://u@h/db"),
        (BackendKind::Mysql, "mysql://u@h/db"),
        (BackendKind::Redis, "redis://h:6379"),
        (BackendKind::RedisCluster, "redis+cluster://h:7000"),
        (BackendKind::Zookeeper, "zookeeper://h:2181"),
    ] {
        if compiled(kind) {
            continue;
        }
        let f = kind.feature().unwrap_or_default();
        let m = err(&[("SIMBA_URL", url)]);
        assert_eq!(
            m,
            format!("the {} backend needs the `{f}` feature: cargo build --features {f}", kind.name()),
            "{url}"
        );
    }
}

// ---------------------------------------------------------------- every variable

#[test]
fn session_timing_variables() {
    let c = from(&[
        ("SIMBA_URL", "memory://"),
        ("SIMBA_LEASE_DURATION", "3s"),
        ("SIMBA_RENEW_INTERVAL", "500ms"),
        ("SIMBA_DRIFT", "2%"),
        ("SIMBA_QUERY_TIMEOUT", "1s 500ms"),
        ("SIMBA_POLL_INTERVAL", "200ms"),
        ("SIMBA_METADATA", "host-a"),
    ])
    .unwrap();
    let o = c.session_options();
    assert_eq!(o.lease_duration(), Duration::from_secs(3));
    assert_eq!(o.renew_interval(), Duration::from_millis(500));
    assert!((o.drift() - 0.02).abs() < 1e-12);
    assert_eq!(o.query_timeout(), Duration::from_millis(1500));
    assert_eq!(c.query_timeout(), Duration::from_millis(1500));
    assert_eq!(o.metadata(), "host-a");
    assert_eq!(o.poll_interval(), Duration::from_millis(200));
    assert_eq!(o.retry_interval(), Duration::from_millis(200));
    let c = from(&[("SIMBA_URL", "memory://"), ("SIMBA_DRIFT", "0.05")]).unwrap();
    assert!((c.session_options().drift() - 0.05).abs() < 1e-12);
    // Defaults.
    let o = from(&[("SIMBA_URL", "memory://")]).unwrap().session_options();
    assert_eq!(o.lease_duration(), Duration::from_secs(15));
    assert_eq!(o.renew_interval(), Duration::from_secs(5));
    assert_eq!(o.query_timeout(), Duration::from_secs(5));
    assert_eq!(o.poll_interval(), Duration::from_millis(500));
}

#[test]
fn bad_values_name_the_variable_and_the_rule() {
    let base = ("SIMBA_URL", "memory://");
    let cases: &[(&str, &str, &[&str])] = &[
        ("SIMBA_LEASE_DURATION", "15", &["SIMBA_LEASE_DURATION=\"15\" is not a duration", "15s, 500ms"]),
        ("SIMBA_LEASE_DURATION", "fast", &["SIMBA_LEASE_DURATION=\"fast\" is not a duration"]),
        ("SIMBA_LEASE_DURATION", "50ms", &["lease_duration 50ms is too short", "at least 100ms"]),
        ("SIMBA_RENEW_INTERVAL", "10x", &["SIMBA_RENEW_INTERVAL=\"10x\" is not a duration"]),
        ("SIMBA_RENEW_INTERVAL", "10s", &["renew_interval 10s", "at most lease_duration / 2"]),
        ("SIMBA_QUERY_TIMEOUT", "-1s", &["SIMBA_QUERY_TIMEOUT=\"-1s\" is not a duration"]),
        ("SIMBA_QUERY_TIMEOUT", "1h", &["query_timeout", "at most lease_duration"]),
        ("SIMBA_POLL_INTERVAL", "0s", &["poll_interval 0ns must be > 0"]),
        ("SIMBA_POLL_INTERVAL", "often", &["SIMBA_POLL_INTERVAL=\"often\" is not a duration"]),
        ("SIMBA_DRIFT", "lots", &["SIMBA_DRIFT=\"lots\" is not a number", "0.01", "1%"]),
        ("SIMBA_DRIFT", "0.7", &["drift 0.7 must be in [0, 0.5)"]),
        ("SIMBA_DRIFT", "NaN", &["drift NaN must be in [0, 0.5)"]),
        ("SIMBA_PURGE_INTERVAL", "soon", &["SIMBA_PURGE_INTERVAL=\"soon\" is not a duration"]),
        ("SIMBA_REDIS_WAIT_REPLICAS", "-1", &["SIMBA_REDIS_WAIT_REPLICAS=\"-1\" is not a whole number"]),
        ("SIMBA_REDIS_MAX_CONNECTIONS", "many", &["SIMBA_REDIS_MAX_CONNECTIONS=\"many\" is not a whole number"]),
        ("SIMBA_SQL_POOL_SIZE", "1.5", &["SIMBA_SQL_POOL_SIZE=\"1.5\" is not a whole number"]),
        ("SIMBA_REDIS_EVICTION", "ignore", &["SIMBA_REDIS_EVICTION", "expected warn or refuse"]),
        ("SIMBA_ZOOKEEPER_ACL", "world", &["SIMBA_ZOOKEEPER_ACL", "expected auto, open, creator-all or a list"]),
        ("SIMBA_ZOOKEEPER_AUTH", "nocolon", &["SIMBA_ZOOKEEPER_AUTH", "scheme:credentials"]),
        ("SIMBA_ZOOKEEPER_AUTH", "di gest:u:p", &["scheme \"di gest\" must be ASCII letters and digits"]),
        ("SIMBA_ZOOKEEPER_AUTH", "digest:justuser", &["digest credentials must be user:password"]),
        ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "10", &["SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT=\"10\" is not a duration"]),
        ("SIMBA_MEMORY_ENABLED", "nah", &["SIMBA_MEMORY_ENABLED=\"nah\" is not a boolean"]),
    ];
    for (var, value, needles) in cases {
        if (var.starts_with("SIMBA_REDIS_") && !compiled(BackendKind::Redis))
            || (var.starts_with("SIMBA_ZOOKEEPER_") && !compiled(BackendKind::Zookeeper))
            || (is_sql_var(var) && !sql_compiled())
        {
            continue;
        }
        let m = err(&[base, (var, value)]);
        assert_contains(&m, needles);
    }
    let m = err(&[base, ("SIMBA_METADATA", &"x".repeat(2000))]);
    assert_contains(&m, &["2000 bytes", "at most 1024"]);
    // The digest password never shows in the message.
    if compiled(BackendKind::Zookeeper) {
        let m = err(&[base, ("SIMBA_ZOOKEEPER_AUTH", "digest:s3cr3tpw")]);
        assert!(!m.contains("s3cr3tpw"), "{m}");
    }
}

#[test]
#[cfg(feature = "internal-testing")]
fn durations() {
    use simba::testing::parse_duration;
    assert_eq!(parse_duration("X", "15s").unwrap(), Duration::from_secs(15));
    assert_eq!(parse_duration("X", "500ms").unwrap(), Duration::from_millis(500));
    assert_eq!(parse_duration("X", " 1m 30s ").unwrap(), Duration::from_secs(90));
    assert_eq!(parse_duration("X", "2h").unwrap(), Duration::from_secs(7200));
    for bad in ["", "15", "s", "1.5.s", "-1s", "5 parsecs"] {
        let e = parse_duration("SIMBA_X", bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidConfig);
        assert_contains(&e.to_string(), &["SIMBA_X=", "is not a duration", "15s, 500ms"]);
    }
}

#[cfg(feature = "postgres")]
#[test]
fn sql_settings() {
    let c = from(&[
        ("SIMBA_URL", "postgres://u@h/db"),
        ("SIMBA_PURGE_INTERVAL", "30s"),
        ("SIMBA_SQL_POOL_SIZE", "8"),
        ("SIMBA_BACKEND", "postgresql"),
    ])
    .unwrap();
    assert_eq!(c.purge_interval(), Some(Duration::from_secs(30)));
    assert!(c.warnings().is_empty(), "{:?}", c.warnings());
    // The backend's own options, with the sessions' query timeout.
    let o = c.sql_options().expect("a SQL config has SQL options");
    assert_eq!((o.purge_interval(), o.pool_size()), (Duration::from_secs(30), 8));
    assert_eq!(o.query_timeout(), c.query_timeout());
    // The setters override the variables; unset, the backend's defaults apply.
    let c = simba::ConfigBuilder::from_vars(vars(&[("SIMBA_URL", "postgres://u@h/db"), ("SIMBA_SQL_POOL_SIZE", "8")]))
        .unwrap()
        .sql_pool_size(3)
        .build()
        .unwrap();
    assert_eq!((c.purge_interval(), c.sql_options().map(|o| o.pool_size())), (None, Some(3)));
    let o = c.sql_options().unwrap();
    assert_eq!(o.purge_interval(), simba::backends::sql::DEFAULT_PURGE_INTERVAL);
    // Another backend has no SQL options and ignores the SQL settings with a warning.
    let c = from(&[("SIMBA_URL", "memory://"), ("SIMBA_PURGE_INTERVAL", "30s")]).unwrap();
    assert!(c.sql_options().is_none() && c.purge_interval().is_none());
    assert_contains(
        &c.warnings().join("; "),
        &["SIMBA_PURGE_INTERVAL is a sql (postgres/mysql) setting and is ignored"],
    );
    assert_contains(
        &err(&[("SIMBA_URL", "postgres://u@h/db"), ("SIMBA_PURGE_INTERVAL", "0s")]),
        &["purge_interval must be > 0"],
    );
    assert_contains(&err(&[("SIMBA_URL", "postgres://u@h/db"), ("SIMBA_PURGE_INTERVAL", "2d")]), &["at most 24h"]);
    assert_contains(&err(&[("SIMBA_URL", "postgres://u@h/db"), ("SIMBA_SQL_POOL_SIZE", "0")]), &["pool_size 0"]);
}

#[cfg(feature = "redis")]
#[test]
fn redis_settings() {
    let c = from(&[
        ("SIMBA_URL", "redis://127.0.0.1:6380"),
        ("SIMBA_REDIS_WAIT_REPLICAS", "1"),
        ("SIMBA_REDIS_EVICTION", "Refuse"),
        ("SIMBA_REDIS_MAX_CONNECTIONS", "4"),
    ])
    .unwrap();
    assert_eq!(c.redis_wait_replicas(), 1);
    assert_eq!(c.redis_eviction(), EvictionCheck::Refuse);
    let c = from(&[("SIMBA_URL", "redis://h")]).unwrap();
    assert_eq!((c.redis_wait_replicas(), c.redis_eviction()), (0, EvictionCheck::Warn));
    let m = err(&[("SIMBA_URL", "redis+cluster://h:7000"), ("SIMBA_REDIS_WAIT_REPLICAS", "1")]);
    assert_contains(&m, &["not available on Redis Cluster"]);
    assert_contains(&err(&[("SIMBA_URL", "redis://h"), ("SIMBA_REDIS_MAX_CONNECTIONS", "0")]), &["max_connections 0"]);
    // The pool's connection lifetime: forever unless set, at least 1 s.
    let c = from(&[("SIMBA_URL", "redis://h"), ("SIMBA_REDIS_MAX_CONNECTION_LIFETIME", "30m")]).unwrap();
    let o = c.redis_options().expect("redis options");
    assert_eq!(o.max_connection_lifetime(), Duration::from_secs(1800));
    let c = from(&[("SIMBA_URL", "redis://h")]).unwrap();
    assert_eq!(c.redis_options().unwrap().max_connection_lifetime(), Duration::MAX);
    assert_contains(
        &err(&[("SIMBA_URL", "redis://h"), ("SIMBA_REDIS_MAX_CONNECTION_LIFETIME", "0s")]),
        &["max_connection_lifetime", "at least 1s"],
    );
    assert_contains(
        &err(&[("SIMBA_URL", "redis://h"), ("SIMBA_REDIS_MAX_CONNECTION_LIFETIME", "soon")]),
        &["SIMBA_REDIS_MAX_CONNECTION_LIFETIME=\"soon\" is not a duration"],
    );
    // The same options type from code; the URL means what it means to RedisBackend::connect.
    let c = Config::builder().url("redis://h").redis_max_connection_lifetime(Duration::from_secs(5)).build().unwrap();
    assert_eq!(c.redis_options().unwrap().max_connection_lifetime(), Duration::from_secs(5));
    let e = Config::from_url("redis://:hunter2@h?protocl=resp3").unwrap_err();
    assert_contains(&e.to_string(), &["unknown query parameter \"protocl\"", "protocol="]);
    assert!(!e.to_string().contains("hunter2"), "{e}");
    assert!(Config::from_url("redis://h?protocol=resp3").is_ok());
    // Backend-owned options are read by the backend's own builder, identically.
    let b = simba::backends::redis::RedisOptionsBuilder::from_vars(vars(&[("SIMBA_REDIS_WAIT_REPLICAS", "2")]));
    assert_eq!(b.unwrap().build().unwrap().wait_replicas(), 2);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_settings() {
    let zk = ("SIMBA_URL", "zookeeper://127.0.0.1:2181");
    let c = from(&[zk, ("SIMBA_ZOOKEEPER_ROOT", "/apps/simba"), ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "3s")]).unwrap();
    assert_eq!(c.zookeeper_root(), "/apps/simba");
    assert_eq!(c.zookeeper_connection_timeout(), Some(Duration::from_secs(3)));
    assert_eq!(c.zookeeper_acl(), AclMode::Open);
    assert_eq!(c.zookeeper_auth_scheme(), None);
    // auto → creator-all once auth is configured.
    let c = from(&[zk, ("SIMBA_ZOOKEEPER_AUTH", "digest:simba:secret")]).unwrap();
    assert_eq!(c.zookeeper_acl(), AclMode::CreatorAll);
    assert_eq!(c.zookeeper_auth_scheme(), Some("digest"));
    let c = from(&[zk, ("SIMBA_ZOOKEEPER_AUTH", "digest:simba:secret"), ("SIMBA_ZOOKEEPER_ACL", "open")]).unwrap();
    assert_eq!(c.zookeeper_acl(), AclMode::Open);
    // URL userinfo is digest auth.
    let c = Config::from_url("zookeeper://simba:secret@h:2181/x").unwrap();
    assert_eq!(c.zookeeper_auth_scheme(), Some("digest"));
    assert_eq!(c.zookeeper_acl(), AclMode::CreatorAll);
    // Rules.
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_ACL", "creator-all")]), &["creator-all", "needs auth"]);
    assert_contains(
        &err(&[zk, ("SIMBA_ZOOKEEPER_ROOT", "simba")]),
        &["invalid ZooKeeper root \"simba\"", "not absolute"],
    );
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_ROOT", "/a/")]), &["trailing '/'"]);
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_ROOT", "/zookeeper/x")]), &["reserved"]);
    assert_contains(
        &err(&[("SIMBA_URL", "zookeeper://h/a"), ("SIMBA_ZOOKEEPER_ROOT", "/b")]),
        &["root is set twice", "\"/a\"", "\"/b\""],
    );
    assert!(from(&[("SIMBA_URL", "zookeeper://h/a"), ("SIMBA_ZOOKEEPER_ROOT", "/a")]).is_ok());
    let m = err(&[("SIMBA_URL", "zookeeper://u:pw1@h/a"), ("SIMBA_ZOOKEEPER_AUTH", "digest:u:pw2")]);
    assert_contains(&m, &["auth is set twice"]);
    assert!(!m.contains("pw1") && !m.contains("pw2"), "{m}");
    assert_contains(&err(&[("SIMBA_URL", "zookeeper://justuser@h/a")]), &["needs user:password@"]);
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "0s")]), &["must be > 0"]);
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_security_settings() {
    let zk = ("SIMBA_URL", "zookeeper://127.0.0.1:2181");
    // Custom ACL lists (validated entry by entry when the configuration is built).
    let c = from(&[zk, ("SIMBA_ZOOKEEPER_ACL", "world:anyone:r, digest:simba:abc=:cdrwa")]).unwrap();
    assert_eq!(
        c.zookeeper_acl(),
        AclMode::Custom(vec![
            AclEntry::parse("world:anyone:r").unwrap(),
            AclEntry::parse("digest:simba:abc=:cdrwa").unwrap()
        ])
    );
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_ACL", "world:anyone:rx")]), &["permissions \"rx\"", "cdrwa"]);
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_ACL", "world:anyone")]), &["scheme:id:permissions"]);
    // SASL: auto ACL becomes creator-all; the password never shows.
    let c = from(&[zk, ("SIMBA_ZOOKEEPER_SASL", "simba:pw-sasl-9")]).unwrap();
    assert_eq!(c.zookeeper_sasl_user(), Some("simba"));
    assert_eq!(c.zookeeper_acl(), AclMode::CreatorAll);
    assert!(!format!("{c:?}").contains("pw-sasl-9"), "{c:?}");
    assert!(from(&[zk, ("SIMBA_ZOOKEEPER_SASL", "simba:pw"), ("SIMBA_ZOOKEEPER_ACL", "creator-all")]).is_ok());
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_SASL", "nopassword")]), &["SIMBA_ZOOKEEPER_SASL", "user:password"]);
    // TLS: files are read and checked when the configuration is built; identity needs both files and a CA.
    let m = err(&[zk, ("SIMBA_ZOOKEEPER_TLS_CA", "/nonexistent/ca.pem")]);
    assert_contains(&m, &["cannot read the ZooKeeper TLS CA file /nonexistent/ca.pem"]);
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_TLS_CERT", "/c.pem")]), &["both a certificate and a key"]);
    assert_contains(
        &err(&[zk, ("SIMBA_ZOOKEEPER_TLS_CERT", "/c.pem"), ("SIMBA_ZOOKEEPER_TLS_KEY", "/k.pem")]),
        &["needs the CA", "SIMBA_ZOOKEEPER_TLS_CA"],
    );
    let dir = std::env::temp_dir().join(format!("simba-config-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let junk = dir.join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    assert_contains(&err(&[zk, ("SIMBA_ZOOKEEPER_TLS_CA", junk.to_str().unwrap())]), &["invalid ZooKeeper TLS CA"]);
    std::fs::remove_dir_all(&dir).unwrap();
    // The same settings as URL parameters (tls_ca, tls_cert, tls_key), checked the same way.
    let url_err = |url: &str| Config::from_url(url).expect_err(url).to_string();
    assert_contains(
        &url_err("zookeeper://h:2181?x=1"),
        &["unknown ZooKeeper URL parameter \"x\"", "tls_ca, tls_cert, tls_key"],
    );
    assert_contains(
        &url_err("zookeeper://h:2181/r?tls_ca=/nonexistent/ca%20x.pem"),
        &["TLS CA file /nonexistent/ca x.pem"],
    );
    assert_contains(&url_err("zookeeper://h:2181?tls_ca=/a&tls_ca=/b"), &["tls_ca= is given twice"]);
    assert_contains(
        &url_err("zookeeper://h:2181?tls_ca=/ca.pem&tls_cert=/c.pem"),
        &["both URL parameters tls_cert and tls_key"],
    );
    assert_contains(&url_err("zookeeper://h:2181?tls_cert=/c.pem&tls_key=/k.pem"), &["needs the CA", "tls_ca"]);
    // Ignored (with a warning) on other backends.
    let c = from(&[("SIMBA_URL", "memory://"), ("SIMBA_ZOOKEEPER_SASL", "u:p")]).unwrap();
    assert!(c.warnings().iter().any(|w| w.contains("SIMBA_ZOOKEEPER_SASL")), "{:?}", c.warnings());
}

#[test]
fn builder_overrides_the_environment() {
    let c = simba::ConfigBuilder::from_vars(vars(&[("SIMBA_URL", "memory://"), ("SIMBA_LEASE_DURATION", "30s")]))
        .unwrap()
        .lease_duration(Duration::from_secs(2))
        .metadata("me")
        .build()
        .unwrap();
    assert_eq!(c.session_options().lease_duration(), Duration::from_secs(2));
    assert_eq!(c.session_options().metadata(), "me");
}

#[test]
fn env_var_list_is_complete() {
    for v in [
        "SIMBA_URL",
        "SIMBA_BACKEND",
        "SIMBA_LEASE_DURATION",
        "SIMBA_RENEW_INTERVAL",
        "SIMBA_DRIFT",
        "SIMBA_QUERY_TIMEOUT",
        "SIMBA_POLL_INTERVAL",
        "SIMBA_PURGE_INTERVAL",
        "SIMBA_REDIS_WAIT_REPLICAS",
        "SIMBA_REDIS_EVICTION",
        "SIMBA_ZOOKEEPER_ROOT",
        "SIMBA_ZOOKEEPER_AUTH",
        "SIMBA_ZOOKEEPER_ACL",
        "SIMBA_METADATA",
    ] {
        let owner_compiled = (!v.starts_with("SIMBA_REDIS_") || compiled(BackendKind::Redis))
            && (!v.starts_with("SIMBA_ZOOKEEPER_") || compiled(BackendKind::Zookeeper))
            && (!is_sql_var(v) || sql_compiled());
        assert_eq!(ENV_VARS.contains(&v), owner_compiled, "{v}");
    }
    // Each backend's own (crate-private) list is in this one: tested in-crate, next to each list.
}

// ---------------------------------------------------------------- secrets

#[test]
fn secrets_never_appear_in_debug_or_errors() {
    // URL redaction works on any text.
    assert_eq!(redact_url("redis://user:hunter2@h:6379/0"), "redis://user:***@h:6379/0");
    assert_eq!(redact_url("redis://:hunter2@h:6379"), "redis://:***@h:6379");
    assert_eq!(
        redact_url("postgres://u@h/db?sslmode=disable&password=hunter2"),
        "postgres://u@h/db?sslmode=disable&password=***"
    );
    assert_eq!(redact_url("redis+cluster://u:hunter2@a:1,b:2"), "redis+cluster://u:***@a:1,b:2");
    assert_eq!(redact_url("not a url hunter2"), "<unparsable URL>");
    assert_eq!(redact_url("redis:hunter2@h"), "redis:…");
    // TLS file parameters name files, not secrets, on every backend: an error about a file must
    // be able to say which one. The key file's *content* is never read into a message.
    for (url, file) in [
        ("postgres://u:hunter2@h/db?sslrootcert=/etc/ca.pem&sslcert=/etc/c.pem&sslkey=/etc/c.key", "/etc/c.key"),
        ("mysql://u:hunter2@h/db?ssl-ca=/etc/ca.pem&ssl-cert=/etc/c.pem&ssl-key=/etc/c.key", "/etc/c.key"),
        ("rediss://u:hunter2@h:6390?ca=/etc/ca.pem&cert=/etc/c.pem&key=/etc/c.key", "/etc/c.key"),
        ("zookeeper://h:2185/r?tls_ca=/etc/ca.pem&tls_cert=/etc/c.pem&tls_key=/etc/c.key", "/etc/c.key"),
    ] {
        let shown = redact_url(url);
        assert!(shown.contains(file) && shown.contains("/etc/c.pem") && shown.contains("/etc/ca.pem"), "{shown}");
        assert!(!shown.contains("hunter2"), "{shown}");
    }
    assert_eq!(redact_url("redis://h?api_key=hunter2&token=hunter2"), "redis://h?api_key=***&token=***");

    let mut configs = vec![Config::builder().url("memory://").build().unwrap()];
    if compiled(BackendKind::Postgres) {
        configs.push(Config::from_url("postgres://simba:hunter2@db:5432/app?password=hunter2").unwrap());
    }
    if compiled(BackendKind::Mysql) {
        configs.push(Config::from_url("mysql://root:hunter2@db/app").unwrap());
    }
    if compiled(BackendKind::Redis) {
        configs.push(Config::from_url("redis://default:hunter2@h:6379").unwrap());
        configs.push(Config::from_url("redis+cluster://u:hunter2@h1:7000,h2:7001").unwrap());
    }
    if compiled(BackendKind::Zookeeper) {
        configs.push(
            from(&[("SIMBA_URL", "zookeeper://h:2181"), ("SIMBA_ZOOKEEPER_AUTH", "digest:simba:hunter2")]).unwrap(),
        );
        configs.push(Config::from_url("zookeeper://simba:hunter2@h:2181/x").unwrap());
    }
    for c in &configs {
        let dbg = format!("{c:?} {:?}", c.redacted_url());
        assert!(!dbg.contains("hunter2"), "{dbg}");
        if c.backend_kind() != BackendKind::Memory && c.redacted_url().is_some_and(|u| u.contains('@')) {
            assert!(dbg.contains("***"), "{dbg}");
        }
    }
    // The builder's Debug too.
    let b = simba::ConfigBuilder::from_vars(vars(&[
        ("SIMBA_URL", "redis://u:hunter2@h"),
        ("SIMBA_ZOOKEEPER_AUTH", "digest:u:hunter2"),
    ]))
    .unwrap();
    assert!(!format!("{b:?}").contains("hunter2"));
    // Errors that involve a URL with a password.
    let e = from(&[("SIMBA_URL", "mysql://u:hunter2@h1,h2/db")]).unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let e = from(&[("SIMBA_URL", "http://u:hunter2@h")]).unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let e = from(&[("SIMBA_URL", "redis://u:hunter2@h:1,h:2")]).unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    let e = from(&[("SIMBA_URL", "redis://u:hunter2@:1")]).unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn connect_errors_never_contain_secrets() {
    // Nothing listens on port 1; the connection fails fast.
    let mut urls: Vec<&str> = Vec::new();
    if compiled(BackendKind::Redis) {
        urls.push("redis://default:hunter2@127.0.0.1:1");
    }
    if compiled(BackendKind::Zookeeper) {
        urls.push("zookeeper://simba:hunter2@127.0.0.1:1/x");
    }
    for url in urls {
        let c =
            simba::ConfigBuilder::from_vars(vars(&[("SIMBA_URL", url), ("SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT", "1s")]))
                .unwrap()
                .query_timeout(Duration::from_secs(1))
                .build()
                .unwrap();
        let e = c.connect().expect_err(url);
        let chain = simba::display_chain(&e);
        assert!(!chain.contains("hunter2"), "{chain}");
        assert!(!format!("{e:?}").contains("hunter2"), "{e:?}");
    }
    // SQL backends connect lazily: the first call fails.
    let mut sql: Vec<&str> = Vec::new();
    if compiled(BackendKind::Postgres) {
        sql.push("postgres://simba:hunter2@127.0.0.1:1/db");
    }
    if compiled(BackendKind::Mysql) {
        sql.push("mysql://simba:hunter2@127.0.0.1:1/db");
    }
    for url in sql {
        let c = Config::builder().url(url).query_timeout(Duration::from_secs(1)).build().unwrap();
        let b = c.connect().unwrap();
        let e = b.open_session(Duration::from_secs(1), "").expect_err(url);
        let chain = simba::display_chain(&e);
        assert!(!chain.contains("hunter2"), "{chain}");
        assert!(!format!("{b:?}").contains("hunter2"));
    }
}

// ---------------------------------------------------------------- using it

#[test]
fn memory_config_opens_working_sessions() {
    let c = from(&[("SIMBA_URL", "memory://"), ("SIMBA_LEASE_DURATION", "2s"), ("SIMBA_METADATA", "m")]).unwrap();
    let backend = c.connect().unwrap();
    assert_eq!(backend.kind(), "memory");
    let s = Session::open(backend.clone(), c.session_options()).unwrap();
    let lease = s.lock("config-test").unwrap();
    let h = backend.holder(&simba::Name::new("config-test").unwrap()).unwrap().unwrap();
    assert_eq!(h.token, lease.token().unwrap());
    assert_eq!(h.metadata, "m");
    lease.release().unwrap();
    s.close().unwrap();
    // Every connect() of memory:// is a new, private backend.
    let other = c.connect().unwrap();
    let s1 = Session::open(backend, c.session_options()).unwrap();
    let s2 = Session::open(other, c.session_options()).unwrap();
    let _a = s1.lock("same").unwrap();
    assert!(s2.try_lock("same").unwrap().is_some());
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_settings() {
    let etcd = ("SIMBA_URL", "etcd://127.0.0.1:2379,127.0.0.1:2479");
    let c = from(&[etcd, ("SIMBA_ETCD_PREFIX", "apps/simba"), ("SIMBA_ETCD_CONNECTION_TIMEOUT", "3s")]).unwrap();
    assert_eq!(c.etcd_prefix(), "apps/simba");
    assert_eq!(c.etcd_members(), ["127.0.0.1:2379", "127.0.0.1:2479"]);
    assert_eq!(c.etcd_connection_timeout(), Some(Duration::from_secs(3)));
    // The builder sets the same values, checked by build() before any I/O.
    let c = Config::builder()
        .url("etcd://h")
        .etcd_prefix("team/locks")
        .etcd_connection_timeout(Duration::from_secs(4))
        .etcd_user("simba", "hunter2")
        .build()
        .unwrap();
    assert_eq!(c.etcd_prefix(), "team/locks");
    assert!(c.etcd_options().is_some());
    assert_eq!(c.etcd_connection_timeout(), Some(Duration::from_secs(4)));
    assert!(!format!("{c:?}").contains("hunter2"), "{c:?}");
    let e = Config::builder().url("etcd://h").etcd_prefix("a//b").build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert_contains(&e.to_string(), &["invalid etcd key prefix \"a//b\"", "none empty"]);
    let e = Config::builder().url("etcd://h").etcd_connection_timeout(Duration::ZERO).build().unwrap_err();
    assert_contains(&e.to_string(), &["invalid etcd connection timeout", "more than 0"]);
    let e = Config::builder().url("etcd://h/one").etcd_prefix("two").build().unwrap_err();
    assert_contains(&e.to_string(), &["prefix is set twice", "\"one\"", "\"two\""]);
    let e = Config::builder().url("etcd://u:p@h").etcd_user("simba", "hunter2").build().unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
    // TLS belongs to etcds:// URLs; its files are read when the configuration is built.
    let e = Config::builder().url("etcd://h").etcd_tls_ca("/nonexistent/ca.pem").build().unwrap_err();
    assert_contains(&e.to_string(), &["etcd_tls_ca", "use etcds://"]);
    let e = Config::builder().url("etcds://h").etcd_tls_ca("/nonexistent/ca.pem").build().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig);
    assert_contains(&e.to_string(), &["/nonexistent/ca.pem"]);
    // An etcd setting with another backend's URL is ignored with a warning, as for the others;
    // without a URL it names the etcd setting.
    let c = Config::builder().url("redis://h").etcd_prefix("x").build().unwrap();
    assert!(c.warnings().iter().any(|w| w.contains("etcd_prefix") && w.contains("ignored")), "{:?}", c.warnings());
    assert!(c.etcd_options().is_none());
    let e = Config::builder().etcd_prefix("x").build().unwrap_err();
    assert_contains(&e.to_string(), &["etcd (etcd_prefix)", "no backend is chosen"]);
}
