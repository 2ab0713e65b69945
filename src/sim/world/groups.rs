//! Group membership, driven the way `runtime/` and `group.rs` drive it, against the real
//! `MemoryBackend::join/leave/members`:
//!
//! - `Session::join` → `attach_membership`: refused unless the engine is alive; waits (up to the
//!   query timeout, then fails) while a leave of the group by the session is still in flight
//!   (until its backend call returned); the group goes into the session's membership map, then
//!   `join` runs bounded by the query timeout; on success
//!   the `Membership` is attached (active), on an error or a timeout the map entry is removed and
//!   the caller gets the error (a join that lands after its caller gave up is not undone);
//! - `Membership::leave` (waits up to the query timeout) or dropping the handle (a background
//!   leave): the handle is marked left first, the map entry removed, then `leave` is sent;
//! - the end of the session (expiry or close) makes every membership of it inactive; the
//!   application then drops the handle, which sends a (harmless) leave on the dead session;
//! - `Membership::is_member()` = active, not left, the session alive by its local deadline, and
//!   the engine holding the group without a known loss (sampled after each step, and for every
//!   client at the instant the backend evaluates a `members` read);
//! - the engine's membership book (`engine/groups.rs`) is fed like `runtime/` feeds it: joins
//!   and leaves in flight, joins that returned to a waiting caller, abandoned joins; its outputs
//!   re-join lost memberships (`Kind::Rejoin`) and leave strays (a background `Kind::Leave`);
//! - `Session::members` reads, bounded, from every client.
//!
//! Keep-alives renew memberships with the session (SPEC §5) and report the session's groups,
//! which the engine judges by the keep-alive's send instant.

use rand::Rng;

use super::{Event, Kind, MemOp, Req, Res, SessionState, Target, World};
use crate::backend::LeaseBackend;
use crate::sim::BrokenRule;
use crate::types::Name;

/// One client's membership workload for one group.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupWant {
    next_join: u64,
    joining: Option<u64>,
    /// A `Membership::leave` the application waits for.
    leaving: Option<u64>,
    /// The current `Membership` handle.
    handle: Option<Handle>,
    hold_until: u64,
    next_read: u64,
    reading: Option<u64>,
    /// The session label whose `is_member()` was last sampled true.
    valid: Option<u32>,
    /// Leave calls whose worker has not returned yet: (session index, call).
    leaves: Vec<(usize, u64)>,
    /// A join waiting for a leave in flight gives up at this instant (`wait_for_leaves`).
    join_wait_until: Option<u64>,
}

/// A `Membership` handle that has not left: its session, and whether the join attached it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handle {
    si: usize,
    active: bool,
}

impl World {
    pub(super) fn init_groups(&mut self, c: usize) {
        let n = self.groups.len();
        let mut v = Vec::with_capacity(n);
        for _ in 0..n {
            let next_join = self.rng.random_range(0..self.lease);
            let next_read = self.rng.random_range(0..self.lease / 2);
            v.push(GroupWant { next_join, next_read, ..GroupWant::default() });
        }
        self.clients[c].groups = v;
    }

    /// `members` reads and `leader()` reads: they need no live session.
    pub(super) fn reads(&mut self, c: usize) {
        for g in 0..self.groups.len() {
            let gw = &self.clients[c].groups[g];
            if gw.reading.is_none() && self.now >= gw.next_read {
                let id = self.start_call(c, None, None, Kind::Members { group: g });
                self.clients[c].groups[g].reading = Some(id);
            }
        }
        self.leader_reads(c);
    }

    pub(super) fn members_returned(&mut self, c: usize, g: usize, id: u64) {
        if self.clients[c].groups[g].reading == Some(id) {
            let d = self.rng.random_range(self.lease / 5..self.lease);
            let gw = &mut self.clients[c].groups[g];
            gw.reading = None;
            gw.next_read = self.now + d;
        }
    }

