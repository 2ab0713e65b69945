//! The in-process memory backend: shared by every session of the process, same contract as the
//! others (it passes the full TCK), and it pushes release and membership notifications.
//!
//! Time comes from its own monotonic [`Clock`] (by default elapsed time since the backend was
//! created); the deterministic simulation plugs in a virtual clock.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::Sender;
use parking_lot::Mutex;

use crate::backend::{
    Acquire, Capabilities, CheckItem, CheckStatus, Holder, KeepAlive, LeaseBackend, ListRequest, ListedGroup,
    ListedLease, ListedSession, Listing, Member, Notification, SessionGrant, Topic,
};
use crate::error::{Error, Result};
use crate::types::{Name, SessionId, Token};

/// A monotonic time source for the memory backend: time elapsed since an arbitrary origin.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time since the clock's origin. Never decreases (unless a simulation injects a jump).
    fn now(&self) -> Duration;
}

/// The real monotonic clock (`Instant`).
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock { origin: Instant::now() }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// Most watch registrations kept per topic (lease or group). A registration lasts until its
/// topic next fires, and the backend cannot tell when its receiver is gone (a `lock_timeout`
/// that returned registered a channel nobody reads), so a waiter looping on a lease that stays
/// held would add one per call without bound. Past this many, the oldest registration is
/// dropped: a waiter that still listens on it falls back to polling (every `renew_interval / 2`),
/// as on a backend without push.
pub const MAX_WATCHERS_PER_TOPIC: usize = 256;

#[derive(Debug)]
struct MemSession {
    expires: Duration,
    metadata: String,
    leases: HashSet<Name>,
    groups: HashSet<Name>,
}

#[derive(Debug)]
struct MemLease {
    session: Option<SessionId>,
    token: u64,
}

#[derive(Debug, Default)]
struct State {
    sessions: HashMap<SessionId, MemSession>,
    by_expiry: BTreeSet<(Duration, SessionId)>,
    leases: HashMap<Name, MemLease>,
    groups: HashMap<Name, BTreeSet<SessionId>>,
    /// Semaphore limits, stored on first use and kept forever.
    semaphores: HashMap<Name, u32>,
    watchers: HashMap<Topic, Vec<Sender<Notification>>>,
}

impl State {
    /// Removes every session expired at `now`, freeing its leases and memberships.
    /// Removes the sessions expired at `now`; returns how many.
    fn sweep(&mut self, now: Duration, out: &mut Vec<Notification>) -> usize {
        let mut swept = 0;
        while let Some((expires, sid)) = self.by_expiry.first().cloned() {
            if expires > now {
                break;
            }
            self.by_expiry.remove(&(expires, sid.clone()));
            self.remove_session(&sid, out);
            swept += 1;
        }
        swept
    }

    fn remove_session(&mut self, sid: &SessionId, out: &mut Vec<Notification>) {
        let Some(s) = self.sessions.remove(sid) else { return };
        self.by_expiry.remove(&(s.expires, sid.clone()));
        for name in s.leases {
            if let Some(l) = self.leases.get_mut(&name) {
                if l.session.as_ref() == Some(sid) {
                    l.session = None;
                    out.push(Notification::Released(name));
                }
            }
        }
        for group in s.groups {
            if let Some(g) = self.groups.get_mut(&group) {
                g.remove(sid);
                if g.is_empty() {
                    self.groups.remove(&group);
                }
            }
            out.push(Notification::MembersChanged(group));
        }
    }

    /// The live holder of `name` (the state is swept: a session in it is live).
    fn holder(&self, name: &Name, now: Duration) -> Result<Option<Holder>> {
        let Some(l) = self.leases.get(name) else { return Ok(None) };
        let Some(sid) = &l.session else { return Ok(None) };
        let Some(s) = self.sessions.get(sid) else { return Ok(None) };
        let token = Token::new(l.token).ok_or_else(|| Error::backend("memory token is 0"))?;
        Ok(Some(Holder {
            session: sid.clone(),
            token,
            remaining: s.expires.saturating_sub(now),
            metadata: s.metadata.clone(),
        }))
    }

