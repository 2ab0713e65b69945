//! [`LeaseBackend::list`] on SQL (`simba status`): what the three listing statements are given
//! ([`ListBounds`]), what they return ([`RawListing`]), and its conversion into a [`Listing`].
//! The statements are `list-leases.sql`, `list-members.sql` and `list-sessions.sql` of each
//! dialect; the cost is described on `SqlBackend`'s `list` and in `docs/backends/sql.md`.

use super::backend::SqlBackend;
use super::*;
use crate::backend::{ListRequest, ListedGroup, ListedLease, ListedSession, Listing, MAX_LIST_LIMIT};

/// A string above every name: names are `[A-Za-z0-9._:-]`, whose largest character is `z`, and
/// `{` follows it. The upper bound of a request whose prefix has none (the empty prefix), so that
/// every statement has both ends of its range: a statement with an optional bound
/// (`$2 is null or name < $2`) can be planned (PostgreSQL's generic plan of a prepared statement)
/// as a scan from the prefix to the end of the table.
pub(crate) const ABOVE_EVERY_NAME: &str = "{";

/// The most rows a listing statement's scan reads on the server (`limit + 1` of the largest
/// limit), live or not: free leases, leases and memberships of expired sessions, expired sessions.
pub(crate) const SCAN_BUDGET: usize = MAX_LIST_LIMIT + 1;

/// What the listing statements are given for a [`ListRequest`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ListBounds {
    /// The prefix: the range's lower end (inclusive).
    pub(crate) from: String,
    /// [`ListRequest::upper_bound`], or [`ABOVE_EVERY_NAME`]: the range's upper end (exclusive).
    pub(crate) to: String,
    /// One more than the request's limit: the most rows of a section (and members of a group).
    pub(crate) take: i64,
    /// The most rows a statement's scan reads ([`SCAN_BUDGET`]; smaller in tests).
    pub(crate) scan: i64,
}

impl ListBounds {
    /// The bounds of `request`.
    pub(crate) fn new(request: &ListRequest) -> ListBounds {
        let to = request.upper_bound().unwrap_or_else(|| ABOVE_EVERY_NAME.to_string());
        // A limit is at most MAX_LIST_LIMIT (checked by ListRequest::new): these always fit.
        let take = i64::try_from(request.limit().saturating_add(1)).unwrap_or(i64::MAX);
        let scan = i64::try_from(SCAN_BUDGET).unwrap_or(i64::MAX);
        ListBounds { from: request.prefix().to_string(), to, take, scan }
    }

    /// What a listing is called in errors.
    pub(crate) fn what(&self) -> String {
        format!("list names from {:?} (simba status)", self.from)
    }
}

/// The rows of the three listing statements, before conversion.
#[derive(Debug, Default)]
pub(crate) struct RawListing {
    /// `(lease name, holder)` of the held leases, by name.
    pub(crate) leases: Vec<(String, RawHolder)>,
    /// The lease scan stopped at its budget: held leases after it are not listed.
    pub(crate) leases_cut: bool,
    /// `(group name, session id, metadata)` of the live members, by group and session.
    pub(crate) members: Vec<(String, String, String)>,
    /// The membership scan stopped at its budget: groups (and members) after it are not listed.
    pub(crate) members_cut: bool,
    /// `(session id, remaining ms, metadata)` of the live sessions, by id.
    pub(crate) sessions: Vec<(String, i64, String)>,
    /// The session scan stopped at its budget: live sessions after it are not listed.
    pub(crate) sessions_cut: bool,
}

/// A row of `list-leases.sql`: name, session id, token, remaining ms and metadata (both NULL for
/// the scan's last row when no live session holds it), place in the scan.
pub(crate) type LeaseRow = (String, String, i64, Option<i64>, Option<String>, i64);

/// A row of `list-members.sql`: group name, session id, metadata (all NULL in the one row of a
/// range without live members), memberships scanned.
pub(crate) type MemberRow = (Option<String>, Option<String>, Option<String>, i64);

/// A row of `list-sessions.sql`: session id, remaining ms (0 or less for the scan's last row when
/// it has expired), metadata, place in the scan.
pub(crate) type SessionRow = (String, i64, String, i64);

impl RawListing {
    /// Adds a row of `list-leases.sql`.
    pub(crate) fn add_lease(&mut self, bounds: &ListBounds, (name, session, token, ms, metadata, nth): LeaseRow) {
        self.leases_cut |= nth >= bounds.scan;
        if let (Some(ms), Some(metadata)) = (ms, metadata) {
            self.leases.push((name, (session, token, ms, metadata)));
        }
    }

