//! The partition assignment rule (SPEC §13): which member should own which partition, decided from
//! the counted members and the partitions' current owners. Pure — no clock, no I/O — so every
//! member that sees the same members and owners computes the same target, and the simulation, the
//! explorer and the unit tests below check the very rule the handles run.
//!
//! The rule, written once here ([`target`]):
//! 1. **cap** = ⌈count / members⌉, lowered to the optional maximum per member;
//! 2. **keep**: a partition owned by a counted member stays with it (sticky), except that a member
//!    owning more than the cap gives up the partitions it scores *highest* on (the rendezvous score
//!    of partition and member, [`score`]) until it owns the cap;
//! 3. **fill**: every other partition (free, given up, or owned by a session that is no counted
//!    member — one that left, crashed or is not yet settled) goes, in index order, to the member
//!    with the fewest partitions so far that is below the cap, ties broken by the highest score.
//!
//! What follows (proved by the tests below on random inputs): no member gets more than the cap
//! (**balanced**); when a member joins an evenly spread assignment (as the rule spreads from
//! nothing), only partitions given up by members over the new cap move, and every one of them goes
//! to the joiner (**sticky join**, at most a cap of them); when a member leaves or crashes, only its partitions move (**sticky leave**). Members
//! that disagree on the member list for a while compute different targets; that costs time, never
//! exclusivity, which the partition leases guarantee on their own.

use crate::sync::{self, Bug};
use crate::types::SessionId;

/// The most partitions any one member is assigned: ⌈count / members⌉, at most `max_per_member`
/// (0 when there are no members).
pub(crate) fn cap(count: u32, members: usize, max_per_member: Option<u32>) -> u32 {
    if members == 0 {
        return 0;
    }
    let members = u32::try_from(members).unwrap_or(u32::MAX);
    let fair = count.div_ceil(members);
    max_per_member.map_or(fair, |m| fair.min(m))
}

