//! Redis Cluster against the local 3-master cluster (`scripts/services up redis-cluster`; nodes
//! from `SIMBA_TEST_REDIS_CLUSTER_URL`): one slot per script call, one follow-up per slot, the
//! duration carried by renewal follow-ups, late scripts (through a wrapper around the clustered
//! scripting port that delays or fails chosen calls), interrupted close, and `CLUSTER FAILOVER`.
// The scripting port comes from the crate-internal test seam (feature `internal-testing`).
#![cfg(all(feature = "redis", feature = "tck", feature = "internal-testing"))]

mod support;

use support::redis_cluster_nodes as nodes;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use serial_test::serial;
use simba::backend::{Acquire, KeepAlive, LeaseBackend, Notification, Topic};
use simba::backends::redis::{RedisBackend, RedisOptions};
use simba::tck::eventually;
use simba::testing::redis::{ClusteredScripting, LuaScript, RedisScripting};
use simba::{Error, ErrorKind, Name, SessionId, Token};

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn options() -> RedisOptions {
    RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap()
}

/// What to do to calls of one script.
#[derive(Debug, Clone, Default)]
struct Rule {
    script: &'static str,
    /// Sleep before sending (the script reaches Redis late).
    before: Duration,
    /// Sleep after the reply (the client sees it late).
    after: Duration,
    /// Fail instead of sending.
    fail: bool,
    /// Apply this many times (None = always).
    times: Option<usize>,
    /// Apply only to calls naming this key (None = any call of the script).
    key: Option<String>,
}

#[derive(Debug, Clone)]
struct Call {
    script: &'static str,
    keys: Vec<String>,
}

/// The real clustered port, with injected delays and failures, recording every call.
#[derive(Debug)]
struct Faults {
    inner: ClusteredScripting,
    rules: Mutex<Vec<Rule>>,
    calls: Mutex<Vec<Call>>,
    /// Group every batch as bound for one node (what a stale slot map does); otherwise each call
    /// is a group of its own (the trait's default).
    lump: AtomicBool,
    /// Holds the next call of a script before it is sent: the call says it arrived, then waits
    /// for the go (see [`Faults::hold_next`]).
    hold: Mutex<Option<Hold>>,
}

#[derive(Debug)]
struct Hold {
    script: &'static str,
    arrived: crossbeam_channel::Sender<()>,
    go: crossbeam_channel::Receiver<()>,
}

impl Faults {
    fn rule(&self, rule: Rule) {
        self.rules.lock().push(rule);
    }
    fn clear(&self) {
        self.rules.lock().clear();
        self.calls.lock().clear();
    }
    fn calls(&self) -> Vec<Call> {
        self.calls.lock().clone()
    }
    fn count(&self, script: &str) -> usize {
        self.calls.lock().iter().filter(|c| c.script == script).count()
    }
    /// Holds the next call of `script` before it is sent. Returns a receiver that gets one message
    /// when the call arrived, and the sender that lets it go on.
    fn hold_next(&self, script: &'static str) -> (crossbeam_channel::Receiver<()>, crossbeam_channel::Sender<()>) {
        let (arrived, arrived_rx) = crossbeam_channel::bounded(1);
        let (go_tx, go) = crossbeam_channel::bounded(1);
        *self.hold.lock() = Some(Hold { script, arrived, go });
        (arrived_rx, go_tx)
    }
}

impl RedisScripting for Faults {
    fn is_clustered(&self) -> bool {
        true
    }

    fn eval(
        &self,
        script: &LuaScript,
        keys: &[String],
        args: &[String],
        deadline: Instant,
    ) -> simba::Result<redis::Value> {
        let held = {
            let mut hold = self.hold.lock();
            if hold.as_ref().is_some_and(|h| h.script == script.name()) {
                hold.take()
            } else {
                None
            }
        };
        if let Some(h) = held {
            let _ = h.arrived.send(());
            let _ = h.go.recv_timeout(Duration::from_secs(30));
        }
        self.calls.lock().push(Call { script: script.name(), keys: keys.to_vec() });
        let rule = {
            let mut rules = self.rules.lock();
            let found = rules.iter_mut().find(|r| {
                r.script == script.name() && r.times != Some(0) && r.key.as_ref().is_none_or(|k| keys.contains(k))
            });
            found.map(|r| {
                if let Some(t) = r.times.as_mut() {
                    *t -= 1;
                }
                r.clone()
            })
        };
        let Some(rule) = rule else { return self.inner.eval(script, keys, args, deadline) };
        let mut deadline = deadline;
        if !rule.before.is_zero() {
            thread::sleep(rule.before);
            deadline = Instant::now() + Duration::from_secs(2);
        }
        if rule.fail {
            return Err(Error::unavailable(format!("injected failure of {}", script.name())));
        }
        let r = self.inner.eval(script, keys, args, deadline);
        thread::sleep(rule.after);
        r
    }

    fn group_by_node(&self, slots: &[u16], _deadline: Instant) -> Vec<Vec<usize>> {
        if self.lump.load(Ordering::SeqCst) {
            vec![(0..slots.len()).collect()]
        } else {
            (0..slots.len()).map(|i| vec![i]).collect()
        }
    }

    fn on_masters(&self, cmd: &redis::Cmd, deadline: Instant) -> simba::Result<Vec<(String, redis::Value)>> {
        self.inner.on_masters(cmd, deadline)
    }

    fn subscriber_endpoints(&self) -> Vec<redis::ConnectionInfo> {
        self.inner.subscriber_endpoints()
    }

    fn target(&self) -> String {
        self.inner.target()
    }
}

fn faulty() -> (RedisBackend, Arc<Faults>) {
    init_log();
    let inner = ClusteredScripting::new(&nodes(), 8, Duration::from_secs(1)).unwrap();
    let faults = Arc::new(Faults {
        inner,
        rules: Mutex::new(Vec::new()),
        calls: Mutex::new(Vec::new()),
        lump: AtomicBool::new(false),
        hold: Mutex::new(None),
    });
    let backend = simba::testing::redis::backend_with_scripting(faults.clone(), options())
        .unwrap_or_else(|e| panic!("cannot connect to Redis Cluster: {e} (run `scripts/services up redis-cluster`)"));
    (backend, faults)
}

struct Raw(redis::cluster::ClusterConnection);

impl Raw {
    fn new() -> Raw {
        let urls: Vec<String> = nodes().iter().map(|n| format!("redis://{n}")).collect();
        Raw(redis::cluster::ClusterClient::new(urls).unwrap().get_connection().unwrap())
    }
    fn hgetall(&mut self, key: &str) -> HashMap<String, String> {
        redis::cmd("HGETALL").arg(key).query(&mut self.0).unwrap()
    }
    fn hget(&mut self, key: &str, field: &str) -> Option<String> {
        redis::cmd("HGET").arg(key).arg(field).query(&mut self.0).unwrap()
    }
    fn smembers(&mut self, key: &str) -> HashSet<String> {
        redis::cmd("SMEMBERS").arg(key).query(&mut self.0).unwrap()
    }
    fn srem(&mut self, key: &str, member: &str) -> i64 {
        redis::cmd("SREM").arg(key).arg(member).query(&mut self.0).unwrap()
    }
    fn pttl(&mut self, key: &str) -> i64 {
        redis::cmd("PTTL").arg(key).query(&mut self.0).unwrap()
    }
    /// `cmd` on the master serving `key`, its reply as text.
    fn on_master_of(&mut self, key: &str, cmd: &mut redis::Cmd) -> String {
        let route =
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master)));
        let v = self.0.route_command(cmd, route).unwrap();
        redis::from_redis_value(v).unwrap()
    }
    /// Redis `TIME` (ms) on the master serving `key`.
    fn now_at(&mut self, key: &str) -> i64 {
        let route =
            RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_key(key, SlotAddr::Master)));
        let v = self.0.route_command(&redis::cmd("TIME"), route).unwrap();
        let (s, us): (i64, i64) = redis::from_redis_value(v).unwrap();
        s * 1000 + us / 1000
    }
}

fn lease_key(n: &Name) -> String {
    format!("simba:lease:{{{n}}}")
}

fn name(prefix: &str) -> Name {
    Name::new(support::unique(prefix)).unwrap()
}

/// `n` names whose lease keys are in pairwise different slots, none in the session's.
fn spread(prefix: &str, n: usize, sid: &SessionId) -> Vec<Name> {
    let mut slots = HashSet::from([Slot::for_key(format!("simba:session:{{{sid}}}"))]);
    let mut out = Vec::new();
    while out.len() < n {
        let candidate = name(prefix);
        if slots.insert(Slot::for_key(lease_key(&candidate))) {
            out.push(candidate);
        }
    }
    out
}

