//! Member watches of the application: a node's watcher thread on its session
//! (`Session::watch_members`) and a `Coordinator`'s watcher thread (`Coordinator::watch_members`),
//! each recording every `GroupChange` it receives under the history lock, and whether its receive
//! reported the watch stopped.

use std::sync::Arc;
use std::time::Duration;

use super::super::backend::{below, sleep_virtual, unit};
use super::Client;
use crate::error::Result;
use crate::handles::coordinator::Coordinator;
use crate::handles::group::{GroupChange, MemberWatch, Membership};
use crate::handles::session::Session;
use crate::sim::history::{Event, WatchStep};

impl Client {
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
            let id = self.watch_started(Some(sess));
            let w = s.watch_members(&self.group);
            // Half the watches watch the thread's own join too (on the node's session, as a second
            // handle would: `AlreadyHeld` while the node's first thread is a member).
            let me = Client { c: self.c + 128, ..self.clone_parts() };
            let own =
                if w.is_ok() && unit() < 0.5 { me.join_returned(&s, sess).map(|(i, m)| (i, m, sess)) } else { None };
            drop(s);
            self.watch_round(&me, id, w, own);
        }
    }

    /// A `Coordinator`'s watcher thread (next to the node's coordinator thread): watches the group
    /// with `Coordinator::watch_members` for 1–6 leases at a time, half the watches also joining
    /// the group on the coordinator (a membership it re-joins on each new session) and watching
    /// for 5–7 leases. Its rustdoc promises a stream that outlives session replacements: the
    /// checker holds it to `watch-live` and `watch-sees-join` across them, and a receive that
    /// reports the watch stopped is a violation (`watch-live`).
    pub(crate) fn run_coordinator_watcher(&self, co: &Coordinator) {
        let me = Client { c: self.c + 128, ..self.clone_parts() };
        for _ in 0..self.ops.div_ceil(3) {
            let id = self.watch_started(None);
            let w = co.watch_members(&self.group);
            let own = if w.is_ok() && unit() < 0.5 { me.coordinator_join(co) } else { None };
            self.watch_round(&me, id, w, own);
        }
    }

    /// Joins the group on the coordinator, records the return (on the coordinator's session of
    /// the moment) and registers the membership: (slot id, membership, session label).
    pub(super) fn coordinator_join(&self, co: &Coordinator) -> Option<(u64, Arc<Membership>, u32)> {
        let m = co.join(&self.group).ok()?;
        let sess = m.session_id().map_or(u32::MAX, |id| self.label_of(&id));
        {
            let mut h = self.hist.lock();
            self.hist.push(&mut h, Event::JoinReturned { client: self.c, sess, group: self.group.clone() });
        }
        let (id, m) = self.register(sess, |h| &mut h.members, m);
        Some((id, m, sess))
    }

    /// Records a watch's start (`sess`: its session, `None` for a coordinator's); returns its id.
    fn watch_started(&self, sess: Option<u32>) -> u64 {
        let mut h = self.hist.lock();
        h.handles.next += 1;
        let id = h.handles.next;
        let what = WatchStep::Started { sess };
        self.hist.push(&mut h, Event::Watch { client: self.c, watch: id, group: self.group.clone(), what });
        id
    }

    /// Reads watch `id` (if `watch_members` returned it) for 1–6 leases, or 5–7 with its own
    /// membership `own` (held by `me`, the thread's second client), which it then ends; records
    /// the watch's end.
    fn watch_round(&self, me: &Client, id: u64, w: Result<MemberWatch>, own: Option<(u64, Arc<Membership>, u32)>) {
        let lease = self.lease();
        // A watch of its own join lasts past `watch-sees-join`'s bound (if the session does).
        let keep = if own.is_some() { lease * 5 + below(lease * 2) } else { lease + below(lease * 5) };
        let stopped = w.as_ref().is_ok_and(|w| self.read_watch(id, w, keep));
        if let Some((mid, m, sess)) = own {
            me.end_membership(sess, mid, m);
        }
        drop(w);
        let what = if stopped { WatchStep::Disconnected } else { WatchStep::Dropped };
        let mut h = self.hist.lock();
        self.hist.push(&mut h, Event::Watch { client: self.c, watch: id, group: self.group.clone(), what });
        drop(h);
        sleep_virtual(below(lease / 2));
    }

    /// Records every change `w` delivers for `keep`; true when a receive reported it stopped.
    fn read_watch(&self, id: u64, w: &MemberWatch, keep: Duration) -> bool {
        let until = crate::sync::now() + keep;
        let mut first = true;
        while crate::sync::now() < until {
            match w.recv_timeout(self.lease() / 4) {
                Ok(change) => self.record_change(id, w, change, &mut first),
                Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
                Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return true,
            }
        }
        false
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
