//! `simba`: locks, semaphores, leader election, groups and partition sets from the shell, on every simba backend.
//!
//! See `docs/cli.md` for the commands, the output formats and the exit codes.
#![forbid(unsafe_code)]

#[path = "simba/fence.rs"]
mod fence;
#[path = "simba/hold.rs"]
mod hold;
#[path = "simba/inspect.rs"]
mod inspect;
#[path = "simba/out.rs"]
mod out;
#[path = "simba/status.rs"]
mod status;
#[path = "simba/supervise.rs"]
mod supervise;
#[path = "simba/wait.rs"]
mod wait;
#[path = "simba/work.rs"]
mod work;

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};
use serde_json::json;
use simba::{BackendKind, Config, ConfigBuilder};

use out::{code, Fail, Out};
use supervise::Signals;

const EXIT_CODES: &str = "\
Exit codes:
  0      success (lock/elect/join: the command's own exit code is passed through)
  1      check: at least one check failed; fence check: the token is stale
  2      usage error
  69     backend unreachable or failed
  70     internal error
  75     --timeout passed before the lock/permit/leadership was acquired (it was held by others)
  78     configuration error (URL, setting, name, missing feature, permit or partition count out
         of range, a semaphore limit or partition count other than the stored one)
  79     lock/permit/leadership/membership lost while the command ran (command terminated)
  126    command cannot be executed;  127  command not found (nothing was taken)
  128+N  the command was killed by signal N (or simba was interrupted by signal N while waiting;
         work: stopped by signal N, after stopping its commands and releasing its partitions)
--json tells them apart: the result's outcome field is exited, lost, timeout, interrupted or
spawn_failed.

Environment: SIMBA_URL, SIMBA_BACKEND, SIMBA_LEASE_DURATION, SIMBA_RENEW_INTERVAL, SIMBA_DRIFT,
SIMBA_QUERY_TIMEOUT, SIMBA_METADATA and the backend settings in docs/configuration.md.
RUST_LOG=debug shows diagnostics.";

#[derive(Parser, Debug)]
#[command(
    name = "simba",
    version,
    about = "Locks, semaphores and partition sets with fencing tokens, leader election and groups for shell scripts",
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
    /// Allowed clock-rate difference, e.g. 0.01 or 1%
    #[arg(long, global = true, value_parser = parse_drift, value_name = "F")]
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
    /// Run CMD while holding the lock NAME, or with -n N one of the N permits of the semaphore NAME
    /// (SIMBA_TOKEN, SIMBA_LEASE, SIMBA_SESSION and, with -n, SIMBA_SLOT in its environment)
    Lock(LockCmd),
    /// Wait to become leader of NAME, then run CMD while leading
    Elect(LockArgs),
    /// Show the current holder (leader) of NAME
    Leader {
        /// Lease or election name
        name: String,
    },
    /// Show who holds which slot of the semaphore NAME (see `lock -n`), or which member owns which
    /// partition of the partition set NAME (see `work`)
    Holders {
        /// Semaphore or partition set name
        name: String,
    },
    /// List the live members of GROUP
    Members {
        /// Group name
        group: String,
    },
    /// Be a member of GROUP while CMD runs (SIMBA_GROUP, SIMBA_SESSION in its environment)
    Join(JoinArgs),
    /// Be a member of the partition set NAME and run CMD once per partition this member owns
    /// (SIMBA_PARTITION, SIMBA_TOKEN, SIMBA_LEASE, SIMBA_SESSION in its environment)
    Work(WorkArgs),
    /// SQL backends: print or apply the schema (init SQL)
    Schema {
        #[command(subcommand)]
        action: SchemaAction,
    },
    /// Delete expired sessions left behind by crashed processes
    Purge,
    /// Check the backend: reachability, schema, eviction policy, ACLs, clock
    Check,
    /// Show what is held on the backend right now: locks and leaders, semaphores, partition sets,
    /// groups and live sessions, with holders, tokens and time left
    Status(status::StatusArgs),
    /// Fencing on the resource side: check a token against a PostgreSQL/MySQL/Redis fence
    Fence {
        #[command(subcommand)]
        action: fence::FenceAction,
    },
}

#[derive(Args, Debug)]
pub struct LockCmd {
    /// Hold one of the N permits of the semaphore NAME instead of the lock NAME (1 to 1000; the
    /// first use of NAME fixes N, and another N is an error). `-n 1` is a one-permit semaphore, a
    /// name apart from the lock NAME. The command also gets SIMBA_SLOT, the permit's slot
    #[arg(short = 'n', long = "permits", value_name = "N")]
    pub permits: Option<u64>,
    #[command(flatten)]
    pub lock: LockArgs,
}