fn token(r: simba::Result<Acquire>) -> Token {
    match r {
        Ok(Acquire::Acquired { token, .. }) => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn owned(b: &RedisBackend, sid: &SessionId, d: Duration) -> Vec<(Name, Token)> {
    match b.keep_alive(sid, d).unwrap() {
        KeepAlive::Alive { remaining, owned, .. } => {
            assert!(remaining <= d && !remaining.is_zero(), "{remaining:?}");
            owned
        }
        KeepAlive::Expired => panic!("session {sid} unexpectedly expired"),
    }
}

const D: Duration = Duration::from_secs(1);

/// A renewal lists the session's lease index only when it changed since the client's last
/// listing (the index's generation, bumped by an acquire that indexes a new name and by every
/// removal): at 10,000 leases the listing was most of the session call's time. An entry removed
/// behind simba's back bumps nothing, so it is still renewed from the client's listing, until the
/// next change of the index lists it again.
#[test]
#[serial(redis_cluster)]
fn renewal_lists_the_lease_index_only_after_it_changed() {
    let (b, _) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let names = spread("listing", 4, &sid);
    let (first, extra) = (&names[..3], &names[3]);
    for n in first {
        token(b.acquire(&sid, n));
    }
    let held = |o: Vec<(Name, Token)>| o.into_iter().map(|(n, _)| n).collect::<HashSet<_>>();
    let all: HashSet<Name> = first.iter().cloned().collect();
    assert_eq!(held(owned(&b, &sid, D)), all);
    let index = format!("simba:session:{{{sid}}}:leases");
    assert_eq!(raw.srem(&index, first[0].as_str()), 1);
    assert_eq!(held(owned(&b, &sid, D)), all, "the index did not change by simba: the client's listing stands");
    token(b.acquire(&sid, extra));
    let listed = held(owned(&b, &sid, D));
    let expected: HashSet<Name> = [&first[1], &first[2], extra].into_iter().cloned().collect();
    assert_eq!(listed, expected, "an acquire changed the index: listed again, without the removed entry");
}

/// Found by the simulation of the shipped Cluster backend: a name removed from the lease index of
/// a session that has already expired bumps no generation — `HINCRBY` on the gone session key
/// would create it again, a hash without an expiry that never goes away.
#[test]
#[serial(redis_cluster)]
fn index_removal_after_the_session_expired_leaves_no_session_key() {
    let mut raw = Raw::new();
    let sid = support::unique("gone");
    let session = format!("simba:session:{{{sid}}}");
    let index = format!("{session}:leases");
    let added: i64 = redis::cmd("SADD").arg(&index).arg("L").query(&mut raw.0).unwrap();
    assert_eq!(added, 1);
    let removed: i64 = redis::cmd("EVAL")
        .arg(simba::testing::redis::lua::INDEX_REMOVE)
        .arg(2)
        .arg(&index)
        .arg(&session)
        .arg("L")
        .query(&mut raw.0)
        .unwrap();
    assert_eq!(removed, 1);
    let exists: i64 = redis::cmd("EXISTS").arg(&session).query(&mut raw.0).unwrap();
    assert_eq!(exists, 0, "index_remove created the gone session's key");
}

#[test]
#[serial(redis_cluster)]
fn construction_and_checks() {
    init_log();
    let err = RedisBackend::clustered(&nodes(), RedisOptions::builder().wait_replicas(1).build().unwrap()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("not available on Redis Cluster"), "{err}");
    let url = format!("redis+cluster://{}", nodes().join(","));
    let b = RedisBackend::connect(&url, options()).unwrap();
    assert!(b.is_clustered());
    let items = b.check();
    let count = |n: &str| items.iter().filter(|i| i.name == n).count();
    assert_eq!(count("maxmemory-policy"), 3, "one per master: {items:?}");
    assert_eq!(count("clock"), 3, "{items:?}");
    let state = items.iter().find(|i| i.name == "cluster-state").unwrap();
    assert_eq!(state.status, simba::backend::CheckStatus::Ok, "{state:?}");
    assert!(b.capabilities().push_release);
}

#[test]
#[serial(redis_cluster)]
fn every_call_stays_in_one_slot_and_renewal_is_one_call_per_slot() {
    let (b, faults) = faulty();
    let sid = b.open_session(D, "").unwrap().id;
    let session_slot = Slot::for_key(format!("simba:session:{{{sid}}}"));
    let leases = spread("slot", 6, &sid);
    let groups = [name("slot-g"), name("slot-g")];
    faults.clear();
    let mut tokens = Vec::new();
    for l in &leases {
        tokens.push((l.clone(), token(b.acquire(&sid, l))));
    }
    for g in &groups {
        b.join(&sid, g).unwrap();
    }
    let calls = faults.calls();
    for pair in calls.chunks(2) {
        // acquire/join: the session's slot first, then the lease's (group's) slot.
        assert!(pair[0].script.ends_with("_session"), "{pair:?}");
        assert_eq!(Slot::for_key(&pair[0].keys[0]), session_slot);
    }
    faults.clear();
    let mut got = owned(&b, &sid, D);
    got.sort();
    tokens.sort();
    assert_eq!(got, tokens);
    let calls = faults.calls();
    assert_eq!(calls[0].script, "keep_alive_session");
    assert_eq!(Slot::for_key(&calls[0].keys[0]), session_slot);
    let mut slots = HashSet::new();
    for l in &leases {
        slots.insert(Slot::for_key(lease_key(l)));
    }
    for g in &groups {
        slots.insert(Slot::for_key(format!("simba:group:{{{g}}}")));
    }
    assert_eq!(calls.len(), 1 + slots.len(), "one follow-up per slot in use: {calls:?}");
    for c in &calls {
        let first = Slot::for_key(&c.keys[0]);
        assert!(c.keys.iter().all(|k| Slot::for_key(k) == first), "call spans slots: {c:?}");
    }
    let members = b.members(&groups[0]).unwrap();
    assert_eq!(members.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![sid.clone()]);
    b.close_session(&sid).unwrap();
    let mut raw = Raw::new();
    for l in &leases {
        assert_eq!(raw.hget(&lease_key(l), "session").as_deref(), Some(""));
    }
    assert!(b.members(&groups[0]).unwrap().is_empty());
}

/// Which of `names` the first `renew_slot` call renewed.
fn first_renewed(faults: &Faults, names: &[Name]) -> Name {
    let first = faults.calls().into_iter().find(|c| c.script == "renew_slot").expect("a follow-up was sent");
    names.iter().find(|n| first.keys.contains(&lease_key(n))).expect("a known lease").clone()
}

#[test]
#[serial(redis_cluster)]
fn renewal_follow_ups_carry_the_remaining_minus_the_time_since_the_session_call() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let d = Duration::from_secs(2);
    let sid = b.open_session(d, "").unwrap().id;
    let names = spread("carry", 2, &sid);
    let mut tokens = Vec::new();
    for n in &names {
        tokens.push((n.clone(), token(b.acquire(&sid, n))));
    }
    thread::sleep(Duration::from_millis(1200));
    // The first follow-up's reply takes 500 ms: the second one carries 2000 - 500 ms.
    faults.calls.lock().clear();
    faults.rule(Rule { script: "renew_slot", after: Duration::from_millis(500), times: Some(1), ..Rule::default() });
    let mut got = owned(&b, &sid, d);
    got.sort();
    tokens.sort();
    assert_eq!(got, tokens);
    let first = first_renewed(&faults, &names);
    let second = names.iter().find(|n| **n != first).unwrap();
    let expires = |raw: &mut Raw, n: &Name| -> i64 { raw.hget(&lease_key(n), "expires").unwrap().parse().unwrap() };
    let (first_end, second_end) = (expires(&mut raw, &first), expires(&mut raw, second));
    let second_left = second_end - raw.now_at(&lease_key(second));
    let session_left = raw.pttl(&format!("simba:session:{{{sid}}}"));
    // Each node caps at its own now + the carried duration (not the full lease duration): the
    // second lease, renewed 500 ms later, ends when the first does (one host: comparable clocks).
    assert!(
        (second_end - first_end).abs() <= 60,
        "second lease ends {} ms after the first: the 500 ms were not subtracted",
        second_end - first_end
    );
    assert!(second_left <= 1500 + 20, "second lease extended to {second_left} ms, more than the carried remaining");
    assert!(second_left >= 1200, "second lease extended to only {second_left} ms");
    assert!(
        second_left >= session_left - 50,
        "a lease ({second_left} ms) lasts as long as its session ({session_left} ms)"
    );
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn renewal_sends_no_follow_up_once_the_session_remaining_has_passed() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let d = Duration::from_secs(1);
    let sid = b.open_session(d, "").unwrap().id;
    let names = spread("nofollow", 2, &sid);
    for n in &names {
        token(b.acquire(&sid, n));
    }
    let before: Vec<_> = names.iter().map(|n| raw.hget(&lease_key(n), "expires")).collect();
    // The first follow-up returns after the session's remaining: the second is never sent, and the
    // renewal reports a failure (the engine retries; nothing is reported owned).
    faults.calls.lock().clear();
    faults.rule(Rule {
        script: "renew_slot",
        after: d + Duration::from_millis(100),
        times: Some(1),
        ..Rule::default()
    });
    let err = b.keep_alive(&sid, d).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(faults.count("renew_slot"), 1);
    let first = first_renewed(&faults, &names);
    for (n, before) in names.iter().zip(before) {
        if *n != first {
            assert_eq!(raw.hget(&lease_key(n), "expires"), before, "the second lease was not extended");
        }
    }
}

/// Absolute end (ms, Redis `TIME` of its node) of the session and of a lease.
fn ends(raw: &mut Raw, sid: &SessionId, l: &Name) -> (i64, i64) {
    let session_key = format!("simba:session:{{{sid}}}");
    let session_end = raw.now_at(&session_key) + raw.pttl(&session_key);
    let lease_end: i64 = raw.hget(&lease_key(l), "expires").unwrap().parse().unwrap();
    (session_end, lease_end)
}

/// Pauses writes on the master serving `key` until dropped (`CLIENT PAUSE ... WRITE`: scripts
/// wait, the cluster bus does not).
struct Paused<'r>(&'r mut Raw, String);

impl<'r> Paused<'r> {
    fn new(raw: &'r mut Raw, key: &str) -> Paused<'r> {
        raw.on_master_of(key, redis::cmd("CLIENT").arg("PAUSE").arg(30_000).arg("WRITE"));
        Paused(raw, key.to_string())
    }
}

impl Drop for Paused<'_> {
    fn drop(&mut self) {
        let key = self.1.clone();
        self.0.on_master_of(&key, redis::cmd("CLIENT").arg("UNPAUSE"));
    }
}

/// Lease duration of the sessions [`session_and_lease_on_another_node`] opens.
const SESSION_LEASE: Duration = Duration::from_secs(30);

