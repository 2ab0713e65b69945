//! The application-side checks of the shipped-runtime simulation: leader tasks
//! (`Election::run_while_leader`, invariant `leader-task`) and member watches
//! (`Session::watch_members` and `Coordinator::watch_members`, invariants `watch-live` and
//! `watch-sees-join`), over the records the simulation's clients add ([`Event::LeaderTask`],
//! [`Event::Watch`]) and the backend's own.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::{Checker, Invariant};
use crate::sim::history::{Event, Record, TaskStep, WatchStep};
use crate::types::{Name, Token};

/// What the checker knows about the application's leader tasks and member watches.
#[derive(Debug, Default)]
pub(super) struct AppState {
    /// How long (real ns) a leader task's thread may take to end once it must.
    exit_within: u64,
    /// How long after a session's death (or leave) a change received may still list it.
    stale_within: u64,
    /// How long a watch may take to show a join.
    seen_within: u64,
    tasks: HashMap<u64, Task>,
    watches: BTreeMap<u64, Watch>,
    /// Per group: every `members` read the backend evaluated, in order (record index, real ns,
    /// members).
    reads: HashMap<Name, Vec<(usize, u64, Vec<u32>)>>,
    /// Per (group, session): when the backend applied its last leave (real ns).
    left_at: HashMap<(Name, u32), u64>,
    /// Per (group, session): a join that returned, its membership not ended since: (record index,
    /// real ns) of the return.
    returned: BTreeMap<(Name, u32), (usize, u64)>,
    /// Joins a watch has not shown yet: (watch, session) → what to report.
    pending: BTreeMap<(u64, u32), Pending>,
    /// Sessions whose end the application saw (`Expired`, `Closed`).
    ended_sessions: HashSet<u32>,
    /// The seed's outage (real ns).
    outage: Option<(u64, u64)>,
    /// The teardown began: bounded waits are no longer checked.
    torn_down: bool,
}

impl AppState {
    /// The bounds for a run whose lease duration is `lease_ns` (see `Invariant::LeaderTask`,
    /// `WatchLive`, `WatchSeesJoin`).
    pub(super) fn new(lease_ns: u64) -> AppState {
        AppState {
            exit_within: lease_ns.saturating_mul(EXIT_LEASES),
            stale_within: lease_ns.saturating_mul(STALE_LEASES),
            seen_within: lease_ns.saturating_mul(SEEN_LEASES),
            ..AppState::default()
        }
    }

    /// When a join returned (or a watch started) at `from` must have been seen: `seen_within`
    /// later, or `seen_within` after the outage when the window overlaps it.
    fn due(&self, from: u64) -> u64 {
        let bound = self.seen_within;
        let mut due = from.saturating_add(bound);
        if let Some((a, z)) = self.outage {
            if a < due && z > from {
                due = due.max(z.saturating_add(bound));
            }
        }
        due
    }
}