#[derive(Args, Debug)]
pub struct LockArgs {
    /// Lock (election, semaphore) name: 1-128 of [A-Za-z0-9._:-] (a semaphore name: at most 114)
    pub name: String,
    /// Give up after this long without the lock/permit/leadership (exit 75); default: wait forever
    #[arg(long, value_parser = parse_duration, value_name = "D")]
    pub timeout: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the lock is lost
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "D")]
    pub grace: Duration,
    /// The command to run, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct JoinArgs {
    /// Group name: 1-128 of [A-Za-z0-9._:-]
    pub group: String,
    /// Time between SIGTERM and SIGKILL when the membership is lost
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "D")]
    pub grace: Duration,
    /// The command to run, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

#[derive(Args, Debug)]
pub struct WorkArgs {
    /// Partition set name: 1-113 of [A-Za-z0-9._:-]
    pub name: String,
    /// Number of partitions, 1 to 1000 (the first use of NAME fixes it; another number is an error)
    #[arg(long = "partitions", value_name = "N", required = true)]
    pub partitions: u64,
    /// Time between SIGTERM and SIGKILL when a partition is revoked or lost, or simba stops
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "D")]
    pub grace: Duration,
    /// How long a partition being handed off stays this member's while its command stops (the
    /// partition is released as soon as the command exited, at the latest after this)
    #[arg(long, value_parser = parse_duration, default_value = "5s", value_name = "D")]
    pub drain: Duration,
    /// The command to run per partition, after --
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
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
pub enum Dialect {
    Postgres,
    Mysql,
}

/// Durations parse as their `SIMBA_*` variables do (humantime: a unit is required).
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim()).map_err(|e| format!("{e}: write e.g. 15s, 500ms or 1m 30s"))
}

/// The drift parses with `SIMBA_DRIFT`'s own parser (`0.01` or `1%`) and rules, through `Config`.
fn parse_drift(s: &str) -> Result<f64, String> {
    let var = |k: &str| match k {
        "SIMBA_BACKEND" => Some("memory".to_string()),
        "SIMBA_DRIFT" => Some(s.to_string()),
        _ => None,
    };
    let config = simba::Config::from_vars(var).map_err(|e| e.to_string().replace("SIMBA_DRIFT", "--drift"))?;
    Ok(config.session_options().drift())
}

fn parse_backend(s: &str) -> Result<BackendKind, String> {
    s.parse::<BackendKind>().map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let mut args = std::env::args_os();
    match args.nth(1) {
        Some(a) if a == supervise::TRAMPOLINE => return ExitCode::from(supervise::trampoline(args)),
        Some(a) if a == supervise::WATCHER => return ExitCode::from(supervise::watcher(args)),
        _ => {}
    }
    // Block the signals before any thread exists, so every later thread inherits the mask.
    let signals = Signals::install();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return ExitCode::from(usage_error(&e)),
    };
    let out = Out { json: cli.json };
    out.init_logger();
    let signals = match signals {
        Ok(s) => s,
        Err(e) => {
            return ExitCode::from(out.fail(&Fail::new(
                code::INTERNAL,
                "internal",
                format!("cannot handle signals: {e}"),
            )))
        }
    };
    match run(&cli, &out, &signals) {
        Ok(c) => ExitCode::from(c),
        Err(f) => ExitCode::from(out.fail(&f)),
    }
}

/// A command line clap rejected (or `--help`/`--version`): clap's text, a hint when the command
/// was not put after `--`, and in JSON mode a JSON error.
fn usage_error(e: &clap::Error) -> u8 {
    if !e.use_stderr() {
        let _ = e.print();
        return code::OK;
    }
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    let before_sep = args.iter().take_while(|a| *a != "--");
    let json = before_sep.clone().any(|a| a == "--json");
    let mut message = e.render().to_string().trim_end().to_string();
    if let Some(hint) = separator_hint(e, &args) {
        message.push_str(&format!("\n\nhint: the command goes after --: {hint}"));
    }
    let out = Out { json };
    if json {
        out.fail(&Fail::new(code::USAGE, "usage", message));
    } else {
        let _ = writeln!(std::io::stderr(), "{message}");
    }
    code::USAGE
}

/// `simba lock x echo hi` → `simba lock x -- echo hi`: the rejected argument is where `--` belongs.
fn separator_hint(e: &clap::Error, args: &[OsString]) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if e.kind() != ErrorKind::UnknownArgument || args.iter().any(|a| a == "--") {
        return None;
    }
    let sub = args.iter().position(|a| ["lock", "elect", "join", "work"].iter().any(|s| a == *s))?;
    let Some(ContextValue::String(bad)) = e.get(ContextKind::InvalidArg) else { return None };
    let at = sub + 1 + args[sub + 1..].iter().position(|a| a == OsStr::new(bad))?;
    let mut words: Vec<String> = vec!["simba".into()];
    for (i, a) in args.iter().enumerate() {
        if i == at {
            words.push("--".into());
        }
        words.push(a.to_string_lossy().into_owned());
    }
    Some(words.join(" "))
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
        Cmd::Holders { .. } => "holders",
        Cmd::Members { .. } => "members",
        Cmd::Join(_) => "join",
        Cmd::Work(_) => "work",
        Cmd::Schema { .. } => "schema",
        Cmd::Purge => "purge",
        Cmd::Check => "check",
        Cmd::Status(_) => "status",
        Cmd::Fence { .. } => "fence",
    }
}

