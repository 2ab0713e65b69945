//! The shipped simulation's Redis Cluster model (issue #21 item 1; `simba::sim::shipped::redis`):
//! the real `RedisBackend` in Cluster mode, with the real sessions, leases, elections and groups on
//! shuttle threads, over three simulated masters that run the shipped `lua/` scripts in a real Lua
//! 5.1 interpreter, each on its own clock, every call with a seeded fate (lost, stalled, reply
//! lost, delivered after its deadline, node partitioned).
//!
//! Built only with `--features sim-redis` **and** `--cfg simba_explore`:
//! `CARGO_TARGET_DIR=target/explore RUSTFLAGS="--cfg simba_explore" cargo test --features sim-redis
//! --test sim_shipped_cluster`. The node tests compare the simulated node with the real
//! `redis-server` (`SIMBA_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`): they fail when it is
//! not running (`scripts/services up`). `SIMBA_SIM_SEEDS` sets the sweep's seeds (default 1,000);
//! `SIMBA_SIM_SEED=<seed>` (with `SIMBA_SIM_SCENARIO=<name>`) replays one seed.
#![cfg(simba_explore)]

use std::ops::Range;
use std::time::Instant;

use redis::Value;
use simba::explore::Bug;
use simba::sim::shipped::redis::{Node, Reply};
use simba::sim::shipped::{self, Scenario, Workload};
use simba::sim::Invariant;

#[path = "support/sim.rs"]
mod sim_support;
use sim_support::env_u64;

// ----- the simulated node against the real redis-server -----

const FIXTURES: [(&str, &str, usize); 9] = [
    ("conversions", include_str!("lua/sim/conversions.lua"), 0),
    ("reply_to_lua", include_str!("lua/sim/reply_to_lua.lua"), 1),
    ("numbers_as_args", include_str!("lua/sim/numbers_as_args.lua"), 3),
    ("commands", include_str!("lua/sim/commands.lua"), 4),
    ("wrong_type", include_str!("lua/sim/wrong_type.lua"), 1),
    ("unknown_command", include_str!("lua/sim/unknown_command.lua"), 0),
    ("error_reply", include_str!("lua/sim/error_reply.lua"), 0),
    ("status_reply", include_str!("lua/sim/status_reply.lua"), 0),
    ("bad_argument", include_str!("lua/sim/bad_argument.lua"), 0),
];

