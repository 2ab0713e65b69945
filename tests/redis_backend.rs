//! Redis backend (standalone) against real servers: the seed's key layout inspected with raw
//! commands, token survival, close ordering, renewal, expiry, pub/sub, `WAIT`, the eviction
//! check, read timeouts, and the documented token reset after a restart without persistence.
//!
//! Shared servers: `scripts/services up redis redis-replicas` (URLs from `SIMBA_TEST_REDIS_URL`,
//! `SIMBA_TEST_REDIS_PRIMARY_URL`, `SIMBA_TEST_REDIS_REPLICA_URL`). Tests that restart, pause or
//! reconfigure a server start their own `redis-server` on a free port.
#![cfg(all(feature = "redis", feature = "tck"))]

#[path = "redis_private.rs"]
mod private;
mod support;

use std::collections::{HashMap, HashSet};
use std::thread;
use std::time::{Duration, Instant};

use private::{value_string, PrivateRedis};
use serial_test::serial;
use simba::backend::{Acquire, KeepAlive, LeaseBackend, Notification, Topic};
use simba::backends::redis::{EvictionCheck, RedisBackend, RedisOptions};
use simba::tck::eventually;
use simba::{ErrorKind, Name, SessionId, Token};

const D: Duration = Duration::from_secs(1);

fn init_log() {
    let _ = env_logger::builder().is_test(true).try_init();
}

fn options() -> RedisOptions {
    RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap()
}

fn shared_url() -> String {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    support::require_tcp("Redis", url.trim_start_matches("redis://").split('/').next().unwrap_or_default());
    url
}

fn connect(url: &str, options: RedisOptions) -> RedisBackend {
    RedisBackend::connect(url, options)
        .unwrap_or_else(|e| panic!("cannot connect to Redis at {url}: {e} (run `scripts/services up`)"))
}

fn shared() -> (RedisBackend, String) {
    init_log();
    let url = shared_url();
    (connect(&url, options()), url)
}

fn raw(url: &str) -> redis::Connection {
    let c = redis::Client::open(url).unwrap().get_connection_with_timeout(Duration::from_secs(2)).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    c
}

fn q(con: &mut redis::Connection, args: &[&str]) -> String {
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let v: redis::Value = cmd.query(con).unwrap();
    value_string(&v)
}

fn hgetall(con: &mut redis::Connection, key: &str) -> HashMap<String, String> {
    redis::cmd("HGETALL").arg(key).query(con).unwrap()
}

fn redis_now_ms(con: &mut redis::Connection) -> i64 {
    let (s, us): (i64, i64) = redis::cmd("TIME").query(con).unwrap();
    s * 1000 + us / 1000
}

fn name(prefix: &str) -> Name {
    Name::new(support::unique(prefix)).unwrap()
}

fn token(r: simba::Result<Acquire>) -> Token {
    match r {
        Ok(Acquire::Acquired { token, .. }) => token,
        other => panic!("expected Acquired, got {other:?}"),
    }
}

fn owned(b: &RedisBackend, sid: &SessionId) -> Vec<(Name, Token)> {
    match b.keep_alive(sid, D).unwrap() {
        KeepAlive::Alive { remaining, owned, .. } => {
            assert!(remaining <= D && !remaining.is_zero(), "{remaining:?}");
            owned
        }
        KeepAlive::Expired => panic!("session {sid} unexpectedly expired"),
    }
}

fn open(b: &RedisBackend, metadata: &str) -> SessionId {
    b.open_session(D, metadata).unwrap().id
}

