//! Pushed releases and membership changes ([`LeaseBackend::watch`](crate::backend::LeaseBackend::watch)):
//! etcd watches multiplexed on ONE long-lived bidirectional `Watch` stream per backend, run by a
//! task on the client's runtime. Why it cannot lose a release is in docs/backends/etcd.md
//! ("Watches"); in short:
//!
//! - A registration reads first (linearizable, bounded by the query timeout like every call): a
//!   free lease is answered at once; otherwise the etcd watch starts at the revision after the
//!   read's, so whatever happens after the read is delivered, even when the watch is created
//!   later (or the watch is cancelled as compacted, below). When nothing was written between the
//!   read and the watch's creation, etcd serves the watch live (a start revision in the past
//!   makes it an "unsynced" watcher, caught up every 100 ms: that cost every hand-off ~75 ms).
//!   When something was, the one event a compaction can drop without cancelling the watch (a
//!   delete at exactly the start revision, compacted at that revision) lies before the
//!   confirmation: a lease watch confirmed behind re-reads its key once and notifies if it is
//!   gone.
//! - Each topic has one etcd watch and a list of one-shot waiters (deduplicated by channel); the
//!   first matching event (a delete of the lease key; any change under the group's prefix)
//!   notifies them all and retires the watch: the stream task cancels it [`RETIRE_DELAY`] later,
//!   not while the waiters acquire.
//! - A watch cancelled by the server (its start revision compacted: `compact_revision` set, or
//!   refused) notifies its waiters.
//! - When the stream breaks (member down, connection cut, HTTP/2 keep-alive timeout), every
//!   registration is kept, and notified as soon as a new stream is established (the server has
//!   confirmed its first watch), whatever happened meanwhile: waiters re-check and register
//!   again on the new stream. The notification is at worst spurious, never lost.
//! - The stream runs on the member calls are pinned to (`route.rs`) and follows the pin: when a
//!   call finds that member not answering and moves the pin, the stream is dropped as broken and
//!   opened on the new member (a stream on a paused member would otherwise wait for the HTTP/2
//!   keep-alive to notice). A stream that cannot be opened moves the pin on itself.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Weak};
use std::time::Duration;

use crossbeam_channel::{Sender, TrySendError};
use futures::channel::mpsc;
use futures::future::Either;
use parking_lot::Mutex;
use tonic::Status;

use super::client::{token_expired, Clients, EtcdClient};
use super::keys::{prefix_end, Keys};
use super::proto::etcdserverpb::watch_create_request::FilterType;
use super::proto::etcdserverpb::watch_request::RequestUnion;
use super::proto::etcdserverpb::{RangeRequest, WatchCancelRequest, WatchCreateRequest, WatchRequest, WatchResponse};
use super::proto::mvccpb::event::EventType;
use super::route::Route;
use crate::backend::{Notification, Topic};
use crate::error::{Error, Result};

/// The first wait before opening a stream again after a failure (doubled up to [`MAX_BACKOFF`]).
const MIN_BACKOFF: Duration = Duration::from_millis(50);
/// The longest wait between two attempts to open the stream.
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// How long a fired watch stays before its cancel is sent: its waiters are acquiring right then,
/// on the same member, and a cancel (a write, the server's work, its reply waking the runtime
/// thread) would compete with them on a small machine. Cancels of one period go out together.
const RETIRE_DELAY: Duration = Duration::from_millis(50);

/// The registrations of one backend and its stream task's state.
pub(crate) struct Watches {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for Watches {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.state.lock();
        f.debug_struct("Watches")
            .field("topics", &st.entries.len())
            .field("stream_up", &st.stream.is_some())
            .finish_non_exhaustive()
    }
}

struct Shared {
    state: Mutex<State>,
    keys: Keys,
}

#[derive(Default)]
struct State {
    entries: HashMap<Topic, Entry>,
    /// etcd watch id → topic, for the watches created on the current stream.
    by_watch: HashMap<i64, Topic>,
    /// The creates sent on the current stream and not yet confirmed, in order (etcd confirms a
    /// stream's creates in the order it received them): the topic and the entry's serial.
    pending: VecDeque<(Topic, u64)>,
    /// The current stream's requests, while a stream is established.
    stream: Option<mpsc::UnboundedSender<WatchRequest>>,
    /// Watches of the current stream no longer needed, cancelled by the stream task a moment
    /// later ([`RETIRE_DELAY`]), not while their waiters act on the event that fired them.
    retired: Vec<i64>,
    serial: u64,
}