/// A backend with query timeout `t`, a raw client, a session (lease duration [`SESSION_LEASE`])
/// and a lease name whose master is not the session's.
fn session_and_lease_on_another_node(t: Duration, prefix: &str) -> (RedisBackend, Raw, SessionId, Name) {
    init_log();
    let scripting = Arc::new(ClusteredScripting::new(&nodes(), 8, t).unwrap());
    let b = simba::testing::redis::backend_with_scripting(
        scripting,
        RedisOptions::builder().query_timeout(t).build().unwrap(),
    )
    .unwrap_or_else(|e| panic!("cannot connect to Redis Cluster: {e} (run `scripts/services up redis-cluster`)"));
    let mut raw = Raw::new();
    let sid = b.open_session(SESSION_LEASE, "").unwrap().id;
    let session_node = raw.on_master_of(&format!("simba:session:{{{sid}}}"), redis::cmd("CLUSTER").arg("MYID"));
    let l = loop {
        let l = spread(prefix, 1, &sid).remove(0);
        if raw.on_master_of(&lease_key(&l), redis::cmd("CLUSTER").arg("MYID")) != session_node {
            break l;
        }
    };
    (b, raw, sid, l)
}

/// An acquire sends its session call and its lease call together, the session's first one too
/// (its lease duration is known from the open): the lease call takes effect on its node while the
/// session's node is still paused, and the acquire completes once that node answers.
#[test]
#[serial(redis_cluster)]
fn acquire_sends_the_session_and_lease_calls_together() {
    let (b, mut raw, sid, l) = session_and_lease_on_another_node(Duration::from_secs(20), "together");
    let session_key = format!("simba:session:{{{sid}}}");
    let paused = Paused::new(&mut raw, &session_key);
    let acquired = thread::scope(|scope| {
        let acquire = scope.spawn(|| b.acquire(&sid, &l));
        let mut direct = Raw::new();
        let started = Instant::now();
        while direct.hget(&lease_key(&l), "session").as_deref() != Some(sid.as_str()) {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "the lease call did not reach its node while the session's node was paused"
            );
            thread::sleep(Duration::from_millis(5));
        }
        assert!(!acquire.is_finished(), "the acquire returned while the session's node was paused");
        drop(paused);
        acquire.join().unwrap()
    });
    token(acquired);
    b.close_session(&sid).unwrap();
}

/// A node that does not answer, read first, must not cost the other nodes of the same batch
/// their replies: an acquire whose session node is paused past the query timeout still reads its
/// lease node's reply, so the backend knows the term the lease call started and abandons it: the
/// next renewal releases it and does not report it, even once the paused node has run the late
/// session call (which indexes the name). Before, the lease node's reply was read only if the
/// socket timeout the paused node's read kept happened to leave time for it (6 runs in 30 did not).
#[test]
#[serial(redis_cluster)]
fn a_node_that_does_not_answer_does_not_cost_the_others_in_its_batch_their_replies() {
    let (b, mut raw, sid, l) = session_and_lease_on_another_node(Duration::from_millis(500), "unanswered");
    let d = SESSION_LEASE;
    let session_key = format!("simba:session:{{{sid}}}");
    let paused = Paused::new(&mut raw, &session_key);
    let err = b.acquire(&sid, &l).unwrap_err();
    drop(paused);
    let renewed = owned(&b, &sid, d);
    assert!(!renewed.iter().any(|(n, _)| *n == l), "the failed acquire's term is reported owned ({err})");
    let h = Raw::new().hgetall(&lease_key(&l));
    assert_eq!(h.get("token").map(String::as_str), Some("1"), "the lease call ran: {h:?} ({err})");
    assert_eq!(h.get("session").map(String::as_str), Some(""), "its term was released: {h:?} ({err})");
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn an_acquire_for_a_gone_session_releases_the_term_its_lease_call_started() {
    init_log();
    let plain = simba::testing::redis::backend_with_scripting(
        Arc::new(ClusteredScripting::new(&nodes(), 8, D).unwrap()),
        options(),
    )
    .unwrap_or_else(|e| panic!("cannot connect to Redis Cluster: {e} (run `scripts/services up redis-cluster`)"));
    let mut raw = Raw::new();
    let sid = plain.open_session(Duration::from_millis(300), "").unwrap().id;
    let mut names = spread("gone", 2, &sid);
    let (first, l) = (names.remove(0), names.remove(0));
    token(plain.acquire(&sid, &first));
    let session_key = format!("simba:session:{{{sid}}}");
    assert!(eventually(Duration::from_secs(5), || raw.pttl(&session_key) == -2), "the session did not expire");
    match plain.acquire(&sid, &l) {
        Err(e) if e.kind() == ErrorKind::SessionExpired => {}
        other => panic!("expected SessionExpired, got {other:?}"),
    }
    let h = raw.hgetall(&lease_key(&l));
    assert_eq!(h.get("token").map(String::as_str), Some("1"), "the lease call ran with the session call: {h:?}");
    assert_eq!(h.get("session").map(String::as_str), Some(""), "its term was released: {h:?}");
}

#[test]
#[serial(redis_cluster)]
fn acquire_grants_a_full_lease_by_the_lease_nodes_clock() {
    let (b, _faults) = faulty();
    let mut raw = Raw::new();
    let d = Duration::from_secs(2);
    let sid = b.open_session(d, "").unwrap().id;
    let l = spread("full", 1, &sid).remove(0);
    thread::sleep(Duration::from_millis(1000));
    token(b.acquire(&sid, &l));
    let (session_end, lease_end) = ends(&mut raw, &sid, &l);
    let lease_left = lease_end - raw.now_at(&lease_key(&l));
    assert!((1900..=2000).contains(&lease_left), "the lease got {lease_left} ms, not a full lease duration");
    assert!(lease_end - session_end >= 800, "the lease should outlive the half-spent session by about 1 s");
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn a_follow_up_delivered_late_outlives_the_session_by_at_most_its_delay() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let d = Duration::from_secs(2);
    let sid = b.open_session(d, "").unwrap().id;
    let l = spread("delivered-late", 1, &sid).remove(0);
    let t = token(b.acquire(&sid, &l));
    thread::sleep(Duration::from_millis(1000));
    // The follow-up reaches Redis 600 ms after it was sent (its carried duration was computed at send).
    faults.rule(Rule { script: "renew_slot", before: Duration::from_millis(600), times: Some(1), ..Rule::default() });
    assert_eq!(owned(&b, &sid, d), vec![(l.clone(), t)]);
    let (session_end, lease_end) = ends(&mut raw, &sid, &l);
    let excess = lease_end - session_end;
    assert!((0..=600 + 60).contains(&excess), "the lease ends {excess} ms after its session (delivery delay 600 ms)");
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn a_failing_node_drops_its_leases_from_the_index_after_one_lease_period() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let l = spread("failing", 1, &sid).remove(0);
    let t = token(b.acquire(&sid, &l));
    let index = format!("simba:session:{{{sid}}}:leases");
    faults.rule(Rule { script: "renew_slot", fail: true, ..Rule::default() });
    let started = Instant::now();
    let (mut dropped_after, mut failed, mut given_up) = (None, 0, None);
    while started.elapsed() < D * 2 {
        let attempt = Instant::now();
        match b.keep_alive(&sid, D) {
            // A recent follow-up failure fails the renewal: the engine retries, leases keep their deadlines.
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                assert!(given_up.is_none(), "failed again after giving the lease up: {e}");
                failed += 1;
            }
            // After a third of the lease duration the lease is given up: renewals succeed without it.
            Ok(KeepAlive::Alive { owned, .. }) => {
                assert!(owned.is_empty(), "a lease whose renewal failed is not reported: {owned:?}");
                given_up.get_or_insert(attempt.duration_since(started));
            }
            Ok(KeepAlive::Expired) => panic!("the session expired"),
        }
        if dropped_after.is_none() && !raw.smembers(&index).contains(l.as_str()) {
            dropped_after = Some(started.elapsed());
        }
        thread::sleep(Duration::from_millis(100));
    }
    let given_up = given_up.expect("the renewal kept failing");
    assert!(failed >= 2, "{failed} failed renewals");
    assert!(given_up >= D / 3 && given_up < D, "given up after {given_up:?}");
    let dropped_after = dropped_after.expect("the lease stayed in the index");
    assert!(dropped_after >= D, "dropped after {dropped_after:?}, before trying one lease period");
    faults.clear();
    assert!(owned(&b, &sid, D).is_empty());
    assert_eq!(faults.count("renew_slot"), 0, "nothing left to renew");
    let other = b.open_session(D, "").unwrap().id;
    assert!(eventually(D * 2, || matches!(b.acquire(&other, &l), Ok(Acquire::Acquired { .. }))));
    assert_eq!(b.holder(&l).unwrap().unwrap().token.get(), t.get() + 1);
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

/// Renews `sid` every 150 ms until stopped; returns every `owned` list seen.
fn renew_in_background(
    b: &RedisBackend,
    sid: &SessionId,
    stop: &Arc<AtomicBool>,
) -> thread::JoinHandle<Vec<Vec<(Name, Token)>>> {
    let (b, sid, stop) = (b.clone(), sid.clone(), stop.clone());
    thread::spawn(move || {
        let mut seen = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            if let Ok(KeepAlive::Alive { owned, .. }) = b.keep_alive(&sid, D) {
                seen.push(owned);
            }
            thread::sleep(Duration::from_millis(150));
        }
        seen
    })
}

