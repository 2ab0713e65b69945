//! `simba fence check RESOURCE TOKEN` and `simba schema print --fence`: the resource side of
//! fencing (`simba::fence`) for shell scripts. See `docs/fencing.md` and `docs/cli.md`.

use std::time::Duration;

use clap::Subcommand;
use serde_json::json;
use simba::fence::FenceError;
use simba::{display_chain, BackendKind, Config, Token};

use super::{code, config, Cli, Dialect, Fail, Out};

/// Exit code of `fence check` for a stale token (the fence has accepted a larger one).
pub const STALE: u8 = 1;

/// `simba fence …`.
#[derive(Subcommand, Debug)]
pub enum FenceAction {
    /// Accept TOKEN for RESOURCE if it is >= the largest the fence has seen, recording it (exit 0),
    /// or refuse it as stale (exit 1). The fence is the simba_fence table (postgres://, mysql://)
    /// or the key simba:fence:{RESOURCE} (redis://, redis+cluster://) at --url
    Check {
        /// The fenced resource: 1-128 of [A-Za-z0-9._:-]
        resource: String,
        /// The fencing token, e.g. "$SIMBA_TOKEN" inside `simba lock`
        token: String,
    },
}

/// Runs `simba fence …`.
pub fn run(config: &Config, cli: &Cli, out: &Out, action: &FenceAction) -> Result<u8, Fail> {
    let FenceAction::Check { resource, token } = action;
    let token = token.trim().parse::<u64>().ok().and_then(Token::new).ok_or_else(|| {
        Fail::new(code::CONFIG, "config", format!("token {token:?}: a fencing token is an integer >= 1"))
    })?;
    // Validate the name before any I/O.
    simba::Name::new(resource)?;
    let url = cli.url.clone().unwrap_or_default();
    let result = check_at(config, &url, config.query_timeout(), resource, token)?;
    let redacted = config.redacted_url().unwrap_or_default().to_string();
    match result {
        Ok(()) => {
            out.result(
                &format!("accepted token {token} for resource '{resource}'"),
                json!({"resource": resource, "token": token.get(), "outcome": "accepted", "url": redacted,
                       "exit_code": code::OK}),
            );
            Ok(code::OK)
        }
        Err(FenceError::Stale { seen, .. }) => {
            let seen = seen.map(Token::get);
            out.progress(
                "stale",
                &format!(
                    "stale token {token} for resource '{resource}': the fence has accepted token {}",
                    seen.map_or_else(|| "?".to_string(), |s| s.to_string())
                ),
                json!({"resource": resource, "token": token.get(), "seen": seen}),
            );
            out.result(
                "",
                json!({"resource": resource, "token": token.get(), "outcome": "stale", "seen": seen, "url": redacted,
                       "exit_code": STALE}),
            );
            Ok(STALE)
        }
        Err(e @ FenceError::Invalid { .. }) => Err(Fail::new(code::CONFIG, "config", display_chain(&e))),
        Err(e) => Err(Fail::new(code::UNAVAILABLE, "unavailable", format!("{}{}", display_chain(&e), hint(&e)))),
    }
}

/// The check at the fence of the configured database.
fn check_at(
    config: &Config,
    url: &str,
    timeout: Duration,
    resource: &str,
    token: Token,
) -> Result<Result<(), FenceError>, Fail> {
    match config.backend_kind() {
        #[cfg(feature = "postgres")]
        BackendKind::Postgres => postgres_check(url, timeout, resource, token),
        #[cfg(feature = "mysql")]
        BackendKind::Mysql => mysql_check(url, timeout, resource, token),
        #[cfg(feature = "redis")]
        BackendKind::Redis => redis_check(url, timeout, resource, token),
        #[cfg(feature = "redis")]
        BackendKind::RedisCluster => cluster_check(url, config, timeout, resource, token),
        other => {
            let _ = (url, timeout, resource, token);
            Err(unsupported(other))
        }
    }
}

fn unsupported(kind: BackendKind) -> Fail {
    Fail::new(
        code::CONFIG,
        "config",
        format!(
            "fence check needs a postgres://, mysql://, redis:// or redis+cluster:// URL (the resource's \
             database), not the {kind} backend{}",
            kind.feature()
                .filter(|_| !kind.is_compiled())
                .map(|f| format!(" (or build with the `{f}` feature)"))
                .unwrap_or_default()
        ),
    )
}

/// A hint for a missing `simba_fence` table.
fn hint(e: &FenceError) -> &'static str {
    let FenceError::Database { source, .. } = e else { return "" };
    #[cfg(feature = "postgres")]
    if let Some(pg) = source.downcast_ref::<postgres::Error>() {
        if pg.code() == Some(&postgres::error::SqlState::UNDEFINED_TABLE) {
            return " (create the table: simba schema print --fence --dialect postgres | psql ...)";
        }
    }
    #[cfg(feature = "mysql")]
    if let Some(mysql::Error::MySqlError(m)) = source.downcast_ref::<mysql::Error>() {
        if m.code == 1146 {
            return " (create the table: simba schema print --fence --dialect mysql | mysql ...)";
        }
    }
    let _ = source;
    ""
}

