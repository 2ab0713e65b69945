//! `simba`: locks, leader election and groups from the shell, on every simba backend.
//!
//! See `docs/cli.md` for the commands, the output formats and the exit codes.
#![forbid(unsafe_code)]

#[path = "simba/fence.rs"]
mod fence;
#[path = "simba/supervise.rs"]
mod supervise;

use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::{json, Value};
use simba::backend::{CheckStatus, Holder, LeaseBackend};
use simba::{display_chain, BackendKind, Config, ConfigBuilder, Error, ErrorKind, Session};

use supervise::{Notice, Outcome, Signals};

/// Exit codes of simba itself (a supervised command's own exit code is passed through).
mod code {
    /// Success.
    pub const OK: u8 = 0;
    /// `check` found a failed item.
    pub const CHECK_FAILED: u8 = 1;
    /// Command-line usage error (clap's code).
    pub const USAGE: u8 = 2;
    /// The backend is unreachable or failed (EX_UNAVAILABLE).
    pub const UNAVAILABLE: u8 = 69;
    /// Internal error (EX_SOFTWARE).
    pub const INTERNAL: u8 = 70;
    /// `--timeout` passed before the lock or leadership was acquired (EX_TEMPFAIL).
    pub const TIMEOUT: u8 = 75;
    /// Invalid configuration, name or argument value (EX_CONFIG).
    pub const CONFIG: u8 = 78;
    /// The lock, leadership or membership was lost while the command ran; the command was terminated.
    pub const LOST: u8 = 79;
    /// The command was found but could not be executed.
    pub const CANNOT_EXECUTE: u8 = 126;
    /// The command was not found.
    pub const NOT_FOUND: u8 = 127;
}

const EXIT_CODES: &str = "\
Exit codes:
  0      success (lock/elect/join: the command's own exit code is passed through)
  1      check: at least one check failed
  2      usage error
  69     backend unreachable or failed
  70     internal error
  75     --timeout passed before the lock/leadership was acquired
  78     configuration error (URL, setting, name, missing feature)
  79     lock/leadership/membership lost while the command ran (command terminated)
  126    command cannot be executed;  127  command not found
  128+N  the command was killed by signal N (or simba was interrupted by signal N while waiting)

Environment: SIMBA_URL, SIMBA_BACKEND, SIMBA_LEASE_DURATION, SIMBA_RENEW_INTERVAL, SIMBA_DRIFT,
SIMBA_QUERY_TIMEOUT, SIMBA_METADATA and the backend settings in docs/configuration.md.
RUST_LOG=debug shows diagnostics.";

#[derive(Parser, Debug)]
#[command(
    name = "simba",
    version,
    about = "Locks with fencing tokens, leader election and groups for shell scripts",
    after_help = EXIT_CODES
)]
struct Cli {
    /// Backend URL: postgres://, mysql://, redis://, redis+cluster://h1:p,h2:p, zookeeper://h1:2181/root
    /// or memory:// (process-local)
    #[arg(long, global = true, env = "SIMBA_URL", hide_env_values = true, value_name = "URL")]
    url: Option<String>,
    /// Explicit backend (must agree with the URL): postgres, mysql, redis, redis-cluster, zookeeper, memory
    #[arg(long, global = true, value_parser = parse_backend, value_name = "KIND")]
    backend: Option<BackendKind>,
    /// Session lease duration, e.g. 15s
    #[arg(long, global = true, value_parser = parse_duration, value_name = "D")]
    lease_duration: Option<Duration>,
    /// Time between keep-alives, e.g. 5s (at most lease-duration / 2)
    #[arg(long, global = true, value_parser = parse_duration, value_name = "D")]
    renew_interval: Option<Duration>,
    /// Allowed clock-rate difference, e.g. 0.01
    #[arg(long, global = true, value_name = "F")]
    drift: Option<f64>,
    /// Per-call backend timeout, e.g. 5s
    #[arg(long, global = true, value_parser = parse_duration, value_name = "D")]
    query_timeout: Option<Duration>,
    /// Session metadata shown to others (default: "simba <command> pid=<pid> host=<host>")
    #[arg(long, global = true, value_name = "TEXT")]
    metadata: Option<String>,
    /// Machine-readable JSON results on stdout (progress as JSON lines on stderr)
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run CMD while holding the lock NAME (SIMBA_TOKEN, SIMBA_LEASE, SIMBA_SESSION in its environment)
    Lock(LockArgs),
    /// Wait to become leader of NAME, then run CMD while leading
    Elect(LockArgs),
    /// Show the current holder (leader) of NAME
    Leader {
        /// Lease or election name
        name: String,
    },
    /// List the live members of GROUP
    Members {
        /// Group name
        group: String,
    },
    /// Be a member of GROUP while CMD runs (SIMBA_GROUP, SIMBA_SESSION in its environment)
    Join(JoinArgs),
    /// SQL backends: print or apply the schema (init SQL)
    Schema {
        #[command(subcommand)]
        action: SchemaAction,
    },
    /// Delete expired sessions left behind by crashed processes
    Purge,
    /// Check the backend: reachability, schema, eviction policy, ACLs, clock
    Check,
    /// Fencing on the resource side: check a token against a PostgreSQL/MySQL/Redis fence
    Fence {
        #[command(subcommand)]
        action: fence::FenceAction,
    },
}

