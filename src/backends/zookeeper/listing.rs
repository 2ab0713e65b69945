//! [`LeaseBackend::list`] (`simba status`): the children of
//! `{root}/leases`, `{root}/groups` and `{root}/sessions` (after a write barrier; one `exists`
//! then one `getChildren` each, refused above [`MAX_CHILDREN`]), filtered by prefix and sorted on
//! the client, then node reads for the first entries only: at most `limit + 1` that count plus
//! an allowance for entries that turn out gone ([`gather`]), in pipelined batches. Liveness is
//! judged by [`super::liveness`], as in `holder` and `members`. The cost is written in
//! `docs/backends/zookeeper.md` ("Listing").

use std::cell::Cell;
use std::future::Future;

use super::liveness::{live_member, member_ids};
use super::*;
use crate::backend::{ListedGroup, ListedLease, ListedSession};
use crate::error::ErrorKind;

/// The most children of one parent (`{root}/leases`, `{root}/groups`, `{root}/sessions`, a group)
/// a listing reads: ZooKeeper has no paged child listing, so one `getChildren` reply holds every
/// name, and neither the servers nor this client cap a reply. At this bound a reply is at most
/// ~13 MB (names of 128 characters; ~2.4 MB for names of 20, or session ids).
pub(super) const MAX_CHILDREN: usize = 100_000;

/// Node reads sent at once (one round trip per batch; a lease read is followed by the read of its
/// holder's session node, so up to twice as many requests are in flight).
const READ_BATCH: usize = 256;
/// Groups whose children are read at once: each reply holds every member of its group.
const GROUP_BATCH: usize = 16;
/// The least number of reads per section that may find nothing (a node gone since the children
/// were read, a group container left empty until the server reaps it) before the section is cut.
const MIN_SKIPS: usize = 100;

/// What a listing read, by kind (the test counts them; `list` ignores them).
#[derive(Debug, Default)]
pub(super) struct Reads {
    /// `exists` calls (the three parents' and one per group read), for their number of children.
    pub(super) stats: Cell<usize>,
    /// `getChildren` calls (of the parents and groups that have children).
    pub(super) children: Cell<usize>,
    /// `getData` calls of lease nodes.
    pub(super) leases: Cell<usize>,
    /// `getData` calls of session nodes (a holder's, or a listed session's).
    pub(super) sessions: Cell<usize>,
    /// `getData` calls of member nodes.
    pub(super) members: Cell<usize>,
}

/// What one listing may read: `want` (the limit + 1) entries per section and per group's
/// members, parents of at most `max_children`; its reads counted in `reads`.
struct Bounds<'r> {
    want: usize,
    max_children: usize,
    reads: &'r Reads,
}

impl Reads {
    fn add(counter: &Cell<usize>, n: usize) {
        counter.set(counter.get() + n);
    }
}

/// Reads `candidates` in order with `read`, at most `batch` at a time (one round trip per batch),
/// until `want` of them gave an entry or none is left. A read that gives none (its node is gone,
/// a group has no live member) costs from an allowance of `max(want, MIN_SKIPS)` such reads: at
/// most `want + max(want, MIN_SKIPS)` reads in all. Returns the entries in candidate order and
/// whether candidates were left unread when the allowance ran out (the section is then cut: more
/// may match).
///
/// # Errors
/// The first error of a read (it ends the listing).
async fn gather<C, T, F, Fut>(candidates: &[C], want: usize, batch: usize, mut read: F) -> Result<(Vec<T>, bool)>
where
    F: FnMut(&C) -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let budget = want.saturating_add(want.max(MIN_SKIPS));
    let mut found = Vec::new();
    let mut next = 0;
    while found.len() < want && next < candidates.len() && next < budget {
        let n = (want - found.len()).min(batch).min(budget - next).min(candidates.len() - next);
        let replies = join_all(candidates[next..next + n].iter().map(&mut read)).await;
        next += n;
        for reply in replies {
            found.extend(reply?);
        }
    }
    let cut = found.len() < want && next < candidates.len();
    Ok((found, cut))
}

impl Inner {
    /// [`LeaseBackend::list`], counting its reads in `reads`,
    /// refusing to list a parent with more than `max_children` ([`MAX_CHILDREN`]).
    pub(super) fn list_counted(&self, request: &ListRequest, reads: &Reads, max_children: usize) -> Result<Listing> {
        let deadline = self.query_deadline();
        let client = self.shared(deadline)?;
        let bounds = Bounds { want: request.limit().saturating_add(1), max_children, reads };
        match run_until(self.read_listing(&client, request, &bounds), deadline) {
            Some(listing) => listing,
            None => Err(self.fail(Fail::Timeout, "listing", self.opts.query_timeout)),
        }
    }