#[cfg(any(feature = "postgres", feature = "mysql", feature = "redis"))]
fn cannot_connect(what: &str, e: impl std::fmt::Display) -> Fail {
    Fail::new(code::UNAVAILABLE, "unavailable", format!("cannot connect to {what}: {e}"))
}

#[cfg(feature = "postgres")]
fn postgres_check(url: &str, timeout: Duration, resource: &str, token: Token) -> Result<Result<(), FenceError>, Fail> {
    let mut pg: postgres::Config =
        url.parse().map_err(|e| Fail::new(code::CONFIG, "config", format!("PostgreSQL URL: {e}")))?;
    if pg.get_connect_timeout().is_none() {
        pg.connect_timeout(timeout);
    }
    if pg.get_options().is_none() {
        // The server bounds the check (a fence row locked by a long transaction, for one).
        pg.options(&format!("-c statement_timeout={}", timeout.as_millis()));
    }
    let mut client = pg.connect(postgres::NoTls).map_err(|e| cannot_connect("PostgreSQL", display_chain(&e)))?;
    Ok(simba::fence::postgres::check(&mut client, resource, token))
}

#[cfg(feature = "mysql")]
fn mysql_check(url: &str, timeout: Duration, resource: &str, token: Token) -> Result<Result<(), FenceError>, Fail> {
    let url = url.strip_prefix("mariadb://").map_or_else(|| url.to_string(), |rest| format!("mysql://{rest}"));
    let opts = mysql::Opts::from_url(&url).map_err(|e| Fail::new(code::CONFIG, "config", format!("MySQL URL: {e}")))?;
    let opts = mysql::OptsBuilder::from_opts(opts)
        .tcp_connect_timeout(Some(timeout))
        .read_timeout(Some(timeout))
        .write_timeout(Some(timeout));
    let mut conn = mysql::Conn::new(opts).map_err(|e| cannot_connect("MySQL", display_chain(&e)))?;
    Ok(simba::fence::mysql::check(&mut conn, resource, token))
}

#[cfg(feature = "redis")]
fn redis_check(url: &str, timeout: Duration, resource: &str, token: Token) -> Result<Result<(), FenceError>, Fail> {
    let client = redis::Client::open(url).map_err(|e| Fail::new(code::CONFIG, "config", format!("Redis URL: {e}")))?;
    let mut con = client.get_connection_with_timeout(timeout).map_err(|e| cannot_connect("Redis", e))?;
    con.set_read_timeout(Some(timeout))
        .and_then(|()| con.set_write_timeout(Some(timeout)))
        .map_err(|e| cannot_connect("Redis", e))?;
    Ok(simba::fence::redis::check(&mut con, resource, token))
}

#[cfg(feature = "redis")]
fn cluster_check(
    url: &str,
    config: &Config,
    timeout: Duration,
    resource: &str,
    token: Token,
) -> Result<Result<(), FenceError>, Fail> {
    // redis+cluster://[user:password@]h1:p1,h2:p2: the nodes come from the parsed configuration,
    // the credentials from the URL itself.
    let authority = url.split_once("://").map_or("", |(_, rest)| rest);
    let userinfo = authority.rsplit_once('@').map(|(u, _)| format!("{u}@")).unwrap_or_default();
    let nodes: Vec<String> = config.hosts().iter().map(|h| format!("redis://{userinfo}{h}")).collect();
    let mut con = redis::cluster::ClusterClient::builder(nodes)
        .connection_timeout(timeout)
        .response_timeout(timeout)
        .build()
        .and_then(|c| c.get_connection())
        .map_err(|e| cannot_connect("Redis Cluster", e))?;
    Ok(simba::fence::redis::check(&mut con, resource, token))
}

/// `simba schema print --fence [--dialect D]`: the `simba_fence` table's init SQL.
pub fn schema_print(cli: &Cli, out: &Out, dialect: Option<Dialect>) -> Result<u8, Fail> {
    let d = match dialect {
        Some(d) => d,
        None => match config(cli)?.backend_kind() {
            BackendKind::Postgres => Dialect::Postgres,
            BackendKind::Mysql => Dialect::Mysql,
            other => {
                return Err(Fail::new(
                    code::CONFIG,
                    "config",
                    format!(
                    "the fence table is for SQL resources (postgres, mysql), not the {other} backend: pass --dialect"
                ),
                ))
            }
        },
    };
    let (name, sql) = match d {
        Dialect::Postgres => ("postgres", postgres_sql()),
        Dialect::Mysql => ("mysql", mysql_sql()),
    };
    let sql = sql.ok_or_else(|| {
        Fail::new(
            code::CONFIG,
            "config",
            format!("the {name} fence schema needs the `{name}` feature: cargo build --features {name}"),
        )
    })?;
    out.result(sql.trim_end(), json!({"dialect": name, "file": "init-simba-fence.sql", "sql": sql}));
    Ok(code::OK)
}

fn postgres_sql() -> Option<&'static str> {
    #[cfg(feature = "postgres")]
    return Some(simba::fence::postgres::INIT_SQL);
    #[cfg(not(feature = "postgres"))]
    None
}

fn mysql_sql() -> Option<&'static str> {
    #[cfg(feature = "mysql")]
    return Some(simba::fence::mysql::INIT_SQL);
    #[cfg(not(feature = "mysql"))]
    None
}
