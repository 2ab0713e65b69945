//! The embedded Lua scripts (`lua/*.lua`), each `include_str!`-ed once, and the shared
//! [`redis::Script`]s built from them (SHA computed once, run by `EVALSHA` with a `NOSCRIPT`
//! fallback).

use std::fmt;
use std::sync::LazyLock;

/// The Lua sources, one constant per file under `lua/`.
pub mod lua {
    /// Opens a session (standalone and Cluster).
    pub const OPEN_SESSION: &str = include_str!("../../../lua/open_session.lua");
    /// Standalone: renews a session and its memberships in one script (its leases live with it).
    pub const KEEP_ALIVE: &str = include_str!("../../../lua/keep_alive.lua");
    /// Standalone: acquires a lease.
    pub const ACQUIRE: &str = include_str!("../../../lua/acquire.lua");
    /// Standalone: releases a lease.
    pub const RELEASE: &str = include_str!("../../../lua/release.lua");
    /// Standalone: closes a session.
    pub const CLOSE_SESSION: &str = include_str!("../../../lua/close_session.lua");
    /// Standalone: the live holder of a lease.
    pub const HOLDER: &str = include_str!("../../../lua/holder.lua");
    /// Standalone: joins a group.
    pub const JOIN: &str = include_str!("../../../lua/join.lua");
    /// Standalone: leaves a group.
    pub const LEAVE: &str = include_str!("../../../lua/leave.lua");
    /// Standalone: live members of a group.
    pub const MEMBERS: &str = include_str!("../../../lua/members.lua");
    /// Cluster: renewal, session slot.
    pub const KEEP_ALIVE_SESSION: &str = include_str!("../../../lua/keep_alive_session.lua");
    /// Cluster: renewal follow-up, one call per node in use (or per slot).
    pub const RENEW_SLOT: &str = include_str!("../../../lua/renew_slot.lua");
    /// Cluster: acquire, session slot.
    pub const ACQUIRE_SESSION: &str = include_str!("../../../lua/acquire_session.lua");
    /// Cluster: acquire, lease slot.
    pub const ACQUIRE_LEASE: &str = include_str!("../../../lua/acquire_lease.lua");
    /// Cluster: release leases and leave groups, one slot.
    pub const RELEASE_SLOT: &str = include_str!("../../../lua/release_slot.lua");
    /// Cluster: remove names from a session index, session slot.
    pub const INDEX_REMOVE: &str = include_str!("../../../lua/index_remove.lua");
    /// Cluster: close, session slot, first call.
    pub const CLOSE_SESSION_BEGIN: &str = include_str!("../../../lua/close_session_begin.lua");
    /// Cluster: close, session slot, last call.
    pub const CLOSE_SESSION_END: &str = include_str!("../../../lua/close_session_end.lua");
    /// Cluster: join, session slot.
    pub const JOIN_SESSION: &str = include_str!("../../../lua/join_session.lua");
    /// Cluster: join, group slot.
    pub const JOIN_GROUP: &str = include_str!("../../../lua/join_group.lua");
    /// Cluster: the live term of a lease, lease slot.
    pub const LEASE_INFO: &str = include_str!("../../../lua/lease_info.lua");
    /// Cluster: a session's remaining time and metadata, session slot.
    pub const SESSION_INFO: &str = include_str!("../../../lua/session_info.lua");
    /// Cluster: unexpired entries of a group, group slot.
    pub const GROUP_LIVE: &str = include_str!("../../../lua/group_live.lua");
    /// Standalone and Cluster: stores or reads a semaphore's limit (one key).
    pub const SEMAPHORE_LIMIT: &str = include_str!("../../../lua/semaphore_limit.lua");
}

/// One embedded Lua script: its operation name (for logs, errors and fault-injection wrappers),
/// its source and its SHA-1.
pub struct LuaScript {
    name: &'static str,
    code: &'static str,
    script: redis::Script,
}

impl LuaScript {
    fn new(name: &'static str, code: &'static str) -> LuaScript {
        LuaScript { name, code, script: redis::Script::new(code) }
    }

    /// The operation name, e.g. `"keep_alive"`, `"renew_slot"` (the file name without `.lua`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The Lua source.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The SHA-1 that `EVALSHA` uses.
    pub fn sha(&self) -> &str {
        self.script.get_hash()
    }

    /// The driver's script object (runs `EVALSHA`, loading the script on `NOSCRIPT`).
    #[cfg_attr(not(feature = "internal-testing"), allow(dead_code))] // used by the test seam only
    pub fn script(&self) -> &redis::Script {
        &self.script
    }
}

impl fmt::Debug for LuaScript {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LuaScript").field("name", &self.name).field("sha", &self.sha()).finish()
    }
}

/// Every script, built once per process.
pub(crate) struct Scripts {
    pub open_session: LuaScript,
    pub keep_alive: LuaScript,
    pub acquire: LuaScript,
    pub release: LuaScript,
    pub close_session: LuaScript,
    pub holder: LuaScript,
    pub join: LuaScript,
    pub leave: LuaScript,
    pub members: LuaScript,
    pub keep_alive_session: LuaScript,
    pub renew_slot: LuaScript,
    pub acquire_session: LuaScript,
    pub acquire_lease: LuaScript,
    pub release_slot: LuaScript,
    pub index_remove: LuaScript,
    pub close_session_begin: LuaScript,
    pub close_session_end: LuaScript,
    pub join_session: LuaScript,
    pub join_group: LuaScript,
    pub lease_info: LuaScript,
    pub session_info: LuaScript,
    pub group_live: LuaScript,
    pub semaphore_limit: LuaScript,
}