    async fn read_listing(&self, client: &Client, request: &ListRequest, b: &Bounds<'_>) -> Result<Listing> {
        let dirs = [self.paths.leases_dir(), self.paths.groups_dir(), self.paths.sessions_dir()];
        // The barrier is sent first (so that every write that returned on any server is seen),
        // then the parents' `exists` at once, each parent's `getChildren` on its answer.
        let ordered = barrier(client, self.paths.root());
        let (leases, groups, sessions) = futures::join!(
            self.children_within(client, &dirs[0], b),
            self.children_within(client, &dirs[1], b),
            self.children_within(client, &dirs[2], b),
        );
        if let Err(e) = ordered.await {
            return Err(self.zk_error(e, "write barrier of the listing"));
        }
        let named = |c: Vec<String>| {
            let mut names: Vec<Name> =
                c.into_iter().filter(|n| request.matches(n)).filter_map(|n| Name::new(n).ok()).collect();
            names.sort();
            names
        };
        let lease_names = named(leases?);
        let group_names = named(groups?);
        let mut ids: Vec<SessionId> = sessions?.iter().filter_map(|c| SessionId::parse(c).ok()).collect();
        ids.sort();
        let mut listing = Listing::default();
        // One section at a time, so that at most one section's batch is in flight.
        let (leases, cut) =
            gather(&lease_names, b.want, READ_BATCH, |name| self.listed_lease(client, name, b.reads)).await?;
        (listing.leases, listing.truncated.leases) = (leases, cut);
        let (groups, cut) =
            gather(&group_names, b.want, GROUP_BATCH, |name| self.listed_group(client, name, b)).await?;
        listing.truncated.groups = cut || groups.iter().any(|(_, cut)| *cut);
        listing.groups = groups.into_iter().map(|(g, _)| g).collect();
        let (sessions, cut) = gather(&ids, b.want, READ_BATCH, |id| self.listed_session(client, id, b.reads)).await?;
        (listing.sessions, listing.truncated.sessions) = (sessions, cut);
        Ok(listing.finish(request))
    }

    /// The children of `path`: none when it does not exist or `exists` says it has none (no
    /// `getChildren` is sent), all when it has at most `b.max_children`.
    ///
    /// # Errors
    /// `Unsupported` when it has more (naming it and how many); the server's errors.
    async fn children_within(&self, client: &Client, path: &str, b: &Bounds<'_>) -> Result<Vec<String>> {
        Reads::add(&b.reads.stats, 1);
        let stat = match client.check_stat(path).await {
            Ok(Some(stat)) => stat,
            Ok(None) => return Ok(Vec::new()), // nothing was ever created there
            Err(e) => return Err(self.zk_error(e, &format!("read of {path}"))),
        };
        let count = usize::try_from(stat.num_children).unwrap_or_default();
        if count == 0 {
            return Ok(Vec::new());
        }
        if count > b.max_children {
            return Err(Error::new(
                ErrorKind::Unsupported,
                format!(
                    "cannot list {path}: it has {count} children, more than the {} a listing reads (ZooKeeper \
                     has no paged child listing: one reply would hold every name); ask for given names instead \
                     (holder, members)",
                    b.max_children
                ),
            ));
        }
        Reads::add(&b.reads.children, 1);
        match client.list_children(path).await {
            Ok(children) => Ok(children),
            Err(ZkError::NoNode) => Ok(Vec::new()), // deleted meanwhile (a container reaped)
            Err(e) => Err(self.zk_error(e, &format!("list of the children of {path}"))),
        }
    }

