//! TLS mismatches with etcd fail at once, permanently (`Backend`), in the TLS stack's own words
//! rather than tonic's bare "transport error": TLS to a plain member, a CA that did not sign the
//! member's certificate, no client certificate for a member that requires one, and plain text to
//! a TLS-only member. The members are the shared ones of `scripts/services` (plain on 2379,
//! TLS-only with client certificates on 2389, PKI in `SIMBA_TEST_TLS_DIR`).
#![cfg(feature = "etcd")]

mod support;

use std::time::{Duration, Instant};

use simba::backends::etcd::{EtcdBackend, EtcdOptions};
use simba::ErrorKind;

const PLAIN: &str = "127.0.0.1:2379";
const TLS: &str = "127.0.0.1:2389";

/// Connects to `url` expecting a permanent failure within a second or two; its message.
fn refused(url: &str) -> String {
    let t = Instant::now();
    let opts = EtcdOptions::default().connection_timeout(Duration::from_secs(5));
    let err = EtcdBackend::from_url(url, opts).expect_err("a TLS mismatch must not connect");
    let took = t.elapsed();
    let text = err.to_string();
    assert_eq!(err.kind(), ErrorKind::Backend, "permanent: {text}");
    assert!(took < Duration::from_secs(3), "not at once: {took:?} ({text})");
    assert_ne!(text.trim_end(), "transport error", "{text}");
    text
}

fn pki(file: &str) -> String {
    support::tls::file(file)
}

#[test]
fn tls_to_a_plain_member_says_the_member_does_not_speak_tls() {
    support::require_tcp("etcd", PLAIN);
    let text = refused(&format!("etcds://{PLAIN}/simba-test?ca={}", pki("ca.pem")));
    assert!(text.contains("failed in the TLS handshake") && text.contains("then use etcd://"), "{text}");
}

#[test]
fn an_unknown_ca_says_the_certificate_is_not_trusted() {
    support::require_tcp("the TLS-only etcd", TLS);
    let text = refused(&format!(
        "etcds://{TLS}/simba-test?ca={}&cert={}&key={}",
        pki("other-ca.pem"),
        pki("client.pem"),
        pki("client.key")
    ));
    assert!(text.contains("invalid peer certificate") && text.contains("UnknownIssuer"), "{text}");
}

#[test]
fn no_client_certificate_says_the_member_requires_one() {
    support::require_tcp("the TLS-only etcd", TLS);
    let text = refused(&format!("etcds://{TLS}/simba-test?ca={}", pki("ca.pem")));
    // The member's alert (BadCertificate) when it arrives in time, else the reason told.
    assert!(
        text.contains("received fatal alert: BadCertificate") || text.contains("no client certificate was given"),
        "{text}"
    );
}

#[test]
fn plain_text_to_a_tls_member_says_the_member_wants_tls() {
    support::require_tcp("the TLS-only etcd", TLS);
    let text = refused(&format!("etcd://{TLS}/simba-test"));
    assert!(text.contains("a member that serves TLS only does that (then use etcds://)"), "{text}");
}
