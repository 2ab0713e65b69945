//! `simba::fence` on real PostgreSQL and MariaDB/MySQL: concurrent fenced writers with interleaved
//! tokens, at READ COMMITTED and REPEATABLE READ, in the table form (`check` inside the caller's
//! transaction) and the one-statement form (`update_row`).
//!
//! Every attempt runs one transaction: (1) insert its attempt row, (2) the fence step, (3) insert
//! an order row, commit. So: an attempt row exists exactly for the attempts that committed (a
//! stale attempt's row 1 must be rolled back); the order rows, written under the fence lock, are
//! in commit order and their tokens never go down; the fence holds the largest committed token.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::thread;

use serial_test::serial;
use simba::fence::{self, FenceError};
use simba::Token;

mod support;
#[path = "fence/tokens.rs"]
mod tokens;

use tokens::Tokens;

const THREADS: u64 = 4;
const ATTEMPTS: u64 = 30;
/// Retries of one attempt after a deadlock or serialization failure.
const RETRIES: usize = 500;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Iso {
    ReadCommitted,
    RepeatableRead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Form {
    /// `fence::*::check` against the `simba_fence` table.
    Table,
    /// `fence::*::update_row` on a row with its own `fence_token`.
    Row,
}

/// How one attempt ended.
#[derive(Debug)]
enum Outcome {
    Accepted,
    Stale(Option<Token>),
}

/// A failure the test retries (the whole transaction), like an application would.
struct Retry(String);

trait Db: Sized {
    fn connect() -> Self;
    /// One fenced transaction; `Err(Retry)` for a retryable failure.
    fn attempt(&mut self, form: Form, iso: Iso, resource: &str, attempt: i64, token: Token) -> Result<Outcome, Retry>;
    fn attempts(&mut self, resource: &str) -> Vec<i64>;
    fn orders(&mut self, resource: &str) -> Vec<i64>;
    /// The fence's token: the `simba_fence` row (Table) or the row's `fence_token` (Row).
    fn seen(&mut self, form: Form, resource: &str) -> Option<i64>;
    /// Creates the row of the Row form.
    fn create_row(&mut self, resource: &str);
    /// The row's (body, fence_token).
    fn row(&mut self, resource: &str) -> (String, i64);
}

fn outcome(r: Result<u64, FenceError>) -> Result<Outcome, Retry> {
    match r {
        Ok(_) => Ok(Outcome::Accepted),
        Err(FenceError::Stale { seen, .. }) => Ok(Outcome::Stale(seen)),
        Err(e) if e.is_retryable() => Err(Retry(simba::display_chain(&e))),
        Err(e) => panic!("fence step failed: {}", simba::display_chain(&e)),
    }
}

mod pg {
    use super::*;
    use postgres::{Client, IsolationLevel, NoTls};

    pub struct Pg(pub Client);

    fn retry(e: postgres::Error) -> Retry {
        use postgres::error::SqlState;
        match e.code() {
            Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED => {
                Retry(e.to_string())
            }
            _ => panic!("PostgreSQL: {e:?}"),
        }
    }

    impl Db for Pg {
        fn connect() -> Pg {
            let url = support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
            let mut c = Client::connect(&url, NoTls)
                .unwrap_or_else(|e| panic!("PostgreSQL at {url}: {e} (run `scripts/services up`)"));
            fence::postgres::init(&mut c).unwrap();
            c.batch_execute(include_str!("sql/fence-test-create-pg.sql")).unwrap();
            Pg(c)
        }

        fn attempt(
            &mut self,
            form: Form,
            iso: Iso,
            resource: &str,
            attempt: i64,
            token: Token,
        ) -> Result<Outcome, Retry> {
            let level = match iso {
                Iso::ReadCommitted => IsolationLevel::ReadCommitted,
                Iso::RepeatableRead => IsolationLevel::RepeatableRead,
            };
            let mut tx = self.0.build_transaction().isolation_level(level).start().map_err(retry)?;
            let t = token.get() as i64;
            tx.execute(include_str!("sql/fence-test-attempt-pg.sql"), &[&resource, &attempt, &t]).map_err(retry)?;
            let body = format!("attempt {attempt}");
            let fenced = match form {
                Form::Table => fence::postgres::check(&mut tx, resource, token).map(|()| 1),
                Form::Row => fence::postgres::update_row(
                    &mut tx,
                    resource,
                    token,
                    include_str!("sql/fence-test-row-update-pg.sql"),
                    &[&body, &resource],
                ),
            };
            let o = outcome(fenced)?;
            if let Outcome::Accepted = o {
                tx.execute(include_str!("sql/fence-test-order-pg.sql"), &[&resource, &t]).map_err(retry)?;
                tx.commit().map_err(retry)?;
            } // else: dropping tx rolls it back
            Ok(o)
        }

        fn attempts(&mut self, resource: &str) -> Vec<i64> {
            let rows = self.0.query(include_str!("sql/fence-test-attempts-pg.sql"), &[&resource]).unwrap();
            rows.iter().map(|r| r.get(0)).collect()
        }

        fn orders(&mut self, resource: &str) -> Vec<i64> {
            let rows = self.0.query(include_str!("sql/fence-test-orders-pg.sql"), &[&resource]).unwrap();
            rows.iter().map(|r| r.get(0)).collect()
        }

        fn seen(&mut self, form: Form, resource: &str) -> Option<i64> {
            match form {
                Form::Table => self
                    .0
                    .query_opt(include_str!("sql/fence-test-seen-pg.sql"), &[&resource])
                    .unwrap()
                    .map(|r| r.get(0)),
                Form::Row => Some(self.row(resource).1).filter(|&t| t > 0),
            }
        }

        fn create_row(&mut self, resource: &str) {
            self.0.execute(include_str!("sql/fence-test-row-init-pg.sql"), &[&resource]).unwrap();
        }

        fn row(&mut self, resource: &str) -> (String, i64) {
            let r = self.0.query_one(include_str!("sql/fence-test-row-read-pg.sql"), &[&resource]).unwrap();
            (r.get(0), r.get(1))
        }
    }
}

mod my {
    use super::*;
    use mysql::prelude::Queryable;
    use mysql::{params, Conn, IsolationLevel, Opts, TxOpts};

    pub struct My(pub Conn);

    fn retry(e: mysql::Error) -> Retry {
        match &e {
            mysql::Error::MySqlError(m) if m.code == 1213 || m.code == 1205 => Retry(e.to_string()),
            _ => panic!("MySQL: {e:?}"),
        }
    }

    impl Db for My {
        fn connect() -> My {
            let url = support::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test");
            let mut c = Opts::from_url(&url)
                .map_err(mysql::Error::from)
                .and_then(Conn::new)
                .unwrap_or_else(|e| panic!("MySQL at {url}: {e} (run `scripts/services up`)"));
            fence::mysql::init(&mut c).unwrap();
            c.query_drop(include_str!("sql/fence-test-create-mysql.sql")).unwrap();
            My(c)
        }

        fn attempt(
            &mut self,
            form: Form,
            iso: Iso,
            resource: &str,
            attempt: i64,
            token: Token,
        ) -> Result<Outcome, Retry> {
            let level = match iso {
                Iso::ReadCommitted => IsolationLevel::ReadCommitted,
                Iso::RepeatableRead => IsolationLevel::RepeatableRead,
            };
            let mut tx = self.0.start_transaction(TxOpts::default().set_isolation_level(Some(level))).map_err(retry)?;
            let t = token.get() as i64;
            tx.exec_drop(include_str!("sql/fence-test-attempt-mysql.sql"), (resource, attempt, t)).map_err(retry)?;
            let body = format!("attempt {attempt}");
            let fenced = match form {
                Form::Table => fence::mysql::check(&mut tx, resource, token).map(|()| 1),
                Form::Row => fence::mysql::update_row(
                    &mut tx,
                    resource,
                    token,
                    include_str!("sql/fence-test-row-update-mysql.sql"),
                    params! { "body" => &body, "resource" => resource },
                ),
            };
            let o = outcome(fenced)?;
            if let Outcome::Accepted = o {
                tx.exec_drop(include_str!("sql/fence-test-order-mysql.sql"), (resource, t)).map_err(retry)?;
                tx.commit().map_err(retry)?;
            } // else: dropping tx rolls it back
            Ok(o)
        }

        fn attempts(&mut self, resource: &str) -> Vec<i64> {
            self.0.exec(include_str!("sql/fence-test-attempts-mysql.sql"), (resource,)).unwrap()
        }

        fn orders(&mut self, resource: &str) -> Vec<i64> {
            self.0.exec(include_str!("sql/fence-test-orders-mysql.sql"), (resource,)).unwrap()
        }

        fn seen(&mut self, form: Form, resource: &str) -> Option<i64> {
            match form {
                Form::Table => self.0.exec_first(include_str!("sql/fence-test-seen-mysql.sql"), (resource,)).unwrap(),
                Form::Row => Some(self.row(resource).1).filter(|&t| t > 0),
            }
        }

        fn create_row(&mut self, resource: &str) {
            self.0.exec_drop(include_str!("sql/fence-test-row-init-mysql.sql"), (resource,)).unwrap();
        }

        fn row(&mut self, resource: &str) -> (String, i64) {
            self.0.exec_first(include_str!("sql/fence-test-row-read-mysql.sql"), (resource,)).unwrap().unwrap()
        }
    }
}

fn t(v: u64) -> Token {
    Token::new(v).unwrap()
}

/// Runs one attempt to its end (retrying deadlocks and serialization failures).
fn run<D: Db>(db: &mut D, form: Form, iso: Iso, resource: &str, attempt: i64, token: Token) -> Outcome {
    let mut last = String::new();
    for _ in 0..RETRIES {
        match db.attempt(form, iso, resource, attempt, token) {
            Ok(o) => return o,
            Err(Retry(e)) => last = e,
        }
    }
    panic!("attempt {attempt} still failing after {RETRIES} retries: {last}");
}

/// Concurrent writers with interleaved tokens, then the deterministic cases at the end.
fn concurrent_writers<D: Db>(form: Form, iso: Iso) {
    let resource = support::unique("fence");
    let mut db = D::connect();
    if form == Form::Row {
        db.create_row(&resource);
    }
    let term = Arc::new(AtomicU64::new(1));
    let results = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|i| {
            let (term, results, resource) = (term.clone(), results.clone(), resource.clone());
            thread::spawn(move || {
                let mut db = D::connect();
                let mut tokens = Tokens::new(term, i);
                for n in 0..ATTEMPTS {
                    let token = tokens.pick(n);
                    let attempt = (i * 1000 + n) as i64;
                    let o = run(&mut db, form, iso, &resource, attempt, t(token));
                    results.lock().unwrap().push((attempt, token, o));
                }
            })
        })
        .collect();
    for th in threads {
        th.join().unwrap();
    }
    let results = std::mem::take(&mut *results.lock().unwrap());
    let committed = db.attempts(&resource);
    let orders = db.orders(&resource);
    let mut accepted = Vec::new();
    let mut stale = 0;
    let max = orders.iter().copied().max().unwrap_or(0);
    for (attempt, token, o) in &results {
        match o {
            Outcome::Accepted => {
                assert!(committed.contains(attempt), "accepted attempt {attempt} (token {token}) did not commit");
                accepted.push(*attempt);
            }
            Outcome::Stale(seen) => {
                stale += 1;
                assert!(!committed.contains(attempt), "stale attempt {attempt} (token {token}): its write committed");
                if form == Form::Table {
                    let seen = seen.unwrap_or_else(|| panic!("the table form reports seen")).get();
                    assert!(seen > *token && seen as i64 <= max, "attempt {attempt}: token {token}, seen {seen}");
                } else {
                    assert_eq!(*seen, None);
                }
            }
        }
    }
    accepted.sort_unstable();
    assert_eq!(accepted, committed, "the committed attempts are exactly the accepted ones");
    assert_eq!(orders.len(), committed.len());
    assert!(orders.windows(2).all(|w| w[0] <= w[1]), "tokens went down in commit order: {orders:?}");
    assert_eq!(db.seen(form, &resource), Some(max), "the fence keeps the largest committed token");

    // Deterministic: a smaller token is stale and its write rolled back; the current one, twice
    // (the same term keeps writing), lands; a new term lands.
    let (a, b, c, d) = (9001, 9002, 9003, 9004);
    if max > 1 {
        assert!(matches!(run(&mut db, form, iso, &resource, a, t(max as u64 - 1)), Outcome::Stale(_)));
        stale += 1;
    }
    assert!(matches!(run(&mut db, form, iso, &resource, b, t(max as u64)), Outcome::Accepted));
    assert!(matches!(run(&mut db, form, iso, &resource, c, t(max as u64)), Outcome::Accepted));
    assert!(matches!(run(&mut db, form, iso, &resource, d, t(max as u64 + 1)), Outcome::Accepted));
    let committed = db.attempts(&resource);
    assert!(!committed.contains(&a) && committed.contains(&b) && committed.contains(&c) && committed.contains(&d));
    assert_eq!(db.seen(form, &resource), Some(max + 1));
    if form == Form::Row {
        assert_eq!(db.row(&resource), (format!("attempt {d}"), max + 1));
    }
    assert!(stale > 0 && accepted.len() > 1, "{stale} stale, {} accepted", accepted.len());
}

