//! What the client remembers about each session it works with, beyond what Redis stores:
//! terms it abandoned (never to be reported as owned, released by later renewals), calls in
//! flight (so a renewal does not drop an index entry an acquire or join is about to use), on
//! standalone the last listing of the session's lease index, and on Cluster the index entries to
//! drop and renewal follow-ups that keep failing.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::sync::{now, pick, Bug, Mutex};

use crate::types::{Name, SessionId, Token};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Item {
    Lease(Name),
    Group(Name),
}

/// Standalone: the session's lease index as the last renewal that listed it returned it — or as
/// this client's own acquires and releases changed it since — with the index's generation (`gen`
/// in the session hash, bumped by every change of the index). A renewal names the generation,
/// and the server lists the index again only when it differs.
#[derive(Debug, Clone)]
pub(crate) struct Listing {
    pub gen: String,
    pub owned: Arc<HashMap<Name, Token>>,
}

impl Listing {
    /// Follows one change this client's own call made to the index, which the server made in the
    /// same script as it bumped the generation to `gen`: a listing exact at `gen - 1` is then
    /// exact at `gen`. Any other listing is left as it is (another change came between, or the
    /// reply overtook an earlier one), and so is one a renewal is reading right now (never copied
    /// on the caller's path): the server lists the index again at the next renewal, as it did
    /// before this client followed its own changes. Returns whether the listing followed.
    pub fn follow(&mut self, gen: i64, change: impl FnOnce(&mut HashMap<Name, Token>)) -> bool {
        if self.gen.parse::<i64>().ok().and_then(|g| g.checked_add(1)) != Some(gen) {
            return false;
        }
        let Some(owned) = Arc::get_mut(&mut self.owned) else { return false };
        change(owned);
        self.gen = gen.to_string();
        true
    }
}

/// Cluster: the last listing of the session's lease index (a set of names), with each name's
/// slot, and the index's generation when it was listed: renewals ask for it again only when the
/// generation changed.
#[derive(Debug, Clone)]
pub(crate) struct Index {
    pub gen: String,
    pub leases: Arc<Vec<(Name, u16)>>,
}

#[derive(Default)]
pub(crate) struct Book {
    /// Standalone: the last listing of the session's lease index.
    pub listing: Option<Listing>,
    /// Cluster: the last listing of the session's lease index.
    pub index: Option<Index>,
    /// Cluster: the session's lease duration, as its open set it or its session call last
    /// reported it (an acquire that knows it sends its session and lease calls together).
    pub duration: Option<Duration>,
    /// Terms an acquire started but reported as failed (late, or not acknowledged by replicas),
    /// remembered for one lease period. Never reported as owned; renewals release them.
    pub abandoned: HashMap<Name, (Token, Instant)>,
    /// Terms acquires reported to the caller (until released).
    pub confirmed: HashMap<Name, Token>,
    /// Acquires and joins in progress.
    pub inflight: HashMap<Item, usize>,
    /// When the last acquire or join of an item finished (Cluster: a renewal that started before
    /// then may have looked at the lease or group before the acquire or join reached it).
    pub finished: HashMap<Item, Instant>,
    /// Cluster: lease names whose renewal follow-up failed, since when.
    pub failing: HashMap<Name, Instant>,
    /// Cluster: leases and groups to remove from the session's indexes at the next renewal (see
    /// [`Book::schedule_drop`]). An acquire or join of the item unschedules it.
    pub drops: HashSet<Item>,
    /// Cluster: leases and groups the next renewal indexes again: a renewal removed them while
    /// this client acquired or joined them again (see [`Book::index_changes_sent`]).
    pub reindex: HashSet<Item>,
}

/// Cluster: the index changes one renewal took from the book and sends with its session call.
#[derive(Debug)]
pub(crate) struct IndexChanges {
    /// Items to remove from the indexes.
    pub drops: Vec<Item>,
    /// Items to (re-)add to the indexes.
    pub reindex: Vec<Item>,
    /// When they were taken: an acquire or join of a dropped item since may have indexed it
    /// before the removal reached the server.
    pub taken: Instant,
}

impl IndexChanges {
    /// The lease names and the group names of `items`.
    pub fn split(items: &[Item]) -> (Vec<&Name>, Vec<&Name>) {
        let (mut leases, mut groups) = (Vec::new(), Vec::new());
        for item in items {
            match item {
                Item::Lease(n) => leases.push(n),
                Item::Group(n) => groups.push(n),
            }
        }
        (leases, groups)
    }
}