    pub(super) fn group_workload(&mut self, c: usize, si: usize) {
        let now = self.inst(c);
        for g in 0..self.groups.len() {
            let gw = self.clients[c].groups[g].clone();
            if let Some(h) = gw.handle {
                if h.si != si {
                    // The application drops the membership of its ended session.
                    self.leave(c, g, false);
                } else if self.now >= gw.hold_until {
                    let wait = self.rng.random_bool(0.5);
                    self.leave(c, g, wait);
                }
                continue;
            }
            if gw.joining.is_some() || gw.leaving.is_some() || self.now < gw.next_join {
                continue;
            }
            // attach_membership: check_alive, wait_for_leaves, AlreadyHeld, then the bounded join.
            if gw.join_wait_until.is_none() && !self.clients[c].sessions[si].engine.is_alive(now) {
                let d = self.rng.random_range(self.lease / 10..self.lease);
                self.clients[c].groups[g].next_join = self.now + d;
                continue;
            }
            if !self.sc.old_join && gw.leaves.iter().any(|(s, _)| *s == si) {
                // Wait for the leave's backend call to return (its end steps this client), at
                // most the query timeout; then the join fails (`Unavailable`) and is retried later.
                let until = self.clients[c].clock.real_at_instant(self.base, now + self.timing.query_timeout);
                let until = *self.clients[c].groups[g].join_wait_until.get_or_insert(until);
                if self.now >= until {
                    let d = self.rng.random_range(self.lease / 10..self.lease);
                    let gw = &mut self.clients[c].groups[g];
                    gw.join_wait_until = None;
                    gw.next_join = self.now + d;
                }
                continue;
            }
            self.clients[c].groups[g].join_wait_until = None;
            if !self.clients[c].sessions[si].groups.insert(g) {
                continue;
            }
            let group = self.groups[g].clone();
            self.clients[c].sessions[si].engine.begin_join(&group);
            let target = self.clients[c].sessions[si].target.clone();
            let id = self.start_call(c, Some(si), Some(target), Kind::Join { group: g });
            self.clients[c].groups[g].joining = Some(id);
        }
    }

    /// The join call returned `res` to its caller (`Res::Failed` also for a timeout).
    pub(super) fn join_returned(&mut self, c: usize, si: Option<usize>, g: usize, id: u64, res: Res) {
        if self.clients[c].groups[g].joining != Some(id) {
            return;
        }
        self.clients[c].groups[g].joining = None;
        let Some(si) = si else { return };
        if let Res::Done = res {
            let hold = self.rng.random_range(self.lease / 2..self.lease * 6);
            let gw = &mut self.clients[c].groups[g];
            gw.handle = Some(Handle { si, active: true });
            gw.hold_until = self.now + hold;
            self.stats.joins += 1;
            let sess = self.clients[c].sessions[si].label;
            self.record(Event::JoinReturned { client: c as u8, sess, group: self.groups[g].clone() });
        } else {
            self.clients[c].sessions[si].groups.remove(&g);
            let d = self.rng.random_range(self.lease / 10..self.lease);
            self.clients[c].groups[g].next_join = self.now + d;
        }
    }

    /// `Membership::leave` (`wait`) or dropping the handle.
    fn leave(&mut self, c: usize, g: usize, wait: bool) {
        let Some(h) = self.clients[c].groups[g].handle.take() else { return };
        let sess = self.clients[c].sessions[h.si].label;
        self.record(Event::Leaving { client: c as u8, sess, group: self.groups[g].clone(), wait });
        if self.clients[c].sessions[h.si].groups.remove(&g) {
            let group = self.groups[g].clone();
            self.clients[c].sessions[h.si].engine.begin_leave(&group);
            let target = self.clients[c].sessions[h.si].target.clone();
            let id = self.start_call(c, Some(h.si), Some(target), Kind::Leave { group: g, wait });
            self.clients[c].groups[g].leaves.push((h.si, id));
            if wait {
                self.clients[c].groups[g].leaving = Some(id);
                return;
            }
        }
        self.next_join(c, g);
    }

    /// A leave call's worker returned (reply, error or its own deadline).
    pub(super) fn leave_ended(&mut self, c: usize, si: Option<usize>, g: usize, id: u64) {
        self.clients[c].groups[g].leaves.retain(|(_, call)| *call != id);
        if let Some(si) = si {
            let now = self.inst(c);
            let group = self.groups[g].clone();
            self.clients[c].sessions[si].engine.end_leave(&group, now);
        }
    }

    /// `Command::LeaveStray`: a background leave of a group the session does not hold (the engine
    /// counted it in flight); a join of the group waits for it like for any leave.
    pub(super) fn leave_stray(&mut self, c: usize, si: usize, g: usize) {
        let target = self.clients[c].sessions[si].target.clone();
        let id = self.start_call(c, Some(si), Some(target), Kind::Leave { group: g, wait: false });
        self.clients[c].groups[g].leaves.push((si, id));
    }

