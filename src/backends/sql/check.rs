//! `simba check` for the SQL backend: reachability, schema, routines, version, pool and purge
//! settings (the items [`LeaseBackend::check`](crate::backend::LeaseBackend::check) returns).

use super::backend::SqlBackend;
use super::*;

impl SqlBackend {
    /// The check items, in order (see the module docs).
    pub(super) fn check_items(&self) -> Vec<CheckItem> {
        let d = self.inner.dialect;
        let item = |name: &str, status, detail: String| CheckItem { name: name.to_string(), status, detail };
        let mut items = Vec::new();
        match self.inner.driver.server_version() {
            Ok(v) => {
                items.push(item("reachable", CheckStatus::Ok, format!("{d} server {v} at {}", self.inner.url)));
                items.extend(self.inner.driver.extra_checks());
            }
            Err(e) => {
                items.push(item("reachable", CheckStatus::Fail, format!("{}: {}", self.inner.url, display_chain(&e))));
                return items;
            }
        }
        match self.inner.driver.schema_tables() {
            Ok(3) => match self.inner.driver.missing_routine() {
                Ok(None) => items.push(item(
                    "schema",
                    CheckStatus::Ok,
                    match d {
                        Dialect::Postgres => "simba_session, simba_lease and simba_member exist".into(),
                        Dialect::Mysql => format!(
                            "simba_session, simba_lease, simba_member and the procedures {} and {} exist",
                            queries::mysql::KEEP_ALIVE_PROCEDURE,
                            queries::mysql::ACQUIRE_PROCEDURE
                        ),
                    },
                )),
                Ok(Some(routine)) => items.push(item(
                    "schema",
                    CheckStatus::Warn,
                    format!(
                        "the tables exist, but the procedure {routine} is missing (or this user may not execute \
                         it): keep-alives (five round trips instead of one) or acquires (two instead of one) use \
                         separate statements; run `simba schema apply` or sql/{}/{} again (needs CREATE ROUTINE; \
                         the application user needs EXECUTE)",
                        d.name(),
                        d.init_script_name()
                    ),
                )),
                Err(e) => items.push(item("schema", CheckStatus::Warn, display_chain(&e))),
            },
            Ok(n) => items.push(item(
                "schema",
                CheckStatus::Fail,
                format!(
                    "{n} of the 3 tables exist: run `simba schema apply` or sql/{}/{} once",
                    d.name(),
                    d.init_script_name()
                ),
            )),
            Err(e) => items.push(item("schema", CheckStatus::Fail, display_chain(&e))),
        }
        match self.inner.driver.semaphore_table() {
            Ok(true) => items.push(item("semaphores", CheckStatus::Ok, "simba_semaphore exists".into())),
            Ok(false) => items.push(item(
                "semaphores",
                CheckStatus::Warn,
                format!(
                    "simba_semaphore is missing (a schema from before semaphores): leases, elections and groups \
                     work, Session::semaphore fails; run `simba schema apply` or sql/{}/{} again (it only adds \
                     the table)",
                    d.name(),
                    d.init_script_name()
                ),
            )),
            Err(e) => items.push(item("semaphores", CheckStatus::Warn, display_chain(&e))),
        }
        let sent = Instant::now();
        let local_before = SystemTime::now();
        match self.inner.driver.now_ms() {
            Ok(db_ms) => {
                let rtt = sent.elapsed();
                let local_ms = local_before
                    .checked_add(rtt / 2)
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
                    .unwrap_or(0);
                let offset = db_ms.saturating_sub(local_ms);
                let rtt_ms = i64::try_from(rtt.as_millis()).unwrap_or(i64::MAX);
                let (status, note) = if offset.unsigned_abs() <= 1000 + rtt_ms.unsigned_abs() {
                    (CheckStatus::Ok, "")
                } else {
                    (CheckStatus::Warn, "; hosts usually run NTP, check both clocks")
                };
                items.push(item(
                    "clock",
                    status,
                    format!(
                        "database clock is {offset} ms {} this host (round trip {rtt_ms} ms); informational: leases \
                         are measured by the database clock only{note}",
                        if offset >= 0 { "ahead of" } else { "behind" }
                    ),
                ));
            }
            Err(e) => items.push(item("clock", CheckStatus::Fail, display_chain(&e))),
        }
        items.push(item(
            "pool",
            CheckStatus::Ok,
            format!(
                "{} connections, query timeout {:?}, purge every {:?}{}",
                self.inner.options.pool_size,
                self.inner.options.query_timeout,
                self.inner.options.purge_interval,
                if self.inner.options.auto_purge { "" } else { " (auto purge off)" }
            ),
        ));
        items
    }
}
