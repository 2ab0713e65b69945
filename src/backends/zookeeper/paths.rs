//! Node paths under the root, and the data format of session nodes.

use std::time::Duration;

use crate::types::{Name, SessionId};

/// Every path the backend uses, derived from a validated root.
#[derive(Debug, Clone)]
pub(crate) struct Paths {
    /// The root without a trailing `/` (`""` for the root `/`).
    base: String,
}

impl Paths {
    pub(crate) fn new(root: &str) -> Paths {
        let base = if root == "/" { String::new() } else { root.to_string() };
        Paths { base }
    }

    /// The root path itself (`/` for the root `/`).
    pub(crate) fn root(&self) -> &str {
        if self.base.is_empty() {
            "/"
        } else {
            &self.base
        }
    }

    pub(crate) fn lease(&self, name: &Name) -> String {
        format!("{}/leases/{name}", self.base)
    }

    pub(crate) fn group(&self, group: &Name) -> String {
        format!("{}/groups/{group}", self.base)
    }

    pub(crate) fn member(&self, group: &Name, session: &SessionId) -> String {
        format!("{}/groups/{group}/{session}", self.base)
    }

    /// The prefix (a plain string prefix on the server) of every node the backend creates, for
    /// `getEphemerals`: the root itself (`/` for the root `/`). It has no trailing `/` because the
    /// client rejects such paths, so a sibling root sharing the prefix is listed too; answers are
    /// filtered with [`Paths::member_group`] and [`Paths::lease_name`].
    pub(crate) fn ephemerals_prefix(&self) -> &str {
        self.root()
    }

    /// The lease name of `path` when it is a lease node (`{root}/leases/{name}` with a valid
    /// name); `None` for any other path.
    pub(crate) fn lease_name(&self, path: &str) -> Option<Name> {
        let name = path.strip_prefix(self.base.as_str())?.strip_prefix("/leases/")?;
        if name.contains('/') {
            return None;
        }
        Name::new(name).ok()
    }

    /// The group of `path` when it is the member node of `session` (`{root}/groups/{group}/{session}`
    /// with a valid group name); `None` for any other path.
    pub(crate) fn member_group(&self, path: &str, session: &SessionId) -> Option<Name> {
        let rest = path.strip_prefix(self.base.as_str())?.strip_prefix("/groups/")?;
        let (group, child) = rest.split_once('/')?;
        if child != session.as_str() {
            return None;
        }
        Name::new(group).ok()
    }

    /// `{root}/sessions`, the parent of every session node.
    pub(crate) fn sessions_dir(&self) -> String {
        format!("{}/sessions", self.base)
    }

    /// `{root}/groups`, the parent of every group node.
    pub(crate) fn groups_dir(&self) -> String {
        format!("{}/groups", self.base)
    }

    /// `{root}/semaphores/{name}`, a semaphore's limit node.
    pub(crate) fn semaphore(&self, name: &Name) -> String {
        format!("{}/semaphores/{name}", self.base)
    }

    /// `{root}/semaphores`, the parent of every semaphore's limit node.
    pub(crate) fn semaphores_dir(&self) -> String {
        format!("{}/semaphores", self.base)
    }

    /// `{root}/leases`, the parent of every lease node.
    pub(crate) fn leases_dir(&self) -> String {
        format!("{}/leases", self.base)
    }

    pub(crate) fn session(&self, session: &SessionId) -> String {
        format!("{}/sessions/{session}", self.base)
    }
}

/// The parent of an absolute path (`None` for `/` and top-level nodes' parent `/`).
pub(crate) fn parent(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) | None => None,
        Some(i) => Some(&path[..i]),
    }
}

/// Data of `{root}/sessions/{sid}`: `"{bound_ms}\n{metadata}"`, where `bound_ms` is max(lease
/// duration, negotiated session timeout): the longest the session can outlive its last renewal,
/// which `holder` reports for sessions of other processes (it cannot know their last renewal).
pub(crate) fn encode_session(remaining: Duration, metadata: &str) -> Vec<u8> {
    format!("{}\n{metadata}", remaining.as_millis()).into_bytes()
}

