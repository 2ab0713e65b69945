//! [`LeaseBackend::list`] against the real servers (PostgreSQL and MySQL/MariaDB), where the TCK
//! (which compares listings with the memory backend's) cannot reach:
//!
//! - the range is the prefix exactly: `name >= prefix and name < upper bound` excludes the name
//!   equal to the upper bound (`joc` for `job`), `_` is a name character and no wildcard (`a_b`
//!   does not list `aXb1`, which `LIKE 'a_b%'` would), and the empty prefix (no upper bound)
//!   reaches the last name;
//! - each section is cut in the SQL: the driver receives `limit + 1` rows of each (and of each
//!   group's members), not every row;
//! - each scan stops at its budget, free leases, memberships of expired sessions and expired
//!   sessions included, and the listing then says `truncated`: a held lease, a group or a
//!   session after the budget is not read.
//!
//! Each test works in a private PostgreSQL schema / MySQL database (dropped at the end), so the
//! sessions section holds this test's sessions only. URLs: `SIMBA_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `SIMBA_TEST_MYSQL_URL` (default
//! `mysql://root@127.0.0.1:3306/test`); start the servers with `scripts/services up`.

use std::collections::BTreeSet;
use std::time::Duration;

use super::purge_tests::Namespace;
use super::{Dialect, ListBounds, SqlBackend, SqlOptions};
use crate::backend::{Acquire, LeaseBackend, ListRequest, Listing};
use crate::types::{Name, SessionId};

const LEASE: Duration = Duration::from_secs(60);

/// A backend in a private namespace, its schema created (no background purge).
struct Fixture {
    backend: SqlBackend,
    _namespace: Namespace,
}

impl Fixture {
    fn new(dialect: Dialect) -> Fixture {
        let namespace = Namespace::create(dialect, "simba_list");
        let options = SqlOptions::builder().query_timeout(Duration::from_secs(5)).auto_purge(false).build().unwrap();
        let backend = SqlBackend::from_url(&namespace.url, options).unwrap();
        backend.init_schema().unwrap_or_else(|e| panic!("{e} (run scripts/services up)"));
        Fixture { backend, _namespace: namespace }
    }

    fn open(&self, metadata: &str) -> SessionId {
        self.backend.open_session(LEASE, metadata).unwrap().id
    }

    fn acquire(&self, s: &SessionId, name: &str) {
        let got = self.backend.acquire(s, &Name::new(name).unwrap()).unwrap();
        assert!(matches!(got, Acquire::Acquired { .. }), "{name}: {got:?}");
    }

    fn join(&self, s: &SessionId, group: &str) {
        self.backend.join(s, &Name::new(group).unwrap()).unwrap();
    }

    fn list(&self, prefix: &str, limit: usize) -> Listing {
        self.backend.list(&ListRequest::new(prefix, limit).unwrap()).unwrap()
    }

    /// The listing of `prefix` with the scans' budget set to `scan` rows.
    fn list_scanning(&self, prefix: &str, limit: usize, scan: i64) -> Listing {
        let request = ListRequest::new(prefix, limit).unwrap();
        let bounds = ListBounds { scan, ..ListBounds::new(&request) };
        self.backend.list_within(&request, &bounds).unwrap()
    }
}

fn leases(l: &Listing) -> Vec<&str> {
    l.leases.iter().map(|x| x.name.as_str()).collect()
}

fn groups(l: &Listing) -> Vec<&str> {
    l.groups.iter().map(|g| g.name.as_str()).collect()
}

fn range_is_the_prefix_exactly(dialect: Dialect) {
    let fx = Fixture::new(dialect);
    let s = fx.open("range");
    let names = ["jo", "joa", "job", "job.z", "job_1", "jobzz", "joc", "jocc", "a_b", "a_b1", "aXb1", "zzzz"];
    for n in names {
        fx.acquire(&s, n);
        fx.join(&s, n);
    }
    let job = fx.list("job", 100);
    assert_eq!(ListRequest::new("job", 1).unwrap().upper_bound().as_deref(), Some("joc"));
    assert_eq!(leases(&job), ["job", "job.z", "job_1", "jobzz"], "the upper bound 'joc' itself is not listed");
    assert_eq!(groups(&job), ["job", "job.z", "job_1", "jobzz"]);
    let under = fx.list("a_b", 100);
    assert_eq!(leases(&under), ["a_b", "a_b1"], "'_' is a name character, not LIKE's wildcard");
    assert_eq!(groups(&under), ["a_b", "a_b1"]);
    let all = fx.list("", 100);
    assert_eq!(ListRequest::new("", 1).unwrap().upper_bound(), None);
    let mut sorted = names.to_vec();
    sorted.sort_unstable();
    assert_eq!(leases(&all), sorted, "the empty prefix (no upper bound) lists every name, the last one too");
    assert_eq!(groups(&all), sorted);
    assert_eq!(leases(&fx.list("zzzz", 100)), ["zzzz"]);
    assert!(!all.truncated.any(), "{:?}", all.truncated);
    let ids: Vec<&SessionId> = all.sessions.iter().map(|x| &x.id).collect();
    assert_eq!(ids, [&s]);
    for l in &all.leases {
        assert_eq!((&l.holder.session, l.holder.metadata.as_str()), (&s, "range"), "{l:?}");
        assert!(!l.holder.remaining.is_zero() && l.holder.remaining <= LEASE, "{l:?}");
    }
    assert!(all.groups.iter().all(|g| g.members.len() == 1 && g.members[0].session == s), "{all:?}");
}