#[test]
#[serial(redis)]
fn key_layout_matches_the_seed() {
    let (b, url) = shared();
    let mut con = raw(&url);
    let (l, g) = (name("layout-lease"), name("layout-group"));
    let sid = open(&b, "node-a");
    let s = sid.as_str();
    let t = token(b.acquire(&sid, &l));
    b.join(&sid, &g).unwrap();

    let lease_key = format!("simba:lease:{{{l}}}");
    let session_key = format!("simba:session:{{{s}}}");
    let leases_key = format!("simba:session:{{{s}}}:terms");
    let groups_key = format!("simba:session:{{{s}}}:groups");
    let group_key = format!("simba:group:{{{g}}}");
    let now = redis_now_ms(&mut con);

    assert_eq!(q(&mut con, &["TYPE", &lease_key]), "hash");
    let lease = hgetall(&mut con, &lease_key);
    assert_eq!(lease.get("session").map(String::as_str), Some(s));
    assert_eq!(lease.get("token").map(String::as_str), Some(t.to_string().as_str()));
    // A term lives while its session key does; `expires` is 2^53 - 1 so that clients before the
    // session-judged renewal (which require it in the future) judge the term the same way.
    assert_eq!(lease.get("expires").map(String::as_str), Some("9007199254740991"), "{lease:?}");
    assert_eq!(lease.len(), 3, "{lease:?}");
    assert_eq!(q(&mut con, &["PTTL", &lease_key]), "-1", "lease hashes never expire");

    assert_eq!(q(&mut con, &["TYPE", &session_key]), "hash");
    assert_eq!(q(&mut con, &["HGET", &session_key, "metadata"]), "node-a");
    let pttl: i64 = q(&mut con, &["PTTL", &session_key]).parse().unwrap();
    assert!(pttl > 0 && pttl <= 1000, "session PX = lease duration, got PTTL {pttl}");

    assert_eq!(q(&mut con, &["TYPE", &leases_key]), "hash");
    assert_eq!(hgetall(&mut con, &leases_key), HashMap::from([(l.to_string(), t.to_string())]), "name → token");
    let session_fields = hgetall(&mut con, &session_key);
    assert!(session_fields["gen"].parse::<u64>().unwrap() > 0, "the index generation: {session_fields:?}");
    assert_eq!(q(&mut con, &["TYPE", &groups_key]), "set");
    assert_eq!(q(&mut con, &["SMEMBERS", &groups_key]), g.as_str());
    assert_eq!(q(&mut con, &["TYPE", &group_key]), "zset");
    let score: f64 = q(&mut con, &["ZSCORE", &group_key, s]).parse().unwrap();
    assert!(score as i64 > now && score as i64 <= now + 1000, "group score {score} vs redis now {now}");

    // Braces are real hash tags: a session's keys share one Cluster slot.
    use redis::cluster_routing::Slot;
    assert_eq!(Slot::for_key(&session_key), Slot::for_key(&leases_key));
    assert_eq!(Slot::for_key(&session_key), Slot::for_key(&groups_key));
    assert_eq!(Slot::for_key(&lease_key), Slot::for_key(l.as_str()));

    // Release clears only `session`; leave removes the member; indexes follow.
    b.release(&sid, &l, t).unwrap();
    let after = hgetall(&mut con, &lease_key);
    assert_eq!(after.get("session").map(String::as_str), Some(""));
    assert_eq!(after.get("token"), lease.get("token"));
    assert_eq!(after.get("expires"), lease.get("expires"));
    assert_eq!(q(&mut con, &["HEXISTS", &leases_key, l.as_str()]), "0");
    b.leave(&sid, &g).unwrap();
    assert_eq!(q(&mut con, &["ZSCORE", &group_key, s]), "");
    assert_eq!(q(&mut con, &["SISMEMBER", &groups_key, g.as_str()]), "0");

    b.close_session(&sid).unwrap();
    assert_eq!(q(&mut con, &["EXISTS", &session_key, &leases_key, &groups_key]), "0");
    assert_eq!(q(&mut con, &["EXISTS", &lease_key]), "1", "the lease hash (and its token) stays");
}

#[test]
#[serial(redis)]
fn tokens_survive_release_and_expiry() {
    let (b, url) = shared();
    let mut con = raw(&url);
    let l = name("survive");
    let (s1, s2) = (open(&b, ""), open(&b, ""));
    let t1 = token(b.acquire(&s1, &l));
    assert_eq!(token(b.acquire(&s1, &l)), t1, "re-acquire is idempotent");
    assert!(matches!(b.acquire(&s2, &l).unwrap(), Acquire::Busy));
    b.release(&s2, &l, t1).unwrap();
    assert_eq!(b.holder(&l).unwrap().unwrap().session, s1, "a non-holder's release changes nothing");
    b.release(&s1, &l, t1).unwrap();
    // A release of an old term that lands late never frees a newer term of the same session.
    let t1b = token(b.acquire(&s1, &l));
    assert_eq!(t1b.get(), t1.get() + 1);
    b.release(&s1, &l, t1).unwrap();
    assert_eq!(owned(&b, &s1), vec![(l.clone(), t1b)]);
    b.release(&s1, &l, t1b).unwrap();
    let t1 = t1b;
    let t2 = token(b.acquire(&s2, &l));
    assert_eq!(t2.get(), t1.get() + 1, "a new holder is a new term");
    // s2 stops renewing: its term ends with its session; s1 takes over with the next token.
    let end = Instant::now() + D + Duration::from_millis(600);
    while Instant::now() < end {
        owned(&b, &s1);
        thread::sleep(Duration::from_millis(250));
    }
    assert!(b.holder(&l).unwrap().is_none(), "an expired holder is no holder");
    let t3 = token(b.acquire(&s1, &l));
    assert_eq!(t3.get(), t2.get() + 1);
    assert_eq!(q(&mut con, &["HGET", &format!("simba:lease:{{{l}}}"), "token"]), t3.to_string());
    let h = b.holder(&l).unwrap().unwrap();
    assert_eq!((h.session, h.token), (s1.clone(), t3));
    b.close_session(&s1).unwrap();
    let s3 = open(&b, "");
    assert_eq!(token(b.acquire(&s3, &l)).get(), t3.get() + 1, "close keeps the token");
    b.close_session(&s3).unwrap();
}

