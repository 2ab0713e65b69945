//! What the runtime tells the handles above it, as small traits it defines and the handles'
//! shared state implements (an election's `ElectionShared`, a membership's `MembershipShared`):
//! the runtime holds them as `Arc<dyn …>` and never names a handle type, so the layering rule
//! holds (`runtime` imports nothing above it; docs/architecture.md, "Layers").
//!
//! Every method is called by the runtime at the moment the comment says, some of them under the
//! engine lock (those taking a [`Logs`]): they must not block, call back into the session, or run
//! user code; log records go to `logs`, written once every internal lock is released.

use std::fmt;
use std::sync::Weak;
use std::time::Duration;

use super::{Logs, SessionInner};
use crate::backend::Holder;
use crate::error::Error;
use crate::state::LossReason;
use crate::types::{Name, SessionId, Token};

/// An election's side of its campaign on a session: what the session's campaign slot tells it.
pub(crate) trait CampaignSink: Send + Sync + fmt::Debug {
    /// The lease the election campaigns for.
    fn name(&self) -> &Name;

    /// The campaign was attached to the session `id` (a re-attach replaces the previous one).
    fn attach(&self, session: Weak<SessionInner>, id: SessionId);

    /// True while the election leads a term (the renewal thread sends no attempt meanwhile).
    fn is_leading(&self) -> bool;

    /// The session `session` adopted `token` for this campaign, with `remaining` time left
    /// (called in the engine transition that adopted it, under the engine lock: never after the
    /// session's end or a resign).
    fn elected(&self, token: Token, remaining: Duration, session: &SessionId, metadata: &str, logs: &mut Logs);

    /// The term `token` was lost (under the engine lock, in the transition that lost it).
    fn revoked(&self, token: Token, reason: LossReason, logs: &mut Logs);

    /// The session `session` ended (under the engine lock, after its terminal event).
    fn session_ended(&self, session: &SessionId, reason: LossReason, logs: &mut Logs);

    /// A campaign attempt was answered (whatever its outcome): `failed` is its error, if any.
    fn attempt_done(&self, failed: Option<&Error>);

    /// An attempt that missed read the lease's holder.
    fn observe(&self, holder: Holder);

    /// The campaign is resigned (under the engine lock, in the transition that ends it): returns
    /// the term the election led, if any.
    fn resigned(&self, logs: &mut Logs) -> Option<Token>;

    /// True once the election resigned.
    fn is_resigned(&self) -> bool;
}

/// A membership's side of its join on a session.
pub(crate) trait MembershipSink: Send + Sync + fmt::Debug {
    /// The group.
    fn group(&self) -> &Name;

    /// The join on the session `id` returned: the membership is held there.
    fn attach(&self, session: Weak<SessionInner>, id: SessionId);

    /// The session `id` ended (under the engine lock, after its terminal event).
    fn session_ended(&self, id: &SessionId);
}
