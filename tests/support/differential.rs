//! Differential testing of a real backend against the reference model (SPEC §8): seeded random
//! sequences of SPI calls from a few sessions over a few colliding names, groups and semaphore
//! slots, run call by call on the real backend and on a fresh [`MemoryBackend`], compared answer
//! by answer; a mismatch is shrunk (steps dropped while a mismatch persists) and printed with its
//! seed, the shrunk sequence and both answers. See docs/testing.md, "Differential testing".
//!
//! Both runs are normalised before they are compared: session ids become the index of the open
//! that made them, tokens become the index of their term for their name (term boundaries are
//! compared, token values are not), remaining times are checked to be in (0, lease] and then
//! dropped. Token order is checked on the real backend's own values as they arrive. Every allowed
//! divergence between a backend and the model is in [`Allowances`] — nowhere else.
#![allow(dead_code)]

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use simba::backend::{Acquire, KeepAlive, LeaseBackend, TermRemaining};
use simba::{ErrorKind, MemoryBackend, Name, SessionId, Token};

/// Sessions a sequence uses at once (slots; an `Open` of a slot replaces its session, which stays
/// alive until the end of the sequence).
pub const SESSIONS: usize = 3;
/// Plain lease names of a sequence.
pub const NAMES: usize = 3;
/// Slot leases of a sequence's first semaphore, acquired like any lease (`simba.sem:S:i`).
pub const SLOTS: u32 = 2;
/// Groups of a sequence.
pub const GROUPS: usize = 2;
/// Semaphores whose limit a sequence stores and reads.
pub const SEMAPHORES: usize = 2;
/// Lease duration of every session: long enough that nothing expires during a sequence.
pub const LEASE: Duration = Duration::from_secs(60);

/// Every divergence a backend is allowed from the model, and why (docs/testing.md lists them).
/// Built in one place, [`Allowances::for_kind`]; the comparator reads nothing else.
#[derive(Debug, Clone, Copy)]
pub struct Allowances {
    /// A new term's token is the previous term's + 1 (the first is 1), as in the model. When
    /// false (ZooKeeper: the token is the lease node's `czxid`, a zxid shared with every other
    /// write of the ensemble), new terms' tokens only strictly increase (SPI `acquire`: "or a
    /// larger token on backends whose tokens are not contiguous").
    pub contiguous_tokens: bool,
    /// An acquire may answer [`TermRemaining::WithSession`] where the model answers a known time:
    /// only where a term ends exactly with its session (SPI `TermRemaining::WithSession`) — MySQL's
    /// one-upsert acquire, ZooKeeper, whose lease node is an ephemeral node of the session, and
    /// etcd, whose lease key is attached to the session's etcd lease.
    pub acquire_with_session: bool,
}

impl Allowances {
    /// The allowances of a backend of kind `kind` ([`LeaseBackend::kind`]).
    pub fn for_kind(kind: &str) -> Allowances {
        Allowances {
            contiguous_tokens: !matches!(kind, "zookeeper" | "etcd"),
            acquire_with_session: matches!(kind, "mysql" | "zookeeper" | "etcd"),
        }
    }
}

/// Whether a reply's remaining time may be compared, as the only comparison of remaining times:
/// "> 0 and ≤ lease" (backends measure by their own clocks, after their own delays).
fn remaining_ok(d: Duration) -> bool {
    d > Duration::ZERO && d <= LEASE
}

/// Which term a release names, counted back from the newest term of the name that the run has
/// seen (0: the newest; 1: the one before).
pub type Back = usize;

/// One SPI call of a sequence, by indices (any subsequence of a sequence is a valid sequence: a
/// step whose session or term does not exist yet is skipped on both sides alike).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// `open_session` into slot `s` (the slot's previous session, if any, stays alive, abandoned).
    Open(usize),
    /// `close_session` of slot `s`'s session (the slot keeps the closed id).
    Close(usize),
    /// `acquire` of lease `n` by slot `s` (`n` ≥ [`NAMES`]: a semaphore slot lease).
    Acquire(usize, usize),
    /// `release` of lease `n` by slot `s` with the token of the `Back`-th newest term of `n`.
    Release(usize, usize, Back),
    /// `keep_alive` of slot `s`.
    KeepAlive(usize),
    /// `holder` of lease `n`.
    Holder(usize),
    /// `join` of group `g` by slot `s`.
    Join(usize, usize),
    /// `leave` of group `g` by slot `s`.
    Leave(usize, usize),
    /// `members` of group `g`.
    Members(usize),
    /// `semaphore_limit` of semaphore `m` (`None`: read only).
    Limit(usize, Option<u32>),
}

