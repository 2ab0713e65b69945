//! Property tests of every parser of user input (issue 15, item 5): backend URLs of each scheme,
//! `SIMBA_*` values (durations, drift, booleans, counts, enums), names, session ids, metadata,
//! ZooKeeper auth and ACL entries, SQL URLs as the drivers parse them. Any input is accepted or
//! rejected with an `InvalidConfig`/`InvalidName` error — never a panic — and what is accepted
//! round-trips where that is meaningful. Redaction is a property too: whatever the password,
//! no redacted URL shows it.
//!
//! Case counts are bounded (see `cases`) so the file runs in a few seconds; set
//! `PROPTEST_CASES=10000` for a longer run. Failing inputs are kept in
//! `proptest-regressions/parsers_prop.txt` (committed) and replayed first on every run.

use std::time::Duration;

use proptest::prelude::*;
use simba::backend::LeaseBackend;
use simba::backends::redis::EvictionCheck;
use simba::backends::sql::{Dialect, SqlBackend, SqlOptions};
use simba::backends::zookeeper::{AclEntry, AclMode, ZookeeperAuth};
use simba::config::redact_url;
use simba::testing::parse_duration;
use simba::{BackendKind, Config, ConfigBuilder, ErrorKind, MemoryBackend, Name, SessionId};

/// The case count of each property: `PROPTEST_CASES` when set, else `default`.
fn cases(default: u32) -> ProptestConfig {
    let n = std::env::var("PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(default);
    ProptestConfig { cases: n, ..ProptestConfig::default() }
}

fn vars(pairs: Vec<(&'static str, String)>) -> impl Fn(&str) -> Option<String> {
    move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone())
}

fn config_error(e: &simba::Error) -> Result<(), TestCaseError> {
    prop_assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{}", e);
    prop_assert!(!e.to_string().is_empty());
    Ok(())
}

// ---------------------------------------------------------------- strategies

const SCHEMES: &[&str] = &[
    "postgres",
    "postgresql",
    "mysql",
    "mariadb",
    "redis",
    "rediss",
    "redis+cluster",
    "rediss+cluster",
    "zookeeper",
    "zk",
    "memory",
    "http",
    "",
];

/// URL-shaped text: a known (or unknown) scheme, then anything made of URL characters.
fn url_like() -> impl Strategy<Value = String> {
    (proptest::sample::select(SCHEMES), proptest::option::of("[a-zA-Z0-9:@/?#&=%,.\\[\\]+_~ -]{0,40}")).prop_map(
        |(scheme, rest)| match rest {
            Some(r) => format!("{scheme}://{r}"),
            None => format!("{scheme}:"),
        },
    )
}

fn host() -> impl Strategy<Value = String> {
    prop_oneof![
        // (No `-`: a label like `xn--` is punycode that the drivers reject.)
        4 => "[a-z][a-z0-9]{0,8}(\\.[a-z][a-z0-9]{0,5}){0,2}",
        1 => (any::<u8>(), any::<u8>()).prop_map(|(a, b)| format!("10.{a}.{b}.1")),
    ]
}

fn hosts(max: usize) -> impl Strategy<Value = Vec<(String, u16)>> {
    proptest::collection::vec((host(), 1u16..), 1..=max)
}

/// A password that is distinctive (its marker never occurs elsewhere in a generated URL) and
/// may hold any printable character, including unencoded `@`, `/`, `?`, `#` and `:`.
fn password() -> impl Strategy<Value = String> {
    "[!-~]{0,12}".prop_map(|s| format!("PW{s}"))
}

fn user() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9_]{0,8}"
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect::<String>().replace('+', "%20")
}

