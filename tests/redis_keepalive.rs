//! Redis standalone keep-alive: a term lives while its session key does, so renewal writes nothing
//! per lease and its server work does not grow with the leases held; `owned` stays exact as the
//! session's lease index changes (from this client or another one); and the scripts of clients
//! before this change (`tests/lua/legacy/`, verbatim copies) and the current ones never both grant
//! one term on one server.
//!
//! Each test runs on its own private `redis-server` (`INFO` counters are per server; never the
//! shared one): `redis-server` must be installed (`scripts/services up redis`).
#![cfg(feature = "redis")]

#[path = "redis_private.rs"]
mod private;
mod support;

use std::collections::BTreeMap;
use std::thread;
use std::time::{Duration, Instant};

use private::{acquired, owned, PrivateRedis};
use simba::backend::{Acquire, KeepAlive, LeaseBackend};
use simba::backends::redis::RedisBackend;
use simba::{Name, SessionId, Token};

const D: Duration = Duration::from_secs(30);

fn name(prefix: &str, i: usize) -> Name {
    Name::new(format!("{prefix}-{i}")).unwrap()
}

/// Commands the backend's own connections send at any time, and `INFO` (this count): the pub/sub
/// thread connects (`HELLO`, `CLIENT SETNAME`/`SETINFO`, `SELECT`) and pings its idle connection.
const NOT_COUNTED: [&str; 6] = ["ping", "info", "client", "hello", "select", "auth"];

/// How often the server ran each command (those inside scripts included, `INFO commandstats`), but
/// [`NOT_COUNTED`].
fn command_counts(r: &PrivateRedis) -> BTreeMap<String, u64> {
    let info = r.cmd(&["INFO", "commandstats"]);
    let mut counts = BTreeMap::new();
    for line in info.lines() {
        let Some((cmd, stats)) = line.strip_prefix("cmdstat_").and_then(|l| l.split_once(':')) else { continue };
        if NOT_COUNTED.contains(&cmd) || cmd.starts_with("client|") {
            continue;
        }
        let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls=")).and_then(|c| c.parse::<u64>().ok());
        counts.insert(cmd.to_string(), calls.unwrap_or_else(|| panic!("commandstats line without calls=: {line}")));
    }
    counts
}

/// What one keep-alive ran on the server: the index entries it checked against their lease hashes
/// (`HMGET`), its `HSCAN` calls, its writes of the rotation's cursor (`HSET`), every other command,
/// and the leases it reported.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Cost {
    checked: u64,
    scans: u64,
    cursor_writes: u64,
    rest: u64,
    reported: usize,
}

fn keep_alive_cost(r: &PrivateRedis, b: &RedisBackend, sid: &SessionId) -> Cost {
    let before = command_counts(r);
    let reported = owned(b, sid, D).len();
    let after = command_counts(r);
    let ran = |cmd: &str| after.get(cmd).copied().unwrap_or(0) - before.get(cmd).copied().unwrap_or(0);
    let total: u64 = after.keys().map(|c| ran(c)).sum();
    let (checked, scans, cursor_writes) = (ran("hmget"), ran("hscan"), ran("hset"));
    Cost { checked, scans, cursor_writes, rest: total - checked - scans - cursor_writes, reported }
}