#[test]
#[serial(redis)]
fn close_deletes_the_session_first_and_a_repeated_close_finishes() {
    let (b, url) = shared();
    let mut con = raw(&url);
    let (l1, l2, g) = (name("close-a"), name("close-b"), name("close-g"));
    let sid = open(&b, "");
    let s = sid.as_str();
    let t1 = token(b.acquire(&sid, &l1));
    let t2 = token(b.acquire(&sid, &l2));
    b.join(&sid, &g).unwrap();
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(l1.clone()), &tx).unwrap());

    // A close interrupted right after its first step (the session is deleted first).
    q(&mut con, &["DEL", &format!("simba:session:{{{s}}}")]);
    assert_eq!(b.keep_alive(&sid, D).unwrap(), KeepAlive::Expired);
    assert_eq!(b.acquire(&sid, &name("x")).unwrap_err().kind(), ErrorKind::SessionExpired);
    assert_eq!(b.join(&sid, &g).unwrap_err().kind(), ErrorKind::SessionExpired);
    assert!(b.holder(&l1).unwrap().is_none(), "a lease belongs to a session only while it lives");
    assert!(b.members(&g).unwrap().is_empty());
    assert_eq!(q(&mut con, &["HLEN", &format!("simba:session:{{{s}}}:terms")]), "2", "indexes survive");

    // The repeated close finishes: releases, leaves, deletes the indexes; tokens stay.
    b.close_session(&sid).unwrap();
    for (l, t) in [(&l1, t1), (&l2, t2)] {
        let h = hgetall(&mut con, &format!("simba:lease:{{{l}}}"));
        assert_eq!(h["session"], "");
        assert_eq!(h["token"], t.to_string());
    }
    assert_eq!(q(&mut con, &["ZSCORE", &format!("simba:group:{{{g}}}"), s]), "");
    let idx = [format!("simba:session:{{{s}}}:terms"), format!("simba:session:{{{s}}}:groups")];
    assert_eq!(q(&mut con, &["EXISTS", &idx[0], &idx[1]]), "0");
    assert_eq!(rx.recv_timeout(Duration::from_secs(3)).unwrap(), Notification::Released(l1.clone()));
    b.close_session(&sid).unwrap();
    b.close_session(&SessionId::random()).unwrap();
    let other = open(&b, "");
    assert_eq!(token(b.acquire(&other, &l1)).get(), t1.get() + 1);
    b.close_session(&other).unwrap();
}

#[test]
#[serial(redis)]
fn keep_alive_extends_leases_and_memberships() {
    let (b, url) = shared();
    let mut con = raw(&url);
    let (l, g) = (name("renew"), name("renew-g"));
    let (sid, rival) = (open(&b, "me"), open(&b, ""));
    let t = token(b.acquire(&sid, &l));
    b.join(&sid, &g).unwrap();
    let lease_key = format!("simba:lease:{{{l}}}");
    let first = hgetall(&mut con, &lease_key);
    let group_key = format!("simba:group:{{{g}}}");
    let score = |con: &mut redis::Connection| -> f64 { q(con, &["ZSCORE", &group_key, sid.as_str()]).parse().unwrap() };
    let first_score = score(&mut con);
    let end = Instant::now() + D * 3;
    while Instant::now() < end {
        assert_eq!(owned(&b, &sid), vec![(l.clone(), t)]);
        owned(&b, &rival);
        thread::sleep(Duration::from_millis(300));
        assert!(matches!(b.acquire(&rival, &l).unwrap(), Acquire::Busy), "the term outlived its session's renewals");
    }
    // The term lives with the session key: renewal writes nothing to the lease hash (standalone
    // departs from SPEC §6.2 here, see docs/backends/redis.md), memberships are extended.
    assert_eq!(hgetall(&mut con, &lease_key), first, "renewal wrote to the lease hash");
    assert!(score(&mut con) >= first_score + 2000.0, "renewals extended the membership");
    let h = b.holder(&l).unwrap().unwrap();
    assert_eq!((h.session.clone(), h.token, h.metadata.as_str()), (sid.clone(), t, "me"));
    assert!(h.remaining <= D);
    let members = b.members(&g).unwrap();
    assert_eq!(members.len(), 1);
    assert_eq!((members[0].session.clone(), members[0].metadata.as_str()), (sid.clone(), "me"));
    b.close_session(&sid).unwrap();
    b.close_session(&rival).unwrap();
}