/// Lease names of a sequence: [`NAMES`] plain ones, then the [`SLOTS`] slot leases.
pub const LEASES: usize = NAMES + SLOTS as usize;

/// A random sequence of `len` steps from `seed`: it opens every slot first, then mixes calls
/// weighted towards acquires, releases and keep-alives.
pub fn generate(seed: u64, len: usize) -> Vec<Step> {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut steps: Vec<Step> = (0..SESSIONS).map(Step::Open).collect();
    while steps.len() < len {
        let s = rng.random_range(0..SESSIONS);
        let n = rng.random_range(0..LEASES);
        let g = rng.random_range(0..GROUPS);
        let step = match rng.random_range(0..100) {
            0..=24 => Step::Acquire(s, n),
            25..=39 => Step::Release(s, n, if rng.random_bool(0.8) { 0 } else { 1 }),
            40..=57 => Step::KeepAlive(s),
            58..=65 => Step::Holder(n),
            66..=73 => Step::Join(s, g),
            74..=79 => Step::Leave(s, g),
            80..=85 => Step::Members(g),
            86..=89 => Step::Close(s),
            90..=93 => Step::Open(s),
            _ => {
                let m = rng.random_range(0..SEMAPHORES);
                Step::Limit(m, if rng.random_bool(0.7) { Some(rng.random_range(1..=3)) } else { None })
            }
        };
        steps.push(step);
    }
    steps
}

/// An answer, normalised: sessions by open index, tokens by term index (per name, from 0).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Obs {
    /// The step referred to a session or term that does not exist (on both sides alike).
    Skipped,
    /// `open_session` returned; the session is open number `k` of the sequence.
    Opened(usize),
    /// `Ok(())` of close, release, join, leave.
    Done,
    /// Acquired in term `term` of the name.
    Acquired { term: usize },
    /// `Acquire::Busy`.
    Busy,
    /// A keep-alive's `Alive`: owned (lease, term) and groups.
    Alive { owned: BTreeSet<(usize, usize)>, groups: BTreeSet<usize> },
    /// `KeepAlive::Expired`.
    Expired,
    /// `holder`: (open index, term, metadata) or `None`.
    Holder(Option<(usize, usize, String)>),
    /// `members`: (open index, metadata) in the backend's order.
    Members(Vec<(usize, String)>),
    /// `semaphore_limit`.
    Limit(Option<u32>),
    /// An error of this kind (its message is in the trace).
    Failed(ErrorKind),
    /// The answer broke a rule on its own (token order, remaining time, unknown session or token).
    Broken(String),
}

/// One backend's side of a run: its sessions, the tokens of each name's terms, its names.
struct Side<'a> {
    backend: &'a dyn LeaseBackend,
    allow: Allowances,
    /// Slot → the session it holds now.
    slots: Vec<Option<SessionId>>,
    /// Every session opened, in order (its index is its open index).
    opened: Vec<SessionId>,
    ids: HashMap<SessionId, usize>,
    /// Per lease: the tokens of its terms seen so far, in order.
    terms: Vec<Vec<Token>>,
    names: &'a Names,
}

/// The names of one run (fresh for every run on a shared server).
#[derive(Debug, Clone)]
pub struct Names {
    /// [`LEASES`] lease names (plain ones, then slot leases).
    pub leases: Vec<Name>,
    /// [`GROUPS`] group names.
    pub groups: Vec<Name>,
    /// [`SEMAPHORES`] semaphore names.
    pub semaphores: Vec<Name>,
}

impl Names {
    /// Names under a random prefix.
    pub fn fresh() -> Names {
        let p = crate::support::unique("diff");
        let semaphores: Vec<Name> = (0..SEMAPHORES).map(|m| Name::new(format!("{p}.s{m}")).unwrap()).collect();
        let mut leases: Vec<Name> = (0..NAMES).map(|n| Name::new(format!("{p}.n{n}")).unwrap()).collect();
        for i in 0..SLOTS {
            leases.push(simba::semaphore::fence_resource(semaphores[0].as_str(), i).unwrap());
        }
        let groups = (0..GROUPS).map(|g| Name::new(format!("{p}.g{g}")).unwrap()).collect();
        Names { leases, groups, semaphores }
    }
}