/// A renewal's server work is bounded whatever the leases held (issue #36 finding 8): it checks
/// index entries against their lease hashes in rotation (`HSCAN`, COUNT 16, from where the
/// previous renewal stopped) — a whole small index (a listpack: up to `hash-max-listpack-entries`
/// entries, 512 by default, which `HSCAN` returns in one reply whatever its COUNT), else at least 16
/// and at most 15 + one hash-table bucket's entries — and does nothing else per lease.
#[test]
fn keep_alive_commands_are_bounded_whatever_the_leases_held() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    let sid = b.open_session(D, "").unwrap().id;
    b.join(&sid, &Name::new("g").unwrap()).unwrap();
    owned(&b, &sid, D); // loads the script (NOSCRIPT, SCRIPT LOAD) before anything is counted
    let rest = keep_alive_cost(&r, &b, &sid).rest;
    let mut held = 0;
    let mut checked = Vec::new();
    for n in [16, 40, 400, 600, 6_000] {
        while held < n {
            acquired(b.acquire(&sid, &name("ka", held)));
            held += 1;
        }
        let listpack = r.cmd(&["OBJECT", "ENCODING", &format!("simba:session:{{{sid}}}:terms")]) == "listpack";
        assert_eq!(listpack, n <= 512, "{n} entries (the server's default hash-max-listpack-entries is 512)");
        // Whether or not a renewal lists the index (this client's own acquires need no listing:
        // `a_renewal_after_the_sessions_own_changes_lists_nothing`), and wherever the rotation
        // stands, the cost stays within the same bounds.
        for k in 0..20 {
            let c = keep_alive_cost(&r, &b, &sid);
            assert_eq!(c.reported, n, "owned leases reported");
            assert_eq!(c.rest, rest, "commands other than the check changed: {n} leases, renewal {k}: {c:?}");
            if listpack {
                assert_eq!(
                    (c.scans, c.checked, c.cursor_writes),
                    (1, n as u64, 0),
                    "{n} leases (listpack), renewal {k}"
                );
            } else {
                assert!(
                    (1..=8).contains(&c.scans) && (16..=40).contains(&c.checked) && c.cursor_writes <= 1,
                    "{n} leases (hash table), renewal {k}: {c:?}"
                );
                checked.push(c.checked);
            }
        }
    }
    println!("index entries checked per renewal above 512 leases: {checked:?}");
    b.close_session(&sid).unwrap();
}

/// `HGETALL` calls the server ran (scripts included): how often a renewal listed a lease index.
fn listings(r: &PrivateRedis) -> u64 {
    let info = r.cmd(&["INFO", "commandstats"]);
    info.lines().find_map(|l| l.strip_prefix("cmdstat_hgetall:")).map_or(0, |stats| {
        let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls=")).and_then(|c| c.parse().ok());
        calls.unwrap_or_else(|| panic!("commandstats line without calls=: {stats}"))
    })
}

/// A renewal lists the lease index (one `HGETALL` of every entry: 8 ms of server time at 10,000
/// leases on a slow server, docs/benchmarks.md) only when someone else changed it: this
/// client's own acquires and releases are followed by its listing, which stays exact.
#[test]
fn a_renewal_after_the_sessions_own_changes_lists_nothing() {
    let r = PrivateRedis::start(&[]);
    let (b, other) = (r.backend(), r.backend());
    let sid = b.open_session(D, "").unwrap().id;
    assert!(owned(&b, &sid, D).is_empty());
    let mut expected: Vec<(Name, Token)> =
        (0..400).map(|i| (name("own", i), acquired(b.acquire(&sid, &name("own", i))))).collect();
    expected.sort();
    let renewal = |what: &str, expected: &[(Name, Token)], listed: u64| {
        let before = listings(&r);
        assert_eq!(owned(&b, &sid, D), expected, "{what}: owned");
        assert_eq!(listings(&r) - before, listed, "{what}: listings of the index");
    };
    renewal("after 400 acquires of this client", &expected, 0);
    let (gone, t) = expected.remove(7);
    b.release(&sid, &gone, t).unwrap();
    let again = name("own", 400);
    expected.push((again.clone(), acquired(b.acquire(&sid, &again))));
    // A repeated acquire of a held lease changes nothing in the index.
    assert_eq!(acquired(b.acquire(&sid, &expected[0].0)), expected[0].1);
    expected.sort();
    renewal("after a release, an acquire and a repeated acquire", &expected, 0);
    // Another client's change to the same session's index is not this client's to follow.
    let theirs = name("their", 0);
    expected.push((theirs.clone(), acquired(other.acquire(&sid, &theirs))));
    expected.sort();
    renewal("after another client's acquire", &expected, 1);
    renewal("unchanged", &expected, 0);
    // A release whose term is gone (late) changes nothing either; one of a held term does.
    b.release(&sid, &gone, t).unwrap();
    let (last, lt) = expected.pop().unwrap();
    b.release(&sid, &last, lt).unwrap();
    renewal("after a late release and a release", &expected, 0);
    b.close_session(&sid).unwrap();
}

