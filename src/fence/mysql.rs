//! Fencing a MySQL 8 / MariaDB 10.11 resource, inside the caller's own transaction.
//!
//! Create the table once ([`INIT_SQL`], [`init`], or `simba schema print --fence | mysql`), then
//! call [`check`] first in every transaction that writes the resource:
//!
//! ```no_run
//! use mysql::prelude::Queryable;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let token = simba::Token::new(7).unwrap();
//! let pool = mysql::Pool::new("mysql://root@127.0.0.1/test")?;
//! let mut conn = pool.get_conn()?;
//! simba::fence::mysql::init(&mut conn)?;
//! let mut tx = conn.start_transaction(mysql::TxOpts::default())?;
//! simba::fence::mysql::check(&mut tx, "report", token)?; // Stale: `?` drops tx = rollback
//! tx.exec_drop("update report set body = ?", ("...",))?;
//! tx.commit()?;
//! # Ok(()) }
//! ```
//!
//! The check is an `INSERT … ON DUPLICATE KEY UPDATE` that records the token only when it is at
//! least the largest seen (`sql/mysql/fence-check.sql`), then a locking read of the row as it
//! left it (`fence-seen.sql`). The upsert holds the row's exclusive lock until the transaction
//! ends, so fenced writers of one resource are serialised in token order, and the locking read
//! sees the latest version at `READ COMMITTED` and `REPEATABLE READ` alike. Call it before the
//! writes it guards, so every fenced writer takes the fence row lock first. A deadlock or lock wait
//! timeout is [`FenceError::is_retryable`]: retry the transaction.
//!
//! [`update_row`] is the one-statement form for a row that carries its own token: add a column
//! `fence_token bigint not null default 0` and write, with *named* parameters,
//! `update t set …, fence_token = :token where <the row> and fence_token <= :token`.

use ::mysql::prelude::Queryable;
use ::mysql::{Params, Row, Value};

use super::{resource_name, sql_token, stale, FenceError};
use crate::{IntoName, Token};

/// `sql/mysql/init-simba-fence.sql`: creates the `simba_fence` table if it does not exist.
pub const INIT_SQL: &str = include_str!("../../sql/mysql/init-simba-fence.sql");
/// `fence-check.sql`: the conditional upsert.
const CHECK: &str = include_str!("../../sql/mysql/fence-check.sql");
/// `fence-seen.sql`: the row as the upsert left it, read under its lock.
const SEEN: &str = include_str!("../../sql/mysql/fence-seen.sql");

/// Creates the `simba_fence` table if it does not exist ([`INIT_SQL`]; idempotent).
///
/// # Errors
/// [`FenceError::Database`] with the server's words (e.g. no `CREATE` permission).
pub fn init(conn: &mut impl Queryable) -> Result<(), FenceError> {
    conn.query_drop(INIT_SQL).map_err(|e| db("creating the simba_fence table", e))
}

/// Accepts `token` for `resource` when it is at least the largest accepted so far (recording it),
/// inside the caller's transaction; the fence row stays locked until that transaction ends.
///
/// On a connection in autocommit mode the check commits on its own and guards nothing else.
///
/// # Errors
/// [`FenceError::Stale`] with `seen` when a larger token was accepted before (nothing recorded:
/// roll the transaction back, which dropping it does); [`FenceError::Invalid`] for a bad resource
/// name or a token above `i64::MAX`, before any I/O; [`FenceError::Database`] when a statement
/// fails (roll back; retry if retryable).
pub fn check(conn: &mut impl Queryable, resource: impl IntoName, token: Token) -> Result<(), FenceError> {
    let resource = resource_name(resource)?;
    let t = sql_token(&resource, token)?;
    let what = || format!("fence check of resource '{resource}' with token {token}");
    conn.exec_drop(CHECK, (resource.as_str(), t)).map_err(|e| db(what(), e))?;
    let row: Option<Row> = conn.exec_first(SEEN, (resource.as_str(),)).map_err(|e| db(what(), e))?;
    let seen = row.and_then(|r| r.get_opt::<i64, _>(0)).and_then(Result::ok).ok_or_else(|| {
        FenceError::invalid(format!("{}: the fence row is missing or not a bigint after the upsert", what()))
    })?;
    if seen == t {
        Ok(())
    } else {
        Err(stale(&resource, token, seen))
    }
}

