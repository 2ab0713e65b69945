//! What a backend holds right now, for operators: [`LeaseBackend::list`](super::LeaseBackend::list)
//! and its request and reply types (`simba status`).

use std::time::Duration;

use super::{Holder, Member};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{Name, SessionId, MAX_NAME_LEN};

/// The largest [`ListRequest::limit`].
pub const MAX_LIST_LIMIT: usize = 10_000;

/// What [`LeaseBackend::list`](super::LeaseBackend::list) reads: held leases and groups whose
/// names start with a prefix, and live sessions, at most `limit` of each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListRequest {
    prefix: String,
    limit: usize,
}

impl ListRequest {
    /// Leases and groups whose names start with `prefix` (`""`: every name), and live sessions;
    /// at most `limit` of each (and of each group's members).
    ///
    /// # Errors
    /// [`ErrorKind::InvalidName`] when `prefix` is longer than a name or has a character no name
    /// has (names are `[A-Za-z0-9._:-]`); [`ErrorKind::InvalidConfig`] when `limit` is 0 or above
    /// [`MAX_LIST_LIMIT`]. Checked here, before any I/O.
    pub fn new(prefix: impl Into<String>, limit: usize) -> Result<ListRequest> {
        let prefix = prefix.into();
        if let Some(c) = prefix.chars().find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-'))) {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "invalid name prefix {prefix:?}: character {c:?} is not allowed; a prefix is up to {MAX_NAME_LEN} \
                     characters of [A-Za-z0-9._:-] (the characters of names), or empty for every name"
                ),
            ));
        }
        if prefix.chars().count() > MAX_NAME_LEN {
            return Err(Error::new(
                ErrorKind::InvalidName,
                format!(
                    "invalid name prefix: {} characters; names have at most {MAX_NAME_LEN}",
                    prefix.chars().count()
                ),
            ));
        }
        if limit == 0 || limit > MAX_LIST_LIMIT {
            return Err(Error::new(
                ErrorKind::InvalidConfig,
                format!("invalid list limit {limit}: allowed is 1 to {MAX_LIST_LIMIT} entries per section"),
            ));
        }
        Ok(ListRequest { prefix, limit })
    }

    /// The name prefix (`""`: every name).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// At most this many entries per section (and members per group).
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Whether `name` is asked for.
    pub fn matches(&self, name: &str) -> bool {
        name.starts_with(&self.prefix)
    }

    /// The smallest string above every name starting with the prefix, for a range scan
    /// (`name >= prefix and name < upper`); `None` when there is none (an empty prefix, or one of
    /// only the largest name character): scan to the end.
    pub fn upper_bound(&self) -> Option<String> {
        // The name characters' largest is 'z' (0x7A); the successor of the last character that
        // has one, with what follows dropped.
        let mut chars: Vec<char> = self.prefix.chars().collect();
        while let Some(c) = chars.pop() {
            if let Some(next) = char::from_u32(c as u32 + 1) {
                chars.push(next);
                return Some(chars.into_iter().collect());
            }
        }
        None
    }
}

/// A held lease in a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedLease {
    /// The lease name (semaphore permits and partitions are leases with reserved names:
    /// `simba.sem:<semaphore>:<slot>`, `simba.part:<set>:<index>`).
    pub name: Name,
    /// Its live holder.
    pub holder: Holder,
}

/// A group with live members in a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    /// The group name (a partition set's members are the group `simba.part:<set>`).
    pub name: Name,
    /// Its live members, sorted by session id (at most the request's limit).
    pub members: Vec<Member>,
}

/// A live session in a [`Listing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedSession {
    /// The session.
    pub id: SessionId,
    /// Time until it expires without renewal, by the backend's clock.
    pub remaining: Duration,
    /// Its metadata.
    pub metadata: String,
}

/// Which sections of a [`Listing`] had more entries than the request's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Truncated {
    /// More held leases matched.
    pub leases: bool,
    /// More groups matched, or a listed group has more members.
    pub groups: bool,
    /// More sessions are live.
    pub sessions: bool,
}

impl Truncated {
    /// Whether any section was cut.
    pub fn any(&self) -> bool {
        self.leases || self.groups || self.sessions
    }
}

/// What [`LeaseBackend::list`](super::LeaseBackend::list) found: a snapshot, each section sorted
/// (leases and groups by name, sessions by id). A lease held by an expired session, a member
/// whose session expired and an expired session are not listed; nor is a free lease or a group
/// with no live member.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Listing {
    /// Held leases.
    pub leases: Vec<ListedLease>,
    /// Groups with live members.
    pub groups: Vec<ListedGroup>,
    /// Live sessions.
    pub sessions: Vec<ListedSession>,
    /// Sections cut at the limit.
    pub truncated: Truncated,
}