#[derive(Debug)]
struct Task {
    client: u8,
    name: Name,
    sess: u32,
    durable: bool,
    /// Since when the task must end, and why.
    must_end: Option<(u64, &'static str)>,
    /// The election ended (resign or drop returned, or its session ended).
    election_ended: Option<&'static str>,
    dropped: bool,
    stopped: bool,
    exited: bool,
}

#[derive(Debug)]
struct Watch {
    client: u8,
    group: Name,
    sess: Option<u32>,
    /// The members of the last change received.
    view: Option<Vec<u32>>,
    /// Position (in `reads`) of the first read the next change may come from: the first read after
    /// the watch started, then the one after the read of its last change.
    next_read: usize,
    stopped: bool,
}

#[derive(Debug)]
struct Pending {
    /// Record index of the join's return (or the watch's start).
    index: usize,
    from: u64,
    due: u64,
}

/// A leader task's thread ends within this many leases of the election's end or of its drop.
pub(super) const EXIT_LEASES: u64 = 5;
/// A change lists no session dead (or gone from the group) for more than this many leases.
pub(super) const STALE_LEASES: u64 = 5;
/// A watch shows a join within this many leases.
pub(super) const SEEN_LEASES: u64 = 4;

fn ms(ns: u64) -> u64 {
    ns / 1_000_000
}

fn minus(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter().filter(|x| !b.contains(x)).copied().collect()
}

impl Checker {
    /// Observes `r` for the application-side invariants (before the backend-side checks see it).
    pub(super) fn app_observe(&mut self, i: usize, r: &Record) {
        let t = r.t;
        if !self.app.torn_down {
            self.app_due(i, t);
        }
        match &r.event {
            Event::Outage { from, until } => self.app.outage = Some((*from, *until)),
            Event::Teardown => self.app.torn_down = true,
            Event::MembersRead { group, members, .. } => {
                self.app.reads.entry(group.clone()).or_default().push((i, t, members.clone()));
            }
            Event::MembersReplyLate { group, members } => {
                // A read that listed the member reached its watcher too late to be used (a
                // stalled or late reply, past the query timeout): the watch's chance to show the
                // join starts again.
                let due = self.app.due(t);
                let watches = &self.app.watches;
                for ((w, s), p) in self.app.pending.iter_mut() {
                    if members.contains(s) && watches.get(w).is_some_and(|x| &x.group == group) {
                        p.due = p.due.max(due);
                    }
                }
            }
            Event::MembersReadFailed { group } => {
                // The watcher got an error instead of a read (an injected fault): every join it
                // has not shown yet gets its chance again. A watcher that stops reading after an
                // error still runs out of time, as no read restarts it again.
                let due = self.app.due(t);
                let watches = &self.app.watches;
                for ((w, _), p) in self.app.pending.iter_mut() {
                    if watches.get(w).is_some_and(|x| &x.group == group) {
                        p.due = p.due.max(due);
                    }
                }
            }
            Event::Left { sess, group, .. } => {
                self.app.left_at.insert((group.clone(), *sess), t);
                self.membership_ended(group, *sess);
            }
            Event::Leaving { sess, group, .. } => self.membership_ended(group, *sess),
            Event::JoinReturned { sess, group, .. } => {
                if self.joined.get(&(group.clone(), *sess)) != Some(&true) {
                    return;
                }
                self.app.returned.insert((group.clone(), *sess), (i, t));
                let due = self.app.due(t);
                let watching: Vec<u64> = self
                    .app
                    .watches
                    .iter()
                    .filter(|(_, w)| {
                        !w.stopped && &w.group == group && !w.view.as_ref().is_some_and(|v| v.contains(sess))
                    })
                    .map(|(id, _)| *id)
                    .collect();
                for w in watching {
                    self.app.pending.insert((w, *sess), Pending { index: i, from: t, due });
                }
            }
            Event::Expired { sess, .. } | Event::Closed { sess, .. } => self.session_ended(*sess, t),
            Event::LeaderTask { client, task, name, what } => self.task_step(i, t, *client, *task, name, what),
            Event::Watch { client, watch, group, what } => self.watch_step(i, t, *client, *watch, group, what),
            _ => {}
        }
    }

    /// The end of the history: the bounded waits due by its last record.
    pub(super) fn app_finish(&mut self, i: usize, t: u64) {
        if !self.app.torn_down {
            self.app_due(i, t);
        }
    }

    fn membership_ended(&mut self, group: &Name, sess: u32) {
        self.app.returned.remove(&(group.clone(), sess));
        let watches = &self.app.watches;
        self.app.pending.retain(|(w, s), _| !(*s == sess && watches.get(w).is_some_and(|w| &w.group == group)));
    }

    fn session_ended(&mut self, sess: u32, t: u64) {
        self.app.ended_sessions.insert(sess);
        for task in self.app.tasks.values_mut() {
            if task.sess == sess && !task.durable && task.election_ended.is_none() {
                task.election_ended = Some("its session ended");
                task.must_end.get_or_insert((t, "its session ended"));
            }
        }
        let mut stopped = Vec::new();
        for (id, w) in self.app.watches.iter_mut() {
            if w.sess == Some(sess) && !w.stopped {
                w.stopped = true;
                stopped.push(*id);
            }
        }
        self.app.returned.retain(|(_, s), _| *s != sess);
        self.app.pending.retain(|(w, s), _| *s != sess && !stopped.contains(w));
    }

    /// Reports the bounded waits that ran out by `t`: tasks that did not end, joins not seen.
    fn app_due(&mut self, i: usize, t: u64) {
        let within = self.app.exit_within;
        let mut fails = Vec::new();
        for (id, task) in self.app.tasks.iter_mut() {
            if let Some((t0, why)) = task.must_end {
                if !task.exited && t > t0.saturating_add(within) {
                    fails.push((
                        Invariant::LeaderTask,
                        format!(
                            "leader task {id} of client {} ('{}'): its thread did not end within {} ms of {why} \
                             ({} ms ago)",
                            task.client,
                            task.name,
                            ms(within),
                            ms(t - t0)
                        ),
                    ));
                    // Reported once.
                    task.must_end = None;
                }
            }
        }
        let overdue: Vec<(u64, u32)> = self.app.pending.iter().filter(|(_, p)| p.due < t).map(|(k, _)| *k).collect();
        for (w, s) in overdue {
            let Some(p) = self.app.pending.remove(&(w, s)) else { continue };
            let Some(watch) = self.app.watches.get(&w) else { continue };
            // The member's or the watcher's session died by the due time: the wait is void.
            let died = |sess: u32| self.sessions.get(&sess).is_some_and(|x| x.dead.is_some() && x.dead_at <= p.due);
            if died(s) || watch.sess.is_some_and(died) {
                continue;
            }
            fails.push((
                Invariant::WatchSeesJoin,
                format!(
                    "watch {w} of client {} ('{}', on {}) did not show s{s}, whose join returned (or was there when \
                     the watch started: record #{}), within {} ms (by {} ms; its last change listed {:?})",
                    watch.client,
                    watch.group,
                    watch.sess.map_or("a coordinator".to_string(), |x| format!("s{x}")),
                    p.index,
                    ms(p.due - p.from),
                    ms(p.due),
                    watch.view
                ),
            ));
        }
        for (inv, msg) in fails {
            self.fail(inv, i, t, msg);
        }
    }