fn real_server() -> redis::Connection {
    let url = std::env::var("SIMBA_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    redis::Client::open(url.as_str())
        .and_then(|c| c.get_connection_with_timeout(std::time::Duration::from_secs(2)))
        .unwrap_or_else(|e| panic!("no redis-server at {url} ({e}): run scripts/services up"))
}

/// Every fixture gives the same reply on the simulated node as on the real server (an error on
/// both, when it fails).
#[test]
fn node_replies_as_the_real_server() {
    let mut con = real_server();
    let tag = format!("simba-simtest-{}", std::process::id());
    for (name, code, nkeys) in FIXTURES {
        let keys: Vec<String> = (0..nkeys).map(|i| format!("{tag}:{name}:{i}")).collect();
        let mut del = redis::cmd("DEL");
        del.arg(&keys).arg(keys.iter().map(|k| format!("{k}:h")).collect::<Vec<_>>());
        if !keys.is_empty() {
            let _: redis::RedisResult<Value> = del.query(&mut con);
        }
        let real: Result<Value, String> =
            redis::cmd("EVAL").arg(code).arg(nkeys).arg(&keys).query(&mut con).map_err(|e| e.to_string());
        let mut node = Node::new(1_750_000_000_000_000).expect("a Lua state");
        let sim = node.eval(code, &keys, &[]).into_value();
        match (&real, &sim) {
            (Ok(r), Ok(s)) => assert_eq!(r, s, "{name}: the real server and the simulated node differ"),
            (Err(_), Err(_)) => {}
            _ => panic!("{name}: the real server answered {real:?}, the simulated node {sim:?}"),
        }
        println!("{name}: {real:?}");
    }
}

/// The conversion rules, pinned (what the real server answered, checked by the test above).
#[test]
fn node_conversion_rules() {
    let mut node = Node::new(1_750_000_000_000_000).expect("a Lua state");
    let r = node.eval(FIXTURES[0].1, &[], &[]);
    let b = |s: &str| Reply::Bulk(s.as_bytes().to_vec());
    assert_eq!(
        r,
        Reply::Array(vec![
            Reply::Int(1),
            Reply::Int(2),
            Reply::Int(-2),
            b("a"),
            Reply::Nil,
            Reply::Int(1),
            Reply::Array(vec![Reply::Int(3), Reply::Array(vec![Reply::Int(4), b("x")]), Reply::Int(0)]),
        ])
    );
    assert!(matches!(node.eval(FIXTURES[5].1, &[], &[]), Reply::Error(e) if e.contains("Unknown Redis command")));
    assert_eq!(node.eval(FIXTURES[7].1, &[], &[]), Reply::Status("FINE".into()));
    // Lazy expiry on the node's own clock: PTTL counts down with it, the key is gone past it.
    assert_eq!(node.command(&["SET", "k", "v"]), Reply::Status("OK".into()));
    assert_eq!(node.command(&["PEXPIRE", "k", "100"]), Reply::Int(1));
    node.set_now_us(1_750_000_000_060_000);
    assert_eq!(node.command(&["PTTL", "k"]), Reply::Int(40));
    node.set_now_us(1_750_000_000_100_000);
    assert_eq!(node.command(&["EXISTS", "k"]), Reply::Int(1), "Redis keeps a key until its clock is past the expiry");
    node.set_now_us(1_750_000_000_101_000);
    assert_eq!(node.command(&["EXISTS", "k"]), Reply::Int(0));
    assert_eq!(node.command(&["TIME"]), Reply::Array(vec![b("1750000000"), b("101000")]), "TIME is the node's clock");
}

// ----- the simulation -----

fn replay_hint(sc: &Scenario, seed: u64) -> String {
    sim_support::replay_hint(sc, seed, "sim_shipped_cluster", "sim-redis")
}

/// The election workload over the Cluster model with more rivals: 2–6 clients, 24 operations
/// each, intensity 3. Each session campaigns for `E` while its second thread `try_lock`s `E` (two
/// acquires of one name by one session), and up to five other sessions contend for it.
fn cluster_elections() -> Scenario {
    Scenario {
        name: "shipped-cluster-elections".into(),
        workload: Workload::Elections,
        ops: 24,
        max_clients: 6,
        ..Scenario::cluster()
    }
    .harsh()
}

fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario::cluster(),
        cluster_elections(),
        cluster_elections().with_bug(Bug::AbandonConfirmed),
        Scenario::cluster().with_bug(Bug::AbandonConfirmed).harsh(),
        Scenario::cluster().with_bug(Bug::LeaseSeconds),
        Scenario::cluster().with_bug(Bug::DropOutlivesReacquire),
    ]
}

/// Sweeps `sc` over `seeds` (`SIMBA_SIM_SEEDS` overrides the count): no seed may violate an
/// invariant. Returns the counters.
fn sweep_clean(sc: &Scenario, default_seeds: u64) -> shipped::FaultCounts {
    let seeds = 0..env_u64("SIMBA_SIM_SEEDS").unwrap_or(default_seeds);
    let started = Instant::now();
    let s = shipped::sweep(sc, seeds);
    println!("[{}] {} seeds in {:.2?}: {}", sc.name, s.runs, started.elapsed(), s.counts);
    for o in &s.failures {
        let first = o.violations.first().map_or_else(|| format!("{:?}", o.panic), ToString::to_string);
        println!("seed {} failed: {first}", o.seed);
    }
    if let Some(o) = s.failures.first() {
        panic!(
            "{} of {} seeds failed; the first:\n{}\n{}",
            s.failures.len(),
            s.runs,
            o.report(30),
            replay_hint(sc, o.seed)
        );
    }
    s.counts
}

/// ≥ 1,000 seeds of the Cluster model, every fault class firing: no invariant violated.
#[test]
fn cluster_sweep_has_no_violation() {
    let sc = Scenario::cluster();
    let counts = sweep_clean(&sc, 1_000);
    assert_eq!(counts.unsettled, 0, "[{}] clock steps moved while a thread still ran", sc.name);
    let unfired = counts.cluster_unfired();
    assert!(unfired.is_empty(), "[{}] classes that never fired: {unfired:?}", sc.name);
}

