//! The statuses as JSON (feature `serde`): `serde::Serialize` for [`SessionStatus`],
//! [`CoordinatorStatus`] and [`PartitionsStatus`], in a versioned schema.
//!
//! Schema version [`SCHEMA`] (the `"schema"` field of every top-level object): durations are
//! milliseconds as numbers (`margin_ms`, `latency_ms`, …; fractional), absent values are `null`,
//! names and session ids are strings, tokens are numbers, states and outcomes are lowercase
//! strings (`"active"`, `"renewed"`), a lease's kind is `{"type": "lease"}`,
//! `{"type": "permit", "semaphore": …, "slot": …}` or `{"type": "partition", "set": …, "index": …}`.
//! A field is added without changing the version; renaming or removing one, or changing its
//! meaning, is a new version.

use std::time::Duration;

use serde::ser::{SerializeMap, SerializeStruct};
use serde::{Serialize, Serializer};

use super::{
    CoordinatorStatus, HeldLease, LeaseKind, ObservedDrift, OwnedPartition, PartitionsStatus, Renewal, RenewalOutcome,
    SessionStatus,
};
use crate::state::SessionState;

/// The schema version of the statuses' JSON.
pub const SCHEMA: u32 = 1;

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn ms_opt(d: Option<Duration>) -> Option<f64> {
    d.map(ms)
}

fn state(s: SessionState) -> &'static str {
    match s {
        SessionState::Active => "active",
        SessionState::Expired => "expired",
        SessionState::Closed => "closed",
    }
}

/// A renewal as JSON.
struct RenewalJson<'a>(&'a Renewal);

impl Serialize for RenewalJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let r = self.0;
        let outcome = match r.outcome {
            RenewalOutcome::Renewed => "renewed",
            RenewalOutcome::Failed => "failed",
            RenewalOutcome::Expired => "expired",
        };
        let mut s = ser.serialize_struct("Renewal", 3)?;
        s.serialize_field("ago_ms", &ms(r.ago))?;
        s.serialize_field("latency_ms", &ms(r.latency))?;
        s.serialize_field("outcome", outcome)?;
        s.end()
    }
}

/// A held lease as JSON.
struct LeaseJson<'a>(&'a HeldLease);

impl Serialize for LeaseJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let l = self.0;
        let mut s = ser.serialize_struct("HeldLease", 4)?;
        s.serialize_field("name", l.name.as_str())?;
        s.serialize_field("kind", &KindJson(&l.kind))?;
        s.serialize_field("token", &l.token.get())?;
        s.serialize_field("remaining_ms", &ms_opt(l.remaining))?;
        s.end()
    }
}

struct KindJson<'a>(&'a LeaseKind);

impl Serialize for KindJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut m = ser.serialize_map(None)?;
        match self.0 {
            LeaseKind::Lease => m.serialize_entry("type", "lease")?,
            LeaseKind::Permit { semaphore, slot } => {
                m.serialize_entry("type", "permit")?;
                m.serialize_entry("semaphore", semaphore.as_str())?;
                m.serialize_entry("slot", slot)?;
            }
            LeaseKind::Partition { set, index } => {
                m.serialize_entry("type", "partition")?;
                m.serialize_entry("set", set.as_str())?;
                m.serialize_entry("index", index)?;
            }
        }
        m.end()
    }
}

/// The session fields, without the schema (a coordinator's status nests one).
struct SessionJson<'a>(&'a SessionStatus);

impl Serialize for SessionJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        session_fields(self.0, None, ser)
    }
}