/// One test per backend, form and isolation level, serial per server.
macro_rules! concurrent_writers_tests {
    ($($name:ident: $db:ty, $server:ident, $form:ident, $iso:ident;)*) => {$(
        #[test]
        #[serial($server)]
        fn $name() {
            concurrent_writers::<$db>(Form::$form, Iso::$iso);
        }
    )*};
}

concurrent_writers_tests! {
    postgres_table_read_committed: pg::Pg, postgres, Table, ReadCommitted;
    postgres_table_repeatable_read: pg::Pg, postgres, Table, RepeatableRead;
    postgres_row_read_committed: pg::Pg, postgres, Row, ReadCommitted;
    postgres_row_repeatable_read: pg::Pg, postgres, Row, RepeatableRead;
    mysql_table_read_committed: my::My, mysql, Table, ReadCommitted;
    mysql_table_repeatable_read: my::My, mysql, Table, RepeatableRead;
    mysql_row_read_committed: my::My, mysql, Row, ReadCommitted;
    mysql_row_repeatable_read: my::My, mysql, Row, RepeatableRead;
}

#[test]
#[serial(mysql)]
fn mysql_update_row_refuses_positional_parameters_and_a_token_of_its_own() {
    use mysql::params;
    let mut db = my::My::connect();
    let resource = support::unique("fence");
    db.create_row(&resource);
    let stmt = include_str!("sql/fence-test-row-update-mysql.sql");
    let e = fence::mysql::update_row(&mut db.0, &resource, t(1), stmt, ("x",)).unwrap_err();
    assert!(e.to_string().contains("named parameters"), "{e}");
    let e = fence::mysql::update_row(&mut db.0, &resource, t(1), stmt, params! { "token" => 5 }).unwrap_err();
    assert!(e.to_string().contains(":token"), "{e}");
    assert_eq!(db.row(&resource), (String::new(), 0), "nothing was written");
}

