//! The whole TCK against the TLS-only MariaDB (`scripts/services up mysql-tls`; URL from
//! `SIMBA_TEST_MYSQL_TLS_URL`, default the user `simba_x509` (REQUIRE X509) on
//! `mysql://…@127.0.0.1:3307/test` with `ssl-mode=VERIFY_IDENTITY`, the test CA and the client
//! certificate of `SIMBA_TEST_TLS_DIR`). The server refuses plain connections
//! (`require_secure_transport=ON`), so every pooled connection runs a verified, mutually
//! authenticated TLS handshake.
#![cfg(all(feature = "tck", feature = "mysql"))]

mod support;

use std::sync::Arc;
use std::time::Duration;

use simba::backends::sql::{SqlBackend, SqlOptions};

fn harness() -> simba::tck::Harness {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_MYSQL_TLS_URL",
        &format!(
            "mysql://simba_x509@127.0.0.1:3307/test?ssl-mode=VERIFY_IDENTITY&ssl-ca={dir}/ca.pem&\
             ssl-cert={dir}/client.pem&ssl-key={dir}/client.key"
        ),
    );
    let addr = url.split('@').next_back().unwrap_or_default().split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp("TLS-only MariaDB", &addr);
    // 2 s, not the plain TCK's 1 s: a new connection also costs a TLS handshake (loopback, debug
    // build), and the pool opens connections on demand during the tests.
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    let backend = SqlBackend::mysql(&url, options)
        .unwrap_or_else(|e| panic!("bad TLS URL {url}: {e} (run `scripts/services up mysql-tls`)"));
    backend.init_schema().unwrap_or_else(|e| {
        panic!("cannot initialise the schema over TLS at {url}: {e} (run `scripts/services up mysql-tls`)")
    });
    // 2 s leases, not 1 s: a raw session's first call on a new pooled connection waits for a
    // mutually authenticated handshake, which took over a second on a loaded 2-core machine (a
    // `join` then found its 1 s session expired).
    let timing = simba::SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .query_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    simba::tck::Harness::new(Arc::new(backend)).with_options(timing)
}

mod tck {
    simba::tck_suite!(mysql_tls, crate::harness(), #[serial_test::serial(mysql_tls)]);
}
