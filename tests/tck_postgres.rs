//! The TCK against the PostgreSQL backend (URL from `SIMBA_TEST_POSTGRES_URL`, default
//! `postgres://postgres@127.0.0.1:5432/test`; start the server with `scripts/services up`).
#![cfg(all(feature = "tck", feature = "postgres"))]

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use simba::backends::sql::{SqlBackend, SqlOptions};

/// One backend (one pool) for the whole suite; the schema is created once.
fn backend() -> Arc<SqlBackend> {
    static BACKEND: OnceLock<Arc<SqlBackend>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let url = support::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test");
            let addr = url.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
            support::require_tcp("PostgreSQL", &addr);
            let options = SqlOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
            let backend = SqlBackend::postgres(&url, options).unwrap();
            backend
                .init_schema()
                .unwrap_or_else(|e| panic!("cannot initialise the schema at {url}: {e:?} (run `scripts/services up`)"));
            Arc::new(backend)
        })
        .clone()
}

fn harness() -> simba::tck::Harness {
    simba::tck::Harness::new(backend())
}

mod tck {
    simba::tck_suite!(postgres, crate::harness(), #[serial_test::serial(postgres)]);
}