/// One topic's etcd watch and its waiters.
struct Entry {
    waiters: Vec<Sender<Notification>>,
    /// The revision the etcd watch starts at (after the first registration's read revision).
    start: i64,
    /// Tells this entry from an earlier one of the same topic (for late confirmations).
    serial: u64,
    /// The etcd watch id, once the server confirmed the create on the current stream.
    watch_id: Option<i64>,
}

/// Waiters to notify (outside the lock).
type Fired = Vec<(Vec<Sender<Notification>>, Notification)>;

/// A lease watch confirmed after writes since its registration's read: its key is read again,
/// and its waiters notified if it is gone (topic, entry serial, key).
type Recheck = (Topic, u64, Vec<u8>);

fn note(topic: &Topic) -> Notification {
    match topic {
        Topic::Lease(n) => Notification::Released(n.clone()),
        Topic::Group(g) => Notification::MembersChanged(g.clone()),
    }
}

fn deliver(fired: Fired) {
    for (senders, note) in fired {
        for s in senders {
            // A full channel already holds a pending hint; a disconnected one has no reader.
            match s.try_send(note.clone()) {
                Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
            }
        }
    }
}

fn create_request(key: Vec<u8>, range_end: Vec<u8>, start_revision: i64, filters: Vec<i32>) -> WatchRequest {
    WatchRequest {
        request_union: Some(RequestUnion::CreateRequest(WatchCreateRequest {
            key,
            range_end,
            start_revision,
            filters,
            ..Default::default()
        })),
    }
}

impl Shared {
    /// The key range a topic watches, and its filters: a lease key's deletes; every change under
    /// a group's prefix.
    fn target(&self, topic: &Topic) -> (Vec<u8>, Vec<u8>, Vec<i32>) {
        match topic {
            Topic::Lease(n) => (self.keys.lease(n), Vec::new(), vec![FilterType::Noput as i32]),
            Topic::Group(g) => {
                let p = self.keys.group_prefix(g).into_bytes();
                let end = prefix_end(&p);
                (p, end, Vec::new())
            }
        }
    }

    /// The key no simba key is: the sentinel watch that confirms a new stream.
    fn sentinel(&self) -> Vec<u8> {
        format!("{}watch-stream", self.keys.root()).into_bytes()
    }

    /// Removes `topic`'s entry (retiring its etcd watch) and returns its waiters.
    fn take(st: &mut State, topic: &Topic) -> Option<(Vec<Sender<Notification>>, Notification)> {
        let e = st.entries.remove(topic)?;
        if let Some(id) = e.watch_id {
            st.by_watch.remove(&id);
            Self::retire(st, id);
        }
        Some((e.waiters, note(topic)))
    }

    /// Queues the cancel of a watch of the current stream (sent by [`Shared::cancel_retired`]);
    /// its events are ignored meanwhile, as it is in no `by_watch`.
    fn retire(st: &mut State, watch_id: i64) {
        if st.stream.is_some() {
            st.retired.push(watch_id);
        }
    }

    /// Sends the cancels of the retired watches on the current stream.
    fn cancel_retired(&self) {
        let mut st = self.state.lock();
        let retired = std::mem::take(&mut st.retired);
        if let Some(tx) = &st.stream {
            for watch_id in retired {
                let _ = tx.unbounded_send(WatchRequest {
                    request_union: Some(RequestUnion::CancelRequest(WatchCancelRequest { watch_id })),
                });
            }
        }
    }

    /// True when retired watches wait for their cancel.
    fn has_retired(&self) -> bool {
        !self.state.lock().retired.is_empty()
    }

    /// A new stream is established: every registration made before it is notified (it may have
    /// missed events while no stream was up); registrations made from now on create their
    /// watches on it.
    fn established(&self, tx: mpsc::UnboundedSender<WatchRequest>) -> Fired {
        let mut st = self.state.lock();
        st.by_watch.clear();
        st.pending.clear();
        st.retired.clear();
        st.stream = Some(tx);
        let topics: Vec<Topic> = st.entries.keys().cloned().collect();
        topics.iter().filter_map(|t| Self::take(&mut st, t)).collect()
    }

    /// The stream broke: its watches are gone; the entries stay, to be notified on the next one.
    fn broken(&self) {
        let mut st = self.state.lock();
        st.stream = None;
        st.by_watch.clear();
        st.pending.clear();
        st.retired.clear();
        for e in st.entries.values_mut() {
            e.watch_id = None;
        }
    }

