//! Release and membership notifications on PostgreSQL: `LISTEN`/`NOTIFY` on one dedicated
//! connection per backend, on its own thread, serving one-shot registrations.
//!
//! `release.sql`, `close-session.sql` and the purge (`purge-notify.sql`) call
//! `pg_notify('simba_release', name)` in the statement (or transaction) that frees the lease, so a
//! notification is sent only when the release commits. Every lease shares the one channel; the
//! payload is the lease name (see `docs/backends/sql.md`, "Pushed releases", for the measurements
//! behind that choice). Membership changes follow the same rule on a second channel:
//! `join.sql` (a member row added), `leave.sql` (a member row deleted), `close-session.sql` and the
//! purge (`purge-members.sql`) call `pg_notify('simba_members', group)` in the statement that
//! changes the rows. The notification connection runs `listen.sql` (both channels) once per
//! connection, so a registration is only an entry in a map: no round trip, and no window in which
//! a change could slip between a registration and its subscription.
//!
//! * The thread starts on the first [`Listener::watch`], which waits (at most the connect timeout)
//!   for the connection; construction stays free of I/O.
//! * While the connection is up, `watch` registers (a lease or a group) and returns `true`. While it is down (lost,
//!   reconnecting), `watch` returns `false`: the caller polls, as it does on a backend without push.
//! * A lost connection wakes every registered watcher, lease and group alike (a notification may
//!   have been lost with it: the woken re-check, which is the resync),
//!   is logged once per cause (not once per retry), and is reopened with backoff through the
//!   pool's own connection manager (same URL, timeouts and TLS, same connect-failure log); once it
//!   listens again an `info` line says so.
//! * A heartbeat (`Client::is_valid`, bounded by the query timeout) every [`HEARTBEAT`] notices a
//!   connection that died silently; a registration not renewed for [`STALE`] is sent a
//!   notification and forgotten (a caller still waiting registers again).
//!
//! The thread holds only a `Weak` to the shared state and ends within [`POLL`] once the backend is
//! dropped. No log call and no send happens under the state lock.
//!
//! The thread runs under the supervision rule of [`crate::backends::notifier`]: if it panics (or
//! returns while the backend lives) every registered watcher is woken, `watch` returns `false`
//! until a restarted thread listens again, and `check()` fails its "notifications" item
//! meanwhile.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Sender, TrySendError};
use log::{debug, info, warn};
use parking_lot::{Condvar, Mutex};
use postgres::fallible_iterator::FallibleIterator;

use super::{q, PgConn, PgManager, KIND};
use crate::backend::{CheckItem, Notification, Topic};
use crate::backends::notifier::{supervise, Notifier, NotifierHealth, Supervised};
use crate::error::{display_chain, Result};
use crate::types::Name;

/// The channel every release is announced on (as written in the SQL files).
const RELEASE_CHANNEL: &str = "simba_release";
/// The channel every membership change is announced on (as written in the SQL files).
const MEMBERS_CHANNEL: &str = "simba_members";
/// Longest blocking wait for a notification: how soon the thread notices its backend was dropped.
const POLL: Duration = Duration::from_millis(200);
/// Time between two heartbeats on an otherwise silent connection.
const HEARTBEAT: Duration = Duration::from_secs(5);
/// A registration not renewed for this long is notified and forgotten.
const STALE: Duration = Duration::from_secs(10);
/// How often stale registrations are looked for.
const SWEEP: Duration = Duration::from_secs(1);
/// First and longest pause between reconnection attempts.
const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// No thread yet (no watch so far).
    Idle,
    /// The thread is opening its first connection.
    Starting,
    /// Listening: registrations are accepted.
    Up,
    /// The connection is lost; the thread reconnects. Watches return `false`.
    Down,
}

/// What a channel announces, and what a registration waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A lease was freed ([`Topic::Lease`], [`Notification::Released`]).
    Release,
    /// A group's member rows changed ([`Topic::Group`], [`Notification::MembersChanged`]).
    Members,
}

impl Kind {
    /// The registration's kind and name.
    fn of(topic: &Topic) -> (Kind, &Name) {
        match topic {
            Topic::Lease(name) => (Kind::Release, name),
            Topic::Group(name) => (Kind::Members, name),
        }
    }

    /// The kind a channel announces (`None`: not ours).
    fn of_channel(channel: &str) -> Option<Kind> {
        match channel {
            RELEASE_CHANNEL => Some(Kind::Release),
            MEMBERS_CHANNEL => Some(Kind::Members),
            _ => None,
        }
    }

    /// What the registrations of `name` are sent.
    fn note(self, name: &Name) -> Notification {
        match self {
            Kind::Release => Notification::Released(name.clone()),
            Kind::Members => Notification::MembersChanged(name.clone()),
        }
    }
}

struct Waiting {
    senders: Vec<Sender<Notification>>,
    /// When a caller last registered.
    touched: Instant,
}

