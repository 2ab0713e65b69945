//! The SQL backends' configuration: [`SqlOptions`] (built with [`SqlOptionsBuilder`]), the
//! `SIMBA_PURGE_INTERVAL` and `SIMBA_SQL_POOL_SIZE` variables ([`ENV_VARS`], read by
//! [`SqlOptionsBuilder::from_vars`]) and the backends' part of [`crate::Config`] ([`SqlConfig`]).
//! The URLs are parsed by the dialects' own modules (`postgres/config.rs`, `mysql/config.rs`),
//! which both [`crate::Config`] and [`SqlBackend`]'s constructors use, so a URL means the same
//! everywhere; a [`crate::Config`] connects with the URL as its dialect parsed it when it was built.

use std::any::Any;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::{SqlBackend, DEFAULT_CONNECTION_LIFETIME, DEFAULT_POOL_SIZE, DEFAULT_PURGE_INTERVAL};
use crate::backend::LeaseBackend;
use crate::backends::registry::{BackendConfig, Knobs, ParsedBackend};
use crate::error::{Error, Result};
use crate::options::DEFAULT_QUERY_TIMEOUT;
use crate::settings::endpoint::{url_error, Endpoint};
use crate::settings::kind::{BackendKind, Family};
use crate::settings::redact::Secret;
use crate::settings::values::{parse_count, parse_duration};

/// The SQL backends' variables ([`SqlOptionsBuilder::from_vars`] and
/// [`Config::from_env`](crate::Config::from_env) read them).
pub(crate) const ENV_VARS: &[&str] = &["SIMBA_PURGE_INTERVAL", "SIMBA_SQL_POOL_SIZE"];

impl SqlOptionsBuilder {
    /// A builder with the SQL variables (in [`crate::config::ENV_VARS`]) read through `get` (empty values count as
    /// unset); later setter calls override them.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<SqlOptionsBuilder> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        SqlOptionsBuilder::default().read_vars(&get, &mut |_| {})
    }

    /// Reads the SQL variables through `get` (which yields only non-empty values), telling `seen`
    /// the name of each one that is set.
    pub(crate) fn read_vars(
        mut self,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<SqlOptionsBuilder> {
        let mut var = |name: &'static str| {
            let v = get(name);
            if v.is_some() {
                seen(name);
            }
            v
        };
        if let Some(v) = var("SIMBA_PURGE_INTERVAL") {
            self = self.purge_interval(parse_duration("SIMBA_PURGE_INTERVAL", &v)?);
        }
        if let Some(v) = var("SIMBA_SQL_POOL_SIZE") {
            self = self.pool_size(parse_count("SIMBA_SQL_POOL_SIZE", &v)?);
        }
        Ok(self)
    }
}

/// The SQL backends' part of the configuration ([`BackendConfig`]): `postgres://` and `mysql://`
/// URLs, [`ENV_VARS`], the options of [`SqlOptionsBuilder`].
pub(crate) struct SqlConfig;

impl BackendConfig for SqlConfig {
    fn kinds(&self) -> &'static [BackendKind] {
        &[
            #[cfg(feature = "postgres")]
            BackendKind::Postgres,
            #[cfg(feature = "mysql")]
            BackendKind::Mysql,
        ]
    }

    fn family(&self) -> Family {
        Family::Sql
    }

    fn env_vars(&self) -> &'static [&'static str] {
        ENV_VARS
    }

    fn read_vars(
        &self,
        knobs: &mut Knobs,
        get: &dyn Fn(&str) -> Option<String>,
        seen: &mut dyn FnMut(&'static str),
    ) -> Result<()> {
        knobs.sql = knobs.sql.clone().read_vars(get, seen)?;
        Ok(())
    }

    /// The settings of the SQL URL `ep` (a `kind` URL) with the options of `knobs.sql`, each value
    /// checked and the URL parsed by the dialect's own parser (its TLS files read; no network I/O).
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule: a MySQL URL with several hosts, a URL without
    /// a database name, a zero or invalid purge interval, an invalid pool size, a URL (or TLS file)
    /// the dialect's parser rejects.
    fn parse(
        &self,
        kind: BackendKind,
        ep: &Endpoint,
        knobs: &Knobs,
        query_timeout: Duration,
    ) -> Result<Arc<dyn ParsedBackend>> {
        let builder = &knobs.sql;
        if kind == BackendKind::Mysql && ep.hosts.len() > 1 {
            return Err(url_error(&ep.redacted, "mysql takes one host"));
        }
        if ep.path.is_empty() {
            return Err(url_error(&ep.redacted, "missing database name, e.g. /simba"));
        }
        if builder.purge_interval.is_some_and(|d| d.is_zero()) {
            return Err(Error::config("purge_interval must be > 0 (SIMBA_PURGE_INTERVAL, e.g. 1m)"));
        }
        let options = builder
            .clone()
            .query_timeout(query_timeout)
            .build()
            .map_err(|e| Error::config(format!("SQL options: {e}")))?;
        let dialect = match kind {
            // The backend's own URL parsing (libpq TLS parameters) and its TLS files.
            #[cfg(feature = "postgres")]
            BackendKind::Postgres => ParsedDialect::Postgres(super::postgres::PgUrl::parse(&ep.raw.0)?),
            // The backend's own URL parsing (ssl-* parameters, TLS files).
            #[cfg(feature = "mysql")]
            BackendKind::Mysql => ParsedDialect::Mysql(super::MysqlConfig::from_url(&ep.raw.0)?),
            other => return Err(Error::config(format!("internal: the {other} backend is not a SQL backend"))),
        };
        Ok(Arc::new(SqlSettings { url: ep.raw.clone(), options, purge_interval: builder.purge_interval, dialect }))
    }
}

