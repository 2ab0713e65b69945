//! Issue #36 finding 8: Redis standalone notices a lease hash lost behind the session's back
//! (deleted or rewritten by hand, evicted) within a bounded number of renewals.
//!
//! A renewal checks index entries against their lease hashes (`lua/keep_alive.lua`) and drops
//! those that no longer name the session with its token, so `owned` leaves them out. The bound
//! asserted here: with N entries in the session's index `simba:session:{sid}:terms`, every entry
//! whose hash is lost is left out of `owned` within ceil(N/16) renewals (the index is walked in
//! rotation, at least 16 entries per renewal); a small index (listpack-encoded: at most
//! `hash-max-listpack-entries` entries, 512 by default, of at most 64 bytes) by the next renewal. The
//! renewals are counted from the loss; none is in flight here (the SPI calls are sequential and
//! each script is atomic), so no "+1 for the renewal already running" is needed: that one only
//! arises in the engine, whose renewal may have been sent before the loss. A random sample (the
//! code before: `HRANDFIELD` of 16 per renewal) gives no such bound: each entry is missed by a
//! renewal with probability 1 − 16/N, independently, so losing 320 of 640 and requiring all to
//! be noticed within 40 renewals succeeds with probability about (1 − e^−1)^320 ≈ 1e-64.
//!
//! Each test runs on its own private `redis-server` (`scripts/services up redis` installs it).
#![cfg(feature = "redis")]

#[path = "redis_private.rs"]
mod private;

use std::collections::BTreeMap;
use std::time::Duration;

use private::{acquired, PrivateRedis};
use simba::backend::LeaseBackend;
use simba::backends::redis::RedisBackend;
use simba::{Name, SessionId, Token};

const D: Duration = Duration::from_secs(30);

fn owned(b: &RedisBackend, sid: &SessionId) -> BTreeMap<Name, Token> {
    private::owned(b, sid, D).into_iter().collect()
}

/// `n` leases of `sid`, named `{prefix}-{i}`; `long` names (100 bytes) keep the index out of the
/// listpack encoding (at most 64 bytes per field) whatever its size.
fn acquire_many(b: &RedisBackend, sid: &SessionId, prefix: &str, n: usize, long: bool) -> Vec<(Name, Token)> {
    (0..n)
        .map(|i| {
            let name = if long { format!("{prefix}-{i:0>90}") } else { format!("{prefix}-{i}") };
            let name = Name::new(name).unwrap();
            let t = acquired(b.acquire(sid, &name));
            (name, t)
        })
        .collect()
}

/// How Redis stores the session's lease index (`listpack` or `hashtable`).
fn encoding(r: &PrivateRedis, sid: &SessionId) -> String {
    r.cmd(&["OBJECT", "ENCODING", &format!("simba:session:{{{sid}}}:terms")])
}

fn ceil16(n: usize) -> usize {
    n.div_ceil(16)
}

/// Deletes the lease hashes of `held[i]` for every `i` in `lost`, then renews `sid` up to
/// `limit` times. Asserts that every lease not lost stays listed at every renewal, and that every
/// lost one, once left out, stays out. Returns, per lost lease, the renewal (1-based) that first
/// left it out, or `None` when all `limit` renewals still listed it.
fn renewals_until_noticed(
    r: &PrivateRedis,
    b: &RedisBackend,
    sid: &SessionId,
    held: &[(Name, Token)],
    lost: &[usize],
    limit: usize,
) -> Vec<Option<usize>> {
    for &i in lost {
        r.cmd(&["DEL", &format!("simba:lease:{{{}}}", held[i].0)]);
    }
    let mut noticed: Vec<Option<usize>> = vec![None; lost.len()];
    for k in 1..=limit {
        let now = owned(b, sid);
        for (i, (name, t)) in held.iter().enumerate() {
            if !lost.contains(&i) {
                assert_eq!(now.get(name), Some(t), "renewal {k}: the live lease {name} is not listed");
            }
        }
        for (j, &i) in lost.iter().enumerate() {
            let listed = now.contains_key(&held[i].0);
            match noticed[j] {
                None if !listed => noticed[j] = Some(k),
                Some(at) if listed => panic!("renewal {k}: {} listed again after renewal {at} left it out", held[i].0),
                _ => {}
            }
        }
        if noticed.iter().all(Option::is_some) {
            break;
        }
    }
    noticed
}