    fn task_step(&mut self, i: usize, t: u64, client: u8, id: u64, name: &Name, what: &TaskStep) {
        let mut fails = Vec::new();
        match what {
            TaskStep::Started { sess, durable } => {
                let mut task = Task {
                    client,
                    name: name.clone(),
                    sess: *sess,
                    durable: *durable,
                    must_end: None,
                    election_ended: None,
                    dropped: false,
                    stopped: false,
                    exited: false,
                };
                if !durable && self.app.ended_sessions.contains(sess) {
                    task.election_ended = Some("its session ended");
                    task.must_end = Some((t, "its session ended"));
                }
                self.app.tasks.insert(id, task);
            }
            TaskStep::Work { sess, granted, cancelled, token, registered } => {
                let Some(task) = self.app.tasks.get(&id) else { return };
                let what = format!("leader task {id} of client {client} ('{name}', s{sess})");
                if task.stopped {
                    fails.push(format!("{what}: its closure ran after stop() returned"));
                }
                if let Some(tk) = token {
                    fails.extend(self.work_ok(
                        &what,
                        task,
                        client,
                        *sess,
                        name,
                        *granted,
                        *cancelled,
                        *tk,
                        *registered,
                    ));
                }
            }
            TaskStep::ElectionEnded => {
                if let Some(task) = self.app.tasks.get_mut(&id) {
                    task.election_ended.get_or_insert("resign()/drop of the election returned");
                    task.must_end.get_or_insert((t, "the election's resign()/drop returning"));
                }
            }
            TaskStep::Dropped => {
                if let Some(task) = self.app.tasks.get_mut(&id) {
                    task.dropped = true;
                    task.must_end.get_or_insert((t, "the task's drop"));
                }
            }
            TaskStep::Stopped => {
                if let Some(task) = self.app.tasks.get_mut(&id) {
                    task.stopped = true;
                    if !task.exited {
                        fails.push(format!(
                            "leader task {id} of client {client} ('{name}'): stop() returned before its thread ended"
                        ));
                    }
                    task.exited = true;
                }
            }
            TaskStep::Exited => {
                if let Some(task) = self.app.tasks.get_mut(&id) {
                    task.exited = true;
                }
            }
        }
        for msg in fails {
            self.fail(Invariant::LeaderTask, i, t, msg);
        }
    }

    /// The checks of one closure call that found `LeaderContext::token()` Ok with `tk`.
    #[allow(clippy::too_many_arguments)]
    fn work_ok(
        &self,
        what: &str,
        task: &Task,
        client: u8,
        sess: u32,
        name: &Name,
        granted: Token,
        cancelled: bool,
        tk: Token,
        registered: bool,
    ) -> Vec<String> {
        let mut fails = Vec::new();
        if tk != granted {
            fails.push(format!("{what}: LeaderContext::token() returned {tk}, not the term's granted token {granted}"));
        }
        if cancelled {
            fails.push(format!("{what}: token() Ok ({tk}) right after is_cancelled() answered true"));
        }
        if let Some(why) = task.election_ended {
            fails.push(format!("{what}: token() Ok ({tk}) after the election ended: {why}"));
        }
        if task.dropped {
            fails.push(format!("{what}: token() Ok ({tk}) after the task was dropped"));
        }
        let valid = self.valid.get(name);
        if registered && !valid.is_some_and(|v| v.contains(&(client, sess, tk.get()))) {
            fails.push(format!(
                "{what}: token() Ok ({tk}) while the election's own token() did not answer it in the same sample"
            ));
        }
        for (c, s, other) in valid.into_iter().flatten() {
            if (*c, *s) != (client, sess) {
                fails.push(format!(
                    "{what}: token() Ok ({tk}) while token()/is_leader() of '{name}' is Ok for client {c} s{s} \
                     (token {other})"
                ));
            }
        }
        let live = self
            .terms
            .get(name)
            .filter(|p| p.sess == sess && p.token == tk.get() && !p.ended && !p.ran_out && self.dead(sess).is_none());
        if live.is_none() {
            let cur = self.terms.get(name).map_or("none".to_string(), |p| {
                format!(
                    "s{} token {}{}{}",
                    p.sess,
                    p.token,
                    if p.ended { ", ended" } else { "" },
                    if p.ran_out { ", run out" } else { "" }
                )
            });
            let dead = self.dead(sess).map_or(String::new(), |why| format!("; s{sess} died: {why}"));
            fails.push(format!("{what}: token() Ok ({tk}) but the backend's term of '{name}' is {cur}{dead}"));
        }
        fails
    }