#[test]
#[serial(redis)]
fn an_expired_session_never_revives() {
    let (b, url) = shared();
    let mut con = raw(&url);
    let (l, g) = (name("expire"), name("expire-g"));
    let sid = open(&b, "");
    let t = token(b.acquire(&sid, &l));
    b.join(&sid, &g).unwrap();
    thread::sleep(D + Duration::from_millis(500));
    assert_eq!(q(&mut con, &["EXISTS", &format!("simba:session:{{{sid}}}")]), "0", "PX expired the session");
    assert!(b.holder(&l).unwrap().is_none());
    assert!(b.members(&g).unwrap().is_empty());
    assert_eq!(b.keep_alive(&sid, D).unwrap(), KeepAlive::Expired);
    assert_eq!(b.acquire(&sid, &l).unwrap_err().kind(), ErrorKind::SessionExpired);
    assert_eq!(b.join(&sid, &g).unwrap_err().kind(), ErrorKind::SessionExpired);
    assert_eq!(b.keep_alive(&sid, D).unwrap(), KeepAlive::Expired, "still expired");
    let other = open(&b, "");
    assert_eq!(token(b.acquire(&other, &l)).get(), t.get() + 1);
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

#[test]
#[serial(redis)]
fn release_and_membership_changes_are_pushed() {
    let (b, _) = shared();
    assert!(b.capabilities().push_release && b.capabilities().push_membership);
    let (l, g) = (name("push"), name("push-g"));
    let (holder, watcher) = (open(&b, ""), open(&b, ""));
    let t = token(b.acquire(&holder, &l));
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap(), "registering twice is allowed");
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
    // Subscribing the channels notifies each registration once (a release may have come before
    // the subscription): both, in either order, the lease's once although registered twice.
    let confirmed: HashSet<Notification> =
        [rx.recv_timeout(Duration::from_secs(3)).unwrap(), rx.recv_timeout(Duration::from_secs(3)).unwrap()].into();
    assert_eq!(confirmed, [Notification::Released(l.clone()), Notification::MembersChanged(g.clone())].into());
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
    let released = Instant::now();
    b.release(&holder, &l, t).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(3)).unwrap(), Notification::Released(l.clone()));
    eprintln!("release notification after {:?}", released.elapsed());
    b.join(&watcher, &g).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(3)).unwrap(), Notification::MembersChanged(g.clone()));
    thread::sleep(Duration::from_millis(200));
    assert!(rx.try_recv().is_err(), "one-shot and not duplicated: {:?}", rx.try_recv());
    assert!(b.watch(&Topic::Group(g.clone()), &tx).unwrap());
    b.leave(&watcher, &g).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(3)).unwrap(), Notification::MembersChanged(g.clone()));
    b.close_session(&holder).unwrap();
    b.close_session(&watcher).unwrap();
}

fn pubsub_clients(r: &PrivateRedis) -> usize {
    r.cmd(&["CLIENT", "LIST"]).lines().filter(|l| l.contains("name=simba-pubsub")).count()
}

#[test]
#[serial(redis)]
fn the_pubsub_thread_stops_when_the_backend_is_dropped() {
    init_log();
    let r = PrivateRedis::start(&[]);
    let b = connect(&r.url(), options());
    let clone = b.clone();
    assert!(eventually(Duration::from_secs(3), || pubsub_clients(&r) == 1));
    drop(b);
    thread::sleep(Duration::from_millis(500));
    assert_eq!(pubsub_clients(&r), 1, "a clone keeps it running");
    drop(clone);
    assert!(eventually(Duration::from_secs(3), || pubsub_clients(&r) == 0), "the subscriber outlived the backend");
}