/// A SQL URL as its dialect's own parser parsed it (what the backend connects with). One per
/// configuration: the variants' sizes do not matter.
#[derive(Clone)]
#[allow(clippy::large_enum_variant)]
enum ParsedDialect {
    #[cfg(feature = "postgres")]
    Postgres(super::postgres::PgUrl),
    #[cfg(feature = "mysql")]
    Mysql(super::MysqlConfig),
}

/// The SQL settings of a [`crate::Config`]: the URL parsed by its dialect, the options, and the
/// purge interval when it was set.
pub(crate) struct SqlSettings {
    url: Secret,
    pub(crate) options: SqlOptions,
    pub(crate) purge_interval: Option<Duration>,
    dialect: ParsedDialect,
}

impl SqlSettings {
    /// Creates the SQL backend with these settings (no I/O).
    ///
    /// # Errors
    /// `InvalidConfig` when the driver refuses the settings.
    pub(crate) fn connect_sql(&self) -> Result<SqlBackend> {
        match &self.dialect {
            #[cfg(feature = "postgres")]
            ParsedDialect::Postgres(url) => SqlBackend::postgres_parsed(&self.url.0, url.clone(), self.options.clone()),
            #[cfg(feature = "mysql")]
            ParsedDialect::Mysql(config) => SqlBackend::mysql_parsed(&self.url.0, config, self.options.clone()),
        }
    }
}

impl ParsedBackend for SqlSettings {
    fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        Ok(Arc::new(self.connect_sql()?))
    }

    fn debug_fields(&self, d: &mut fmt::DebugStruct<'_, '_>) {
        d.field("sql", &self.options);
    }

    fn as_any(&self) -> &dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_read() {
        let vars = |k: &str| match k {
            "SIMBA_PURGE_INTERVAL" => Some("30s".to_string()),
            "SIMBA_SQL_POOL_SIZE" => Some(" 8 ".to_string()),
            _ => None,
        };
        let o = SqlOptionsBuilder::from_vars(vars).unwrap().build().unwrap();
        assert_eq!((o.purge_interval(), o.pool_size()), (Duration::from_secs(30), 8));
        // Empty values count as unset; later setters override the variables.
        let o = SqlOptionsBuilder::from_vars(|k| (k == "SIMBA_SQL_POOL_SIZE").then(|| "  ".into())).unwrap();
        assert_eq!(o.build().unwrap().pool_size(), super::super::DEFAULT_POOL_SIZE);
        let o = SqlOptionsBuilder::from_vars(vars).unwrap().pool_size(2).build().unwrap();
        assert_eq!(o.pool_size(), 2);
        let e = SqlOptionsBuilder::from_vars(|k| (k == "SIMBA_SQL_POOL_SIZE").then(|| "many".into())).unwrap_err();
        assert!(e.to_string().contains("SIMBA_SQL_POOL_SIZE=\"many\" is not a whole number"), "{e}");
        let e = SqlOptionsBuilder::from_vars(|k| (k == "SIMBA_PURGE_INTERVAL").then(|| "2d".into()))
            .unwrap()
            .build()
            .unwrap_err();
        assert!(e.to_string().contains("at most 24h"), "{e}");
        for v in ENV_VARS {
            assert!(crate::config::ENV_VARS.contains(v), "{v}");
        }
    }
}

/// Settings of a [`SqlBackend`]. Build with [`SqlOptions::builder`]; [`Default`] gives the defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqlOptions {
    pub(super) query_timeout: Duration,
    pub(super) connect_timeout: Option<Duration>,
    pub(super) purge_interval: Duration,
    pub(super) auto_purge: bool,
    pub(super) pool_size: u32,
    pub(super) connection_lifetime: Duration,
}

impl Default for SqlOptions {
    fn default() -> Self {
        SqlOptions {
            query_timeout: DEFAULT_QUERY_TIMEOUT,
            connect_timeout: None,
            purge_interval: DEFAULT_PURGE_INTERVAL,
            auto_purge: true,
            pool_size: DEFAULT_POOL_SIZE,
            connection_lifetime: DEFAULT_CONNECTION_LIFETIME,
        }
    }
}

impl SqlOptions {
    /// A builder starting from the defaults.
    pub fn builder() -> SqlOptionsBuilder {
        SqlOptionsBuilder::default()
    }