/// Asserts that every lost lease was noticed within `bound` renewals, with the distribution in
/// the message.
fn assert_within(what: &str, noticed: &[Option<usize>], bound: usize) {
    let late = noticed.iter().filter(|n| n.is_none_or(|k| k > bound)).count();
    let mut hist: BTreeMap<Option<usize>, usize> = BTreeMap::new();
    for n in noticed {
        *hist.entry(*n).or_default() += 1;
    }
    println!("{what}: renewal that noticed → lost hashes: {hist:?} (bound {bound})");
    assert_eq!(
        late,
        0,
        "{what}: {late} of {} lost lease hashes not noticed within {bound} renewals \
         (renewal that noticed → how many; None: not within the renewals run): {hist:?}",
        noticed.len()
    );
}

/// N = 640 leases (a hash table, not a listpack: more than the default 512 entries): losing every
/// other lease hash, all 320 are noticed within ceil(640/16) = 40 renewals; then losing every
/// other of the 320 left, within ceil(320/16) = 20 renewals (the rotation goes on from where it
/// stopped); then half of the 160 left within ceil(160/16) = 10 renewals, plus one: these deletes
/// drop the 1,024-bucket table below 10 % full, Redis shrinks it in the middle of the rotation, and
/// `HSCAN` may then return again the entries of one bucket of the smaller table, which can cost one
/// renewal more.
#[test]
fn every_lost_lease_hash_is_noticed_within_n_over_16_renewals() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    let sid = b.open_session(D, "").unwrap().id;
    let mut held = acquire_many(&b, &sid, "rot", 640, false);
    assert_eq!(owned(&b, &sid).len(), 640);
    assert_eq!(encoding(&r, &sid), "hashtable", "640 entries are past hash-max-listpack-entries");
    for (round, slack) in [(1, 0), (2, 0), (3, 1)] {
        let n = held.len();
        let lost: Vec<usize> = (0..n).step_by(2).collect();
        let bound = ceil16(n) + slack;
        let noticed = renewals_until_noticed(&r, &b, &sid, &held, &lost, bound + 30);
        assert_within(&format!("round {round}: {} of {n} lost", lost.len()), &noticed, bound);
        held = held.into_iter().enumerate().filter(|(i, _)| !lost.contains(i)).map(|(_, h)| h).collect();
        assert_eq!(owned(&b, &sid).len(), held.len());
    }
    b.close_session(&sid).unwrap();
}

/// A small index (listpack: at most 512 entries of at most 64 bytes, the server's defaults) is
/// checked whole at every renewal: 50 of 100 lost are all noticed by the next renewal.
#[test]
fn a_small_index_is_checked_whole_at_the_next_renewal() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    let sid = b.open_session(D, "").unwrap().id;
    let held = acquire_many(&b, &sid, "small", 100, false);
    assert_eq!(owned(&b, &sid).len(), 100);
    assert_eq!(encoding(&r, &sid), "listpack");
    let lost: Vec<usize> = (0..100).step_by(2).collect();
    let noticed = renewals_until_noticed(&r, &b, &sid, &held, &lost, 30);
    assert_within("50 of 100 lost (listpack)", &noticed, 1);
    b.close_session(&sid).unwrap();
}

/// Long names keep even a small index in a hash table: 80 entries, 40 lost, all noticed within
/// ceil(80/16) = 5 renewals; 12 entries (fewer than 16), 6 lost: the next renewal checks them all.
#[test]
fn a_hash_table_index_with_long_names_is_walked_in_rotation() {
    let r = PrivateRedis::start(&[]);
    let b = r.backend();
    for (n, prefix) in [(80, "long"), (12, "few")] {
        let sid = b.open_session(D, "").unwrap().id;
        let held = acquire_many(&b, &sid, prefix, n, true);
        assert_eq!(owned(&b, &sid).len(), n);
        assert_eq!(encoding(&r, &sid), "hashtable", "names over 64 bytes");
        // Move the rotation off its start: a renewal with nothing lost.
        assert_eq!(owned(&b, &sid).len(), n);
        let lost: Vec<usize> = (0..n).step_by(2).collect();
        let noticed = renewals_until_noticed(&r, &b, &sid, &held, &lost, 30);
        assert_within(&format!("{} of {n} lost (long names)", lost.len()), &noticed, ceil16(n));
        b.close_session(&sid).unwrap();
    }
}
