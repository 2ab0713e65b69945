//! The test PKI that `scripts/tls-certs` writes (run by `scripts/services up`) into
//! `SIMBA_TEST_TLS_DIR` (default `/tmp/simba-services/tls`): `ca.pem`, `client.pem`,
//! `client.key`, `other-ca.pem`, … A missing file fails the test with how to create it.

use std::path::Path;

/// The folder of the test PKI.
pub fn dir() -> String {
    super::env_or("SIMBA_TEST_TLS_DIR", "/tmp/simba-services/tls")
}

/// The path of `name` in the test PKI; panics saying how to create it when it is missing.
pub fn file(name: &str) -> String {
    let path = format!("{}/{name}", dir());
    assert!(
        Path::new(&path).exists(),
        "{path} is missing: run `scripts/services up` (it runs scripts/tls-certs; or set SIMBA_TEST_TLS_DIR)"
    );
    path
}

/// The bytes of `name` in the test PKI (see [`file`]).
pub fn read(name: &str) -> Vec<u8> {
    let path = file(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The text of `name` in the test PKI (see [`file`]).
pub fn read_text(name: &str) -> String {
    String::from_utf8(read(name)).unwrap_or_else(|e| panic!("{}: not UTF-8: {e}", file(name)))
}