    /// Adds a row of `list-members.sql`.
    pub(crate) fn add_member(&mut self, bounds: &ListBounds, (group, session, metadata, scanned): MemberRow) {
        self.members_cut |= scanned >= bounds.scan;
        if let (Some(group), Some(session), Some(metadata)) = (group, session, metadata) {
            self.members.push((group, session, metadata));
        }
    }

    /// Adds a row of `list-sessions.sql`.
    pub(crate) fn add_session(&mut self, bounds: &ListBounds, (session, ms, metadata, nth): SessionRow) {
        self.sessions_cut |= nth >= bounds.scan;
        if ms > 0 {
            self.sessions.push((session, ms, metadata));
        }
    }
}

impl SqlBackend {
    /// [`LeaseBackend::list`] of `request` with the statements given `bounds`.
    pub(super) fn list_within(&self, request: &ListRequest, bounds: &ListBounds) -> Result<Listing> {
        let raw = self.inner.driver.list(bounds)?;
        let mut listing = Listing::default();
        listing.truncated.leases = raw.leases_cut;
        listing.truncated.groups = raw.members_cut;
        listing.truncated.sessions = raw.sessions_cut;
        for (name, (sid, token, remaining_ms, metadata)) in raw.leases {
            let name = self.parse_name("lease", &name)?;
            let session = self.parse_session(&sid)?;
            let token = Token::from_backend(token, &format!("lease '{name}'"))?;
            let remaining = self.remaining(Some(&session), remaining_ms);
            listing.leases.push(ListedLease { name, holder: Holder { session, token, remaining, metadata } });
        }
        for (group, sid, metadata) in raw.members {
            let member = Member { session: self.parse_session(&sid)?, metadata };
            // The rows come by group: a group's members are consecutive.
            match listing.groups.last_mut() {
                Some(g) if g.name.as_str() == group => g.members.push(member),
                _ => {
                    listing.groups.push(ListedGroup { name: self.parse_name("group", &group)?, members: vec![member] })
                }
            }
        }
        for (sid, remaining_ms, metadata) in raw.sessions {
            let id = self.parse_session(&sid)?;
            let remaining = self.remaining(Some(&id), remaining_ms);
            listing.sessions.push(ListedSession { id, remaining, metadata });
        }
        Ok(listing.finish(request))
    }

    /// A lease or group name read from the database (`what`: "lease" or "group").
    fn parse_name(&self, what: &str, name: &str) -> Result<Name> {
        Name::new(name).map_err(|e| {
            Error::backend(format!("{}: corrupt {what} name {name:?} in the database", self.inner.dialect))
                .with_source(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_has_both_ends() {
        let b = ListBounds::new(&ListRequest::new("", 5).unwrap());
        assert_eq!((b.from.as_str(), b.to.as_str(), b.take), ("", ABOVE_EVERY_NAME, 6));
        let longest = "z".repeat(crate::types::MAX_NAME_LEN);
        for name in ["z", longest.as_str(), "Z-9.a:b_c", "-", ".-"] {
            assert!(Name::new(name).is_ok() && name < ABOVE_EVERY_NAME, "{name}");
        }
        let b = ListBounds::new(&ListRequest::new("job_", MAX_LIST_LIMIT).unwrap());
        assert_eq!((b.from.as_str(), b.to.as_str(), b.take), ("job_", "job`", 10_001));
        assert_eq!(b.scan, 10_001);
        assert!(b.what().contains("\"job_\""), "{}", b.what());
    }

    #[test]
    fn the_scan_budget_row_says_the_scan_stopped() {
        let b = ListBounds { from: String::new(), to: "{".into(), take: 3, scan: 4 };
        let mut raw = RawListing::default();
        raw.add_lease(&b, ("a".into(), "s".into(), 1, Some(5), Some("m".into()), 1));
        raw.add_lease(&b, ("b".into(), String::new(), 1, None, None, 3));
        assert!(!raw.leases_cut && raw.leases.len() == 1);
        raw.add_lease(&b, ("c".into(), String::new(), 1, None, None, 4));
        assert!(raw.leases_cut && raw.leases.len() == 1, "the budget row of a free lease is not listed");
        raw.add_member(&b, (None, None, None, 3));
        assert!(!raw.members_cut && raw.members.is_empty(), "no live member: the one row says how far it read");
        raw.add_member(&b, (Some("g".into()), Some("s".into()), Some("m".into()), 4));
        assert!(raw.members_cut && raw.members.len() == 1);
        raw.add_session(&b, ("s".into(), 5, "m".into(), 2));
        assert!(!raw.sessions_cut && raw.sessions.len() == 1);
        raw.add_session(&b, ("t".into(), 0, "m".into(), 4));
        assert!(raw.sessions_cut && raw.sessions.len() == 1, "the budget row of an expired session is not listed");
    }
}
