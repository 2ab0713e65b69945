//! One Simba session's ZooKeeper client (its gate, close and remaining time, the creates in
//! flight) and the watchdog that closes a session whose keep-alive was not called within its
//! lease duration.

use super::*;

impl ZkSession {
    /// The client if the session can be used now: `SessionExpired` once closed, expired or past
    /// its watchdog deadline (which closes it), `Unavailable` while disconnected.
    pub(super) fn gate(&self) -> Result<Client> {
        let dropped;
        // Logged once the lock is released: the application's logger is user code (issue #36,
        // finding 6).
        let mut overdue = None;
        {
            let mut life = self.life.lock();
            if !life.closed && Instant::now() >= life.deadline {
                overdue = Some(life.lease_duration);
                life.closed = true;
            }
            if life.closed {
                dropped = self.client.lock().take();
            } else {
                let guard = self.client.lock();
                let Some(client) = guard.as_ref() else {
                    return Err(Error::session_expired(&self.id));
                };
                let state = client.state();
                return match state {
                    SessionState::SyncConnected => Ok(client.clone()),
                    s if s.is_terminated() => Err(Error::session_expired(&self.id)),
                    s => Err(Error::unavailable(format!(
                        "ZooKeeper session {} is not connected ({s}); retry when it reconnects",
                        self.id
                    ))),
                };
            }
        }
        if let Some(lease_duration) = overdue {
            log::warn!(
                "zookeeper session {}: not renewed within its lease duration {lease_duration:?}; closing it (watchdog)",
                self.id
            );
        }
        drop(dropped);
        Err(Error::session_expired(&self.id))
    }

    /// Marks the session closed and drops its client (ZooKeeper then closes the session and its
    /// ephemeral nodes vanish). Idempotent.
    pub(super) fn shut(&self) {
        let client = {
            let mut life = self.life.lock();
            life.closed = true;
            self.client.lock().take()
        };
        drop(client);
    }

    /// Remaining time from `sent`, bounded by the watchdog deadline so that a lease never outlives
    /// the instant at which the watchdog would close its session. `None` once closed.
    pub(super) fn remaining_from(&self, sent: Instant) -> Option<Duration> {
        let life = self.life.lock();
        if life.closed {
            return None;
        }
        let bound = life.deadline.saturating_duration_since(sent);
        Some(life.lease_duration.min(self.negotiated).min(bound))
    }

    pub(super) fn begin_create(&self, name: &Name) {
        *self.leases.lock().pending.entry(name.clone()).or_insert(0) += 1;
    }

    /// Records the outcome of a create started with `begin_create`.
    pub(super) fn end_create(&self, name: &Name, owned: Option<Token>, definitive: bool) {
        let mut l = self.leases.lock();
        if let Some(t) = owned {
            l.known.insert(name.clone(), t);
        }
        let remove = match l.pending.get_mut(name) {
            Some(n) => {
                *n = n.saturating_sub(1);
                *n == 0 && (definitive || owned.is_some())
            }
            None => false,
        };
        if remove {
            l.pending.remove(name);
        }
    }
}

impl Inner {
    /// Waits until `state` reports the end of the session, up to `deadline`.
    pub(super) fn wait_terminated(state: &StateWatcher, deadline: Instant) -> bool {
        let mut w = state.clone();
        loop {
            if w.peek_state().is_terminated() {
                return true;
            }
            if run_until(w.changed(), deadline).is_none() {
                return w.peek_state().is_terminated();
            }
        }
    }

    /// One watchdog pass: closes sessions past their deadline, forgets ended ones, and returns
    /// the next deadline.
    pub(super) fn watchdog_tick(&self) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut to_close = Vec::new();
        let mut ended = Vec::new();
        for (id, s) in self.sessions.lock().iter() {
            let life = s.life.lock();
            if life.closed {
                if s.state.peek_state().is_terminated() {
                    ended.push(id.clone());
                }
                continue;
            }
            if now >= life.deadline {
                to_close.push((Arc::clone(s), life.lease_duration));
            } else {
                next = Some(next.map_or(life.deadline, |n| n.min(life.deadline)));
            }
        }
        for (s, lease) in to_close {
            let still_due = {
                let life = s.life.lock();
                !life.closed && Instant::now() >= life.deadline
            };
            if still_due {
                log::warn!(
                    "zookeeper session {}: keep-alive not called within the lease duration {lease:?}; \
                     closing it so its leases are freed (watchdog)",
                    s.id
                );
                s.shut();
            }
        }
        if !ended.is_empty() {
            let mut map = self.sessions.lock();
            for id in ended {
                map.remove(&id);
            }
        }
        next
    }
}

pub(super) fn watchdog(inner: Weak<Inner>, signal: Arc<Signal>) {
    loop {
        let next = match inner.upgrade() {
            Some(inner) => inner.watchdog_tick(),
            None => return,
        };
        let mut stop = signal.stop.lock();
        if *stop {
            return;
        }
        let wait = next.map_or(WATCHDOG_MAX_SLEEP, |d| d.saturating_duration_since(Instant::now()));
        // A little past the deadline so the pass finds it due.
        let wait = (wait + Duration::from_millis(1)).min(WATCHDOG_MAX_SLEEP);
        signal.cv.wait_for(&mut stop, wait);
        if *stop {
            return;
        }
    }
}