impl Book {
    fn is_empty(&self) -> bool {
        self.listing.is_none()
            && self.index.is_none()
            && self.duration.is_none()
            && self.abandoned.is_empty()
            && self.confirmed.is_empty()
            && self.inflight.is_empty()
            && self.finished.is_empty()
            && self.failing.is_empty()
            && self.drops.is_empty()
            && self.reindex.is_empty()
    }

    /// Remembers an abandoned term for one lease period `d` — unless another acquire of this
    /// session already reported that very term to the caller (then the term is held legitimately
    /// and must not be released). Returns whether the term was abandoned (and must be released).
    pub fn try_abandon(&mut self, name: Name, token: Token, d: Duration) -> bool {
        let reported = pick(Bug::AbandonConfirmed, false, self.confirmed.get(&name) == Some(&token)); // old: unchecked
        if reported {
            return false;
        }
        self.confirmed.remove(&name);
        self.abandoned.insert(name, (token, now() + d));
        true
    }

    /// Standalone: the listing follows one change this client's call made to the index, which
    /// the server reported with the generation `gen` it produced (0: the index did not change,
    /// nothing to follow). See [`Listing::follow`].
    pub fn follow_index(&mut self, gen: i64, change: impl FnOnce(&mut HashMap<Name, Token>)) {
        if let (true, Some(l)) = (gen > 0, self.listing.as_mut()) {
            l.follow(gen, change);
        }
    }

    /// The abandoned terms still worth releasing; older ones are forgotten (and, on Cluster,
    /// their names leave the index).
    pub fn live_abandoned(&mut self, now: Instant) -> Vec<(Name, Token)> {
        let expired: Vec<Name> =
            self.abandoned.iter().filter(|(_, (_, until))| now >= *until).map(|(n, _)| n.clone()).collect();
        for n in expired {
            self.abandoned.remove(&n);
            self.schedule_drop(Item::Lease(n), now);
        }
        self.abandoned.iter().map(|(n, (t, _))| (n.clone(), *t)).collect()
    }

    /// True when an acquire or join of `item` is in flight, or finished after `since`: a renewal
    /// that started at `since` must then not drop the item from the session's index.
    pub fn touched_since(&self, item: &Item, since: Instant) -> bool {
        self.inflight.get(item).is_some_and(|n| *n > 0) || self.finished.get(item).is_some_and(|t| *t >= since)
    }

    /// Cluster: schedules `item`'s removal from the session's index at the next renewal, found
    /// lost (or given up) by a renewal that started at `since` — unless an acquire or join of the
    /// item is in flight or finished since: that one may have established a term or membership
    /// the renewal did not see, and a removal would unindex it (issue #36, finding 1). Returns
    /// whether it was scheduled.
    pub fn schedule_drop(&mut self, item: Item, since: Instant) -> bool {
        if self.touched_since(&item, since) {
            return false;
        }
        self.reindex.remove(&item);
        self.drops.insert(item)
    }

    /// Cluster: takes the index changes the next session call sends (`now`: when).
    pub fn take_index_changes(&mut self, now: Instant) -> IndexChanges {
        IndexChanges { drops: self.drops.drain().collect(), reindex: self.reindex.drain().collect(), taken: now }
    }

    /// Cluster: the session call that carried `changes` returned (`applied`: it ran; otherwise it
    /// may or may not have). A dropped item this client acquired or joined again since the changes
    /// were taken may have been indexed by that acquire or join before the removal reached the
    /// server: the next renewal indexes it again (its own reply may not list it; the term or
    /// membership was established after its send, which the engine does not judge by it). Items
    /// not sent for sure are kept for the next renewal.
    pub fn index_changes_sent(&mut self, changes: IndexChanges, applied: bool) {
        let taken = changes.taken;
        for item in changes.drops {
            if self.touched_since(&item, taken) {
                self.drops.remove(&item);
                self.reindex.insert(item);
            } else if !applied {
                self.drops.insert(item);
            }
        }
        if !applied {
            for item in changes.reindex {
                if !self.drops.contains(&item) {
                    self.reindex.insert(item);
                }
            }
        }
    }

    /// Whether a renewal may report `(name, token)` as owned: not while an acquire of `name` is in
    /// flight that may still fail (late, or not acknowledged) — unless the caller already holds
    /// that very term.
    pub fn reportable(&self, name: &Name, token: Token) -> bool {
        self.inflight.get(&Item::Lease(name.clone())).is_none_or(|n| *n == 0)
            || self.confirmed.get(name) == Some(&token)
    }

