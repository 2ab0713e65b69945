//! Where the SQL backends' settings come from: the `SIMBA_PURGE_INTERVAL` and
//! `SIMBA_SQL_POOL_SIZE` variables ([`ENV_VARS`], read by [`SqlOptionsBuilder::from_vars`]) and
//! [`crate::ConfigBuilder`]'s SQL setters. The options themselves are [`SqlOptions`]; the URLs are
//! parsed by the dialects' own modules (`postgres/config.rs`, `mysql/config.rs`), which both
//! [`crate::Config`] and [`SqlBackend`]'s constructors use, so a URL means the same everywhere.

use std::time::Duration;

use super::{SqlBackend, SqlOptions, SqlOptionsBuilder};
use crate::config::kind::Family;
use crate::config::url::{url_error, Endpoint};
use crate::config::values::{parse_count, parse_duration};
use crate::config::{BackendKind, BackendSettings, Config, ConfigBuilder};
use crate::error::{Error, Result};

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

/// The settings of the SQL URL `ep` (a `kind` URL) with the options of `builder`, each value
/// checked and the URL parsed by the dialect's own parser (its TLS files read; no network I/O).
/// `query_timeout` is the sessions' query timeout.
///
/// # Errors
/// `InvalidConfig` naming the value and the rule: a MySQL URL with several hosts, a URL without a
/// database name, a zero or invalid purge interval, an invalid pool size, a URL (or TLS file) the
/// dialect's parser rejects.
pub(crate) fn resolve(
    kind: BackendKind,
    ep: &Endpoint,
    builder: &SqlOptionsBuilder,
    query_timeout: Duration,
) -> Result<BackendSettings> {
    if kind == BackendKind::Mysql && ep.hosts.len() > 1 {
        return Err(url_error(&ep.redacted, "mysql takes one host"));
    }
    if ep.path.is_empty() {
        return Err(url_error(&ep.redacted, "missing database name, e.g. /simba"));
    }
    if builder.purge_interval.is_some_and(|d| d.is_zero()) {
        return Err(Error::config("purge_interval must be > 0 (SIMBA_PURGE_INTERVAL, e.g. 1m)"));
    }
    let options =
        builder.clone().query_timeout(query_timeout).build().map_err(|e| Error::config(format!("SQL options: {e}")))?;
    match kind {
        // The backend's own URL parsing (ssl-* parameters, TLS files): refused at build time.
        #[cfg(feature = "mysql")]
        BackendKind::Mysql => {
            super::MysqlConfig::from_url(&ep.raw.0)?;
        }
        // The backend's own URL parsing (libpq TLS parameters) and its TLS files.
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => super::postgres::validate_url(&ep.raw.0)?,
        _ => {}
    }
    Ok(BackendSettings::Sql { options, purge_interval: builder.purge_interval })
}

/// The SQL settings of [`ConfigBuilder`] (each forwards to [`SqlOptionsBuilder`]; checked by
/// [`build`](ConfigBuilder::build)).
impl ConfigBuilder {
    /// SQL only: minimum time between purges of expired sessions (default 1 min; more than 0, at
    /// most 1 day; [`SqlOptionsBuilder::purge_interval`]).
    #[must_use]
    pub fn purge_interval(mut self, d: Duration) -> Self {
        self.sql = self.sql.purge_interval(d);
        self.mark((Family::Sql, "purge_interval"));
        self
    }

    /// SQL only: connections in the backend's own pool (default 4; 1 to 256;
    /// [`SqlOptionsBuilder::pool_size`]).
    #[must_use]
    pub fn sql_pool_size(mut self, n: u32) -> Self {
        self.sql = self.sql.pool_size(n);
        self.mark((Family::Sql, "sql_pool_size"));
        self
    }
}

/// The SQL settings of a [`Config`].
impl Config {
    /// SQL: the purge interval, when set (the backend's default otherwise; `None` for another
    /// backend).
    pub fn purge_interval(&self) -> Option<Duration> {
        match &self.backend {
            BackendSettings::Sql { purge_interval, .. } => *purge_interval,
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// SQL: the backend's options (`None` for another backend).
    pub fn sql_options(&self) -> Option<&SqlOptions> {
        match &self.backend {
            BackendSettings::Sql { options, .. } => Some(options),
            #[allow(unreachable_patterns)]
            _ => None,
        }
    }

    /// Creates the SQL backend itself (for [`init_schema`](SqlBackend::init_schema) and other
    /// SQL-only operations). No I/O happens here.
    ///
    /// # Errors
    /// `InvalidConfig` when the configured backend is not SQL or the URL is rejected by the driver.
    pub fn connect_sql(&self) -> Result<SqlBackend> {
        self.connect_sql_inner().map_err(|e| self.scrub(e))
    }

    pub(crate) fn connect_sql_inner(&self) -> Result<SqlBackend> {
        let kind = self.backend_kind();
        match (kind, self.sql_options()) {
            #[cfg(feature = "postgres")]
            (BackendKind::Postgres, Some(options)) => SqlBackend::postgres(&self.endpoint()?.raw.0, options.clone()),
            #[cfg(feature = "mysql")]
            (BackendKind::Mysql, Some(options)) => SqlBackend::mysql(&self.endpoint()?.raw.0, options.clone()),
            (other, _) => Err(Error::config(format!(
                "the {other} backend is not a SQL backend (postgres or mysql){}",
                other
                    .feature()
                    .filter(|_| !other.is_compiled())
                    .map(|f| format!(" and needs the `{f}` feature"))
                    .unwrap_or_default()
            ))),
        }
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
