//! Configuration and backend selection: [`Config`].
//!
//! A `Config` says which backend to use, how to reach it and how sessions are timed. Build it in
//! code with [`Config::builder`], from a URL with [`Config::from_url`], or from `SIMBA_*`
//! environment variables with [`Config::from_env`]; then [`Config::connect`] creates the backend and
//! [`Config::session_options`] gives the session timing.
//!
//! ```
//! use simba::{Config, Session};
//! let config = Config::from_url("memory://")?;
//! let session = Session::open(config.connect()?, config.session_options())?;
//! let lease = session.lock("nightly-report")?;
//! # Ok::<(), simba::Error>(())
//! ```
//!
//! # Selection rules
//!
//! The backend is chosen **explicitly**: by the URL's scheme (`postgres://`, `mysql://`, `redis://`,
//! `redis+cluster://`, `zookeeper://`, `memory://`) or by [`ConfigBuilder::backend`] /
//! `SIMBA_BACKEND`. It is never guessed:
//!
//! - a backend whose Cargo feature is not compiled in is an error naming the feature;
//! - a backend disabled with `SIMBA_<BACKEND>_ENABLED=false` (or `SIMBA_ENABLED=false`) is an error;
//! - `SIMBA_BACKEND` that contradicts the URL's scheme is an error;
//! - settings of backends (e.g. `SIMBA_REDIS_*` and `SIMBA_ZOOKEEPER_*`) without an explicit
//!   choice are an error naming them; with an explicit choice, settings of other backends are
//!   ignored with a warning ([`Config::warnings`]);
//! - no choice at all is an error.
//!
//! An application may always skip all of this and pass its own backend to
//! [`Session::open`](crate::Session::open) or [`Coordinator::start`](crate::Coordinator::start).
//!
//! Every value is validated by [`ConfigBuilder::build`] before any I/O, with a message naming the
//! value and the rule. Secrets (URL passwords, sensitive URL query values, ZooKeeper auth
//! credentials) never appear in `Debug`, logs or error messages: URLs are shown redacted, e.g.
//! `redis://user:***@host:6379`. See `docs/configuration.md`.

mod env;
mod per_backend;

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use self::env::ENV_VARS;
use crate::backend::LeaseBackend;
use crate::backends::registry::{backend_of, ParsedBackend, REGISTRY};
use crate::error::{display_chain, Error, Result};
use crate::options::{SessionOptions, SessionOptionsBuilder};
use crate::settings::endpoint::{parse_endpoint, Endpoint};
pub use crate::settings::kind::BackendKind;
use crate::settings::kind::{example_url, Family};
pub use crate::settings::redact::redact_url;
use crate::settings::redact::Secret;

