//! Campaigns: the names an election campaigns for, and the one-transition resign.
//!
//! Each campaign has its own id: an attempt is sent, and its answer adopted, only while the
//! campaign it belongs to goes on. An attempt that starts late (queued behind stalled calls) finds
//! its campaign over and sends nothing, even when a new campaign of the same name has started
//! meanwhile.

use std::time::Instant;

use super::leases::{Adoption, CampaignId, NotSent};
use super::Engine;
use crate::backend::TermRemaining;
use crate::state::SessionState;
use crate::sync::{self, Bug};
use crate::types::{Name, Token};

/// Why a campaign cannot start (see [`Engine::start_campaign`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CampaignConflict {
    /// The session holds the name (a lease).
    Held,
    /// The session already campaigns for the name.
    Campaigning,
    /// A lock of the name is in flight (its term would be adopted twice).
    Acquiring,
}

impl Engine {
    /// Starts a campaign for `name`: from now on its attempts are sent and their terms adopted
    /// (see [`begin_attempt`](Engine::begin_attempt) and
    /// [`on_campaign_acquired`](Engine::on_campaign_acquired)) until it stops, and a lock of the
    /// name is refused. Returns the campaign's id, which its attempts carry.
    ///
    /// # Errors
    /// The conflict when the session holds the name, already campaigns for it, or a lock of it is
    /// in flight.
    pub fn start_campaign(&mut self, name: &Name, now: Instant) -> std::result::Result<CampaignId, CampaignConflict> {
        if self.campaigns.contains_key(name) {
            return Err(CampaignConflict::Campaigning);
        }
        if self.token(name, now).is_some() {
            return Err(CampaignConflict::Held);
        }
        if self.acquiring(name) > 0 {
            return Err(CampaignConflict::Acquiring);
        }
        self.last_campaign += 1;
        let id = CampaignId(self.last_campaign);
        self.campaigns.insert(name.clone(), id);
        Ok(id)
    }

    /// An attempt of `campaign` wants to send an acquire of `name` at `now` (asked when it is
    /// really about to send, not when it was scheduled): counted in flight (the release epoch is
    /// returned) unless the session is no longer alive, the campaign is over, or a release of the
    /// name is in flight (the attempt is retried shortly).
    ///
    /// # Errors
    /// [`NotSent::Ended`], [`NotSent::CampaignOver`] or [`NotSent::Releasing`].
    pub fn begin_attempt(
        &mut self,
        name: &Name,
        campaign: CampaignId,
        now: Instant,
    ) -> std::result::Result<u64, NotSent> {
        if !self.is_alive(now) {
            return Err(NotSent::Ended);
        }
        let over = sync::pick(Bug::LateAttempt, false, !self.is_current(name, campaign)); // old: sent anyway
        if over {
            return Err(NotSent::CampaignOver);
        }
        if self.releasing(name) {
            return Err(NotSent::Releasing);
        }
        Ok(self.begin_acquire(name))
    }

    /// True while the session campaigns for `name`.
    pub fn is_campaigning(&self, name: &Name) -> bool {
        self.campaigns.contains_key(name)
    }

    fn is_current(&self, name: &Name, campaign: CampaignId) -> bool {
        self.campaigns.get(name) == Some(&campaign)
    }

    /// Ends `campaign` of `name` (a resign), in one transition with the release of its term: the
    /// held term (or `leading`, the term the election led, when it is no longer held) is given
    /// up and counted as a release in flight. Returns the term to release on the backend (then
    /// call [`end_release`](Engine::end_release) or
    /// [`end_confirmed_release`](Engine::end_confirmed_release)); nothing when `campaign` is not
    /// the one going on, or once the session is closed or expired.
    pub fn stop_campaign(&mut self, name: &Name, campaign: CampaignId, leading: Option<Token>) -> Option<Token> {
        if !self.is_current(name, campaign) {
            return None;
        }
        self.campaigns.remove(name);
        sync::pick_on(Bug::ResignSplit, self, |e| e.stop_split(name, leading), |e| e.stop_release(name, leading))
    }

    /// The end of a campaign's term, in the transition that ended the campaign.
    fn stop_release(&mut self, name: &Name, leading: Option<Token>) -> Option<Token> {
        let token = self.leases.get(name).map(|l| l.token).or(leading)?;
        // After close or expiry the session's close frees the term (as in `release`).
        if self.state != SessionState::Active {
            return None;
        }
        self.begin_release(name, token);
        Some(token)
    }

    /// The old rule (finding 1 of issue #14, `Bug::ResignSplit`): the term is dropped here and the
    /// caller counts its release in a second transition.
    fn stop_split(&mut self, name: &Name, leading: Option<Token>) -> Option<Token> {
        self.leases.remove(name).map(|l| l.token).or(leading)
    }

    /// Like [`on_acquired`](Engine::on_acquired), for an attempt of `campaign`: adopted — the
    /// session now leads the term — only while that campaign goes on; an attempt answering
    /// after its campaign ended is undone (unless it confirms a term the session holds anyway).
    #[allow(clippy::too_many_arguments)]
    pub fn on_campaign_acquired(
        &mut self,
        name: &Name,
        campaign: CampaignId,
        token: Token,
        sent: Instant,
        remaining: impl Into<TermRemaining>,
        now: Instant,
        epoch: u64,
    ) -> Adoption {
        if self.is_alive(now) && !self.is_current(name, campaign) {
            return if self.holds(name, token) { Adoption::Kept } else { Adoption::Undo };
        }
        self.on_acquired(name, token, sent, remaining, now, epoch)
    }
}