/// Runs the caller's one-row fenced `UPDATE`, whose named parameter `:token` is the token (pass
/// the other named parameters, e.g. with `mysql::params!`, or `()` for none), and reports
/// [`FenceError::Stale`] when it matched no row.
///
/// The convention: the row has a column `fence_token bigint not null default 0`, and the
/// statement sets it and refuses a smaller token in one step, e.g.
/// `update orders set status = :status, fence_token = :token where id = :id and fence_token <= :token`.
/// Equal tokens (the same term) keep writing: a matched row counts even when no value changed
/// (read from the server's `Rows matched:` info, so `CLIENT_FOUND_ROWS` is not needed). Returns
/// the number of rows matched (≥ 1).
///
/// # Errors
/// [`FenceError::Stale`] with `seen: None` when no row matched (its `fence_token` is larger — or
/// the row does not exist: the convention needs it to exist); [`FenceError::Invalid`] for a bad
/// resource name, a token above `i64::MAX`, positional parameters or a `token` parameter of
/// the caller's own; [`FenceError::Database`] when the statement fails.
pub fn update_row(
    conn: &mut impl Queryable,
    resource: impl IntoName,
    token: Token,
    statement: &str,
    params: impl Into<Params>,
) -> Result<u64, FenceError> {
    let resource = resource_name(resource)?;
    let t = sql_token(&resource, token)?;
    let mut named = match params.into() {
        Params::Empty => Default::default(),
        Params::Named(m) => m,
        Params::Positional(_) => {
            return Err(FenceError::invalid(
                "fence::mysql::update_row takes named parameters (mysql::params!), with :token for the token",
            ))
        }
    };
    if named.insert(b"token".to_vec(), Value::Int(t)).is_some() {
        return Err(FenceError::invalid(
            "fence::mysql::update_row sets the :token parameter itself: do not pass a parameter named token",
        ));
    }
    let what = || format!("fenced update of resource '{resource}' with token {token}");
    let result = conn.exec_iter(statement, Params::Named(named)).map_err(|e| db(what(), e))?;
    let matched = match result.affected_rows() {
        0 => rows_matched(&result.info_str()).unwrap_or(0),
        n => n,
    };
    drop(result);
    if matched == 0 {
        return Err(FenceError::Stale { resource: resource.to_string(), token, seen: None });
    }
    Ok(matched)
}

/// The first number of an `UPDATE`'s info ("Rows matched: 1  Changed: 0  Warnings: 0"; the
/// server's translations keep the numbers in this order).
fn rows_matched(info: &str) -> Option<u64> {
    let start = info.find(|c: char| c.is_ascii_digit())?;
    let digits: String = info[start..].chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

fn db(what: impl Into<String>, e: ::mysql::Error) -> FenceError {
    let retryable = match &e {
        // ER_LOCK_DEADLOCK, ER_LOCK_WAIT_TIMEOUT
        ::mysql::Error::MySqlError(m) => m.code == 1213 || m.code == 1205,
        ::mysql::Error::IoError(_) | ::mysql::Error::CodecError(_) => true,
        _ => false,
    };
    FenceError::database(what, retryable, e)
}

#[cfg(test)]
mod tests {
    use super::rows_matched;

    #[test]
    fn rows_matched_reads_the_first_number_of_the_info() {
        assert_eq!(rows_matched("Rows matched: 1  Changed: 0  Warnings: 0"), Some(1));
        assert_eq!(rows_matched("Rows matched: 12  Changed: 3  Warnings: 0"), Some(12));
        assert_eq!(rows_matched("Rader matchade: 0  Ändrade: 0  Varningar: 0"), Some(0));
        assert_eq!(rows_matched(""), None);
    }
}