/// The rendezvous score of `partition` for `member`: a fixed 64-bit hash (FNV-1a, then a
/// SplitMix64 finalizer), the same in every process and every build.
pub(crate) fn score(partition: u32, member: &SessionId) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in member.as_str().bytes().chain(partition.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// The target owner of every partition `0..owners.len()`, as an index into `members`, or `None`
/// when no member may take it (no members, or every member at the maximum per member).
///
/// `members` are the counted members (any order; duplicates are ignored); `owners[p]` is the
/// session that owns partition `p` now, if any.
pub(crate) fn target(
    members: &[SessionId],
    owners: &[Option<SessionId>],
    max_per_member: Option<u32>,
) -> Vec<Option<usize>> {
    let count = u32::try_from(owners.len()).unwrap_or(u32::MAX);
    let mut distinct: Vec<usize> = Vec::with_capacity(members.len());
    for (i, m) in members.iter().enumerate() {
        if !members[..i].contains(m) {
            distinct.push(i);
        }
    }
    let cap = sync::pick(Bug::PartitionNoCap, owners.len(), cap(count, distinct.len(), max_per_member) as usize);
    let mut out: Vec<Option<usize>> = vec![None; owners.len()];
    let mut load = vec![0usize; members.len()];
    sync::fixed_only(Bug::PartitionOwnersIgnored, || keep(members, &distinct, owners, cap, &mut out, &mut load));
    // Fill: the rest, in index order, to the least-loaded member below the cap.
    let filled = sync::pick(Bug::PartitionFillSkipsLast, count.saturating_sub(1), count);
    for p in 0..filled {
        if out[p as usize].is_some() {
            continue;
        }
        let best = distinct
            .iter()
            .copied()
            .filter(|&i| load[i] < cap)
            .min_by_key(|&i| (load[i], std::cmp::Reverse(score(p, &members[i]))));
        if let Some(i) = best {
            out[p as usize] = Some(i);
            load[i] += 1;
        }
    }
    out
}

/// Keep: each member's own partitions, the lowest-scoring up to the cap (`out` and `load` of
/// [`target`]).
fn keep(
    members: &[SessionId],
    distinct: &[usize],
    owners: &[Option<SessionId>],
    cap: usize,
    out: &mut [Option<usize>],
    load: &mut [usize],
) {
    let count = u32::try_from(owners.len()).unwrap_or(u32::MAX);
    for &i in distinct {
        let mut kept: Vec<u32> = (0..count).filter(|&p| owners[p as usize].as_ref() == Some(&members[i])).collect();
        kept.sort_by_key(|&p| (score(p, &members[i]), p));
        kept.truncate(cap);
        for p in kept {
            out[p as usize] = Some(i);
            load[i] += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ids(n: usize) -> Vec<SessionId> {
        (0..n).map(|i| SessionId::from_u64(i as u64 + 1)).collect()
    }

    /// The owners a target hands out, as session ids.
    fn owners_of(members: &[SessionId], t: &[Option<usize>]) -> Vec<Option<SessionId>> {
        t.iter().map(|o| o.map(|i| members[i].clone())).collect()
    }

    fn loads(members: &[SessionId], owners: &[Option<SessionId>]) -> Vec<usize> {
        members.iter().map(|m| owners.iter().filter(|o| o.as_ref() == Some(m)).count()).collect()
    }

    /// A settled assignment of `count` partitions over `members`, from nothing.
    fn settled(members: &[SessionId], count: usize) -> Vec<Option<SessionId>> {
        owners_of(members, &target(members, &vec![None; count], None))
    }

    #[test]
    fn cap_is_the_ceiling_lowered_to_the_maximum() {
        assert_eq!(cap(64, 5, None), 13);
        assert_eq!(cap(64, 4, None), 16);
        assert_eq!(cap(64, 4, Some(10)), 10);
        assert_eq!(cap(3, 5, None), 1);
        assert_eq!(cap(7, 0, None), 0);
    }

    #[test]
    fn score_is_fixed_across_processes() {
        // A changed hash would move partitions between members running different versions.
        let m = SessionId::from_u64(7);
        assert_eq!(score(3, &m), score(3, &m.clone()));
        assert_ne!(score(3, &m), score(4, &m));
        assert_eq!(score(0, &SessionId::from_u64(1)), 0xe1a1_e475_cdfb_cc15_u64, "hash changed");
    }

    #[test]
    fn no_members_owns_nothing_and_a_maximum_leaves_partitions_free() {
        assert!(target(&[], &vec![None; 4], None).iter().all(Option::is_none));
        let m = ids(2);
        let t = target(&m, &vec![None; 10], Some(3));
        assert_eq!(t.iter().filter(|o| o.is_some()).count(), 6);
    }

    #[test]
    fn four_five_four_is_balanced_and_sticky() {
        let four = ids(4);
        let a = settled(&four, 64);
        assert_eq!(loads(&four, &a), vec![16; 4]);
        let five = ids(5);
        let b = owners_of(&five, &target(&five, &a, None));
        let moved: Vec<usize> = (0..64).filter(|&p| a[p] != b[p]).collect();
        assert_eq!(moved.len(), 12, "each of four members gives up 3 to reach 13");
        assert!(moved.iter().all(|&p| b[p].as_ref() == Some(&five[4])), "all moves go to the joiner");
        // The joiner leaves (or crashes): only its partitions move.
        let c = owners_of(&four, &target(&four, &b, None));
        for p in 0..64 {
            if b[p].as_ref() != Some(&five[4]) {
                assert_eq!(b[p], c[p], "partition {p} moved although its owner stayed");
            }
        }
        assert!(loads(&four, &c).iter().all(|&l| l == 16));
    }

    proptest! {
        #[test]
        fn balanced_sticky_and_deterministic(
            count in 1usize..200,
            n in 1usize..12,
            joiner_seed in any::<u64>(),
            leaver in 0usize..12,
            order in any::<u64>(),
        ) {
            let members = ids(n);
            let before = settled(&members, count);
            let cap_n = cap(count as u32, n, None) as usize;
            prop_assert!(loads(&members, &before).iter().all(|&l| l <= cap_n));
            prop_assert!(before.iter().all(Option::is_some), "covered");
            // Deterministic whatever order the member list is in.
            let mut shuffled = members.clone();
            shuffled.rotate_left((order % n as u64) as usize);
            prop_assert_eq!(owners_of(&shuffled, &target(&shuffled, &before, None)), before.clone());
            // Join.
            let joiner = SessionId::from_u64(1000 + (joiner_seed % 1000));
            let mut joined = members.clone();
            joined.push(joiner.clone());
            let after = owners_of(&joined, &target(&joined, &before, None));
            let cap_j = cap(count as u32, n + 1, None) as usize;
            prop_assert!(loads(&joined, &after).iter().all(|&l| l <= cap_j), "balanced after a join");
            prop_assert!(after.iter().all(Option::is_some), "covered after a join");
            let moved: Vec<usize> = (0..count).filter(|&p| before[p] != after[p]).collect();
            prop_assert!(moved.len() <= cap_j);
            prop_assert!(moved.iter().all(|&p| after[p].as_ref() == Some(&joiner)), "moves go to the joiner");
            // Leave (or crash) of one member: only its partitions move.
            let leaver = leaver % n;
            let rest: Vec<SessionId> = members.iter().enumerate().filter(|&(i, _)| i != leaver).map(|(_, m)| m.clone()).collect();
            let left = owners_of(&rest, &target(&rest, &before, None));
            for p in 0..count {
                if before[p].as_ref() != Some(&members[leaver]) {
                    prop_assert_eq!(&before[p], &left[p], "a partition of a member that stayed moved");
                }
            }
            if !rest.is_empty() {
                let cap_r = cap(count as u32, rest.len(), None) as usize;
                prop_assert!(loads(&rest, &left).iter().all(|&l| l <= cap_r), "balanced after a leave");
                prop_assert!(left.iter().all(Option::is_some), "covered after a leave");
            }
        }
    }
}
