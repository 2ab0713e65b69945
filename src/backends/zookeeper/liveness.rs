//! What is live, judged in one place for `holder`, `members` and `list`: a lease's holder (the
//! ephemeral owner of the lease node, whose session node still exists), a group's members (the
//! member nodes that still exist) and a session's time left.

use zookeeper_client::Stat;

use super::*;

impl Inner {
    /// The live holder of lease `name`, whose node a read found with `stat`: the node's ephemeral
    /// owner and its token (the node's `czxid`), read from the owner's session node; `None` when
    /// that node is gone (the holder's session ended after the lease was read: the lease node is
    /// gone too). Sends one read (the session node).
    ///
    /// # Errors
    /// `Backend` when the lease node is not ephemeral (not created by simba); the server's error
    /// of the session node's read.
    pub(super) async fn live_holder(&self, client: &Client, name: &Name, stat: &Stat) -> Result<Option<Holder>> {
        if stat.ephemeral_owner == 0 {
            return Err(Error::backend(format!(
                "lease node {} is not ephemeral: it was not created by simba; delete it",
                self.paths.lease(name)
            )));
        }
        let sid = SessionId::from_u64(stat.ephemeral_owner as u64);
        let token = token_of(stat.czxid, name.as_str())?;
        let spath = self.paths.session(&sid);
        let (bound, metadata) = match client.get_data(&spath).await {
            Err(ZkError::NoNode) => return Ok(None),
            Err(e) => return Err(self.zk_error(e, &format!("read of session node {spath}"))),
            Ok((data, _)) => decode_session(&data),
        };
        let remaining = self.remaining_of(client, &sid, bound);
        Ok(Some(Holder { session: sid, token, remaining, metadata }))
    }

    /// Time left of session `sid`, whose node holds `bound` (see [`encode_session`]): exact for a
    /// session of this backend (until its watchdog deadline; zero once closed), `bound` (an upper
    /// bound) for another process's, and the reader's negotiated timeout when the node has none.
    pub(super) fn remaining_of(&self, client: &Client, sid: &SessionId, bound: Option<Duration>) -> Duration {
        match (self.session(sid), bound) {
            (Some(s), _) => s.remaining_from(Instant::now()).unwrap_or_default(),
            (None, Some(r)) => r,
            (None, None) => client.session_timeout(),
        }
    }
}

/// The member sessions among the children of group `group`'s node: every child that is a session
/// id (a foreign child is skipped, with a warning).
pub(super) fn member_ids(group: &Name, children: &[String]) -> Vec<SessionId> {
    children
        .iter()
        .filter_map(|c| match SessionId::parse(c) {
            Ok(id) => Some(id),
            Err(_) => {
                log::warn!("zookeeper group {group}: ignoring foreign child node {c:?}");
                None
            }
        })
        .collect()
}

/// The member `id` from the read of its member node: `None` when the node is gone (it left, or
/// its session ended, after the group's children were read).
///
/// # Errors
/// The server's error of the read, as `what`.
pub(super) fn live_member(
    inner: &Inner,
    id: SessionId,
    read: std::result::Result<(Vec<u8>, Stat), ZkError>,
    what: &str,
) -> Result<Option<Member>> {
    match read {
        Ok((data, _)) => Ok(Some(Member { session: id, metadata: String::from_utf8_lossy(&data).into_owned() })),
        Err(ZkError::NoNode) => Ok(None),
        Err(e) => Err(inner.zk_error(e, what)),
    }
}