    /// A join call's worker returned: the engine learns it under the session lock, and the group
    /// is held when the call succeeded and its caller still waited (`attach_membership`).
    pub(super) fn join_call_ended(&mut self, c: usize, si: Option<usize>, g: usize, gave_up: bool, res: &Res) {
        let Some(si) = si else { return };
        let now = self.inst(c);
        let group = self.groups[g].clone();
        let e = &mut self.clients[c].sessions[si].engine;
        e.end_join(&group, now);
        if matches!(res, Res::Done) && !gave_up {
            let outs = e.joined(&group, now);
            self.handle_step(c, si, outs);
        }
    }

    /// The caller of a join gave up (timeout): the group is not held.
    pub(super) fn join_abandoned(&mut self, c: usize, si: Option<usize>, g: usize) {
        let Some(si) = si else { return };
        let now = self.inst(c);
        let group = self.groups[g].clone();
        self.clients[c].sessions[si].engine.join_abandoned(&group, now);
    }

    /// A re-join (`Command::Rejoin`) returned.
    pub(super) fn rejoin_ended(&mut self, c: usize, si: Option<usize>, g: usize, res: &Res) {
        let Some(si) = si else { return };
        let now = self.inst(c);
        let group = self.groups[g].clone();
        let outs = self.clients[c].sessions[si].engine.end_rejoin(&group, now, matches!(res, Res::Done));
        self.handle_step(c, si, outs);
    }

    pub(super) fn leave_returned(&mut self, c: usize, g: usize, id: u64) {
        if self.clients[c].groups[g].leaving == Some(id) {
            self.clients[c].groups[g].leaving = None;
            self.next_join(c, g);
        }
    }

    fn next_join(&mut self, c: usize, g: usize) {
        let at_once = self.rng.random_bool(self.sc.rejoin_at_once.clamp(0.0, 1.0));
        let d = if at_once { 0 } else { self.rng.random_range(self.lease / 10..self.lease * 2) };
        self.clients[c].groups[g].next_join = self.now + d;
    }

    /// The session ended (expired or closed): its memberships are no longer active
    /// (`MembershipShared::session_ended`), and its campaign no longer leads.
    pub(super) fn session_ended(&mut self, c: usize, si: usize) {
        for gw in &mut self.clients[c].groups {
            if let Some(h) = gw.handle.as_mut().filter(|h| h.si == si) {
                h.active = false;
            }
        }
        self.campaign_session_ended(c, si);
    }

    /// `Membership::is_member()` of client `c`'s handle for group `g` now: the member's session
    /// label when true.
    fn is_member(&self, c: usize, g: usize) -> Option<u32> {
        let h = self.clients[c].groups[g].handle?;
        if !h.active {
            return None;
        }
        let s = &self.clients[c].sessions[h.si];
        let alive = if self.sc.broken_rule == Some(BrokenRule::MemberIgnoresDeadline) {
            s.engine.state() == SessionState::Active
        } else {
            s.engine.is_alive(self.inst(c))
        };
        (alive && s.engine.is_joined(&self.groups[g])).then_some(s.label)
    }

    /// Records the changes of client `c`'s `is_member()` since the last sample.
    pub(super) fn sample_members(&mut self, c: usize) {
        for g in 0..self.groups.len() {
            let now = self.is_member(c, g);
            let prev = self.clients[c].groups[g].valid;
            if now == prev {
                continue;
            }
            let group = self.groups[g].clone();
            if let Some(sess) = prev {
                self.record(Event::MemberEnd { client: c as u8, sess, group: group.clone() });
            }
            if let Some(sess) = now {
                self.record(Event::MemberStart { client: c as u8, sess, group });
            }
            self.clients[c].groups[g].valid = now;
        }
    }

    /// When client `c` next needs a step for its `members` reads.
    pub(super) fn reads_wake(&self, c: usize) -> u64 {
        self.clients[c].groups.iter().filter(|gw| gw.reading.is_none()).map(|gw| gw.next_read).min().unwrap_or(u64::MAX)
    }