    /// The members of `group` (live: the state is swept), by session id.
    fn members<'a>(&'a self, group: &Name) -> impl Iterator<Item = Member> + 'a {
        self.groups.get(group).into_iter().flatten().filter_map(|sid| {
            self.sessions.get(sid).map(|s| Member { session: sid.clone(), metadata: s.metadata.clone() })
        })
    }

    fn remaining(&self, sid: &SessionId, now: Duration) -> Option<Duration> {
        self.sessions.get(sid).map(|s| s.expires.saturating_sub(now))
    }

    fn take_watchers(&mut self, n: &Notification) -> Vec<(Sender<Notification>, Notification)> {
        let topic = match n {
            Notification::Released(name) => Topic::Lease(name.clone()),
            Notification::MembersChanged(name) => Topic::Group(name.clone()),
        };
        self.watchers.remove(&topic).unwrap_or_default().into_iter().map(|tx| (tx, n.clone())).collect()
    }
}

/// The in-process backend. Cheap to clone: clones share the same state.
#[derive(Clone)]
pub struct MemoryBackend {
    state: Arc<Mutex<State>>,
    clock: Arc<dyn Clock>,
}

impl fmt::Debug for MemoryBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.state.lock();
        f.debug_struct("MemoryBackend").field("sessions", &s.sessions.len()).field("leases", &s.leases.len()).finish()
    }
}

impl Default for MemoryBackend {
    fn default() -> Self {
        MemoryBackend::new()
    }
}

impl MemoryBackend {
    /// A new, empty backend on the real monotonic clock.
    pub fn new() -> MemoryBackend {
        MemoryBackend::with_clock(Arc::new(MonotonicClock::default()))
    }

    /// A new, empty backend on `clock` (e.g. a virtual clock in a simulation).
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryBackend {
        MemoryBackend { state: Arc::new(Mutex::new(State::default())), clock }
    }

    /// Watch registrations waiting for a notification, over every topic (for leak tests, through
    /// the test seam).
    #[cfg(feature = "internal-testing")]
    pub(crate) fn watcher_count(&self) -> usize {
        self.state.lock().watchers.values().map(Vec::len).sum()
    }

    /// Runs `f` on the swept state, then delivers the notifications it produced (outside the lock).
    fn with_state<T>(&self, f: impl FnOnce(&mut State, Duration, &mut Vec<Notification>) -> T) -> T {
        self.with_swept_state(|st, now, notes, _| f(st, now, notes))
    }

    /// As `with_state`; `f` is also told how many expired sessions the sweep before it removed.
    fn with_swept_state<T>(&self, f: impl FnOnce(&mut State, Duration, &mut Vec<Notification>, usize) -> T) -> T {
        let now = self.clock.now();
        let mut notes = Vec::new();
        let (value, deliveries) = {
            let mut st = self.state.lock();
            let swept = st.sweep(now, &mut notes);
            let value = f(&mut st, now, &mut notes, swept);
            let deliveries: Vec<_> = notes.iter().flat_map(|n| st.take_watchers(n)).collect();
            (value, deliveries)
        };
        for (tx, n) in deliveries {
            // Unbounded or not, a full/closed channel only loses a hint; receivers re-check.
            let _ = tx.try_send(n);
        }
        value
    }
}