#[test]
#[serial(redis)]
fn the_pubsub_connection_recovers_from_a_server_restart() {
    init_log();
    let mut r = PrivateRedis::start(&[]);
    let b = connect(&r.url(), options());
    let l = name("reconnect");
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    // The subscription notifies the registration once; registered again, it waits for messages.
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Notification::Released(l.clone()));
    assert!(b.watch(&Topic::Lease(l.clone()), &tx).unwrap());
    r.restart();
    // Messages may have been missed while it was down: every watcher gets a hint.
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), Notification::Released(l.clone()));
    let deadline = Instant::now() + Duration::from_secs(5);
    let registered = loop {
        match b.watch(&Topic::Lease(l.clone()), &tx) {
            Ok(ok) => break ok,
            Err(e) if Instant::now() < deadline => eprintln!("watch while reconnecting: {e}"),
            Err(e) => panic!("{e}"),
        }
    };
    assert!(registered);
    let sid = b.open_session(D, "").unwrap().id;
    let t = token(b.acquire(&sid, &l));
    b.release(&sid, &l, t).unwrap();
    assert_eq!(rx.recv_timeout(Duration::from_secs(3)).unwrap(), Notification::Released(l));
}

#[test]
#[serial(redis)]
fn read_timeouts_are_bounded_and_never_desynchronise_replies() {
    init_log();
    let r = PrivateRedis::start(&[]);
    // The driver itself: a reply that arrives after its read timeout is skipped, not handed to
    // the next command.
    let mut con = raw(&r.url());
    q(&mut con, &["SET", "a", "A"]);
    q(&mut con, &["SET", "b", "B"]);
    con.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    r.pause();
    let late: redis::RedisResult<String> = redis::cmd("GET").arg("a").query(&mut con);
    assert!(late.unwrap_err().is_timeout());
    r.resume();
    let next: String = redis::cmd("GET").arg("b").query(&mut con).unwrap();
    assert_eq!(next, "B", "the late reply to GET a must not answer GET b");

    // The backend: a paused server makes calls fail within the query timeout; afterwards every
    // call gets its own reply.
    let qt = Duration::from_millis(300);
    let b = connect(&r.url(), RedisOptions::builder().query_timeout(qt).build().unwrap());
    let (l1, l2) = (name("pause-1"), name("pause-2"));
    let sid = b.open_session(Duration::from_secs(5), "m").unwrap().id;
    let t1 = token(b.acquire(&sid, &l1));
    r.pause();
    let started = Instant::now();
    let err = b.keep_alive(&sid, Duration::from_secs(5)).unwrap_err();
    let took = started.elapsed();
    let err2 = b.acquire(&sid, &l2).unwrap_err();
    r.resume();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert_eq!(err2.kind(), ErrorKind::Unavailable, "{err2}");
    assert!(took < qt + Duration::from_millis(400), "keep_alive took {took:?} with a {qt:?} query timeout");
    for _ in 0..3 {
        let h = b.holder(&l1).unwrap().unwrap();
        assert_eq!((h.session.clone(), h.token, h.metadata.as_str()), (sid.clone(), t1, "m"));
        assert!(b.members(&name("none")).unwrap().is_empty());
        let owned = match b.keep_alive(&sid, Duration::from_secs(5)).unwrap() {
            KeepAlive::Alive { owned, .. } => owned,
            other => panic!("{other:?}"),
        };
        assert!(owned.contains(&(l1.clone(), t1)), "{owned:?}");
    }
    b.close_session(&sid).unwrap();
}

fn replica_pair() -> (String, String) {
    let primary = support::env_or("SIMBA_TEST_REDIS_PRIMARY_URL", "redis://127.0.0.1:6380");
    let replica = support::env_or("SIMBA_TEST_REDIS_REPLICA_URL", "redis://127.0.0.1:6381");
    for u in [&primary, &replica] {
        support::require_tcp("Redis primary/replica", u.trim_start_matches("redis://").split('/').next().unwrap());
    }
    (primary, replica)
}

