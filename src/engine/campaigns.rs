//! Campaigns: the names an election campaigns for, and the one-transition resign.

use std::time::{Duration, Instant};

use super::leases::{Adoption, NotSent};
use super::Engine;
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
    /// Starts a campaign for `name`: from now on its attempts' terms are adopted (see
    /// [`on_campaign_acquired`](Engine::on_campaign_acquired)) and a lock of the name is refused.
    ///
    /// # Errors
    /// The conflict when the session holds the name, already campaigns for it, or a lock of it is
    /// in flight.
    pub fn start_campaign(&mut self, name: &Name, now: Instant) -> std::result::Result<(), CampaignConflict> {
        if self.campaigns.contains(name) {
            return Err(CampaignConflict::Campaigning);
        }
        if self.token(name, now).is_some() {
            return Err(CampaignConflict::Held);
        }
        if self.acquiring(name) > 0 {
            return Err(CampaignConflict::Acquiring);
        }
        self.campaigns.insert(name.clone());
        Ok(())
    }

    /// A campaign's attempt for `name` wants to send an acquire at `now`: counted in flight (the
    /// release epoch is returned) unless the session is no longer alive or a release of the name
    /// is in flight (the attempt is retried shortly).
    pub fn begin_attempt(&mut self, name: &Name, now: Instant) -> std::result::Result<u64, NotSent> {
        if !self.is_alive(now) {
            return Err(NotSent::Ended);
        }
        if self.releasing(name) {
            return Err(NotSent::Releasing);
        }
        Ok(self.begin_acquire(name))
    }

    /// True while the session campaigns for `name`.
    pub fn is_campaigning(&self, name: &Name) -> bool {
        self.campaigns.contains(name)
    }

    /// Ends the campaign for `name` (a resign), in one transition with the release of its term:
    /// the held term (or `leading`, the term the election led, when it is no longer held) is
    /// given up and counted as a release in flight. Returns the term to release on the backend
    /// (then call [`end_release`](Engine::end_release) or
    /// [`end_confirmed_release`](Engine::end_confirmed_release)).
    pub fn stop_campaign(&mut self, name: &Name, leading: Option<Token>) -> Option<Token> {
        if !self.campaigns.remove(name) {
            return None;
        }
        if crate::sync::reintroduced(crate::sync::Bug::ResignSplit) {
            // old: the caller releases in a second transition
            return self.leases.remove(name).map(|l| l.token).or(leading);
        }
        let token = self.leases.get(name).map(|l| l.token).or(leading)?;
        self.begin_release(name, token);
        Some(token)
    }

    /// Like [`on_acquired`](Engine::on_acquired), for a campaign attempt: adopted — the session
    /// now leads the term — only while the campaign goes on; an attempt answering after its
    /// campaign ended is undone.
    pub fn on_campaign_acquired(
        &mut self,
        name: &Name,
        token: Token,
        sent: Instant,
        remaining: Duration,
        now: Instant,
        epoch: u64,
    ) -> Adoption {
        if self.is_alive(now) && !self.campaigns.contains(name) {
            return if self.leases.get(name).is_some_and(|l| l.token == token) {
                Adoption::Kept
            } else {
                Adoption::Undo
            };
        }
        self.on_acquired(name, token, sent, remaining, now, epoch)
    }
}
