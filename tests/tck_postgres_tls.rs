//! The whole TCK against the TLS-only PostgreSQL (`scripts/services up postgres-tls`; URL from
//! `SIMBA_TEST_POSTGRES_TLS_URL`, default `postgres://simba-test-client@127.0.0.1:5433/test` with
//! `sslmode=verify-full` and the test CA and client identity of `SIMBA_TEST_TLS_DIR`). The server
//! accepts TCP logins only over TLS and this role only with its client certificate, so every
//! connection of the pool runs a verified, mutually authenticated TLS handshake.
#![cfg(all(feature = "tck", feature = "postgres"))]

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use simba::backends::sql::{SqlBackend, SqlOptions};

fn backend() -> Arc<SqlBackend> {
    static BACKEND: OnceLock<Arc<SqlBackend>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let dir = support::tls::dir();
            let url = support::env_or(
                "SIMBA_TEST_POSTGRES_TLS_URL",
                &format!(
                    "postgres://simba-test-client@127.0.0.1:5433/test?sslmode=verify-full&sslrootcert={dir}/ca.pem\
                     &sslcert={dir}/client.pem&sslkey={dir}/client.key"
                ),
            );
            let addr = url.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
            support::require_tcp("TLS-only PostgreSQL", &addr);
            // 2 s, not the plain TCK's 1 s: a new connection costs a TLS handshake on a loaded
            // 2-core machine (as for the Redis TLS TCK).
            let options = SqlOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
            let backend = SqlBackend::postgres(&url, options)
                .unwrap_or_else(|e| panic!("bad TLS URL {url}: {e} (run `scripts/services up postgres-tls`)"));
            backend.init_schema().unwrap_or_else(|e| {
                panic!(
                    "cannot initialise the schema over TLS at {}: {} (run `scripts/services up postgres-tls`)",
                    backend.redacted_url(),
                    simba::display_chain(&e)
                )
            });
            Arc::new(backend)
        })
        .clone()
}

fn harness() -> simba::tck::Harness {
    // 2 s leases, not the plain TCK's 1 s (as for the MySQL TLS TCK): a raw session's first call
    // on a new pooled connection waits for a mutually authenticated handshake, which can take
    // over a second on a loaded 2-core machine.
    let timing = simba::SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    simba::tck::Harness::new(backend()).with_options(timing)
}

mod tck {
    simba::tck_suite!(postgres_tls, crate::harness(), #[serial_test::serial(postgres_tls)]);
}
