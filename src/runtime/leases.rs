//! Lease calls: lock attempts, adopting (or undoing) acquire replies, releases, tokens.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{self, Bug, Sender};

use super::calls::{inline, CallEnd};
use super::wait::Contender;
use super::{pool, CampaignSink, SessionInner};
use crate::backend::Acquire;
use crate::cancel::{Attempt, Cancel};
use crate::engine::{later, AcquireCall, Adoption, CampaignId, Command, NotSent, Step};
use crate::error::{Error, ErrorKind, Result};
use crate::listener::Told;
use crate::observe::{self, Measure};
use crate::types::{Name, Token};

impl SessionInner {
    /// Releases the term `token` of `name` on the backend (the caller already called
    /// `begin_release`). When `done` is given, the result is sent there.
    pub(super) fn dispatch_release(self: &Arc<Self>, name: Name, token: Token, done: Option<Sender<Result<()>>>) {
        let (weak, n) = (Arc::downgrade(self), name.clone());
        let end = CallEnd::new(move |r: Option<&Result<()>>| {
            if let Some(inner) = weak.upgrade() {
                let confirmed = r.is_some_and(Result::is_ok);
                inner.apply(|e| {
                    if confirmed {
                        e.end_confirmed_release(&n, token);
                    } else {
                        e.end_release(&n);
                    }
                    ((), Step::none())
                });
            }
        });
        let backend = self.backend.clone();
        let id = self.id.clone();
        pool::spawn(move || {
            let r = backend.release(&id, &name, token);
            if let Err(err) = &r {
                log::warn!("session {id}: release of '{name}' failed: {err}");
            }
            end.finish(&r);
            if let Some(tx) = done {
                let _ = tx.send(r);
            }
        });
    }