#[test]
#[serial(redis_cluster)]
fn an_acquire_that_returns_late_releases_its_term_which_is_never_reported() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let stop = Arc::new(AtomicBool::new(false));
    let renewals = renew_in_background(&b, &sid, &stop);
    let (l1, l2) = (name("late"), name("late-norelease"));

    // The lease node grants the term, but the reply reaches the client after the session's remaining.
    faults.rule(Rule {
        script: "acquire_lease",
        after: D + Duration::from_millis(100),
        times: Some(1),
        ..Rule::default()
    });
    let err = b.acquire(&sid, &l1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("later than"), "{err}");
    let h = raw.hgetall(&lease_key(&l1));
    assert_eq!((h["token"].as_str(), h["session"].as_str()), ("1", ""), "the late term was started and released");

    // Same, and releasing the late term fails too: renewals release it later and never report it.
    faults.rule(Rule {
        script: "acquire_lease",
        after: D + Duration::from_millis(100),
        times: Some(1),
        ..Rule::default()
    });
    faults.rule(Rule { script: "release_slot", fail: true, times: Some(1), ..Rule::default() });
    let err = b.acquire(&sid, &l2).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(
        eventually(Duration::from_secs(3), || raw.hget(&lease_key(&l2), "session").as_deref() == Some("")),
        "renewals never released the abandoned term"
    );
    thread::sleep(Duration::from_millis(400));
    stop.store(true, Ordering::SeqCst);
    let seen = renewals.join().unwrap();
    assert!(seen.len() >= 5, "too few renewals: {}", seen.len());
    for owned in &seen {
        assert!(owned.iter().all(|(n, _)| *n != l1 && *n != l2), "an abandoned term was reported: {owned:?}");
    }
    // A later acquire that returns in time starts a new term.
    faults.clear();
    assert_eq!(token(b.acquire(&sid, &l1)).get(), 2);
    assert_eq!(owned(&b, &sid, D).iter().map(|(n, t)| (n.clone(), t.get())).collect::<Vec<_>>(), vec![(l1.clone(), 2)]);
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn acquire_and_join_send_nothing_once_the_session_remaining_has_passed() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    // Opened by another backend: `b` does not know the session's lease duration, so its acquire
    // sends the session call first, as every join does.
    let other = simba::testing::redis::backend_with_scripting(
        Arc::new(ClusteredScripting::new(&nodes(), 8, D).unwrap()),
        options(),
    )
    .unwrap_or_else(|e| panic!("cannot connect to Redis Cluster: {e} (run `scripts/services up redis-cluster`)"));
    let late = |script| Rule { script, after: D + Duration::from_millis(50), times: Some(1), ..Rule::default() };
    let sid = other.open_session(D, "").unwrap().id;
    let (l, g) = (name("gaveup"), name("gaveup-g"));
    faults.rule(late("acquire_session"));
    faults.rule(late("join_session"));
    let err = b.acquire(&sid, &l).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(faults.count("acquire_lease"), 0);
    assert!(raw.hgetall(&lease_key(&l)).is_empty(), "no lease call was sent");
    let sid = other.open_session(D, "").unwrap().id;
    let err = b.join(&sid, &g).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(faults.count("join_group"), 0);
    assert!(b.members(&g).unwrap().is_empty());
}

#[test]
#[serial(redis_cluster)]
fn a_lease_acquired_during_a_renewal_lasts_at_least_as_long_as_the_session() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let l = spread("during", 1, &sid).remove(0);
    faults.rule(Rule {
        script: "keep_alive_session",
        after: Duration::from_millis(300),
        times: Some(1),
        ..Rule::default()
    });
    thread::scope(|s| {
        let renewal = s.spawn(|| owned(&b, &sid, D));
        thread::sleep(Duration::from_millis(100));
        token(b.acquire(&sid, &l));
        renewal.join().unwrap();
    });
    let expires: i64 = raw.hget(&lease_key(&l), "expires").unwrap().parse().unwrap();
    let lease_left = expires - raw.now_at(&lease_key(&l));
    let session_left = raw.pttl(&format!("simba:session:{{{sid}}}"));
    assert!(lease_left >= session_left - 50, "lease {lease_left} ms < session {session_left} ms");
    assert_eq!(owned(&b, &sid, D).len(), 1, "the next renewal covers it");
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn a_late_release_never_frees_a_newer_term_and_released_names_leave_the_index() {
    let (b, _faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let l = spread("release", 1, &sid).remove(0);
    let index = format!("simba:session:{{{sid}}}:leases");
    let t1 = token(b.acquire(&sid, &l));
    b.release(&sid, &l, t1).unwrap();
    let t2 = token(b.acquire(&sid, &l));
    assert_eq!(t2.get(), t1.get() + 1);
    b.release(&sid, &l, t1).unwrap();
    assert_eq!(owned(&b, &sid, D), vec![(l.clone(), t2)]);
    assert_eq!(b.holder(&l).unwrap().unwrap().token, t2);
    b.release(&sid, &l, t2).unwrap();
    assert!(raw.smembers(&index).contains(l.as_str()), "release touches only the lease's slot");
    assert!(owned(&b, &sid, D).is_empty());
    owned(&b, &sid, D);
    assert!(!raw.smembers(&index).contains(l.as_str()), "renewal dropped the released name from the index");
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn an_interrupted_close_is_finished_by_a_repeated_close() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let l = spread("close", 1, &sid).remove(0);
    let g = name("close-g");
    let t = token(b.acquire(&sid, &l));
    b.join(&sid, &g).unwrap();
    faults.rule(Rule { script: "release_slot", fail: true, times: Some(1), ..Rule::default() });
    let err = b.close_session(&sid).unwrap_err();
    assert!(err.to_string().contains("close again"), "{err}");
    assert_eq!(b.keep_alive(&sid, D).unwrap(), KeepAlive::Expired, "the session is deleted first");
    assert!(b.holder(&l).unwrap().is_none(), "a lease belongs to a session only while it lives");
    assert!(b.members(&g).unwrap().is_empty());
    b.close_session(&sid).unwrap();
    assert_eq!(raw.hget(&lease_key(&l), "session").as_deref(), Some(""));
    assert!(raw.smembers(&format!("simba:session:{{{sid}}}:leases")).is_empty());
    let other = b.open_session(D, "").unwrap().id;
    assert_eq!(token(b.acquire(&other, &l)).get(), t.get() + 1);
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

/// `(master port, replica ports)` serving `slot`, from `CLUSTER SLOTS` on any node.
fn slot_nodes(slot: u16) -> (u16, Vec<u16>) {
    let mut con = redis::Client::open(format!("redis://{}", nodes()[0])).unwrap().get_connection().unwrap();
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
    for r in ranges {
        let items: Vec<redis::Value> = redis::from_redis_value(r).unwrap();
        let start: u16 = redis::from_redis_value(items[0].clone()).unwrap();
        let end: u16 = redis::from_redis_value(items[1].clone()).unwrap();
        if (start..=end).contains(&slot) {
            let port = |v: &redis::Value| -> u16 {
                let node: Vec<redis::Value> = redis::from_redis_value(v.clone()).unwrap();
                redis::from_redis_value(node[1].clone()).unwrap()
            };
            return (port(&items[2]), items[3..].iter().map(port).collect());
        }
    }
    panic!("slot {slot} is not served");
}

fn role(port: u16) -> String {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap().get_connection().unwrap();
    let v: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).unwrap();
    redis::from_redis_value(v[0].clone()).unwrap()
}

fn node_timeout() -> Duration {
    let mut con = redis::Client::open(format!("redis://{}", nodes()[0])).unwrap().get_connection().unwrap();
    let v: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("cluster-node-timeout").query(&mut con).unwrap();
    Duration::from_millis(v[1].parse().unwrap())
}

/// True when `replica` replicates from `master` with its link up, and `master` lists it.
fn linked(replica: u16, master: u16) -> bool {
    let role_of = |port: u16| -> Option<Vec<redis::Value>> {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?.get_connection().ok()?;
        redis::cmd("ROLE").query(&mut con).ok()
    };
    let text = |v: &redis::Value| redis::from_redis_value::<String>(v.clone()).unwrap_or_default();
    let Some(r) = role_of(replica) else { return false };
    let replica_ok = r.len() >= 4
        && text(&r[0]) == "slave"
        && redis::from_redis_value::<u16>(r[2].clone()).ok() == Some(master)
        && text(&r[3]) == "connected";
    let Some(m) = role_of(master) else { return false };
    let listed = m.len() >= 3
        && text(&m[0]) == "master"
        && redis::from_redis_value::<Vec<Vec<String>>>(m[2].clone())
            .is_ok_and(|rs| rs.iter().any(|r| r.get(1).map(String::as_str) == Some(replica.to_string().as_str())));
    // The master must also know, on the cluster bus, that `replica` is its replica: otherwise it
    // ignores the replica's manual-failover request.
    let Ok(mut con) = redis::Client::open(format!("redis://127.0.0.1:{master}")).and_then(|c| c.get_connection())
    else {
        return false;
    };
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con).unwrap_or_default();
    let my_id = nodes.lines().find(|l| l.contains("myself")).and_then(|l| l.split(' ').next()).unwrap_or("?");
    let bus_ok = nodes.lines().any(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() > 3 && f[1].starts_with(&format!("127.0.0.1:{replica}@")) && f[2].contains("slave") && f[3] == my_id
    });
    replica_ok && listed && bus_ok
}

/// True when every node of the cluster sees `replica` as a replica of `master` on the cluster bus:
/// a voter that still sees `replica` as a master (or as another node's replica) denies it its vote.
fn all_see_replica_of(replica: u16, master: u16) -> bool {
    let view = |port: u16| -> Option<String> {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?.get_connection().ok()?;
        redis::cmd("CLUSTER").arg("NODES").query(&mut con).ok()
    };
    let id_of = |nodes: &str, port: u16| -> Option<String> {
        nodes
            .lines()
            .find(|l| l.split(' ').nth(1).is_some_and(|a| a.starts_with(&format!("127.0.0.1:{port}@"))))
            .and_then(|l| l.split(' ').next().map(str::to_string))
    };
    nodes().iter().all(|n| {
        let Some(port) = n.rsplit(':').next().and_then(|p| p.parse::<u16>().ok()) else { return false };
        let Some(view) = view(port) else { return false };
        let Some(master_id) = id_of(&view, master) else { return false };
        view.lines().any(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            f.len() > 3
                && f[1].starts_with(&format!("127.0.0.1:{replica}@"))
                && f[2].contains("slave")
                && f[3] == master_id
        })
    })
}

