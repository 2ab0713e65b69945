//! A model of the Redis Cluster backend (SPEC §6.3): sessions and leases live on different nodes,
//! each with its own clock; every script touches one node, and only durations pass between nodes.
//!
//! The node side mirrors the Cluster Lua scripts (`lua/*_session.lua`, `acquire_lease.lua`,
//! `renew_slot.lua`, `release_slot.lua`, `close_session_*.lua`); the client side (the order of
//! scripts, the elapsed-time rules, the book of abandoned terms) lives in the simulator's world.

use std::collections::{BTreeMap, BTreeSet};

use super::clock::NodeClock;
use super::history::Event;
use crate::types::{Name, SessionId, Token};

/// A script sent to one node.
#[derive(Debug, Clone)]
pub(crate) enum Script {
    OpenSession { sid: SessionId, sess: u32, d: u64 },
    KeepAliveSession { sid: SessionId, sess: u32, d: u64, drop: Vec<Name> },
    AcquireSession { sid: SessionId, sess: u32, name: Name },
    AcquireLease { sid: SessionId, sess: u32, name: Name, d: u64 },
    RenewSlot { sid: SessionId, sess: u32, carry: u64, renew: Vec<Name>, release: Vec<(Name, Token)> },
    IndexRemove { sid: SessionId, names: Vec<Name> },
    ReleaseSlot { sid: SessionId, sess: u32, leases: Vec<(Name, Option<Token>)> },
    CloseBegin { sid: SessionId, sess: u32 },
    CloseEnd { sid: SessionId },
}

/// A node's reply.
#[derive(Debug, Clone)]
pub(crate) enum ScriptReply {
    /// The session is gone.
    Gone,
    Opened {
        remaining: u64,
    },
    Session {
        remaining: u64,
        leases: Vec<Name>,
    },
    SessionOk {
        remaining: u64,
        d: u64,
    },
    LeaseBusy,
    LeaseOk {
        token: Token,
        new: bool,
    },
    Renewed {
        tokens: Vec<Option<Token>>,
    },
    Index {
        leases: Vec<Name>,
    },
    Done,
    /// A corrupt state (token 0): reported as a failed call.
    Error,
}

#[derive(Debug)]
struct NSession {
    expires: u64,
    d: u64,
}

#[derive(Debug, Default)]
struct NLease {
    session: Option<SessionId>,
    token: u64,
    expires: u64,
}

/// One cluster node (one master; replicas are not modelled: a failover that loses writes is a
/// data loss).
#[derive(Debug)]
pub(crate) struct Node {
    pub(crate) clock: NodeClock,
    sessions: BTreeMap<SessionId, NSession>,
    indexes: BTreeMap<SessionId, BTreeSet<Name>>,
    leases: BTreeMap<Name, NLease>,
}

impl Node {
    pub(crate) fn new(clock: NodeClock) -> Node {
        Node { clock, sessions: BTreeMap::new(), indexes: BTreeMap::new(), leases: BTreeMap::new() }
    }

    /// Forgets everything (restart without persistence).
    pub(crate) fn lose_data(&mut self) {
        self.sessions.clear();
        self.indexes.clear();
        self.leases.clear();
    }

    /// The session key, if it has not expired at `now` (an expired key is gone, as in Redis).
    fn live(&mut self, sid: &SessionId, now: u64) -> Option<&mut NSession> {
        let alive = self.sessions.get(sid).is_some_and(|s| s.expires > now);
        if !alive {
            self.sessions.remove(sid);
            return None;
        }
        self.sessions.get_mut(sid)
    }