fn session_fields<S: Serializer>(st: &SessionStatus, schema: Option<u32>, ser: S) -> Result<S::Ok, S::Error> {
    let mut s = ser.serialize_struct("SessionStatus", 18)?;
    if let Some(v) = schema {
        s.serialize_field("schema", &v)?;
    }
    s.serialize_field("session", st.session.as_str())?;
    s.serialize_field("backend", st.backend)?;
    s.serialize_field("state", state(st.state))?;
    s.serialize_field("healthy", &st.is_healthy())?;
    s.serialize_field("margin_ms", &ms_opt(st.margin))?;
    s.serialize_field("lease_duration_ms", &ms(st.lease_duration))?;
    s.serialize_field("renew_interval_ms", &ms(st.renew_interval))?;
    s.serialize_field("drift", &st.drift)?;
    s.serialize_field("observed_drift", &st.observed_drift.as_ref().map(DriftJson))?;
    s.serialize_field("last_renewal", &st.last_renewal.as_ref().map(RenewalJson))?;
    s.serialize_field("renewal_in_flight_ms", &ms_opt(st.renewal_in_flight))?;
    s.serialize_field("consecutive_failures", &st.consecutive_failures)?;
    s.serialize_field("last_error", &st.last_error)?;
    s.serialize_field("leases", &st.leases.iter().map(LeaseJson).collect::<Vec<_>>())?;
    s.serialize_field("campaigns", &st.campaigns.iter().map(|n| n.as_str()).collect::<Vec<_>>())?;
    s.serialize_field("memberships", &st.memberships.iter().map(|n| n.as_str()).collect::<Vec<_>>())?;
    let waiters: Vec<Waiter<'_>> = st.waiters.iter().map(|(n, c)| Waiter { name: n.as_str(), threads: *c }).collect();
    s.serialize_field("waiters", &waiters)?;
    s.end()
}

struct DriftJson<'a>(&'a ObservedDrift);

impl Serialize for DriftJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let d = self.0;
        let mut s = ser.serialize_struct("ObservedDrift", 4)?;
        s.serialize_field("estimate", &d.estimate)?;
        s.serialize_field("uncertainty", &d.uncertainty)?;
        s.serialize_field("window_ms", &ms(d.window))?;
        s.serialize_field("renewals", &d.renewals)?;
        s.end()
    }
}

struct Waiter<'a> {
    name: &'a str,
    threads: u32,
}

impl Serialize for Waiter<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut s = ser.serialize_struct("Waiter", 2)?;
        s.serialize_field("name", self.name)?;
        s.serialize_field("threads", &self.threads)?;
        s.end()
    }
}

impl Serialize for SessionStatus {
    /// The schema in the [module docs](self), with `"schema"` and `"healthy"`
    /// ([`is_healthy`](SessionStatus::is_healthy)) first.
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        session_fields(self, Some(SCHEMA), ser)
    }
}

impl Serialize for CoordinatorStatus {
    /// `{"schema", "healthy", "replacements", "last_gap_ms", "session": {…} | null}`.
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut s = ser.serialize_struct("CoordinatorStatus", 5)?;
        s.serialize_field("schema", &SCHEMA)?;
        s.serialize_field("healthy", &self.is_healthy())?;
        s.serialize_field("replacements", &self.replacements)?;
        s.serialize_field("last_gap_ms", &ms_opt(self.last_gap))?;
        s.serialize_field("session", &self.session.as_ref().map(SessionJson))?;
        s.end()
    }
}

struct OwnedJson<'a>(&'a OwnedPartition);

impl Serialize for OwnedJson<'_> {
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let p = self.0;
        let mut s = ser.serialize_struct("OwnedPartition", 4)?;
        s.serialize_field("index", &p.index)?;
        s.serialize_field("token", &p.token.get())?;
        s.serialize_field("remaining_ms", &ms_opt(p.remaining))?;
        s.serialize_field("revoking_ms", &ms_opt(p.revoking))?;
        s.end()
    }
}

impl Serialize for PartitionsStatus {
    /// `{"schema", "name", "count", "generation", "members": [id…], "owned": [{"index", "token",
    /// "remaining_ms", "revoking_ms"}…]}`.
    fn serialize<S: Serializer>(&self, ser: S) -> Result<S::Ok, S::Error> {
        let mut s = ser.serialize_struct("PartitionsStatus", 6)?;
        s.serialize_field("schema", &SCHEMA)?;
        s.serialize_field("name", self.name.as_str())?;
        s.serialize_field("count", &self.count)?;
        s.serialize_field("generation", &self.generation)?;
        s.serialize_field("members", &self.members.iter().map(|m| m.as_str()).collect::<Vec<_>>())?;
        s.serialize_field("owned", &self.owned.iter().map(OwnedJson).collect::<Vec<_>>())?;
        s.end()
    }
}
