//! The etcd backend outside the TCK: URL errors before any I/O, TTL rounding and refusal, and
//! permanent errors (TLS refused) failing at once in the server's or the TLS stack's words.
//! Also `list`'s group order where key order and name order differ, and calls from inside a
//! tokio runtime and from more threads than the backend drives connections for, and a corrupt
//! semaphore limit.
//! Needs `scripts/services up etcd etcd-tls` for the tests that connect.
#![cfg(feature = "etcd")]

mod support;

use std::time::{Duration, Instant};

use simba::backend::{KeepAlive, LeaseBackend};
use simba::backends::etcd::{EtcdBackend, EtcdOptions};
use simba::ErrorKind;

fn url() -> String {
    support::env_or("SIMBA_TEST_ETCD_URL", "etcd://127.0.0.1:2379/simba-test")
}

fn backend() -> EtcdBackend {
    let url = url();
    let hosts = url.trim_start_matches("etcd://").split('/').next().unwrap_or_default().to_string();
    support::require_tcp("etcd", hosts.split(',').next().unwrap_or_default());
    EtcdBackend::from_url(&url, EtcdOptions::default())
        .unwrap_or_else(|e| panic!("cannot connect to etcd at {url}: {e} (run `scripts/services up etcd`)"))
}

#[test]
fn bad_urls_fail_before_any_io_saying_what_is_allowed() {
    for (url, expect) in [
        ("etcd://127.0.0.1:2379/simba?tls_ca=/x", "unknown etcd URL parameter"),
        ("etcd://127.0.0.1:2379/simba?ca=/x", "use etcds://"),
        ("etcds://127.0.0.1:2379/simba?cert=/x", "cert and key go together"),
        ("etcd://user@127.0.0.1:2379/simba", "needs a password"),
        ("etcd://127.0.0.1:2379/a//b", "invalid etcd key prefix"),
        ("etcd://127.0.0.1:2379/a/../b", "invalid etcd key prefix"),
        ("etcds://127.0.0.1:2379/simba?ca=/nonexistent/ca.pem", "cannot read the etcd TLS CA file /nonexistent/ca.pem"),
        ("etcd://,127.0.0.1:2379/simba", "empty host"),
    ] {
        let t0 = Instant::now();
        // Port 9 (discard) is never an etcd: an error here must come from parsing, not I/O.
        let err = EtcdBackend::from_url(url, EtcdOptions::default()).expect_err(url);
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{url}: {err}");
        assert!(err.to_string().contains(expect), "{url}: {err}");
        assert!(t0.elapsed() < Duration::from_secs(1), "{url} took {:?}", t0.elapsed());
    }
}

#[test]
fn the_url_sets_members_prefix_and_the_user_is_not_printed() {
    let b = backend();
    assert_eq!(b.prefix(), "/simba-test/");
    let err =
        EtcdBackend::from_url("etcd://root:s3cret-pw@127.0.0.1:1/x", EtcdOptions::default()).expect_err("no server");
    assert!(!err.to_string().contains("s3cret-pw"), "{err}");
}

#[test]
fn ttls_are_rounded_up_to_whole_seconds_and_remaining_never_exceeds_the_lease_duration() {
    let b = backend();
    let grant = b.open_session(Duration::from_millis(1500), "m").unwrap();
    assert!(grant.remaining <= Duration::from_millis(1500) && !grant.remaining.is_zero(), "{grant:?}");
    // The server holds it for the rounded-up 2 s: still alive after 1.6 s without renewal.
    std::thread::sleep(Duration::from_millis(1600));
    match b.keep_alive(&grant.id, Duration::from_millis(1500)).unwrap() {
        KeepAlive::Alive { remaining, .. } => assert_eq!(remaining, Duration::from_millis(1500)),
        KeepAlive::Expired => panic!("the 2 s etcd lease of a 1.5 s session expired after 1.6 s"),
    }
    b.close_session(&grant.id).unwrap();
    assert_eq!(b.keep_alive(&grant.id, Duration::from_millis(1500)).unwrap(), KeepAlive::Expired);
}