    /// Lease `name` with its live holder ([`Inner::live_holder`]); `None` when it is free now.
    fn listed_lease<'a>(
        &'a self,
        client: &'a Client,
        name: &Name,
        reads: &'a Reads,
    ) -> impl Future<Output = Result<Option<ListedLease>>> + 'a {
        let name = name.clone();
        let read = client.get_data(&self.paths.lease(&name));
        Reads::add(&reads.leases, 1);
        async move {
            let stat = match read.await {
                Ok((_, stat)) => stat,
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) => return Err(self.zk_error(e, &format!("read of lease {name}"))),
            };
            Reads::add(&reads.sessions, 1);
            let holder = self.live_holder(client, &name, &stat).await?;
            Ok(holder.map(|holder| ListedLease { name, holder }))
        }
    }

    /// Group `name` with its first `want` live members ([`member_ids`], [`live_member`]) and
    /// whether more were left unread; `None` when it has no live member (an empty container not
    /// reaped yet, or gone).
    fn listed_group<'a>(
        &'a self,
        client: &'a Client,
        name: &Name,
        b: &'a Bounds<'a>,
    ) -> impl Future<Output = Result<Option<(ListedGroup, bool)>>> + 'a {
        let name = name.clone();
        let path = self.paths.group(&name);
        async move {
            let children = self.children_within(client, &path, b).await?;
            let mut ids = member_ids(&name, &children);
            drop(children);
            ids.sort();
            let what = format!("read of a member of group {name}");
            let (members, cut) = gather(&ids, b.want, READ_BATCH, |id| {
                let read = client.get_data(&self.paths.member(&name, id));
                Reads::add(&b.reads.members, 1);
                let (id, what) = (id.clone(), &what);
                async move { live_member(self, id, read.await, what) }
            })
            .await?;
            Ok((!members.is_empty()).then_some((ListedGroup { name, members }, cut)))
        }
    }

    /// Session `id` with its time left ([`Inner::remaining_of`]) and metadata; `None` when its
    /// node is gone (it ended since the children were read).
    fn listed_session<'a>(
        &'a self,
        client: &'a Client,
        id: &SessionId,
        reads: &'a Reads,
    ) -> impl Future<Output = Result<Option<ListedSession>>> + 'a {
        let id = id.clone();
        let path = self.paths.session(&id);
        let read = client.get_data(&path);
        Reads::add(&reads.sessions, 1);
        async move {
            let (bound, metadata) = match read.await {
                Ok((data, _)) => decode_session(&data),
                Err(ZkError::NoNode) => return Ok(None),
                Err(e) => return Err(self.zk_error(e, &format!("read of session node {path}"))),
            };
            let remaining = self.remaining_of(client, &id, bound);
            Ok(Some(ListedSession { id, remaining, metadata }))
        }
    }
}

#[cfg(test)]
mod gather_tests {
    use super::*;
    use futures::executor::block_on;

    /// Candidates 0..n; a read of `i` gives an entry unless `gone(i)`; returns (entries, cut, reads).
    fn run(n: usize, want: usize, gone: impl Fn(usize) -> bool) -> (Vec<usize>, bool, usize) {
        let candidates: Vec<usize> = (0..n).collect();
        let reads = Cell::new(0);
        let (found, cut) = block_on(gather(&candidates, want, 7, |&i| {
            reads.set(reads.get() + 1);
            let entry = (!gone(i)).then_some(i);
            async move { Ok(entry) }
        }))
        .unwrap_or_else(|e| panic!("{e}"));
        (found, cut, reads.get())
    }

    #[test]
    fn reads_only_what_it_needs() {
        assert_eq!(run(0, 3, |_| false), (vec![], false, 0));
        assert_eq!(run(1000, 3, |_| false), (vec![0, 1, 2], false, 3));
        assert_eq!(run(2, 3, |_| false), (vec![0, 1], false, 2));
        // Gone entries are made up for by the next candidates.
        assert_eq!(run(1000, 3, |i| i % 2 == 0), (vec![1, 3, 5], false, 6));
    }

    #[test]
    fn skips_are_bounded_and_cut_the_section() {
        // Everything gone: the allowance of max(want, MIN_SKIPS) reads finds nothing, then stops.
        let (found, cut, reads) = run(100_000, 3, |_| true);
        assert!(found.is_empty() && cut, "{found:?} {cut}");
        assert_eq!(reads, 3 + MIN_SKIPS);
        let (found, cut, reads) = run(100_000, 500, |i| i % 4 != 0);
        assert_eq!((found.len(), cut, reads), (250, true, 1000));
        // Exactly exhausted by the allowance: nothing left unread, nothing cut.
        let (found, cut, _) = run(3 + MIN_SKIPS, 3, |_| true);
        assert!(found.is_empty() && !cut);
    }

    #[test]
    fn the_first_error_ends_it() {
        let candidates = [1, 2, 3];
        let r = block_on(gather(&candidates, 5, 2, |&i| async move {
            if i == 2 {
                Err(Error::backend("boom"))
            } else {
                Ok(Some(i))
            }
        }));
        assert!(r.is_err_and(|e| e.to_string().contains("boom")));
    }
}

#[cfg(test)]
mod server_tests;