impl<'a> Side<'a> {
    fn new(backend: &'a dyn LeaseBackend, allow: Allowances, names: &'a Names) -> Side<'a> {
        Side {
            backend,
            allow,
            slots: vec![None; SESSIONS],
            opened: Vec::new(),
            ids: HashMap::new(),
            terms: vec![Vec::new(); LEASES],
            names,
        }
    }

    fn session(&self, s: usize) -> Option<SessionId> {
        self.slots[s].clone()
    }

    fn who(&self, id: &SessionId) -> std::result::Result<usize, String> {
        self.ids.get(id).copied().ok_or_else(|| format!("session {id} was never opened by this run"))
    }

    /// The term index of `token` for lease `n`, or a rule it breaks. `fresh`: the token comes
    /// from an acquire, which may start a new term.
    fn term(&mut self, n: usize, token: Token, fresh: bool) -> std::result::Result<usize, String> {
        let seen = &mut self.terms[n];
        if let Some(i) = seen.iter().position(|t| *t == token) {
            if fresh && i + 1 != seen.len() {
                return Err(format!(
                    "acquire returned the token {token:?} of an older term {i} (newest {:?})",
                    seen.last()
                ));
            }
            return Ok(i);
        }
        if !fresh {
            return Err(format!("token {token:?} of lease {n} was never returned by an acquire (terms {seen:?})"));
        }
        if let Some(last) = seen.last() {
            if token <= *last {
                return Err(format!("new term's token {token:?} is not above the previous term's {last:?}"));
            }
            if self.allow.contiguous_tokens && token.get() != last.get() + 1 {
                return Err(format!("new term's token {token:?} is not the previous term's {last:?} + 1"));
            }
        } else if self.allow.contiguous_tokens && token.get() != 1 {
            // A fresh name (random prefix): its first term's token is 1 where tokens are contiguous.
            return Err(format!("first term's token is {token:?}, not 1"));
        }
        seen.push(token);
        Ok(seen.len() - 1)
    }

    fn failed(e: simba::Error) -> (Obs, String) {
        (Obs::Failed(e.kind()), format!("{e}"))
    }

    /// Runs `step`; returns the normalised answer and the raw one (for the trace).
    fn run(&mut self, step: Step) -> (Obs, String) {
        let b = self.backend;
        match step {
            Step::Open(s) => {
                let k = self.opened.len();
                match b.open_session(LEASE, &format!("m{k}")) {
                    Ok(grant) => {
                        let raw = format!("{grant:?}");
                        if !remaining_ok(grant.remaining) {
                            return (
                                Obs::Broken(format!("open: remaining {:?} not in (0, lease]", grant.remaining)),
                                raw,
                            );
                        }
                        self.slots[s] = Some(grant.id.clone());
                        self.ids.insert(grant.id.clone(), k);
                        self.opened.push(grant.id);
                        (Obs::Opened(k), raw)
                    }
                    Err(e) => Self::failed(e),
                }
            }
            Step::Close(s) => {
                let Some(id) = self.session(s) else { return (Obs::Skipped, String::new()) };
                match b.close_session(&id) {
                    Ok(()) => (Obs::Done, "Ok".into()),
                    Err(e) => Self::failed(e),
                }
            }
            Step::Acquire(s, n) => {
                let Some(id) = self.session(s) else { return (Obs::Skipped, String::new()) };
                match b.acquire(&id, &self.names.leases[n]) {
                    Ok(a) => {
                        let raw = format!("{a:?}");
                        match a {
                            Acquire::Busy => (Obs::Busy, raw),
                            Acquire::Acquired { token, remaining } => {
                                match remaining {
                                    TermRemaining::Known(d) if !remaining_ok(d) => {
                                        return (
                                            Obs::Broken(format!("acquire: remaining {d:?} not in (0, lease]")),
                                            raw,
                                        )
                                    }
                                    TermRemaining::WithSession if !self.allow.acquire_with_session => {
                                        return (
                                            Obs::Broken("acquire: WithSession from a backend not allowed it".into()),
                                            raw,
                                        )
                                    }
                                    _ => {}
                                }
                                match self.term(n, token, true) {
                                    Ok(term) => (Obs::Acquired { term }, raw),
                                    Err(why) => (Obs::Broken(why), raw),
                                }
                            }
                        }
                    }
                    Err(e) => Self::failed(e),
                }
            }
            Step::Release(s, n, back) => {
                let Some(id) = self.session(s) else { return (Obs::Skipped, String::new()) };
                let seen = &self.terms[n];
                if seen.len() <= back {
                    return (Obs::Skipped, String::new());
                }
                let token = seen[seen.len() - 1 - back];
                match b.release(&id, &self.names.leases[n], token) {
                    Ok(()) => (Obs::Done, format!("Ok (token {token:?})")),
                    Err(e) => Self::failed(e),
                }
            }
            Step::KeepAlive(s) => {
                let Some(id) = self.session(s) else { return (Obs::Skipped, String::new()) };
                match b.keep_alive(&id, LEASE) {
                    Ok(KeepAlive::Expired) => (Obs::Expired, "Expired".into()),
                    Ok(KeepAlive::Alive { remaining, owned, groups, unknown, remaining_before }) => {
                        let raw = format!("Alive {{ remaining: {remaining:?}, owned: {owned:?}, groups: {groups:?} }}");
                        if !unknown.is_empty() {
                            // The runs inject no fault: every lease can be checked.
                            return (Obs::Broken(format!("keep_alive: unknown {unknown:?} with no fault")), raw);
                        }
                        if !remaining_ok(remaining) {
                            return (
                                Obs::Broken(format!("keep_alive: remaining {remaining:?} not in (0, lease]")),
                                raw,
                            );
                        }
                        // The time the renewal found left: what the session's drift meter pairs
                        // with the renewal before (a live session, so some, at most a lease).
                        if let Some(before) = remaining_before.filter(|b| !remaining_ok(*b)) {
                            return (
                                Obs::Broken(format!("keep_alive: remaining_before {before:?} not in (0, lease]")),
                                raw,
                            );
                        }
                        let mut o = BTreeSet::new();
                        for (name, token) in owned {
                            let Some(n) = self.names.leases.iter().position(|l| *l == name) else {
                                return (Obs::Broken(format!("keep_alive lists a lease {name} never used")), raw);
                            };
                            match self.term(n, token, false) {
                                Ok(t) => {
                                    o.insert((n, t));
                                }
                                Err(why) => return (Obs::Broken(why), raw),
                            }
                        }
                        let mut g = BTreeSet::new();
                        for group in groups {
                            let Some(i) = self.names.groups.iter().position(|x| *x == group) else {
                                return (Obs::Broken(format!("keep_alive lists a group {group} never used")), raw);
                            };
                            g.insert(i);
                        }
                        (Obs::Alive { owned: o, groups: g }, raw)
                    }
                    Err(e) => Self::failed(e),
                }
            }
            Step::Holder(n) => match b.holder(&self.names.leases[n]) {
                Ok(None) => (Obs::Holder(None), "None".into()),
                Ok(Some(h)) => {
                    let raw = format!("{h:?}");
                    if !remaining_ok(h.remaining) {
                        return (Obs::Broken(format!("holder: remaining {:?} not in (0, lease]", h.remaining)), raw);
                    }
                    let who = match self.who(&h.session) {
                        Ok(k) => k,
                        Err(why) => return (Obs::Broken(why), raw),
                    };
                    match self.term(n, h.token, false) {
                        Ok(t) => (Obs::Holder(Some((who, t, h.metadata))), raw),
                        Err(why) => (Obs::Broken(why), raw),
                    }
                }
                Err(e) => Self::failed(e),
            },
            Step::Join(s, g) => {
                let Some(id) = self.session(s) else { return (Obs::Skipped, String::new()) };
                match b.join(&id, &self.names.groups[g]) {
                    Ok(()) => (Obs::Done, "Ok".into()),
                    Err(e) => Self::failed(e),
                }
            }
            Step::Leave(s, g) => {
                let Some(id) = self.session(s) else { return (Obs::Skipped, String::new()) };
                match b.leave(&id, &self.names.groups[g]) {
                    Ok(()) => (Obs::Done, "Ok".into()),
                    Err(e) => Self::failed(e),
                }
            }
            Step::Members(g) => match b.members(&self.names.groups[g]) {
                Ok(members) => {
                    let raw = format!("{members:?}");
                    let mut out = Vec::new();
                    for m in &members {
                        match self.who(&m.session) {
                            Ok(k) => out.push((k, m.metadata.clone())),
                            Err(why) => return (Obs::Broken(why), raw),
                        }
                    }
                    // "Sorted by session id": ids differ between backends, so check the order here
                    // and compare the sets.
                    if members.windows(2).any(|w| w[0].session >= w[1].session) {
                        return (Obs::Broken("members not sorted by session id (or repeated)".into()), raw);
                    }
                    out.sort();
                    (Obs::Members(out), raw)
                }
                Err(e) => Self::failed(e),
            },
            Step::Limit(m, permits) => match b.semaphore_limit(&self.names.semaphores[m], permits) {
                Ok(l) => (Obs::Limit(l), format!("{l:?}")),
                Err(e) => Self::failed(e),
            },
        }
    }

    /// Closes every session the run opened (clean-up; answers not compared), then checks that
    /// nothing is left: no holder of any lease, no member of any group.
    fn finish(&mut self) -> Vec<String> {
        let mut leaks = Vec::new();
        for id in self.opened.clone() {
            if let Err(e) = self.backend.close_session(&id) {
                leaks.push(format!("close_session({id}) at the end: {e}"));
            }
        }
        for name in &self.names.leases {
            match self.backend.holder(name) {
                Ok(None) => {}
                Ok(Some(h)) => leaks.push(format!("{name} still held after every session closed: {h:?}")),
                Err(e) => leaks.push(format!("holder({name}) at the end: {e}")),
            }
        }
        for group in &self.names.groups {
            match self.backend.members(group) {
                Ok(m) if m.is_empty() => {}
                Ok(m) => leaks.push(format!("{group} still has members after every session closed: {m:?}")),
                Err(e) => leaks.push(format!("members({group}) at the end: {e}")),
            }
        }
        leaks
    }
}

