//! Property tests of the decoding of SQL rows (issue 15, item 5). The dialects read each column
//! into raw values (`RawAlive`, `RawAcquire`, `RawHolder`, member rows: strings and `i64`s, any of
//! which another writer could have corrupted); `SqlBackend` turns them into the SPI's types. A
//! driver that answers with generated rows checks that any row decodes or is a clear `Backend`
//! error — never a panic — and that well-formed rows decode to what they hold. (The real
//! drivers' column reads are exercised against the real servers by the TCK and
//! `tests/corrupt_data.rs`; rows of the real driver crates cannot be built in a unit test.)

use std::time::Duration;

use parking_lot::Mutex;
use proptest::prelude::*;

use super::{
    Dialect, Driver, ListBounds, RawAcquire, RawAlive, RawHolder, RawKeepAlive, RawListing, SqlBackend, SqlOptions,
};
use crate::backend::{Acquire, KeepAlive, LeaseBackend, ListRequest};
use crate::error::{Error, ErrorKind, Result};
use crate::types::{Name, SessionId, Token};

/// A keep-alive result as the driver reads it: remaining ms, owned `(name, token)` rows, group
/// rows.
type AliveRows = (i64, Vec<(String, i64)>, Vec<String>);

/// The listing's rows: `(name, holder)`, `(group, session id, metadata)`, `(session id, remaining
/// ms, metadata)`.
type ListingRows = (Vec<(String, RawHolder)>, Vec<(String, String, String)>, Vec<(String, i64, String)>);

/// What the scripted driver answers.
#[derive(Debug, Clone, Default)]
struct Rows {
    /// `None`: expired.
    keep_alive: Option<AliveRows>,
    acquire: Option<(i64, i64)>,
    holder: Option<RawHolder>,
    members: Vec<(String, String)>,
    listing: ListingRows,
    now_ms: i64,
    tables: i64,
    version: String,
}

struct Scripted(Mutex<Rows>);

impl Driver for Scripted {
    fn init_schema(&self) -> Result<()> {
        Ok(())
    }
    fn open_session(&self, _: &SessionId, _: i64, _: &str) -> Result<()> {
        Ok(())
    }
    fn keep_alive(&self, _: &SessionId, _: i64) -> Result<RawKeepAlive> {
        let r = self.0.lock();
        Ok(r.keep_alive.clone().map(|(remaining_ms, owned, groups)| RawAlive {
            remaining_ms,
            owned,
            groups,
            before_ms: None,
        }))
    }
    fn close_session(&self, _: &SessionId) -> Result<()> {
        Ok(())
    }
    fn acquire(&self, _: &SessionId, _: &Name) -> Result<RawAcquire> {
        Ok(match self.0.lock().acquire {
            Some((token, remaining_ms)) => RawAcquire::Acquired { token, remaining_ms: Some(remaining_ms) },
            None => RawAcquire::Busy,
        })
    }
    fn release(&self, _: &SessionId, _: &Name, _: i64) -> Result<()> {
        Ok(())
    }
    fn holder(&self, _: &Name) -> Result<Option<RawHolder>> {
        Ok(self.0.lock().holder.clone())
    }
    fn join(&self, _: &SessionId, _: &Name) -> Result<bool> {
        Ok(true)
    }
    fn leave(&self, _: &SessionId, _: &Name) -> Result<()> {
        Ok(())
    }
    fn members(&self, _: &Name) -> Result<Vec<(String, String)>> {
        Ok(self.0.lock().members.clone())
    }
    fn purge(&self, _: usize) -> Result<usize> {
        Ok(0)
    }
    fn list(&self, _: &ListBounds) -> Result<RawListing> {
        let (leases, members, sessions) = self.0.lock().listing.clone();
        Ok(RawListing { leases, members, sessions, ..RawListing::default() })
    }
    fn now_ms(&self) -> Result<i64> {
        Ok(self.0.lock().now_ms)
    }
    fn schema_tables(&self) -> Result<i64> {
        Ok(self.0.lock().tables)
    }
    fn semaphore_limit(&self, _: &Name, permits: Option<i64>) -> Result<Option<i64>> {
        Ok(permits)
    }
    fn semaphore_table(&self) -> Result<bool> {
        Ok(true)
    }
    fn server_version(&self) -> Result<String> {
        Ok(self.0.lock().version.clone())
    }
    fn connection_ids(&self) -> Vec<u64> {
        Vec::new()
    }
}