/// The same term writing the same values again still matches its row (MySQL reports 0 changed
/// rows for it unless the connection sets CLIENT_FOUND_ROWS).
#[test]
#[serial(mysql)]
fn mysql_update_row_same_token_same_values_keeps_writing() {
    use mysql::params;
    let mut db = my::My::connect();
    let resource = support::unique("fence");
    db.create_row(&resource);
    let stmt = include_str!("sql/fence-test-row-update-mysql.sql");
    for _ in 0..2 {
        let p = params! { "body" => "same", "resource" => &resource };
        assert_eq!(fence::mysql::update_row(&mut db.0, &resource, t(3), stmt, p).unwrap(), 1);
    }
    let p = params! { "body" => "old", "resource" => &resource };
    let e = fence::mysql::update_row(&mut db.0, &resource, t(2), stmt, p).unwrap_err();
    assert!(matches!(e, FenceError::Stale { seen: None, .. }), "{e:?}");
    assert_eq!(db.row(&resource), ("same".to_string(), 3));
}

#[test]
#[serial(postgres)]
fn postgres_update_row_same_token_same_values_keeps_writing() {
    let mut db = pg::Pg::connect();
    let resource = support::unique("fence");
    db.create_row(&resource);
    let stmt = include_str!("sql/fence-test-row-update-pg.sql");
    for _ in 0..2 {
        assert_eq!(fence::postgres::update_row(&mut db.0, &resource, t(3), stmt, &[&"same", &resource]).unwrap(), 1);
    }
    let e = fence::postgres::update_row(&mut db.0, &resource, t(2), stmt, &[&"old", &resource]).unwrap_err();
    assert!(matches!(e, FenceError::Stale { seen: None, .. }), "{e:?}");
    assert_eq!(db.row(&resource), ("same".to_string(), 3));
}

#[test]
#[serial(postgres)]
fn bad_input_fails_before_any_io() {
    let mut db = pg::Pg::connect();
    let e = fence::postgres::check(&mut db.0, "no spaces", t(1)).unwrap_err();
    assert!(matches!(e, FenceError::Invalid { .. }) && e.to_string().contains("[A-Za-z0-9._:-]"), "{e}");
    let e = fence::postgres::check(&mut db.0, "r", t(u64::MAX)).unwrap_err();
    assert!(e.to_string().contains("bigint"), "{e}");
    // A database error keeps the server's words in the source, not in Display.
    let e = fence::postgres::update_row(&mut db.0, "r", t(1), "update no_such_table_x set a = $1", &[]).unwrap_err();
    assert!(matches!(e, FenceError::Database { .. }), "{e:?}");
    assert!(!e.to_string().contains("no_such_table_x"), "{e}");
    assert!(simba::display_chain(&e).contains("no_such_table_x"), "{}", simba::display_chain(&e));
}
