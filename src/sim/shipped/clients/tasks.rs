//! Leader tasks (`Election::run_while_leader`) and member watches (`Session::watch_members`) of
//! the application: the closure's probe that records every look under the history lock, starting
//! and stopping tasks, and the watcher thread.

use std::sync::Arc;
use std::time::Duration;

use super::super::backend::{below, sleep_virtual, unit, History};
use super::{sample, Client};
use crate::election::{Election, LeaderContext, LeaderTask, Schedule};
use crate::group::{GroupChange, MemberWatch, Membership};
use crate::session::Session;
use crate::sim::history::{Event, TaskStep, WatchStep};
use crate::types::Name;

/// The share of campaigns that run a leader task.
pub(super) const TASK_P: f64 = 0.3;

/// A leader task's closure state: what it records, and (dropped with the closure when the task's
/// thread ends) its `Exited` record.
struct TaskProbe {
    hist: Arc<History>,
    client: u8,
    task: u64,
    /// The election's slot in the sampler.
    slot: u64,
    name: Name,
    /// The election's session as last seen (reported when the slot is no longer sampled).
    sess: u32,
    lease: Duration,
    once: bool,
    unchecked: bool,
}

impl TaskProbe {
    /// One call of the closure: records, and works a while (sometimes ignoring cancellation, as
    /// a closure that does not check it would).
    fn work(&mut self, ctx: &LeaderContext) {
        self.record(ctx);
        // At most one stretch per call ignores cancellation (up to half a lease).
        let mut stubborn = unit() < 0.25;
        if self.once {
            // Once per term: work until the term is over, then look once more.
            loop {
                if stubborn && unit() < 0.5 {
                    stubborn = false;
                    sleep_virtual(below(self.lease / 2));
                } else if !ctx.sleep(below(self.lease / 4)) {
                    break;
                }
                self.record(ctx);
            }
            self.record(ctx);
        } else if stubborn {
            sleep_virtual(below(self.lease / 2));
            self.record(ctx);
        }
    }

    fn record(&mut self, ctx: &LeaderContext) {
        let mut h = self.hist.lock();
        sample(&self.hist, &mut h);
        let cancelled = ctx.is_cancelled();
        let token = if self.unchecked { Some(ctx.granted_token()) } else { ctx.token().ok() };
        let (client, registered) = match h.handles.elections.iter().find(|s| s.id == self.slot) {
            Some(slot) => {
                self.sess = slot.sess;
                (slot.client, true)
            }
            None => (self.client, false),
        };
        if token.is_some() {
            h.counts.leader_work += 1;
        } else {
            h.counts.leader_work_refused += 1;
        }
        let what = TaskStep::Work { sess: self.sess, granted: ctx.granted_token(), cancelled, token, registered };
        let e = Event::LeaderTask { client, task: self.task, name: self.name.clone(), what };
        self.hist.push(&mut h, e);
    }
}

impl Drop for TaskProbe {
    fn drop(&mut self) {
        let mut h = self.hist.lock();
        let e =
            Event::LeaderTask { client: self.client, task: self.task, name: self.name.clone(), what: TaskStep::Exited };
        self.hist.push(&mut h, e);
    }
}

/// A running leader task of the application.
pub(super) struct Task {
    id: u64,
    name: Name,
    task: LeaderTask,
}

impl Client {
    /// Starts a leader task on the election registered as `slot` (`durable`: a coordinator's).
    pub(super) fn start_task(&self, slot: u64, e: &Election, sess: u32, durable: bool) -> Task {
        let name = e.name().clone();
        let id = {
            let mut h = self.hist.lock();
            h.handles.next += 1;
            h.handles.next
        };
        let lease = self.lease();
        let once = unit() < 0.5;
        let schedule = if once { Schedule::OncePerTerm } else { Schedule::Every(lease / 8 + below(lease / 4)) };
        let mut probe = TaskProbe {
            hist: self.hist.clone(),
            client: self.c,
            task: id,
            slot,
            name: name.clone(),
            sess,
            lease,
            once,
            unchecked: self.unchecked_leader_token,
        };
        {
            // Before the task's thread starts: it may end at once (the session ended meanwhile).
            let mut h = self.hist.lock();
            let what = TaskStep::Started { sess, durable };
            self.hist.push(&mut h, Event::LeaderTask { client: self.c, task: id, name: name.clone(), what });
        }
        let task = e.run_while_leader(schedule, move |ctx| probe.work(ctx));
        Task { id, name, task }
    }

    /// Records that the task's election ended (its resign or drop returned).
    pub(super) fn end_task_election(&self, task: &Option<Task>) {
        if let Some(t) = task {
            let mut h = self.hist.lock();
            let e =
                Event::LeaderTask { client: self.c, task: t.id, name: t.name.clone(), what: TaskStep::ElectionEnded };
            self.hist.push(&mut h, e);
        }
    }