#[test]
fn a_lease_duration_etcd_cannot_grant_is_refused_clearly() {
    let b = backend();
    let err = b.open_session(Duration::from_secs(10_000_000_000), "m").expect_err("too long");
    assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    assert!(err.to_string().contains("1 to 9000000000 whole seconds"), "{err}");
    let err = b.open_session(Duration::MAX, "m").expect_err("forever");
    assert!(err.to_string().contains("whole seconds"), "{err}");
}

#[test]
fn a_key_deleted_behind_the_session_is_lost_at_the_next_renewal() {
    let b = backend();
    let s = b.open_session(Duration::from_secs(5), "m").unwrap().id;
    let name = simba::Name::new(format!("behind-{:x}", rand_u64())).unwrap();
    let token = b.acquire(&s, &name).unwrap().token().unwrap();
    match b.keep_alive(&s, Duration::from_secs(5)).unwrap() {
        KeepAlive::Alive { owned, .. } => assert_eq!(owned, vec![(name.clone(), token)]),
        KeepAlive::Expired => panic!("expired"),
    }
    let out = std::process::Command::new("etcdctl")
        .env("ETCDCTL_API", "3")
        .args(["--endpoints", "127.0.0.1:2379", "del", &format!("/simba-test/l/{name}")])
        .output()
        .expect("etcdctl (apt-get install etcd-client)");
    assert!(out.status.success(), "{out:?}");
    match b.keep_alive(&s, Duration::from_secs(5)).unwrap() {
        KeepAlive::Alive { owned, .. } => assert!(owned.is_empty(), "{owned:?}"),
        KeepAlive::Expired => panic!("expired"),
    }
    b.close_session(&s).unwrap();
}

#[test]
fn tls_against_the_wrong_ca_fails_at_once_in_the_tls_stacks_words() {
    let dir = support::tls::dir();
    support::require_tcp("the TLS-only etcd", "127.0.0.1:2389");
    let t0 = Instant::now();
    let url =
        format!("etcds://127.0.0.1:2389/simba-test?ca={dir}/other-ca.pem&cert={dir}/client.pem&key={dir}/client.key");
    let err = EtcdBackend::from_url(&url, EtcdOptions::default()).expect_err("wrong CA");
    let msg = err.to_string();
    assert!(msg.contains("invalid peer certificate: UnknownIssuer"), "{msg}");
    assert_eq!(err.kind(), ErrorKind::Backend, "a certificate the TLS stack rejects is permanent: {msg}");
    assert!(t0.elapsed() < Duration::from_secs(5), "took {:?}: {msg}", t0.elapsed());
    // Without a client certificate the member refuses the handshake.
    let url = format!("etcds://127.0.0.1:2389/simba-test?ca={dir}/ca.pem");
    let err = EtcdBackend::from_url(&url, EtcdOptions::default()).expect_err("no client certificate");
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}: {err}", t0.elapsed());
    // Plain text against the TLS-only member.
    let err = EtcdBackend::from_url("etcd://127.0.0.1:2389/simba-test", EtcdOptions::default()).expect_err("plaintext");
    assert!(t0.elapsed() < Duration::from_secs(15), "took {:?}: {err}", t0.elapsed());
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(std::process::id() as u64);
    h.finish()
}

/// Found by tests/differential.rs: an acquire of a held lease by a closed session answered Busy
/// (the transaction's "already there" branch wrote nothing, so etcd never checked the lease).
#[test]
fn an_expired_session_acquiring_a_held_lease_is_told_it_expired() {
    let b = backend();
    let holder = b.open_session(Duration::from_secs(5), "h").unwrap().id;
    let late = b.open_session(Duration::from_secs(5), "l").unwrap().id;
    let name = simba::Name::new(format!("expired-{:x}", rand_u64())).unwrap();
    assert!(b.acquire(&holder, &name).unwrap().token().is_some());
    b.close_session(&late).unwrap();
    let err = b.acquire(&late, &name).expect_err("closed session");
    assert_eq!(err.kind(), ErrorKind::SessionExpired, "{err}");
    let err = b.join(&late, &name).expect_err("closed session");
    assert_eq!(err.kind(), ErrorKind::SessionExpired, "{err}");
    b.close_session(&holder).unwrap();
}

