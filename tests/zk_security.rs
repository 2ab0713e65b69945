//! ZooKeeper transport and authentication against private servers configured for them: TLS on the
//! `secureClientPort` (Netty) with and without required client certificates, and SASL DIGEST-MD5
//! (JAAS users). The shared server of `scripts/services` stays plain.
#![cfg(feature = "zookeeper")]

mod support;

use std::error::Error as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use simba::backend::{CheckStatus, LeaseBackend};
use simba::backends::zookeeper::{AclMode, ZookeeperBackend, ZookeeperOptions, ZookeeperSasl, ZookeeperTls};
use simba::{ErrorKind, Session, SessionOptions};
use support::zk::{PrivateZk, TestPki, ZkConfig};

fn session_options() -> SessionOptions {
    SessionOptions::builder()
        .lease_duration(Duration::from_secs(2))
        .renew_interval(Duration::from_millis(500))
        .build()
        .unwrap()
}

fn pki() -> TestPki {
    let dir = std::env::temp_dir().join(support::unique("simba-zk-pki"));
    std::fs::create_dir_all(&dir).unwrap();
    TestPki::create(&dir)
}

/// Opens a session on `backend`, takes a lease, sees it from a second session, releases it.
fn lease_round_trip(backend: ZookeeperBackend) {
    let backend = Arc::new(backend);
    let a = Session::open(backend.clone(), session_options()).unwrap();
    let b = Session::open(backend.clone(), session_options()).unwrap();
    let name = support::unique("secured");
    let lease = a.try_lock(&name).unwrap().expect("a free lease");
    let t1 = lease.token().unwrap();
    assert!(b.try_lock(&name).unwrap().is_none(), "the lease is held");
    lease.release().unwrap();
    let t2 = b.lock_timeout(&name, Duration::from_secs(10)).unwrap().expect("taken over after the release");
    assert!(t2.token().unwrap() > t1, "fencing tokens grow across terms");
    t2.release().unwrap();
    a.close().unwrap();
    b.close().unwrap();
}

fn short(opts: ZookeeperOptions) -> ZookeeperOptions {
    opts.connection_timeout(Duration::from_secs(3)).root("/simba-security")
}

#[test]
#[serial_test::serial(zookeeper_private)]
fn tls_with_required_client_certificate() {
    let pki = pki();
    let zk = PrivateZk::start_with("simba-zk-tls", ZkConfig { tls: Some(pki.server("need")), ..ZkConfig::default() });
    let tls = ZookeeperTls::from_ca_file(pki.path("ca.pem"))
        .unwrap()
        .identity_files(pki.path("client.pem"), pki.path("client.key"))
        .unwrap();
    let backend = ZookeeperBackend::connect(&zk.secure_hosts(), short(ZookeeperOptions::default().tls(tls))).unwrap();
    let items = backend.check();
    let transport = items.iter().find(|c| c.name == "transport").unwrap();
    assert_eq!(transport.status, CheckStatus::Ok);
    assert!(transport.detail.contains("TLS") && transport.detail.contains("client certificate"), "{transport:?}");
    lease_round_trip(backend);

    // Refused, each with its cause (the backend's TLS probe; see tests/zk_tls.rs): a CA that did
    // not sign the server's certificate, no client certificate, and plaintext to the TLS port.
    let no_identity = ZookeeperTls::from_ca_file(pki.path("ca.pem")).unwrap();
    let wrong_ca = ZookeeperTls::from_ca_file(pki.path("other-ca.pem"))
        .unwrap()
        .identity_files(pki.path("client.pem"), pki.path("client.key"))
        .unwrap();
    for (what, opts, cause) in [
        ("untrusted server", ZookeeperOptions::default().tls(wrong_ca), "UnknownIssuer"),
        ("no client certificate", ZookeeperOptions::default().tls(no_identity), "received fatal alert"),
        ("plaintext to the TLS port", ZookeeperOptions::default(), "answers TLS"),
    ] {
        let started = Instant::now();
        let e = match ZookeeperBackend::connect(&zk.secure_hosts(), short(opts)) {
            Ok(_) => panic!("{what}: connected"),
            Err(e) => e,
        };
        assert_eq!(e.kind(), ErrorKind::Backend, "{what}: {e}");
        assert!(e.to_string().contains(cause), "{what}: {e}");
        assert!(started.elapsed() < Duration::from_secs(30), "{what}: took {:?}", started.elapsed());
    }
    // The plain port of the same server keeps working without TLS.
    let plain = ZookeeperBackend::from_url(&zk.url(), short(ZookeeperOptions::default())).unwrap();
    let transport = plain.check().into_iter().find(|c| c.name == "transport").unwrap();
    assert!(transport.detail.contains("plaintext"), "{transport:?}");
}

#[test]
#[serial_test::serial(zookeeper_private)]
fn tls_without_client_certificate() {
    let pki = pki();
    let zk = PrivateZk::start_with("simba-zk-tls", ZkConfig { tls: Some(pki.server("none")), ..ZkConfig::default() });
    let tls = ZookeeperTls::from_pem(std::fs::read_to_string(pki.path("ca.pem")).unwrap()).unwrap();
    // Host names are verified: "localhost" is in the certificate as well as 127.0.0.1.
    let hosts = zk.secure_hosts().replace("127.0.0.1", "localhost");
    lease_round_trip(ZookeeperBackend::connect(&hosts, short(ZookeeperOptions::default().tls(tls))).unwrap());
}