#[derive(Args, Debug)]
struct LockArgs {
    /// Lock (election) name: 1-128 of [A-Za-z0-9._:-]
    name: String,
    /// Give up after this long without the lock/leadership (exit 75); default: wait forever
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the lock is lost
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "D")]
    grace: Duration,
    /// The command to run, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Args, Debug)]
struct JoinArgs {
    /// Group name: 1-128 of [A-Za-z0-9._:-]
    group: String,
    /// Time between SIGTERM and SIGKILL when the membership is lost
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "D")]
    grace: Duration,
    /// The command to run, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<OsString>,
}

#[derive(Subcommand, Debug)]
enum SchemaAction {
    /// Print the embedded init SQL of the configured (or given) dialect
    Print {
        /// Dialect to print without a URL
        #[arg(long, value_enum)]
        dialect: Option<Dialect>,
        /// Print the simba_fence table of `simba fence check` / simba::fence instead
        #[arg(long)]
        fence: bool,
    },
    /// Create the tables if they do not exist (idempotent)
    Apply,
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum Dialect {
    Postgres,
    Mysql,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{e}: write e.g. 15s, 500ms or 1m 30s"))
}

fn parse_backend(s: &str) -> Result<BackendKind, String> {
    s.parse::<BackendKind>().map_err(|e| e.to_string())
}

/// A failure that ends simba with an exit code.
struct Fail {
    code: u8,
    message: String,
    kind: &'static str,
}

impl Fail {
    fn new(code: u8, kind: &'static str, message: impl Into<String>) -> Fail {
        Fail { code, kind, message: message.into() }
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        let (code, kind) = match e.kind() {
            ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => (code::CONFIG, "config"),
            ErrorKind::LeaseLost | ErrorKind::SessionExpired | ErrorKind::NotLeader => (code::LOST, "lost"),
            ErrorKind::Unavailable | ErrorKind::Backend | ErrorKind::Timeout => (code::UNAVAILABLE, "unavailable"),
            _ => (code::INTERNAL, "internal"),
        };
        Fail { code, kind, message: display_chain(&e) }
    }
}

/// Output helpers: human text on stderr/stdout, or JSON.
struct Out {
    json: bool,
}

impl Out {
    /// A progress message (stderr).
    fn progress(&self, event: &str, text: &str, fields: Value) {
        let mut err = std::io::stderr().lock();
        if self.json {
            let mut v = fields;
            if let Value::Object(m) = &mut v {
                m.insert("event".into(), Value::from(event));
                m.insert("message".into(), Value::from(text));
            }
            let _ = writeln!(err, "{v}");
        } else {
            let _ = writeln!(err, "simba: {text}");
        }
    }

    /// The result (stdout): `human` text or the JSON value.
    fn result(&self, human: &str, value: Value) {
        let mut out = std::io::stdout().lock();
        if self.json {
            let _ = writeln!(out, "{value}");
        } else if !human.is_empty() {
            let _ = writeln!(out, "{human}");
        }
        let _ = out.flush();
    }
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    if args.nth(1).is_some_and(|a| a == supervise::TRAMPOLINE) {
        return ExitCode::from(supervise::trampoline(args));
    }
    // Block the signals before any thread exists, so every later thread inherits the mask.
    let signals = Signals::install();
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { code::USAGE } else { code::OK });
        }
    };
    let out = Out { json: cli.json };
    let signals = match signals {
        Ok(s) => s,
        Err(e) => return fail(&out, Fail::new(code::INTERNAL, "internal", format!("cannot handle signals: {e}"))),
    };
    match run(&cli, &out, &signals) {
        Ok(c) => ExitCode::from(c),
        Err(f) => fail(&out, f),
    }
}