    /// Records a term about to be reported to the caller — unless a late acquire of this session
    /// abandoned that very term (its release may land at any time): then it must not be reported.
    /// Returns whether the term may be reported.
    pub fn try_confirm(&mut self, name: &Name, token: Token) -> bool {
        let abandoned = pick(Bug::AbandonConfirmed, false, self.abandoned.get(name).is_some_and(|(t, _)| *t == token));
        if abandoned {
            return false;
        }
        self.abandoned.remove(name);
        self.confirmed.insert(name.clone(), token);
        true
    }

    /// Forgets the released term `token` of `name` (a newer term stays).
    pub fn released(&mut self, name: &Name, token: Token) {
        if self.abandoned.get(name).is_some_and(|(t, _)| *t == token) {
            self.abandoned.remove(name);
        }
        if self.confirmed.get(name) == Some(&token) {
            self.confirmed.remove(name);
        }
    }

    /// Forgets finish times older than `before`.
    pub fn prune_finished(&mut self, before: Instant) {
        self.finished.retain(|_, t| *t >= before);
    }
}

/// Log records made while the books' lock is held, written once it is released: the application's
/// logger is user code, and the books' mutex is shared by every session of the backend (a slow
/// logger would stall them all, one that calls back into simba would deadlock; issue #36, finding
/// 6).
pub(crate) struct Logs {
    target: &'static str,
    records: Vec<(log::Level, String)>,
}

impl Logs {
    /// Records to be written with `target` (the caller's `module_path!()`).
    pub fn new(target: &'static str) -> Logs {
        Logs { target, records: Vec::new() }
    }

    pub fn push(&mut self, level: log::Level, message: String) {
        self.records.push((level, message));
    }

    /// Writes the records; call it with no internal lock held.
    pub fn write(self) {
        for (level, message) in self.records {
            log::log!(target: self.target, level, "{message}");
        }
    }
}

/// The books of every session this backend works with.
pub(crate) struct Books {
    map: Mutex<HashMap<SessionId, Book>>,
    /// Cluster only: remember when acquires and joins finish.
    track_finish: bool,
}

impl Books {
    pub fn new(track_finish: bool) -> Books {
        Books { map: Mutex::new(HashMap::new()), track_finish }
    }

    /// Runs `f` on the session's book (created empty when missing; removed again when left empty).
    pub fn with<R>(&self, sid: &SessionId, f: impl FnOnce(&mut Book) -> R) -> R {
        let mut map = self.map.lock();
        let book = map.entry(sid.clone()).or_default();
        let r = f(book);
        if book.is_empty() {
            map.remove(sid);
        }
        r
    }

    /// Forgets the session (closed or expired).
    pub fn forget(&self, sid: &SessionId) {
        self.map.lock().remove(sid);
    }

    /// Marks an acquire or join as in flight until the guard drops.
    /// An item scheduled for removal from the session's index is unscheduled: the acquire or
    /// join may establish a term or membership the renewal that scheduled it did not see.
    pub fn inflight<'a>(&'a self, sid: &SessionId, item: Item) -> Inflight<'a> {
        self.with(sid, |b| {
            // Finding 1 of issue #36 switched back on by the explorer: the removal stays scheduled.
            crate::sync::fixed_only(crate::sync::Bug::DropOutlivesReacquire, || b.drops.remove(&item));
            *b.inflight.entry(item.clone()).or_default() += 1;
        });
        Inflight { books: self, sid: sid.clone(), item }
    }
}

pub(crate) struct Inflight<'a> {
    books: &'a Books,
    sid: SessionId,
    item: Item,
}

impl Inflight<'_> {
    /// True when no other acquire or join of the same item by the same session is in flight.
    pub fn alone(&self) -> bool {
        self.books.with(&self.sid, |b| b.inflight.get(&self.item).copied().unwrap_or(0) <= 1)
    }
}