fn sections_are_cut_in_the_sql(dialect: Dialect) {
    let fx = Fixture::new(dialect);
    let sessions: Vec<SessionId> = (0..5).map(|i| fx.open(&format!("cut{i}"))).collect();
    for (i, s) in sessions.iter().enumerate() {
        fx.acquire(s, &format!("p-l{i}"));
        for member in &sessions {
            fx.join(member, &format!("p-g{i}"));
        }
    }
    // The driver's rows: limit + 1 of each, so the statements cut them (LIMIT), not the client.
    let request = ListRequest::new("p-", 2).unwrap();
    let raw = fx.backend.inner.driver.list(&ListBounds::new(&request)).unwrap();
    assert_eq!(raw.leases.len(), 3, "held leases: limit + 1 rows of 5");
    assert_eq!(raw.sessions.len(), 3, "live sessions: limit + 1 rows of 5");
    let raw_groups: BTreeSet<&str> = raw.members.iter().map(|(g, _, _)| g.as_str()).collect();
    assert_eq!(raw_groups.len(), 3, "groups: limit + 1 of 5: {:?}", raw.members);
    assert_eq!(raw.members.len(), 9, "members: limit + 1 of each group's 5: {:?}", raw.members);
    assert!(!raw.leases_cut && !raw.members_cut, "no scan reached its budget");
    let l = fx.backend.list(&request).unwrap();
    assert_eq!(leases(&l), ["p-l0", "p-l1"]);
    assert_eq!(groups(&l), ["p-g0", "p-g1"]);
    assert!(l.groups.iter().all(|g| g.members.len() == 2), "{l:?}");
    assert_eq!(l.sessions.len(), 2);
    assert!(l.truncated.leases && l.truncated.groups && l.truncated.sessions, "{:?}", l.truncated);
}

fn scans_stop_at_their_budget(dialect: Dialect) {
    let fx = Fixture::new(dialect);
    let s = fx.open("budget");
    // Six lease rows, the first four free (released: lease rows stay), the last two held.
    for i in 0..6 {
        fx.acquire(&s, &format!("q-{i}"));
    }
    for i in 0..4 {
        let name = Name::new(format!("q-{i}")).unwrap();
        let token = fx.backend.holder(&name).unwrap().unwrap().token;
        fx.backend.release(&s, &name, token).unwrap();
    }
    let at = |scan| fx.list_scanning("q-", 10, scan);
    let four = at(4);
    assert!(four.leases.is_empty() && four.truncated.leases, "four free rows read, then stopped: {four:?}");
    let five = at(5);
    assert_eq!(leases(&five), ["q-4"], "q-5, after the budget, is not read");
    assert!(five.truncated.leases);
    let seven = at(7);
    assert_eq!(leases(&seven), ["q-4", "q-5"]);
    assert!(!seven.truncated.leases, "the range ended before the budget");
    // Two groups of three live members: the membership scan stops in the second one.
    let others: Vec<SessionId> = (0..2).map(|i| fx.open(&format!("budget{i}"))).collect();
    for group in ["r-a", "r-b"] {
        for m in others.iter().chain([&s]) {
            fx.join(m, group);
        }
    }
    let cut = fx.list_scanning("r-", 10, 4);
    assert_eq!(groups(&cut), ["r-a", "r-b"]);
    assert_eq!((cut.groups[0].members.len(), cut.groups[1].members.len()), (3, 1), "{cut:?}");
    assert!(cut.truncated.groups, "{:?}", cut.truncated);
    let whole = fx.list_scanning("r-", 10, 7);
    assert!(whole.groups.iter().all(|g| g.members.len() == 3) && !whole.truncated.groups, "{whole:?}");
    // Three live sessions (s and the two others): the session scan stops at two of them.
    let sessions = fx.list_scanning("", 10, 2);
    assert!(sessions.sessions.len() == 2 && sessions.truncated.sessions, "{sessions:?}");
    let sessions = fx.list_scanning("", 10, 4);
    assert!(sessions.sessions.len() == 3 && !sessions.truncated.sessions, "{sessions:?}");
    // Memberships of expired sessions (not purged yet) count too: a range of dead rows ends the
    // scan as well, and says so.
    for _ in 0..4 {
        let dead = fx.backend.open_session(Duration::from_millis(100), "dead").unwrap().id;
        fx.join(&dead, "t-a");
    }
    fx.join(&s, "t-b");
    std::thread::sleep(Duration::from_millis(300));
    let dead = fx.list_scanning("t-", 10, 4);
    assert!(dead.groups.is_empty() && dead.truncated.groups, "four dead memberships read, then stopped: {dead:?}");
    let past = fx.list_scanning("t-", 10, 6);
    assert_eq!(groups(&past), ["t-b"]);
    assert!(!past.truncated.groups, "{past:?}");
    let sessions = fx.list_scanning("", 10, 100);
    assert!(
        sessions.sessions.len() == 3 && !sessions.truncated.sessions,
        "expired sessions are not listed: {sessions:?}"
    );
}

macro_rules! per_dialect {
    ($module:ident, $feature:literal, $dialect:expr) => {
        #[cfg(feature = $feature)]
        mod $module {
            use super::*;

            #[test]
            #[serial_test::serial($module)]
            fn list_range_is_the_prefix_exactly() {
                range_is_the_prefix_exactly($dialect);
            }

            #[test]
            #[serial_test::serial($module)]
            fn list_sections_are_cut_in_the_sql() {
                sections_are_cut_in_the_sql($dialect);
            }

            #[test]
            #[serial_test::serial($module)]
            fn list_scans_stop_at_their_budget() {
                scans_stop_at_their_budget($dialect);
            }
        }
    };
}

per_dialect!(postgres, "postgres", Dialect::Postgres);
per_dialect!(mysql, "mysql", Dialect::Mysql);