#[test]
#[serial_test::serial(zookeeper_private)]
fn sasl_digest_md5_identity_owns_the_nodes() {
    let zk = PrivateZk::start_with(
        "simba-zk-sasl",
        ZkConfig { sasl_users: vec![("simba".into(), "s3cret".into())], ..ZkConfig::default() },
    );
    let hosts = format!("127.0.0.1:{}", zk.port);
    let sasl = ZookeeperSasl::digest_md5("simba", "s3cret").unwrap();
    let opts = short(ZookeeperOptions::default().sasl(sasl.clone()).acl(AclMode::CreatorAll));
    let owner = ZookeeperBackend::connect(&hosts, opts.clone()).unwrap();
    let id = owner.open_session(Duration::from_secs(2), "").unwrap().id;
    let name = simba::Name::new(support::unique("sasl")).unwrap();
    let acquired = owner.acquire(&id, &name).unwrap();
    let token = match acquired {
        simba::backend::Acquire::Acquired { token, .. } => token,
        other => panic!("{other:?}"),
    };
    // The node's ACL names the SASL identity (reading an ACL needs the identity too).
    let raw_sasl = zookeeper_client::SaslOptions::digest_md5("simba", "s3cret");
    let raw =
        futures::executor::block_on(zookeeper_client::Client::connector().with_sasl(raw_sasl).connect(&hosts)).unwrap();
    let (acls, _) =
        futures::executor::block_on(raw.get_acl(&format!("/simba-security/leases/{}", name.as_str()))).unwrap();
    let shown: Vec<String> = acls.iter().map(|a| format!("{}:{}", a.scheme(), a.id())).collect();
    assert_eq!(shown, vec!["sasl:simba".to_string()]);
    // Another backend with the same identity reads; anonymous clients are denied.
    let peer = ZookeeperBackend::connect(&hosts, opts).unwrap();
    assert_eq!(peer.holder(&name).unwrap().unwrap().token, token);
    let anon = ZookeeperBackend::connect(&hosts, short(ZookeeperOptions::default())).unwrap();
    let e = anon.holder(&name).unwrap_err();
    assert!(e.to_string().contains("denied"), "{e}");
    // A wrong password fails the connection at once (not after the 30 s connection timeout),
    // in the server's words (its AUTHFAILED answer), saying what to check.
    let wrong = ZookeeperOptions::default()
        .sasl(ZookeeperSasl::digest_md5("simba", "wrong").unwrap())
        .connection_timeout(Duration::from_secs(30))
        .root("/simba-security");
    let started = Instant::now();
    match ZookeeperBackend::connect(&hosts, wrong) {
        Ok(_) => panic!("connected with a wrong SASL password"),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::Backend, "{e}");
            let shown = simba::display_chain(&e);
            for words in ["rejected the backend's authentication", "SASL user simba", "SIMBA_ZOOKEEPER_SASL", "auth"] {
                assert!(shown.contains(words), "{words:?} missing: {shown}");
            }
            assert!(e.source().is_some(), "the server's answer is the source: {shown}");
        }
    }
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    // The same through the configuration (SIMBA_ZOOKEEPER_SASL): the identity reads the node; a
    // wrong password is refused without the password in the message.
    let vars = |sasl: &'static str| {
        let url = format!("zookeeper://{hosts}/simba-security");
        move |k: &str| match k {
            "SIMBA_URL" => Some(url.clone()),
            "SIMBA_ZOOKEEPER_SASL" => Some(sasl.to_string()),
            "SIMBA_ZOOKEEPER_CONNECTION_TIMEOUT" => Some("30s".to_string()),
            _ => None,
        }
    };
    let configured = simba::Config::from_vars(vars("simba:s3cret")).unwrap().connect().unwrap();
    assert_eq!(configured.holder(&name).unwrap().unwrap().token, token);
    let Err(e) = simba::Config::from_vars(vars("simba:wr0ng-pw")).unwrap().connect() else {
        panic!("connected with a wrong SASL password")
    };
    let shown = simba::display_chain(&e);
    assert!(shown.contains("rejected the backend's authentication") && !shown.contains("wr0ng-pw"), "{shown}");
    owner.close_session(&id).unwrap();
}

#[test]
fn tls_and_sasl_options_are_validated_before_any_io() {
    let e = ZookeeperTls::from_pem("not a certificate").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    assert!(e.to_string().contains("TLS CA"), "{e}");
    let e = ZookeeperTls::from_ca_file("/nonexistent/ca.pem").unwrap_err();
    assert!(e.to_string().contains("/nonexistent/ca.pem"), "{e}");
    let pki = pki();
    let tls = ZookeeperTls::from_ca_file(pki.path("ca.pem")).unwrap();
    let e = tls.clone().identity_pem(std::fs::read_to_string(pki.path("client.pem")).unwrap(), "no key").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidConfig, "{e}");
    let dbg = format!("{:?}", tls.identity_files(pki.path("client.pem"), pki.path("client.key")).unwrap());
    assert!(!dbg.contains("PRIVATE KEY") && dbg.contains("redacted"), "{dbg}");
    assert!(ZookeeperSasl::digest_md5("", "x").is_err());
    let dbg = format!("{:?}", ZookeeperSasl::digest_md5("simba", "s3cret").unwrap());
    assert!(!dbg.contains("s3cret"), "{dbg}");
}