/// One step of a run: the step, the model's answer, the real backend's, raw and normalised.
#[derive(Debug, Clone)]
pub struct Traced {
    /// The step.
    pub step: Step,
    /// The model's answer.
    pub model: Obs,
    /// The model's raw answer.
    pub model_raw: String,
    /// The real backend's answer.
    pub real: Obs,
    /// The real backend's raw answer.
    pub real_raw: String,
}

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Every step run, up to and including the first mismatch.
    pub trace: Vec<Traced>,
    /// The first mismatch (index in `trace`), if any.
    pub mismatch: Option<usize>,
    /// What the clean-up found left on the real backend (sessions closed, holders, members).
    pub leaks: Vec<String>,
}

impl Outcome {
    /// Whether the run found a difference (or a leak).
    pub fn failed(&self) -> bool {
        self.mismatch.is_some() || !self.leaks.is_empty()
    }
}

/// Runs `steps` on `real` (fresh names) and on a fresh memory backend, call by call; stops at
/// the first mismatch.
pub fn run(real: &dyn LeaseBackend, steps: &[Step]) -> Outcome {
    let names = Names::fresh();
    let model_backend = MemoryBackend::new();
    let mut model = Side::new(&model_backend, Allowances::for_kind("memory"), &names);
    let mut side = Side::new(real, Allowances::for_kind(real.kind()), &names);
    let mut trace = Vec::new();
    let mut mismatch = None;
    for (i, step) in steps.iter().enumerate() {
        let (m, m_raw) = model.run(*step);
        let (r, r_raw) = side.run(*step);
        let differs = m != r;
        trace.push(Traced { step: *step, model: m, model_raw: m_raw, real: r, real_raw: r_raw });
        if differs {
            mismatch = Some(i);
            break;
        }
    }
    model.finish();
    let leaks = side.finish();
    Outcome { trace, mismatch, leaks }
}

