//! Bring your own configuration, ZooKeeper: the backend built from a connect string and the
//! application's own `zookeeper_client::Connector` (its TLS, auth, connection timeout), plaintext
//! against `SIMBA_TEST_ZOOKEEPER_URL` and over TLS against the TLS-only `zookeeper-tls` of
//! `scripts/services up` (:2185, `ssl.clientAuth=need`). The backend still owns its clients
//! (one ZooKeeper session per Simba session, and its shared reader).
#![cfg(feature = "zookeeper")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use serial_test::serial;
use simba::backend::LeaseBackend;
use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
use zookeeper_client::{Client, TlsOptions};

use support::tls::read_text as tls_pem;

/// `host:port,…` of a `zookeeper://` test URL.
fn hosts_of(url: &str) -> String {
    url.trim_start_matches("zookeeper://").split(['/', '?']).next().unwrap_or_default().to_string()
}

fn options() -> ZookeeperOptions {
    ZookeeperOptions::default()
        .root(format!("/simba-test/{}", support::unique("byo")))
        .connection_timeout(Duration::from_secs(5))
}

fn exercise(backend: ZookeeperBackend) {
    support::exercise_lock_handoff(Arc::new(backend));
}

#[test]
#[serial(zookeeper)]
fn plaintext_with_the_applications_connector() {
    let hosts = hosts_of(&support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test"));
    support::require_tcp("ZooKeeper", hosts.split(',').next().unwrap_or_default());
    let connector = Client::connector().with_connection_timeout(Duration::from_secs(2));
    let backend = ZookeeperBackend::with_connector(&hosts, connector, options()).unwrap();
    exercise(backend);
}

#[test]
#[serial(zookeeper_tls)]
fn tls_configured_on_the_applications_connector() {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_TLS_URL", "zookeeper://127.0.0.1:2185/simba-test");
    let hosts = hosts_of(&url);
    support::require_tcp("the TLS-only ZooKeeper (scripts/services up zookeeper-tls)", &hosts);
    let tls = TlsOptions::default()
        .with_pem_ca(&tls_pem("ca.pem"))
        .unwrap()
        .with_pem_identity(&tls_pem("client.pem"), &tls_pem("client.key"))
        .unwrap();
    let connector = Client::connector().with_tls(tls);
    let tls_hosts: Vec<String> = hosts.split(',').map(|h| format!("tcp+tls://{h}")).collect();
    let backend = ZookeeperBackend::with_connector(&tls_hosts.join(","), connector, options()).unwrap();
    let check = backend.check();
    assert!(check.iter().any(|i| i.detail.contains("TLS as configured on the application's connector")), "{check:?}");
    exercise(backend);
}

#[test]
#[serial(zookeeper_tls)]
fn a_tls_only_server_refuses_the_connector_without_tls() {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_TLS_URL", "zookeeper://127.0.0.1:2185/simba-test");
    let hosts = hosts_of(&url);
    support::require_tcp("the TLS-only ZooKeeper (scripts/services up zookeeper-tls)", &hosts);
    let e = ZookeeperBackend::with_connector(
        &hosts,
        Client::connector(),
        options().connection_timeout(Duration::from_secs(2)),
    )
    .unwrap_err();
    assert_eq!(e.kind(), simba::ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("plaintext TCP"), "{e}");
}

#[test]
fn bad_connect_strings_are_refused_before_any_io() {
    for bad in ["", "tcp+tls://", "h:0", "tls://h:1", "u:p@h:1"] {
        let e = ZookeeperBackend::with_connector(bad, Client::connector(), ZookeeperOptions::default()).unwrap_err();
        assert_eq!(e.kind(), simba::ErrorKind::InvalidConfig, "{bad}: {e}");
        assert!(!e.to_string().contains("u:p"), "{e}");
    }
}
