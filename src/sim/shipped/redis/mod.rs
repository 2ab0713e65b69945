//! The Redis Cluster model of the shipped simulation (feature `sim-redis`): the shipped
//! [`RedisBackend`](crate::backends::redis::RedisBackend), in Cluster mode, over simulated nodes
//! that run the shipped `lua/` scripts, unchanged, in a real Lua 5.1 interpreter.
//!
//! - [`keyspace`]: a node's data and the Redis commands the scripts use (Redis 7's replies,
//!   lazy expiry on the node's own clock; an unknown command is an error);
//! - [`node`]: the Lua 5.1 state and Redis's scripting bridge (`redis.call`/`pcall`/
//!   `error_reply`/`status_reply`, `KEYS`/`ARGV`, the Lua↔reply conversion rules);
//! - `cluster`: three masters behind the backend's scripting port (`RedisScripting`), with
//!   per-node clocks and per-call faults;
//! - `record`: what each script changed, as the sim's history events.
//!
//! [`Node`] and the shipped scripts ([`lua`]) are public here so that tests can compare a node with
//! a real `redis-server` (`tests/sim_shipped_cluster.rs`).

pub(crate) mod cluster;
pub mod keyspace;
pub mod node;
mod record;

/// The shipped Lua scripts a [`Node`] runs (the backend's own, crate-private elsewhere).
pub use crate::backends::redis::scripts::lua;
pub use keyspace::{Keyspace, Reply, UNKNOWN_COMMAND};
pub use node::Node;

use std::sync::Arc;
use std::time::Duration;

use self::cluster::{ClusterFaults, SimCluster, MASTERS};
use super::backend::{below, unit, History};
use crate::backend::LeaseBackend;
use crate::backends::redis::{RedisBackend, RedisOptions};
use crate::sim::history;
use crate::sync;

/// One run's cluster (its clocks and faults drawn from the seeded source) and the shipped
/// backend over it.
pub(crate) fn run_backend(
    hist: &Arc<History>,
    intensity: f64,
    clients: usize,
    lease: Duration,
) -> (Arc<SimCluster>, Arc<dyn LeaseBackend>) {
    let third = lease / 3;
    let p = |max: f64| unit() * max * intensity;
    let mut faults = ClusterFaults {
        fail: p(0.06),
        stall: p(0.06),
        lost_reply: p(0.06),
        slow_reply: p(0.06),
        late: p(0.06),
        partition: None,
    };
    // One node partitioned away on most seeds, 0.5–2.5 leases long, somewhere in the run.
    if unit() < 0.7 {
        let node = sync::random_below(MASTERS as u64) as usize;
        let start = below(lease * 4);
        let len = lease / 2 + below(lease * 2);
        faults.partition = Some((node, history::ms(start), history::ms(start + len)));
    }
    let clocks = cluster::draw_clocks();
    {
        let mut h = hist.lock();
        cluster::record_setup(&mut h, hist, clients, &clocks, &faults);
    }
    let sim = Arc::new(SimCluster::new(hist.clone(), clocks, faults, third));
    let options = match RedisOptions::builder().query_timeout(third).build() {
        Ok(o) => o,
        Err(e) => unreachable!("the simulation's redis options are valid: {e}"),
    };
    let backend = match RedisBackend::with_scripting(sim.clone(), options) {
        Ok(b) => b,
        Err(e) => panic!("the shipped redis backend did not start over the simulated cluster: {e}"),
    };
    (sim, Arc::new(backend))
}
