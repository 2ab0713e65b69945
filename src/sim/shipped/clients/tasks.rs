//! Leader tasks (`Election::run_while_leader`) of the application: the closure's probe that
//! records every look under the history lock, starting and stopping tasks.

use std::sync::Arc;
use std::time::Duration;

use super::super::backend::{below, sleep_virtual, unit, History};
use super::{sample, Client};
use crate::handles::election::{Election, LeaderContext, LeaderTask, Schedule};
use crate::sim::history::{Event, TaskStep};
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
            None => {
                // Taken out for its resign or drop: the session it was on then (a coordinator's
                // election may have moved since the task's last look).
                if let Some((_, sess)) = h.handles.taken.iter().find(|(id, _)| *id == self.slot) {
                    self.sess = *sess;
                }
                (self.client, false)
            }
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
}
