//! A TCP proxy for fault tests: forwards between a client and a server on loopback, and can stall
//! (stop forwarding, keep connections open) or cut (close every connection) on demand, and
//! counts requests: data the client sends after the server last answered on that connection (one
//! round trip; a pipeline written at once counts once). It can also hold back one connection's
//! client data from the first chunk that contains a given byte string (a statement, a command)
//! until the test lets it through, while every other connection flows — or lets that chunk alone
//! through as a late request, keeping the server side open.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A running proxy; it stops accepting when dropped.
pub struct Proxy {
    port: u16,
    stalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
    requests: Arc<AtomicUsize>,
    hold: Arc<Hold>,
    /// While set, the server's data waits (requests still reach the server).
    replies_stalled: Arc<AtomicBool>,
    /// Each connection's own stall flag (set by [`Proxy::stall_existing`]).
    each: Arc<Mutex<Vec<Arc<AtomicBool>>>>,
}

/// What [`Proxy::hold_on`] holds back: the pattern, whether a chunk has been held, whether it may go.
#[derive(Default)]
struct Hold {
    pattern: Mutex<Option<Vec<u8>>>,
    holding: AtomicBool,
    released: AtomicBool,
    /// Set by [`Proxy::let_through_alone`]: after the held chunk, the rest of that connection's
    /// client data is dropped and its server side stays open.
    alone: AtomicBool,
}

impl Hold {
    /// Blocks a client chunk that contains the pattern (and, as the pump is sequential, everything
    /// after it on that connection) until [`Proxy::let_through`]. True when it held this chunk.
    fn gate(&self, chunk: &[u8]) -> bool {
        let matches = match &*self.pattern.lock().unwrap() {
            Some(p) => !p.is_empty() && chunk.windows(p.len()).any(|w| w == p.as_slice()),
            None => false,
        };
        if !matches {
            return false;
        }
        self.holding.store(true, Ordering::SeqCst);
        while !self.released.load(Ordering::SeqCst) {
            thread::sleep(Duration::from_millis(2));
        }
        true
    }
}