fn fail(out: &Out, f: Fail) -> ExitCode {
    let _ = writeln!(std::io::stderr(), "simba: error: {}", f.message);
    if out.json {
        out.result("", json!({"error": {"kind": f.kind, "message": f.message}, "exit_code": f.code}));
    }
    ExitCode::from(f.code)
}

fn default_metadata(command: &str) -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .or_else(|_| std::fs::read_to_string("/etc/hostname"))
        .map(|h| h.trim().to_string())
        .unwrap_or_default();
    let mut m = format!("simba {command} pid={}", std::process::id());
    if !host.is_empty() {
        m.push_str(" host=");
        m.push_str(&host);
    }
    m
}

fn command_name(cmd: &Cmd) -> &'static str {
    match cmd {
        Cmd::Lock(_) => "lock",
        Cmd::Elect(_) => "elect",
        Cmd::Leader { .. } => "leader",
        Cmd::Members { .. } => "members",
        Cmd::Join(_) => "join",
        Cmd::Schema { .. } => "schema",
        Cmd::Purge => "purge",
        Cmd::Check => "check",
        Cmd::Fence { .. } => "fence",
    }
}

/// The configuration: `SIMBA_*` variables, overridden by the command-line flags.
fn config(cli: &Cli) -> Result<Config, Fail> {
    let mut b = ConfigBuilder::from_env()?;
    if let Some(u) = &cli.url {
        // clap also reads SIMBA_URL; keep the variable's name in messages when that is where it came from.
        if std::env::var("SIMBA_URL").ok().as_deref() != Some(u.as_str()) {
            b = b.url(u.clone());
        }
    }
    if let Some(k) = cli.backend {
        b = b.backend(k);
    }
    if let Some(d) = cli.lease_duration {
        b = b.lease_duration(d);
    }
    if let Some(d) = cli.renew_interval {
        b = b.renew_interval(d);
    }
    if let Some(d) = cli.drift {
        b = b.drift(d);
    }
    if let Some(d) = cli.query_timeout {
        b = b.query_timeout(d);
    }
    match &cli.metadata {
        Some(m) => b = b.metadata(m.clone()),
        None if std::env::var_os("SIMBA_METADATA").is_none_or(|v| v.is_empty()) => {
            b = b.metadata(default_metadata(command_name(&cli.command)));
        }
        None => {}
    }
    let c = b.build()?;
    c.log_warnings();
    Ok(c)
}

fn run(cli: &Cli, out: &Out, signals: &Signals) -> Result<u8, Fail> {
    if let Cmd::Schema { action: SchemaAction::Print { dialect, fence: true } } = &cli.command {
        return fence::schema_print(cli, out, *dialect);
    }
    if let Cmd::Schema { action: SchemaAction::Print { dialect: Some(d), .. } } = &cli.command {
        return Ok(schema_print(out, *d));
    }
    if !matches!(cli.command, Cmd::Lock(_) | Cmd::Elect(_) | Cmd::Join(_)) {
        // Nothing to clean up: a signal ends simba at once with 128 + N.
        let rx = signals.receiver().clone();
        std::thread::spawn(move || {
            if let Ok(sig) = rx.recv() {
                let _ = writeln!(std::io::stderr(), "simba: interrupted by {sig}");
                std::process::exit(128 + sig as i32);
            }
        });
    }
    let config = config(cli)?;
    log::debug!("configuration: {config:?}");
    match &cli.command {
        Cmd::Lock(a) => lock(&config, out, signals, a, false),
        Cmd::Elect(a) => lock(&config, out, signals, a, true),
        Cmd::Join(a) => join(&config, out, signals, a),
        Cmd::Leader { name } => leader(&config, out, name),
        Cmd::Members { group } => members(&config, out, group),
        Cmd::Schema { action: SchemaAction::Print { .. } } => match config.backend_kind() {
            BackendKind::Postgres => Ok(schema_print(out, Dialect::Postgres)),
            BackendKind::Mysql => Ok(schema_print(out, Dialect::Mysql)),
            other => Err(not_sql(other)),
        },
        Cmd::Schema { action: SchemaAction::Apply } => schema_apply(&config, out),
        Cmd::Purge => purge(&config, out),
        Cmd::Check => check(&config, out),
        Cmd::Fence { action } => fence::run(&config, cli, out, action),
    }
}