/// The configuration: `SIMBA_*` variables, overridden by the command-line flags.
fn config(cli: &Cli) -> Result<Config, Fail> {
    let mut b = ConfigBuilder::from_env()?;
    if let Some(u) = &cli.url {
        // clap also reads SIMBA_URL; keep the variable's name in messages when that is where it came from.
        if std::env::var("SIMBA_URL").ok().as_deref() != Some(u.as_str()) {
            if u.trim().is_empty() {
                return Err(Fail::config(
                    "--url is empty: give a backend URL such as redis://127.0.0.1:6379, or leave --url out to use SIMBA_URL",
                ));
            }
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
    Ok(b.build()?)
}

fn run(cli: &Cli, out: &Out, signals: &Signals) -> Result<u8, Fail> {
    if let Cmd::Schema { action: SchemaAction::Print { dialect, fence: true } } = &cli.command {
        return fence::schema_print(cli, out, *dialect);
    }
    if let Cmd::Schema { action: SchemaAction::Print { dialect: Some(d), .. } } = &cli.command {
        return schema_print_dialect(cli, out, *d);
    }
    if !matches!(cli.command, Cmd::Lock(_) | Cmd::Elect(_) | Cmd::Join(_) | Cmd::Work(_)) {
        // Nothing to clean up: a signal ends simba at once with 128 + N.
        let rx = signals.receiver().clone();
        let out = *out;
        std::thread::spawn(move || {
            if let Ok(sig) = rx.recv() {
                let c = 128 + sig as i32;
                out.progress("interrupted", &format!("interrupted by {sig}"), json!({"signal": sig.as_str()}));
                out.result("", json!({"outcome": "interrupted", "signal": sig.as_str(), "exit_code": c}));
                std::process::exit(c);
            }
        });
    }
    let config = config(cli)?;
    for w in config.warnings() {
        out.progress("warning", &format!("configuration: {w}"), json!({}));
    }
    log::debug!("configuration: {config:?}");
    match &cli.command {
        Cmd::Lock(LockCmd { permits: Some(n), lock }) => hold::semaphore(&config, out, signals, lock, *n),
        Cmd::Lock(LockCmd { permits: None, lock }) => hold::lock(&config, out, signals, lock, false),
        Cmd::Elect(a) => hold::lock(&config, out, signals, a, true),
        Cmd::Join(a) => hold::join(&config, out, signals, a),
        Cmd::Work(a) => work::work(&config, out, signals, a),
        Cmd::Leader { name } => inspect::leader(&config, out, name),
        Cmd::Holders { name } => inspect::holders(&config, out, name),
        Cmd::Members { group } => inspect::members(&config, out, group),
        Cmd::Schema { action: SchemaAction::Print { .. } } => match config.backend_kind() {
            BackendKind::Postgres => Ok(inspect::schema_print(out, Dialect::Postgres)),
            BackendKind::Mysql => Ok(inspect::schema_print(out, Dialect::Mysql)),
            other => Err(not_sql(other)),
        },
        Cmd::Schema { action: SchemaAction::Apply } => inspect::schema_apply(&config, out),
        Cmd::Purge => inspect::purge(&config, out),
        Cmd::Check => inspect::check(&config, out),
        Cmd::Status(a) => status::status(&config, out, a),
        Cmd::Fence { action } => fence::run(&config, cli, out, action),
    }
}

/// `schema print --dialect D`: needs no URL, but must not contradict the one given.
fn schema_print_dialect(cli: &Cli, out: &Out, d: Dialect) -> Result<u8, Fail> {
    let url_given = cli.url.is_some() || std::env::var_os("SIMBA_URL").is_some_and(|u| !u.is_empty());
    if url_given {
        if let Ok(config) = config(cli) {
            let kind = config.backend_kind();
            let agrees = match d {
                Dialect::Postgres => kind == BackendKind::Postgres,
                Dialect::Mysql => kind == BackendKind::Mysql,
            };
            if kind.is_sql() && !agrees {
                let flag = if d == Dialect::Postgres { "postgres" } else { "mysql" };
                return Err(Fail::config(format!(
                    "--dialect {flag} contradicts the URL, a {kind} backend: drop --dialect to print the URL's schema"
                )));
            }
        }
    }
    Ok(inspect::schema_print(out, d))
}

pub fn not_sql(kind: BackendKind) -> Fail {
    Fail::config(format!("schema applies to SQL backends only (postgres, mysql); the {kind} backend needs no schema"))
}