// ---------------------------------------------------------------- URLs

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn any_url_is_accepted_or_rejected_cleanly(url in prop_oneof![url_like(), ".{0,60}"]) {
        match Config::from_url(&url) {
            Ok(c) => {
                // What is accepted can be shown, and chose a backend from its scheme.
                let _ = format!("{c:?}");
                prop_assert!(url.contains("://"));
            }
            Err(e) => config_error(&e)?,
        }
        let _ = redact_url(&url);
        let _ = Dialect::from_url(&url);
        if let Err(e) = SqlBackend::from_url(&url, SqlOptions::default()) {
            config_error(&e)?;
        }
    }

    #[test]
    fn sql_urls_round_trip(
        mysql in any::<bool>(),
        user in user(),
        password in password(),
        (host, port) in (host(), 1u16..),
        db in "[a-z][a-z0-9_]{0,10}",
    ) {
        let scheme = if mysql { "mysql" } else { "postgres" };
        let url = format!("{scheme}://{user}:{}@{host}:{port}/{db}", enc(&password));
        let c = Config::from_url(&url).unwrap();
        prop_assert_eq!(c.backend_kind(), if mysql { BackendKind::Mysql } else { BackendKind::Postgres });
        prop_assert_eq!(c.hosts(), vec![format!("{host}:{port}")]);
        prop_assert_eq!(c.database(), Some(db.as_str()));
        let shown = format!("{:?} {:?}", c, c.redacted_url());
        prop_assert!(!shown.contains(&password) && !shown.contains(&enc(&password)), "{}", shown);
        // The driver accepts it too (no I/O happens).
        let b = SqlBackend::from_url(&url, SqlOptions::default()).unwrap();
        let shown = format!("{b:?}");
        prop_assert!(!shown.contains(&enc(&password)), "{}", shown);
    }

    #[test]
    fn redis_urls_round_trip(
        userinfo in proptest::option::of((proptest::option::of(user()), password())),
        (host, port) in (host(), 1u16..),
        db in proptest::option::of(0u32..16),
    ) {
        let ui = userinfo.as_ref().map(|(u, p)| format!("{}:{}@", u.clone().unwrap_or_default(), enc(p)));
        let path = db.map(|d| format!("/{d}")).unwrap_or_default();
        let url = format!("redis://{}{host}:{port}{path}", ui.unwrap_or_default());
        let c = Config::from_url(&url).unwrap();
        prop_assert_eq!(c.backend_kind(), BackendKind::Redis);
        prop_assert_eq!(c.hosts(), vec![format!("{host}:{port}")]);
        if let Some((_, p)) = &userinfo {
            let shown = format!("{c:?}");
            prop_assert!(!shown.contains(&enc(p)) && shown.contains("***"), "{}", shown);
        }
        // The same URL over TLS parses alike (its files come from the query or SIMBA_REDIS_TLS_*).
        let tls = Config::from_url(&url.replacen("redis://", "rediss://", 1)).unwrap();
        prop_assert_eq!(tls.hosts(), vec![format!("{host}:{port}")]);
        if let Some((_, p)) = &userinfo {
            let shown = format!("{tls:?}");
            prop_assert!(!shown.contains(&enc(p)), "{}", shown);
        }
    }

    #[test]
    fn redis_cluster_urls_round_trip(nodes in hosts(4), password in proptest::option::of(password())) {
        let list: Vec<String> = nodes.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        let ui = password.as_ref().map(|p| format!("u:{}@", enc(p))).unwrap_or_default();
        let c = Config::from_url(&format!("redis+cluster://{ui}{}", list.join(","))).unwrap();
        prop_assert_eq!(c.backend_kind(), BackendKind::RedisCluster);
        prop_assert_eq!(c.hosts(), list);
        if let Some(p) = &password {
            let shown = format!("{c:?}");
            prop_assert!(!shown.contains(&enc(p)), "{}", shown);
        }
    }

    #[test]
    fn zookeeper_urls_round_trip(
        nodes in hosts(3),
        root in proptest::option::of("(/[a-z0-9_-]{1,6}){1,3}"),
        auth in proptest::option::of((user(), password())),
    ) {
        let list: Vec<String> = nodes.iter().map(|(h, p)| format!("{h}:{p}")).collect();
        let ui = auth.as_ref().map(|(u, p)| format!("{u}:{}@", enc(p))).unwrap_or_default();
        let url = format!("zookeeper://{ui}{}{}", list.join(","), root.clone().unwrap_or_default());
        let c = Config::from_url(&url).unwrap();
        prop_assert_eq!(c.backend_kind(), BackendKind::Zookeeper);
        prop_assert_eq!(c.hosts(), list);
        prop_assert_eq!(c.zookeeper_root(), root.as_deref().unwrap_or(simba::backends::zookeeper::DEFAULT_ROOT));
        prop_assert_eq!(c.zookeeper_auth_scheme(), auth.as_ref().map(|_| "digest"));
        if let Some((_, p)) = &auth {
            let shown = format!("{c:?}");
            prop_assert!(!shown.contains(&enc(p)), "{}", shown);
        }
    }

    #[test]
    fn memory_urls(rest in "[a-z/:@]{0,6}") {
        match Config::from_url(&format!("memory://{rest}")) {
            Ok(c) => {
                prop_assert!(rest.is_empty() || rest == "/");
                prop_assert_eq!(c.backend_kind(), BackendKind::Memory);
            }
            Err(e) => config_error(&e)?,
        }
    }

    /// Whatever the password holds (unencoded `@`, `/`, `?`, `#`, `:` included), a redacted URL
    /// never shows it, nor its encoded form; libpq `key=value` lists neither.
    #[test]
    fn redaction_hides_any_password(
        scheme in proptest::sample::select(SCHEMES),
        user in user(),
        password in password(),
        host in host(),
        tail in "(/[a-z0-9]{0,6})?(\\?[a-z]{1,5}=[a-z0-9]{0,5})?",
    ) {
        for pw in [password.clone(), enc(&password)] {
            let url = format!("{scheme}://{user}:{pw}@{host}{tail}");
            let shown = redact_url(&url);
            prop_assert!(!shown.contains("PW"), "{} -> {}", url, shown);
            match Config::from_url(&url) {
                Ok(c) => prop_assert!(!format!("{c:?}").contains("PW"), "{} -> {:?}", url, c),
                Err(e) => prop_assert!(!simba::display_chain(&e).contains("PW"), "{} -> {}", url, e),
            }
            // (An unencoded '&' would end the value: the rest is another parameter.)
            let pw = pw.replace('&', "%26");
            let q = format!("{scheme}://{host}{}?sslmode=disable&password={pw}", tail.split('?').next().unwrap_or(""));
            prop_assert!(!redact_url(&q).contains("PW"), "{} -> {}", q, redact_url(&q));
        }
        let no_space: String = password.chars().filter(|c| !c.is_whitespace()).collect();
        let kv = format!("host={host} password={no_space} user={user}");
        prop_assert!(!redact_url(&kv).contains("PW"), "{}", redact_url(&kv));
        // In a quoted libpq value, a quote or backslash would be escaped; leave them out.
        let plain: String = no_space.chars().filter(|c| !"'\\".contains(*c)).collect();
        let quoted = format!("host={host} password='{plain} x {plain}' user={user}");
        prop_assert!(!redact_url(&quoted).contains("PW"), "{}", redact_url(&quoted));
    }
}