impl Scripts {
    /// The scripts the Cluster deployment runs (each loaded on a node by its first `NOSCRIPT`).
    #[cfg(test)]
    pub(crate) fn clustered(&self) -> [&LuaScript; 15] {
        [
            &self.open_session,
            &self.keep_alive_session,
            &self.renew_slot,
            &self.acquire_session,
            &self.acquire_lease,
            &self.release_slot,
            &self.index_remove,
            &self.close_session_begin,
            &self.close_session_end,
            &self.join_session,
            &self.join_group,
            &self.lease_info,
            &self.session_info,
            &self.group_live,
            &self.semaphore_limit,
        ]
    }
}

/// The shared scripts.
pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    open_session: LuaScript::new("open_session", lua::OPEN_SESSION),
    keep_alive: LuaScript::new("keep_alive", lua::KEEP_ALIVE),
    acquire: LuaScript::new("acquire", lua::ACQUIRE),
    release: LuaScript::new("release", lua::RELEASE),
    close_session: LuaScript::new("close_session", lua::CLOSE_SESSION),
    holder: LuaScript::new("holder", lua::HOLDER),
    join: LuaScript::new("join", lua::JOIN),
    leave: LuaScript::new("leave", lua::LEAVE),
    members: LuaScript::new("members", lua::MEMBERS),
    keep_alive_session: LuaScript::new("keep_alive_session", lua::KEEP_ALIVE_SESSION),
    renew_slot: LuaScript::new("renew_slot", lua::RENEW_SLOT),
    acquire_session: LuaScript::new("acquire_session", lua::ACQUIRE_SESSION),
    acquire_lease: LuaScript::new("acquire_lease", lua::ACQUIRE_LEASE),
    release_slot: LuaScript::new("release_slot", lua::RELEASE_SLOT),
    index_remove: LuaScript::new("index_remove", lua::INDEX_REMOVE),
    close_session_begin: LuaScript::new("close_session_begin", lua::CLOSE_SESSION_BEGIN),
    close_session_end: LuaScript::new("close_session_end", lua::CLOSE_SESSION_END),
    join_session: LuaScript::new("join_session", lua::JOIN_SESSION),
    join_group: LuaScript::new("join_group", lua::JOIN_GROUP),
    lease_info: LuaScript::new("lease_info", lua::LEASE_INFO),
    session_info: LuaScript::new("session_info", lua::SESSION_INFO),
    group_live: LuaScript::new("group_live", lua::GROUP_LIVE),
    semaphore_limit: LuaScript::new("semaphore_limit", lua::SEMAPHORE_LIMIT),
});

/// Key names (braces are real hash tags, so a session's keys share one Cluster slot).
pub(crate) mod keys {
    /// `simba:lease:{name}` — also the channel a release is published on.
    pub(crate) fn lease(name: &str) -> String {
        format!("simba:lease:{{{name}}}")
    }
    /// The hash slot of [`lease`]`(name)`, without building the key.
    pub(crate) fn lease_slot(name: &str) -> u16 {
        super::super::router::tagged_slot("simba:lease:", name)
    }
    /// The hash slot of [`group`]`(name)`, without building the key.
    pub(crate) fn group_slot(name: &str) -> u16 {
        super::super::router::tagged_slot("simba:group:", name)
    }
    /// `simba:session:{sid}`.
    pub(crate) fn session(sid: &str) -> String {
        format!("simba:session:{{{sid}}}")
    }
    /// `simba:session:{sid}:leases` — Cluster: the session's lease index, a set of names (on
    /// standalone only clients before the session-judged renewal wrote it).
    pub(crate) fn session_leases(sid: &str) -> String {
        format!("simba:session:{{{sid}}}:leases")
    }
    /// `simba:session:{sid}:terms` — standalone: the session's lease index, a hash name → token.
    pub(crate) fn session_terms(sid: &str) -> String {
        format!("simba:session:{{{sid}}}:terms")
    }
    /// `simba:session:{sid}:groups`.
    pub(crate) fn session_groups(sid: &str) -> String {
        format!("simba:session:{{{sid}}}:groups")
    }
    /// `simba:semaphore:{name}` — a semaphore's limit (its permits are the leases of its slots).
    pub(crate) fn semaphore(name: &str) -> String {
        format!("simba:semaphore:{{{name}}}")
    }
    /// `simba:group:{group}` — also the channel membership changes are published on.
    pub(crate) fn group(name: &str) -> String {
        format!("simba:group:{{{name}}}")
    }

    /// The name inside the braces of a channel or key, e.g. `simba:lease:{job}` → `job`.
    pub(crate) fn tag(key: &str) -> Option<&str> {
        let open = key.find('{')?;
        let close = key[open..].find('}')? + open;
        Some(&key[open + 1..close])
    }
}