struct State {
    phase: Phase,
    /// One-shot registrations by lease name.
    releases: HashMap<Name, Waiting>,
    /// One-shot registrations by group name.
    groups: HashMap<Name, Waiting>,
    /// The server process id of the listening connection, while up.
    pid: Option<u64>,
    /// The connection manager, until the thread takes it.
    manager: Option<PgManager>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
    /// The thread's supervision (see [`crate::backends::notifier`]).
    notifier: Arc<Notifier>,
}

impl State {
    /// The registrations of one kind.
    fn registry(&mut self, kind: Kind) -> &mut HashMap<Name, Waiting> {
        match kind {
            Kind::Release => &mut self.releases,
            Kind::Members => &mut self.groups,
        }
    }

    /// Takes every registration, of both kinds.
    fn drain(&mut self) -> Vec<(Kind, Name, Waiting)> {
        let releases = self.releases.drain().map(|(n, w)| (Kind::Release, n, w));
        let groups = self.groups.drain().map(|(n, w)| (Kind::Members, n, w));
        releases.chain(groups).collect()
    }
}

/// The release and membership notifications of one PostgreSQL backend.
pub(crate) struct Listener {
    shared: Arc<Shared>,
    connect_timeout: Duration,
    query_timeout: Duration,
}

impl Listener {
    /// A listener that opens its connections with `manager` (on first use).
    pub(super) fn new(manager: PgManager, connect_timeout: Duration, query_timeout: Duration) -> Listener {
        let state = State {
            phase: Phase::Idle,
            releases: HashMap::new(),
            groups: HashMap::new(),
            pid: None,
            manager: Some(manager),
        };
        Listener {
            shared: Arc::new(Shared {
                state: Mutex::new(state),
                changed: Condvar::new(),
                notifier: Notifier::new("postgres LISTEN"),
            }),
            connect_timeout,
            query_timeout,
        }
    }

    /// Registers a one-shot interest in `topic`: the release of a lease, or a change of a group's
    /// member rows. `Ok(false)` while the notification connection is down (the caller polls); the
    /// first call starts it and waits for it at most the connect timeout.
    pub(super) fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let mut st = self.shared.state.lock();
        if st.phase == Phase::Idle {
            if let Some(manager) = st.manager.take() {
                let weak = Arc::downgrade(&self.shared);
                let qt = self.query_timeout;
                let spawned = supervise("simba-pg-listen", KIND.to_string(), weak, move |weak| run(weak, &manager, qt));
                match spawned {
                    Ok(_) => st.phase = Phase::Starting,
                    Err(e) => {
                        // The manager went with the closure: no later retry; polling stays.
                        st.phase = Phase::Down;
                        drop(st);
                        warn!("simba {KIND}: cannot start the notification thread ({e}); waiters poll");
                        return Ok(false);
                    }
                }
            }
        }
        let deadline = Instant::now() + self.connect_timeout;
        while st.phase == Phase::Starting {
            if self.shared.changed.wait_until(&mut st, deadline).timed_out() {
                break;
            }
        }
        // Under the state lock: a thread that dies marks its notifier down before it takes the
        // lock to wake the registered, so a registration is either refused or woken.
        if st.phase != Phase::Up || self.shared.notifier.is_down() {
            return Ok(false);
        }
        let now = Instant::now();
        let (kind, name) = Kind::of(topic);
        let waiting =
            st.registry(kind).entry(name.clone()).or_insert_with(|| Waiting { senders: Vec::new(), touched: now });
        waiting.touched = now;
        if !waiting.senders.iter().any(|s| s.same_channel(notify)) {
            waiting.senders.push(notify.clone());
        }
        Ok(true)
    }

    /// The health of the notification thread.
    pub(super) fn health(&self) -> NotifierHealth {
        self.shared.notifier.health()
    }

    /// The "notifications" item of `check()`.
    pub(super) fn check_item(&self) -> CheckItem {
        self.shared.notifier.check_item()
    }

    /// The server process id of the notification connection while it listens (for fault tests).
    pub(super) fn connection_id(&self) -> Option<u64> {
        self.shared.state.lock().pid
    }
}

impl Shared {
    /// A release of the lease `name`, or a change of the group `name`, was announced.
    fn fire(&self, kind: Kind, name: &str) {
        let waiting = self.state.lock().registry(kind).remove_entry(name);
        if let Some((name, w)) = waiting {
            send(kind, &name, w.senders);
        }
    }

    /// Listening (again).
    fn up(&self, pid: u64) {
        {
            let mut st = self.state.lock();
            st.phase = Phase::Up;
            st.pid = Some(pid);
        }
        self.changed.notify_all();
        self.notifier.serving();
    }

