//! PostgreSQL for the benchmark: the raw lock (an upsert to take, an update to free), the raw
//! notification (`pg_notify` → a `LISTEN`ing connection), the commit counter
//! (`pg_stat_database`), the version and the clean-up.

use super::*;
use crate::assets::postgres as q;

fn client(url: &str) -> BenchResult<postgres::Client> {
    let mut cfg: postgres::Config = url.parse()?;
    cfg.connect_timeout(Duration::from_secs(5));
    Ok(cfg.connect(postgres::NoTls)?)
}

pub fn init(url: &str) -> BenchResult<String> {
    use simba::backends::sql::{SqlBackend, SqlOptions};
    SqlBackend::postgres(url, SqlOptions::default())?.init_schema()?;
    let mut c = client(url)?;
    c.batch_execute(q::INIT)?;
    let v: String = c.query_one(q::VERSION, &[])?.try_get(0)?;
    Ok(v.split(" on ").next().unwrap_or(&v).to_string())
}

/// One upsert to take + one update to free, prepared once, on one connection.
pub struct RawPg {
    client: postgres::Client,
    lock: postgres::Statement,
    unlock: postgres::Statement,
    owner: String,
}

impl RawPg {
    pub fn connect(url: &str, owner: String) -> BenchResult<RawPg> {
        let mut client = client(url)?;
        let lock = client.prepare(q::LOCK)?;
        let unlock = client.prepare(q::UNLOCK)?;
        Ok(RawPg { client, lock, unlock, owner })
    }
}

impl RawLock for RawPg {
    fn lock(&mut self, name: &str) -> BenchResult<bool> {
        Ok(self.client.query_opt(&self.lock, &[&name, &self.owner, &RAW_TTL_MS])?.is_some())
    }
    fn unlock(&mut self, name: &str) -> BenchResult<()> {
        self.client.execute(&self.unlock, &[&name, &self.owner])?;
        Ok(())
    }
}

/// An autocommit `pg_notify` on one connection → the notification on another that `LISTEN`s,
/// as simba's release statement and notification thread do.
pub fn notify(url: &str, samples: usize) -> BenchResult<Vec<Duration>> {
    use postgres::fallible_iterator::FallibleIterator;
    let (ready_tx, ready_rx) = crossbeam_channel::bounded::<()>(1);
    let (got_tx, got_rx) = crossbeam_channel::unbounded::<std::time::Instant>();
    let listen_url = url.to_string();
    let listener = std::thread::spawn(move || -> BenchResult<()> {
        let mut c = client(&listen_url)?;
        c.batch_execute(q::LISTEN)?;
        let _ = ready_tx.send(());
        let mut got = 0;
        while got < samples {
            if c.notifications().timeout_iter(Duration::from_secs(5)).next()?.is_none() {
                return Err(err("no notification within 5 s"));
            }
            got += 1;
            let _ = got_tx.send(std::time::Instant::now());
        }
        Ok(())
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).map_err(|_| err("listener did not start"))?;
    let mut c = client(url)?;
    let notify = c.prepare(q::NOTIFY)?;
    let mut out = Vec::with_capacity(samples);
    for i in 0..samples {
        std::thread::sleep(crate::common::release_delay());
        let payload = i.to_string();
        let t0 = std::time::Instant::now();
        c.execute(&notify, &[&payload])?;
        let t1 = got_rx.recv_timeout(Duration::from_secs(5)).map_err(|_| err("notification not delivered"))?;
        out.push(t1.saturating_duration_since(t0));
    }
    listener.join().map_err(|_| err("listener panicked"))??;
    Ok(out)
}

/// `pg_stat_database` xact_commit + xact_rollback (flushed by each server process with a delay).
pub struct CommitCounter {
    client: postgres::Client,
}

impl CommitCounter {
    pub fn connect(url: &str) -> BenchResult<CommitCounter> {
        Ok(CommitCounter { client: client(url)? })
    }
}

impl ServerCounter for CommitCounter {
    fn read(&mut self) -> Stat<Reading> {
        let v: i64 = self
            .client
            .query_one(q::COMMITS, &[])
            .and_then(|row| row.try_get(0))
            .map_err(|e| Unavailable::new(format!("pg_stat_database: {e}")))?;
        Ok(Reading { requests: v.max(0) as u64, executed: None, server_us: None })
    }
}

pub fn cleanup(url: &str, pattern: &str) -> BenchResult<()> {
    client(url)?.execute(q::CLEANUP, &[&pattern])?;
    Ok(())
}