#[test]
#[serial(redis)]
fn wait_replicas_confirms_new_terms() {
    init_log();
    let (primary, replica) = replica_pair();
    let one = connect(&primary, RedisOptions::builder().query_timeout(D).wait_replicas(1).build().unwrap());
    let two = connect(&primary, RedisOptions::builder().query_timeout(D).wait_replicas(2).build().unwrap());
    let l = name("wait");
    let sid = open(&one, "");
    let t1 = token(one.acquire(&sid, &l));
    // Acknowledged: the replica has the term already.
    let mut rep = raw(&replica);
    assert_eq!(q(&mut rep, &["HGET", &format!("simba:lease:{{{l}}}"), "token"]), t1.to_string());
    one.release(&sid, &l, t1).unwrap();

    // Two replicas required, one exists: the term is started, not acknowledged, released, and
    // never reported; meanwhile the pool keeps serving other calls.
    let sid2 = open(&two, "");
    let other = open(&two, "");
    let started = Instant::now();
    let renewals = thread::scope(|s| {
        let h = s.spawn(|| {
            let mut times = Vec::new();
            while started.elapsed() < Duration::from_millis(700) {
                let t = Instant::now();
                owned(&two, &other);
                times.push(t.elapsed());
                thread::sleep(Duration::from_millis(50));
            }
            times
        });
        let err = two.acquire(&sid2, &l).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
        assert!(err.to_string().contains("replicas acknowledged"), "{err}");
        h.join().unwrap()
    });
    assert!(started.elapsed() < D + Duration::from_millis(700), "acquire took {:?}", started.elapsed());
    assert!(renewals.iter().all(|t| *t < Duration::from_millis(300)), "a slow WAIT blocked renewals: {renewals:?}");
    assert!(one.holder(&l).unwrap().is_none(), "the unacknowledged term was released");
    assert!(owned(&two, &sid2).is_empty(), "an abandoned term is never reported");
    let t3 = token(one.acquire(&sid, &l));
    assert_eq!(t3.get(), t1.get() + 2, "the unacknowledged term used token {}", t1.get() + 1);
    for s in [&sid, &sid2, &other] {
        one.close_session(s).unwrap();
    }
}

#[test]
#[serial(redis)]
fn wait_replicas_fails_acquire_while_the_replica_is_down() {
    init_log();
    let primary = PrivateRedis::start(&[]);
    let port = primary.port.to_string();
    let mut replica = PrivateRedis::start(&["--replicaof", "127.0.0.1", &port]);
    assert!(eventually(Duration::from_secs(10), || primary.replicated(1)), "replica never linked");
    let b = connect(&primary.url(), RedisOptions::builder().query_timeout(D).wait_replicas(1).build().unwrap());
    let (l1, l2) = (name("rd-1"), name("rd-2"));
    let sid = b.open_session(Duration::from_secs(10), "").unwrap().id;
    match b.acquire(&sid, &l1) {
        Ok(Acquire::Acquired { token, .. }) => assert_eq!(token.get(), 1),
        other => panic!("{other:?}\nPRIMARY:\n{}\nREPLICA:\n{}", primary.log(), replica.log()),
    }

    replica.kill();
    let started = Instant::now();
    let err = b.acquire(&sid, &l2).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(started.elapsed() < D + Duration::from_millis(700), "took {:?}", started.elapsed());
    assert!(b.holder(&l2).unwrap().is_none(), "the unacknowledged term was released");
    let owned = match b.keep_alive(&sid, Duration::from_secs(10)).unwrap() {
        KeepAlive::Alive { owned, .. } => owned,
        other => panic!("{other:?}"),
    };
    assert_eq!(owned.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>(), vec![l1.clone()]);

    replica.restart();
    assert!(eventually(Duration::from_secs(10), || primary.replicated(1)), "replica never relinked");
    assert_eq!(token(b.acquire(&sid, &l2)).get(), 2, "term 1 was started and released while the replica was down");
    b.close_session(&sid).unwrap();
}

#[test]
#[serial(redis)]
fn eviction_policy_is_checked_at_startup() {
    init_log();
    let r = PrivateRedis::start(&[]);
    let refuse = || RedisOptions::builder().eviction_check(EvictionCheck::Refuse).build().unwrap();
    for policy in ["allkeys-lru", "volatile-lfu", "allkeys-random", "volatile-ttl"] {
        r.cmd(&["CONFIG", "SET", "maxmemory-policy", policy]);
        let warned = connect(&r.url(), RedisOptions::default());
        let item = warned.check().into_iter().find(|i| i.name == "maxmemory-policy").unwrap();
        assert_eq!(item.status, simba::backend::CheckStatus::Warn, "{item:?}");
        let err = RedisBackend::connect(&r.url(), refuse()).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains(policy) && err.to_string().contains("noeviction"), "{err}");
    }
    r.cmd(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    let ok = connect(&r.url(), refuse());
    let item = ok.check().into_iter().find(|i| i.name == "maxmemory-policy").unwrap();
    assert_eq!(item.status, simba::backend::CheckStatus::Ok, "{item:?}");

    // CONFIG disabled: warn and continue, even in refuse mode.
    let locked = PrivateRedis::start(&["--rename-command", "CONFIG", ""]);
    let b = connect(&locked.url(), refuse());
    let item = b.check().into_iter().find(|i| i.name == "maxmemory-policy").unwrap();
    assert_eq!(item.status, simba::backend::CheckStatus::Warn, "{item:?}");
    let sid = b.open_session(D, "").unwrap().id;
    token(b.acquire(&sid, &name("locked")));
}

