//! Renewal follow-ups grouped by node: one `renew_slot.lua` call per node in use instead of one
//! per slot. The port groups the slots by the node that serves them
//! ([`RedisScripting::group_by_node`](super::super::port::RedisScripting::group_by_node)); each
//! call names the keys of its first slot (they route it) and passes the other slots' keys as
//! arguments, which Redis 7 lets a script with `allow-cross-slot-keys` touch while they are local.
//! A slot the node no longer serves (the slot map changed since the grouping), or that failed
//! there for any other reason, is reported by the call and renewed alone, as before batching.
//!
//! Each call still carries the session's remaining less the time since the session call
//! returned, as of its sending, and every lease is still extended by its own node's clock.

use std::time::{Duration, Instant};

use redis::Value;

use super::super::port::ScriptCall;
use super::super::reply::{array, string, unexpected};
use super::super::scripts::{keys, SCRIPTS};
use super::super::{ms, Inner};
use super::SlotWork;
use crate::error::{Error, Result};
use crate::types::SessionId;

/// Runs the follow-ups of `work` and returns each slot's `{leases, released, groups}` reply, or
/// the error of its call, in the order of `work`. `carry()` gives what a call carries when it is
/// built (an `Err` is that call's outcome: it is not sent). A reply that arrived but cannot be read
/// is an `Err` for the whole renewal.
pub(super) fn run(
    inner: &Inner,
    sid: &SessionId,
    work: &[SlotWork],
    carry: &mut dyn FnMut() -> Result<Duration>,
    deadline: Instant,
) -> Result<Vec<Result<Value>>> {
    let script = SCRIPTS.renew_slot.name();
    let slots: Vec<u16> = work.iter().map(|w| w.slot).collect();
    let groups = checked(inner.scripting.group_by_node(&slots, deadline), work.len());
    let mut out: Vec<Option<Result<Value>>> = (0..work.len()).map(|_| None).collect();
    let replies = inner.scripting.eval_each(
        groups.len(),
        &mut |g| Ok(call(sid, groups[g].iter().map(|i| &work[*i]), carry()?)),
        deadline,
    );
    let mut alone = Vec::new();
    for (group, reply) in groups.iter().zip(replies) {
        match reply {
            Ok(v) => {
                let entries = array(&v).filter(|e| e.len() == group.len()).ok_or_else(|| unexpected(script, &v))?;
                for (i, entry) in group.iter().zip(entries) {
                    match entry {
                        Value::Array(_) => out[*i] = Some(Ok(entry.clone())),
                        // Only a call for several slots reports a slot's failure as text.
                        _ if group.len() > 1 => {
                            let text = string(entry).ok_or_else(|| unexpected(script, &v))?;
                            log::debug!(
                                "session {sid}: renewal of slot {} on its node failed ({text}); alone",
                                slots[*i]
                            );
                            alone.push(*i);
                        }
                        _ => return Err(unexpected(script, &v)),
                    }
                }
            }
            Err(e) => {
                let message = crate::display_chain(&e);
                for i in group {
                    out[*i] = Some(Err(Error::new(e.kind(), message.clone())));
                }
            }
        }
    }
    if !alone.is_empty() {
        let replies =
            inner.scripting.eval_each(alone.len(), &mut |k| Ok(call(sid, [&work[alone[k]]], carry()?)), deadline);
        for (i, reply) in alone.iter().zip(replies) {
            out[*i] = Some(match reply {
                Ok(v) => match array(&v) {
                    Some([entry @ Value::Array(_)]) => Ok(entry.clone()),
                    _ => return Err(unexpected(script, &v)),
                },
                Err(e) => Err(e),
            });
        }
    }
    out.into_iter().map(|r| r.ok_or_else(|| Error::backend("redis cluster: a renewal follow-up was lost"))).collect()
}

/// `groups` if they name every index below `n` exactly once, else one group per index (a
/// custom `RedisScripting` that groups wrongly costs calls, never a lease).
fn checked(groups: Vec<Vec<usize>>, n: usize) -> Vec<Vec<usize>> {
    let mut seen = vec![false; n];
    let valid = groups.iter().flatten().all(|i| *i < n && !std::mem::replace(&mut seen[*i], true))
        && seen.iter().all(|s| *s)
        && groups.iter().all(|g| !g.is_empty());
    if valid {
        groups
    } else {
        log::warn!("redis: group_by_node did not name every slot exactly once; renewing each slot alone");
        (0..n).map(|i| vec![i]).collect()
    }
}

/// The keys of one slot's work, in the order `renew_slot.lua` reads them.
fn slot_keys(w: &SlotWork) -> impl Iterator<Item = String> + '_ {
    let renew = w.renew.iter().map(|n| keys::lease(n.as_str()));
    let release = w.release.iter().map(|(n, _)| keys::lease(n.as_str()));
    renew.chain(release).chain(w.groups.iter().map(|g| keys::group(g.as_str())))
}

/// One `renew_slot.lua` call for `slots` (all served by one node): renews each slot's leases and
/// groups up to that node's now + `carry` and releases its abandoned terms. The first slot's keys
/// are the call's keys; the others' follow their counts and tokens in the arguments.
fn call<'a, 'w>(sid: &SessionId, slots: impl IntoIterator<Item = &'w SlotWork>, carry: Duration) -> ScriptCall<'a> {
    let mut keys_ = Vec::new();
    let mut args = vec![sid.to_string(), ms(carry), String::new()];
    let mut n = 0;
    for w in slots {
        args.extend([w.renew.len(), w.release.len(), w.groups.len()].map(|c| c.to_string()));
        args.extend(w.release.iter().map(|(_, t)| t.to_string()));
        if n == 0 {
            keys_.extend(slot_keys(w));
        } else {
            args.extend(slot_keys(w));
        }
        n += 1;
    }
    args[2] = n.to_string();
    ScriptCall { script: &SCRIPTS.renew_slot, keys: keys_, args }
}

#[cfg(test)]
mod tests {
    use super::checked;

    #[test]
    fn wrong_groupings_fall_back_to_one_slot_per_call() {
        let alone = vec![vec![0], vec![1], vec![2]];
        assert_eq!(checked(vec![vec![2, 0], vec![1]], 3), vec![vec![2, 0], vec![1]]);
        assert_eq!(checked(vec![vec![0, 1]], 3), alone, "an index missing");
        assert_eq!(checked(vec![vec![0, 1], vec![1, 2]], 3), alone, "an index twice");
        assert_eq!(checked(vec![vec![0, 1, 2, 3]], 3), alone, "an index out of range");
        assert_eq!(checked(vec![vec![0, 1, 2], vec![]], 3), alone, "an empty group");
        assert_eq!(checked(vec![], 0), Vec::<Vec<usize>>::new());
    }
}
