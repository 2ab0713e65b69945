//! The backend's key layout (see the module docs of `etcd`).

use crate::types::{Name, SessionId};

/// The keys under one prefix.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    /// `/<prefix>/`.
    root: String,
}

/// The smallest key after every key that starts with `prefix` (etcd's `range_end` of a prefix).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // Every byte was 0xff: no end (etcd's "\0" means "to the end of the key space").
    vec![0]
}

impl Keys {
    pub(crate) fn new(prefix: &str) -> Keys {
        Keys { root: format!("/{}/", prefix.trim_matches('/')) }
    }

    pub(crate) fn root(&self) -> &str {
        &self.root
    }

    pub(crate) fn session(&self, s: &SessionId) -> Vec<u8> {
        format!("{}s/{s}", self.root).into_bytes()
    }

    /// The prefix of the keys `session` returns.
    pub(crate) fn sessions_prefix(&self) -> String {
        format!("{}s/", self.root)
    }

    pub(crate) fn lease(&self, name: &Name) -> Vec<u8> {
        format!("{}l/{name}", self.root).into_bytes()
    }

    /// The prefix of the keys `lease` returns.
    pub(crate) fn lease_prefix(&self) -> String {
        format!("{}l/", self.root)
    }

    pub(crate) fn owned(&self, s: &SessionId, name: &Name) -> Vec<u8> {
        format!("{}o/{s}/{name}", self.root).into_bytes()
    }

    /// The prefix of a session's `owned` keys.
    pub(crate) fn owned_prefix(&self, s: &SessionId) -> String {
        format!("{}o/{s}/", self.root)
    }

    pub(crate) fn member(&self, group: &Name, s: &SessionId) -> Vec<u8> {
        format!("{}g/{group}/{s}", self.root).into_bytes()
    }

    /// The prefix of a group's member keys.
    pub(crate) fn group_prefix(&self, group: &Name) -> String {
        format!("{}g/{group}/", self.root)
    }

    /// The prefix of every member key.
    pub(crate) fn groups_prefix(&self) -> String {
        format!("{}g/", self.root)
    }

    pub(crate) fn semaphore(&self, name: &Name) -> Vec<u8> {
        format!("{}sem/{name}", self.root).into_bytes()
    }
}

/// The etcd lease id of a session id (16 hex digits), or `None` for another form.
pub(crate) fn lease_id(s: &SessionId) -> Option<i64> {
    let s = s.as_str();
    if s.len() != 16 {
        return None;
    }
    u64::from_str_radix(s, 16).ok().map(|v| v as i64)
}

/// The session id of an etcd lease id.
pub(crate) fn session_id(lease: i64) -> SessionId {
    SessionId::from_u64(lease as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_and_ids() {
        assert_eq!(prefix_end(b"/a/"), b"/a0".to_vec());
        assert_eq!(prefix_end(&[b'a', 0xff]), b"b".to_vec());
        assert_eq!(prefix_end(&[0xff]), vec![0]);
        let id = session_id(0x6a6c_a24e_c6c4_0a0c);
        assert_eq!(id.as_str(), "6a6ca24ec6c40a0c");
        assert_eq!(lease_id(&id), Some(0x6a6c_a24e_c6c4_0a0c));
        assert_eq!(lease_id(&SessionId::random()), None);
        let k = Keys::new("/x/y/");
        assert_eq!(k.root(), "/x/y/");
        assert_eq!(k.lease(&Name::new("a").unwrap()), b"/x/y/l/a".to_vec());
    }
}