    /// Stops a leader task: `stop()` (waits for its thread) or drop.
    pub(super) fn stop_task(&self, task: Option<Task>, wait: bool) {
        let Some(Task { id, name, task }) = task else { return };
        let what = if wait {
            task.stop();
            self.hist.lock().counts.tasks_stopped += 1;
            TaskStep::Stopped
        } else {
            drop(task);
            TaskStep::Dropped
        };
        let mut h = self.hist.lock();
        self.hist.push(&mut h, Event::LeaderTask { client: self.c, task: id, name, what });
    }

    /// A node's watcher thread: watches the group on the node's current session
    /// (`Session::watch_members`) for 1–6 leases at a time, recording every change it receives,
    /// sometimes until the watcher stops with its session; half the watches also join the group
    /// on that session and watch for 5–7 leases.
    pub(crate) fn run_watcher(&self) {
        let lease = self.lease();
        for _ in 0..self.ops.div_ceil(2) {
            let cur = self.shared.lock().clone();
            let Some((s, sess)) = cur else {
                sleep_virtual(below(lease / 2));
                continue;
            };
            // Recorded first: the watcher thread reads as soon as it starts.
            let id = {
                let mut h = self.hist.lock();
                h.handles.next += 1;
                let id = h.handles.next;
                let what = WatchStep::Started { sess: Some(sess) };
                self.hist.push(&mut h, Event::Watch { client: self.c, watch: id, group: self.group.clone(), what });
                id
            };
            let w = s.watch_members(&self.group);
            // Half the watches watch the thread's own join too (on the node's session, as a second
            // handle would: `AlreadyHeld` while the node's first thread is a member).
            let me = Client { c: self.c + 128, ..self.clone_parts() };
            let own = if w.is_ok() && unit() < 0.5 { me.join_returned(&s, sess) } else { None };
            drop(s);
            let Ok(w) = w else {
                let mut h = self.hist.lock();
                let what = WatchStep::Dropped;
                self.hist.push(&mut h, Event::Watch { client: self.c, watch: id, group: self.group.clone(), what });
                continue;
            };
            // A watch of its own join lasts past `watch-sees-join`'s bound (if the session does).
            let keep = if own.is_some() { lease * 5 + below(lease * 2) } else { lease + below(lease * 5) };
            let until = crate::sync::now() + keep;
            let mut first = true;
            let mut stopped = false;
            while crate::sync::now() < until {
                match w.recv_timeout(lease / 4) {
                    Ok(change) => {
                        self.record_change(id, &w, change, &mut first);
                    }
                    Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                    Err(crossbeam_channel::RecvTimeoutError::Disconnected) => {
                        stopped = true;
                        break;
                    }
                }
            }
            if let Some((mid, m)) = own {
                me.end_membership(sess, mid, m);
            }
            drop(w);
            let what = if stopped { WatchStep::Disconnected } else { WatchStep::Dropped };
            let mut h = self.hist.lock();
            self.hist.push(&mut h, Event::Watch { client: self.c, watch: id, group: self.group.clone(), what });
            drop(h);
            sleep_virtual(below(lease / 2));
        }
    }

    /// Joins the group on `s`, records the return and registers the membership.
    pub(super) fn join_returned(&self, s: &Session, sess: u32) -> Option<(u64, Arc<Membership>)> {
        let m = s.join(&self.group).ok()?;
        {
            let mut h = self.hist.lock();
            self.hist.push(&mut h, Event::JoinReturned { client: self.c, sess, group: self.group.clone() });
        }
        Some(self.register(sess, |h| &mut h.members, m))
    }

    /// Records `change` and every change queued behind it (under the history lock).
    pub(super) fn record_change(&self, id: u64, w: &MemberWatch, change: GroupChange, first: &mut bool) {
        let mut h = self.hist.lock();
        let mut next = Some(change);
        while let Some(c) = next.take() {
            let labels = |ms: &[crate::backend::Member]| {
                let mut v: Vec<u32> =
                    ms.iter().map(|m| h.labels.get(&m.session).copied().unwrap_or(u32::MAX)).collect();
                v.sort_unstable();
                v
            };
            let (members, joined, left) = (labels(&c.members), labels(&c.joined), labels(&c.left));
            h.counts.watch_changes += 1;
            if !*first && !joined.is_empty() {
                h.counts.watch_joins += 1;
            }
            *first = false;
            let what = WatchStep::Change { members, joined, left };
            self.hist.push(&mut h, Event::Watch { client: self.c, watch: id, group: self.group.clone(), what });
            next = w.try_recv().ok();
        }
    }
}
