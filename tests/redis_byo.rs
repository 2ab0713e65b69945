//! Bring your own configuration, Redis: the backend built from the application's own
//! `redis::ConnectionInfo` (standalone) and node infos (Cluster), plaintext and over TLS, against
//! the servers of `scripts/services up` (`SIMBA_TEST_REDIS_URL`, `SIMBA_TEST_REDIS_CLUSTER_URL`,
//! the TLS-only `redis-tls` on :6390, which requires a client certificate, and
//! `redis-cluster-tls` on :7100-7102). The backend still owns its pool and pub/sub connection.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use redis::{ClientTlsConfig, ConnectionInfo, IntoConnectionInfo, TlsCertificates};
use serial_test::serial;
use simba::backend::{CheckStatus, LeaseBackend};
use simba::backends::redis::{RedisBackend, RedisOptions, RedisTls};
use simba::ErrorKind;

fn options() -> RedisOptions {
    RedisOptions::builder()
        .query_timeout(Duration::from_secs(5))
        .max_connections(2)
        .max_connection_lifetime(Duration::from_secs(60))
        .build()
        .unwrap()
}

use support::tls::{file as tls_path, read as tls_file};

/// The application's own TLS connection info: the test CA and client identity built into it.
fn tls_info(addr: &str) -> ConnectionInfo {
    support::require_tcp("TLS-only Redis", addr);
    let certs = TlsCertificates {
        client_tls: Some(ClientTlsConfig { client_cert: tls_file("client.pem"), client_key: tls_file("client.key") }),
        root_cert: Some(tls_file("ca.pem")),
    };
    redis::Client::build_with_tls(format!("rediss://{addr}"), certs).unwrap().get_connection_info().clone()
}

fn exercise(backend: RedisBackend) {
    support::exercise_lock_handoff(Arc::new(backend));
}

#[test]
#[serial(redis)]
fn standalone_from_the_applications_connection_info() {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    support::require_tcp("Redis", url.trim_start_matches("redis://"));
    let info = url.as_str().into_connection_info().unwrap();
    let backend = RedisBackend::from_connection_info(info, options()).unwrap();
    assert!(!backend.is_clustered());
    assert_eq!(backend.options().max_connection_lifetime(), Duration::from_secs(60));
    exercise(backend);
}

#[test]
#[serial(redis_cluster)]
fn cluster_from_the_applications_node_infos() {
    let url =
        support::env_or("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    let hosts = url.trim_start_matches("redis+cluster://");
    support::require_tcp("Redis Cluster", hosts.split(',').next().unwrap_or_default());
    let infos: Vec<ConnectionInfo> =
        hosts.split(',').map(|h| format!("redis://{h}").into_connection_info().unwrap()).collect();
    let backend = RedisBackend::cluster_from_connection_infos(infos, options()).unwrap();
    assert!(backend.is_clustered());
    exercise(backend);
}

#[test]
#[serial(redis_tls)]
fn tls_from_the_applications_connection_info() {
    let backend = RedisBackend::from_connection_info(tls_info("127.0.0.1:6390"), options()).unwrap();
    let check = backend.check();
    let transport = check.iter().find(|i| i.detail.contains("encrypted")).expect("a transport item");
    assert_eq!(transport.status, CheckStatus::Ok, "{check:?}");
    assert!(transport.detail.contains("application's ConnectionInfo"), "{}", transport.detail);
    exercise(backend);
}

#[test]
#[serial(redis_tls)]
fn tls_address_with_the_backends_files() {
    support::require_tcp("TLS-only Redis", "127.0.0.1:6390");
    let info = "rediss://127.0.0.1:6390".into_connection_info().unwrap();
    let tls = RedisTls::new().ca(tls_path("ca.pem")).client_identity(tls_path("client.pem"), tls_path("client.key"));
    let opts = RedisOptions::builder().query_timeout(Duration::from_secs(5)).tls(tls).build().unwrap();
    exercise(RedisBackend::from_connection_info(info, opts).unwrap());
}

#[test]
#[serial(redis_tls)]
fn tls_cluster_from_the_applications_node_infos() {
    let infos = ["127.0.0.1:7100", "127.0.0.1:7101", "127.0.0.1:7102"].map(tls_info).to_vec();
    exercise(RedisBackend::cluster_from_connection_infos(infos, options()).unwrap());
}

#[test]
fn unsafe_or_contradicting_infos_are_refused_before_any_io() {
    // Port 1: nothing listens, and nothing is tried.
    let insecure = "rediss://127.0.0.1:1/#insecure".into_connection_info().unwrap();
    let e = RedisBackend::from_connection_info(insecure, options()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("turns certificate verification off"), "{e}");
    let plain = "redis://:hunter2@127.0.0.1:1".into_connection_info().unwrap();
    let with_files = RedisOptions::builder().tls(RedisTls::new().ca("/nonexistent/ca.pem")).build().unwrap();
    let e = RedisBackend::from_connection_info(plain, with_files).unwrap_err();
    assert!(e.to_string().contains("is not TLS") && !e.to_string().contains("hunter2"), "{e}");
    let e = RedisBackend::cluster_from_connection_infos(Vec::new(), options()).unwrap_err();
    assert!(e.to_string().contains("at least one node"), "{e}");
    let mixed = vec![
        "redis://127.0.0.1:1".into_connection_info().unwrap(),
        "rediss://127.0.0.1:2".into_connection_info().unwrap(),
    ];
    let e = RedisBackend::cluster_from_connection_infos(mixed, options()).unwrap_err();
    assert!(e.to_string().contains("mix"), "{e}");
    let waits = RedisOptions::builder().wait_replicas(1).build().unwrap();
    let e =
        RedisBackend::cluster_from_connection_infos(vec!["redis://127.0.0.1:1".into_connection_info().unwrap()], waits)
            .unwrap_err();
    assert!(e.to_string().contains("not available on Redis Cluster"), "{e}");
}