#[test]
fn owned_follows_every_change_of_the_index() {
    let r = PrivateRedis::start(&[]);
    let (one, two) = (r.backend(), r.backend());
    let sid = one.open_session(D, "").unwrap().id;
    let (a, b, c) = (name("own", 0), name("own", 1), name("own", 2));
    let ta = acquired(one.acquire(&sid, &a));
    let tb = acquired(one.acquire(&sid, &b));
    assert_eq!(owned(&one, &sid, D), vec![(a.clone(), ta), (b.clone(), tb)]);
    assert_eq!(owned(&one, &sid, D), vec![(a.clone(), ta), (b.clone(), tb)], "unchanged index, same report");
    one.release(&sid, &a, ta).unwrap();
    assert_eq!(owned(&one, &sid, D), vec![(b.clone(), tb)], "a released lease is still reported");
    // Another backend (its own books, no listing) changes the same session's index: the first
    // backend's next renewal sees it.
    let tc = acquired(two.acquire(&sid, &c));
    assert_eq!(owned(&one, &sid, D), vec![(b.clone(), tb), (c.clone(), tc)]);
    assert_eq!(owned(&two, &sid, D), vec![(b.clone(), tb), (c.clone(), tc)]);
    two.release(&sid, &b, tb).unwrap();
    assert_eq!(owned(&one, &sid, D), vec![(c.clone(), tc)]);
    // A new term of a released name is a new entry with the next token.
    let ta2 = acquired(one.acquire(&sid, &a));
    assert!(ta2 > ta);
    assert_eq!(owned(&two, &sid, D), vec![(a.clone(), ta2), (c.clone(), tc)]);
    // A release of an older term that lands late changes nothing.
    two.release(&sid, &a, ta).unwrap();
    assert_eq!(owned(&one, &sid, D), vec![(a.clone(), ta2), (c.clone(), tc)]);
    // Another session cannot take a term while this session's key lives; once it is gone the
    // session is expired, never alive with fewer leases.
    let rival = two.open_session(D, "").unwrap().id;
    assert_eq!(two.acquire(&rival, &c).unwrap(), Acquire::Busy);
    r.cmd(&["DEL", &format!("simba:session:{{{sid}}}")]);
    assert!(two.holder(&c).unwrap().is_none());
    assert!(acquired(two.acquire(&rival, &c)) > tc);
    assert_eq!(one.keep_alive(&sid, D).unwrap(), KeepAlive::Expired);
    assert_eq!(two.keep_alive(&sid, D).unwrap(), KeepAlive::Expired);
    two.close_session(&rival).unwrap();
    one.close_session(&sid).unwrap();
}

/// Issue #36 finding 1 on standalone: acquire → release → renewal → acquire again → two renewals
/// list the new term. It cannot go wrong here: the release removes the name from the index in
/// the same script as it ends the term, and a renewal drops an entry it finds lost in the same
/// script as it checks it — the client never schedules a removal for a later renewal (the Cluster
/// backend does, which is where the finding was). Both groups and leases are checked.
#[test]
fn a_lease_acquired_again_after_its_release_and_a_renewal_stays_owned() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    let sid = b.open_session(D, "").unwrap().id;
    let (x, control, g) = (name("again", 0), name("again", 1), name("again-group", 0));
    let tc = acquired(b.acquire(&sid, &control));
    let t1 = acquired(b.acquire(&sid, &x));
    b.join(&sid, &g).unwrap();
    b.release(&sid, &x, t1).unwrap();
    b.leave(&sid, &g).unwrap();
    assert_eq!(owned(&b, &sid, D), vec![(control.clone(), tc)]);
    let t2 = acquired(b.acquire(&sid, &x));
    b.join(&sid, &g).unwrap();
    for k in 1..=2 {
        assert_eq!(owned(&b, &sid, D), vec![(x.clone(), t2), (control.clone(), tc)], "renewal {k} after");
        let KeepAlive::Alive { groups, .. } = b.keep_alive(&sid, D).unwrap() else { panic!("expired") };
        assert_eq!(groups, vec![g.clone()], "renewal {k} after the re-join");
    }
    b.close_session(&sid).unwrap();
}

