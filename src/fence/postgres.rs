//! Fencing a PostgreSQL resource, inside the caller's own transaction.
//!
//! Create the table once ([`INIT_SQL`], [`init`], or `simba schema print --fence | psql`), then
//! call [`check`] first in every transaction that writes the resource:
//!
//! ```no_run
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let token = simba::Token::new(7).unwrap();
//! let mut client = postgres::Client::connect("postgres://postgres@127.0.0.1/test", postgres::NoTls)?;
//! simba::fence::postgres::init(&mut client)?;
//! let mut tx = client.transaction()?;
//! simba::fence::postgres::check(&mut tx, "report", token)?; // Stale: `?` drops tx = rollback
//! tx.execute("update report set body = $1", &[&"..."])?;
//! tx.commit()?;
//! # Ok(()) }
//! ```
//!
//! The check is one upsert (`sql/postgres/fence-check.sql`) that records the token when it is at
//! least the largest seen and, either way, locks the resource's fence row until the transaction
//! ends: fenced writers of one resource are serialised, in token order, at `READ COMMITTED` and
//! `REPEATABLE READ` alike (under `REPEATABLE READ` a concurrent newer term makes the upsert fail
//! with a serialization failure: [`FenceError::is_retryable`], retry the transaction). Call it
//! before the writes it guards, so every fenced writer takes the fence row lock first.
//!
//! [`update_row`] is the one-statement form for a row that carries its own token: add a column
//! `fence_token bigint not null default 0` to the table and write
//! `update t set …, fence_token = $1 where <the row> and fence_token <= $1`.

use ::postgres::error::SqlState;
use ::postgres::types::ToSql;
use ::postgres::GenericClient;

use super::{resource_name, sql_token, stale, FenceError};
use crate::{IntoName, Token};

/// `sql/postgres/init-simba-fence.sql`: creates the `simba_fence` table if it does not exist.
pub const INIT_SQL: &str = include_str!("../../sql/postgres/init-simba-fence.sql");
/// `fence-check.sql`: the conditional upsert (one row back when accepted).
const CHECK: &str = include_str!("../../sql/postgres/fence-check.sql");
/// `fence-seen.sql`: the largest token of a resource.
const SEEN: &str = include_str!("../../sql/postgres/fence-seen.sql");

/// Creates the `simba_fence` table if it does not exist ([`INIT_SQL`]; idempotent).
///
/// # Errors
/// [`FenceError::Database`] with the server's words (e.g. no `CREATE` permission).
pub fn init(client: &mut impl GenericClient) -> Result<(), FenceError> {
    client.batch_execute(INIT_SQL).map_err(|e| db("creating the simba_fence table", e))
}

/// Accepts `token` for `resource` when it is at least the largest accepted so far (recording it),
/// inside the caller's transaction; the fence row stays locked until that transaction ends.
///
/// On a plain `Client` (autocommit) the check commits on its own and guards nothing else.
///
/// # Errors
/// [`FenceError::Stale`] with `seen` when a larger token was accepted before (nothing recorded:
/// roll the transaction back, which dropping it does); [`FenceError::Invalid`] for a bad resource
/// name or a token above `i64::MAX`, before any I/O; [`FenceError::Database`] when a statement
/// fails (the transaction is then aborted: roll back, retry if retryable).
pub fn check(client: &mut impl GenericClient, resource: impl IntoName, token: Token) -> Result<(), FenceError> {
    let resource = resource_name(resource)?;
    let t = sql_token(&resource, token)?;
    let what = || format!("fence check of resource '{resource}' with token {token}");
    if client.query_opt(CHECK, &[&resource.as_str(), &t]).map_err(|e| db(what(), e))?.is_some() {
        return Ok(());
    }
    let row = client.query_opt(SEEN, &[&resource.as_str()]).map_err(|e| db(what(), e))?;
    let seen: i64 = match row.map(|r| r.try_get(0)).transpose().map_err(|e| db(what(), e))? {
        Some(v) => v,
        None => {
            return Err(FenceError::invalid(format!(
                "{}: the upsert refused the token but the fence row is gone",
                what()
            )))
        }
    };
    Err(stale(&resource, token, seen))
}

/// Runs the caller's one-row fenced `UPDATE`, whose `$1` is the token (pass the other parameters
/// as `params`, numbered from `$2`), and reports [`FenceError::Stale`] when it matched no row.
///
/// The convention: the row has a column `fence_token bigint not null default 0`, and the
/// statement sets it and refuses a smaller token in one step, e.g.
/// `update orders set status = $2, fence_token = $1 where id = $3 and fence_token <= $1`.
/// Equal tokens (the same term) keep writing. No `simba_fence` row is involved. Returns the
/// number of rows updated (≥ 1).
///
/// # Errors
/// [`FenceError::Stale`] with `seen: None` when no row matched (its `fence_token` is larger — or
/// the row does not exist: the convention needs it to exist); [`FenceError::Invalid`] for a bad
/// resource name or a token above `i64::MAX`; [`FenceError::Database`] when the statement fails.
pub fn update_row(
    client: &mut impl GenericClient,
    resource: impl IntoName,
    token: Token,
    statement: &str,
    params: &[&(dyn ToSql + Sync)],
) -> Result<u64, FenceError> {
    let resource = resource_name(resource)?;
    let t = sql_token(&resource, token)?;
    let mut all: Vec<&(dyn ToSql + Sync)> = Vec::with_capacity(params.len() + 1);
    all.push(&t);
    all.extend_from_slice(params);
    let n = client
        .execute(statement, &all)
        .map_err(|e| db(format!("fenced update of resource '{resource}' with token {token}"), e))?;
    if n == 0 {
        return Err(FenceError::Stale { resource: resource.to_string(), token, seen: None });
    }
    Ok(n)
}

fn db(what: impl Into<String>, e: ::postgres::Error) -> FenceError {
    let retryable = match e.code() {
        Some(c) => *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED,
        None => e.as_db_error().is_none() && e.is_closed(),
    };
    FenceError::database(what, retryable, e)
}