#[test]
#[serial(redis)]
fn check_reports_reachability_policy_persistence_and_clock() {
    let (b, _) = shared();
    let items = b.check();
    let get = |n: &str| items.iter().find(|i| i.name == n).unwrap_or_else(|| panic!("no {n} in {items:?}"));
    assert_eq!(get("reachable").status, simba::backend::CheckStatus::Ok);
    assert_eq!(get("maxmemory-policy").status, simba::backend::CheckStatus::Ok, "{:?}", get("maxmemory-policy"));
    assert!(get("appendonly").detail.contains("appendonly") || get("appendonly").detail.contains("AOF"));
    assert_eq!(get("clock").status, simba::backend::CheckStatus::Ok);
    assert!(get("clock").detail.contains("ms"), "{:?}", get("clock"));

    let r = PrivateRedis::start(&["--appendonly", "yes"]);
    let aof = connect(&r.url(), options());
    let item = aof.check().into_iter().find(|i| i.name == "appendonly").unwrap();
    assert_eq!(item.status, simba::backend::CheckStatus::Ok, "{item:?}");
    drop(r);
    let items = aof.check();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(items[0].status, simba::backend::CheckStatus::Fail);
}

#[test]
#[serial(redis)]
fn restart_without_persistence_resets_tokens_as_documented() {
    init_log();
    // The hazard docs/backends/redis.md warns about: without persistence a restart loses the lease
    // hashes, and the next term of a name starts again at token 1.
    let mut r = PrivateRedis::start(&[]);
    let b = connect(&r.url(), options());
    let l = name("reset");
    for expected in 1..=3 {
        let sid = open(&b, "");
        assert_eq!(token(b.acquire(&sid, &l)).get(), expected);
        b.close_session(&sid).unwrap();
    }
    r.restart();
    let after = eventually(Duration::from_secs(5), || b.open_session(D, "").is_ok());
    assert!(after);
    let sid = open(&b, "");
    assert_eq!(token(b.acquire(&sid, &l)).get(), 1, "documented hazard: the token restarted at 1 (was 3)");

    // The mitigation: with AOF (fsync always) the token survives a restart.
    let mut r = PrivateRedis::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let b = connect(&r.url(), options());
    for expected in 1..=3 {
        let sid = open(&b, "");
        assert_eq!(token(b.acquire(&sid, &l)).get(), expected);
        b.close_session(&sid).unwrap();
    }
    r.restart();
    assert!(eventually(Duration::from_secs(5), || b.open_session(D, "").is_ok()));
    let sid = open(&b, "");
    assert_eq!(token(b.acquire(&sid, &l)).get(), 4, "AOF keeps the token across a restart");
}

#[test]
#[serial(redis)]
fn bad_targets_fail_clearly_and_secrets_stay_hidden() {
    init_log();
    let err = RedisBackend::connect("redis://127.0.0.1:1", options()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.to_string().contains("127.0.0.1:1"), "{err}");
    let err = RedisBackend::connect("nonsense://x", options()).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");

    let r = PrivateRedis::start(&["--requirepass", "s3cret-pw"]);
    let url = format!("redis://:s3cret-pw@127.0.0.1:{}", r.port);
    let b = connect(&url, options());
    let sid = open(&b, "");
    token(b.acquire(&sid, &name("auth")));
    let shown = format!("{b:?}");
    assert!(!shown.contains("s3cret-pw") && shown.contains("***"), "{shown}");
    let err = RedisBackend::connect(&format!("redis://:wrong-pw@127.0.0.1:{}", r.port), options()).unwrap_err();
    assert!(!simba::display_chain(&err).contains("wrong-pw"), "{err}");
}

