//! The benchmark's own checks, run when the binary is started without `--bench`
//! (`cargo test --bench simba --all-features`; the target has no libtest harness, so these are
//! plain functions). They need no server: what they talk to they start on loopback.

/// One check: its name and the function that returns why it failed.
type Check = (&'static str, fn() -> Result<(), String>);

/// Runs every check, prints one line each and a closing count; true when all passed.
pub fn run() -> bool {
    let checks: Vec<Check> = vec![
        ("charts_only_when_asked", charts_only_when_asked),
        #[cfg(feature = "zookeeper")]
        ("zk_fsync_not_whitelisted_is_unavailable", zk::fsync_not_whitelisted_is_unavailable),
        #[cfg(feature = "zookeeper")]
        ("zk_counter_not_whitelisted_is_unavailable", zk::counter_not_whitelisted_is_unavailable),
        #[cfg(feature = "zookeeper")]
        ("zk_version_not_whitelisted_is_unavailable", zk::version_not_whitelisted_is_unavailable),
        #[cfg(feature = "zookeeper")]
        ("zk_whitelisted_stats_are_read", zk::whitelisted_stats_are_read),
        #[cfg(feature = "zookeeper")]
        ("zk_no_server_is_unavailable", zk::no_server_is_unavailable),
    ];
    let mut failed = 0;
    for (name, check) in &checks {
        match check() {
            Ok(()) => println!("test {name} ... ok"),
            Err(why) => {
                failed += 1;
                println!("test {name} ... FAILED: {why}");
            }
        }
    }
    println!("\nself-tests: {} passed, {failed} failed", checks.len() - failed);
    failed == 0
}

/// Without `SIMBA_BENCH_CHARTS` no chart is drawn; with it both SVGs are written, with their
/// axis units, one curve per backend and the legend.
fn charts_only_when_asked() -> Result<(), String> {
    use std::time::Duration;

    use crate::charts::{self, ApiSpiRaw};
    use crate::common::Summary;
    use crate::targets::Kind;

    let dir = std::env::temp_dir().join(format!("simba-bench-selftest-{}", std::process::id()));
    let mut config = crate::Config {
        quick: true,
        kinds: vec![Kind::Memory, Kind::Redis],
        sections: vec![1, 2],
        prefix: "selftest".into(),
        charts: None,
        handoff_samples: None,
    };
    let us = |v: &[u64]| v.iter().map(|&u| Duration::from_micros(u)).collect::<Vec<_>>();
    let samples = vec![(Kind::Memory, us(&[60, 70, 80, 120])), (Kind::Redis, us(&[400, 480, 900, 4_000]))];
    let bars = vec![
        ApiSpiRaw { kind: Kind::Memory, api: Summary::of(&us(&[1, 2])), spi: Summary::of(&us(&[1])), raw: None },
        ApiSpiRaw {
            kind: Kind::Redis,
            api: Summary::of(&us(&[150, 160])),
            spi: Summary::of(&us(&[140, 150])),
            raw: Some(Summary::of(&us(&[110, 120]))),
        },
    ];
    let none = (charts::handoff(&config, &samples), charts::api_spi_raw(&config, &bars));
    if !matches!(none, (Ok(None), Ok(None))) {
        return Err(format!("charts without SIMBA_BENCH_CHARTS: {none:?}"));
    }
    config.charts = Some(dir.clone());
    let result = (|| {
        let handoff = charts::handoff(&config, &samples).map_err(|e| e.to_string())?;
        let bars = charts::api_spi_raw(&config, &bars).map_err(|e| e.to_string())?;
        for (path, wants) in [
            (
                handoff,
                &[
                    "hand-off latency (ms, log scale)",
                    "samples at or below (%)",
                    "memory (4 samples)",
                    "redis (4 samples)",
                    "push target",
                ][..],
            ),
            (
                bars,
                &[
                    "one acquire + release (µs, log scale)",
                    "\nredis\n",
                    "\nmemory\n",
                    "API: Session::try_lock",
                    "API/raw 1.36",
                    "API/SPI",
                ][..],
            ),
        ] {
            let path = path.ok_or("no path")?;
            let svg = std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            for want in wants {
                if !svg.contains(want) {
                    return Err(format!("{} has no {want:?}", path.display()));
                }
            }
        }
        Ok(())
    })();
    match &result {
        Ok(()) => {
            let _ = std::fs::remove_dir_all(&dir);
        }
        Err(_) => println!("  (the charts are left in {} for a look)", dir.display()),
    }
    result
}

#[cfg(feature = "zookeeper")]
mod zk {
    use std::io::{Read, Write};
    use std::net::{SocketAddr, TcpListener};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::thread::JoinHandle;
    use std::time::{Duration, Instant};

    use crate::targets::{Kind, Target};

    /// A loopback server that answers four-letter words as a ZooKeeper whose
    /// `4lw.commands.whitelist` holds only `allowed` (each with the given reply) does: any other
    /// word gets ZooKeeper's own refusal, then the connection closes.
    struct FourLetterServer {
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        thread: Option<JoinHandle<()>>,
    }

    impl FourLetterServer {
        fn start(allowed: &'static [(&'static str, &'static str)]) -> Result<FourLetterServer, String> {
            let listener = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
            let addr = listener.local_addr().map_err(|e| format!("local_addr: {e}"))?;
            listener.set_nonblocking(true).map_err(|e| format!("set_nonblocking: {e}"))?;
            let stop = Arc::new(AtomicBool::new(false));
            let stopped = stop.clone();
            let thread = std::thread::spawn(move || {
                let until = Instant::now() + Duration::from_secs(30);
                while !stopped.load(Ordering::Relaxed) && Instant::now() < until {
                    let Ok((mut s, _)) = listener.accept() else {
                        std::thread::sleep(Duration::from_millis(2));
                        continue;
                    };
                    let _ = s.set_nonblocking(false);
                    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
                    let mut word = [0u8; 4];
                    if s.read_exact(&mut word).is_err() {
                        continue;
                    }
                    let word = String::from_utf8_lossy(&word).into_owned();
                    let reply = match allowed.iter().find(|(w, _)| *w == word) {
                        Some((_, reply)) => reply.to_string(),
                        None => format!("{word} is not executed because it is not in the whitelist.\n"),
                    };
                    let _ = s.write_all(reply.as_bytes());
                }
            });
            Ok(FourLetterServer { addr, stop, thread: Some(thread) })
        }
    }

    impl Drop for FourLetterServer {
        fn drop(&mut self) {
            self.stop.store(true, Ordering::Relaxed);
            if let Some(t) = self.thread.take() {
                let _ = t.join();
            }
        }
    }

    const SRVR: &str =
        "Zookeeper version: 3.8.0-${mvngit.commit.id}, built on 2024-12-29 17:54 UTC\nMode: standalone\n";
    const MNTR: &str = "zk_version\t3.8.0\nzk_packets_received\t42\nzk_cnt_fsynctime\t7\nzk_sum_fsynctime\t14\n\
                        zk_max_fsynctime\t9\n";
    const REFUSED: &str = "unavailable: mntr is not executed because it is not in the whitelist.";

    fn target(addr: SocketAddr) -> Target {
        Target { kind: Kind::Zookeeper, url: format!("zookeeper://{addr}"), server_version: String::new() }
    }

    fn same(what: &str, got: impl std::fmt::Debug, want: impl std::fmt::Debug) -> Result<(), String> {
        let (got, want) = (format!("{got:?}"), format!("{want:?}"));
        if got == want {
            Ok(())
        } else {
            Err(format!("{what}: got {got}, want {want}"))
        }
    }

    /// Section 2's fsync side column against a server whose whitelist leaves `mntr` out: the stat
    /// is "unavailable" in the server's own words, and reading it is not an error.
    pub fn fsync_not_whitelisted_is_unavailable() -> Result<(), String> {
        let server = FourLetterServer::start(&[("srvr", SRVR)])?;
        let t = target(server.addr);
        let (before, after) = (t.fsync_stats(), t.fsync_stats());
        match &before {
            Some(Err(u)) => same("the reason", u.to_string(), REFUSED)?,
            other => return Err(format!("expected the unavailable reason, got {other:?}")),
        }
        same("section 2's column", crate::s2_handoff::fsync_text(before, after), Some(REFUSED))
    }

    /// The statement counter (sections 1, 4, 5) against the same server: unavailable, no error.
    pub fn counter_not_whitelisted_is_unavailable() -> Result<(), String> {
        let server = FourLetterServer::start(&[("srvr", SRVR)])?;
        let mut counter = target(server.addr).counter();
        same("exists", counter.exists(), true)?;
        same("live", counter.live(), false)?;
        same("read", counter.read(), None::<crate::targets::Reading>)?;
        same("cell", counter.cell(None, "—"), REFUSED)
    }

    /// The version in the machine table, where even `srvr` is left out.
    pub fn version_not_whitelisted_is_unavailable() -> Result<(), String> {
        let server = FourLetterServer::start(&[])?;
        let got = crate::targets::zk_impl::version(server.addr).map_err(|u| u.to_string());
        same("version", got, Err::<String, _>("unavailable: srvr is not executed because it is not in the whitelist."))
    }

    /// With `mntr` allowed the same readers give the numbers.
    pub fn whitelisted_stats_are_read() -> Result<(), String> {
        let server = FourLetterServer::start(&[("srvr", SRVR), ("mntr", MNTR)])?;
        let t = target(server.addr);
        same("version", crate::targets::zk_impl::version(server.addr), Ok::<_, ()>("3.8.0"))?;
        same(
            "section 2's column",
            crate::s2_handoff::fsync_text(t.fsync_stats(), t.fsync_stats()),
            Some("0, 0.00 ms on average (longest since it started: 9 ms)"),
        )?;
        let mut counter = t.counter();
        same("live", counter.live(), true)?;
        let r = counter.read().map(|r| r.requests);
        same("packets", r, Some(42u64))
    }

    /// No server at all behind the address: unavailable with the client's error, no error.
    pub fn no_server_is_unavailable() -> Result<(), String> {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
            l.local_addr().map_err(|e| format!("local_addr: {e}"))?
        };
        match target(addr).fsync_stats() {
            Some(Err(u)) if u.to_string().starts_with(&format!("unavailable: mntr to {addr}: ")) => Ok(()),
            other => Err(format!("expected unavailable: mntr to {addr}: <error>, got {other:?}")),
        }
    }
}