impl Drop for Inflight<'_> {
    fn drop(&mut self) {
        let mut map = self.books.map.lock();
        if let Some(book) = map.get_mut(&self.sid) {
            if let Some(n) = book.inflight.get_mut(&self.item) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    book.inflight.remove(&self.item);
                }
            }
            if self.books.track_finish {
                book.finished.insert(self.item.clone(), now());
            }
            if book.is_empty() {
                map.remove(&self.sid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The simulation's Cluster finding: a late acquire must never abandon (release) a term another
    /// acquire of the session already reported, and a reported term must never be one that was
    /// abandoned.
    #[test]
    fn abandon_and_confirm_exclude_each_other() {
        let n = Name::new("x").unwrap();
        let (t5, t6) = (Token::new(5).unwrap(), Token::new(6).unwrap());
        let d = Duration::from_secs(1);
        let mut b = Book::default();
        assert!(b.try_confirm(&n, t5));
        assert!(!b.try_abandon(n.clone(), t5, d), "a reported term was abandoned");
        assert!(b.try_abandon(n.clone(), t6, d));
        assert!(!b.try_confirm(&n, t6), "an abandoned term was reported");
        b.released(&n, t6);
        assert!(b.try_confirm(&n, t6));
    }

    /// Issue #36 finding 1: a removal scheduled for the next renewal never removes a term or
    /// membership established after the renewal that scheduled it. An acquire or join unschedules
    /// it; one that runs while the next renewal already sends it has the item indexed again by the
    /// renewal after; and a removal found lost while an acquire is in flight is not scheduled.
    #[test]
    fn a_scheduled_removal_never_outlives_a_new_acquire_or_join() {
        let books = Books::new(true);
        let sid = SessionId::random();
        let (x, g) = (Item::Lease(Name::new("x").unwrap()), Item::Group(Name::new("g").unwrap()));
        let t0 = now();
        for item in [&x, &g] {
            assert!(books.with(&sid, |b| b.schedule_drop(item.clone(), t0)));
            drop(books.inflight(&sid, item.clone()));
            let taken = books.with(&sid, |b| b.take_index_changes(now()));
            assert!(taken.drops.is_empty(), "{item:?}: the acquire or join unscheduled it");
        }
        // Taken by a renewal, then acquired again before the renewal's session call returned.
        assert!(books.with(&sid, |b| b.schedule_drop(x.clone(), now())));
        let taken = books.with(&sid, |b| b.take_index_changes(now()));
        assert_eq!(taken.drops, vec![x.clone()]);
        drop(books.inflight(&sid, x.clone()));
        books.with(&sid, |b| b.index_changes_sent(taken, true));
        let next = books.with(&sid, |b| b.take_index_changes(now()));
        assert_eq!((next.drops.len(), next.reindex), (0, vec![x.clone()]), "indexed again");
        // Not touched since: the removal stands; a failed session call keeps it for the next one.
        assert!(books.with(&sid, |b| b.schedule_drop(g.clone(), now())));
        let taken = books.with(&sid, |b| b.take_index_changes(now()));
        books.with(&sid, |b| b.index_changes_sent(taken, false));
        assert_eq!(books.with(&sid, |b| b.take_index_changes(now())).drops, vec![g.clone()]);
        // In flight: not scheduled at all.
        let guard = books.inflight(&sid, x.clone());
        assert!(!books.with(&sid, |b| b.schedule_drop(x.clone(), now())));
        drop(guard);
    }

    /// A listing follows only the change that comes right after it, and never copies a listing
    /// a renewal is reading: otherwise it stays stale (the server lists the index again).
    #[test]
    fn a_listing_follows_only_the_next_change_and_never_a_shared_one() {
        let (a, b) = (Name::new("a").unwrap(), Name::new("b").unwrap());
        let (t1, t2) = (Token::new(1).unwrap(), Token::new(2).unwrap());
        let mut l = Listing { gen: "7".into(), owned: Arc::new(HashMap::from([(a.clone(), t1)])) };
        assert!(
            !l.follow(9, |o| {
                o.insert(b.clone(), t2);
            }),
            "gen 8 came between"
        );
        assert!(
            !l.follow(7, |o| {
                o.remove(&a);
            }),
            "an older change"
        );
        assert_eq!((l.gen.as_str(), l.owned.len()), ("7", 1));
        assert!(l.follow(8, |o| {
            o.insert(b.clone(), t2);
        }));
        assert_eq!(l.gen, "8");
        assert_eq!(l.owned.get(&b), Some(&t2));
        let reading = l.owned.clone();
        assert!(
            !l.follow(9, |o| {
                o.remove(&a);
            }),
            "a renewal holds the listing"
        );
        assert_eq!((l.gen.as_str(), reading.len()), ("8", 2));
        drop(reading);
        assert!(l.follow(9, |o| {
            o.remove(&a);
        }));
        assert_eq!((l.gen.as_str(), l.owned.len()), ("9", 1));
        let mut bad = Listing { gen: String::new(), owned: Arc::new(HashMap::new()) };
        assert!(
            !bad.follow(1, |o| {
                o.insert(a.clone(), t1);
            }),
            "no generation listed yet"
        );
    }
}