impl LeaseBackend for MemoryBackend {
    fn kind(&self) -> &'static str {
        "memory"
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        self.with_state(|st, now, _| {
            let id = SessionId::random();
            let expires = now.saturating_add(lease_duration);
            st.sessions.insert(
                id.clone(),
                MemSession { expires, metadata: metadata.to_string(), leases: HashSet::new(), groups: HashSet::new() },
            );
            st.by_expiry.insert((expires, id.clone()));
            Ok(SessionGrant { id, remaining: lease_duration })
        })
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        self.with_state(|st, now, _| {
            let Some(s) = st.sessions.get_mut(session) else { return Ok(KeepAlive::Expired) };
            let old = s.expires;
            s.expires = now.saturating_add(lease_duration);
            let new = s.expires;
            let owned_names: Vec<Name> = s.leases.iter().cloned().collect();
            st.by_expiry.remove(&(old, session.clone()));
            st.by_expiry.insert((new, session.clone()));
            let mut owned = Vec::with_capacity(owned_names.len());
            for name in owned_names {
                if let Some(l) = st.leases.get(&name) {
                    if l.session.as_ref() == Some(session) {
                        if let Some(t) = Token::new(l.token) {
                            owned.push((name, t));
                        }
                    }
                }
            }
            owned.sort();
            let mut groups: Vec<Name> =
                st.sessions.get(session).map(|s| s.groups.iter().cloned().collect()).unwrap_or_default();
            groups.sort();
            let remaining_before = Some(old.saturating_sub(now));
            Ok(KeepAlive::Alive { remaining: lease_duration, owned, groups, unknown: Vec::new(), remaining_before })
        })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.with_state(|st, _, notes| {
            st.remove_session(session, notes);
            Ok(())
        })
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        self.with_state(|st, now, _| {
            let Some(remaining) = st.remaining(session, now) else { return Err(Error::session_expired(session)) };
            let lease = st.leases.entry(name.clone()).or_insert(MemLease { session: None, token: 0 });
            match &lease.session {
                Some(holder) if holder == session => {
                    let token = Token::new(lease.token).ok_or_else(|| Error::backend("memory token is 0"))?;
                    Ok(Acquire::Acquired { token, remaining: remaining.into() })
                }
                Some(_) => Ok(Acquire::Busy),
                None => {
                    lease.token += 1;
                    lease.session = Some(session.clone());
                    let token = Token::new(lease.token).ok_or_else(|| Error::backend("memory token is 0"))?;
                    if let Some(s) = st.sessions.get_mut(session) {
                        s.leases.insert(name.clone());
                    }
                    Ok(Acquire::Acquired { token, remaining: remaining.into() })
                }
            }
        })
    }

    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        self.with_state(|st, _, notes| {
            let Some(l) = st.leases.get_mut(name) else { return Ok(()) };
            if l.session.as_ref() == Some(session) && l.token == token.get() {
                l.session = None;
                notes.push(Notification::Released(name.clone()));
                if let Some(s) = st.sessions.get_mut(session) {
                    s.leases.remove(name);
                }
            }
            Ok(())
        })
    }

    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        self.with_state(|st, now, _| st.holder(name, now))
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.with_state(|st, _, notes| {
            let Some(s) = st.sessions.get_mut(session) else { return Err(Error::session_expired(session)) };
            if s.groups.insert(group.clone()) {
                st.groups.entry(group.clone()).or_default().insert(session.clone());
                notes.push(Notification::MembersChanged(group.clone()));
            }
            Ok(())
        })
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.with_state(|st, _, notes| {
            if let Some(s) = st.sessions.get_mut(session) {
                s.groups.remove(group);
            }
            if let Some(g) = st.groups.get_mut(group) {
                if g.remove(session) {
                    notes.push(Notification::MembersChanged(group.clone()));
                }
                if g.is_empty() {
                    st.groups.remove(group);
                }
            }
            Ok(())
        })
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        self.with_state(|st, _, _| Ok(st.members(group).collect()))
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        self.with_state(|st, _, _| match permits {
            Some(p) => Ok(Some(*st.semaphores.entry(name.clone()).or_insert(p))),
            None => Ok(st.semaphores.get(name).copied()),
        })
    }

    fn call_bound(&self) -> Option<Duration> {
        // No I/O: every call returns at once, so the engine runs user calls on the caller's thread.
        Some(Duration::ZERO)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities { push_release: true, push_membership: true, watch_checks_lease: true, list: true }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        self.with_state(|st, _, _| {
            if let Topic::Lease(name) = topic {
                let free = st.leases.get(name).is_none_or(|l| l.session.is_none());
                if free {
                    // Already free: tell at once so no release can slip between a check and the watch.
                    let _ = notify.try_send(Notification::Released(name.clone()));
                    return Ok(true);
                }
            }
            let list = st.watchers.entry(topic.clone()).or_default();
            list.retain(|tx| !tx.same_channel(notify));
            if list.len() >= MAX_WATCHERS_PER_TOPIC {
                list.remove(0);
            }
            list.push(notify.clone());
            Ok(true)
        })
    }

    fn purge_expired(&self) -> Result<usize> {
        // Sweeping happens on every call; report what this call's sweep removed.
        self.with_swept_state(|_, _, _, swept| Ok(swept))
    }

    /// Reads the whole in-process state under its lock: O(leases + groups + sessions), no I/O.
    fn list(&self, request: &ListRequest) -> Result<Listing> {
        self.with_state(|st, now, _| {
            let take = request.limit().saturating_add(1);
            let mut leases = Vec::new();
            for name in st.leases.keys().filter(|n| request.matches(n.as_str())) {
                if let Some(holder) = st.holder(name, now)? {
                    leases.push(ListedLease { name: name.clone(), holder });
                }
            }
            let groups = st
                .groups
                .keys()
                .filter(|n| request.matches(n.as_str()))
                .map(|name| ListedGroup { name: name.clone(), members: st.members(name).take(take).collect() })
                .filter(|g| !g.members.is_empty())
                .collect();
            let sessions = st
                .sessions
                .iter()
                .map(|(id, s)| ListedSession {
                    id: id.clone(),
                    remaining: s.expires.saturating_sub(now),
                    metadata: s.metadata.clone(),
                })
                .collect();
            Ok(Listing { leases, groups, sessions, ..Listing::default() }.finish(request))
        })
    }

    fn check(&self) -> Vec<CheckItem> {
        vec![CheckItem {
            name: "reachable".into(),
            status: CheckStatus::Ok,
            detail: "in-process memory backend (state is lost when the process exits)".into(),
        }]
    }
}