fn backend(rows: Rows) -> SqlBackend {
    let options = SqlOptions::builder().auto_purge(false).build().expect("valid options");
    SqlBackend::with_driver(Dialect::Postgres, "postgres://u@h/db", options, Box::new(Scripted(Mutex::new(rows))))
}

/// A column a writer may have corrupted: a session id, a name, or anything (CHAR padding too).
fn text() -> impl Strategy<Value = String> {
    prop_oneof!["[0-9a-f]{32}", "[0-9a-f]{16} {0,16}", "[A-Za-z0-9._:-]{1,12}", ".{0,40}",]
}

fn int() -> impl Strategy<Value = i64> {
    prop_oneof![any::<i64>(), -2i64..3, Just(i64::MAX), Just(i64::MIN)]
}

fn rows() -> impl Strategy<Value = Rows> {
    let alive = (int(), proptest::collection::vec((text(), int()), 0..5), proptest::collection::vec(text(), 0..5));
    (
        proptest::option::of(alive),
        proptest::option::of((int(), int())),
        proptest::option::of((text(), int(), int(), ".{0,20}")),
        proptest::collection::vec((text(), ".{0,20}"), 0..5),
        listing(),
        int(),
        int(),
        ".{0,20}",
    )
        .prop_map(|(keep_alive, acquire, holder, members, listing, now_ms, tables, version)| Rows {
            keep_alive,
            acquire,
            holder,
            members,
            listing,
            now_ms,
            tables,
            version,
        })
}

/// Listing rows as a writer may have corrupted them (names, ids, tokens, times).
fn listing() -> impl Strategy<Value = ListingRows> {
    (
        proptest::collection::vec((text(), (text(), int(), int(), ".{0,20}")), 0..4),
        proptest::collection::vec((text(), text(), ".{0,20}"), 0..4),
        proptest::collection::vec((text(), int(), ".{0,20}"), 0..4),
    )
}

fn is_clean(e: &Error) -> bool {
    matches!(e.kind(), ErrorKind::Backend) && !e.to_string().is_empty()
}

