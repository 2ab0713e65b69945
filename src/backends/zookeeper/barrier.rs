//! The write barrier before a read that must see every write that returned on any server of the
//! ensemble ([`barrier`], [`barrier_then_read`]).

use std::future::Future;

use zookeeper_client::{Client, Error as ZkError, MultiWriteError};

/// A write that changes nothing — a `multi` that checks `path` in any version — so that the
/// reads this client sends after it wait for every write committed before it. A `sync` does not
/// do that on the leader: ZooKeeper answers the `sync` of a leader's own client at once, and its
/// commit processor serves a read of a session with no pending write before commits it has
/// already sent to the followers, so a read there could miss a join or a release that had
/// returned on a follower (`tests/zk_ensemble.rs` saw it within 200 tries with the leader
/// loaded). A write of the reader's own session is ordered after those commits. It costs what
/// a write costs (a quorum round and a log append on the servers); a failed check is no
/// failure: it was ordered all the same.
pub(super) fn barrier<'c>(
    client: &'c Client,
    path: &str,
) -> impl Future<Output = std::result::Result<(), ZkError>> + 'c {
    let mut writer = client.new_multi_writer();
    let sent = writer.add_check_version(path, -1).map(|()| writer.commit());
    async move {
        match sent?.await {
            Ok(_) | Err(MultiWriteError::OperationFailed { .. }) => Ok(()),
            Err(MultiWriteError::RequestFailed { source }) => Err(source),
        }
    }
}

/// `read` after the [`barrier`]: the read's answer, or the barrier's failure — a read after a
/// failed barrier may be served by a server that has not seen a write that returned elsewhere
/// (finding 9 of issue #36: a `members` read right after a join could miss it). Both are queued
/// at once; on the wire the read follows the barrier's reply (two round trips: the client's
/// connection keeps Nagle's algorithm, docs/benchmarks.md, "ZooKeeper keep-alive").
pub(super) async fn barrier_then_read<T>(
    barrier: impl Future<Output = std::result::Result<(), ZkError>>,
    read: impl Future<Output = std::result::Result<T, ZkError>>,
) -> std::result::Result<T, ZkError> {
    let ordered = barrier.await;
    let value = read.await;
    ordered.and(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_read_after_a_failed_barrier_fails_with_the_barrier() {
        async fn read(v: u32) -> std::result::Result<u32, ZkError> {
            Ok(v)
        }
        use futures::executor::block_on as run;
        assert_eq!(run(barrier_then_read(async { Ok(()) }, read(1))), Ok(1));
        let lost = async { Err(ZkError::ConnectionLoss) };
        assert_eq!(run(barrier_then_read(lost, read(3))), Err(ZkError::ConnectionLoss));
        let no_node = async { Err::<u32, ZkError>(ZkError::NoNode) };
        assert_eq!(run(barrier_then_read(async { Ok(()) }, no_node)), Err(ZkError::NoNode));
    }
}
