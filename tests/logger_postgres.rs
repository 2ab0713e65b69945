//! The application's logger never runs under a lock of the PostgreSQL backend (issue #36,
//! finding 6; see `tests/support/logger.rs`). One binary per backend: the logger is process-global.
#![cfg(feature = "postgres")]

#[path = "support/logger.rs"]
mod logger;
mod support;

#[test]
fn the_logger_may_call_back_into_simba_from_any_postgres_record() {
    let backend = support::sql::shared_backend(support::sql::Dialect::Postgres);
    logger::every_record_may_call_back(backend, logger::lease_life);
}
