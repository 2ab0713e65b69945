//! What a backend holds right now ([`LeaseBackend::list`], `simba status`): held leases with their
//! live holders, groups with their live members and live sessions, by name prefix, capped, and
//! the same answers as the memory backend (the reference model) for the same calls.

use super::*;
use crate::backend::{ListRequest, Listing, MAX_LIST_LIMIT};
use crate::backends::memory::MemoryBackend;

/// A backend that does not claim `list` answers `Unsupported`, naming itself.
fn declines(h: &Harness) {
    let request = ListRequest::new("", 1).unwrap_or_else(|e| panic!("TCK bug: {e}"));
    match h.backend().list(&request) {
        Err(e) if e.kind() == ErrorKind::Unsupported => {
            assert!(e.to_string().contains(h.backend().kind()), "the error does not name the backend: {e}")
        }
        other => panic!(
            "{}: capabilities().list is false, but list answered {other:?} (claim it, or answer Unsupported)",
            h.backend().kind()
        ),
    }
}

/// `list` of `prefix` with `limit`, which must succeed.
fn list(b: &dyn LeaseBackend, prefix: &str, limit: usize) -> Listing {
    let request = match ListRequest::new(prefix, limit) {
        Ok(r) => r,
        Err(e) => panic!("TCK bug: {e}"),
    };
    match b.list(&request) {
        Ok(l) => l,
        Err(e) => panic!("{}: list of {prefix:?}: {}", b.kind(), crate::error::display_chain(&e)),
    }
}

/// A listing with the sessions' ids replaced by their metadata (unique per case; members and
/// sessions then sorted by it, as two backends' ids differ), names without the case's prefix, and
/// only the sessions whose metadata starts with `tag` (other tests' may be live on a shared
/// server): (leases: name → holder, groups: name → members, sessions).
type Shape = (Vec<(String, String)>, Vec<(String, Vec<String>)>, Vec<String>);

fn shape(l: &Listing, prefix: &str, tag: &str) -> Shape {
    let strip = |n: &Name| n.as_str().strip_prefix(prefix).unwrap_or(n.as_str()).to_string();
    let sorted = |mut v: Vec<String>| {
        v.sort();
        v
    };
    let leases = l.leases.iter().map(|x| (strip(&x.name), x.holder.metadata.clone())).collect();
    let groups = l
        .groups
        .iter()
        .map(|g| (strip(&g.name), sorted(g.members.iter().map(|m| m.metadata.clone()).collect())))
        .collect();
    let sessions = l.sessions.iter().filter(|s| s.metadata.starts_with(tag)).map(|s| s.metadata.clone()).collect();
    (leases, groups, sorted(sessions))
}

/// The calls of [`listing_matches_the_model`], made on every backend of `on` step by step: three
/// sessions (metadata `<tag>a`, `b`, `c`), leases and memberships inside and just outside the
/// prefix, a released lease, a group left, and `c` left to expire while `a` and `b` are kept
/// alive. Returns each backend's (a, b).
fn scenario(h: &Harness, on: &[&dyn LeaseBackend], prefix: &str, tag: &str) -> Vec<(SessionId, SessionId)> {
    let name = |n: &str| Name::new(n).unwrap_or_else(|e| panic!("TCK bug: {e}"));
    let inside = |suffix: &str| name(&format!("{prefix}{suffix}"));
    // Just outside: the prefix without its trailing '-', and that followed by '.', which is
    // exactly the smallest string above every name with the prefix ('.' follows '-').
    let outside = prefix.trim_end_matches('-');
    let outside = [name(outside), name(&format!("{outside}."))];
    let mut live = Vec::new();
    for b in on {
        let fail = |what: &str, e: crate::Error| -> ! {
            panic!("{}: {what}: {} (`scripts/services up`?)", b.kind(), crate::error::display_chain(&e))
        };
        let open =
            |m: &str| b.open_session(h.lease(), &format!("{tag}{m}")).unwrap_or_else(|e| fail("open_session", e)).id;
        let (a, s_b, c) = (open("a"), open("b"), open("c"));
        for (s, n) in [(&a, "a1"), (&a, "a:2"), (&s_b, "az"), (&c, "m"), (&s_b, "free")] {
            acquired(b.acquire(s, &inside(n)), n);
        }
        let Some(token) = b.holder(&inside("free")).unwrap_or_else(|e| fail("holder", e)).map(|x| x.token) else {
            panic!("{}: the holder of a lease just acquired is missing", b.kind())
        };
        b.release(&s_b, &inside("free"), token).unwrap_or_else(|e| fail("release", e));
        for n in &outside {
            acquired(b.acquire(&a, n), n.as_str());
            b.join(&a, n).unwrap_or_else(|e| fail("join", e));
        }
        for (s, g) in [(&a, "g"), (&s_b, "g"), (&c, "g"), (&c, "gone"), (&s_b, "left")] {
            b.join(s, &inside(g)).unwrap_or_else(|e| fail("join", e));
        }
        b.leave(&s_b, &inside("left")).unwrap_or_else(|e| fail("leave", e));
        live.push((a, s_b));
    }
    let end = Instant::now() + h.past_expiry();
    while Instant::now() < end {
        for (b, (a, s_b)) in on.iter().zip(&live) {
            for s in [a, s_b] {
                if !matches!(b.keep_alive(s, h.lease()), Ok(KeepAlive::Alive { .. })) {
                    panic!("{}: a session kept alive expired", b.kind());
                }
            }
        }
        thread::sleep(h.options.renew_interval().min(end.saturating_duration_since(Instant::now())));
    }
    live
}