/// Parses session node data; data not in the format is taken as metadata with no known timeout.
pub(crate) fn decode_session(data: &[u8]) -> (Option<Duration>, String) {
    let text = String::from_utf8_lossy(data);
    if let Some((head, meta)) = text.split_once('\n') {
        if let Ok(ms) = head.parse::<u64>() {
            return (Some(Duration::from_millis(ms)), meta.to_string());
        }
    }
    (None, text.into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths() {
        let p = Paths::new("/simba");
        let n = Name::new("job").unwrap();
        let s = SessionId::from_u64(0x1f);
        assert_eq!(p.lease(&n), "/simba/leases/job");
        assert_eq!(p.member(&n, &s), "/simba/groups/job/000000000000001f");
        assert_eq!(p.session(&s), "/simba/sessions/000000000000001f");
        assert_eq!(p.root(), "/simba");
        assert_eq!(parent(&p.session(&s)), Some(p.sessions_dir().as_str()));
        assert_eq!(parent(&p.lease(&n)), Some(p.leases_dir().as_str()));
        assert_eq!(parent(&p.group(&n)), Some(p.groups_dir().as_str()));
        let p = Paths::new("/");
        assert_eq!(p.leases_dir(), "/leases");
        assert_eq!(p.lease(&n), "/leases/job");
        assert_eq!(p.root(), "/");
        assert_eq!(p.ephemerals_prefix(), "/");
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), None);
    }

    #[test]
    fn member_group_parses_only_own_member_nodes() {
        let s = SessionId::from_u64(0x1f);
        let other = SessionId::from_u64(0x2f);
        for root in ["/simba", "/"] {
            let p = Paths::new(root);
            let g = Name::new("g.1:x-y_z").unwrap();
            assert!(p.member(&g, &s).starts_with(p.ephemerals_prefix()));
            assert!(p.lease(&g).starts_with(p.ephemerals_prefix()));
            assert_eq!(p.lease_name(&p.lease(&g)), Some(g.clone()), "{root}");
            assert_eq!(p.lease_name(&p.member(&g, &s)), None);
            assert_eq!(p.lease_name(&p.session(&s)), None);
            assert_eq!(p.lease_name(&format!("{}/x", p.lease(&g))), None);
            assert_eq!(p.member_group(&p.member(&g, &s), &s), Some(g.clone()), "{root}");
            assert_eq!(p.member_group(&p.member(&g, &other), &s), None);
            assert_eq!(p.member_group(&p.group(&g), &s), None);
            assert_eq!(p.member_group(&p.lease(&g), &s), None);
            assert_eq!(p.member_group(&p.session(&s), &s), None);
            assert_eq!(p.member_group(&format!("{}/{s}/x", p.member(&g, &s)), &s), None);
            assert_eq!(p.member_group(&format!("{}/groups/../{s}", p.root().trim_end_matches('/')), &s), None);
        }
        // A sibling root that shares the prefix is not ours.
        let p = Paths::new("/simba");
        assert_eq!(p.member_group(&format!("/simba2/groups/g/{s}"), &s), None);
        assert_eq!(p.member_group(&format!("/simbagroups/g/{s}"), &s), None);
        assert_eq!(p.lease_name("/simba2/leases/x"), None);
        assert_eq!(p.lease_name("/simba/leases/.."), None);
    }

    #[test]
    fn session_data() {
        let d = encode_session(Duration::from_millis(1500), "héllo\nworld");
        assert_eq!(decode_session(&d), (Some(Duration::from_millis(1500)), "héllo\nworld".to_string()));
        assert_eq!(decode_session(b"plain"), (None, "plain".to_string()));
        assert_eq!(decode_session(b""), (None, String::new()));
    }
}