#[test]
fn a_lease_hash_changed_behind_the_sessions_back_is_not_reported() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    let sid = b.open_session(D, "").unwrap().id;
    let held: Vec<(Name, Token)> =
        (0..4).map(|i| (name("tamper", i), acquired(b.acquire(&sid, &name("tamper", i))))).collect();
    assert_eq!(owned(&b, &sid, D), held);
    // Writes that bypass simba: a lease hash deleted, one given to another session, one whose
    // token changed. At most 16 leases: the next renewal checks every entry.
    r.cmd(&["DEL", &format!("simba:lease:{{{}}}", held[0].0)]);
    r.cmd(&["HSET", &format!("simba:lease:{{{}}}", held[1].0), "session", SessionId::random().as_str()]);
    r.cmd(&["HINCRBY", &format!("simba:lease:{{{}}}", held[2].0), "token", "1"]);
    assert_eq!(owned(&b, &sid, D), held[3..].to_vec());
    assert_eq!(r.cmd(&["HLEN", &format!("simba:session:{{{sid}}}:terms")]), "1", "lost entries leave the index");
    // With more leases the renewals check the index in rotation, at least 16 entries each: a lost
    // one is dropped within ceil(N/16) renewals, asserted here (these 101 entries are a listpack,
    // which every renewal checks whole; tests/redis_detection.rs tests both encodings).
    let many: Vec<Name> = (10..110).map(|i| name("tamper", i)).collect();
    for l in &many {
        acquired(b.acquire(&sid, l));
    }
    assert_eq!(owned(&b, &sid, D).len(), 101);
    r.cmd(&["DEL", &format!("simba:lease:{{{}}}", many[50])]);
    let mut renewals = 1;
    while owned(&b, &sid, D).iter().any(|(n, _)| *n == many[50]) {
        renewals += 1;
        assert!(renewals <= 101usize.div_ceil(16), "a deleted lease hash was still reported after {renewals} renewals");
    }
    assert_eq!(owned(&b, &sid, D).len(), 100);
    b.close_session(&sid).unwrap();
}

/// Runs one of the scripts of clients before the session-judged renewal.
fn legacy(r: &PrivateRedis, script: &str, keys: &[String], args: &[String]) -> redis::Value {
    let code = match script {
        "acquire" => include_str!("lua/legacy/acquire.lua"),
        "keep_alive" => include_str!("lua/legacy/keep_alive.lua"),
        "holder" => include_str!("lua/legacy/holder.lua"),
        "close_session" => include_str!("lua/legacy/close_session.lua"),
        other => panic!("no legacy script {other}"),
    };
    let mut con = redis::Client::open(r.url()).unwrap().get_connection().unwrap();
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(code).arg(keys.len()).arg(keys).arg(args);
    cmd.query(&mut con).unwrap_or_else(|e| panic!("legacy {script}: {e}"))
}

fn legacy_acquire(r: &PrivateRedis, sid: &SessionId, l: &Name) -> Option<u64> {
    let s = sid.as_str();
    let keys =
        [format!("simba:session:{{{s}}}"), format!("simba:session:{{{s}}}:leases"), format!("simba:lease:{{{l}}}")];
    match legacy(r, "acquire", &keys, &[s.to_string(), l.to_string()]) {
        redis::Value::Array(v) => match v.as_slice() {
            [redis::Value::Int(1), redis::Value::Int(t), ..] => Some(*t as u64),
            [redis::Value::Int(0)] => None,
            other => panic!("legacy acquire: {other:?}"),
        },
        other => panic!("legacy acquire: {other:?}"),
    }
}