/// The same calls on the backend and on the memory backend list the same: the held leases in
/// the prefix with their holders (not a released one, not one whose holder expired, not a name
/// just outside the prefix), the groups with live members (not a group whose only member
/// expired, not one left), and the live sessions (not an expired one); each section sorted,
/// holders' tokens valid, time left within the lease duration.
pub(super) fn listing_matches_the_model(h: &Harness, claimed: bool) {
    if !claimed {
        return declines(h);
    }
    let prefix = format!("{}-ls-", h.prefix);
    let tag = format!("{}/", h.prefix);
    let model = MemoryBackend::default();
    let live = scenario(h, &[&**h.backend(), &model], &prefix, &tag);
    let real = list(&**h.backend(), &prefix, MAX_LIST_LIMIT);
    let expected = list(&model, &prefix, MAX_LIST_LIMIT);
    let kind = h.backend().kind();
    let got = shape(&real, &prefix, &tag);
    assert_eq!(got, shape(&expected, &prefix, &tag), "{kind}: the listing differs from the memory backend's");
    // And what the model answers, spelled out; the order by session id checked on the listing.
    let (a, b) = live[0].clone();
    let ab = vec![format!("{tag}a"), format!("{tag}b")];
    let spelled: Shape = (
        vec![("a1".into(), format!("{tag}a")), ("a:2".into(), format!("{tag}a")), ("az".into(), format!("{tag}b"))],
        vec![("g".into(), ab.clone())],
        ab,
    );
    let mut ids = [a.clone(), b.clone()];
    ids.sort();
    let ours = |ids: Vec<SessionId>| ids.into_iter().filter(|id| *id == a || *id == b).collect::<Vec<_>>();
    assert_eq!(ours(real.sessions.iter().map(|s| s.id.clone()).collect()), ids, "{kind}: sessions not sorted by id");
    for g in &real.groups {
        assert_eq!(ours(g.members.iter().map(|m| m.session.clone()).collect()), ids, "{kind}: members of {}", g.name);
    }
    assert_eq!(got, spelled, "{kind}: the listing of {prefix:?}");
    assert!(!real.truncated.any(), "{kind}: nothing was cut at {MAX_LIST_LIMIT}: {:?}", real.truncated);
    for l in &real.leases {
        let holder = l.holder.session.clone();
        assert!(holder == a || holder == b, "{l:?}");
        assert!(!l.holder.remaining.is_zero() && l.holder.remaining <= h.lease(), "{l:?}");
        let owned = alive(h, &holder);
        assert!(owned.contains(&(l.name.clone(), l.holder.token)), "{l:?} is not among its session's leases {owned:?}");
    }
    for s in real.sessions.iter().filter(|s| s.metadata.starts_with(&tag)) {
        assert!(!s.remaining.is_zero() && s.remaining <= h.lease(), "{s:?}");
    }
    for sid in [&a, &b] {
        let _ = h.backend().close_session(sid);
    }
}

/// At most `limit` of each section (and of a group's members), sorted, saying which sections
/// were cut; a limit that fits everything cuts nothing.
pub(super) fn listing_is_capped_and_says_so(h: &Harness, claimed: bool) {
    if !claimed {
        return declines(h);
    }
    let prefix = format!("{}-cap-", h.prefix);
    let tag = format!("{}/", h.prefix);
    let sessions: Vec<SessionId> = (0..3).map(|i| h.raw_session(&format!("{tag}{i}"))).collect();
    let name = |n: String| Name::new(n).unwrap_or_else(|e| panic!("TCK bug: {e}"));
    for (i, s) in sessions.iter().enumerate() {
        let lease = name(format!("{prefix}l{i}"));
        acquired(h.backend().acquire(s, &lease), lease.as_str());
        let group = name(format!("{prefix}g{i}"));
        for member in &sessions {
            if let Err(e) = h.backend().join(member, &group) {
                panic!("{}: join {group}: {e}", h.backend().kind());
            }
        }
    }
    let all = list(&**h.backend(), &prefix, 3);
    assert_eq!((all.leases.len(), all.groups.len()), (3, 3), "{all:?}");
    assert!(all.groups.iter().all(|g| g.members.len() == 3), "{all:?}");
    assert!(!all.truncated.leases && !all.truncated.groups, "nothing to cut at 3: {:?}", all.truncated);
    let cut = list(&**h.backend(), &prefix, 2);
    assert_eq!((cut.leases.len(), cut.groups.len()), (2, 2), "{cut:?}");
    assert!(cut.truncated.leases && cut.truncated.groups && cut.truncated.sessions, "{:?}", cut.truncated);
    assert!(cut.groups.iter().all(|g| g.members.len() == 2), "{cut:?}");
    assert!(cut.leases.windows(2).all(|w| w[0].name < w[1].name), "leases not sorted: {cut:?}");
    assert!(cut.groups.windows(2).all(|w| w[0].name < w[1].name), "groups not sorted: {cut:?}");
    assert!(cut.sessions.windows(2).all(|w| w[0].id < w[1].id), "sessions not sorted: {cut:?}");
    for l in &cut.leases {
        assert!(
            all.leases.iter().any(|x| x.name == l.name && x.holder.token == l.holder.token),
            "{l:?}: not in {all:?}"
        );
    }
    let one = list(&**h.backend(), &prefix, 1);
    assert_eq!(one.sessions.len(), 1, "{one:?}");
    assert!(one.truncated.sessions, "three sessions are live: {:?}", one.truncated);
    for s in &sessions {
        let _ = h.backend().close_session(s);
    }
    let gone = list(&**h.backend(), &prefix, 3);
    assert!(gone.leases.is_empty() && gone.groups.is_empty(), "after every close: {gone:?}");
}