/// Builder of [`Config`]. Setters record values; [`build`](ConfigBuilder::build) validates them
/// all before any I/O. Settings from the environment ([`ConfigBuilder::from_env`]) can be
/// overridden by later setter calls.
#[derive(Clone, Default)]
pub struct ConfigBuilder {
    url: Option<(String, &'static str)>,
    backend: Option<(BackendKind, &'static str)>,
    disabled: Vec<(Family, &'static str)>,
    session: SessionOptionsBuilder,
    /// Each compiled-in backend's own options builder (their variables' parsing lives with them).
    backends: crate::backends::registry::Knobs,
    /// Backend-specific settings that were set, with the name they were set under.
    specific: BTreeSet<(Family, &'static str)>,
    /// `SIMBA_*` variables of backends not compiled in (they still count in the selection rules).
    not_compiled: BTreeSet<(Family, String)>,
    warnings: Vec<String>,
}

impl fmt::Debug for ConfigBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("ConfigBuilder");
        d.field("url", &self.url.as_ref().map(|(u, _)| redact_url(u)))
            .field("backend", &self.backend.map(|(b, _)| b))
            .field("session", &self.session);
        self.backends.debug_fields(&mut d);
        d.finish_non_exhaustive()
    }
}

impl ConfigBuilder {
    /// The backend URL (its scheme chooses the backend). Replaces `SIMBA_URL`.
    #[must_use]
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some((url.into(), "url"));
        self
    }

    /// The explicit backend choice (must agree with the URL's scheme when both are given).
    /// Replaces `SIMBA_BACKEND`.
    #[must_use]
    pub fn backend(mut self, kind: BackendKind) -> Self {
        self.backend = Some((kind, "backend"));
        self
    }

    /// How long the backend keeps a session without renewal (default 15 s).
    #[must_use]
    pub fn lease_duration(mut self, d: Duration) -> Self {
        self.session = self.session.lease_duration(d);
        self
    }

    /// Time between keep-alives (default 5 s, or lease_duration / 3 when only that is set).
    #[must_use]
    pub fn renew_interval(mut self, d: Duration) -> Self {
        self.session = self.session.renew_interval(d);
        self
    }

    /// Allowed clock-rate difference between client and backend (default 0.01).
    #[must_use]
    pub fn drift(mut self, drift: f64) -> Self {
        self.session = self.session.drift(drift);
        self
    }

    /// Per-call timeout of the session engine and of the backend's own calls (default = renew
    /// interval).
    #[must_use]
    pub fn query_timeout(mut self, d: Duration) -> Self {
        self.session = self.session.query_timeout(d);
        self
    }

    /// The most worker threads running backend calls at once, process-wide (default 64; see
    /// [`SessionOptionsBuilder::worker_threads`](crate::options::SessionOptionsBuilder::worker_threads)).
    #[must_use]
    pub fn worker_threads(mut self, n: usize) -> Self {
        self.session = self.session.worker_threads(n);
        self
    }

    /// How often a waiter tries again on a backend that does not push releases (default 500 ms;
    /// see [`SessionOptionsBuilder::poll_interval`](crate::options::SessionOptionsBuilder::poll_interval)).
    #[must_use]
    pub fn poll_interval(mut self, d: Duration) -> Self {
        self.session = self.session.poll_interval(d);
        self
    }

    /// Session metadata visible to others (at most 1024 bytes).
    #[must_use]
    pub fn metadata(mut self, m: impl Into<String>) -> Self {
        self.session = self.session.metadata(m);
        self
    }

    /// Disables `kind`'s backend family (like `SIMBA_<BACKEND>_ENABLED=false`): choosing it fails.
    #[must_use]
    pub fn disable(mut self, kind: BackendKind) -> Self {
        self.disabled.push((kind.family(), "disable"));
        self
    }

    /// Applies the selection rules and validates every value, without any I/O.
    ///
    /// # Errors
    /// `InvalidConfig` naming the value and the rule: no backend chosen, contradicting choices,
    /// settings for two backends without a choice, a backend whose feature is not compiled in or
    /// that is disabled, a malformed URL, invalid timings or backend options.
    pub fn build(self) -> Result<Config> {
        let mut warnings = self.warnings.clone();
        let endpoint = match &self.url {
            Some((u, _)) => Some(parse_endpoint(u)?),
            None => None,
        };
        let kind = self.select(endpoint.as_ref())?;
        let Some(backend) = backend_of(kind) else {
            let feature = kind.feature().unwrap_or("none");
            return Err(Error::config(format!(
                "the {} backend needs the `{feature}` feature: cargo build --features {feature}",
                kind.name()
            )));
        };
        if let Some((_, label)) = self.disabled.iter().find(|(f, _)| *f == kind.family()) {
            let how = if *label == "disable" { "ConfigBuilder::disable".to_string() } else { format!("{label}=false") };
            return Err(Error::config(format!("the {} backend is disabled ({how})", kind.name())));
        }
        for (family, label) in self.settings_set() {
            if !family.applies_to(kind) {
                warnings.push(format!("{label} is a {} setting and is ignored by the {} backend", family.name(), kind));
            }
        }
        let session = self.session.clone().build()?;
        // The backend's own settings from the URL parsed above (no I/O but reading TLS files):
        // what it connects with.
        let parsed = match &endpoint {
            Some(ep) => backend.parse(kind, ep, &self.backends, session.query_timeout())?,
            None => backend.parse_without_url(kind, &self.backends)?,
        };
        let mut secrets = endpoint.as_ref().map(Endpoint::secrets).unwrap_or_default();
        secrets.extend(REGISTRY.iter().flat_map(|b| b.secrets(&self.backends)));
        secrets.retain(|x| !x.is_empty());
        let secrets = secrets.into_iter().map(Secret).collect();
        Ok(Config { kind, endpoint, session, backend: parsed, secrets, warnings })
    }

    /// Every backend-specific setting that was set, with the name it was set under (including the
    /// variables of backends not compiled in).
    fn settings_set(&self) -> Vec<(Family, String)> {
        let mut all: Vec<(Family, String)> = self.specific.iter().map(|(f, l)| (*f, l.to_string())).collect();
        all.extend(self.not_compiled.iter().cloned());
        all
    }

    /// The selection rules of the module docs.
    fn select(&self, endpoint: Option<&Endpoint>) -> Result<BackendKind> {
        match (endpoint, self.backend) {
            (Some(ep), Some((choice, label))) => {
                if choice.agrees_with(ep.kind) {
                    Ok(ep.kind)
                } else {
                    let url_label = self.url.as_ref().map_or("url", |(_, l)| *l);
                    Err(Error::config(format!(
                        "{label}={choice} contradicts {url_label}={} (a {} URL): choose one backend",
                        ep.redacted, ep.kind
                    )))
                }
            }
            (Some(ep), None) => Ok(ep.kind),
            (None, Some((BackendKind::Memory, _))) => Ok(BackendKind::Memory),
            (None, Some((choice, label))) => Err(Error::config(format!(
                "{label}={choice} needs a URL: set SIMBA_URL (or --url), e.g. {}",
                example_url(choice)
            ))),
            (None, None) => {
                let set = self.settings_set();
                let families: BTreeSet<Family> = set.iter().map(|(f, _)| *f).collect();
                let listed = |f: Family| {
                    let names: Vec<&str> = set.iter().filter(|(g, _)| *g == f).map(|(_, l)| l.as_str()).collect();
                    format!("{} ({})", f.name(), names.join(", "))
                };
                if families.len() > 1 {
                    let all: Vec<String> = families.iter().map(|f| listed(*f)).collect();
                    Err(Error::config(format!(
                        "settings for {} backends but no backend chosen: {}; choose one with SIMBA_URL or \
                         SIMBA_BACKEND (the backend is never guessed)",
                        families.len(),
                        all.join(" and ")
                    )))
                } else if let Some(f) = families.first() {
                    Err(Error::config(format!(
                        "{} settings are set but no backend is chosen: {}; set SIMBA_URL (or --url) to choose \
                         the backend (it is never guessed)",
                        f.name(),
                        listed(*f)
                    )))
                } else {
                    Err(Error::config(
                        "no backend chosen: set SIMBA_URL (or --url), e.g. redis://127.0.0.1:6379, \
                         postgres://user@host:5432/db or memory:// (or SIMBA_BACKEND=memory)",
                    ))
                }
            }
        }
    }
}

/// A validated configuration: which backend, how to reach it, and the session timing.
///
/// `Debug` never shows secrets. See the [module docs](self) for the selection rules.
#[derive(Clone)]
pub struct Config {
    kind: BackendKind,
    endpoint: Option<Endpoint>,
    session: SessionOptions,
    /// The chosen backend's settings, as its own parser made them from the URL.
    backend: Arc<dyn ParsedBackend>,
    /// Every secret of the configuration, to scrub from third-party error messages.
    secrets: Vec<Secret>,
    warnings: Vec<String>,
}

impl fmt::Debug for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Config");
        d.field("backend", &self.kind).field("url", &self.endpoint).field("session", &self.session);
        self.backend.debug_fields(&mut d);
        d.finish()
    }
}

