//! The engine's membership book: which groups the session holds, which join/leave calls are in
//! flight, and what a keep-alive's group report means for them.
//!
//! A join or leave call can land on the backend after it ended on the client (a timed-out call the
//! server still executes, a failover that loses an acknowledged join): the backend's membership can
//! then differ from what the session holds. The keep-alive reports the session's groups
//! ([`KeepAlive::Alive::groups`](crate::backend::KeepAlive)); judged by its send instant, like
//! leases:
//!
//! - a group the session joined (the join returned before the keep-alive was sent) that is missing
//!   is **lost**: reported, and re-joined at once (and at every later keep-alive until it is back);
//! - a group the session does not hold, with no call of it in flight and none ended after the
//!   keep-alive was sent, that is listed is a **stray** (a join that landed late): it is left again.

use std::collections::HashMap;
use std::time::Instant;

use super::step::{Command, Step};
use super::timing::judged_by;
use super::Engine;
use crate::state::{SessionEvent, SessionState};
use crate::types::Name;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    /// Not held (never joined, left, or a join that failed).
    No,
    /// Held: the join returned at `established`; keep-alives sent after it judge the membership.
    Joined { established: Instant },
    /// Held by the application but missing on the backend: being re-joined.
    Lost,
}

#[derive(Debug, Clone)]
struct Entry {
    held: Held,
    joins: u32,
    leaves: u32,
    /// When the last join or leave call of the group ended.
    last_end: Option<Instant>,
}

impl Entry {
    fn idle_since(&self, sent: Instant) -> bool {
        self.joins == 0 && self.leaves == 0 && self.last_end.is_none_or(|t| t <= sent)
    }
}

/// Per-group state of one session (see the module docs).
#[derive(Debug, Clone, Default)]
pub(super) struct Groups {
    entries: HashMap<Name, Entry>,
}

impl Groups {
    fn entry(&mut self, group: &Name) -> &mut Entry {
        self.entries.entry(group.clone()).or_insert(Entry { held: Held::No, joins: 0, leaves: 0, last_end: None })
    }

    pub(super) fn begin_join(&mut self, group: &Name) {
        self.entry(group).joins += 1;
    }

    /// A join call of `group` returned (whatever its outcome, even to nobody).
    pub(super) fn end_join(&mut self, group: &Name, now: Instant) {
        let e = self.entry(group);
        e.joins = e.joins.saturating_sub(1);
        e.last_end = Some(now);
    }

    /// The session holds `group` as of `now` (a join returned success to its caller).
    pub(super) fn joined(&mut self, group: &Name, now: Instant) -> Step {
        let e = self.entry(group);
        let mut step = Step::none();
        if e.held == Held::Lost {
            step.event(SessionEvent::MembershipRestored { group: group.clone() });
        }
        e.held = Held::Joined { established: now };
        step
    }

    pub(super) fn end_rejoin(&mut self, group: &Name, now: Instant, ok: bool) -> Step {
        self.end_join(group, now);
        if ok && self.entries.get(group).is_some_and(|e| e.held == Held::Lost) {
            self.joined(group, now)
        } else {
            Step::none()
        }
    }

    pub(super) fn join_abandoned(&mut self, group: &Name, now: Instant) {
        let e = self.entry(group);
        e.held = Held::No;
        e.last_end = Some(e.last_end.map_or(now, |t| t.max(now)));
    }

    /// The application leaves `group` (held or not): it is no longer held.
    pub(super) fn begin_leave(&mut self, group: &Name) {
        let e = self.entry(group);
        e.held = Held::No;
        e.leaves += 1;
    }

    pub(super) fn end_leave(&mut self, group: &Name, now: Instant) {
        let e = self.entry(group);
        e.leaves = e.leaves.saturating_sub(1);
        e.last_end = Some(now);
    }

    pub(super) fn leaving(&self, group: &Name) -> bool {
        self.entries.get(group).is_some_and(|e| e.leaves > 0)
    }

    pub(super) fn is_joined(&self, group: &Name) -> bool {
        self.entries.get(group).is_some_and(|e| matches!(e.held, Held::Joined { .. }))
    }

    /// The groups the application holds (joined, or lost and being re-joined).
    pub(super) fn held(&self) -> impl Iterator<Item = &Name> {
        self.entries.iter().filter(|(_, e)| !matches!(e.held, Held::No)).map(|(n, _)| n)
    }

