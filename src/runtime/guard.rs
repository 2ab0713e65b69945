//! Every backend call a session makes goes through [`guarded`]: a call that panics (a
//! third-party SPI implementation, a driver bug) becomes that call's error
//! (`ErrorKind::Backend`, saying it panicked), logged once, as any failed call. So the operation
//! that made it ends as a failed call ends — its engine accounting restored (an acquire, a
//! release, a keep-alive or a join counted in flight is ended), its worker free for the next call
//! — and nothing is left "in flight" for good (finding 5 of issue #36).
//!
//! The wrapper is put around the application's backend once, where a session or a coordinator
//! is opened, so this is the one place the rule is written. (The worker pool also survives a job
//! that panics for another reason: `pool.rs`.)

use std::any::Any;
use std::fmt;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::backend::{
    Acquire, Capabilities, CheckItem, CheckStatus, Holder, KeepAlive, LeaseBackend, ListRequest, Listing, Member,
    Notification, SessionGrant, Topic,
};
use crate::error::{Error, Result};
use crate::observe;
use crate::types::{Name, SessionId, Token};

/// `backend` with every call's panic turned into that call's error.
pub(crate) fn guarded(backend: Arc<dyn LeaseBackend>) -> Arc<dyn LeaseBackend> {
    Arc::new(Guarded(backend))
}

struct Guarded(Arc<dyn LeaseBackend>);

impl fmt::Debug for Guarded {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// What a panic's payload says (a `&str` or `String` message, as `panic!` makes).
pub(crate) fn panic_message(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(a panic without a message)")
}

impl Guarded {
    fn call<T>(&self, op: &'static str, f: impl FnOnce(&dyn LeaseBackend) -> Result<T>) -> Result<T> {
        let started = crate::sync::now();
        let r =
            catch_unwind(AssertUnwindSafe(|| f(&*self.0))).unwrap_or_else(|payload| Err(self.panicked(op, &*payload)));
        observe::spi_call(self.0.kind(), op, started.elapsed(), r.as_ref().err().map(Error::kind));
        r
    }

    fn panicked(&self, op: &str, payload: &(dyn Any + Send)) -> Error {
        let message = format!("{}: the backend's {op} call panicked: {}", self.0.kind(), panic_message(payload));
        log::error!("{message}");
        Error::backend(message)
    }
}

impl LeaseBackend for Guarded {
    fn kind(&self) -> &'static str {
        self.0.kind()
    }
    fn open_session(&self, lease_duration: Duration, metadata: &str) -> Result<SessionGrant> {
        self.call("open_session", |b| b.open_session(lease_duration, metadata))
    }
    fn keep_alive(&self, session: &SessionId, lease_duration: Duration) -> Result<KeepAlive> {
        self.call("keep_alive", |b| b.keep_alive(session, lease_duration))
    }
    fn close_session(&self, session: &SessionId) -> Result<()> {
        self.call("close_session", |b| b.close_session(session))
    }
    fn acquire(&self, session: &SessionId, name: &Name) -> Result<Acquire> {
        self.call("acquire", |b| b.acquire(session, name))
    }
    fn release(&self, session: &SessionId, name: &Name, token: Token) -> Result<()> {
        self.call("release", |b| b.release(session, name, token))
    }
    fn holder(&self, name: &Name) -> Result<Option<Holder>> {
        self.call("holder", |b| b.holder(name))
    }
    fn join(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.call("join", |b| b.join(session, group))
    }
    fn leave(&self, session: &SessionId, group: &Name) -> Result<()> {
        self.call("leave", |b| b.leave(session, group))
    }
    fn members(&self, group: &Name) -> Result<Vec<Member>> {
        self.call("members", |b| b.members(group))
    }
    fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        self.call("semaphore_limit", |b| b.semaphore_limit(name, permits))
    }
    fn call_bound(&self) -> Option<Duration> {
        self.0.call_bound()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn watch(&self, topic: &Topic, notify: &Sender<Notification>) -> Result<bool> {
        self.call("watch", |b| b.watch(topic, notify))
    }
    fn purge_expired(&self) -> Result<usize> {
        self.call("purge_expired", |b| b.purge_expired())
    }
    fn list(&self, request: &ListRequest) -> Result<Listing> {
        self.call("list", |b| b.list(request))
    }
    fn check(&self) -> Vec<CheckItem> {
        catch_unwind(AssertUnwindSafe(|| self.0.check())).unwrap_or_else(|payload| {
            let err = self.panicked("check", &*payload);
            vec![CheckItem { name: "check".into(), status: CheckStatus::Fail, detail: err.to_string() }]
        })
    }
}
