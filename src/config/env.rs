//! Reading the `SIMBA_*` environment variables: the generic ones here, each backend's through
//! its [`BackendConfig::read_vars`](crate::backends::registry::BackendConfig::read_vars).

use super::{Config, ConfigBuilder};
use crate::backends::registry::{BACKEND_VARS, REGISTRY};
use crate::error::{Error, Result};
use crate::settings::kind::{BackendKind, Family};
use crate::settings::values::{parse_bool, parse_count, parse_drift, parse_duration};

/// The variables that are not any one backend's (the selection rules and the session timing).
const GENERIC_VARS: &[&str] = &[
    "SIMBA_URL",
    "SIMBA_BACKEND",
    "SIMBA_ENABLED",
    "SIMBA_POSTGRES_ENABLED",
    "SIMBA_MYSQL_ENABLED",
    "SIMBA_REDIS_ENABLED",
    "SIMBA_ZOOKEEPER_ENABLED",
    "SIMBA_ETCD_ENABLED",
    "SIMBA_MEMORY_ENABLED",
    "SIMBA_LEASE_DURATION",
    "SIMBA_RENEW_INTERVAL",
    "SIMBA_DRIFT",
    "SIMBA_QUERY_TIMEOUT",
    "SIMBA_WORKER_THREADS",
    "SIMBA_POLL_INTERVAL",
    "SIMBA_METADATA",
];

const fn var_count() -> usize {
    let mut n = GENERIC_VARS.len();
    let mut p = 0;
    while p < BACKEND_VARS.len() {
        n += BACKEND_VARS[p].len();
        p += 1;
    }
    n
}

const ENV_VAR_COUNT: usize = var_count();

/// The generic variables, then those of each compiled-in backend (in registry order).
const fn concat() -> [&'static str; ENV_VAR_COUNT] {
    let mut out = [""; ENV_VAR_COUNT];
    let mut n = 0;
    while n < GENERIC_VARS.len() {
        out[n] = GENERIC_VARS[n];
        n += 1;
    }
    let mut p = 0;
    while p < BACKEND_VARS.len() {
        let mut i = 0;
        while i < BACKEND_VARS[p].len() {
            out[n] = BACKEND_VARS[p][i];
            n += 1;
            i += 1;
        }
        p += 1;
    }
    out
}

const ALL_VARS: [&str; ENV_VAR_COUNT] = concat();

/// Every environment variable [`Config::from_env`] reads: the generic ones and those of the
/// backends compiled in (each backend declares its own list, crate-private; this is the one public
/// list). A `SIMBA_REDIS_*`,
/// `SIMBA_ZOOKEEPER_*`, `SIMBA_SQL_*` or `SIMBA_PURGE_INTERVAL` variable of a backend that is not
/// compiled in counts as that backend's setting in the selection rules.
pub const ENV_VARS: &[&str] = &ALL_VARS;

/// `SIMBA_*` variables that are not settings (the CLI sets them for its children; tests use
/// `SIMBA_TEST_*`), so [`Config::from_env`] does not warn about them.
const NOT_SETTINGS: &[&str] = &["SIMBA_TOKEN", "SIMBA_LEASE", "SIMBA_SESSION", "SIMBA_GROUP"];

impl ConfigBuilder {
    /// Reads the `SIMBA_*` environment variables (see [`ENV_VARS`]); empty values count as unset.
    /// Unknown `SIMBA_*` variables produce a warning (a likely typo).
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule, and for a
    /// setting whose value is not UTF-8 (rather than ignoring it).
    pub fn from_env() -> Result<ConfigBuilder> {
        text_only(std::env::vars_os())?;
        let mut b = ConfigBuilder::from_vars(|k| std::env::var(k).ok())?;
        for (k, _) in std::env::vars_os() {
            let Some(k) = k.to_str() else { continue };
            if k.starts_with("SIMBA_")
                && !k.starts_with("SIMBA_TEST_")
                && !ENV_VARS.contains(&k)
                && !NOT_SETTINGS.contains(&k)
            {
                match Family::not_compiled_owner(k) {
                    // Whose it is, even though that backend cannot read it in this build.
                    Some(family) => {
                        b.not_compiled.insert((family, k.to_string()));
                    }
                    None => b.warnings.push(format!("unknown environment variable {k} is ignored (a typo?)")),
                }
            }
        }
        Ok(b)
    }