    fn watch_step(&mut self, i: usize, t: u64, client: u8, id: u64, group: &Name, what: &WatchStep) {
        match what {
            WatchStep::Started { sess } => {
                let stopped = sess.is_some_and(|s| self.app.ended_sessions.contains(&s));
                let next_read = self.app.reads.get(group).map_or(0, Vec::len);
                let w = Watch { client, group: group.clone(), sess: *sess, view: None, next_read, stopped };
                self.app.watches.insert(id, w);
                if stopped {
                    return;
                }
                let due = self.app.due(t);
                let members: Vec<u32> = self.app.returned.keys().filter(|(g, _)| g == group).map(|(_, s)| *s).collect();
                for s in members {
                    self.app.pending.insert((id, s), Pending { index: i, from: t, due });
                }
            }
            WatchStep::Change { members, joined, left } => self.watch_change(i, t, id, group, members, joined, left),
            WatchStep::Disconnected | WatchStep::Dropped => {
                let mut broken = None;
                if let Some(w) = self.app.watches.get_mut(&id) {
                    // A coordinator's watch outlives session replacements (its rustdoc): nothing
                    // but its drop ends it while the coordinator runs (its watcher thread ends
                    // before the coordinator closes).
                    if w.sess.is_none() && *what == WatchStep::Disconnected && !w.stopped {
                        broken = Some(format!(
                            "watch {id} of client {client} ('{group}'), a coordinator's, reported its watcher \
                             stopped while the coordinator ran (last change {:?})",
                            w.view
                        ));
                    }
                    w.stopped = true;
                }
                if let Some(msg) = broken {
                    self.fail(Invariant::WatchLive, i, t, msg);
                }
                self.app.pending.retain(|(w, _), _| *w != id);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn watch_change(&mut self, i: usize, t: u64, id: u64, group: &Name, members: &[u32], joined: &[u32], left: &[u32]) {
        let Some(w) = self.app.watches.get(&id) else { return };
        let what = format!(
            "watch {id} of client {} ('{group}') received {members:?} (joined {joined:?}, left {left:?})",
            w.client
        );
        let mut fails = Vec::new();
        let prev = w.view.clone().unwrap_or_default();
        if w.view.as_deref() == Some(members) {
            fails.push(format!("{what}: the same members as its previous change (not a change)"));
        }
        if minus(members, &prev) != joined || minus(&prev, members) != left {
            fails.push(format!("{what}: joined/left are not the difference from the previous change {prev:?}"));
        }
        let start = w.next_read;
        let reads = self.app.reads.get(group).map(Vec::as_slice).unwrap_or(&[]);
        let found = reads.iter().enumerate().skip(start).find(|(_, (_, _, m))| m == members).map(|(p, _)| p);
        if found.is_none() {
            let after = w
                .next_read
                .checked_sub(1)
                .and_then(|p| reads.get(p))
                .map_or("the watch's start".to_string(), |(ri, _, _)| format!("read #{ri}"));
            fails.push(format!(
                "{what}: no members read of the group the backend evaluated after {after} listed exactly that"
            ));
        }
        let within = self.app.stale_within;
        for s in members {
            if let Some(x) = self.sessions.get(s).filter(|x| x.dead.is_some()) {
                if t.saturating_sub(x.dead_at) > within {
                    let why = x.dead.as_deref().unwrap_or("");
                    fails.push(format!(
                        "{what}: lists s{s} {} ms after the history showed it dead ({why}), beyond the {} ms bound",
                        ms(t - x.dead_at),
                        ms(within)
                    ));
                }
            }
            if self.joined.get(&(group.clone(), *s)) == Some(&false) {
                if let Some(at) = self.app.left_at.get(&(group.clone(), *s)) {
                    if t.saturating_sub(*at) > within {
                        fails.push(format!(
                            "{what}: lists s{s} {} ms after the backend applied its leave, beyond the {} ms bound",
                            ms(t - at),
                            ms(within)
                        ));
                    }
                }
            }
        }
        if let Some(w) = self.app.watches.get_mut(&id) {
            if let Some(p) = found {
                w.next_read = p + 1;
            }
            w.view = Some(members.to_vec());
        }
        self.app.pending.retain(|(pw, s), _| !(*pw == id && members.contains(s)));
        for msg in fails {
            self.fail(Invariant::WatchLive, i, t, msg);
        }
    }
}