    /// The connection is lost (or could not be opened): wake every watcher, lease and group
    /// alike, since a notification may have been lost (each re-checks: that is the resync);
    /// watches return `false` until [`up`](Shared::up).
    fn down(&self) {
        let all = {
            let mut st = self.state.lock();
            st.phase = Phase::Down;
            st.pid = None;
            st.drain()
        };
        self.changed.notify_all();
        for (kind, name, w) in all {
            send(kind, &name, w.senders);
        }
    }

    /// Notifies and forgets registrations not renewed for [`STALE`].
    fn sweep(&self, now: Instant) {
        let mut stale = Vec::new();
        {
            let mut st = self.state.lock();
            for kind in [Kind::Release, Kind::Members] {
                st.registry(kind).retain(|name, w| {
                    let keep = now.saturating_duration_since(w.touched) < STALE;
                    if !keep {
                        stale.push((kind, name.clone(), std::mem::take(&mut w.senders)));
                    }
                    keep
                });
            }
        }
        for (kind, name, senders) in stale {
            send(kind, &name, senders);
        }
    }
}

impl Supervised for Shared {
    fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    fn died(&self) {
        self.down();
    }
}

impl super::PgDriver {
    /// The health of the notification thread.
    #[allow(dead_code)] // for `Session::status` (issue #39)
    pub(crate) fn notifier_health(&self) -> NotifierHealth {
        self.listener.health()
    }
}

fn send(kind: Kind, name: &Name, senders: Vec<Sender<Notification>>) {
    let note = kind.note(name);
    for s in senders {
        // A full channel already holds a pending hint; a disconnected one has no reader.
        match s.try_send(note.clone()) {
            Ok(()) | Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

/// The notification thread: connect, listen, serve; on loss wake everybody, log once per cause,
/// back off and reconnect. Ends once the backend is dropped.
fn run(weak: &Weak<Shared>, manager: &PgManager, query_timeout: Duration) {
    let mut warned: Option<String> = None;
    let mut backoff = MIN_BACKOFF;
    loop {
        if weak.strong_count() == 0 {
            return;
        }
        let cause = match listen(manager) {
            Ok(mut conn) => {
                let Some(shared) = weak.upgrade() else { return };
                shared.up(conn.pid);
                drop(shared);
                if warned.take().is_some() {
                    info!("simba {KIND}: release notifications are back (server pid {})", conn.pid);
                } else {
                    debug!("simba {KIND}: listening for releases (server pid {})", conn.pid);
                }
                backoff = MIN_BACKOFF;
                match serve(weak, &mut conn, query_timeout) {
                    Some(cause) => cause,
                    None => return,
                }
            }
            Err(cause) => cause,
        };
        let Some(shared) = weak.upgrade() else { return };
        shared.down();
        drop(shared);
        if warned.as_deref() != Some(cause.as_str()) {
            warn!(
                "simba {KIND}: release notifications unavailable ({cause}); lock waiters and member watches poll until \
                 the notification connection is back"
            );
            warned = Some(cause);
        } else {
            debug!("simba {KIND}: release notifications still unavailable ({cause})");
        }
        let until = Instant::now() + backoff;
        while Instant::now() < until {
            if weak.strong_count() == 0 {
                return;
            }
            thread::sleep(until.saturating_duration_since(Instant::now()).min(POLL));
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Opens a connection through the pool's manager and runs `listen.sql` (both channels) on it.
fn listen(manager: &PgManager) -> std::result::Result<PgConn, String> {
    let mut conn = r2d2::ManageConnection::connect(manager).map_err(|e| display_chain(&e))?;
    conn.client.batch_execute(q::LISTEN).map_err(|e| display_chain(&e))?;
    Ok(conn)
}

/// Delivers notifications until the connection fails (`Some(cause)`) or the backend is dropped
/// (`None`).
fn serve(weak: &Weak<Shared>, conn: &mut PgConn, query_timeout: Duration) -> Option<String> {
    let mut beat = Instant::now();
    let mut swept = Instant::now();
    loop {
        weak.upgrade()?.notifier.checkpoint();
        let next = conn.client.notifications().timeout_iter(POLL).next();
        match next {
            Ok(Some(n)) => {
                beat = Instant::now();
                if let Some(kind) = Kind::of_channel(n.channel()) {
                    let shared = weak.upgrade()?;
                    shared.fire(kind, n.payload());
                }
            }
            Ok(None) if conn.client.is_closed() => return Some("the connection was closed".into()),
            Ok(None) => {}
            Err(e) => return Some(display_chain(&e)),
        }
        let now = Instant::now();
        if now.saturating_duration_since(beat) >= HEARTBEAT {
            if let Err(e) = conn.client.is_valid(query_timeout) {
                return Some(format!("heartbeat failed: {}", display_chain(&e)));
            }
            beat = Instant::now();
        }
        if now.saturating_duration_since(swept) >= SWEEP {
            swept = now;
            weak.upgrade()?.sweep(now);
        }
    }
}

#[cfg(test)]
#[path = "postgres_notify_tests.rs"]
mod notify_tests;
