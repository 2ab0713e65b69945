//! Property tests of the public option builders (issue 14, finding 6): any duration (zero,
//! nanoseconds, `Duration::MAX`, anything in between) and any float (NaN, ±infinity, negative,
//! ≥ 1, subnormal) never panics; what a builder does not allow is a clear `InvalidConfig` naming
//! the value, and everything it allows builds. `SessionOptions` is checked against an oracle
//! written from its documented rules.

mod support;

use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use simba::{Config, Coordinator, ErrorKind, MemoryBackend, Name, SessionOptions};

/// Durations weighted towards the edges.
fn duration() -> impl Strategy<Value = Duration> {
    prop_oneof![
        Just(Duration::ZERO),
        Just(Duration::MAX),
        Just(Duration::from_nanos(1)),
        (0u64..1_000_000).prop_map(Duration::from_nanos),
        (0u64..100_000).prop_map(Duration::from_millis),
        (0u64..200_000).prop_map(Duration::from_secs),
        (any::<u64>(), 0u32..1_000_000_000).prop_map(|(s, n)| Duration::new(s, n)),
    ]
}

/// Floats weighted towards the edges.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        Just(0.5),
        Just(1.0),
        Just(f64::MIN_POSITIVE / 2.0),
        Just(f64::EPSILON),
        -2.0..2.0f64,
        any::<f64>(),
    ]
}

fn worker_threads() -> impl Strategy<Value = usize> {
    prop_oneof![Just(0usize), Just(1), Just(4096), Just(4097), Just(usize::MAX), any::<usize>()]
}

/// The documented rules of `SessionOptionsBuilder::build`.
fn allowed(
    lease: Option<Duration>,
    renew: Option<Duration>,
    drift: Option<f64>,
    query: Option<Duration>,
    workers: Option<usize>,
    poll: Option<Duration>,
) -> bool {
    let l = lease.unwrap_or(Duration::from_secs(15));
    let r = match (renew, lease) {
        (Some(r), _) => r,
        (None, Some(l)) => (l / 3).min(Duration::from_secs(5)),
        (None, None) => Duration::from_secs(5),
    };
    let d = drift.unwrap_or(0.01);
    let q = query.unwrap_or(r);
    let w = workers.unwrap_or(64);
    (Duration::from_millis(100)..=Duration::from_secs(24 * 3600)).contains(&l)
        && !r.is_zero()
        && r <= l / 2
        && (0.0..0.5).contains(&d)
        && !q.is_zero()
        && q <= l
        && (1..=4096).contains(&w)
        && poll.is_none_or(|p| !p.is_zero())
}