// ---------------------------------------------------------------- SIMBA_* values

const VARS: &[&str] = simba::config::ENV_VARS;

proptest! {
    #![proptest_config(cases(512))]

    /// Any value of any variable (with a URL of each backend) gives a configuration or an
    /// `InvalidConfig` error; never a panic.
    #[test]
    fn any_variable_value_is_accepted_or_rejected_cleanly(
        var in proptest::sample::select(VARS),
        value in prop_oneof![".{0,24}", "[0-9]{1,25}(ns|us|ms|s|m|h|d|%)?", "-?[0-9]{0,3}\\.?[0-9]{0,4}(e[0-9]{1,4})?%?"],
        url in proptest::sample::select(&[
            "memory://",
            "postgres://u@h/db",
            "mysql://u@h/db",
            "redis://h:6379",
            "redis+cluster://h:1,h:2",
            "zookeeper://h:2181/r",
        ][..]),
    ) {
        let mut pairs = vec![(var, value.clone())];
        if var != "SIMBA_URL" {
            pairs.push(("SIMBA_URL", url.to_string()));
        }
        match ConfigBuilder::from_vars(vars(pairs)).and_then(ConfigBuilder::build) {
            Ok(c) => {
                let _ = format!("{c:?}");
            }
            Err(e) => config_error(&e)?,
        }
    }

    /// Whatever a secret-bearing setting holds, its secret part (everything after the first ':',
    /// or all of it without one) shows neither in the configuration nor in its error.
    #[test]
    fn secret_settings_are_never_echoed(
        var in proptest::sample::select(&["SIMBA_ZOOKEEPER_AUTH", "SIMBA_ZOOKEEPER_SASL"][..]),
        prefix in "(digest:|[a-z@]{1,6}:|:)?([a-z]{1,6}:)?",
        pw in password(),
        url in proptest::sample::select(&["zookeeper://h:2181/r", "memory://"][..]),
    ) {
        let pw = pw.replace(':', "_");
        let b = ConfigBuilder::from_vars(vars(vec![("SIMBA_URL", url.into()), (var, format!("{prefix}{pw}"))]));
        let shown = match b.and_then(ConfigBuilder::build) {
            Ok(c) => format!("{c:?} {:?}", c.warnings()),
            Err(e) => format!("{} {e:?}", simba::display_chain(&e)),
        };
        prop_assert!(!shown.contains(&pw), "{}", shown);
    }

    #[test]
    fn durations_round_trip(ms in 0u64..(1u64 << 40), spaces in " {0,2}") {
        let d = Duration::from_millis(ms);
        prop_assert_eq!(parse_duration("X", &format!("{spaces}{ms}ms{spaces}")).unwrap(), d);
        prop_assert_eq!(parse_duration("X", &humantime::format_duration(d).to_string()).unwrap(), d);
        if ms % 1000 == 0 {
            prop_assert_eq!(parse_duration("X", &format!("{}s", ms / 1000)).unwrap(), d);
        }
        // A bare number has no unit: an error naming the variable.
        let e = parse_duration("SIMBA_QUERY_TIMEOUT", &ms.to_string()).unwrap_err();
        prop_assert!(e.to_string().contains("SIMBA_QUERY_TIMEOUT"), "{}", e);
    }

    #[test]
    fn any_duration_text_parses_or_names_the_variable(s in ".{0,30}") {
        if let Err(e) = parse_duration("SIMBA_LEASE_DURATION", &s) {
            config_error(&e)?;
            prop_assert!(e.to_string().contains("SIMBA_LEASE_DURATION"));
        }
    }

    /// The timings reach the session options unchanged (whatever `SessionOptions` then decides
    /// about their combination is its own business, tested with it).
    #[test]
    fn timings_and_drift_round_trip(
        lease_s in 1u64..600,
        drift_permille in 0u32..100,
        as_percent in any::<bool>(),
    ) {
        let drift = f64::from(drift_permille) / 1000.0;
        let drift_text = if as_percent { format!("{}%", f64::from(drift_permille) / 10.0) } else { drift.to_string() };
        let got = ConfigBuilder::from_vars(vars(vec![
            ("SIMBA_URL", "memory://".into()),
            ("SIMBA_LEASE_DURATION", format!("{lease_s}s")),
            ("SIMBA_DRIFT", drift_text.clone()),
        ]))
        .and_then(ConfigBuilder::build);
        match got {
            Ok(c) => {
                let o = c.session_options();
                prop_assert_eq!(o.lease_duration(), Duration::from_secs(lease_s));
                prop_assert!((o.drift() - drift).abs() < 1e-9, "{} -> {}", drift_text, o.drift());
            }
            Err(e) => config_error(&e)?,
        }
    }

    #[test]
    fn booleans_in_any_case(word in proptest::sample::select(&["1", "true", "yes", "on", "0", "false", "no", "off"][..]), upper in proptest::collection::vec(any::<bool>(), 5), pad in " {0,2}") {
        let value: String = word
            .chars()
            .zip(upper.iter().cycle())
            .map(|(c, u)| if *u { c.to_ascii_uppercase() } else { c })
            .collect();
        let r = ConfigBuilder::from_vars(vars(vec![
            ("SIMBA_URL", "memory://".into()),
            ("SIMBA_MEMORY_ENABLED", format!("{pad}{value}{pad}")),
        ]))
        .and_then(ConfigBuilder::build);
        let on = matches!(word, "1" | "true" | "yes" | "on");
        prop_assert_eq!(r.is_ok(), on, "{:?}", r.err());
    }

    #[test]
    fn counts_round_trip(n in prop_oneof![0u32..=1000, any::<u32>()], pad in " {0,2}") {
        // Counts parse as any u32; the backend's own bound (at most 1000 replicas) is its
        // options' rule, reported as InvalidConfig.
        let c = ConfigBuilder::from_vars(vars(vec![
            ("SIMBA_URL", "redis://h:6379".into()),
            ("SIMBA_REDIS_WAIT_REPLICAS", format!("{pad}{n}{pad}")),
        ]))
        .and_then(ConfigBuilder::build);
        match c {
            Ok(c) => prop_assert_eq!(c.redis_wait_replicas(), n),
            Err(e) => {
                prop_assert!(n > 1000, "{}", e);
                config_error(&e)?;
            }
        }
        let e = ConfigBuilder::from_vars(vars(vec![
            ("SIMBA_URL", "redis://h:6379".into()),
            ("SIMBA_REDIS_WAIT_REPLICAS", format!("-{}", u64::from(n) + 1)),
        ]))
        .unwrap_err();
        prop_assert!(e.to_string().contains("SIMBA_REDIS_WAIT_REPLICAS"), "{}", e);
    }

    #[test]
    fn enums_round_trip(kind in proptest::sample::select(&BackendKind::ALL[..]), upper in any::<bool>(), s in ".{0,16}") {
        let name = if upper { kind.name().to_ascii_uppercase() } else { kind.name().to_string() };
        prop_assert_eq!(name.parse::<BackendKind>().unwrap(), kind);
        for r in [s.parse::<BackendKind>().err(), s.parse::<EvictionCheck>().err(), s.parse::<AclMode>().err()]
            .into_iter()
            .flatten()
        {
            config_error(&r)?;
        }
    }
}