    /// When client `c` (current session `si`) next needs a step for its memberships.
    pub(super) fn groups_wake(&self, c: usize, si: usize) -> u64 {
        let mut next = u64::MAX;
        for gw in &self.clients[c].groups {
            match gw.handle {
                Some(h) if h.si != si => next = next.min(self.now),
                Some(_) => next = next.min(gw.hold_until),
                None if gw.joining.is_some() || gw.leaving.is_some() => {}
                // A join waiting for a leave: the leave's end steps the client, or the wait ends.
                None if gw.join_wait_until.is_some() && gw.leaves.iter().any(|(s, _)| *s == si) => {
                    next = next.min(gw.join_wait_until.unwrap_or(u64::MAX));
                }
                None => next = next.min(gw.next_join),
            }
        }
        next
    }

    fn group_index(&self, group: &Name) -> Option<usize> {
        self.groups.iter().position(|g| g == group)
    }

    pub(super) fn group_op_sent(&mut self, req: &Req) {
        if let Some(key) = self.group_op_key(req) {
            *self.group_ops.entry(key).or_insert(0) += 1;
        }
    }

    pub(super) fn group_op_arrived(&mut self, req: &Req) {
        if let Some(key) = self.group_op_key(req) {
            if let Some(n) = self.group_ops.get_mut(&key) {
                *n = n.saturating_sub(1);
            }
        }
    }

    fn group_op_key(&self, req: &Req) -> Option<(u32, usize)> {
        match req {
            Req::Mem { op: MemOp::Join(g) | MemOp::Leave(g), target: Some(t) } => Some((t.sess, self.group_index(g)?)),
            _ => None,
        }
    }

    pub(super) fn mem_join(&mut self, call: u64, b: u64, group: Name, target: Option<Target>) -> Res {
        let (Some(m), Some(t)) = (&self.mem, target) else { return Res::Failed };
        m.clock.set(b);
        match m.backend.join(&t.id, &group) {
            Ok(()) => {
                if self.calls.get(&call).is_none_or(|k| k.gave_up) {
                    self.stats.late_joins += 1;
                }
                self.record(Event::Joined { node: 0, b, sess: t.sess, group });
                Res::Done
            }
            Err(e) if e.is_session_expired() => {
                self.record(Event::Refused { node: 0, b, sess: t.sess });
                Res::Gone
            }
            Err(_) => Res::Failed,
        }
    }

    pub(super) fn mem_leave(&mut self, b: u64, group: Name, target: Option<Target>) -> Res {
        let (Some(m), Some(t)) = (&self.mem, target) else { return Res::Failed };
        m.clock.set(b);
        match m.backend.leave(&t.id, &group) {
            Ok(()) => {
                self.record(Event::Left { node: 0, b, sess: t.sess, group });
                Res::Done
            }
            Err(_) => Res::Failed,
        }
    }

    /// The backend evaluates client `c`'s `members(group)` read. Every client's `is_member()` is
    /// re-sampled at this instant first, so the checker compares the read with exactly the handles
    /// that claim membership now.
    pub(super) fn mem_members(&mut self, c: usize, b: u64, group: Name) -> Res {
        let Some(g) = self.group_index(&group) else { return Res::Failed };
        for oc in 0..self.clients.len() {
            self.sample_members(oc);
        }
        let Some(m) = &self.mem else { return Res::Failed };
        m.clock.set(b);
        let list = match m.backend.members(&group) {
            Ok(list) => list,
            Err(_) => return Res::Failed,
        };
        // The backend sorts by (random) session id: sort by label so a seed replays exactly.
        let mut members: Vec<u32> = list.iter().filter_map(|mb| m.labels.get(&mb.session).copied()).collect();
        members.sort_unstable();
        self.stats.members_reads += 1;
        for &sess in &members {
            if self.stray(sess, g) {
                self.stats.stray_members += 1;
            }
        }
        self.record(Event::MembersRead { node: 0, b, client: c as u8, group, members });
        Res::Done
    }

    /// A listed member nobody accounts for: its client's session is alive, holds no membership
    /// handle for the group, and no join or leave of it is in flight.
    fn stray(&self, sess: u32, g: usize) -> bool {
        let Some(&(oc, si)) = self.owners.get(&sess) else { return false };
        let cl = &self.clients[oc];
        let gw = &cl.groups[g];
        let handle = gw.handle.is_some_and(|h| h.si == si);
        let busy =
            gw.joining.is_some() || gw.leaving.is_some() || self.group_ops.get(&(sess, g)).is_some_and(|n| *n > 0);
        cl.sessions[si].engine.is_alive(self.inst(oc)) && !handle && !busy
    }
}