fn not_sql(kind: BackendKind) -> Fail {
    Fail::new(
        code::CONFIG,
        "config",
        format!("schema applies to SQL backends only (postgres, mysql); the {kind} backend needs no schema"),
    )
}

fn warn_process_local(config: &Config, out: &Out) {
    if config.backend_kind() == BackendKind::Memory {
        out.progress(
            "warning",
            "memory:// is process-local: other simba processes do not see this lock, leadership or group",
            json!({}),
        );
    }
}

/// Connects and opens the session, retrying transient failures (a slow first call on a loaded
/// machine) a few times before giving up with exit 69.
fn open_session(config: &Config) -> Result<(Arc<dyn LeaseBackend>, Session), Fail> {
    let mut attempt = 1;
    loop {
        let r = config.connect().and_then(|b| Session::open(Arc::clone(&b), config.session_options()).map(|s| (b, s)));
        match r {
            Ok((backend, session)) => {
                log::info!("session {} opened on {}", session.id(), config.redacted_url().unwrap_or("memory://"));
                return Ok((backend, session));
            }
            Err(e) if e.is_retryable() && attempt < OPEN_ATTEMPTS => {
                log::warn!("opening a session failed (attempt {attempt} of {OPEN_ATTEMPTS}): {}", display_chain(&e));
                std::thread::sleep(Duration::from_millis(250) * attempt);
                attempt += 1;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Attempts of [`open_session`].
const OPEN_ATTEMPTS: u32 = 3;

fn holder_json(h: &Holder) -> Value {
    json!({
        "session": h.session.as_str(),
        "token": h.token.get(),
        "remaining_ms": u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX),
        "metadata": h.metadata,
    })
}

fn describe_holder(h: &Holder) -> String {
    if h.metadata.is_empty() {
        format!("{} (token {})", h.session, h.token)
    } else {
        format!("{} (token {}, {})", h.session, h.token, h.metadata)
    }
}

/// A signal received since the last call, if any.
fn interrupted(signals: &Signals) -> Option<nix::sys::signal::Signal> {
    signals.receiver().try_recv().ok()
}

/// `lock NAME -- CMD` and `elect NAME -- CMD`.
fn lock(config: &Config, out: &Out, signals: &Signals, a: &LockArgs, elect: bool) -> Result<u8, Fail> {
    let what = if elect { "leadership of" } else { "lock" };
    simba::Name::new(&a.name)?;
    warn_process_local(config, out);
    let (_backend, session) = open_session(config)?;
    let start = Instant::now();
    let deadline = a.timeout.map(|t| start + t);
    let slice = Duration::from_millis(500);
    let mut last_seen: Option<(String, u64)> = None;
    let mut show_holder = |h: Option<Holder>| {
        let key = h.as_ref().map(|h| (h.session.to_string(), h.token.get()));
        if key.is_some() && key != last_seen {
            if let Some(h) = &h {
                out.progress(
                    "waiting",
                    &format!("waiting for {what} '{}' held by {}", a.name, describe_holder(h)),
                    json!({"name": a.name, "holder": holder_json(h)}),
                );
            }
        }
        if key.is_some() {
            last_seen = key;
        }
    };

    // Acquire, in slices, so holder changes and signals are noticed while waiting.
    enum Held {
        Lease(simba::Lease),
        Election(simba::Election),
    }
    let election = if elect { Some(session.campaign(a.name.as_str())?) } else { None };
    let held = loop {
        if let Some(sig) = interrupted(signals) {
            out.progress(
                "interrupted",
                &format!("interrupted by {sig} while waiting for {what} '{}'", a.name),
                json!({}),
            );
            drop(election);
            let _ = session.close();
            return Ok(128 + sig as u8);
        }
        let now = Instant::now();
        if deadline.is_some_and(|d| now >= d) {
            let waited = humantime::format_duration(Duration::from_millis(
                u64::try_from(now.duration_since(start).as_millis()).unwrap_or(u64::MAX),
            ));
            drop(election);
            let _ = session.close();
            out.progress("timeout", &format!("gave up on {what} '{}' after {waited}", a.name), json!({"name": a.name}));
            out.result("", json!({"name": a.name, "outcome": "timeout", "exit_code": code::TIMEOUT}));
            return Ok(code::TIMEOUT);
        }
        let step = deadline.map_or(slice, |d| d.saturating_duration_since(now).min(slice));
        match &election {
            Some(e) => match e.wait_elected(step) {
                Ok(_) => break Held::Election(election.unwrap_or_else(|| unreachable!())),
                Err(err) if err.is_timeout() => show_holder(e.leader().ok().flatten()),
                Err(err) => return Err(err.into()),
            },
            None => match session.lock_timeout(a.name.as_str(), step)? {
                Some(lease) => break Held::Lease(lease),
                None => show_holder(session.leader(a.name.as_str()).ok().flatten()),
            },
        }
    };
    let token = match &held {
        Held::Lease(l) => l.token()?,
        Held::Election(e) => e.token()?,
    };
    let sid = session.id().to_string();
    let verb = if elect { "elected leader of" } else { "acquired lock" };
    out.progress(
        if elect { "elected" } else { "acquired" },
        &format!("{verb} '{}' (token {token}, session {sid})", a.name),
        json!({"name": a.name, "token": token.get(), "session": sid}),
    );
    let env = [("SIMBA_TOKEN", token.to_string()), ("SIMBA_LEASE", a.name.clone()), ("SIMBA_SESSION", sid.clone())];
    let lost = || -> Option<String> {
        let r = match &held {
            Held::Lease(l) => l.token(),
            Held::Election(e) => e.token(),
        };
        r.err().map(|e| e.to_string())
    };
    let outcome = supervise_command(out, &a.command, &env, &["SIMBA_GROUP"], a.grace, signals, &lost, &a.name, what)?;
    let result = match outcome {
        Outcome::Exited(status) => {
            let c = supervise::exit_code(&status);
            match held {
                Held::Lease(l) => {
                    if let Err(e) = l.release() {
                        log::warn!("releasing lock '{}' failed: {}", a.name, display_chain(&e));
                    }
                }
                Held::Election(e) => {
                    if let Err(e) = e.resign() {
                        log::warn!("resigning '{}' failed: {}", a.name, display_chain(&e));
                    }
                }
            }
            json_exit(out, &a.name, token.get(), &sid, "exited", c)
        }
        Outcome::Lost { reason, status } => {
            let child = status.as_ref().map(supervise::exit_code);
            out.result(
                "",
                json!({"name": a.name, "token": token.get(), "session": sid, "outcome": "lost", "reason": reason,
                       "command_exit_code": child, "exit_code": code::LOST}),
            );
            code::LOST
        }
    };
    if let Err(e) = session.close() {
        log::warn!("closing session {sid} failed: {}", display_chain(&e));
    }
    Ok(result)
}

fn json_exit(out: &Out, name: &str, token: u64, sid: &str, outcome: &str, c: i32) -> u8 {
    let c = u8::try_from(c).unwrap_or(code::INTERNAL);
    out.result("", json!({"name": name, "token": token, "session": sid, "outcome": outcome, "exit_code": c}));
    c
}

#[allow(clippy::too_many_arguments)]
fn supervise_command(
    out: &Out,
    command: &[OsString],
    env: &[(&str, String)],
    env_remove: &[&str],
    grace: Duration,
    signals: &Signals,
    lost: &dyn Fn() -> Option<String>,
    name: &str,
    what: &str,
) -> Result<Outcome, Fail> {
    let notify = |n: Notice<'_>| match n {
        Notice::Started { pid } => log::debug!("command started as pid {pid}"),
        Notice::Lost { reason, pid } => out.progress(
            "lost",
            &format!("lost {what} '{name}' ({reason}): sending SIGTERM to the command (pid {pid})"),
            json!({"name": name, "reason": reason, "pid": pid}),
        ),
        Notice::Killing { pid, grace } => out.progress(
            "kill",
            &format!(
                "the command (pid {pid}) did not exit within {}: sending SIGKILL",
                humantime::format_duration(grace)
            ),
            json!({"name": name, "pid": pid}),
        ),
        Notice::Forwarded { signal, pid } => {
            log::info!("forwarded {signal} to the command (pid {pid})");
        }
    };
    supervise::run(command, env, env_remove, grace, signals, lost, &notify).map_err(|e| {
        let code = if e.not_found { code::NOT_FOUND } else { code::CANNOT_EXECUTE };
        Fail::new(code, "command", e.message)
    })
}

/// `join GROUP -- CMD`.
fn join(config: &Config, out: &Out, signals: &Signals, a: &JoinArgs) -> Result<u8, Fail> {
    simba::Name::new(&a.group)?;
    warn_process_local(config, out);
    let (_backend, session) = open_session(config)?;
    let membership = session.join(a.group.as_str())?;
    let sid = session.id().to_string();
    out.progress(
        "joined",
        &format!("joined group '{}' (session {sid})", a.group),
        json!({"group": a.group, "session": sid}),
    );
    let env = [("SIMBA_GROUP", a.group.clone()), ("SIMBA_SESSION", sid.clone())];
    // The command runs while the session lives. A membership the backend loses meanwhile (a
    // late leave, a failover) is re-joined by the session at its next renewal (logged), so a
    // transient `is_member() == false` does not stop the command.
    let lost = || -> Option<String> {
        if session.is_alive() {
            None
        } else {
            Some(format!("session {} is {:?}", session.id(), session.state()))
        }
    };
    let outcome = supervise_command(
        out,
        &a.command,
        &env,
        &["SIMBA_TOKEN", "SIMBA_LEASE"],
        a.grace,
        signals,
        &lost,
        &a.group,
        "membership of",
    )?;
    let result = match outcome {
        Outcome::Exited(status) => {
            let c = u8::try_from(supervise::exit_code(&status)).unwrap_or(code::INTERNAL);
            if let Err(e) = membership.leave() {
                log::warn!("leaving '{}' failed: {}", a.group, display_chain(&e));
            }
            out.result("", json!({"group": a.group, "session": sid, "outcome": "exited", "exit_code": c}));
            c
        }
        Outcome::Lost { reason, status } => {
            let child = status.as_ref().map(supervise::exit_code);
            out.result(
                "",
                json!({"group": a.group, "session": sid, "outcome": "lost", "reason": reason,
                       "command_exit_code": child, "exit_code": code::LOST}),
            );
            code::LOST
        }
    };
    if let Err(e) = session.close() {
        log::warn!("closing session {sid} failed: {}", display_chain(&e));
    }
    Ok(result)
}

/// A bounded backend call without a session: the backend bounds its own calls by the query timeout.
fn backend_only(config: &Config) -> Result<Arc<dyn LeaseBackend>, Fail> {
    Ok(config.connect()?)
}

fn leader(config: &Config, out: &Out, name: &str) -> Result<u8, Fail> {
    let name = simba::Name::new(name)?;
    let backend = backend_only(config)?;
    let holder = backend.holder(&name)?;
    match &holder {
        Some(h) => out.result(
            &format!(
                "{name}: held by session {} (token {}, expires in {}){}",
                h.session,
                h.token,
                humantime::format_duration(Duration::from_millis(
                    u64::try_from(h.remaining.as_millis()).unwrap_or(u64::MAX)
                )),
                if h.metadata.is_empty() { String::new() } else { format!(" metadata: {}", h.metadata) }
            ),
            json!({"name": name.as_str(), "leader": holder_json(h)}),
        ),
        None => out.result(&format!("{name}: no holder"), json!({"name": name.as_str(), "leader": null})),
    }
    Ok(code::OK)
}

fn members(config: &Config, out: &Out, group: &str) -> Result<u8, Fail> {
    let group = simba::Name::new(group)?;
    let backend = backend_only(config)?;
    let members = backend.members(&group)?;
    let human: Vec<String> = members
        .iter()
        .map(|m| if m.metadata.is_empty() { m.session.to_string() } else { format!("{}  {}", m.session, m.metadata) })
        .collect();
    let list: Vec<Value> =
        members.iter().map(|m| json!({"session": m.session.as_str(), "metadata": m.metadata})).collect();
    out.result(&human.join("\n"), json!({"group": group.as_str(), "members": list}));
    Ok(code::OK)
}

fn schema_print(out: &Out, d: Dialect) -> u8 {
    let (name, file, sql) = schema_text(d);
    match sql {
        Some(sql) => {
            let human = sql.trim_end();
            out.result(human, json!({"dialect": name, "file": file, "sql": sql}));
            code::OK
        }
        None => {
            let f = Fail::new(
                code::CONFIG,
                "config",
                format!("the {name} schema needs the `{name}` feature: cargo build --features {name}"),
            );
            let _ = writeln!(std::io::stderr(), "simba: error: {}", f.message);
            f.code
        }
    }
}

/// The embedded init SQL of a dialect, when that dialect is compiled in.
fn schema_text(d: Dialect) -> (&'static str, &'static str, Option<&'static str>) {
    match d {
        Dialect::Postgres => ("postgres", "init-simba-postgresql.sql", sql_of(d)),
        Dialect::Mysql => ("mysql", "init-simba-mysql.sql", sql_of(d)),
    }
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn sql_of(d: Dialect) -> Option<&'static str> {
    use simba::backends::sql::Dialect as D;
    Some(match d {
        Dialect::Postgres => D::Postgres.init_sql(),
        Dialect::Mysql => D::Mysql.init_sql(),
    })
}

#[cfg(not(any(feature = "postgres", feature = "mysql")))]
fn sql_of(_: Dialect) -> Option<&'static str> {
    None
}

#[cfg(any(feature = "postgres", feature = "mysql"))]
fn schema_apply(config: &Config, out: &Out) -> Result<u8, Fail> {
    if !config.backend_kind().is_sql() {
        return Err(not_sql(config.backend_kind()));
    }
    let backend = config.connect_sql()?;
    backend.init_schema()?;
    let dialect = backend.dialect().name();
    out.result(
        &format!("schema ready ({dialect}, {})", backend.dialect().init_script_name()),
        json!({"dialect": dialect, "applied": true}),
    );
    Ok(code::OK)
}

#[cfg(not(any(feature = "postgres", feature = "mysql")))]
fn schema_apply(config: &Config, _out: &Out) -> Result<u8, Fail> {
    Err(not_sql(config.backend_kind()))
}

fn purge(config: &Config, out: &Out) -> Result<u8, Fail> {
    let backend = backend_only(config)?;
    let mut total = 0usize;
    // One call deletes at most one batch; repeat until a call deletes nothing (bounded).
    for _ in 0..10_000 {
        let n = backend.purge_expired()?;
        total += n;
        if n == 0 {
            break;
        }
    }
    out.result(&format!("purged {total} expired sessions"), json!({"purged": total}));
    Ok(code::OK)
}

fn check(config: &Config, out: &Out) -> Result<u8, Fail> {
    let url = config.redacted_url().unwrap_or("memory://").to_string();
    let kind = config.backend_kind();
    let mut items: Vec<(String, CheckStatus, String)> = Vec::new();
    match config.connect() {
        Ok(backend) => {
            for i in backend.check() {
                items.push((i.name, i.status, i.detail));
            }
            if items.is_empty() {
                items.push(("reachable".into(), CheckStatus::Ok, "connected (the backend reports no checks)".into()));
            }
        }
        Err(e) => items.push(("reachable".into(), CheckStatus::Fail, display_chain(&e))),
    }
    for w in config.warnings() {
        items.push(("configuration".into(), CheckStatus::Warn, w.clone()));
    }
    let failed = items.iter().any(|(_, s, _)| *s == CheckStatus::Fail);
    let status_str = |s: CheckStatus| match s {
        CheckStatus::Ok => "ok",
        CheckStatus::Warn => "warn",
        CheckStatus::Fail => "fail",
    };
    let width = items.iter().map(|(n, _, _)| n.len()).max().unwrap_or(0);
    let mut human = format!("{kind} backend at {url}\n");
    for (n, s, d) in &items {
        human.push_str(&format!("  {:<4}  {n:<width$}  {d}\n", status_str(*s)));
    }
    human.push_str(if failed { "FAILED" } else { "OK" });
    let list: Vec<Value> =
        items.iter().map(|(n, s, d)| json!({"name": n, "status": status_str(*s), "detail": d})).collect();
    out.result(&human, json!({"backend": kind.name(), "url": url, "ok": !failed, "items": list}));
    Ok(if failed { code::CHECK_FAILED } else { code::OK })
}