/// Promotes `replica` with a coordinated manual failover (the master pauses writes until the
/// replica caught up, then the masters vote). A vote can still be denied on a loaded machine (a
/// voter's view lags, or the election outlives the manual failover's 5 s); then, with
/// `takeover_fallback`, the replica takes over without a vote (safe here: it is linked and caught up).
fn failover_to(replica: u16, master: u16, takeover_fallback: bool) {
    assert!(
        eventually(Duration::from_secs(20), || linked(replica, master) && all_see_replica_of(replica, master)),
        "{replica} is not a linked replica of {master} in every node's view"
    );
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{replica}")).unwrap().get_connection().unwrap();
    record_failover();
    let _: () = redis::cmd("CLUSTER").arg("FAILOVER").query(&mut con).unwrap();
    if eventually(Duration::from_secs(15), || role(replica) == "master") {
        record_failover();
        return;
    }
    assert!(
        takeover_fallback,
        "failover to {replica} did not finish (a replica cannot run two elections within 4 x \
         cluster-node-timeout; see wait_for_failover_cooldown)"
    );
    eprintln!("coordinated failover to {replica} did not finish; taking over without a vote");
    record_failover();
    let _: () = redis::cmd("CLUSTER").arg("FAILOVER").arg("TAKEOVER").query(&mut con).unwrap();
    assert!(eventually(Duration::from_secs(15), || role(replica) == "master"), "takeover by {replica} did not finish");
    record_failover();
}

fn cluster_ok() -> bool {
    nodes().iter().all(|n| {
        redis::Client::open(format!("redis://{n}"))
            .and_then(|c| c.get_connection())
            .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
            .is_ok_and(|i| i.contains("cluster_state:ok"))
    })
}

#[test]
#[serial(redis_cluster)]
fn cluster_failover_keeps_sessions_leases_and_tokens() {
    init_log();
    wait_for_failover_cooldown();
    let url = format!("redis+cluster://{}", nodes().join(","));
    let b = RedisBackend::connect(&url, options()).unwrap();
    let d = Duration::from_secs(3);
    let sid = b.open_session(d, "").unwrap().id;
    let l = spread("failover", 1, &sid).remove(0);
    let t = token(b.acquire(&sid, &l));
    let slot = Slot::for_key(lease_key(&l));
    let slot_number = (0..16384u16).find(|s| Slot::new(*s) == Some(slot)).unwrap();
    let (master, replicas) = slot_nodes(slot_number);
    assert!(!replicas.is_empty(), "slot {slot_number} has no replica");

    // Renew throughout the failover, like the renewal thread would.
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (b, sid, stop, l) = (b.clone(), sid.clone(), stop.clone(), l.clone());
        thread::spawn(move || {
            let mut last_ok = Instant::now();
            let mut longest_gap = Duration::ZERO;
            let mut errors = 0;
            while !stop.load(Ordering::SeqCst) {
                match b.keep_alive(&sid, d) {
                    Ok(KeepAlive::Alive { owned, .. }) if owned.contains(&(l.clone(), t)) => {
                        longest_gap = longest_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                    }
                    Ok(other) => panic!("renewal during failover: {other:?}"),
                    Err(e) => {
                        assert!(e.is_retryable(), "{e}");
                        errors += 1;
                    }
                }
                thread::sleep(Duration::from_millis(200));
            }
            (longest_gap.max(last_ok.elapsed()), errors)
        })
    };
    thread::sleep(Duration::from_millis(500));
    failover_to(replicas[0], master, false);
    thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::SeqCst);
    let (gap, errors) = renewer.join().unwrap();
    eprintln!(
        "failover of slot {slot_number} from {master} to {}: longest renewal gap {gap:?}, {errors} failed renewals",
        replicas[0]
    );
    assert!(gap < d, "the session went {gap:?} without a successful renewal");

    // The term and its token survived; pub/sub still works; the next term is token + 1.
    let h = b.holder(&l).unwrap().unwrap();
    assert_eq!((h.session.clone(), h.token), (sid.clone(), t));
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    b.release(&sid, &l, t).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(3)).unwrap(), Notification::Released(l.clone()));
    let other = b.open_session(d, "").unwrap().id;
    assert_eq!(token(b.acquire(&other, &l)).get(), t.get() + 1);
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();

    // Fail back, so the cluster looks as before (once the old master replicates from the new one).
    failover_to(master, replicas[0], true);
    assert!(eventually(Duration::from_secs(15), cluster_ok), "cluster did not settle after failing back");
}

/// A replica that ran an election cannot start another for 4 x cluster-node-timeout ("Failover
/// attempt expired"; a manual failover then times out after pausing writes for 5 s). A re-run of
/// the failover test waits that long after the previous run's elections.
fn failover_stamp() -> std::path::PathBuf {
    std::env::temp_dir().join("simba-test-redis-cluster-failover.last")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64
}

fn record_failover() {
    let _ = std::fs::write(failover_stamp(), now_ms().to_string());
}

fn wait_for_failover_cooldown() {
    let last: u64 = std::fs::read_to_string(failover_stamp()).ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let ready = last + (node_timeout() * 4).as_millis() as u64 + 1000;
    let now = now_ms();
    if ready > now {
        eprintln!("waiting {} ms for the cluster's failover cooldown", ready - now);
        thread::sleep(Duration::from_millis(ready - now));
    }
}

fn group_key(g: &Name) -> String {
    format!("simba:group:{{{g}}}")
}

/// `n` group names whose keys are in pairwise different slots, none in the session's.
fn spread_groups(prefix: &str, n: usize, sid: &SessionId) -> Vec<Name> {
    let mut slots = HashSet::from([Slot::for_key(format!("simba:session:{{{sid}}}"))]);
    let mut out = Vec::new();
    while out.len() < n {
        let candidate = name(prefix);
        if slots.insert(Slot::for_key(group_key(&candidate))) {
            out.push(candidate);
        }
    }
    out
}

/// The groups one keep-alive reports (asserting they come sorted, without duplicates).
fn groups(b: &RedisBackend, sid: &SessionId) -> Vec<Name> {
    match b.keep_alive(sid, D).unwrap() {
        KeepAlive::Alive { groups, .. } => {
            assert!(groups.windows(2).all(|w| w[0] < w[1]), "groups not sorted and unique: {groups:?}");
            groups
        }
        KeepAlive::Expired => panic!("session {sid} unexpectedly expired"),
    }
}

fn sorted<'a>(names: impl IntoIterator<Item = &'a Name>) -> Vec<Name> {
    let mut v: Vec<Name> = names.into_iter().cloned().collect();
    v.sort();
    v
}

fn group_index(raw: &mut Raw, sid: &SessionId) -> HashSet<String> {
    raw.smembers(&format!("simba:session:{{{sid}}}:groups"))
}

impl Raw {
    fn zrem(&mut self, key: &str, member: &str) -> i64 {
        redis::cmd("ZREM").arg(key).arg(member).query(&mut self.0).unwrap()
    }
    /// Sets the score of an existing entry to 10 ms before its node's now (an expired membership).
    fn expire_member(&mut self, key: &str, member: &str) {
        let past = self.now_at(key) - 10;
        let added: i64 = redis::cmd("ZADD").arg(key).arg("XX").arg(past).arg(member).query(&mut self.0).unwrap();
        assert_eq!(added, 0);
        let score: Option<f64> = redis::cmd("ZSCORE").arg(key).arg(member).query(&mut self.0).unwrap();
        assert_eq!(score.map(|s| s as i64), Some(past), "{key} {member}");
    }
}

