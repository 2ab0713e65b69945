//! `simba::fence::redis` on a real Redis and a real Redis Cluster: concurrent fenced writers with
//! interleaved tokens (only non-decreasing tokens land, a stale write never lands, the same term
//! keeps writing), `SET`/`HSET`, and a user script's keys.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex};
use std::thread;
use std::time::Duration;

use redis::ConnectionLike;
use serial_test::serial;
use simba::fence::{self, FenceError};
use simba::Token;

mod support;
#[path = "fence/tokens.rs"]
mod tokens;

use tokens::Tokens;

const THREADS: u64 = 4;
const ATTEMPTS: u64 = 50;

static LOG: LazyLock<fence::redis::Script> =
    LazyLock::new(|| fence::redis::Script::new(include_str!("lua/fence_test_log.lua")));

#[derive(Clone, Copy, Debug)]
enum Mode {
    Standalone,
    Cluster,
}

fn connect(mode: Mode) -> Box<dyn ConnectionLike> {
    match mode {
        Mode::Standalone => {
            let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
            let c = redis::Client::open(url.as_str())
                .and_then(|c| c.get_connection_with_timeout(Duration::from_secs(2)))
                .unwrap_or_else(|e| panic!("Redis at {url}: {e} (run `scripts/services up`)"));
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            Box::new(c)
        }
        Mode::Cluster => {
            let url = support::env_or(
                "SIMBA_TEST_REDIS_CLUSTER_URL",
                "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002",
            );
            let nodes: Vec<String> =
                url.trim_start_matches("redis+cluster://").split(',').map(|h| format!("redis://{h}")).collect();
            let c = redis::cluster::ClusterClient::builder(nodes)
                .connection_timeout(Duration::from_secs(2))
                .response_timeout(Duration::from_secs(5))
                .build()
                .and_then(|c| c.get_connection())
                .unwrap_or_else(|e| panic!("Redis Cluster at {url}: {e} (run `scripts/services up`)"));
            Box::new(c)
        }
    }
}

fn t(v: u64) -> Token {
    Token::new(v).unwrap()
}

fn get<T: redis::FromRedisValue>(con: &mut dyn ConnectionLike, cmd: &str, key: &str) -> T {
    redis::cmd(cmd).arg(key).query(con).unwrap()
}

