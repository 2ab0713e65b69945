//! The [`LeaseBackend`] implementation: sessions, leases, groups, semaphores' limits, watches and
//! `check`, over the pieces in the other files of this backend.

use super::liveness::{live_member, member_ids};
use super::{listing, *};

impl LeaseBackend for ZookeeperBackend {
    fn kind(&self) -> &'static str {
        "zookeeper"
    }

    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        validate_metadata(metadata)?;
        if lease_duration.is_zero() {
            return Err(Error::config("lease_duration must be > 0"));
        }
        let inner = &self.inner;
        let t0 = Instant::now();
        let deadline = t0 + inner.opts.connection_timeout;
        let client = inner.connect_client(lease_duration, deadline)?;
        let id = SessionId::from_u64(client.session_id().0 as u64);
        let negotiated = client.session_timeout();
        // A keep-alive served by a follower may not have reached the leader, which alone expires
        // sessions: report only what the leader's view surely grants (`tick`, issue #36 finding 4).
        let staleness = tick::staleness(negotiated, inner.server_tick(), inner.connector.is_some());
        let safe = tick::safe_timeout(negotiated, staleness);
        let remaining = lease_duration.min(safe);
        // What `holder` reports to other processes: the longest this session's nodes can outlive
        // a renewal that is never followed by another (the watchdog closes the session after the
        // lease duration; a dead process's session ends after the negotiated timeout).
        let data = encode_session(lease_duration.max(negotiated), metadata);
        let path = inner.paths.session(&id);
        match inner.create_ephemeral(&client, &path, &data, CreateMode::Persistent, deadline) {
            Ok(_) => {}
            Err(f) => {
                drop(client);
                return Err(inner.fail(f, &format!("create of session node {path}"), inner.opts.connection_timeout));
            }
        }
        let session = Arc::new(ZkSession {
            id: id.clone(),
            zk_id: client.session_id().0,
            metadata: metadata.to_string(),
            negotiated,
            safe,
            state: client.state_watcher(),
            client: Mutex::new(Some(client)),
            life: Mutex::new(Life { closed: false, deadline: t0 + lease_duration, lease_duration }),
            leases: Mutex::new(Leases::default()),
            joined: Mutex::new(HashSet::new()),
            release_lock: Mutex::new(()),
        });
        inner.sessions.lock().insert(id.clone(), session);
        inner.watchdog.cv.notify_all();
        if negotiated != lease_duration {
            log::info!(
                "zookeeper session {id}: requested timeout {lease_duration:?}, the ensemble negotiated {negotiated:?}"
            );
        }
        if staleness >= negotiated * 9 / 10 {
            log::warn!(
                "zookeeper session {id}: its timeout {negotiated:?} is not above half the servers' tickTime plus the \
                 client's ping interval ({staleness:?}); a renewal reports only {safe:?} — raise the lease duration"
            );
        }
        log::debug!("zookeeper session {id} opened (remaining {remaining:?})");
        Ok(SessionGrant { id, remaining })
    }

    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(KeepAlive::Expired);
        };
        let t0 = Instant::now();
        let client = match s.gate() {
            Ok(c) => c,
            Err(e) if e.is_session_expired() => return Ok(KeepAlive::Expired),
            Err(e) => return Err(e),
        };
        let deadline = t0 + inner.opts.query_timeout;
        let to_check: Vec<Name> =
            s.leases.lock().pending.iter().filter(|(_, n)| **n == 0).map(|(k, _)| k.clone()).collect();
        // The leases this session holds as far as it knows, taken before the list is sent: only
        // these can be found missing by this keep-alive (a lease acquired meanwhile is newer than
        // the list's answer and stays reported).
        let held: Vec<(Name, Token)> = s.leases.lock().known.iter().map(|(n, t)| (n.clone(), *t)).collect();
        // Pipelined: `sync` (through the leader, which checks the session) proves
        // the session is alive; the session's own nodes are listed and possibly-owned names
        // checked alongside. Each request is sent when its future is created, in this order, and
        // ZooKeeper answers one session's requests in the order they were sent.
        //
        // Leases and groups are reported from the server: `getEphemerals` (ZooKeeper 3.6+) lists
        // the ephemeral nodes *owned by this ZooKeeper session* whose path starts with `{root}`.
        // Sent after the `sync`, it reads the server's tree after every request this session
        // sent before the keep-alive, so: an acquire or join that returned is listed; one whose
        // reply was lost is listed exactly when its create was applied; a release or leave that
        // returned is not listed; a lease or member node deleted behind the session's back
        // (another client, an operator, a shared identity) is not listed, so the lease is
        // reported lost and the membership re-joined; and another session's nodes never are,
        // even one forged at this session's path (ownership, not the path, decides). If that
        // read alone fails, what survived is unknown, and unknown is not lost: the leases this
        // session created and the groups it joined and has not confirmedly left are reported.
        //
        // A session that holds no lease and never joined a group (or confirmedly left them all:
        // `joined` is filled before a join's create is sent and emptied only by a confirmed
        // leave) has nothing to list, so it sends the `sync` alone: one round trip. Otherwise the
        // list is queued behind it without waiting for its reply, but reaches the server only
        // after that reply: zookeeper-client leaves Nagle's algorithm on, so two round trips
        // (docs/benchmarks.md, "ZooKeeper keep-alive", says why we live with it).
        let list = !held.is_empty() || !s.joined.lock().is_empty();
        let sync = client.sync(inner.paths.root());
        let ephemerals = list.then(|| client.list_ephemerals(inner.paths.ephemerals_prefix()));
        let checks: Vec<_> = to_check.iter().map(|n| client.get_data(&inner.paths.lease(n))).collect();
        let res = run_until(
            async move {
                let synced = sync.await;
                let ephemerals = match ephemerals {
                    Some(list) => Some(list.await),
                    None => None,
                };
                (synced, ephemerals, join_all(checks).await)
            },
            deadline,
        );
        let (synced, ephemerals, checks) = match res {
            Some(r) => r,
            None => {
                return Err(inner.fail(
                    Fail::Timeout,
                    &format!("keep-alive of session {session}"),
                    inner.opts.query_timeout,
                ))
            }
        };
        if let Err(e) = synced {
            let f = Fail::Zk(e);
            if f.is_session_end() {
                log::warn!("zookeeper session {session}: ZooKeeper reports it ended ({f:?})");
                s.shut();
                return Ok(KeepAlive::Expired);
            }
            return Err(inner.fail(f, &format!("keep-alive of session {session}"), inner.opts.query_timeout));
        }
        // What the server lists: (groups, lease names); `None` when the list failed (unknown).
        let listed: Option<(BTreeSet<Name>, HashSet<Name>)> = match ephemerals {
            None => Some(Default::default()),
            Some(Ok(paths)) => {
                let (mut groups, mut leases) = (BTreeSet::new(), HashSet::new());
                for p in paths {
                    if let Some(g) = inner.paths.member_group(&p, session) {
                        groups.insert(g);
                    } else if let Some(n) = inner.paths.lease_name(&p) {
                        leases.insert(n);
                    } else if p != inner.paths.session(session) {
                        log::debug!("zookeeper session {session}: ignoring its ephemeral node {p:?}");
                    }
                }
                Some((groups, leases))
            }
            Some(Err(e)) => {
                let f = Fail::Zk(e);
                if f.is_session_end() {
                    log::warn!("zookeeper session {session}: ZooKeeper reports it ended ({f:?})");
                    s.shut();
                    return Ok(KeepAlive::Expired);
                }
                log::info!(
                    "zookeeper session {session}: cannot list its nodes ({f:?}); reporting every lease it created \
                     and every group it joined and did not leave (unknown is not lost)"
                );
                None
            }
        };
        {
            let mut life = s.life.lock();
            if life.closed {
                return Ok(KeepAlive::Expired);
            }
            life.deadline = life.deadline.max(t0 + lease_duration);
            life.lease_duration = lease_duration;
        }
        // What to log is collected under the session's lock and written after it: the
        // application's logger is user code (issue #36, finding 6).
        let mut logs: Vec<(log::Level, String)> = Vec::new();
        let mut l = s.leases.lock();
        for (name, r) in to_check.into_iter().zip(checks) {
            let idle = l.pending.get(&name) == Some(&0);
            match r {
                Ok((_, stat)) if stat.ephemeral_owner == s.zk_id => {
                    if let Ok(t) = token_of(stat.czxid, name.as_str()) {
                        logs.push((
                            log::Level::Info,
                            format!(
                                "zookeeper session {session}: lease {name} (token {t}) whose create outcome was \
                                 unknown is owned; reporting it"
                            ),
                        ));
                        l.known.insert(name.clone(), t);
                    }
                    if idle {
                        l.pending.remove(&name);
                    }
                }
                Ok(_) | Err(ZkError::NoNode) => {
                    if idle {
                        l.pending.remove(&name);
                    }
                }
                Err(e) => logs.push((
                    log::Level::Debug,
                    format!("zookeeper session {session}: cannot check possibly owned lease {name}: {e}"),
                )),
            }
        }
        if let Some((_, leases)) = &listed {
            for (name, token) in held {
                // Still the same term in memory (not released or re-acquired meanwhile), and its
                // node is no longer this session's on the server: lost.
                if !leases.contains(&name) && l.known.get(&name) == Some(&token) {
                    logs.push((
                        log::Level::Warn,
                        format!(
                            "zookeeper session {session}: the node of lease {name} (token {token}) is gone from the \
                             server (deleted by another client); reporting the lease lost"
                        ),
                    ));
                    l.known.remove(&name);
                }
            }
        }
        let mut owned: Vec<(Name, Token)> = l.known.iter().map(|(n, t)| (n.clone(), *t)).collect();
        drop(l);
        for (level, message) in logs {
            log::log!(level, "{message}");
        }
        owned.sort();
        let groups = match listed {
            Some((groups, _)) => groups,
            None => s.joined.lock().iter().cloned().collect(),
        };
        let remaining = lease_duration.min(s.safe);
        // ZooKeeper tells no session's time left: its renewals are the client's pings.
        let groups = groups.into_iter().collect();
        Ok(KeepAlive::Alive { remaining, owned, groups, unknown: Vec::new(), remaining_before: None })
    }

    fn close_session(&self, session: &SessionId) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(());
        };
        s.shut();
        let deadline = inner.query_deadline();
        if Inner::wait_terminated(&s.state, deadline) {
            inner.sessions.lock().remove(session);
            log::debug!("zookeeper session {session} closed");
            Ok(())
        } else {
            Err(Error::unavailable(format!(
                "ZooKeeper did not confirm closing session {session} within {:?}; its ephemeral nodes vanish \
                 when the ensemble ends the session",
                inner.opts.query_timeout
            )))
        }
    }

    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        let inner = &self.inner;
        let s = inner.session(session).ok_or_else(|| Error::session_expired(session))?;
        let client = s.gate()?;
        let t0 = Instant::now();
        let deadline = t0 + inner.opts.query_timeout;
        s.begin_create(name);
        let res = inner.acquire_once(&s, &client, name, deadline);
        match res {
            Ok(Some(czxid)) => {
                let token = match token_of(czxid, name.as_str()) {
                    Ok(t) => t,
                    Err(e) => {
                        s.end_create(name, None, false);
                        return Err(e);
                    }
                };
                s.end_create(name, Some(token), true);
                match s.remaining_from(t0) {
                    // An ephemeral node lives exactly as long as its ZooKeeper session, which the
                    // watchdog closes at its deadline: the term lasts with the session. (A measured
                    // remaining taken while a keep-alive is in flight would be the watchdog's
                    // deadline before that keep-alive, and a reply whose listing predates the
                    // create would not extend it: finding 3 of issue #36.)
                    Some(remaining) if !remaining.is_zero() => {
                        log::debug!("zookeeper session {session}: acquired lease {name} (token {token})");
                        Ok(Acquire::Acquired { token, remaining: crate::backend::TermRemaining::WithSession })
                    }
                    // Closed (or due) meanwhile: the node vanishes with the session.
                    _ => Err(Error::session_expired(session)),
                }
            }
            Ok(None) => {
                s.end_create(name, None, true);
                Ok(Acquire::Busy)
            }
            Err(f) => {
                let unknown = f.is_unknown_outcome();
                s.end_create(name, None, !unknown);
                if f.is_session_end() {
                    s.shut();
                    return Err(Error::session_expired(session));
                }
                if unknown {
                    log::info!("zookeeper session {session}: outcome of acquiring lease {name} unknown; the next keep-alive checks it");
                }
                Err(inner.fail(f, &format!("acquire of lease {name} by session {session}"), inner.opts.query_timeout))
            }
        }
    }

    /// Term-scoped: the term of `token` is the node with that `czxid`. A late delete can never hit
    /// a newer term of the same session: ZooKeeper executes one session's requests in the order
    /// they were sent, and the client never resends a request after a connection loss.
    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(());
        };
        let deadline = inner.query_deadline();
        let Some(one_at_a_time) = s.release_lock.try_lock_until(deadline) else {
            return Err(Error::unavailable(format!(
                "release of lease {name} by session {session}: other releases of the session did not finish within {:?}",
                inner.opts.query_timeout
            )));
        };
        let known = {
            let mut l = s.leases.lock();
            match l.known.get(name).copied() {
                Some(t) if t == token => {
                    l.known.remove(name);
                    // Until the delete is confirmed the name is "possibly owned".
                    l.pending.entry(name.clone()).or_insert(0);
                    Some(t)
                }
                Some(_) => return Ok(()), // another term of this session
                None if l.pending.contains_key(name) => None,
                None => return Ok(()),
            }
        };
        let client = match s.gate() {
            Ok(c) => c,
            Err(e) if e.is_session_expired() => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = inner.paths.lease(name);
        let what = format!("release of lease {name} by session {session}");
        let version = if known.is_some() {
            // We created it and only we delete it while the session lives.
            None
        } else {
            match run_until(client.get_data(&path), deadline) {
                None => return Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id && stat.czxid == token.get() as i64 => {
                    Some(stat.version)
                }
                // Ours in another term: the next keep-alive reports it (with its token).
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id => return Ok(()),
                Some(Ok(_)) | Some(Err(ZkError::NoNode)) => {
                    s.leases.lock().pending.remove(name);
                    return Ok(());
                }
                Some(Err(e)) => return Err(inner.fail(Fail::Zk(e), &what, inner.opts.query_timeout)),
            }
        };
        match run_until(client.delete(&path, version), deadline) {
            Some(Ok(())) | Some(Err(ZkError::NoNode)) => {
                {
                    let mut l = s.leases.lock();
                    if l.pending.get(name) == Some(&0) {
                        l.pending.remove(name);
                    }
                }
                // The application's logger runs under no lock of the session (issue #36, finding 6).
                drop(one_at_a_time);
                log::debug!("zookeeper session {session}: released lease {name} (token {token})");
                Ok(())
            }
            Some(Err(e)) => {
                let f = Fail::Zk(e);
                if f.is_session_end() {
                    s.shut();
                    return Ok(());
                }
                if !f.is_unknown_outcome() {
                    // Definitely not deleted (e.g. denied): it is still ours.
                    if let Some(t) = known {
                        let mut l = s.leases.lock();
                        l.known.insert(name.clone(), t);
                        if l.pending.get(name) == Some(&0) {
                            l.pending.remove(name);
                        }
                    }
                }
                Err(inner.fail(f, &what, inner.opts.query_timeout))
            }
            None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        }
    }

    /// `remaining` is what this backend can know. For a holder session of this backend it is
    /// exact: the time left before the session's deadline (its last renewal plus the lease
    /// duration, when the watchdog closes it). For a session of another process it is **an upper
    /// bound**, `max(lease duration, negotiated session timeout)`, written in the session's node
    /// when it opened: ZooKeeper does not tell clients when a session was last renewed or when it
    /// expires (its leader tracks that internally; only the `dump` four-letter command on the
    /// leader shows expiry times, as wall-clock times, and it is off by default), so a holder
    /// that died a moment ago is reported with the full bound. See `docs/backends/zookeeper.md`.
    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        let inner = &self.inner;
        let deadline = inner.query_deadline();
        let client = inner.shared(deadline)?;
        let path = inner.paths.lease(name);
        let what = format!("read of lease {name}");
        let Some((_, stat)) = inner.synced_read(&client, || client.get_data(&path), deadline, &what)? else {
            return Ok(None);
        };
        match run_until(inner.live_holder(&client, name, &stat), deadline) {
            Some(holder) => holder,
            None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        }
    }

    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        let inner = &self.inner;
        let s = inner.session(session).ok_or_else(|| Error::session_expired(session))?;
        let client = s.gate()?;
        let deadline = inner.query_deadline();
        let path = inner.paths.member(group, session);
        let what = format!("join of group {group} by session {session}");
        // Before the create is sent: from now on the membership may exist (see `joined`).
        s.joined.lock().insert(group.clone());
        match inner.create_ephemeral(&client, &path, s.metadata.as_bytes(), CreateMode::Container, deadline) {
            Ok(Some(_)) => {
                log::debug!("zookeeper session {session}: joined group {group}");
                Ok(())
            }
            Ok(None) => match run_until(client.get_data(&path), deadline) {
                Some(Ok((_, stat))) if stat.ephemeral_owner == s.zk_id => Ok(()),
                Some(Ok(_)) => Err(Error::backend(format!(
                    "member node {path} exists but belongs to another ZooKeeper session; delete it"
                ))),
                Some(Err(ZkError::NoNode)) => {
                    Err(Error::unavailable(format!("member node {path} vanished during {what}; retry")))
                }
                Some(Err(e)) => Err(inner.zk_error(e, &what)),
                None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
            },
            Err(f) => {
                if f.is_session_end() {
                    s.shut();
                    return Err(Error::session_expired(session));
                }
                Err(inner.fail(f, &what, inner.opts.query_timeout))
            }
        }
    }

    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        let inner = &self.inner;
        let Some(s) = inner.session(session) else {
            return Ok(());
        };
        let client = match s.gate() {
            Ok(c) => c,
            Err(e) if e.is_session_expired() => return Ok(()),
            Err(e) => return Err(e),
        };
        let path = inner.paths.member(group, session);
        let what = format!("leave of group {group} by session {session}");
        match run_until(client.delete(&path, None), inner.query_deadline()) {
            Some(Ok(())) | Some(Err(ZkError::NoNode)) => {
                s.joined.lock().remove(group);
                log::debug!("zookeeper session {session}: left group {group}");
                Ok(())
            }
            Some(Err(e)) => {
                let f = Fail::Zk(e);
                if f.is_session_end() {
                    s.shut();
                    return Ok(());
                }
                Err(inner.fail(f, &what, inner.opts.query_timeout))
            }
            None => Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        }
    }

    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        let inner = &self.inner;
        let deadline = inner.query_deadline();
        let client = inner.shared(deadline)?;
        let path = inner.paths.group(group);
        let what = format!("read of group {group}");
        // After a barrier, so a join that returned on any server is visible here.
        let Some(children) = inner.synced_read(&client, || client.list_children(&path), deadline, &what)? else {
            return Ok(Vec::new());
        };
        let ids = member_ids(group, &children);
        let reads: Vec<_> = ids.iter().map(|id| client.get_data(&inner.paths.member(group, id))).collect();
        let datas = match run_until(join_all(reads), deadline) {
            Some(d) => d,
            None => return Err(inner.fail(Fail::Timeout, &what, inner.opts.query_timeout)),
        };
        let mut members = Vec::with_capacity(ids.len());
        for (id, r) in ids.into_iter().zip(datas) {
            // `None`: left (or its session ended) meanwhile.
            members.extend(live_member(inner, id, r, &what)?);
        }
        members.sort();
        Ok(members)
    }

    /// Reads, on the backend's shared reader session, under one deadline (`query_timeout`) for the
    /// whole listing (past it: `Unavailable`):
    ///
    /// - a write barrier (a no-op `multi`: one quorum write, as `holder` and `members` do, so that
    ///   every write that returned through any server is seen), pipelined with an `exists` of
    ///   each of `{root}/leases`, `{root}/groups` and `{root}/sessions` (O(1) each: its number
    ///   of children), then one `getChildren` of each that has children: 2 round trips.
    ///   ZooKeeper has no ranged or paged child listing, so that reply holds every child name:
    ///   O(children) work on the server and bytes on the wire, and neither the servers nor
    ///   `zookeeper-client` cap it (`jute.maxbuffer`, 1 MB by default, bounds what a server
    ///   accepts and what the Java client accepts: `zkCli` fails such an `ls` with
    ///   `ConnectionLoss`). So a parent with more than 100,000 children (a reply of up to ~13 MB)
    ///   is not listed: the listing fails with `Unsupported` naming it and its count, after its
    ///   `exists`, without its `getChildren`. A million leases are refused that way.
    /// - the prefix is matched and the names sorted on the client; then only the first matches
    ///   are read, in pipelined batches of at most 256 (a round trip each): per section at most
    ///   `limit + 1` reads that find an entry plus `max(limit + 1, 100)` that find none (a node
    ///   gone since its parent was listed, a group container left empty until the server reaps
    ///   it); when that allowance runs out with names unread, the section is cut there and says
    ///   so. A lease costs two reads (its node, then its holder's session node), a session one, a
    ///   group an `exists`, a `getChildren` when it has members (same bound; at most 16 groups in
    ///   flight) and up to the same bound of member reads. A prefix that matches no name reads no
    ///   lease, group or member node.
    ///
    /// Liveness is judged as `holder` and `members` judge it (the `liveness` module): a lease's
    /// holder is its node's ephemeral owner whose session node exists, a member is a member node
    /// that exists, a session is a session node that exists; time left as `holder` reports it
    /// (exact for this backend's sessions, the session's upper bound for another process's). See
    /// `docs/backends/zookeeper.md`, "Listing (`simba status`)".
    fn list(&self, request: &ListRequest) -> Result<Listing> {
        self.inner.list_counted(request, &Default::default(), listing::MAX_CHILDREN)
    }

    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        self.inner.semaphore_limit(name, permits)
    }

    fn call_bound(&self) -> Option<Duration> {
        // Every call waits for its replies with `run_until` against one deadline of `query_timeout`.
        Some(self.inner.opts.query_timeout)
    }

    fn capabilities(&self) -> Capabilities {
        // A lease watch is an `exists` watch: a free lease fires it at once.
        Capabilities { push_release: true, push_membership: true, watch_checks_lease: true, list: true }
    }

    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        let inner = &self.inner;
        if !inner.watches.add(topic, notify)? {
            return Ok(true); // a watch is already armed for this topic
        }
        let deadline = inner.query_deadline();
        let client = match inner.shared(deadline) {
            Ok(c) => c,
            Err(e) => {
                inner.watches.fire(topic);
                return Err(e);
            }
        };
        let (path, what) = match topic {
            Topic::Lease(n) => (inner.paths.lease(n), format!("watch of lease {n}")),
            Topic::Group(g) => (inner.paths.group(g), format!("watch of group {g}")),
        };
        let fail = |f: Fail| {
            inner.watches.fire(topic);
            Err(inner.fail(f, &what, inner.opts.query_timeout))
        };
        match topic {
            Topic::Lease(_) => match run_until(client.check_and_watch_stat(&path), deadline) {
                Some(Ok((None, _))) => inner.watches.fire(topic), // free already: tell at once
                Some(Ok((Some(_), w))) => inner.watches.fire_after(topic.clone(), async move {
                    let _ = w.changed().await;
                }),
                Some(Err(e)) => return fail(Fail::Zk(e)),
                None => return fail(Fail::Timeout),
            },
            Topic::Group(_) => match run_until(client.get_and_watch_children(&path), deadline) {
                Some(Ok((_, _, w))) => inner.watches.fire_after(topic.clone(), async move {
                    let _ = w.changed().await;
                }),
                // The group does not exist yet: watch its creation.
                Some(Err(ZkError::NoNode)) => match run_until(client.check_and_watch_stat(&path), deadline) {
                    Some(Ok((None, w))) => inner.watches.fire_after(topic.clone(), async move {
                        let _ = w.changed().await;
                    }),
                    Some(Ok((Some(_), _))) => inner.watches.fire(topic), // created meanwhile
                    Some(Err(e)) => return fail(Fail::Zk(e)),
                    None => return fail(Fail::Timeout),
                },
                Some(Err(e)) => return fail(Fail::Zk(e)),
                None => return fail(Fail::Timeout),
            },
        }
        Ok(true)
    }

    fn check(&self) -> Vec<CheckItem> {
        let inner = &self.inner;
        let mut items = vec![inner.watches.check_item()];
        let deadline = inner.query_deadline();
        let client = match inner.shared(deadline) {
            Ok(c) => c,
            Err(e) => {
                items.push(CheckItem {
                    name: "reachable".into(),
                    status: CheckStatus::Fail,
                    detail: crate::error::display_chain(&e),
                });
                return items;
            }
        };
        match run_until(client.sync("/"), deadline) {
            Some(Ok(())) => items.push(CheckItem {
                name: "reachable".into(),
                status: CheckStatus::Ok,
                detail: format!(
                    "ZooKeeper at {} answered (session {:?}, negotiated timeout {:?})",
                    inner.hosts,
                    client.session_id(),
                    client.session_timeout()
                ),
            }),
            r => {
                let detail = match r {
                    Some(Err(e)) => format!("sync failed: {e}"),
                    _ => format!("no answer within {:?}", inner.opts.query_timeout),
                };
                items.push(CheckItem { name: "reachable".into(), status: CheckStatus::Fail, detail });
                return items;
            }
        }
        let root = inner.paths.root();
        let mode = inner.opts.effective_acl().describe();
        let anyone_can_write = inner.acls.iter().any(writable_by_anyone);
        let acl_item = match run_until(client.get_acl(root), deadline) {
            None => CheckItem {
                name: "acl".into(),
                status: CheckStatus::Fail,
                detail: format!("no answer reading the ACL of {root} within {:?}", inner.opts.query_timeout),
            },
            Some(Err(ZkError::NoNode)) => CheckItem {
                name: "acl".into(),
                status: if anyone_can_write { CheckStatus::Warn } else { CheckStatus::Ok },
                detail: format!(
                    "{root} does not exist yet; the backend creates it with ACL mode {mode}{}",
                    if anyone_can_write {
                        ": any client can delete or pre-create lease nodes; use auth + creator-all on a shared ensemble"
                    } else {
                        ""
                    }
                ),
            },
            Some(Err(e)) => CheckItem {
                name: "acl".into(),
                status: CheckStatus::Fail,
                detail: crate::error::display_chain(&inner.zk_error(e, &format!("read of the ACL of {root}"))),
            },
            Some(Ok((acls, _))) => {
                let open = acls.iter().any(writable_by_anyone);
                let shown: Vec<String> =
                    acls.iter().map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission())).collect();
                CheckItem {
                    name: "acl".into(),
                    status: if open { CheckStatus::Warn } else { CheckStatus::Ok },
                    detail: format!(
                        "ACL of {root}: [{}]; backend ACL mode {mode}{}",
                        shown.join(", "),
                        if open {
                            "; the root is writable by anyone: any client can delete or pre-create lease nodes \
                             (existing nodes keep their ACL: recreate them with the backend's identity or set their ACL)"
                        } else {
                            ""
                        }
                    ),
                }
            }
        };
        items.push(acl_item);
        items.push(inner.access_item(&client, deadline));
        items.push(CheckItem {
            name: "transport".into(),
            status: CheckStatus::Ok,
            // The reader session above is open, so a TLS handshake verified the server.
            detail: match &inner.opts.tls {
                Some(_) => format!(
                    "encrypted: {} (rustls, TLS 1.2/1.3; the server's certificate chains to the configured CA \
                     and names the host)",
                    inner.transport()
                ),
                None => format!(
                    "not encrypted: {}, the server is not authenticated (set ZookeeperOptions::tls / \
                     SIMBA_ZOOKEEPER_TLS_CA for the servers' secureClientPort)",
                    inner.transport()
                ),
            },
        });
        items.push(inner.tick_item());
        items.push(CheckItem {
            name: "clock".into(),
            status: CheckStatus::Ok,
            detail: "ZooKeeper is clock-independent: session timeouts are measured by the ensemble's elapsed time, \
                     so no wall clock is compared"
                .into(),
        });
        items
    }
}