fn legacy_keep_alive(r: &PrivateRedis, sid: &SessionId, d: Duration) {
    let s = sid.as_str();
    let keys = [
        format!("simba:session:{{{s}}}"),
        format!("simba:session:{{{s}}}:leases"),
        format!("simba:session:{{{s}}}:groups"),
    ];
    legacy(r, "keep_alive", &keys, &[s.to_string(), d.as_millis().to_string()]);
}

fn legacy_holder(r: &PrivateRedis, l: &Name) -> Option<String> {
    match legacy(r, "holder", &[format!("simba:lease:{{{l}}}")], &[]) {
        redis::Value::Array(v) if v.is_empty() => None,
        redis::Value::Array(v) => Some(private::value_string(&v[0])),
        other => panic!("legacy holder: {other:?}"),
    }
}

#[test]
fn old_and_new_scripts_never_both_hold_a_term() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    let short = Duration::from_millis(600);
    // An old client's session (open_session.lua did not change) holds `old` by the old rules.
    let old_client = b.open_session(short, "old").unwrap().id;
    let (old, new) = (name("mixed", 0), name("mixed", 1));
    let t_old = legacy_acquire(&r, &old_client, &old).expect("the old client takes a free lease");
    let me = b.open_session(D, "new").unwrap().id;
    for _ in 0..3 {
        legacy_keep_alive(&r, &old_client, short);
        assert_eq!(b.acquire(&me, &old).unwrap(), Acquire::Busy, "new took an old client's live term");
        assert_eq!(b.holder(&old).unwrap().map(|h| (h.session, h.token.get())), Some((old_client.clone(), t_old)));
        thread::sleep(short / 4);
    }
    // A term the new scripts started is busy for the old ones while its session lives.
    let t_new = acquired(b.acquire(&me, &new));
    assert_eq!(legacy_acquire(&r, &old_client, &new), None, "an old client took a new client's live term");
    assert_eq!(legacy_holder(&r, &new).as_deref(), Some(me.as_str()));
    // The old client stops renewing: its term ends with its session, for both.
    let end = Instant::now() + short * 2;
    while Instant::now() < end {
        owned(&b, &me, D);
        thread::sleep(short / 4);
    }
    assert!(b.holder(&old).unwrap().is_none());
    assert_eq!(acquired(b.acquire(&me, &old)).get(), t_old + 1, "the takeover continues the old token");
    assert_eq!(owned(&b, &me, D), vec![(old.clone(), Token::new(t_old + 1).unwrap()), (new.clone(), t_new)]);
    // The new client's session ends: an old client takes over with the next token.
    let late = b.open_session(short, "old again").unwrap().id;
    r.cmd(&["DEL", &format!("simba:session:{{{me}}}")]);
    assert_eq!(legacy_acquire(&r, &late, &new), Some(t_new.get() + 1));
    assert_eq!(legacy_acquire(&r, &late, &old), Some(t_old + 2));
    // A new client closing an old client's session by id releases the old session's leases.
    let (tx, rx) = crossbeam_channel::unbounded();
    assert!(b.watch(&simba::backend::Topic::Lease(new.clone()), &tx).unwrap());
    b.close_session(&late).unwrap();
    assert_eq!(r.cmd(&["HGET", &format!("simba:lease:{{{new}}}"), "session"]), "");
    assert_eq!(r.cmd(&["HGET", &format!("simba:lease:{{{old}}}"), "session"]), "");
    assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), simba::backend::Notification::Released(new.clone()));
    assert_eq!(r.cmd(&["EXISTS", &format!("simba:session:{{{late}}}:leases")]), "0");
}