    /// Judges a keep-alive sent at `sent` that reported `reported` (sorted or not).
    pub(super) fn on_report(&mut self, sent: Instant, now: Instant, reported: &[Name]) -> Step {
        let mut step = Step::none();
        for g in reported {
            if !self.entries.contains_key(g) {
                // Never seen by this session: a join of an earlier incarnation cannot exist, so
                // it is a join that landed after its call was forgotten. Leave it.
                self.entry(g);
            }
        }
        let mut names: Vec<Name> = self.entries.keys().cloned().collect();
        names.sort();
        let mut prune = Vec::new();
        for g in names {
            let listed = reported.contains(&g);
            let Some(e) = self.entries.get_mut(&g) else { continue };
            match e.held {
                // Judged only when joined strictly before the send ([`judged_by`], as terms are).
                Held::Joined { established } if judged_by(established, sent) && e.joins == 0 && !listed => {
                    e.held = Held::Lost;
                    step.event(SessionEvent::MembershipLost { group: g.clone() });
                    e.joins += 1;
                    step.command(Command::Rejoin { group: g });
                }
                Held::Lost if e.joins == 0 && e.idle_since(sent) && listed => {
                    e.held = Held::Joined { established: now };
                    step.event(SessionEvent::MembershipRestored { group: g });
                }
                Held::Lost if e.joins == 0 => {
                    e.joins += 1;
                    step.command(Command::Rejoin { group: g });
                }
                Held::No if e.idle_since(sent) => {
                    if listed {
                        e.leaves += 1;
                        step.command(Command::LeaveStray { group: g });
                    } else {
                        prune.push(g);
                    }
                }
                _ => {}
            }
        }
        for g in prune {
            self.entries.remove(&g);
        }
        step
    }

    /// Number of groups tracked (held, in flight, or recently ended): bounded by the groups in use.
    #[cfg(test)]
    pub(super) fn tracked(&self) -> usize {
        self.entries.len()
    }
}

/// The membership transitions of the session (delegated to its [`Groups`]).
impl Engine {
    /// Records that a join of `group` is being sent (by the application or a re-join).
    pub fn begin_join(&mut self, group: &Name) {
        self.groups.begin_join(group);
    }

    /// Records that a join call of `group` returned at `now`, whatever its outcome and even when
    /// its caller no longer waited (a late success is then a stray, left by a later keep-alive).
    pub fn end_join(&mut self, group: &Name, now: Instant) {
        self.groups.end_join(group, now);
    }

    /// Records that the session holds `group` as of `now` (a join returned success to its caller);
    /// keep-alives sent after `now` judge it. Reports a restored membership after a loss.
    pub fn joined(&mut self, group: &Name, now: Instant) -> Step {
        self.groups.joined(group, now)
    }

    /// Records that a [`Rejoin`](Command::Rejoin) of `group` returned at `now` (`ok`: success). The
    /// membership is back unless the application left meanwhile; after a failure the next
    /// keep-alive tries again.
    pub fn end_rejoin(&mut self, group: &Name, now: Instant, ok: bool) -> Step {
        self.groups.end_rejoin(group, now, ok)
    }

    /// Records that the caller of a join of `group` gave up at `now` (error or timeout): the group is not
    /// held (a success that lands anyway is a stray, left by a later keep-alive).
    pub fn join_abandoned(&mut self, group: &Name, now: Instant) {
        self.groups.join_abandoned(group, now);
    }

    /// A membership of `group` is left (or dropped): the group is no longer held, and the leave
    /// is counted in flight. Returns whether to send it: once the session is closed or expired
    /// nothing is sent or counted, since the session's close leaves every group.
    pub fn begin_leave(&mut self, group: &Name) -> bool {
        if self.state != SessionState::Active {
            return false;
        }
        self.groups.begin_leave(group);
        true
    }

    /// Records that a leave of `group` ended at `now` (whatever its outcome).
    pub fn end_leave(&mut self, group: &Name, now: Instant) {
        self.groups.end_leave(group, now);
    }

    /// True while a leave of `group` is in flight: a join must wait for it (it could land after
    /// the join and undo it).
    pub fn leaving(&self, group: &Name) -> bool {
        self.groups.leaving(group)
    }

    /// True while `group` is held and not known to be lost.
    pub fn is_joined(&self, group: &Name) -> bool {
        self.groups.is_joined(group)
    }

