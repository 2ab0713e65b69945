//! A TCP proxy for fault tests: forwards between a client and a server on loopback, and can stall
//! (stop forwarding, keep connections open) or cut (close every connection) on demand.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

/// A running proxy; it stops accepting when dropped.
pub struct Proxy {
    port: u16,
    stalled: Arc<AtomicBool>,
    stop: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<TcpStream>>>,
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
        let (s2, st2, c2, up) = (stalled.clone(), stop.clone(), conns.clone(), upstream.to_string());
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
                        pump(client.try_clone().unwrap(), server.try_clone().unwrap(), s2.clone());
                        pump(server, client, s2.clone());
                    }
                    Err(_) => thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        Proxy { port, stalled, stop, conns }
    }

    /// The proxy's address, `127.0.0.1:<port>`.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The proxy's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Stops forwarding in both directions; connections stay open and data waits.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// Forwards again.
    pub fn resume(&self) {
        self.stalled.store(false, Ordering::SeqCst);
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
        self.resume();
        self.cut();
    }
}

fn pump(mut from: TcpStream, mut to: TcpStream, stalled: Arc<AtomicBool>) {
    thread::spawn(move || {
        let mut buf = [0u8; 16 * 1024];
        loop {
            while stalled.load(Ordering::SeqCst) {
                thread::sleep(Duration::from_millis(5));
            }
            match from.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
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
