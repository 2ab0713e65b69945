//! The application's logger never runs under a lock of the Redis Cluster backend (issue #36,
//! finding 6): its log calls ran inside `books.with`, one mutex per backend shared by all its
//! sessions, so a slow logger stalled every session and one that called back into simba
//! deadlocked. See `tests/support/logger.rs`. One binary per backend: the logger is process-global.
#![cfg(feature = "redis")]

#[path = "support/logger.rs"]
mod logger;
mod support;

use std::sync::Arc;
use std::time::Duration;

use simba::backends::redis::{RedisBackend, RedisOptions};

#[test]
fn the_logger_may_call_back_into_simba_from_any_cluster_record() {
    let nodes = support::redis_cluster_nodes();
    let options = RedisOptions::builder().query_timeout(Duration::from_secs(1)).build().unwrap();
    let backend = RedisBackend::clustered(&nodes, options).unwrap_or_else(|e| {
        panic!("cannot connect to Redis Cluster at {nodes:?}: {e} (run `scripts/services up redis-cluster`)")
    });
    logger::every_record_may_call_back(Arc::new(backend), logger::lease_life);
}