    /// One reply on the stream: the waiters to notify, and whether the server refused a create
    /// (the stream is then opened again, logged in again: a stream keeps the auth token it was
    /// opened with, and etcd checks it at every create).
    fn on_response(&self, r: WatchResponse) -> (Fired, bool, Option<Recheck>) {
        let refused = r.created && r.canceled;
        let mut recheck = None;
        let fired = self.on_reply(r, &mut recheck);
        (fired, refused, recheck)
    }

    /// Notifies `topic`'s waiters if its entry is still the one of `serial`.
    fn fire_if(&self, topic: &Topic, serial: u64) -> Fired {
        let mut st = self.state.lock();
        if st.entries.get(topic).is_some_and(|e| e.serial == serial) {
            Self::take(&mut st, topic).into_iter().collect()
        } else {
            Vec::new()
        }
    }

    fn on_reply(&self, r: WatchResponse, recheck: &mut Option<Recheck>) -> Fired {
        let mut st = self.state.lock();
        let mut fired = Vec::new();
        if r.created {
            let Some((topic, serial)) = st.pending.pop_front() else {
                return fired; // a confirmation we did not ask for (none is expected)
            };
            let live = st.entries.get(&topic).is_some_and(|e| e.serial == serial);
            if r.canceled {
                if live {
                    log::warn!(
                        "etcd refused a watch of {topic:?}: {} (its waiters are told to re-check)",
                        r.cancel_reason
                    );
                    fired.extend(Self::take(&mut st, &topic));
                }
                return fired;
            }
            if !live {
                // Notified before the server confirmed it: not needed any more.
                Self::retire(&mut st, r.watch_id);
                return fired;
            }
            if let Some(e) = st.entries.get_mut(&topic) {
                e.watch_id = Some(r.watch_id);
                let behind = r.header.as_ref().is_some_and(|h| h.revision >= e.start);
                if let (true, Topic::Lease(_)) = (behind, &topic) {
                    *recheck = Some((topic.clone(), serial, self.target(&topic).0));
                }
            }
            st.by_watch.insert(r.watch_id, topic);
        }
        if r.canceled || r.compact_revision != 0 {
            // Cancelled by the server, or its start revision was compacted: events may be lost,
            // so the waiters re-check.
            if let Some(topic) = st.by_watch.remove(&r.watch_id) {
                log::debug!(
                    "etcd cancelled the watch of {topic:?} (compact revision {}, {:?}): notifying its waiters",
                    r.compact_revision,
                    r.cancel_reason
                );
                if let Some(e) = st.entries.get_mut(&topic) {
                    e.watch_id = None; // the server dropped it: nothing to cancel
                }
                fired.extend(Self::take(&mut st, &topic));
            }
            return fired;
        }
        if r.events.is_empty() {
            return fired;
        }
        let Some(topic) = st.by_watch.get(&r.watch_id).cloned() else { return fired };
        let relevant = match topic {
            Topic::Lease(_) => r.events.iter().any(|e| e.r#type == EventType::Delete as i32),
            Topic::Group(_) => true,
        };
        if relevant {
            fired.extend(Self::take(&mut st, &topic));
        }
        fired
    }
}

impl Watches {
    /// Starts the stream task on `client`'s runtime; it ends with the runtime (or when this value
    /// is dropped, at its next wake-up).
    pub(crate) fn start(client: &EtcdClient, keys: Keys) -> Watches {
        let shared = Arc::new(Shared { state: Mutex::new(State::default()), keys });
        let weak = Arc::downgrade(&shared);
        let bound = client.query_timeout();
        client.spawn(move |route| run(weak, route, bound));
        Watches { shared }
    }

