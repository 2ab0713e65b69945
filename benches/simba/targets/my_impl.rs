//! MySQL/MariaDB for the benchmark: the raw lock (an upsert to take, an update to free), the
//! statement counter (`Questions`), the version and the clean-up.

use super::*;
use crate::assets::mysql as q;
use mysql::prelude::Queryable;

fn conn(url: &str) -> BenchResult<mysql::Conn> {
    let opts = mysql::OptsBuilder::from_opts(mysql::Opts::from_url(url)?)
        .prefer_socket(false) // TCP like the backend's pool, never the unix socket
        .tcp_connect_timeout(Some(Duration::from_secs(5)))
        .read_timeout(Some(Duration::from_secs(5)))
        .write_timeout(Some(Duration::from_secs(5)));
    Ok(mysql::Conn::new(opts)?)
}

fn first_string(conn: &mut mysql::Conn, sql: &str, col: usize) -> BenchResult<String> {
    let row: mysql::Row = conn.query_first(sql)?.ok_or_else(|| err("no row"))?;
    row.get_opt::<String, usize>(col).ok_or_else(|| err("no such column"))?.map_err(|e| err(e.to_string()))
}

pub fn init(url: &str) -> BenchResult<String> {
    use simba::backends::sql::{SqlBackend, SqlOptions};
    SqlBackend::mysql(url, SqlOptions::default())?.init_schema()?;
    let mut c = conn(url)?;
    c.query_drop(q::INIT)?;
    first_string(&mut c, q::VERSION, 0)
}

/// One upsert to take + one update to free, prepared once, on one connection.
pub struct RawMy {
    conn: mysql::Conn,
    lock: mysql::Statement,
    unlock: mysql::Statement,
    owner: String,
}

impl RawMy {
    pub fn connect(url: &str, owner: String) -> BenchResult<RawMy> {
        let mut conn = conn(url)?;
        let lock = conn.prep(q::LOCK)?;
        let unlock = conn.prep(q::UNLOCK)?;
        Ok(RawMy { conn, lock, unlock, owner })
    }
}

impl RawLock for RawMy {
    fn lock(&mut self, name: &str) -> BenchResult<bool> {
        self.conn.exec_drop(&self.lock, (name, &self.owner, RAW_TTL_MS))?;
        Ok(self.conn.affected_rows() > 0)
    }
    fn unlock(&mut self, name: &str) -> BenchResult<()> {
        self.conn.exec_drop(&self.unlock, (name, &self.owner))?;
        Ok(())
    }
}

/// `SHOW GLOBAL STATUS LIKE 'Questions'`.
pub struct QuestionsCounter {
    conn: mysql::Conn,
}

impl QuestionsCounter {
    pub fn connect(url: &str) -> BenchResult<QuestionsCounter> {
        Ok(QuestionsCounter { conn: conn(url)? })
    }
}

impl ServerCounter for QuestionsCounter {
    fn read(&mut self) -> Stat<Reading> {
        let questions = first_string(&mut self.conn, q::QUESTIONS, 1)
            .and_then(|v| Ok(v.parse::<u64>()?))
            .map_err(|e| Unavailable::new(format!("SHOW GLOBAL STATUS: {e}")))?;
        Ok(Reading { requests: questions, executed: None, server_us: None })
    }
}

pub fn cleanup(url: &str, pattern: &str) -> BenchResult<()> {
    conn(url)?.exec_drop(q::CLEANUP, (pattern,))?;
    Ok(())
}
