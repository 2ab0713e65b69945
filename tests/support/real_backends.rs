//! The real backends of `scripts/test`'s servers, built from their `SIMBA_TEST_*_URL`s as the TCK
//! files build them (shared by tests/differential.rs and tests/soak.rs through `#[path]`, so the
//! other test binaries do not compile it). A server that is down fails with "run `scripts/services up`".
#![allow(dead_code)]

#[allow(unused_imports)]
use std::sync::Arc;
#[allow(unused_imports)]
use std::time::Duration;

use crate::support;

#[cfg(feature = "postgres")]
pub fn postgres() -> Arc<dyn simba::backend::LeaseBackend> {
    support::sql::shared_backend(support::sql::Dialect::Postgres)
}

#[cfg(feature = "mysql")]
pub fn mysql() -> Arc<dyn simba::backend::LeaseBackend> {
    support::sql::shared_backend(support::sql::Dialect::Mysql)
}

#[cfg(feature = "redis")]
fn redis_at(url: &str, what: &str, service: &str, timeout: Duration) -> Arc<dyn simba::backend::LeaseBackend> {
    use simba::backends::redis::{RedisBackend, RedisOptions};
    let addr = url.split("://").nth(1).unwrap_or_default().split([',', '/', '?']).next().unwrap_or_default();
    support::require_tcp(what, addr);
    let options = RedisOptions::builder().query_timeout(timeout).build().unwrap();
    let backend = RedisBackend::connect(url, options)
        .unwrap_or_else(|e| panic!("cannot connect to {what} at {url}: {e} (run `scripts/services up {service}`)"));
    Arc::new(backend)
}

#[cfg(feature = "redis")]
pub fn redis() -> Arc<dyn simba::backend::LeaseBackend> {
    let url = support::env_or("SIMBA_TEST_REDIS_URL", "redis://127.0.0.1:6379");
    redis_at(&url, "Redis", "redis", Duration::from_secs(1))
}

#[cfg(feature = "redis")]
pub fn redis_cluster() -> Arc<dyn simba::backend::LeaseBackend> {
    let url =
        support::env_or("SIMBA_TEST_REDIS_CLUSTER_URL", "redis+cluster://127.0.0.1:7000,127.0.0.1:7001,127.0.0.1:7002");
    redis_at(&url, "Redis Cluster", "redis-cluster", Duration::from_secs(1))
}

#[cfg(feature = "zookeeper")]
fn zk_at(url: &str, what: &str, service: &str) -> Arc<dyn simba::backend::LeaseBackend> {
    use simba::backends::zookeeper::{ZookeeperBackend, ZookeeperOptions};
    let hosts = url.trim_start_matches("zookeeper://").split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp(what, hosts.split(',').next().unwrap_or_default());
    let backend = ZookeeperBackend::from_url(url, ZookeeperOptions::default())
        .unwrap_or_else(|e| panic!("cannot connect to {what} at {url}: {e} (run `scripts/services up {service}`)"));
    Arc::new(backend)
}

#[cfg(feature = "zookeeper")]
pub fn zookeeper() -> Arc<dyn simba::backend::LeaseBackend> {
    let url = support::env_or("SIMBA_TEST_ZOOKEEPER_URL", "zookeeper://127.0.0.1:2181/simba-test");
    zk_at(&url, "ZooKeeper", "zookeeper")
}

#[cfg(feature = "postgres")]
pub fn postgres_tls() -> Arc<dyn simba::backend::LeaseBackend> {
    use simba::backends::sql::{SqlBackend, SqlOptions};
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
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    let backend = SqlBackend::postgres(&url, options)
        .unwrap_or_else(|e| panic!("bad TLS URL {url}: {e} (run `scripts/services up postgres-tls`)"));
    backend.init_schema().unwrap_or_else(|e| {
        panic!(
            "cannot initialise the schema over TLS: {} (run `scripts/services up postgres-tls`)",
            simba::display_chain(&e)
        )
    });
    Arc::new(backend)
}

#[cfg(feature = "mysql")]
pub fn mysql_tls() -> Arc<dyn simba::backend::LeaseBackend> {
    use simba::backends::sql::{SqlBackend, SqlOptions};
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
    let options = SqlOptions::builder().query_timeout(Duration::from_secs(2)).build().unwrap();
    let backend = SqlBackend::mysql(&url, options)
        .unwrap_or_else(|e| panic!("bad TLS URL {url}: {e} (run `scripts/services up mysql-tls`)"));
    backend.init_schema().unwrap_or_else(|e| {
        panic!("cannot initialise the schema over TLS at {url}: {e} (run `scripts/services up mysql-tls`)")
    });
    Arc::new(backend)
}

#[cfg(feature = "redis")]
pub fn redis_tls() -> Arc<dyn simba::backend::LeaseBackend> {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_REDIS_TLS_URL",
        &format!("rediss://127.0.0.1:6390?ca={dir}/ca.pem&cert={dir}/client.pem&key={dir}/client.key"),
    );
    redis_at(&url, "TLS-only Redis", "redis-tls", Duration::from_secs(2))
}

#[cfg(feature = "redis")]
pub fn redis_cluster_tls() -> Arc<dyn simba::backend::LeaseBackend> {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_REDIS_CLUSTER_TLS_URL",
        &format!("rediss+cluster://127.0.0.1:7100,127.0.0.1:7101,127.0.0.1:7102?ca={dir}/ca.pem"),
    );
    redis_at(&url, "TLS-only Redis Cluster", "redis-cluster-tls", Duration::from_secs(2))
}

#[cfg(feature = "zookeeper")]
pub fn zookeeper_tls() -> Arc<dyn simba::backend::LeaseBackend> {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_ZOOKEEPER_TLS_URL",
        &format!(
            "zookeeper://127.0.0.1:2185/simba-test?tls_ca={dir}/ca.pem&tls_cert={dir}/client.pem&tls_key={dir}/client.key"
        ),
    );
    zk_at(&url, "the TLS-only ZooKeeper", "zookeeper-tls")
}

#[cfg(feature = "etcd")]
fn etcd_at(url: &str, what: &str, service: &str) -> Arc<dyn simba::backend::LeaseBackend> {
    use simba::backends::etcd::{EtcdBackend, EtcdOptions};
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let hosts = rest.split(['/', '?']).next().unwrap_or_default().to_string();
    support::require_tcp(what, hosts.split(',').next().unwrap_or_default());
    let backend = EtcdBackend::from_url(url, EtcdOptions::default())
        .unwrap_or_else(|e| panic!("cannot connect to {what} at {url}: {e} (run `scripts/services up {service}`)"));
    Arc::new(backend)
}

#[cfg(feature = "etcd")]
pub fn etcd() -> Arc<dyn simba::backend::LeaseBackend> {
    let url = support::env_or("SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379/simba-test");
    etcd_at(&url, "etcd", "etcd")
}

#[cfg(feature = "etcd")]
pub fn etcd_tls() -> Arc<dyn simba::backend::LeaseBackend> {
    let dir = support::tls::dir();
    let url = support::env_or(
        "SIMBA_TEST_ETCD_TLS_URL",
        &format!("etcds://127.0.0.1:2389/simba-test?ca={dir}/ca.pem&cert={dir}/client.pem&key={dir}/client.key"),
    );
    etcd_at(&url, "the TLS-only etcd", "etcd-tls")
}