fn concurrent_writers(mode: Mode) {
    let resource = support::unique("fence");
    let (log, last) = (format!("{{{resource}}}:log"), format!("{{{resource}}}:last"));
    let term = Arc::new(AtomicU64::new(1));
    let results = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (term, results, resource, log, last) =
                (term.clone(), results.clone(), resource.clone(), log.clone(), last.clone());
            thread::spawn(move || {
                let mut con = connect(mode);
                let mut tokens = Tokens::new(term, i);
                for n in 0..ATTEMPTS {
                    let token = tokens.pick(n);
                    let attempt = i * 1000 + n;
                    let r = LOG
                        .prepare(&resource, t(token))
                        .key(&log)
                        .key(&last)
                        .arg((attempt, token))
                        .invoke::<u64>(&mut *con);
                    results.lock().unwrap().push((attempt, token, r));
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let mut con = connect(mode);
    let entries: Vec<String> = redis::cmd("LRANGE").arg(&log).arg(0).arg(-1).query(&mut *con).unwrap();
    let landed: Vec<(u64, u64)> = entries
        .iter()
        .map(|e| {
            let (a, t) = e.split_once(':').unwrap();
            (a.parse().unwrap(), t.parse().unwrap())
        })
        .collect();
    let tokens: Vec<u64> = landed.iter().map(|&(_, t)| t).collect();
    assert!(tokens.windows(2).all(|w| w[0] <= w[1]), "{mode:?}: tokens went down in write order: {tokens:?}");
    let max = tokens.iter().copied().max().unwrap();
    let (mut accepted, mut stale, mut same_term) = (0, 0, 0);
    let results = std::mem::take(&mut *results.lock().unwrap());
    for (attempt, token, r) in &results {
        let wrote = landed.iter().any(|(a, _)| a == attempt);
        match r {
            Ok(_) => {
                accepted += 1;
                assert!(wrote, "{mode:?}: accepted attempt {attempt} did not land");
            }
            Err(FenceError::Stale { seen: Some(seen), token: tk, .. }) => {
                stale += 1;
                assert_eq!(tk.get(), *token);
                assert!(!wrote, "{mode:?}: stale attempt {attempt} (token {token}) landed");
                assert!(seen.get() > *token && seen.get() <= max, "{mode:?}: token {token}, seen {seen}");
            }
            Err(e) => panic!("{mode:?}: attempt {attempt}: {}", simba::display_chain(e as &dyn std::error::Error)),
        }
    }
    same_term += tokens.windows(2).filter(|w| w[0] == w[1]).count();
    assert_eq!(accepted, landed.len());
    assert_eq!(fence::redis::seen(&mut *con, &resource).unwrap(), Some(t(max)));
    assert!(stale > 0 && same_term > 0, "{mode:?}: {stale} stale, {same_term} same-term repeats");
    // The last write is the last log entry's attempt.
    let last_attempt: u64 = get::<String>(&mut *con, "GET", &last).parse().unwrap();
    assert_eq!(last_attempt, landed.last().unwrap().0);
}

fn set_and_hset(mode: Mode) {
    let mut con = connect(mode);
    let resource = support::unique("fence");
    let key = format!("{{{resource}}}:value");
    let hash = format!("{{{resource}}}:hash");
    fence::redis::set(&mut *con, &resource, t(5), &key, "five").unwrap();
    fence::redis::set(&mut *con, &resource, t(5), &key, "five again").unwrap();
    let e = fence::redis::set(&mut *con, &resource, t(4), &key, "four").unwrap_err();
    assert!(matches!(&e, FenceError::Stale { token, seen: Some(s), .. } if token.get() == 4 && s.get() == 5), "{e:?}");
    assert_eq!(get::<String>(&mut *con, "GET", &key), "five again", "{mode:?}: a stale SET landed");
    assert_eq!(fence::redis::hset(&mut *con, &resource, t(6), &hash, &[("a", "1"), ("b", "2")]).unwrap(), 2);
    let e = fence::redis::hset(&mut *con, &resource, t(5), &hash, &[("a", "stale")]).unwrap_err();
    assert!(e.is_stale(), "{e:?}");
    let a: String = redis::cmd("HGET").arg(&hash).arg("a").query(&mut *con).unwrap();
    assert_eq!(a, "1", "{mode:?}: a stale HSET landed");
    fence::redis::check(&mut *con, &resource, t(7)).unwrap();
    assert!(fence::redis::set(&mut *con, &resource, t(6), &key, "six").unwrap_err().is_stale());
    assert_eq!(fence::redis::seen(&mut *con, &resource).unwrap(), Some(t(7)));
    assert_eq!(get::<String>(&mut *con, "GET", &fence::redis::fence_key(&resource).unwrap()), "7");
    // Tokens are compared exactly, also beyond 2^53 (Lua numbers are doubles).
    let big = (1u64 << 60) + 1;
    fence::redis::set(&mut *con, &resource, t(big), &key, "big").unwrap();
    assert!(fence::redis::set(&mut *con, &resource, t(big - 1), &key, "x").unwrap_err().is_stale());
    assert!(fence::redis::set(&mut *con, &resource, t(u64::MAX), &key, "max").is_ok());
    assert_eq!(get::<String>(&mut *con, "GET", &key), "max");
    // A body's own error comes back as a database error with Redis's words.
    let bad = fence::redis::Script::new("return redis.call('INCR', KEYS[1])");
    let e = bad.prepare(&resource, t(u64::MAX)).key(&key).invoke::<i64>(&mut *con).unwrap_err();
    assert!(matches!(e, FenceError::Database { retryable: false, .. }), "{e:?}");
    assert!(simba::display_chain(&e).contains("not an integer"), "{}", simba::display_chain(&e));
}

fn corrupt_fence_key_is_an_error(mode: Mode) {
    let mut con = connect(mode);
    let resource = support::unique("fence");
    let fk = fence::redis::fence_key(&resource).unwrap();
    let _: () = redis::cmd("SET").arg(&fk).arg("garbage").query(&mut *con).unwrap();
    let e = fence::redis::check(&mut *con, &resource, t(1)).unwrap_err();
    assert!(simba::display_chain(&e).contains("does not hold a token"), "{}", simba::display_chain(&e));
    assert!(matches!(fence::redis::seen(&mut *con, &resource), Err(FenceError::Invalid { .. })));
}

/// Each case on standalone Redis and on the Cluster, serial per server.
macro_rules! both_modes {
    ($($case:ident: $standalone:ident, $cluster:ident;)*) => {$(
        #[test]
        #[serial(redis)]
        fn $standalone() {
            $case(Mode::Standalone);
        }

        #[test]
        #[serial(redis_cluster)]
        fn $cluster() {
            $case(Mode::Cluster);
        }
    )*};
}

both_modes! {
    concurrent_writers: redis_concurrent_writers, redis_cluster_concurrent_writers;
    set_and_hset: redis_set_and_hset, redis_cluster_set_and_hset;
    corrupt_fence_key_is_an_error: redis_corrupt_fence_key, redis_cluster_corrupt_fence_key;
}
