//! The shared SQL backend of a test binary (one pool, schema created once), per dialect.
#![allow(dead_code)]

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use simba::backends::sql::{SqlBackend, SqlOptions};

/// The SQL servers of `scripts/services`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// PostgreSQL (`SIMBA_TEST_POSTGRES_URL`).
    Postgres,
    /// MySQL/MariaDB (`SIMBA_TEST_MYSQL_URL`).
    Mysql,
}

impl Dialect {
    /// The test URL of this dialect's server.
    pub fn url(self) -> String {
        match self {
            Dialect::Postgres => super::env_or("SIMBA_TEST_POSTGRES_URL", "postgres://postgres@127.0.0.1:5432/test"),
            Dialect::Mysql => super::env_or("SIMBA_TEST_MYSQL_URL", "mysql://root@127.0.0.1:3306/test"),
        }
    }

    fn server(self) -> &'static str {
        match self {
            Dialect::Postgres => "PostgreSQL",
            Dialect::Mysql => "MySQL/MariaDB",
        }
    }
}

/// One backend for the whole binary (query timeout 1 s), its schema initialised; fails with a
/// clear message when the server is down.
pub fn shared_backend(dialect: Dialect) -> Arc<SqlBackend> {
    static POSTGRES: OnceLock<Arc<SqlBackend>> = OnceLock::new();
    static MYSQL: OnceLock<Arc<SqlBackend>> = OnceLock::new();
    let cell = match dialect {
        Dialect::Postgres => &POSTGRES,
        Dialect::Mysql => &MYSQL,
    };
    cell.get_or_init(|| {
        let url = dialect.url();
        let addr = url.split('@').next_back().unwrap_or_default().split('/').next().unwrap_or_default().to_string();
        super::require_tcp(dialect.server(), &addr);
        let options = SqlOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
        let backend = match dialect {
            #[cfg(feature = "postgres")]
            Dialect::Postgres => SqlBackend::postgres(&url, options),
            #[cfg(feature = "mysql")]
            Dialect::Mysql => SqlBackend::mysql(&url, options),
            #[allow(unreachable_patterns)]
            other => panic!("{other:?} needs its cargo feature"),
        }
        .unwrap();
        backend
            .init_schema()
            .unwrap_or_else(|e| panic!("cannot initialise the schema at {url}: {e:?} (run `scripts/services up`)"));
        Arc::new(backend)
    })
    .clone()
}