impl Listing {
    /// Sorts every section, cuts each to `request`'s limit and records which were cut: for a
    /// backend that gathers up to `limit + 1` entries per section (one more than it returns, to
    /// know whether there are more) in any order.
    pub fn finish(mut self, request: &ListRequest) -> Listing {
        let limit = request.limit();
        self.leases.sort_by(|a, b| a.name.cmp(&b.name));
        self.groups.sort_by(|a, b| a.name.cmp(&b.name));
        self.sessions.sort_by(|a, b| a.id.cmp(&b.id));
        for g in &mut self.groups {
            g.members.sort();
            if g.members.len() > limit {
                g.members.truncate(limit);
                self.truncated.groups = true;
            }
        }
        self.truncated.leases |= self.leases.len() > limit;
        self.truncated.groups |= self.groups.len() > limit;
        self.truncated.sessions |= self.sessions.len() > limit;
        self.leases.truncate(limit);
        self.groups.truncate(limit);
        self.sessions.truncate(limit);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_is_checked_before_any_io() {
        assert!(ListRequest::new("", 1).is_ok());
        assert!(ListRequest::new("jobs.a:b-c_d", MAX_LIST_LIMIT).is_ok());
        let e = ListRequest::new("jobs*", 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidName);
        assert!(e.to_string().contains("'*' is not allowed"), "{e}");
        assert!(ListRequest::new("a".repeat(MAX_NAME_LEN + 1), 10).is_err());
        assert!(ListRequest::new("a".repeat(MAX_NAME_LEN), 10).is_ok());
        let e = ListRequest::new("", 0).unwrap_err();
        assert!(e.to_string().contains("1 to 10000"), "{e}");
        assert!(ListRequest::new("", MAX_LIST_LIMIT + 1).is_err());
    }

    /// A backend written before `list` existed: every required method, nothing else.
    #[derive(Debug)]
    struct NoList(crate::backends::memory::MemoryBackend);

    impl crate::backend::LeaseBackend for NoList {
        fn kind(&self) -> &'static str {
            "old"
        }
        fn open_session(&self, d: Duration, m: &str) -> Result<crate::backend::SessionGrant> {
            self.0.open_session(d, m)
        }
        fn keep_alive(&self, s: &SessionId, d: Duration) -> Result<crate::backend::KeepAlive> {
            self.0.keep_alive(s, d)
        }
        fn close_session(&self, s: &SessionId) -> Result<()> {
            self.0.close_session(s)
        }
        fn acquire(&self, s: &SessionId, n: &Name) -> Result<crate::backend::Acquire> {
            self.0.acquire(s, n)
        }
        fn release(&self, s: &SessionId, n: &Name, t: crate::types::Token) -> Result<()> {
            self.0.release(s, n, t)
        }
        fn holder(&self, n: &Name) -> Result<Option<Holder>> {
            self.0.holder(n)
        }
        fn join(&self, s: &SessionId, g: &Name) -> Result<()> {
            self.0.join(s, g)
        }
        fn leave(&self, s: &SessionId, g: &Name) -> Result<()> {
            self.0.leave(s, g)
        }
        fn members(&self, g: &Name) -> Result<Vec<Member>> {
            self.0.members(g)
        }
    }

    #[test]
    fn a_backend_without_list_says_so() {
        use crate::backend::LeaseBackend;
        let e = NoList(Default::default()).list(&ListRequest::new("", 1).unwrap()).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Unsupported);
        assert!(e.to_string().contains("the old backend cannot list what it holds"), "{e}");
    }

    #[test]
    fn upper_bound_is_above_every_name_with_the_prefix() {
        let r = |p: &str| ListRequest::new(p, 1).unwrap();
        assert_eq!(r("").upper_bound(), None);
        assert_eq!(r("job").upper_bound().as_deref(), Some("joc"));
        assert_eq!(r("a:").upper_bound().as_deref(), Some("a;"));
        for name in ["job", "job.x", "jobzzzz", "job-1"] {
            let u = r("job").upper_bound().unwrap();
            assert!(name < u.as_str() && name >= "job", "{name}");
        }
        assert!("joc" >= r("job").upper_bound().unwrap().as_str());
    }

    #[test]
    fn finish_sorts_cuts_and_says_so() {
        let req = ListRequest::new("", 2).unwrap();
        let sid = |c: char| SessionId::parse(&c.to_string().repeat(32)).unwrap();
        let session =
            |c: char| ListedSession { id: sid(c), remaining: Duration::from_secs(1), metadata: String::new() };
        let member = |c: char| Member { session: sid(c), metadata: String::new() };
        let group = |n: &str, m: Vec<Member>| ListedGroup { name: Name::new(n).unwrap(), members: m };
        let l = Listing {
            leases: vec![],
            groups: vec![group("b", vec![member('b'), member('a')]), group("a", vec![member('c')])],
            sessions: vec![session('c'), session('a'), session('b')],
            truncated: Truncated::default(),
        }
        .finish(&req);
        assert_eq!(l.sessions.iter().map(|s| s.id.clone()).collect::<Vec<_>>(), [sid('a'), sid('b')]);
        assert_eq!(l.groups[0].name.as_str(), "a");
        assert_eq!(l.groups[1].members, [member('a'), member('b')]);
        assert_eq!(l.truncated, Truncated { leases: false, groups: false, sessions: true });
        let cut =
            Listing { groups: vec![group("a", vec![member('a'), member('b'), member('c')])], ..Listing::default() }
                .finish(&req);
        assert!(cut.truncated.groups && cut.groups[0].members.len() == 2);
    }
}