    /// Server-side timeout of every statement and bound of every connection checkout
    /// (default [`DEFAULT_QUERY_TIMEOUT`], 5 s), and the bound of every whole call
    /// ([`LeaseBackend::call_bound`](crate::backend::LeaseBackend::call_bound)). Set it to the sessions' renew interval.
    pub fn query_timeout(&self) -> Duration {
        self.query_timeout
    }

    /// TCP connect (and PostgreSQL startup) timeout of new connections (default: the query timeout).
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout.unwrap_or(self.query_timeout)
    }

    /// Least time between two background purges (default 60 s).
    pub fn purge_interval(&self) -> Duration {
        self.purge_interval
    }

    /// Whether `open_session`/`keep_alive` start background purges (default `true`).
    pub fn auto_purge(&self) -> bool {
        self.auto_purge
    }

    /// Connections in the backend's own pool (default 4).
    pub fn pool_size(&self) -> u32 {
        self.pool_size
    }

    /// Longest life of a pooled connection (default 30 min; [`Duration::MAX`]: forever).
    pub fn connection_lifetime(&self) -> Duration {
        self.connection_lifetime
    }
}

/// Builder of [`SqlOptions`].
#[derive(Debug, Clone, Default)]
pub struct SqlOptionsBuilder {
    query_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    purge_interval: Option<Duration>,
    auto_purge: Option<bool>,
    pool_size: Option<u32>,
    connection_lifetime: Option<Duration>,
}

impl SqlOptionsBuilder {
    /// Server-side timeout of every statement and bound of every connection checkout (default 5 s;
    /// 1 ms to 1 h), and the bound of every whole call, statements and retries included. Use the sessions' renew interval: a renewal slower than that counts as failed.
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.query_timeout = Some(d);
        self
    }

    /// TCP connect timeout of new connections (default: the query timeout; 1 ms to 1 h).
    #[must_use]
    pub fn connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = Some(d);
        self
    }

    /// Least time between two background purges of expired sessions (default 60 s; at most 1 day).
    #[must_use]
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.purge_interval = Some(d);
        self
    }

    /// Whether `open_session`/`keep_alive` start background purges (default `true`). Without them,
    /// call [`LeaseBackend::purge_expired`](crate::backend::LeaseBackend::purge_expired) yourself (e.g. `simba purge` from cron).
    #[must_use]
    pub fn auto_purge(mut self, on: bool) -> Self {
        self.auto_purge = Some(on);
        self
    }

    /// Connections in the backend's own pool (default 4; 1 to 256). Connections are opened on
    /// demand; a caller waits at most the query timeout for a free one.
    #[must_use]
    pub fn pool_size(mut self, n: u32) -> Self {
        self.pool_size = Some(n);
        self
    }

    /// Longest life of a pooled connection: it is closed and replaced (on demand) after that,
    /// e.g. to follow a server's rotated certificate or a changed DNS name (default 30 min; at
    /// least 1 s; [`Duration::MAX`] keeps connections forever). PostgreSQL closes a connection this
    /// old when the call using it ends; idle ones are closed by the pool's reaper, every 30 s.
    #[must_use]
    pub fn connection_lifetime(mut self, d: Duration) -> Self {
        self.connection_lifetime = Some(d);
        self
    }

    /// Validates and builds.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule it breaks.
    pub fn build(self) -> Result<SqlOptions> {
        let hour = Duration::from_secs(3600);
        let query_timeout = self.query_timeout.unwrap_or(DEFAULT_QUERY_TIMEOUT);
        if query_timeout < Duration::from_millis(1) || query_timeout > hour {
            return Err(Error::config(format!("query_timeout {query_timeout:?} must be between 1ms and 1h")));
        }
        if let Some(c) = self.connect_timeout {
            if c < Duration::from_millis(1) || c > hour {
                return Err(Error::config(format!("connect_timeout {c:?} must be between 1ms and 1h")));
            }
        }
        let purge_interval = self.purge_interval.unwrap_or(DEFAULT_PURGE_INTERVAL);
        if purge_interval > Duration::from_secs(24 * 3600) {
            return Err(Error::config(format!("purge_interval {purge_interval:?} must be at most 24h")));
        }
        let pool_size = self.pool_size.unwrap_or(DEFAULT_POOL_SIZE);
        if !(1..=256).contains(&pool_size) {
            return Err(Error::config(format!("pool_size {pool_size} must be between 1 and 256")));
        }
        let connection_lifetime = self.connection_lifetime.unwrap_or(DEFAULT_CONNECTION_LIFETIME);
        if connection_lifetime < Duration::from_secs(1) {
            return Err(Error::config(format!(
                "connection_lifetime {connection_lifetime:?} must be at least 1s (Duration::MAX: forever)"
            )));
        }
        Ok(SqlOptions {
            query_timeout,
            connect_timeout: self.connect_timeout,
            purge_interval,
            auto_purge: self.auto_purge.unwrap_or(true),
            pool_size,
            connection_lifetime,
        })
    }
}
