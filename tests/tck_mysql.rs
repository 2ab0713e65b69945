//! The TCK against the MySQL/MariaDB backend (URL from `SIMBA_TEST_MYSQL_URL`, default
//! `mysql://root@127.0.0.1:3306/test`; start the server with `scripts/services up`).
#![cfg(all(feature = "tck", feature = "mysql"))]

mod support;

fn harness() -> simba::tck::Harness {
    simba::tck::Harness::new(support::sql::shared_backend(support::sql::Dialect::Mysql))
}

mod tck {
    simba::tck_suite!(mysql, crate::harness(), #[serial_test::serial(mysql)]);
}