    /// Registers `notify` for `topic` (see the module docs).
    ///
    /// # Errors
    /// As the registration's read (`Unavailable` when etcd does not answer in time).
    pub(crate) fn register(&self, client: &EtcdClient, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let (key, range_end, filters) = self.shared.target(topic);
        let (k, e) = (key.clone(), range_end.clone());
        let (count, revision) = client.call("watch registration", move |c| {
            let req = RangeRequest { key: k.clone(), range_end: e.clone(), count_only: true, ..Default::default() };
            async move {
                let mut kv = c.kv.clone();
                let r = kv.range(req).await?.into_inner();
                let rev =
                    r.header.map(|h| h.revision).ok_or_else(|| Status::internal("etcd's range reply has no header"))?;
                Ok((r.count, rev))
            }
        })?;
        if matches!(topic, Topic::Lease(_)) && count == 0 {
            deliver(vec![(vec![notify.clone()], note(topic))]);
            return Ok(true);
        }
        // The revision after the read's: served live when nothing was written since (see the
        // module docs for the one event a compaction could drop, and the re-read that covers it).
        let start = revision + 1;
        if revision < 1 {
            // 0 would mean "from now on" to etcd: a gap after the read.
            return Err(Error::backend(format!("etcd reported revision {revision} for a read")));
        }
        let mut guard = self.shared.state.lock();
        let st = &mut *guard;
        if let Some(e) = st.entries.get_mut(topic) {
            // A watch that starts after this registration's read does not cover what happened
            // between the two: answer at once (the caller re-checks and registers again).
            let answer_now = e.start > start;
            if !answer_now && !e.waiters.iter().any(|s| s.same_channel(notify)) {
                e.waiters.push(notify.clone());
            }
            drop(guard);
            if answer_now {
                deliver(vec![(vec![notify.clone()], note(topic))]);
            }
            return Ok(true);
        }
        st.serial += 1;
        let serial = st.serial;
        st.entries.insert(topic.clone(), Entry { waiters: vec![notify.clone()], start, serial, watch_id: None });
        if let Some(tx) = &st.stream {
            if tx.unbounded_send(create_request(key, range_end, start, filters)).is_ok() {
                st.pending.push_back((topic.clone(), serial));
            }
            // Else the stream just ended: the entry is notified when the next one is established.
        }
        Ok(true)
    }
}

/// The stream task: opens the stream (confirmed by a sentinel watch), then serves it until it
/// breaks, and again, with a backoff between failed attempts, until the backend is dropped.
async fn run(weak: Weak<Shared>, route: Arc<Route>, bound: Duration) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let Some(sentinel) = weak.upgrade().map(|s| s.sentinel()) else { return };
        let mut moved = route.subscribe();
        let (at, clients) = route.pinned();
        let (tx, rx) = mpsc::unbounded();
        let _ = tx.unbounded_send(create_request(sentinel, Vec::new(), 0, Vec::new()));
        let mut client = clients.watch.clone();
        let opening = std::pin::pin!(tokio::time::timeout(bound, async move {
            let mut stream = client.watch(rx).await?.into_inner();
            let first = stream.message().await?;
            Ok::<_, Status>((stream, first))
        }));
        let opened = match futures::future::select(opening, std::pin::pin!(moved.changed())).await {
            Either::Left((opened, _)) => opened,
            // A call found the member not answering meanwhile: open on the new one at once.
            Either::Right((Ok(()), _)) => continue,
            Either::Right((Err(_), _)) => return,
        };
        let mut stream = match opened {
            Ok(Ok((stream, Some(first)))) if first.created && !first.canceled => stream,
            Ok(Ok((_, first))) => {
                log::warn!(
                    "etcd did not confirm the watch stream's first watch ({:?}): retrying in {backoff:?}",
                    first.map(|f| f.cancel_reason)
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Ok(Err(s)) => {
                log::debug!("cannot open the etcd watch stream: {s}; retrying in {backoff:?}");
                if token_expired(&s) {
                    let _ = clients.authenticate().await;
                } else {
                    route.pass(at);
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
            Err(_) => {
                log::debug!("the etcd watch stream did not open within {bound:?}; retrying");
                route.pass(at);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        backoff = MIN_BACKOFF;
        let Some(shared) = weak.upgrade() else { return };
        let fired = shared.established(tx);
        drop(shared);
        deliver(fired);
        // When the retired watches' cancels go out (none retired: never).
        let mut cancel_at: Option<tokio::time::Instant> = None;
        loop {
            let msg = {
                let msg = std::pin::pin!(stream.message());
                let pin_moved = std::pin::pin!(moved.changed());
                let due = cancel_at;
                let retire = std::pin::pin!(async move {
                    match due {
                        Some(at) => tokio::time::sleep_until(at).await,
                        None => std::future::pending::<()>().await,
                    }
                });
                match futures::future::select(futures::future::select(msg, pin_moved), retire).await {
                    Either::Left((Either::Left((msg, _)), _)) => Some(msg),
                    Either::Left((Either::Right((Ok(()), _)), _)) => None,
                    // The route is gone: so is the backend.
                    Either::Left((Either::Right((Err(_), _)), _)) => return,
                    Either::Right(((), _)) => {
                        cancel_at = None;
                        let Some(shared) = weak.upgrade() else { return };
                        shared.cancel_retired();
                        continue;
                    }
                }
            };
            let Some(shared) = weak.upgrade() else { return };
            let Some(msg) = msg else {
                if *moved.borrow_and_update() != at {
                    log::debug!("calls moved away from the etcd watch stream's member: opening a new stream");
                    shared.broken();
                    break;
                }
                continue;
            };
            match msg {
                Ok(Some(r)) => {
                    let (fired, refused, recheck) = shared.on_response(r);
                    if refused {
                        shared.broken();
                    }
                    // The waiters first: their wake-up is a hand-off's critical path.
                    deliver(fired);
                    if cancel_at.is_none() && shared.has_retired() {
                        cancel_at = Some(tokio::time::Instant::now() + RETIRE_DELAY);
                    }
                    drop(shared);
                    if let Some(recheck) = recheck {
                        tokio::spawn(reread(weak.clone(), clients.clone(), bound, recheck));
                    }
                    if refused {
                        let _ = clients.authenticate().await;
                        tokio::time::sleep(backoff).await;
                        break;
                    }
                }
                Ok(None) | Err(_) => {
                    log::debug!("the etcd watch stream ended ({msg:?}): opening a new one");
                    shared.broken();
                    break;
                }
            }
        }
    }
}

/// Reads a lease watch's key once more; notifies its waiters if it is gone, or if the read fails
/// (they re-check: at worst a spurious wake).
async fn reread(weak: Weak<Shared>, clients: Clients, bound: Duration, (topic, serial, key): Recheck) {
    let mut kv = clients.kv.clone();
    let req = RangeRequest { key, count_only: true, ..Default::default() };
    let gone = match tokio::time::timeout(bound, kv.range(req)).await {
        Ok(Ok(r)) => r.into_inner().count == 0,
        Ok(Err(_)) | Err(_) => true,
    };
    if gone {
        let Some(shared) = weak.upgrade() else { return };
        let fired = shared.fire_if(&topic, serial);
        deliver(fired);
        // Rare (a watch confirmed behind): its cancel goes out now, not at the stream's next wake.
        shared.cancel_retired();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::etcd::proto::mvccpb::Event;
    use crate::types::Name;

    fn shared() -> Shared {
        Shared { state: Mutex::new(State::default()), keys: Keys::new("t") }
    }

    /// An entry for `topic`, its create sent on the current stream.
    fn add(sh: &Shared, topic: &Topic, tx: &Sender<Notification>) {
        let mut st = sh.state.lock();
        st.serial += 1;
        let serial = st.serial;
        st.entries.insert(topic.clone(), Entry { waiters: vec![tx.clone()], start: 5, serial, watch_id: None });
        st.pending.push_back((topic.clone(), serial));
    }

    fn reply(watch_id: i64, f: impl FnOnce(&mut WatchResponse)) -> WatchResponse {
        let mut r = WatchResponse { watch_id, ..Default::default() };
        f(&mut r);
        r
    }

    fn event(t: EventType) -> Event {
        Event { r#type: t as i32, kv: None, prev_kv: None }
    }

    #[test]
    fn a_delete_notifies_once_a_put_does_not_and_compaction_notifies() {
        let sh = shared();
        let (stream, requests) = mpsc::unbounded();
        assert!(sh.established(stream).is_empty());
        let (tx, rx) = crossbeam_channel::unbounded();
        let (l, g) = (Topic::Lease(Name::new("l").unwrap()), Topic::Group(Name::new("g").unwrap()));
        add(&sh, &l, &tx);
        add(&sh, &g, &tx);
        assert!(sh.on_response(reply(7, |r| r.created = true)).0.is_empty());
        assert!(sh.on_response(reply(8, |r| r.created = true)).0.is_empty());
        assert!(sh.on_response(reply(7, |r| r.events = vec![event(EventType::Put)])).0.is_empty());
        deliver(sh.on_response(reply(7, |r| r.events = vec![event(EventType::Delete)])).0);
        assert_eq!(rx.try_recv(), Ok(Notification::Released(Name::new("l").unwrap())));
        assert!(sh.on_response(reply(7, |r| r.events = vec![event(EventType::Delete)])).0.is_empty(), "one-shot");
        assert!(sh.has_retired());
        sh.cancel_retired();
        deliver(sh.on_response(reply(8, |r| (r.canceled, r.compact_revision) = (true, 9))).0);
        assert_eq!(rx.try_recv(), Ok(Notification::MembersChanged(Name::new("g").unwrap())));
        assert!(rx.try_recv().is_err() && sh.state.lock().entries.is_empty());
        drop(sh);
        // The fired lease watch was cancelled on the stream.
        let sent: Vec<WatchRequest> = futures::executor::block_on(futures::StreamExt::collect(requests));
        assert!(sent
            .iter()
            .any(|r| matches!(r.request_union, Some(RequestUnion::CancelRequest(c)) if c.watch_id == 7)));
    }

    #[test]
    fn a_broken_stream_notifies_every_registration_once_a_new_one_is_up() {
        let sh = shared();
        let (stream, _requests) = mpsc::unbounded();
        sh.established(stream);
        let (tx, rx) = crossbeam_channel::unbounded();
        let l = Topic::Lease(Name::new("l").unwrap());
        add(&sh, &l, &tx);
        sh.on_response(reply(3, |r| r.created = true));
        sh.broken();
        // Events of the old stream's watch ids mean nothing now.
        assert!(sh.on_response(reply(3, |r| r.events = vec![event(EventType::Delete)])).0.is_empty());
        assert!(rx.try_recv().is_err());
        let (stream, _requests) = mpsc::unbounded();
        deliver(sh.established(stream));
        assert_eq!(rx.try_recv(), Ok(Notification::Released(Name::new("l").unwrap())));
        assert!(sh.state.lock().entries.is_empty());
    }

    #[test]
    fn a_fired_watch_is_cancelled_later_and_only_on_its_own_stream() {
        let sh = shared();
        let (stream, mut requests) = mpsc::unbounded();
        sh.established(stream);
        let (tx, rx) = crossbeam_channel::unbounded();
        let l = Topic::Lease(Name::new("l").unwrap());
        add(&sh, &l, &tx);
        sh.on_response(reply(3, |r| r.created = true));
        deliver(sh.on_response(reply(3, |r| r.events = vec![event(EventType::Delete)])).0);
        assert_eq!(rx.try_recv(), Ok(Notification::Released(Name::new("l").unwrap())));
        // Nothing is sent while the waiters act on the event: the cancel waits for the stream task.
        assert!(requests.try_recv().is_err(), "a cancel was sent at once");
        sh.cancel_retired();
        match requests.try_recv() {
            Ok(WatchRequest { request_union: Some(RequestUnion::CancelRequest(c)) }) => assert_eq!(c.watch_id, 3),
            other => panic!("expected the cancel of watch 3, got {other:?}"),
        }
        assert!(!sh.has_retired());
        // A watch retired on a stream that then broke is not cancelled on the next one (its id
        // means nothing there, or another watch).
        add(&sh, &l, &tx);
        sh.on_response(reply(4, |r| r.created = true));
        deliver(sh.on_response(reply(4, |r| r.events = vec![event(EventType::Delete)])).0);
        assert!(sh.has_retired());
        sh.broken();
        let (stream, mut next) = mpsc::unbounded();
        sh.established(stream);
        sh.cancel_retired();
        assert!(next.try_recv().is_err(), "a dead stream's watch was cancelled on the new one");
    }

    #[test]
    fn a_refused_or_late_confirmation_is_handled() {
        let sh = shared();
        let (stream, requests) = mpsc::unbounded();
        sh.established(stream);
        let (tx, rx) = crossbeam_channel::unbounded();
        let l = Topic::Lease(Name::new("l").unwrap());
        add(&sh, &l, &tx);
        let (fired, refused, _) = sh.on_response(reply(-1, |r| (r.created, r.canceled) = (true, true)));
        assert!(refused);
        deliver(fired);
        assert_eq!(rx.try_recv(), Ok(Notification::Released(Name::new("l").unwrap())));
        // Confirmed after its entry was notified and replaced: the stale watch is cancelled.
        add(&sh, &l, &tx);
        let serial = sh.state.lock().entries[&l].serial;
        sh.state.lock().entries.get_mut(&l).unwrap().serial = serial + 100;
        assert!(sh.on_response(reply(4, |r| r.created = true)).0.is_empty());
        assert_eq!(sh.state.lock().entries[&l].watch_id, None);
        sh.cancel_retired();
        drop(sh);
        let sent: Vec<WatchRequest> = futures::executor::block_on(futures::StreamExt::collect(requests));
        assert!(sent
            .iter()
            .any(|r| matches!(r.request_union, Some(RequestUnion::CancelRequest(c)) if c.watch_id == 4)));
    }
}