impl Proxy {
    /// Starts a proxy on an ephemeral loopback port forwarding to `upstream` (`host:port`).
    pub fn start(upstream: &str) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().expect("addr").port();
        listener.set_nonblocking(true).expect("nonblocking");
        let stalled = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let conns = Arc::new(Mutex::new(Vec::new()));
        let requests = Arc::new(AtomicUsize::new(0));
        let (s2, st2, c2, up) = (stalled.clone(), stop.clone(), conns.clone(), upstream.to_string());
        let r2 = requests.clone();
        let hold = Arc::new(Hold::default());
        let h2 = hold.clone();
        let replies_stalled = Arc::new(AtomicBool::new(false));
        let rs2 = replies_stalled.clone();
        let each: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
        let e2 = each.clone();
        thread::spawn(move || {
            while !st2.load(Ordering::SeqCst) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let _ = client.set_nonblocking(false);
                        let Ok(server) = TcpStream::connect(&up) else { continue };
                        for s in [&client, &server] {
                            if let Ok(c) = s.try_clone() {
                                c2.lock().unwrap().push(c);
                            }
                        }
                        // Set when the server spoke last: the client's next data starts a request.
                        let answered = Arc::new(AtomicBool::new(true));
                        let up = Direction::Up { answered: answered.clone(), requests: r2.clone(), hold: h2.clone() };
                        let own = Arc::new(AtomicBool::new(false));
                        e2.lock().unwrap().push(own.clone());
                        let gate = Stall { all: s2.clone(), own };
                        pump(client.try_clone().unwrap(), server.try_clone().unwrap(), gate.clone(), up);
                        pump(server, client, gate, Direction::Down { answered, stalled: rs2.clone() });
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { port, stalled, stop, conns, requests, hold, replies_stalled, each }
    }

    /// From now on, holds back the client data of a connection from its first chunk containing
    /// `pattern` until [`let_through`](Proxy::let_through) (other connections flow).
    pub fn hold_on(&self, pattern: &[u8]) {
        *self.hold.pattern.lock().unwrap() = Some(pattern.to_vec());
    }

    /// True once a chunk containing the [`hold_on`](Proxy::hold_on) pattern is being held.
    pub fn holding(&self) -> bool {
        self.hold.holding.load(Ordering::SeqCst)
    }

    /// Forwards what [`hold_on`](Proxy::hold_on) held, and holds nothing more.
    pub fn let_through(&self) {
        *self.hold.pattern.lock().unwrap() = None;
        self.hold.released.store(true, Ordering::SeqCst);
    }

    /// Forwards what [`hold_on`](Proxy::hold_on) held as a late request: the held chunk reaches
    /// the server, and nothing the client sent after it does, not even its closing the
    /// connection (which would cancel the request on a gRPC server) until the proxy is dropped.
    pub fn let_through_alone(&self) {
        self.hold.alone.store(true, Ordering::SeqCst);
        self.let_through();
    }

    /// The proxy's address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Requests forwarded so far (see the module docs).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }

    /// Stops forwarding in both directions; connections stay open and data waits.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// Forwards again.
    pub fn resume(&self) {
        self.stalled.store(false, Ordering::SeqCst);
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> usize {
        self.each.lock().unwrap().len()
    }

    /// Stops forwarding on every connection open now, for good (they stay open: half-open
    /// connections as a dead peer or a dropped route leaves them); new connections flow.
    pub fn stall_existing(&self) {
        for c in self.each.lock().unwrap().iter() {
            c.store(true, Ordering::SeqCst);
        }
    }

    /// Stops forwarding the server's data only: requests still reach the server, their answers
    /// wait (a request applied whose reply is late).
    pub fn stall_replies(&self) {
        self.replies_stalled.store(true, Ordering::SeqCst);
    }

    /// Forwards the server's data again.
    pub fn resume_replies(&self) {
        self.replies_stalled.store(false, Ordering::SeqCst);
    }

    /// Closes every open connection (new ones are still accepted).
    pub fn cut(&self) {
        for c in self.conns.lock().unwrap().drain(..) {
            let _ = c.shutdown(Shutdown::Both);
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.let_through();
        self.resume();
        self.resume_replies();
        self.cut();
    }
}

/// Which way a pump forwards, with the per-connection request bookkeeping.
enum Direction {
    /// Client to server: counts a request when the server spoke last; holds what [`Hold`] matches.
    Up { answered: Arc<AtomicBool>, requests: Arc<AtomicUsize>, hold: Arc<Hold> },
    /// Server to client; waits while `stalled` is set.
    Down { answered: Arc<AtomicBool>, stalled: Arc<AtomicBool> },
}

/// When a connection's data waits: while the whole proxy or this connection is stalled.
#[derive(Clone)]
struct Stall {
    all: Arc<AtomicBool>,
    own: Arc<AtomicBool>,
}

impl Stall {
    fn load(&self, order: Ordering) -> bool {
        self.all.load(order) || self.own.load(order)
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, stalled: Stall, direction: Direction) {
    thread::spawn(move || {
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            while stalled.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    match &direction {
                        Direction::Up { answered, requests, hold } => {
                            if answered.swap(false, Ordering::SeqCst) {
                                requests.fetch_add(1, Ordering::SeqCst);
                            }
                            if hold.gate(&buf[..n]) && hold.alone.load(Ordering::SeqCst) {
                                let _ = to.write_all(&buf[..n]);
                                // The rest is dropped; the server side stays open until the
                                // proxy is dropped (`cut`).
                                while !matches!(from.read(&mut buf), Ok(0) | Err(_)) {}
                                return;
                            }
                        }
                        Direction::Down { answered, stalled } => {
                            answered.store(true, Ordering::SeqCst);
                            while stalled.load(Ordering::SeqCst) {
                                thread::sleep(Duration::from_millis(5));
                            }
                        }
                    }
                    while stalled.load(Ordering::SeqCst) {
                        thread::sleep(Duration::from_millis(5));
                    }
                    if to.write_all(&buf[..n]).is_err() {
                        break;
                    }
                }
            }
        }
        let _ = to.shutdown(Shutdown::Both);
    });
}