/// The memory backend's part of the configuration: `memory://` (or `SIMBA_BACKEND=memory`), no
/// variables, nothing to parse; each connect creates a new, private backend.
pub(crate) struct MemoryConfig;

impl crate::backends::registry::BackendConfig for MemoryConfig {
    fn kinds(&self) -> &'static [crate::settings::kind::BackendKind] {
        &[crate::settings::kind::BackendKind::Memory]
    }

    fn family(&self) -> crate::settings::kind::Family {
        crate::settings::kind::Family::Memory
    }

    fn env_vars(&self) -> &'static [&'static str] {
        &[]
    }

    fn read_vars(
        &self,
        _knobs: &mut crate::backends::registry::Knobs,
        _get: &dyn Fn(&str) -> Option<String>,
        _seen: &mut dyn FnMut(&'static str),
    ) -> Result<()> {
        Ok(())
    }

    fn parse(
        &self,
        _kind: crate::settings::kind::BackendKind,
        _ep: &crate::settings::endpoint::Endpoint,
        _knobs: &crate::backends::registry::Knobs,
        _query_timeout: Duration,
    ) -> Result<Arc<dyn crate::backends::registry::ParsedBackend>> {
        Ok(Arc::new(MemoryConfig))
    }

    fn parse_without_url(
        &self,
        _kind: crate::settings::kind::BackendKind,
        _knobs: &crate::backends::registry::Knobs,
    ) -> Result<Arc<dyn crate::backends::registry::ParsedBackend>> {
        Ok(Arc::new(MemoryConfig))
    }
}

impl crate::backends::registry::ParsedBackend for MemoryConfig {
    fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        log::info!("simba: using the in-process memory backend (process-local: other processes never see it)");
        Ok(Arc::new(MemoryBackend::new()))
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}