/// The scenario of `finding_2_abandoned_term_reported_acquired` with the books' fix in place:
/// ≥ 1,000 seeds, no invariant violated, and the path it needs is taken (slow replies fired).
#[test]
fn cluster_elections_sweep_has_no_violation() {
    let sc = cluster_elections();
    let counts = sweep_clean(&sc, 1_000);
    assert!(counts.slow_replies > 0 && counts.partitioned > 0, "[{}] the faults it needs never fired", sc.name);
}

/// A seed replays exactly (same history, same counters).
#[test]
fn cluster_seed_replays_exactly() {
    let sc = Scenario::cluster();
    for seed in [3, 17] {
        let (a, b) = (shipped::run(seed, &sc), shipped::run(seed, &sc));
        assert!(a.records.len() > 20, "seed {seed}: {}", a.report(0));
        assert_eq!(a.records, b.records, "seed {seed} did not replay");
        assert_eq!(a.counts, b.counts);
    }
}

/// The recorder reads `renew_slot`'s per-node layout (the slots of one call, their keys and
/// counts) as the client builds it: on every node where a term was granted, renewals of terms
/// are recorded as `Extended`. A layout read wrongly would record none, and the checker would
/// then miss every renewal-related fault.
#[test]
fn renewals_are_recorded_on_every_node_that_grants() {
    use simba::sim::Event;
    let sc = Scenario::cluster();
    let (mut granted, mut extended) = ([0usize; 3], [0usize; 3]);
    for seed in 0..5 {
        for r in shipped::run(seed, &sc).records {
            match r.event {
                Event::Granted { node, .. } => granted[usize::from(node) % 3] += 1,
                Event::Extended { node, .. } => extended[usize::from(node) % 3] += 1,
                _ => {}
            }
        }
    }
    assert!(extended.iter().sum::<usize>() > 0, "no renewal recorded over seeds 0..5");
    for n in 0..3 {
        assert!(granted[n] == 0 || extended[n] > 0, "node {n}: {} grants, no renewal recorded", granted[n]);
    }
}

/// The first seed of `seeds` on which `sc` violates an invariant; fails when none does.
fn find(sc: &Scenario, seeds: Range<u64>, what: &str, expected: &[Invariant]) {
    let started = Instant::now();
    for seed in seeds.clone() {
        let o = shipped::run(seed, sc);
        if o.clean() {
            continue;
        }
        println!(
            "[{}] {what}: found at seed {seed} in {:.2?}\n{}\n{}",
            sc.name,
            started.elapsed(),
            o.report(20),
            replay_hint(sc, seed)
        );
        assert!(o.panic.is_none(), "seed {seed} panicked instead: {}", o.report(5));
        assert!(
            o.violations.iter().any(|v| expected.contains(&v.invariant)),
            "seed {seed}: unexpected kind of violation: {}",
            o.report(5)
        );
        return;
    }
    panic!("[{}] {what}: not found over seeds {seeds:?} ({:.2?})", sc.name, started.elapsed());
}

/// A deliberately broken argument: the lease node is given the lease duration in seconds where the
/// script takes milliseconds, so the term runs out while its holder still trusts it.
#[test]
fn finds_lease_granted_in_seconds() {
    find(
        &Scenario::cluster().with_bug(Bug::LeaseSeconds),
        0..env_u64("SIMBA_SIM_FINDING_SEEDS").unwrap_or(200),
        "a lease granted for seconds as milliseconds",
        &[Invariant::ExclusiveToken, Invariant::LeaderTask, Invariant::LeaderRead],
    );
}

/// Finding 2 of the old model, on the shipped backend: with `Bug::AbandonConfirmed` the books no
/// longer keep abandoning and reporting a term exclusive, so a term a late acquire abandons (and
/// releases) is reported acquired by another acquire of the same session, and a rival is granted
/// the name while its holder still trusts it.
#[test]
fn finding_2_abandoned_term_reported_acquired() {
    find(
        &cluster_elections().with_bug(Bug::AbandonConfirmed),
        0..env_u64("SIMBA_SIM_FINDING_SEEDS").unwrap_or(1_000),
        "a late acquire's abandoned term reported by another acquire",
        &[Invariant::ExclusiveToken, Invariant::LeaderTask, Invariant::LeaderRead],
    );
}