impl Config {
    /// A builder with nothing set.
    pub fn builder() -> ConfigBuilder {
        ConfigBuilder::default()
    }

    /// The configuration of backend URL `url` with default timings.
    ///
    /// # Errors
    /// `InvalidConfig` for a malformed URL or a backend that is not compiled in.
    pub fn from_url(url: &str) -> Result<Config> {
        Config::builder().url(url).build()
    }

    /// The selected backend.
    pub fn backend_kind(&self) -> BackendKind {
        self.kind
    }

    /// The URL with its secrets replaced by `***` (`None` for a memory backend chosen without a URL).
    pub fn redacted_url(&self) -> Option<&str> {
        self.endpoint.as_ref().map(|e| e.redacted.as_str())
    }

    /// The hosts of the URL as `host[:port]`.
    pub fn hosts(&self) -> Vec<String> {
        self.endpoint.as_ref().map(|e| e.hosts.iter().map(ToString::to_string).collect()).unwrap_or_default()
    }

    /// The database name of a SQL URL (its path).
    pub fn database(&self) -> Option<&str> {
        self.endpoint.as_ref().filter(|_| self.kind.is_sql()).map(|e| e.path.as_str())
    }

    /// The session timing and metadata.
    pub fn session_options(&self) -> SessionOptions {
        self.session.clone()
    }

    /// The per-call timeout given to the backend (= the session's query timeout).
    pub fn query_timeout(&self) -> Duration {
        self.session.query_timeout()
    }

    /// Non-fatal findings of [`build`](ConfigBuilder::build): settings ignored by the chosen
    /// backend, unknown `SIMBA_*` variables. [`from_env`](Config::from_env) also logs them.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// Logs [`warnings`](Config::warnings) at warn level.
    pub fn log_warnings(&self) {
        for w in &self.warnings {
            log::warn!("simba configuration: {w}");
        }
    }

    /// Creates the backend. A memory backend is new and private to this call (process-local);
    /// network backends connect (and may check the server) here.
    ///
    /// An application may always construct a backend itself and pass it to
    /// [`Session::open`](crate::Session::open) instead.
    ///
    /// # Errors
    /// The backend's errors (`Unavailable`, `Backend`, `InvalidConfig` for a refused startup
    /// check); messages never contain secrets.
    pub fn connect(&self) -> Result<Arc<dyn LeaseBackend>> {
        log::debug!("connecting to the {} backend at {}", self.kind, self.redacted_url().unwrap_or("memory://"));
        self.backend.connect().map_err(|e| self.scrub(e))
    }

    /// Replaces an error whose message chain contains a secret with a redacted copy.
    fn scrub(&self, e: Error) -> Error {
        let secrets: Vec<&str> = self.secrets.iter().map(|s| s.0.as_str()).collect();
        let chain = display_chain(&e);
        if secrets.iter().any(|s| chain.contains(*s)) {
            let mut msg = chain;
            for s in &secrets {
                msg = msg.replace(*s, "***");
            }
            Error::new(e.kind(), msg)
        } else {
            e
        }
    }
}
