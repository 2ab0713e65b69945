//! Which member a call goes to, when several are configured.
//!
//! Every call goes first to the *pinned* member (the first one given, at the start). A call that
//! member cannot take goes on to the next member in the order given:
//! - at once when the connection to it could not be made (refused: nothing was sent), for every
//!   call;
//! - at once when it failed the call with a transport error or an "unavailable" answer (a member
//!   without a leader, a connection reset), and after the *hedge delay* (a quarter of the query
//!   timeout) while it has not answered, for a call that may run twice ([`Resend::Idempotent`]:
//!   every call but the lease grant of a new session, which would grant two leases). The first
//!   answer wins; the other requests are dropped.
//!
//! The member that answers is pinned for the next calls, and a call that must not run twice
//! moves the pin on when the pinned member has not answered within the hedge delay. So a member
//! that stops answering (paused, a half-open connection, a partition that drops packets) costs
//! one hedge delay rather than failing every call routed to it until its connection breaks — the
//! balanced channel used before (tonic's `balance_list`) lost sessions that way
//! (docs/backends/etcd.md, "Faults and failover"). All calls run on the backend's runtime; the
//! caller's bound (`EtcdClient::run`) ends a call that every member leaves unanswered.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::Either;
use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;
use tonic::Status;

use super::client::{never_sent, transient, Clients};

/// The pause before a round of requests is sent again when every member refused a connection.
const RESEND_PAUSE: Duration = Duration::from_millis(5);

/// Whether a call may reach more than one member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Running it twice does no harm: sent on after any transient failure, and hedged.
    Idempotent,
    /// Must not run twice: sent on only when it could not be sent at all.
    Once,
}

/// Which member is pinned, shared by every route of one backend (each runtime has its own
/// channels, all follow one pin).
pub(crate) struct Pin {
    pinned: AtomicUsize,
    hedge_after: Duration,
    /// Tells the watch stream's task where the pin is (it follows the pin: a stream on a member
    /// that stopped answering would wait for the HTTP/2 keep-alive to notice).
    moved: watch::Sender<usize>,
}

impl Pin {
    /// The first member pinned; calls hedged after `hedge_after`.
    pub(crate) fn new(hedge_after: Duration) -> Pin {
        let (moved, _) = watch::channel(0);
        Pin { pinned: AtomicUsize::new(0), hedge_after, moved }
    }
}

/// The members' clients on one runtime (one channel each, connected at first use) and the pin.
pub(crate) struct Route {
    members: Vec<Clients>,
    pin: Arc<Pin>,
}

impl Route {
    /// A route over `members` (at least one, the same members in the same order for every route
    /// of `pin`).
    pub(crate) fn new(members: Vec<Clients>, pin: Arc<Pin>) -> Route {
        Route { members, pin }
    }

    /// The clients of member `i`, in the order given.
    pub(crate) fn member(&self, i: usize) -> Option<&Clients> {
        self.members.get(i)
    }

    /// The pinned member: its index and its clients.
    pub(crate) fn pinned(&self) -> (usize, Clients) {
        let i = self.pin.pinned.load(Ordering::Relaxed) % self.members.len();
        (i, self.members[i].clone())
    }

    /// Told of every move of the pin (its value is the pinned member's index).
    pub(crate) fn subscribe(&self) -> watch::Receiver<usize> {
        self.pin.moved.subscribe()
    }

    fn pin(&self, i: usize) {
        self.pin.pinned.store(i, Ordering::Relaxed);
        self.pin.moved.send_if_modified(|p| std::mem::replace(p, i) != i);
    }

    /// Moves the pin from `from` to the next member, unless it moved meanwhile (a call or the
    /// watch stream found `from` not answering).
    pub(crate) fn pass(&self, from: usize) {
        let next = (from + 1) % self.members.len();
        if self.pin.pinned.compare_exchange(from, next, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            self.pin.moved.send_if_modified(|p| std::mem::replace(p, next) != next);
        }
    }

    /// Runs `op` as the module docs say; `last` keeps the last failure that made it go on (for
    /// the message when the caller's bound ends the call).
    pub(crate) async fn call<T, F, Fut>(
        &self,
        op: &F,
        resend: Resend,
        last: &Mutex<Option<Status>>,
    ) -> Result<T, Status>
    where
        F: Fn(Clients) -> Fut,
        Fut: Future<Output = Result<T, Status>>,
    {
        let n = self.members.len();
        let (first, clients) = self.pinned();
        if n == 1 {
            // One member: nothing to go on to, its refusal is the answer.
            return clients.run(op).await;
        }
        let send = |k: usize| {
            let i = (first + k) % n;
            let clients = self.members[i].clone();
            async move { (i, clients.run(op).await) }
        };
        let mut in_flight = FuturesUnordered::new();
        in_flight.push(send(0));
        // Members of this round a request went to.
        let mut sent = 1;
        let mut hedge = Box::pin(tokio::time::sleep(self.pin.hedge_after));
        loop {
            let next = match futures::future::select(in_flight.next(), hedge.as_mut()).await {
                Either::Left((answer, _)) => Some(answer),
                Either::Right(_) => None,
            };
            match next {
                Some(Some((i, Ok(v)))) => {
                    self.pin(i);
                    return Ok(v);
                }
                Some(Some((_, Err(s)))) if never_sent(&s) || (resend == Resend::Idempotent && transient(&s)) => {
                    *last.lock() = Some(s);
                    if sent < n {
                        in_flight.push(send(sent));
                        sent += 1;
                        hedge.as_mut().reset(Instant::now() + self.pin.hedge_after);
                    } else if in_flight.is_empty() {
                        // Every member failed it: a new round after a pause.
                        tokio::time::sleep(RESEND_PAUSE).await;
                        in_flight.push(send(0));
                        sent = 1;
                        hedge.as_mut().reset(Instant::now() + self.pin.hedge_after);
                    }
                }
                Some(Some((_, Err(s)))) => return Err(s),
                // Never empty here: every branch that empties it pushes again.
                Some(None) => return Err(Status::internal("etcd call routing ran out of requests")),
                None => {
                    match resend {
                        Resend::Idempotent if sent < n => {
                            in_flight.push(send(sent));
                            sent += 1;
                        }
                        Resend::Idempotent => {}
                        Resend::Once => self.pass(first),
                    }
                    hedge.as_mut().reset(Instant::now() + self.pin.hedge_after);
                }
            }
        }
    }
}