#[test]
#[serial(redis_cluster)]
fn keep_alive_reports_exactly_the_joined_groups_across_slots_in_one_call_per_slot() {
    let (b, faults) = faulty();
    let (sid, other) = (b.open_session(D, "").unwrap().id, b.open_session(D, "").unwrap().id);
    let gs = spread_groups("ka-g", 4, &sid);
    let own = name("ka-other");
    assert!(groups(&b, &sid).is_empty());
    for g in gs.iter().rev() {
        b.join(&sid, g).unwrap();
    }
    b.join(&sid, &gs[0]).unwrap();
    // Another session's memberships (in a shared group and in its own) are never reported.
    b.join(&other, &gs[0]).unwrap();
    b.join(&other, &own).unwrap();
    faults.clear();
    assert_eq!(groups(&b, &sid), sorted(&gs));
    let calls = faults.calls();
    assert_eq!(calls[0].script, "keep_alive_session");
    assert_eq!(calls.len(), 1 + gs.len(), "one follow-up per slot, nothing more: {calls:?}");
    assert!(calls[1..].iter().all(|c| c.script == "renew_slot"), "{calls:?}");
    assert_eq!(groups(&b, &other), sorted([&gs[0], &own]));
    b.leave(&sid, &gs[1]).unwrap();
    let left = sorted([&gs[0], &gs[2], &gs[3]]);
    assert_eq!(groups(&b, &sid), left);
    assert_eq!(groups(&b, &sid), left, "stable across renewals");
    assert_eq!(groups(&b, &other), sorted([&gs[0], &own]));
    // Leases do not show up as groups, nor groups as leases.
    let l = spread("ka-lease", 1, &sid).remove(0);
    let t = token(b.acquire(&sid, &l));
    match b.keep_alive(&sid, D).unwrap() {
        KeepAlive::Alive { owned, groups, .. } => {
            assert_eq!(owned, vec![(l.clone(), t)]);
            assert_eq!(groups, left);
        }
        KeepAlive::Expired => panic!("expired"),
    }
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn a_membership_removed_behind_the_sessions_back_is_not_reported_on_cluster() {
    let (b, _faults) = faulty();
    let mut raw = Raw::new();
    let (sid, other) = (b.open_session(D, "").unwrap().id, b.open_session(D, "").unwrap().id);
    let gs = spread_groups("back-g", 3, &sid);
    let (gone, expired, kept) = (&gs[0], &gs[1], &gs[2]);
    for g in &gs {
        b.join(&sid, g).unwrap();
        b.join(&other, g).unwrap();
    }
    assert_eq!(groups(&b, &sid), sorted(&gs));
    // A leave that reached the server late; an entry whose score passed.
    assert_eq!(raw.zrem(&group_key(gone), sid.as_str()), 1);
    raw.expire_member(&group_key(expired), sid.as_str());
    assert_eq!(groups(&b, &sid), vec![kept.clone()]);
    assert_eq!(groups(&b, &sid), vec![kept.clone()]);
    assert_eq!(group_index(&mut raw, &sid), HashSet::from([kept.to_string()]), "lost memberships leave the index");
    assert_eq!(groups(&b, &other), sorted(&gs), "the other session's memberships are untouched");
    b.join(&sid, gone).unwrap();
    assert_eq!(groups(&b, &sid), sorted([gone, kept]), "a re-join is reported again");
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn a_failed_follow_up_keeps_its_slots_groups_listed() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let gs = spread_groups("unknown-g", 4, &sid);
    for g in &gs {
        b.join(&sid, g).unwrap();
    }
    // gs[1] and gs[3] are gone; the follow-ups of gs[2] and gs[3] fail.
    assert_eq!(raw.zrem(&group_key(&gs[1]), sid.as_str()), 1);
    assert_eq!(raw.zrem(&group_key(&gs[3]), sid.as_str()), 1);
    for g in [&gs[2], &gs[3]] {
        faults.rule(Rule { script: "renew_slot", fail: true, key: Some(group_key(g)), ..Rule::default() });
    }
    faults.calls.lock().clear();
    // Unknown is not lost: the failed slots' groups are listed (gs[3] too: its node could not tell);
    // gs[1], which its node reported gone, is not.
    assert_eq!(groups(&b, &sid), sorted([&gs[0], &gs[2], &gs[3]]));
    assert_eq!(faults.count("renew_slot"), 4, "{:?}", faults.calls());
    assert_eq!(groups(&b, &sid), sorted([&gs[0], &gs[2], &gs[3]]));
    assert!(group_index(&mut raw, &sid).contains(gs[3].as_str()), "an unknown membership stays in the index");
    assert!(!group_index(&mut raw, &sid).contains(gs[1].as_str()));
    // Once the node answers, the lost membership is no longer listed and leaves the index.
    faults.clear();
    assert_eq!(groups(&b, &sid), sorted([&gs[0], &gs[2]]));
    assert_eq!(groups(&b, &sid), sorted([&gs[0], &gs[2]]));
    assert_eq!(group_index(&mut raw, &sid), HashSet::from([gs[0].to_string(), gs[2].to_string()]));
    let members = b.members(&gs[2]).unwrap();
    assert_eq!(members.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![sid.clone()]);
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn a_failing_slot_gives_up_its_leases_but_keeps_listing_its_groups() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let l = spread("shared-slot", 1, &sid).remove(0);
    let g = loop {
        let candidate = name("shared-slot-g");
        if Slot::for_key(group_key(&candidate)) == Slot::for_key(lease_key(&l)) {
            break candidate;
        }
    };
    let elsewhere = spread_groups("shared-slot-other", 2, &sid)
        .into_iter()
        .find(|o| Slot::for_key(group_key(o)) != Slot::for_key(lease_key(&l)))
        .unwrap();
    token(b.acquire(&sid, &l));
    b.join(&sid, &g).unwrap();
    b.join(&sid, &elsewhere).unwrap();
    // The slot's node is unreachable (the rules match the follow-up with or without the lease,
    // which leaves the index after one lease period).
    for key in [lease_key(&l), group_key(&g)] {
        faults.rule(Rule { script: "renew_slot", fail: true, key: Some(key), ..Rule::default() });
    }
    let started = Instant::now();
    let (mut failed, mut alive) = (0, 0);
    while started.elapsed() < D + D / 3 {
        match b.keep_alive(&sid, D) {
            // The lease's follow-up failed recently: the renewal fails, the engine retries.
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
                assert_eq!(alive, 0, "failed again after giving the lease up: {e}");
                failed += 1;
            }
            // The lease is given up; its slot's membership is still unknown, so still listed.
            Ok(KeepAlive::Alive { owned, groups, .. }) => {
                assert!(owned.is_empty(), "{owned:?}");
                assert_eq!(groups, sorted([&g, &elsewhere]));
                alive += 1;
            }
            Ok(KeepAlive::Expired) => panic!("the session expired"),
        }
        thread::sleep(Duration::from_millis(100));
    }
    assert!(failed >= 2 && alive >= 2, "{failed} failed, {alive} alive renewals");
    // Two more renewals: the first marks the lease (failing for over one lease period) for the
    // index, the second's session call removes it.
    for _ in 0..2 {
        assert_eq!(groups(&b, &sid), sorted([&g, &elsewhere]));
    }
    let index = group_index(&mut raw, &sid);
    assert!(index.contains(g.as_str()), "{index:?}");
    let leases = raw.smembers(&format!("simba:session:{{{sid}}}:leases"));
    assert!(!leases.contains(l.as_str()), "the lease left the index after one lease period: {leases:?}");
    // The node answers again: the membership it never renewed has expired, so it is lost now.
    faults.clear();
    assert_eq!(groups(&b, &sid), vec![elsewhere.clone()]);
    b.close_session(&sid).unwrap();
}

// Private clusters (never the shared one): a frozen node, a slot migrating between nodes, a
// replica taking over. The backend's own routing must keep every call within its query timeout.

#[path = "redis_private_cluster.rs"]
mod private_cluster;

use private_cluster::{PrivateCluster, Ranges};

fn slot_number(key: &str) -> u16 {
    let slot = Slot::for_key(key);
    (0..16384u16).find(|s| Slot::new(*s) == Some(slot)).unwrap()
}

fn session_key(sid: &SessionId) -> String {
    format!("simba:session:{{{sid}}}")
}

fn private_backend(c: &PrivateCluster, query_timeout: Duration) -> RedisBackend {
    init_log();
    RedisBackend::connect(&c.url(), RedisOptions::builder().query_timeout(query_timeout).build().unwrap()).unwrap()
}

/// The port of the master serving `key`.
fn port_of(c: &PrivateCluster, key: &str) -> u16 {
    c.master_of(slot_number(key)).port
}

/// A new name whose key (by `key`) is served by the master on `port`.
fn name_on(ranges: &Ranges, port: u16, prefix: &str, key: fn(&Name) -> String) -> Name {
    loop {
        let n = name(prefix);
        let s = slot_number(&key(&n));
        if ranges.iter().any(|r| (r.0..=r.1).contains(&s) && r.2 == port) {
            return n;
        }
    }
}

/// Runs `f`, asserting it returned within `bound`.
fn within<T>(what: &str, bound: Duration, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let r = f();
    let took = start.elapsed();
    assert!(took < bound, "{what} took {took:?}, more than {bound:?}");
    r
}

#[test]
#[serial(redis_cluster)]
fn every_call_ends_within_the_query_timeout_while_a_node_is_frozen() {
    let c = PrivateCluster::start(3, 0);
    let qt = Duration::from_millis(500);
    // The query timeout plus scheduling on a loaded machine; the driver's own cluster connection
    // took several query timeouts here (a fresh connection PINGs node after node).
    let bound = qt + Duration::from_millis(300);
    let b = private_backend(&c, qt);
    let d = Duration::from_secs(30);
    let sid = b.open_session(d, "").unwrap().id;
    let ranges = private_cluster::slots(&c.masters[0]).unwrap();
    let home = port_of(&c, &session_key(&sid));
    let frozen = c.masters.iter().find(|m| m.port != home).unwrap();
    let other = c.masters.iter().find(|m| m.port != home && m.port != frozen.port).unwrap().port;
    let l_frozen = name_on(&ranges, frozen.port, "frozen", lease_key);
    let l_other = name_on(&ranges, other, "other", lease_key);
    let g_frozen = name_on(&ranges, frozen.port, "frozen-g", group_key);
    let g_home = name_on(&ranges, home, "home-g", group_key);
    let t_frozen = token(b.acquire(&sid, &l_frozen));
    let t_other = token(b.acquire(&sid, &l_other));
    b.join(&sid, &g_frozen).unwrap();
    // A member of a group on the session's node whose own session lives on the frozen node.
    let sid2 = loop {
        let s = b.open_session(d, "").unwrap().id;
        if port_of(&c, &session_key(&s)) == frozen.port {
            break s;
        }
        b.close_session(&s).unwrap();
    };
    b.join(&sid2, &g_home).unwrap();
    assert_eq!(owned(&b, &sid, d).len(), 2);

    // Frozen (SIGSTOP): its connections stay open and new ones are accepted; nothing answers.
    // Dropping `c` resumes it, also when an assertion fails.
    frozen.pause();
    let unavailable = |what: &str, r: Result<(), Error>| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::Unavailable, "{what}: {e}");
    };
    // The renewal's follow-up to the frozen node.
    unavailable("keep_alive", within("keep_alive", bound, || b.keep_alive(&sid, d).map(drop)));
    // Two scripts: the session's slot answers, the lease's slot does not.
    let new_frozen = name_on(&ranges, frozen.port, "frozen-new", lease_key);
    unavailable("acquire", within("acquire", bound, || b.acquire(&sid, &new_frozen).map(drop)));
    // Other nodes serve on: the slot map is re-read from a node that did not fail.
    let new_other = name_on(&ranges, other, "other-new", lease_key);
    let t_new = within("acquire elsewhere", bound, || token(b.acquire(&sid, &new_other)));
    unavailable("release", within("release", bound, || b.release(&sid, &l_frozen, t_frozen)));
    unavailable("holder", within("holder", bound, || b.holder(&l_frozen).map(drop)));
    let h = within("holder elsewhere", bound, || b.holder(&l_other)).unwrap().unwrap();
    assert_eq!((h.session, h.token), (sid.clone(), t_other));
    let g_new = name_on(&ranges, frozen.port, "frozen-g-new", group_key);
    unavailable("join", within("join", bound, || b.join(&sid, &g_new)));
    unavailable("leave", within("leave", bound, || b.leave(&sid, &g_frozen)));
    // The group's node answers, the member's session node does not.
    unavailable("members", within("members", bound, || b.members(&g_home).map(drop)));
    unavailable("close", within("close", bound, || b.close_session(&sid)));
    // Once the node answers again, everything works again: a repeated close finishes.
    frozen.resume();
    assert!(eventually(Duration::from_secs(5), || b.close_session(&sid).is_ok()), "close did not finish");
    for (l, t) in [(&l_frozen, t_frozen), (&l_other, t_other), (&new_other, t_new)] {
        let other_session = b.open_session(d, "").unwrap().id;
        assert_eq!(token(b.acquire(&other_session, l)).get(), t.get() + 1, "{l}");
    }
    let members = b.members(&g_home).unwrap();
    assert_eq!(members.iter().map(|m| m.session.clone()).collect::<Vec<_>>(), vec![sid2]);
}