/// Group `x` sorts before `x-1` and `x.2` by name, but after them by key (`g/x-1/…`, `g/x.2/…`,
/// `g/x/…`: `-` and `.` sort before `/`): a capped listing still gives the first groups by name.
#[test]
fn a_capped_listing_gives_the_first_groups_by_name() {
    use simba::backend::ListRequest;
    let b = backend();
    let s = b.open_session(Duration::from_secs(10), "m").unwrap().id;
    let p = format!("ord{:x}-", rand_u64() ^ Instant::now().elapsed().as_nanos() as u64);
    let x = format!("{p}x");
    for g in [format!("{x}-1"), format!("{x}.2"), x.clone()] {
        b.join(&s, &simba::Name::new(g).unwrap()).unwrap();
    }
    let names = |limit: usize| {
        let l = b.list(&ListRequest::new(&x, limit).unwrap()).unwrap();
        (l.groups.iter().map(|g| g.name.to_string()).collect::<Vec<_>>(), l.truncated.groups)
    };
    assert_eq!(names(1), (vec![x.clone()], true));
    assert_eq!(names(2), (vec![x.clone(), format!("{x}-1")], true));
    assert_eq!(names(3), (vec![x.clone(), format!("{x}-1"), format!("{x}.2")], false));
    b.close_session(&s).unwrap();
}

/// Calls made from inside a tokio runtime, where the backend cannot drive a connection of its own
/// on the caller's thread (`block_on` would panic there), run on the backend's runtime and work;
/// so do calls from more threads at once than the backend has caller-driven slots (4), and every
/// one of them reads the same holder (src/backends/etcd/slots.rs).
#[test]
fn calls_from_inside_a_tokio_runtime_and_beyond_the_slots_work() {
    let b = std::sync::Arc::new(backend());
    let name = simba::Name::new(format!("in-runtime-{:x}", rand_u64())).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let (sid, token) = rt.block_on(async {
        let sid = b.open_session(Duration::from_secs(5), "in a runtime").unwrap().id;
        let token = b.acquire(&sid, &name).unwrap().token().expect("a free name");
        (sid, token)
    });
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let (b, name) = (b.clone(), name.clone());
            std::thread::spawn(move || (0..20).map(|_| b.holder(&name).unwrap()).collect::<Vec<_>>())
        })
        .collect();
    for t in threads {
        for h in t.join().unwrap() {
            let h = h.expect("held");
            assert_eq!((&h.session, h.token), (&sid, token));
        }
    }
    rt.block_on(async { b.keep_alive(&sid, Duration::from_secs(5)).unwrap() });
    b.close_session(&sid).unwrap();
    assert!(b.holder(&name).unwrap().is_none(), "closing the session freed the name");
}

/// A semaphore limit in etcd that simba did not write is refused in words that say so: not a
/// number by the backend, out of range by the semaphore (one check of the range, the caller's: a
/// semaphore's or a partition set's).
#[test]
fn a_corrupt_semaphore_limit_is_refused_clearly() {
    let b = std::sync::Arc::new(backend());
    let member = url().trim_start_matches("etcd://").split(['/', ',']).next().unwrap_or_default().to_string();
    let name = simba::Name::new(format!("corrupt-limit-{:x}", rand_u64())).unwrap();
    let key = format!("{}sem/{name}", b.prefix());
    support::etcd::etcdctl_ok(&member, &["put", &key, "many"]);
    let e = b.semaphore_limit(&name, None).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Backend);
    assert!(e.to_string().contains("corrupt limit \"many\""), "{e}");
    support::etcd::etcdctl_ok(&member, &["put", &key, "5000"]);
    assert_eq!(b.semaphore_limit(&name, None).unwrap(), Some(5000), "the range is the caller's to check");
    let session = simba::Session::open(b.clone(), simba::SessionOptions::default()).unwrap();
    let e = session.semaphore(&name, 3).unwrap_err();
    assert!(e.to_string().contains("is 5000, which is no valid limit (1 to 1000)"), "{e}");
    session.close().unwrap();
    support::etcd::etcdctl_ok(&member, &["del", &key]);
}