/// Drops steps of a failing `steps` while a run of what is left still fails (mismatch or leak);
/// returns the smallest failing sequence found and its outcome.
pub fn shrink(real: &dyn LeaseBackend, steps: &[Step], outcome: Outcome) -> (Vec<Step>, Outcome) {
    let mut best: Vec<Step> = match outcome.mismatch {
        Some(i) => steps[..=i].to_vec(),
        None => steps.to_vec(),
    };
    let mut best_outcome = outcome;
    let mut runs = 0;
    loop {
        let mut progressed = false;
        // Chunks first (halves, quarters, …), then single steps.
        let mut chunk = best.len() / 2;
        while chunk >= 1 {
            let mut at = 0;
            while at < best.len() && runs < 2000 {
                let end = (at + chunk).min(best.len());
                let candidate: Vec<Step> = best[..at].iter().chain(best[end..].iter()).copied().collect();
                runs += 1;
                let o = run(real, &candidate);
                if o.failed() {
                    best = match o.mismatch {
                        Some(i) => candidate[..=i].to_vec(),
                        None => candidate,
                    };
                    best_outcome = o;
                    progressed = true;
                } else {
                    at += chunk;
                }
            }
            chunk /= 2;
        }
        if !progressed || runs >= 2000 {
            return (best, best_outcome);
        }
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, t) in self.trace.iter().enumerate() {
            let mark = if Some(i) == self.mismatch { ">>" } else { "  " };
            writeln!(f, "{mark} {i:3} {:?}", t.step)?;
            if t.model == t.real {
                writeln!(f, "         both:  {:?}   (model {} | real {})", t.model, t.model_raw, t.real_raw)?;
            } else {
                writeln!(f, "         model: {:?}   ({})", t.model, t.model_raw)?;
                writeln!(f, "         real:  {:?}   ({})", t.real, t.real_raw)?;
            }
        }
        for l in &self.leaks {
            writeln!(f, "   leak: {l}")?;
        }
        Ok(())
    }
}

