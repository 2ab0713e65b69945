//! A plain `cargo test` (default features) compiles no server backend, so none of their TCKs and
//! real-server tests run — and it would still report green. This guard makes that visible: it
//! fails, naming the backends compiled out, unless every backend feature is on (`scripts/test`
//! runs `cargo test --all-features` with the servers up) or `SIMBA_TEST_MEMORY_ONLY=1` says the run
//! is meant to test the memory backend only (docs/testing.md, "What a plain cargo test runs").

/// The backend features this build compiled out.
fn compiled_out() -> Vec<&'static str> {
    [
        ("postgres", cfg!(feature = "postgres")),
        ("mysql", cfg!(feature = "mysql")),
        ("redis", cfg!(feature = "redis")),
        ("zookeeper", cfg!(feature = "zookeeper")),
        ("etcd", cfg!(feature = "etcd")),
    ]
    .into_iter()
    .filter(|(_, on)| !on)
    .map(|(name, _)| name)
    .collect()
}

#[test]
fn server_backends_are_tested_or_the_run_says_they_are_not() {
    let out = compiled_out();
    if out.is_empty() {
        return;
    }
    let memory_only = std::env::var("SIMBA_TEST_MEMORY_ONLY").is_ok_and(|v| v == "1");
    assert!(
        memory_only,
        "this build compiles out the {out:?} backends, so their TCKs and real-server tests did not run: run \
         scripts/test (cargo test --all-features, servers from scripts/services up), or set \
         SIMBA_TEST_MEMORY_ONLY=1 to test the memory backend alone"
    );
    eprintln!("SIMBA_TEST_MEMORY_ONLY=1: the {out:?} backends are compiled out and untested in this run");
}