    /// Runs `script` at node-clock instant `b`, recording what took effect.
    pub(crate) fn apply(&mut self, node: u8, b: u64, script: Script, out: &mut Vec<Event>) -> ScriptReply {
        match script {
            Script::OpenSession { sid, sess, d } => {
                self.sessions.insert(sid, NSession { expires: b + d, d });
                out.push(Event::Opened { node, b, sess, until: b + d });
                ScriptReply::Opened { remaining: d }
            }
            Script::KeepAliveSession { sid, sess, d, drop } => {
                let Some(s) = self.live(&sid, b) else {
                    out.push(Event::Refused { node, b, sess });
                    return ScriptReply::Gone;
                };
                s.expires = b + d;
                out.push(Event::Renewed { node, b, sess, until: b + d });
                let index = self.indexes.entry(sid).or_default();
                for n in &drop {
                    index.remove(n);
                }
                ScriptReply::Session { remaining: d, leases: index.iter().cloned().collect() }
            }
            Script::AcquireSession { sid, sess, name } => {
                let Some(s) = self.live(&sid, b) else {
                    out.push(Event::Refused { node, b, sess });
                    return ScriptReply::Gone;
                };
                let (remaining, d) = (s.expires - b, s.d);
                out.push(Event::SessionChecked { node, b, sess });
                self.indexes.entry(sid).or_default().insert(name);
                ScriptReply::SessionOk { remaining, d }
            }
            Script::AcquireLease { sid, sess, name, d } => {
                let l = self.leases.entry(name.clone()).or_default();
                let mine = l.session.as_ref() == Some(&sid);
                if mine && l.expires > b {
                    l.expires = l.expires.max(b + d);
                    let Some(token) = Token::new(l.token) else { return ScriptReply::Error };
                    out.push(Event::Granted { node, b, sess, name, token, until: l.expires });
                    return ScriptReply::LeaseOk { token, new: false };
                }
                if l.session.is_some() && l.expires > b {
                    out.push(Event::Busy { node, b, sess, name });
                    return ScriptReply::LeaseBusy;
                }
                l.token += 1;
                l.session = Some(sid);
                l.expires = b + d;
                let Some(token) = Token::new(l.token) else { return ScriptReply::Error };
                out.push(Event::Granted { node, b, sess, name, token, until: l.expires });
                ScriptReply::LeaseOk { token, new: true }
            }
            Script::RenewSlot { sid, sess, carry, renew, release } => {
                let cap = b + carry;
                let mut tokens = Vec::with_capacity(renew.len());
                for name in renew {
                    let l = self.leases.entry(name.clone()).or_default();
                    if l.session.as_ref() == Some(&sid) && l.expires > b {
                        if l.expires < cap {
                            l.expires = cap;
                        }
                        let token = Token::new(l.token);
                        if let Some(token) = token {
                            out.push(Event::Extended { node, b, sess, name, token, until: l.expires });
                        }
                        tokens.push(token);
                    } else {
                        tokens.push(None);
                    }
                }
                for (name, token) in release {
                    let l = self.leases.entry(name.clone()).or_default();
                    if l.session.as_ref() == Some(&sid) && l.token == token.get() {
                        l.session = None;
                        out.push(Event::Released { node, b, sess, name, token: Some(token) });
                    }
                }
                ScriptReply::Renewed { tokens }
            }
            Script::IndexRemove { sid, names } => {
                if let Some(index) = self.indexes.get_mut(&sid) {
                    for n in &names {
                        index.remove(n);
                    }
                }
                ScriptReply::Done
            }
            Script::ReleaseSlot { sid, sess, leases } => {
                for (name, token) in leases {
                    let l = self.leases.entry(name.clone()).or_default();
                    if l.session.as_ref() == Some(&sid) && token.is_none_or(|t| t.get() == l.token) {
                        l.session = None;
                        out.push(Event::Released { node, b, sess, name, token });
                    }
                }
                ScriptReply::Done
            }
            Script::CloseBegin { sid, sess } => {
                if self.sessions.remove(&sid).is_some() {
                    out.push(Event::Deleted { node, b, sess, frees_leases: false });
                }
                let leases = self.indexes.get(&sid).map(|i| i.iter().cloned().collect()).unwrap_or_default();
                ScriptReply::Index { leases }
            }
            Script::CloseEnd { sid } => {
                self.indexes.remove(&sid);
                ScriptReply::Done
            }
        }
    }
}