    /// One attempt to acquire `name` and adopt the term, waiting at most until `deadline` (the
    /// attempt's own bound: a previous release of the name still in flight and the acquire call
    /// itself both end by it). `Ok(Some(token))`: the session holds that term now, and the caller
    /// makes it a `Lease` at once (the handle layer builds the guard; the runtime names no
    /// handle); `Ok(None)`: held by someone else (or the reply could not be adopted and was
    /// undone).
    pub(crate) fn attempt_lock(self: &Arc<Self>, name: &Name, deadline: Instant) -> Result<Option<Token>> {
        let epoch = {
            let mut e = self.engine.lock();
            loop {
                let now = sync::now();
                match e.begin_lock(name, now) {
                    Ok(epoch) => break epoch,
                    Err(NotSent::Ended) => {
                        return Err(self.dead_error(&e, now).unwrap_or_else(|| Error::session_expired(&self.id)))
                    }
                    // (`CampaignOver` is a campaign attempt's answer, never a lock's.)
                    Err(NotSent::Held | NotSent::CampaignOver) => {
                        return Err(Error::new(
                            ErrorKind::AlreadyHeld,
                            format!("session {} already holds or campaigns for '{name}'", self.id),
                        ))
                    }
                    Err(NotSent::Releasing) => {
                        if self.cond.wait_until(&mut e, deadline).timed_out() {
                            return Err(Error::new(
                                ErrorKind::Timeout,
                                format!("lease '{name}': a previous release is still in flight"),
                            ));
                        }
                    }
                }
            }
        };
        let sent = sync::now();
        let call_deadline = deadline.min(later(sent, self.timing.query_timeout)).max(sent);
        let reply = if inline(self.call_bound, call_deadline - sent) {
            // The backend returns by itself within the caller's time: call it on this thread. A
            // reply after the deadline (the backend overran its bound) is handled exactly like a
            // worker's late reply: nobody asked for the lease that late, so its term is undone.
            let r = self.backend.acquire(&self.id, name);
            if sync::now() <= call_deadline {
                Some(r)
            } else {
                self.undo_late_acquire(name, r);
                None
            }
        } else {
            let backend = self.backend.clone();
            let (id, n) = (self.id.clone(), name.clone());
            let weak = Arc::downgrade(self);
            let late_name = name.clone();
            pool::call_until(
                call_deadline,
                move || backend.acquire(&id, &n),
                move |late: Result<Acquire>| {
                    if let Some(inner) = weak.upgrade() {
                        inner.undo_late_acquire(&late_name, late);
                    }
                },
            )
        };
        match reply {
            Some(r) => self.finish_acquire(name, sent, epoch, r, None),
            None => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "acquire of '{name}' did not answer within {}",
                    humantime::format_duration(self.timing.query_timeout)
                ),
            )),
        }
    }

    /// Adopts (or undoes) an acquire reply, and ends the operation, in one engine transition. For
    /// a campaign attempt (`campaign`), adoption is election: the election learns it in the same
    /// transition, so it can never lead a term the session no longer holds.
    pub(super) fn finish_acquire(
        self: &Arc<Self>,
        name: &Name,
        sent: Instant,
        epoch: u64,
        reply: Result<Acquire>,
        campaign: Option<(&dyn CampaignSink, CampaignId)>,
    ) -> Result<Option<Token>> {
        use log::Level::{Debug, Info};
        let id = &self.id;
        let call = AcquireCall { sent, epoch, campaign: campaign.map(|(_, c)| c) };
        let campaign = campaign.map(|(election, _)| election);
        let mut late = None; // only the old rule (finding 3) reports after the transition
        let result = self.apply_logged(|e, logs| {
            let now = sync::now();
            match reply {
                Ok(Acquire::Acquired { token, remaining }) => {
                    // The verdict, the undo of a reply not adopted and the operation's end: one
                    // transition.
                    let (adoption, step) = e.acquire_answered(name, call, token, remaining, now);
                    let r = match adoption {
                        Adoption::Adopted => {
                            logs.push(Debug, format!("session {id}: acquired '{name}' (token {token})"));
                            self.tell(Told::Acquired { name: name.clone(), token });
                            logs.measure(Measure::Acquired {
                                backend: self.backend.kind(),
                                kind: observe::kind_of(name),
                            });
                            if let Some(election) = campaign {
                                let won = (election, token, e.remaining(name, now).unwrap_or_default());
                                late = sync::pick_on(Bug::ElectedAfterExpiry, won, Some, |w| self.elect(w, logs));
                            }
                            Ok(Some(token))
                        }
                        // Confirms the very term this session holds (an older campaign attempt,
                        // another thread's lock that won it first): releasing it would end the
                        // held term (finding 4); a second handle of it would too.
                        Adoption::Kept => {
                            logs.push(
                                Debug,
                                format!(
                                    "session {id}: a late acquire reply of '{name}' confirms the held term {token}"
                                ),
                            );
                            if campaign.is_some() {
                                Ok(None)
                            } else {
                                Err(Error::new(
                                    ErrorKind::AlreadyHeld,
                                    format!(
                                        "session {id} already holds '{name}' (token {token}) through another handle"
                                    ),
                                ))
                            }
                        }
                        Adoption::Undo => {
                            logs.push(
                                Info,
                                format!(
                                    "session {id}: acquire of '{name}' (token {token}) came too late or raced a \
                                     release; undoing it"
                                ),
                            );
                            Ok(None)
                        }
                        Adoption::GivenUp => Err(Error::unavailable(format!(
                            "'{name}' (token {token}) was given up by this session (released or lost) and its \
                                 release has not landed on the backend yet; retry"
                        ))),
                        Adoption::SessionEnded => {
                            Err(self.dead_error(e, now).unwrap_or_else(|| Error::session_expired(&self.id)))
                        }
                    };
                    (r, step)
                }
                Ok(Acquire::Busy) => {
                    e.end_acquire(name);
                    (Ok(None), Step::none())
                }
                Err(err) => {
                    e.end_acquire(name);
                    (Err(err), Step::none())
                }
            }
        });
        self.elected_after_transition(name, late);
        result
    }

    /// Reports a campaign's win to its election, in the transition that adopted the term (so the
    /// election never leads a term the session no longer holds). Nothing is left to report after.
    fn elect<'a>(&self, won: Won<'a>, logs: &mut super::Logs) -> Option<Won<'a>> {
        let (election, token, remaining) = won;
        election.elected(token, remaining, &self.id, self.options.metadata(), logs);
        None
    }

    /// The old rule (finding 3 of issue #14, `Bug::ElectedAfterExpiry`; `won` is `None` otherwise):
    /// the win reported after the adopting transition, checked in other lock sections.
    fn elected_after_transition(&self, name: &Name, won: Option<Won<'_>>) {
        let Some((election, token, remaining)) = won else { return };
        if self.campaigns.lock().contains_key(name) && !election.is_resigned() {
            let mut logs = super::Logs::default();
            election.elected(token, remaining, &self.id, self.options.metadata(), &mut logs);
            logs.write();
        }
    }

    /// An acquire nobody waits for any more returned: end the operation and undo the term unless
    /// this session holds that very term anyway.
    fn undo_late_acquire(self: &Arc<Self>, name: &Name, reply: Result<Acquire>) {
        let token = match reply {
            Ok(Acquire::Acquired { token, .. }) => Some(token),
            _ => None,
        };
        self.apply_logged(|e, logs| {
            let step = e.acquire_abandoned(name, token);
            if let Some(Command::Undo { token, .. }) = step.commands.first() {
                logs.push(
                    log::Level::Info,
                    format!(
                        "session {}: acquire of '{name}' (token {token}) answered after its caller gave up; releasing it",
                        self.id
                    ),
                );
            }
            ((), step)
        });
    }

    /// Attempts to take `name` until `deadline` (`None`: forever), through the one wait loop
    /// (`runtime/wait.rs`): the first attempt is always made; every attempt runs to its own bound
    /// (the query timeout) and none is sent after the deadline, so this returns by the deadline
    /// plus at most one bounded call. The term won, as [`attempt_lock`](Self::attempt_lock).
    pub(crate) fn lock_until(self: &Arc<Self>, name: &Name, deadline: Option<Instant>) -> Result<Option<Token>> {
        self.lock_waiting(name, deadline, None, &mut |_| {})
    }

    /// [`lock_until`](Self::lock_until), ended early by `cancel` (`Cancelled`), telling `observe`
    /// of every attempt that did not take the lease.
    pub(crate) fn lock_waiting(
        self: &Arc<Self>,
        name: &Name,
        deadline: Option<Instant>,
        cancel: Option<&Cancel>,
        observe: &mut dyn FnMut(Attempt<'_>),
    ) -> Result<Option<Token>> {
        self.wait_for(&mut LockContender(name), deadline, cancel, observe)
    }

    /// Called by a `Lease`: gives up `name` locally at once and releases it on the backend. Waits
    /// for the result up to the query timeout when `wait` is true.
    pub(crate) fn release_lease(self: &Arc<Self>, name: &Name, token: Token, wait: bool) -> Result<()> {
        let released = self.apply(|e| {
            let released = e.release(name, token);
            if released {
                self.tell(Told::Released { name: name.clone(), token });
            }
            (released, Step::none())
        });
        if released {
            observe::released(self.backend.kind(), observe::kind_of(name));
        }
        if !released {
            log::debug!("session {}: '{}' (token {}) was freed by the session's close", self.id, name, token);
            return Ok(());
        }
        log::debug!("session {}: releasing '{}' (token {})", self.id, name, token);
        self.perform_release(name, token, wait)
    }

    /// Releases the term `token` of `name` on the backend (the engine already counted the release
    /// in flight); waits for the result up to the query timeout when `wait` is true.
    pub(super) fn perform_release(self: &Arc<Self>, name: &Name, token: Token, wait: bool) -> Result<()> {
        if !wait {
            self.dispatch_release(name.clone(), token, None);
            return Ok(());
        }
        if inline(self.call_bound, self.timing.query_timeout) {
            // The backend returns by itself within the query timeout: release on this thread.
            let started = sync::now();
            let r = self.backend.release(&self.id, name, token);
            if let Err(err) = &r {
                log::warn!("session {}: release of '{}' failed: {}", self.id, name, err);
            }
            let took = started.elapsed();
            if took > self.timing.query_timeout {
                log::warn!(
                    "session {}: {} release of '{}' took {}, longer than the query timeout {}",
                    self.id,
                    self.backend.kind(),
                    name,
                    humantime::format_duration(took),
                    humantime::format_duration(self.timing.query_timeout)
                );
            }
            let confirmed = r.is_ok();
            self.apply(|e| {
                if confirmed {
                    e.end_confirmed_release(name, token);
                } else {
                    e.end_release(name);
                }
                ((), Step::none())
            });
            return r;
        }
        let (tx, rx) = sync::bounded(1);
        self.dispatch_release(name.clone(), token, Some(tx));
        match rx.recv_timeout(self.timing.query_timeout) {
            Ok(r) => r,
            Err(_) => Err(Error::new(
                ErrorKind::Timeout,
                format!(
                    "release of '{name}' did not finish within {}; it goes on in the background",
                    humantime::format_duration(self.timing.query_timeout)
                ),
            )),
        }
    }

    /// The token of `name` if this session holds that term and it is valid now.
    /// True while the session holds a term of `name` (as far as it knows).
    pub(crate) fn holds(&self, name: &Name) -> bool {
        self.engine.lock().token(name, sync::now()).is_some()
    }

    pub(crate) fn lease_token(&self, name: &Name, token: Token) -> Result<Token> {
        let e = self.engine.lock();
        let now = sync::now();
        match e.token(name, now) {
            Some(t) if t == token => Ok(t),
            _ => {
                let why = match self.dead_error(&e, now) {
                    Some(err) => err.to_string(),
                    None => "lost, released or past its local deadline".to_string(),
                };
                Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("lease '{name}' (token {token}) is no longer held: {why}"),
                ))
            }
        }
    }

    pub(crate) fn lease_remaining(&self, name: &Name, token: Token) -> Option<Duration> {
        let e = self.engine.lock();
        let now = sync::now();
        (e.token(name, now) == Some(token)).then(|| e.remaining(name, now)).flatten()
    }
}

/// A lock's contender: its one lease, one attempt at a time.
struct LockContender<'a>(&'a Name);

/// A campaign's won term: its election, the token, and the term's remaining time.
type Won<'a> = (&'a dyn CampaignSink, Token, Duration);

impl Contender for LockContender<'_> {
    type Won = Token;

    fn what(&self) -> String {
        format!("lock '{}'", self.0)
    }

    fn waited(&self) -> &Name {
        self.0
    }

    fn leases(&self) -> &[Name] {
        std::slice::from_ref(self.0)
    }

    fn attempt(&mut self, s: &Arc<SessionInner>, _deadline: Option<Instant>, _first: bool) -> Result<Option<Token>> {
        s.attempt_lock(self.0, later(sync::now(), s.timing.query_timeout))
    }
}