/// `SIMBA_DIFF_SEED` (replay from this seed; default random), `SIMBA_DIFF_CASES` (sequences;
/// default `default_cases`, or 1 with a seed), `SIMBA_DIFF_STEPS` (steps per sequence, default 40).
pub fn settings(default_cases: usize) -> (u64, usize, usize) {
    let seed_var = std::env::var("SIMBA_DIFF_SEED").ok().filter(|v| !v.is_empty());
    let seed = seed_var
        .as_deref()
        .map(|v| v.parse().unwrap_or_else(|e| panic!("SIMBA_DIFF_SEED={v}: {e}")))
        .unwrap_or_else(rand::random::<u32>) as u64;
    let default_cases = if seed_var.is_some() { 1 } else { default_cases };
    let cases = std::env::var("SIMBA_DIFF_CASES")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().unwrap_or_else(|e| panic!("SIMBA_DIFF_CASES={v}: {e}")))
        .unwrap_or(default_cases);
    let steps = std::env::var("SIMBA_DIFF_STEPS")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| v.parse().unwrap_or_else(|e| panic!("SIMBA_DIFF_STEPS={v}: {e}")))
        .unwrap_or(40);
    (seed, cases, steps)
}

/// Runs `cases` sequences (seeds `seed`, `seed + 1`, …) on `real` against the model; on the first
/// failing one, shrinks it and panics with the seed, the shrunk sequence and both answers.
pub fn check(label: &str, real: Arc<dyn LeaseBackend>, default_cases: usize) {
    let (seed, cases, len) = settings(default_cases);
    let started = std::time::Instant::now();
    let mut steps_run = 0;
    for case in 0..cases as u64 {
        let s = seed + case;
        let steps = generate(s, len);
        let outcome = run(real.as_ref(), &steps);
        steps_run += outcome.trace.len();
        if outcome.failed() {
            let full = outcome.to_string();
            let (shrunk, shrunk_outcome) = shrink(real.as_ref(), &steps, outcome);
            panic!(
                "differential {label}: the backend differs from the model with SIMBA_DIFF_SEED={s} \
                 (SIMBA_DIFF_STEPS={len}); replay: SIMBA_DIFF_SEED={s} SIMBA_DIFF_STEPS={len} cargo test \
                 --all-features --test differential {label}\n\
                 shrunk to {} steps: {shrunk:?}\n{shrunk_outcome}\nunshrunk run:\n{full}",
                shrunk.len()
            );
        }
    }
    eprintln!(
        "differential {label}: {cases} sequences of {len} steps from seed {seed} ({steps_run} steps) agree with \
         the model in {:?}",
        started.elapsed()
    );
}