// ---------------------------------------------------------------- names, ids, metadata, ZooKeeper

proptest! {
    #![proptest_config(cases(512))]

    #[test]
    fn names_are_valid_exactly_by_the_rule(s in prop_oneof!["[A-Za-z0-9._:-]{0,130}", ".{0,140}"]) {
        let ok = !s.is_empty()
            && s.chars().count() <= simba::MAX_NAME_LEN
            && s.chars().all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c))
            && s != "."
            && s != "..";
        match Name::new(&s) {
            Ok(n) => {
                prop_assert!(ok);
                prop_assert_eq!(n.as_str(), s.as_str());
                prop_assert_eq!(n.to_string(), s);
            }
            Err(e) => {
                prop_assert!(!ok, "{:?} rejected: {}", s, e);
                prop_assert_eq!(e.kind(), ErrorKind::InvalidName);
                // The value is shown cut to 140 characters (each escaped at most as `\u{10ffff}`).
                prop_assert!(e.to_string().chars().count() < 140 * 10 + 200, "{}", e);
            }
        }
    }

    #[test]
    fn session_ids_round_trip(v in any::<u64>(), s in ".{0,40}") {
        let id = SessionId::from_u64(v);
        prop_assert_eq!(SessionId::parse(id.as_str()).unwrap(), id);
        if let Ok(p) = SessionId::parse(&s) {
            prop_assert_eq!(p.as_str(), s.as_str());
        }
    }

    /// Metadata of any text up to the limit is kept byte for byte, by the configuration and by
    /// a backend; longer metadata is a clear error.
    #[test]
    fn metadata_round_trips(m in prop_oneof![".{0,64}", "[a-z\u{e9}\u{1f600}]{250,300}"]) {
        let c = ConfigBuilder::from_vars(vars(vec![("SIMBA_URL", "memory://".into()), ("SIMBA_METADATA", m.clone())]))
            .and_then(ConfigBuilder::build);
        if m.len() > simba::MAX_METADATA_LEN {
            config_error(&c.unwrap_err())?;
            return Ok(());
        }
        // Blank values count as unset.
        let want = if m.trim().is_empty() { "" } else { m.as_str() };
        let options = c.unwrap().session_options();
        prop_assert_eq!(options.metadata(), want);
        let b = MemoryBackend::new();
        let g = b.open_session(Duration::from_secs(5), &m).unwrap();
        let group = Name::new("g").unwrap();
        b.join(&g.id, &group).unwrap();
        let members = b.members(&group).unwrap();
        prop_assert_eq!(members[0].metadata.as_str(), m.as_str());
    }

    #[test]
    fn zookeeper_auth_and_acl_entries(s in ".{0,30}", scheme in "[a-z]{1,8}", id in "[a-z0-9:._-]{1,16}", perms in "[cdrwa]{1,5}") {
        if let Err(e) = ZookeeperAuth::parse(&s) {
            config_error(&e)?;
        }
        if let Err(e) = AclEntry::parse(&s) {
            config_error(&e)?;
        }
        let _ = s.parse::<AclMode>();
        let text = format!("{scheme}:{id}:{perms}");
        if let Ok(entry) = AclEntry::parse(&text) {
            prop_assert_eq!(AclEntry::parse(&entry.to_string()).unwrap(), entry);
        }
        match ZookeeperAuth::parse(&format!("{scheme}:{id}")) {
            Ok(auth) => prop_assert_eq!(auth.scheme(), scheme.as_str()),
            Err(e) => config_error(&e)?,
        }
    }
}