    /// Like [`from_env`](ConfigBuilder::from_env), reading variables through `get` (for tests and
    /// for other sources such as a config file). Empty values count as unset.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed value, naming the variable and the rule.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<ConfigBuilder> {
        let get = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let mut b = ConfigBuilder::default();
        if let Some(v) = get("SIMBA_URL") {
            b.url = Some((v, "SIMBA_URL"));
        }
        if let Some(v) = get("SIMBA_BACKEND") {
            let kind = v.parse::<BackendKind>().map_err(|e| Error::config(format!("SIMBA_BACKEND: {e}")))?;
            b.backend = Some((kind, "SIMBA_BACKEND"));
        }
        if let Some(v) = get("SIMBA_ENABLED") {
            if !parse_bool("SIMBA_ENABLED", &v)? {
                for f in
                    [Family::Postgres, Family::Mysql, Family::Redis, Family::Zookeeper, Family::Etcd, Family::Memory]
                {
                    b.disabled.push((f, "SIMBA_ENABLED"));
                }
            }
        }
        for f in [Family::Postgres, Family::Mysql, Family::Redis, Family::Zookeeper, Family::Etcd, Family::Memory] {
            let var = f.enabled_var();
            if let Some(v) = get(var) {
                if !parse_bool(var, &v)? {
                    b.disabled.push((f, var));
                }
            }
        }
        if let Some(v) = get("SIMBA_LEASE_DURATION") {
            b.session = b.session.lease_duration(parse_duration("SIMBA_LEASE_DURATION", &v)?);
        }
        if let Some(v) = get("SIMBA_RENEW_INTERVAL") {
            b.session = b.session.renew_interval(parse_duration("SIMBA_RENEW_INTERVAL", &v)?);
        }
        if let Some(v) = get("SIMBA_DRIFT") {
            b.session = b.session.drift(parse_drift("SIMBA_DRIFT", &v)?);
        }
        if let Some(v) = get("SIMBA_QUERY_TIMEOUT") {
            b.session = b.session.query_timeout(parse_duration("SIMBA_QUERY_TIMEOUT", &v)?);
        }
        if let Some(v) = get("SIMBA_WORKER_THREADS") {
            b.session = b.session.worker_threads(parse_count("SIMBA_WORKER_THREADS", &v)? as usize);
        }
        if let Some(v) = get("SIMBA_POLL_INTERVAL") {
            b.session = b.session.poll_interval(parse_duration("SIMBA_POLL_INTERVAL", &v)?);
        }
        if let Some(v) = get("SIMBA_METADATA") {
            b.session = b.session.metadata(v);
        }
        let mut seen: Vec<(Family, &'static str)> = Vec::new();
        for backend in REGISTRY {
            // A backend reads only the variables it declares (so every one is in ENV_VARS).
            let own = |k: &str| backend.env_vars().contains(&k).then(|| get(k)).flatten();
            let family = backend.family();
            backend.read_vars(&mut b.backends, &own, &mut |name| seen.push((family, name)))?;
        }
        b.specific.extend(seen);
        Ok(b)
    }
}

impl Config {
    /// Reads and validates the `SIMBA_*` environment variables (see [`ENV_VARS`] and
    /// `docs/configuration.md`). Warnings (ignored settings, unknown variables) are logged and
    /// kept in [`warnings`](Config::warnings).
    ///
    /// # Errors
    /// `InvalidConfig` as [`ConfigBuilder::build`], or for a malformed variable.
    pub fn from_env() -> Result<Config> {
        let c = ConfigBuilder::from_env()?.build()?;
        c.log_warnings();
        Ok(c)
    }

    /// Like [`from_env`](Config::from_env), reading variables through `get`.
    ///
    /// # Errors
    /// As [`from_env`](Config::from_env).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config> {
        ConfigBuilder::from_vars(get)?.build()
    }
}

/// Refuses a setting (one of [`ENV_VARS`]) whose value is not UTF-8: settings are read as text,
/// and one left out would silently fall back to its default (a TLS file path, say).
fn text_only(vars: impl Iterator<Item = (std::ffi::OsString, std::ffi::OsString)>) -> Result<()> {
    for (k, v) in vars {
        let Some(k) = k.to_str() else { continue };
        if ENV_VARS.contains(&k) && v.to_str().is_none() {
            return Err(Error::config(format!(
                "{k} is not valid UTF-8 ({}): settings are read as text; give a UTF-8 value (a file path: \
                 link or move the file to a UTF-8 path), or set it in code",
                v.to_string_lossy()
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    use super::*;

    #[test]
    fn a_setting_that_is_not_utf8_is_refused_by_name() {
        let bad = OsString::from_vec(b"/etc/ssl/\xffca.pem".to_vec());
        let vars = [(OsString::from("SIMBA_URL"), bad)];
        let e = text_only(vars.into_iter()).unwrap_err();
        assert!(e.to_string().contains("SIMBA_URL is not valid UTF-8"), "{e}");
        assert!(e.to_string().contains("/etc/ssl/\u{fffd}ca.pem"), "{e}");
        // Other variables are not settings: not ours to judge.
        let other = [(OsString::from("HOME"), OsString::from_vec(vec![0xff]))];
        assert!(text_only(other.into_iter()).is_ok());
        let fine = [(OsString::from("SIMBA_URL"), OsString::from("/etc/ssl/ca.pem"))];
        assert!(text_only(fine.into_iter()).is_ok());
    }
}
