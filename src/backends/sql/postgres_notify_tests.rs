//! The supervision of the `LISTEN` thread against the real server (see
//! [`crate::backends::notifier::scenario`]): `SIMBA_TEST_POSTGRES_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`); start it with `scripts/services up`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use serial_test::serial;

use super::super::PgDriver;
use crate::backends::notifier::scenario::{CannotPush, Case};
use crate::backends::sql::{Dialect, PostgresTls, SqlBackend, SqlOptions};
use crate::types::Name;

#[test]
#[serial(postgres)]
fn a_killed_listen_thread_is_restarted_and_says_so() {
    let var = "SIMBA_TEST_POSTGRES_URL";
    let url = std::env::var(var).ok().filter(|v| !v.is_empty());
    let url = url.unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/test".to_string());
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    let driver = PgDriver::new(&url, &PostgresTls::default(), &options).unwrap();
    let notifier = driver.listener.shared.notifier.clone();
    let backend = SqlBackend::with_driver(Dialect::Postgres, &url, options, Box::new(driver));
    backend.init_schema().unwrap_or_else(|e| panic!("PostgreSQL at {url} ({var}): {e}: run scripts/services up"));
    let name = Name::new(format!("notifier-{:016x}", rand::random::<u64>())).unwrap();
    Case {
        backend: &backend,
        notifier: &notifier,
        kill: &|| notifier.kill(),
        cannot_push: CannotPush::False,
        confirms: false,
        name,
    }
    .run();
}