    /// The groups the application holds: joined, or lost on the backend and being re-joined.
    pub fn memberships(&self) -> impl Iterator<Item = &Name> {
        self.groups.held()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn n(s: &str) -> Name {
        Name::new(s).unwrap()
    }
    fn ms(v: u64) -> Duration {
        Duration::from_millis(v)
    }
    fn events(events: Vec<SessionEvent>) -> Step {
        Step { events, commands: Vec::new() }
    }
    fn commands(commands: Vec<Command>) -> Step {
        Step { events: Vec::new(), commands }
    }

    fn joined_at(g: &mut Groups, name: &Name, t: Instant) {
        g.begin_join(name);
        g.end_join(name, t);
        assert!(g.joined(name, t).is_empty());
    }

    #[test]
    fn a_missing_membership_is_lost_then_rejoined_and_restored() {
        let t0 = Instant::now();
        let mut g = Groups::default();
        let a = n("a");
        joined_at(&mut g, &a, t0);
        // A keep-alive sent before the join returned cannot judge it.
        assert!(g.on_report(t0 - ms(1), t0 + ms(5), &[]).is_empty());
        assert!(g.is_joined(&a));
        let out = g.on_report(t0 + ms(10), t0 + ms(20), &[]);
        assert_eq!(
            out,
            Step {
                events: vec![SessionEvent::MembershipLost { group: a.clone() }],
                commands: vec![Command::Rejoin { group: a.clone() }]
            }
        );
        assert!(!g.is_joined(&a));
        // While the re-join is in flight, reports neither repeat the loss nor restore it.
        assert!(g.on_report(t0 + ms(30), t0 + ms(40), &[]).is_empty());
        // A failed re-join is retried at the next report.
        assert!(g.end_rejoin(&a, t0 + ms(50), false).is_empty());
        assert_eq!(g.on_report(t0 + ms(60), t0 + ms(70), &[]), commands(vec![Command::Rejoin { group: a.clone() }]));
        assert_eq!(
            g.end_rejoin(&a, t0 + ms(80), true),
            events(vec![SessionEvent::MembershipRestored { group: a.clone() }])
        );
        assert!(g.is_joined(&a));
        assert!(g.on_report(t0 + ms(90), t0 + ms(95), std::slice::from_ref(&a)).is_empty());
    }

    #[test]
    fn a_lost_membership_listed_again_is_restored_without_a_join() {
        let t0 = Instant::now();
        let mut g = Groups::default();
        let a = n("a");
        joined_at(&mut g, &a, t0);
        let _ = g.on_report(t0 + ms(10), t0 + ms(20), &[]);
        assert!(g.end_rejoin(&a, t0 + ms(30), false).is_empty());
        let out = g.on_report(t0 + ms(40), t0 + ms(50), std::slice::from_ref(&a));
        assert_eq!(out, events(vec![SessionEvent::MembershipRestored { group: a.clone() }]));
        assert!(g.is_joined(&a));
    }

    #[test]
    fn a_listed_group_not_held_is_left_once_no_call_of_it_is_in_flight() {
        let t0 = Instant::now();
        let mut g = Groups::default();
        let (a, b) = (n("a"), n("b"));
        // A join whose caller gave up, that landed anyway.
        g.begin_join(&a);
        g.join_abandoned(&a, t0 + ms(10));
        // Still in flight: not judged.
        assert!(g.on_report(t0 + ms(20), t0 + ms(30), std::slice::from_ref(&a)).is_empty());
        g.end_join(&a, t0 + ms(40));
        // A keep-alive sent before the call ended: not judged either.
        assert!(g.on_report(t0 + ms(35), t0 + ms(45), std::slice::from_ref(&a)).is_empty());
        assert_eq!(
            g.on_report(t0 + ms(50), t0 + ms(60), std::slice::from_ref(&a)),
            commands(vec![Command::LeaveStray { group: a.clone() }])
        );
        assert!(g.leaving(&a));
        // A group never seen by this session is a stray too.
        assert_eq!(
            g.on_report(t0 + ms(70), t0 + ms(80), std::slice::from_ref(&b)),
            commands(vec![Command::LeaveStray { group: b.clone() }])
        );
        g.end_leave(&a, t0 + ms(90));
        g.end_leave(&b, t0 + ms(90));
        // Confirmed gone: forgotten (bounded memory).
        assert!(g.on_report(t0 + ms(100), t0 + ms(110), &[]).is_empty());
        assert_eq!(g.tracked(), 0);
    }

    #[test]
    fn a_left_group_is_neither_lost_nor_rejoined() {
        let t0 = Instant::now();
        let mut g = Groups::default();
        let a = n("a");
        joined_at(&mut g, &a, t0);
        g.begin_leave(&a);
        assert!(g.leaving(&a));
        assert!(g.on_report(t0 + ms(10), t0 + ms(20), &[]).is_empty());
        g.end_leave(&a, t0 + ms(30));
        assert!(!g.leaving(&a));
        // A re-join that returns after the application left does not make it held.
        g.begin_join(&a);
        assert!(g.end_rejoin(&a, t0 + ms(40), true).is_empty());
        assert!(!g.is_joined(&a));
    }
}