#[test]
#[serial(redis)]
fn names_are_case_sensitive_and_metadata_roundtrips() {
    let (b, _) = shared();
    let base = support::unique("Case");
    let (upper, lower) = (Name::new(format!("{base}-Job")).unwrap(), Name::new(format!("{base}-job")).unwrap());
    let meta = "é ünïcode {braces} and spaces";
    let (s1, s2) = (open(&b, meta), open(&b, ""));
    token(b.acquire(&s1, &upper));
    token(b.acquire(&s2, &lower));
    assert_eq!(b.holder(&upper).unwrap().unwrap().metadata, meta);
    assert_eq!(b.holder(&lower).unwrap().unwrap().session, s2);
    b.join(&s1, &upper).unwrap();
    b.join(&s1, &upper).unwrap();
    assert_eq!(b.members(&upper).unwrap().len(), 1, "join is idempotent");
    assert!(b.members(&lower).unwrap().is_empty());
    b.close_session(&s1).unwrap();
    b.close_session(&s2).unwrap();
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

fn sorted(mut names: Vec<Name>) -> Vec<Name> {
    names.sort();
    names
}

#[test]
#[serial(redis)]
fn keep_alive_reports_exactly_the_joined_groups() {
    let (b, _) = shared();
    let (g1, g2, g3) = (name("ka-g1"), name("ka-g2"), name("ka-g3"));
    let (sid, other) = (open(&b, ""), open(&b, ""));
    assert!(groups(&b, &sid).is_empty());
    b.join(&sid, &g2).unwrap();
    b.join(&sid, &g1).unwrap();
    b.join(&sid, &g1).unwrap();
    // Another session's memberships (in a shared group and in its own) are never reported.
    b.join(&other, &g1).unwrap();
    b.join(&other, &g3).unwrap();
    assert_eq!(groups(&b, &sid), sorted(vec![g1.clone(), g2.clone()]));
    assert_eq!(groups(&b, &other), sorted(vec![g1.clone(), g3.clone()]));
    b.leave(&sid, &g2).unwrap();
    assert_eq!(groups(&b, &sid), vec![g1.clone()]);
    assert_eq!(groups(&b, &sid), vec![g1.clone()], "stable across renewals");
    assert_eq!(groups(&b, &other), sorted(vec![g1.clone(), g3.clone()]));
    // Leases do not show up as groups, nor groups as leases.
    let l = name("ka-lease");
    let t = token(b.acquire(&sid, &l));
    match b.keep_alive(&sid, D).unwrap() {
        KeepAlive::Alive { owned, groups, .. } => {
            assert_eq!(owned, vec![(l.clone(), t)]);
            assert_eq!(groups, vec![g1.clone()]);
        }
        KeepAlive::Expired => panic!("expired"),
    }
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}

#[test]
#[serial(redis)]
fn a_membership_removed_behind_the_sessions_back_is_not_reported() {
    let (b, url) = shared();
    let mut con = raw(&url);
    let (gone, expired, dropped, kept) = (name("back-gone"), name("back-expired"), name("back-del"), name("back-kept"));
    let (sid, other) = (open(&b, ""), open(&b, ""));
    let s = sid.as_str();
    for g in [&gone, &expired, &dropped, &kept] {
        b.join(&sid, g).unwrap();
        b.join(&other, g).unwrap();
    }
    assert_eq!(groups(&b, &sid), sorted(vec![gone.clone(), expired.clone(), dropped.clone(), kept.clone()]));
    // A leave that reached the server late; an entry whose score passed; a group key deleted.
    let key = |g: &Name| format!("simba:group:{{{g}}}");
    assert_eq!(q(&mut con, &["ZREM", &key(&gone), s]), "1");
    let past = (redis_now_ms(&mut con) - 10).to_string();
    assert_eq!(q(&mut con, &["ZADD", &key(&expired), "XX", &past, s]), "0");
    q(&mut con, &["ZREM", &key(&dropped), s]);
    q(&mut con, &["ZREM", &key(&dropped), other.as_str()]);
    assert_eq!(q(&mut con, &["EXISTS", &key(&dropped)]), "0");
    assert_eq!(groups(&b, &sid), vec![kept.clone()]);
    let index = format!("simba:session:{{{s}}}:groups");
    assert_eq!(q(&mut con, &["SMEMBERS", &index]), kept.as_str(), "lost memberships leave the index");
    assert_eq!(q(&mut con, &["ZSCORE", &key(&expired), s]), "", "the expired entry was removed");
    assert_eq!(groups(&b, &sid), vec![kept.clone()]);
    // The other session's memberships are untouched.
    assert_eq!(groups(&b, &other), sorted(vec![gone.clone(), expired.clone(), kept.clone()]));
    // A re-join is reported again.
    b.join(&sid, &gone).unwrap();
    assert_eq!(groups(&b, &sid), sorted(vec![gone.clone(), kept.clone()]));
    b.close_session(&sid).unwrap();
    b.close_session(&other).unwrap();
}