proptest! {

    #[test]
    fn any_rows_decode_or_are_a_backend_error(rows in rows()) {
        let b = backend(rows);
        let sid = SessionId::from_u64(7);
        let name = Name::new("lease").unwrap();
        let lease = Duration::from_secs(15);
        match b.keep_alive(&sid, lease) {
            Ok(KeepAlive::Alive { remaining, .. }) => prop_assert!(remaining <= lease),
            Ok(_) => {}
            Err(e) => prop_assert!(is_clean(&e), "{e:?}"),
        }
        if let Err(e) = b.acquire(&sid, &name) {
            prop_assert!(is_clean(&e), "{e:?}");
        }
        if let Err(e) = b.holder(&name) {
            prop_assert!(is_clean(&e), "{e:?}");
        }
        if let Err(e) = b.members(&name) {
            prop_assert!(is_clean(&e), "{e:?}");
        }
        match b.list(&ListRequest::new("", 2).unwrap()) {
            Ok(l) => prop_assert!(l.leases.len() <= 2 && l.groups.len() <= 2 && l.sessions.len() <= 2, "{l:?}"),
            Err(e) => prop_assert!(is_clean(&e), "{e:?}"),
        }
        prop_assert!(b.check().len() >= 2);
    }

    #[test]
    fn well_formed_keep_alive_rows_round_trip(
        remaining_ms in 0i64..100_000,
        owned in proptest::collection::btree_map("[A-Za-z0-9_:-]{1,12}", 1i64..i64::MAX, 0..5),
        groups in proptest::collection::btree_set("[A-Za-z0-9_:-]{1,12}", 0..5),
    ) {
        let alive = (
            remaining_ms,
            owned.iter().map(|(n, t)| (n.clone(), *t)).collect(),
            groups.iter().cloned().collect(),
        );
        let b = backend(Rows { keep_alive: Some(alive), ..Rows::default() });
        let lease = Duration::from_secs(15);
        let KeepAlive::Alive { remaining, owned: got, groups: got_groups, .. } =
            b.keep_alive(&SessionId::from_u64(7), lease).unwrap()
        else {
            return Err(TestCaseError::fail("not alive"));
        };
        prop_assert_eq!(remaining, Duration::from_millis(remaining_ms as u64).min(lease));
        let want: Vec<(Name, Token)> =
            owned.iter().map(|(n, t)| (Name::new(n).unwrap(), Token::new(*t as u64).unwrap())).collect();
        prop_assert_eq!(got, want);
        let want_groups: Vec<Name> = groups.iter().map(|g| Name::new(g).unwrap()).collect();
        prop_assert_eq!(got_groups, want_groups);
    }

    #[test]
    fn well_formed_holder_and_acquire_rows_round_trip(
        owner in any::<u64>(),
        token in 1i64..i64::MAX,
        remaining_ms in 0i64..i64::MAX,
        metadata in ".{0,40}",
    ) {
        let sid = SessionId::from_u64(owner);
        let padded = format!("{}    ", sid.as_str()); // CHAR(n) columns come back padded
        let b = backend(Rows {
            holder: Some((padded, token, remaining_ms, metadata.clone())),
            acquire: Some((token, remaining_ms)),
            ..Rows::default()
        });
        let name = Name::new("lease").unwrap();
        let h = b.holder(&name).unwrap().unwrap();
        prop_assert_eq!(&h.session, &sid);
        prop_assert_eq!(h.token.get(), token as u64);
        prop_assert_eq!(h.remaining, Duration::from_millis(remaining_ms as u64));
        prop_assert_eq!(h.metadata, metadata);
        match b.acquire(&sid, &name).unwrap() {
            Acquire::Acquired { token: t, .. } => prop_assert_eq!(t.get(), token as u64),
            other => prop_assert!(false, "{other:?}"),
        }
    }
}

/// Live threads of SQL connection pools in this process (r2d2's default names, or ours).
fn pool_threads() -> usize {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return 0 };
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.starts_with("r2d2-worker") || name.starts_with("simba-sql-pool"))
        .count()
}

/// A dropped backend's pool threads end at once, not at the pool's next maintenance tick (30 s
/// later): a process that makes many backends (a property test making thousands) must not run
/// out of threads. Found by `tests/parsers_prop.rs` with `PROPTEST_CASES=20000` (the process
/// aborted: "failed to allocate an alternative stack"). No other unit test opens a SQL pool.
#[test]
fn a_dropped_backend_ends_its_pool_threads() {
    let url = if cfg!(feature = "postgres") { "postgres://u@127.0.0.1:1/db" } else { "mysql://u@127.0.0.1:1/db" };
    // A thread's name is set by the thread itself once it runs: wait (bounded) for them to show.
    let wait_for = |done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !done() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    let before = pool_threads();
    let b = SqlBackend::from_url(url, SqlOptions::default()).unwrap();
    wait_for(&|| pool_threads() > before);
    assert!(pool_threads() > before, "the pool has threads");
    drop(b);
    wait_for(&|| pool_threads() <= before);
    assert_eq!(pool_threads(), before, "pool threads still alive 10 s after the backend was dropped");
}
