//! A loopback TCP proxy that counts round trips: every time a client sends bytes after having
//! received bytes (or for the first time) on a connection counts as one round trip. Pipelined
//! requests therefore count once, which is what "round trips" means for latency. Only this
//! process's traffic passes through it, so the counts are exact even on a shared server. It can
//! also hold every chunk the server sends for a while ([`Proxy::set_delay`]), like a distant
//! server: a call then costs that delay once per round trip it waits for.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use crate::common::BenchResult;

const NONE: u8 = 0;
const UP: u8 = 1;
const DOWN: u8 = 2;

#[derive(Debug, Default)]
struct Stats {
    round_trips: AtomicU64,
    connections: AtomicU64,
    /// Microseconds each chunk from the server is held before it is forwarded.
    delay_us: AtomicU64,
}

/// A running proxy; stops accepting when dropped (open connections end with their peers).
#[derive(Debug)]
pub struct Proxy {
    addr: SocketAddr,
    stats: Arc<Stats>,
    stop: Arc<AtomicBool>,
}

impl Proxy {
    /// Listens on an ephemeral loopback port and forwards every connection to `upstream`.
    pub fn start(upstream: SocketAddr) -> BenchResult<Proxy> {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let stats = Arc::new(Stats::default());
        let stop = Arc::new(AtomicBool::new(false));
        let (s, st) = (stats.clone(), stop.clone());
        thread::Builder::new().name("bench-proxy".into()).spawn(move || accept_loop(listener, upstream, s, st))?;
        Ok(Proxy { addr, stats, stop })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Holds every chunk the server sends for `delay` before forwarding it, from now on (zero:
    /// forward at once).
    pub fn set_delay(&self, delay: Duration) {
        self.stats.delay_us.store(delay.as_micros() as u64, Ordering::SeqCst);
    }

    /// Round trips so far over all connections.
    pub fn round_trips(&self) -> u64 {
        self.stats.round_trips.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

fn accept_loop(listener: TcpListener, upstream: SocketAddr, stats: Arc<Stats>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::SeqCst) {
        match listener.accept() {
            Ok((client, _)) => {
                if let Err(e) = connect(client, upstream, &stats) {
                    eprintln!("[bench] proxy: cannot connect to {upstream}: {e}");
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::sleep(Duration::from_millis(2)),
            Err(e) => {
                eprintln!("[bench] proxy: accept failed: {e}");
                thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

fn connect(client: TcpStream, upstream: SocketAddr, stats: &Arc<Stats>) -> std::io::Result<()> {
    client.set_nonblocking(false)?;
    let server = TcpStream::connect(upstream)?;
    client.set_nodelay(true)?;
    server.set_nodelay(true)?;
    stats.connections.fetch_add(1, Ordering::SeqCst);
    let last = Arc::new(AtomicU8::new(NONE));
    let (c2, s2) = (client.try_clone()?, server.try_clone()?);
    let (st, l) = (stats.clone(), last.clone());
    thread::Builder::new().name("bench-proxy-up".into()).spawn(move || pump(client, server, UP, &l, &st))?;
    let st = stats.clone();
    thread::Builder::new().name("bench-proxy-down".into()).spawn(move || pump(s2, c2, DOWN, &last, &st))?;
    Ok(())
}

fn pump(mut from: TcpStream, mut to: TcpStream, dir: u8, last: &AtomicU8, stats: &Stats) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if dir == UP {
            if last.swap(UP, Ordering::SeqCst) != UP {
                stats.round_trips.fetch_add(1, Ordering::SeqCst);
            }
        } else {
            let delay = stats.delay_us.load(Ordering::SeqCst);
            if delay > 0 {
                thread::sleep(Duration::from_micros(delay));
            }
            last.store(DOWN, Ordering::SeqCst);
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}
