//! Semaphore limits: one persistent node per semaphore, `{root}/semaphores/{name}`, whose data is
//! the limit in decimal. Created by the semaphore's first use and never changed or deleted (the
//! permits themselves are the ephemeral lease nodes of the slot names, `{root}/leases/simba.sem:…`).

use std::time::Instant;

use zookeeper_client::{Client, CreateMode, Error as ZkError};

use super::exec::run_until;
use super::{Fail, Inner, CREATE_ATTEMPTS};
use crate::error::{Error, Result};
use crate::types::Name;

impl Inner {
    /// Stores `permits` as the limit of `name` when none is stored (`create`; `NodeExists` means
    /// another client stored one first), then returns the stored limit, read after a barrier so
    /// that a create that returned on any server of the ensemble is seen.
    pub(super) fn semaphore_limit(&self, name: &Name, permits: Option<u32>) -> Result<Option<u32>> {
        let deadline = self.query_deadline();
        let client = self.shared(deadline)?;
        let path = self.paths.semaphore(name);
        let what = format!("limit of semaphore '{name}' ({path})");
        if let Some(p) = permits {
            if self
                .create_limit(&client, &path, p, deadline)
                .map_err(|f| self.fail(f, &what, self.opts.query_timeout))?
            {
                return Ok(Some(p));
            }
        }
        let Some((data, _)) = self.synced_read(&client, || client.get_data(&path), deadline, &what)? else {
            return Ok(None);
        };
        let text = String::from_utf8_lossy(&data);
        match text.parse::<u32>() {
            Ok(p) if p > 0 => Ok(Some(p)),
            _ => Err(Error::backend(format!(
                "corrupt limit {text:?} of semaphore '{name}' in node {path}: limits are integers > 0 (the node was \
                 not written by simba)"
            ))),
        }
    }

    /// `true` when this call created the limit node, `false` when it existed.
    fn create_limit(&self, client: &Client, path: &str, permits: u32, deadline: Instant) -> Result<bool, Fail> {
        let opts = self.create_options(CreateMode::Persistent);
        let data = permits.to_string();
        for _ in 0..CREATE_ATTEMPTS {
            match run_until(client.create(path, data.as_bytes(), &opts), deadline) {
                None => return Err(Fail::Timeout),
                Some(Ok(_)) => return Ok(true),
                Some(Err(ZkError::NodeExists)) => return Ok(false),
                Some(Err(ZkError::NoNode)) => {
                    self.ensure_dir(client, &self.paths.semaphores_dir(), CreateMode::Persistent, deadline)?
                }
                Some(Err(e)) => return Err(Fail::Zk(e)),
            }
        }
        Err(Fail::Zk(ZkError::NoNode))
    }
}