/// Finding 1 of issue #36 (`Bug::DropOutlivesReacquire`: an acquire or join of a name a renewal
/// scheduled to drop from the session's index left the removal scheduled) switched back on in the
/// shipped Redis backend: a lease acquired, released, found free by a renewal and acquired again
/// is removed from the index by the next renewal and reported lost (`NotOwned`) by the one after,
/// while its session lives and no fault explains it (`no-spurious-loss`); the same seed with the
/// fix in place has no such loss.
#[test]
fn finding_1_reacquired_term_dropped_from_the_index_is_found() {
    let sc = Scenario::cluster().with_bug(Bug::DropOutlivesReacquire);
    let seeds = 0..env_u64("SIMBA_SIM_FINDING_SEEDS").unwrap_or(200);
    let started = Instant::now();
    let found = seeds.clone().map(|seed| shipped::run(seed, &sc)).find(|o| !o.clean());
    let Some(o) = found else { panic!("[{}] not found over seeds {seeds:?}", sc.name) };
    println!(
        "[{}] found at seed {} in {:.2?}\n{}\n{}",
        sc.name,
        o.seed,
        started.elapsed(),
        o.report(20),
        replay_hint(&sc, o.seed)
    );
    assert!(o.panic.is_none(), "seed {} panicked instead: {}", o.seed, o.report(5));
    assert!(
        o.violations.iter().all(|v| v.invariant == Invariant::NoSpuriousLoss),
        "seed {}: unexpected kind of violation: {}",
        o.seed,
        o.report(5)
    );
    let fixed = shipped::run(o.seed, &Scenario::cluster());
    assert!(fixed.clean(), "seed {} fails without the bug too:\n{}", o.seed, fixed.report(30));
}

/// `SIMBA_SIM_SEED=<seed>` (and `SIMBA_SIM_SCENARIO=<name>`, default `shipped-cluster`) replays one
/// seed and prints its history.
#[test]
fn replay() {
    let Some(seed) = env_u64("SIMBA_SIM_SEED") else { return };
    let name = std::env::var("SIMBA_SIM_SCENARIO").unwrap_or_else(|_| "shipped-cluster".into());
    let sc = scenarios().into_iter().find(|s| s.name == name).unwrap_or_else(|| panic!("no scenario named {name}"));
    let o = shipped::run(seed, &sc);
    for (i, r) in o.records.iter().enumerate() {
        println!("#{i} {r}");
    }
    println!("{}", o.report(0));
}

/// Found by the Cluster model (a no-revival at a seed of the election workload): in the
/// millisecond of a session key's expiry, `acquire_session` (PTTL 0) judged the session gone while
/// `keep_alive_session` (EXISTS 1) renewed it. Every session check now uses PTTL; standalone's
/// `keep_alive`/`acquire` had the same boundary.
#[test]
fn every_script_judges_a_session_gone_in_the_millisecond_of_its_expiry() {
    use simba::sim::shipped::redis::lua;
    let t0 = 1_750_000_000_000_000;
    let (s, d) = ("simba:session:{s1}", "3000");
    let keys = |k: &[&str]| k.iter().map(|k| k.to_string()).collect::<Vec<_>>();
    let args = |a: &[&str]| a.iter().map(|a| a.to_string()).collect::<Vec<_>>();
    let mut node = Node::new(t0).expect("a Lua state");
    assert_eq!(node.eval(lua::OPEN_SESSION, &keys(&[s]), &args(&[d, "m"])), Reply::Int(3000));
    // The node's clock at the key's expiry, to the millisecond: the key still exists.
    node.set_now_us(t0 + 3_000_000);
    assert_eq!(node.command(&["EXISTS", s]), Reply::Int(1));
    assert_eq!(node.command(&["PTTL", s]), Reply::Int(0));
    let gone = Reply::Array(vec![Reply::Int(-1)]);
    let acquire = node.eval(lua::ACQUIRE_SESSION, &keys(&[s, "simba:session:{s1}:leases"]), &args(&["L"]));
    assert_eq!(acquire, gone, "acquire_session");
    let cluster = node.eval(
        lua::KEEP_ALIVE_SESSION,
        &keys(&[s, "simba:session:{s1}:leases", "simba:session:{s1}:groups"]),
        &args(&[d, "", "0"]),
    );
    assert_eq!(cluster, gone, "keep_alive_session renewed a session acquire_session judged gone");
    let standalone = node.eval(
        lua::KEEP_ALIVE,
        &keys(&[s, "simba:session:{s1}:terms", "simba:session:{s1}:groups"]),
        &args(&["s1", d, ""]),
    );
    assert_eq!(standalone, gone, "keep_alive renewed a session acquire judged gone");
}
