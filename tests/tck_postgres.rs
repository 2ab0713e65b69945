//! The TCK against the PostgreSQL backend (URL from `SIMBA_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; start the server with `scripts/services up`).
#![cfg(all(feature = "tck", feature = "postgres"))]

mod support;

fn harness() -> simba::tck::Harness {
    simba::tck::Harness::new(support::sql::shared_backend(support::sql::Dialect::Postgres))
}

mod tck {
    simba::tck_suite!(postgres, crate::harness(), #[serial_test::serial(postgres)]);
}