#[test]
#[serial(redis_cluster)]
fn calls_follow_ask_and_moved_redirects_while_a_slot_migrates() {
    let c = PrivateCluster::start(2, 0);
    let qt = Duration::from_secs(1);
    let b = private_backend(&c, qt);
    let d = Duration::from_secs(30);
    let sid = b.open_session(d, "").unwrap().id;
    let session_slot = slot_number(&session_key(&sid));
    let l = loop {
        let n = name("migrating");
        if slot_number(&lease_key(&n)) != session_slot {
            break n;
        }
    };
    let s = slot_number(&lease_key(&l));
    let from = c.master_of(s);
    let to = c.masters.iter().find(|m| m.port != from.port).unwrap();
    let (from_id, to_id) = (c.id(from), c.id(to));
    let t = token(b.acquire(&sid, &l));
    let l2 = loop {
        let n = name("migrating-2");
        if Slot::for_key(lease_key(&n)) == Slot::for_key(lease_key(&l)) {
            break n;
        }
    };

    // The slot starts moving: keys that are not on `from` any more (or yet) are asked for on `to`.
    to.cmd(&["CLUSTER", "SETSLOT", &s.to_string(), "IMPORTING", &from_id]);
    from.cmd(&["CLUSTER", "SETSLOT", &s.to_string(), "MIGRATING", &to_id]);
    let t2 = within("acquire (ASK)", qt, || token(b.acquire(&sid, &l2)));
    assert_eq!(to.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]), "1", "the new lease is on the importing node");
    assert_eq!(from.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]), "1");
    // A renewal follow-up naming keys on both nodes gets TRYAGAIN: a retryable failure.
    let e = within("keep_alive (TRYAGAIN)", qt, || b.keep_alive(&sid, d)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");

    // The slot has moved; the backend's slot map still names `from`, which answers MOVED.
    from.cmd(&["MIGRATE", "127.0.0.1", &to.port.to_string(), "", "0", "5000", "KEYS", &lease_key(&l)]);
    for n in [to, from] {
        n.cmd(&["CLUSTER", "SETSLOT", &s.to_string(), "NODE", &to_id]);
    }
    let mut got = within("keep_alive (MOVED)", qt, || owned(&b, &sid, d));
    got.sort();
    let mut want = vec![(l.clone(), t), (l2.clone(), t2)];
    want.sort();
    assert_eq!(got, want);
    let h = within("holder", qt, || b.holder(&l)).unwrap().unwrap();
    assert_eq!((h.session, h.token), (sid.clone(), t));
    within("release", qt, || b.release(&sid, &l, t)).unwrap();
    let other = b.open_session(d, "").unwrap().id;
    assert_eq!(within("acquire", qt, || token(b.acquire(&other, &l))).get(), t.get() + 1);
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

#[test]
#[serial(redis_cluster)]
fn renewals_follow_a_manual_failover_within_the_query_timeout() {
    let c = PrivateCluster::start(1, 1);
    let qt = Duration::from_secs(1);
    let bound = qt + Duration::from_millis(300);
    let b = private_backend(&c, qt);
    let d = Duration::from_secs(3);
    let sid = b.open_session(d, "").unwrap().id;
    let l = name("failover");
    let t = token(b.acquire(&sid, &l));
    let (master, replica) = (&c.masters[0], &c.replicas[0]);
    assert!(eventually(Duration::from_secs(10), || master.replicated(1)), "the replica did not catch up");

    // Renew throughout, like the renewal thread would; every renewal ends within the query timeout.
    let stop = Arc::new(AtomicBool::new(false));
    let renewer = {
        let (b, sid, stop, l) = (b.clone(), sid.clone(), stop.clone(), l.clone());
        thread::spawn(move || {
            let mut last_ok = Instant::now();
            let (mut longest_gap, mut errors) = (Duration::ZERO, 0);
            while !stop.load(Ordering::SeqCst) {
                match within("keep_alive", bound, || b.keep_alive(&sid, d)) {
                    Ok(KeepAlive::Alive { owned, .. }) => {
                        assert_eq!(owned, vec![(l.clone(), t)]);
                        longest_gap = longest_gap.max(last_ok.elapsed());
                        last_ok = Instant::now();
                    }
                    Ok(KeepAlive::Expired) => panic!("the session expired"),
                    Err(e) => {
                        assert!(e.is_retryable(), "{e}");
                        errors += 1;
                    }
                }
                thread::sleep(Duration::from_millis(100));
            }
            (longest_gap.max(last_ok.elapsed()), errors)
        })
    };
    thread::sleep(Duration::from_millis(300));
    // Coordinated: the master pauses writes until the replica caught up, then they swap roles.
    replica.cmd(&["CLUSTER", "FAILOVER"]);
    let role = |n: &private_cluster::PrivateRedis, r: &str| n.try_cmd(&["ROLE"]).is_some_and(|x| x.starts_with(r));
    assert!(eventually(Duration::from_secs(15), || role(replica, "master")), "the replica was not promoted");
    assert!(eventually(Duration::from_secs(15), || role(master, "slave")), "the old master was not demoted");
    // The backend's slot map still names the old master, which now answers MOVED.
    thread::sleep(Duration::from_secs(1));
    stop.store(true, Ordering::SeqCst);
    let (gap, errors) = renewer.join().unwrap();
    eprintln!("manual failover: longest renewal gap {gap:?}, {errors} failed renewals");
    assert!(gap < d, "the session went {gap:?} without a successful renewal");
    let h = within("holder", bound, || b.holder(&l)).unwrap().unwrap();
    assert_eq!((h.session, h.token), (sid.clone(), t));
    within("release", bound, || b.release(&sid, &l, t)).unwrap();
    let other = b.open_session(d, "").unwrap().id;
    assert_eq!(within("acquire", bound, || token(b.acquire(&other, &l))).get(), t.get() + 1);
}

/// Issue #19: a keep-alive costs one round trip for the session call plus one per node holding
/// the session's leases (the follow-ups bound for one node go as one pipeline), not one per slot.
/// Every client connection goes through a counting proxy: the nodes announce the proxies' ports.
#[test]
#[serial(redis_cluster)]
fn keep_alive_sends_one_call_per_node() {
    let c = PrivateCluster::start(3, 0);
    let proxies: Vec<support::proxy::Proxy> =
        c.masters.iter().map(|m| support::proxy::Proxy::start(&format!("127.0.0.1:{}", m.port))).collect();
    for (m, p) in c.masters.iter().zip(&proxies) {
        m.cmd(&["CONFIG", "SET", "cluster-announce-port", &p.port().to_string()]);
    }
    let announced = |n: &private_cluster::PrivateRedis| {
        private_cluster::slots(n).is_some_and(|r| r.iter().all(|x| proxies.iter().any(|p| p.port() == x.2)))
    };
    assert!(
        eventually(Duration::from_secs(20), || c.masters.iter().all(announced)),
        "the nodes did not announce the proxies' ports"
    );
    init_log();
    let url = format!("redis+cluster://{}", proxies.iter().map(|p| p.addr()).collect::<Vec<_>>().join(","));
    let b = RedisBackend::connect(&url, RedisOptions::builder().query_timeout(Duration::from_secs(5)).build().unwrap())
        .unwrap();
    let d = Duration::from_secs(30);
    let sid = b.open_session(d, "").unwrap().id;
    // Enough leases for the nodes' pipelines to run at the same time (a large batch).
    let leases: Vec<Name> = (0..120).map(|_| name("pipelined")).collect();
    for l in &leases {
        token(b.acquire(&sid, l));
    }
    let ranges = private_cluster::slots(&c.masters[0]).unwrap();
    let nodes_in_use: HashSet<u16> = leases
        .iter()
        .map(|l| {
            let s = slot_number(&lease_key(l));
            ranges.iter().find(|r| (r.0..=r.1).contains(&s)).unwrap().2
        })
        .collect();
    let slots_in_use: HashSet<u16> = leases.iter().map(|l| slot_number(&lease_key(l))).collect();
    assert_eq!(nodes_in_use.len(), 3, "120 random names land on every node");
    // Warm up: every node has loaded the scripts, the slot map is fresh.
    assert!(matches!(b.keep_alive(&sid, d).unwrap(), KeepAlive::Alive { .. }));
    let before: usize = proxies.iter().map(|p| p.requests()).sum();
    let scripts_before: u64 = c.masters.iter().map(evalsha_calls).sum();
    let KeepAlive::Alive { owned, .. } = b.keep_alive(&sid, d).unwrap() else { panic!("expired") };
    let round_trips = proxies.iter().map(|p| p.requests()).sum::<usize>() - before;
    let scripts = c.masters.iter().map(evalsha_calls).sum::<u64>() - scripts_before;
    assert_eq!(owned.len(), leases.len(), "every lease is reported owned: {owned:?}");
    eprintln!("keep-alive of {} leases on {} slots: {round_trips} round trips", leases.len(), slots_in_use.len());
    assert_eq!(
        round_trips,
        1 + nodes_in_use.len(),
        "the session call plus one pipeline per node ({} slots in use)",
        slots_in_use.len()
    );
    // One script per node renews all of that node's slots (it was one script per slot).
    assert_eq!(scripts, 1 + nodes_in_use.len() as u64, "the session script plus one per node");
    b.close_session(&sid).unwrap();
}

/// `EVALSHA` calls a private node has run so far (`INFO commandstats`).
fn evalsha_calls(n: &private_cluster::PrivateRedis) -> u64 {
    let info = n.cmd(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Follow-ups grouped by a stale slot map (here: every slot as if one node served them all) still
/// renew every lease by its own node: the node the call reaches renews the slots it serves and
/// reports the others, which are then renewed alone, each on its own node.
#[test]
fn follow_ups_grouped_on_the_wrong_node_renew_the_other_slots_alone() {
    let (b, faults) = faulty();
    faults.lump.store(true, Ordering::SeqCst);
    let d = Duration::from_secs(30);
    let sid = b.open_session(d, "").unwrap().id;
    let leases: Vec<Name> = (0..30).map(|_| name("lumped")).collect();
    for l in &leases {
        token(b.acquire(&sid, l));
    }
    let slots: HashSet<u16> = leases.iter().map(|l| slot_number(&lease_key(l))).collect();
    let before = faults.calls().len();
    let KeepAlive::Alive { owned, .. } = b.keep_alive(&sid, d).unwrap() else { panic!("expired") };
    let renewals: Vec<Call> = faults.calls()[before..].iter().filter(|c| c.script == "renew_slot").cloned().collect();
    assert_eq!(owned.len(), leases.len(), "every lease is renewed: {owned:?}");
    let first = renewals.first().expect("a follow-up was sent");
    let node = slot_nodes(slot_number(&first.keys[0])).0;
    let elsewhere = slots.iter().filter(|s| slot_nodes(**s).0 != node).count();
    // 30 random names all on one of three masters: a chance of 3^-29.
    assert!(elsewhere > 0, "every slot is on the node of the first");
    assert_eq!(renewals.len(), 1 + elsewhere, "one call for all, then one per slot of another node: {renewals:?}");
    for c in &renewals[1..] {
        let s = slot_number(&c.keys[0]);
        assert_ne!(slot_nodes(s).0, node, "{c:?}");
        assert!(c.keys.iter().all(|k| slot_number(k) == s), "a call alone names one slot's keys: {c:?}");
    }
    b.close_session(&sid).unwrap();
}

/// Issue #36 finding 1: a release leaves the name in the session's lease index; the next renewal
/// finds it free and schedules its removal; the session acquires it again (the name is already
/// indexed: no generation bump) — and the renewal after that removed it from the index without
/// looking again, so the valid term was reported lost one renewal later. A name scheduled for
/// removal is unscheduled when the session acquires it again: the new term stays indexed and is
/// listed by every renewal, as a control lease held throughout is.
#[test]
#[serial(redis_cluster)]
fn a_lease_acquired_again_after_a_renewal_scheduled_its_removal_stays_owned() {
    let (b, _) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let names = spread("reacquire", 2, &sid);
    let (x, control) = (&names[0], &names[1]);
    let tc = token(b.acquire(&sid, control));
    let t1 = token(b.acquire(&sid, x));
    b.release(&sid, x, t1).unwrap();
    let first = owned(&b, &sid, D);
    assert_eq!(first, vec![(control.clone(), tc)], "the released term is not owned");
    let t2 = token(b.acquire(&sid, x));
    assert_eq!(t2.get(), t1.get() + 1);
    for k in 1..=2 {
        let mut o = owned(&b, &sid, D);
        o.sort();
        let mut expected = vec![(control.clone(), tc), (x.clone(), t2)];
        expected.sort();
        assert_eq!(o, expected, "renewal {k} after the re-acquire");
    }
    let index = format!("simba:session:{{{sid}}}:leases");
    assert!(raw.smembers(&index).contains(x.as_str()), "the re-acquired name left the index");
    b.close_session(&sid).unwrap();
}

/// The group form of the same finding: a join whose group call failed leaves the name in the
/// session's group index without a membership; the next renewal finds the membership gone and
/// schedules the name's removal; the session joins again (already indexed) — and the renewal
/// after that removed the name, so the membership was reported missing (a spurious
/// `MembershipLost`, then `MembershipRestored` once re-joined).
#[test]
#[serial(redis_cluster)]
fn a_group_joined_again_after_a_renewal_scheduled_its_removal_stays_a_membership() {
    let (b, faults) = faulty();
    let sid = b.open_session(D, "").unwrap().id;
    let g = name("rejoin");
    let groups = |b: &RedisBackend| match b.keep_alive(&sid, D).unwrap() {
        KeepAlive::Alive { groups, .. } => groups,
        KeepAlive::Expired => panic!("session {sid} unexpectedly expired"),
    };
    faults.rule(Rule { script: "join_group", fail: true, times: Some(1), ..Rule::default() });
    let err = b.join(&sid, &g).unwrap_err();
    assert!(err.to_string().contains("injected failure"), "{err}");
    assert!(groups(&b).is_empty(), "no membership after the failed join");
    b.join(&sid, &g).unwrap();
    for k in 1..=2 {
        assert_eq!(groups(&b), vec![g.clone()], "renewal {k} after the join");
    }
    b.close_session(&sid).unwrap();
}

/// The sequence of the issue for groups, join → leave → renewal → join → two renewals: the leave
/// removes the name from the index itself, so no renewal schedules it (this passed before the
/// fix too; kept as the brief's sequence).
#[test]
#[serial(redis_cluster)]
fn a_group_joined_again_after_a_leave_and_a_renewal_stays_a_membership() {
    let (b, _) = faulty();
    let sid = b.open_session(D, "").unwrap().id;
    let g = name("releave");
    let groups = |b: &RedisBackend| match b.keep_alive(&sid, D).unwrap() {
        KeepAlive::Alive { groups, .. } => groups,
        KeepAlive::Expired => panic!("session {sid} unexpectedly expired"),
    };
    b.join(&sid, &g).unwrap();
    b.leave(&sid, &g).unwrap();
    assert!(groups(&b).is_empty());
    b.join(&sid, &g).unwrap();
    for k in 1..=2 {
        assert_eq!(groups(&b), vec![g.clone()], "renewal {k} after the join");
    }
    b.close_session(&sid).unwrap();
}

/// Finding 1 with the re-acquire racing the removal: the renewal after the one that found the
/// name free has taken the removal and is about to send it when the session acquires the name
/// again (already indexed: its own `SADD` changes nothing, then the removal lands). The renewal
/// that removed it does not list the new term (established after its send, which the engine does
/// not judge by that reply); the renewal after it indexes the name again and lists the term.
#[test]
#[serial(redis_cluster)]
fn a_lease_acquired_again_while_a_renewal_removes_it_is_indexed_again() {
    let (b, faults) = faulty();
    let mut raw = Raw::new();
    let sid = b.open_session(D, "").unwrap().id;
    let x = spread("race-reacquire", 1, &sid).remove(0);
    let t1 = token(b.acquire(&sid, &x));
    b.release(&sid, &x, t1).unwrap();
    assert!(owned(&b, &sid, D).is_empty());
    let (arrived, go) = faults.hold_next("keep_alive_session");
    let renewal = {
        let (b, sid) = (b.clone(), sid.clone());
        thread::spawn(move || b.keep_alive(&sid, D))
    };
    arrived.recv_timeout(Duration::from_secs(10)).expect("the renewal reached the port");
    let t2 = token(b.acquire(&sid, &x));
    go.send(()).unwrap();
    let KeepAlive::Alive { .. } = renewal.join().unwrap().unwrap() else { panic!("expired") };
    for k in 1..=2 {
        assert_eq!(owned(&b, &sid, D), vec![(x.clone(), t2)], "renewal {k} after the one that raced");
    }
    let index = format!("simba:session:{{{sid}}}:leases");
    assert!(raw.smembers(&index).contains(x.as_str()), "the re-acquired name is indexed");
    b.close_session(&sid).unwrap();
}

/// Finding 1 through the public API: lock, release, lock again across renewals (lease 1 s, renew
/// every 250 ms), with the re-acquire placed at the port between the renewal that found the name
/// free and the next one's session call (held there until the lock is back): no `LeaseLost`, and
/// `token()` stays Ok over the renewals after it.
#[test]
#[serial(redis_cluster)]
fn a_lock_taken_again_after_its_release_is_never_reported_lost() {
    let (b, faults) = faulty();
    let options =
        simba::SessionOptions::builder().lease_duration(D).renew_interval(Duration::from_millis(250)).build().unwrap();
    let session = simba::Session::open(Arc::new(b), options).unwrap();
    let events = session.events();
    let x = name("api-relock");
    let lease = session.lock(x.clone()).unwrap();
    lease.release().unwrap();
    // The first renewal sent after the release (its follow-up finds the name free)...
    let (arrived, go) = faults.hold_next("keep_alive_session");
    arrived.recv_timeout(Duration::from_secs(5)).expect("the session renews");
    let (arrived, next) = faults.hold_next("keep_alive_session");
    go.send(()).unwrap();
    // ... is over once the next one is held (renewals of one session run one at a time).
    arrived.recv_timeout(Duration::from_secs(5)).expect("the session renews again");
    let lease = session.lock(x.clone()).unwrap();
    let t2 = lease.token().unwrap();
    next.send(()).unwrap();
    let renewals = || faults.count("keep_alive_session");
    let from = renewals();
    assert!(eventually(Duration::from_secs(5), || renewals() >= from + 3), "the session did not renew");
    assert_eq!(lease.token().unwrap(), t2, "the re-acquired lock is still held");
    while let Ok(e) = events.try_recv() {
        assert!(!matches!(e, simba::SessionEvent::LeaseLost { .. }), "a valid term was reported lost: {e:?}");
    }
    lease.release().unwrap();
    session.close().unwrap();
}