fn assert_config_error(e: &simba::Error) {
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(!e.to_string().is_empty());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2_000, ..ProptestConfig::default() })]

    #[test]
    fn session_options_builder_never_panics_and_follows_its_rules(
        lease in proptest::option::of(duration()),
        renew in proptest::option::of(duration()),
        drift in proptest::option::of(float()),
        query in proptest::option::of(duration()),
        workers in proptest::option::of(worker_threads()),
        poll in proptest::option::of(duration()),
    ) {
        let mut b = SessionOptions::builder();
        if let Some(d) = lease { b = b.lease_duration(d); }
        if let Some(d) = renew { b = b.renew_interval(d); }
        if let Some(d) = drift { b = b.drift(d); }
        if let Some(d) = query { b = b.query_timeout(d); }
        if let Some(n) = workers { b = b.worker_threads(n); }
        if let Some(d) = poll { b = b.poll_interval(d); }
        let expected = allowed(lease, renew, drift, query, workers, poll);
        match b.build() {
            Ok(o) => {
                prop_assert!(expected, "built {o:?}, which the rules do not allow");
                prop_assert!(o.renew_interval() <= o.lease_duration() / 2);
                prop_assert!(o.query_timeout() <= o.lease_duration());
                let most = (o.renew_interval() / 2).max(Duration::from_millis(1));
                prop_assert!(o.retry_interval() >= Duration::from_millis(1) && o.retry_interval() <= most);
            }
            Err(e) => {
                prop_assert!(!expected, "refused allowed values: {e}");
                assert_config_error(&e);
            }
        }
    }

    #[test]
    fn a_bad_drift_is_refused_naming_the_value_and_the_range(drift in float()) {
        let r = SessionOptions::builder().drift(drift).build();
        if (0.0..0.5).contains(&drift) {
            prop_assert!(r.is_ok());
        } else {
            let e = r.unwrap_err();
            assert_config_error(&e);
            let text = e.to_string();
            prop_assert!(text.contains(&format!("drift {drift}")), "{text}");
            prop_assert!(text.contains("[0, 0.5)"), "{text}");
        }
    }

    #[test]
    fn config_builder_never_panics(
        lease in proptest::option::of(duration()),
        renew in proptest::option::of(duration()),
        drift in proptest::option::of(float()),
        query in proptest::option::of(duration()),
        workers in proptest::option::of(worker_threads()),
        poll in proptest::option::of(duration()),
        purge in proptest::option::of(duration()),
        zk in proptest::option::of(duration()),
        url in prop_oneof![Just("memory://"), Just("postgres://u@h/db"), Just("zookeeper://h:2181/r")],
    ) {
        let mut b = Config::builder().url(url);
        if let Some(d) = lease { b = b.lease_duration(d); }
        if let Some(d) = renew { b = b.renew_interval(d); }
        if let Some(d) = drift { b = b.drift(d); }
        if let Some(d) = query { b = b.query_timeout(d); }
        if let Some(n) = workers { b = b.worker_threads(n); }
        if let Some(d) = poll { b = b.poll_interval(d); }
        #[cfg(any(feature = "postgres", feature = "mysql"))]
        if let Some(d) = purge { b = b.purge_interval(d); }
        #[cfg(feature = "zookeeper")]
        if let Some(d) = zk { b = b.zookeeper_connection_timeout(d); }
        let _ = (purge, zk); // used only by the backends compiled in
        if let Err(e) = b.build() {
            assert_config_error(&e);
        }
    }

    #[cfg(all(feature = "redis", any(feature = "postgres", feature = "mysql"), feature = "zookeeper"))]
    #[test]
    fn backend_option_builders_never_panic(
        a in duration(),
        b in duration(),
        c in duration(),
        n in any::<u32>(),
        m in any::<usize>(),
    ) {
        use simba::backends::redis::RedisOptions;
        use simba::backends::sql::SqlOptions;
        use simba::backends::zookeeper::ZookeeperOptions;
        let sql = SqlOptions::builder().query_timeout(a).connect_timeout(b).purge_interval(c).pool_size(n).build();
        if let Err(e) = sql { assert_config_error(&e); }
        let redis = RedisOptions::builder().query_timeout(a).max_connections(m).wait_replicas(n).build();
        if let Err(e) = redis { assert_config_error(&e); }
        let zk = ZookeeperOptions::default().query_timeout(a).connection_timeout(b).validate();
        if let Err(e) = zk { assert_config_error(&e); }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// The coordinator's timed calls take any timeout (`Duration::MAX`: forever) without panicking.
    #[test]
    fn coordinator_lock_timeout_takes_any_duration(timeout in duration()) {
        let coordinator = coordinator();
        let name = Name::new(support::unique("any-timeout")).unwrap();
        let lease = coordinator.lock_timeout(&name, timeout).unwrap();
        // A free lease is taken at the first attempt given the time for it. (A zero timeout gives
        // the attempt no time, so its reply counts as late: that is the session's rule.)
        if timeout >= Duration::from_secs(1) {
            prop_assert!(lease.is_some(), "a free lease not taken within {timeout:?}");
        }
    }
}

fn coordinator() -> &'static Coordinator {
    static C: std::sync::OnceLock<Coordinator> = std::sync::OnceLock::new();
    C.get_or_init(|| Coordinator::start(Arc::new(MemoryBackend::new()), SessionOptions::default()).unwrap())
}
