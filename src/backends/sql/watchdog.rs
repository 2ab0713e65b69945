//! The watchdog that bounds a MySQL call: it shuts down the socket of a connection whose call
//! runs past its deadline, so a blocked read or write on the caller's thread returns at once
//! (with an I/O error) and the call ends, whatever the server does.
//!
//! The `mysql` client fixes a connection's socket timeouts when it connects, and they apply to
//! each `read`/`write` system call, not to a call of several statements (or to a reply that
//! trickles in): only closing the socket bounds a whole call. One thread serves every backend of
//! the process. Arming and disarming a call take one uncontended lock each; the thread is not
//! woken for them: it sleeps until the earliest armed deadline, and while nothing is armed until
//! a time no new call can expire before (a call arming an earlier deadline wakes it).
//!
//! Safety of the shutdown: the watchdog only touches a socket while its call is armed, under the
//! lock that disarming takes, and a call keeps its connection (which owns the socket) open until
//! it has disarmed: a socket number that was closed and reused is never shut down.
//!
//! The watchdog's thread never logs: the call whose socket it shut down logs that on its own
//! thread when it disarms, with no lock held (the application's logger may call into simba, and
//! must not hold up the one thread that bounds every MySQL call of the process).

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use log::{debug, warn};
use parking_lot::{Condvar, Mutex};

/// How long the thread sleeps while nothing is armed (it is woken for an earlier deadline).
const IDLE: Duration = Duration::from_secs(3600);

/// The process' watchdog.
pub(crate) struct Watchdog {
    state: Mutex<State>,
    wake: Condvar,
}

struct State {
    next_id: u64,
    /// Armed calls: id → (deadline, socket).
    armed: HashMap<u64, (Instant, RawFd)>,
    /// Calls whose socket the watchdog shut down, not yet disarmed, with the shutdown's outcome
    /// (the call's own thread logs it when it disarms).
    fired: Vec<(u64, nix::Result<()>)>,
    /// When the thread wakes next (it is woken for an earlier deadline).
    wakes_at: Instant,
    /// The thread could not be started: arm nothing (calls keep the sockets' own timeouts).
    broken: bool,
}

/// An armed call; [`Armed::disarm`] it when the call ends (dropping it disarms too).
pub(crate) struct Armed {
    id: Option<u64>,
}

impl Watchdog {
    /// The process' watchdog (its thread starts with the first call).
    pub(crate) fn get() -> &'static Watchdog {
        static WATCHDOG: OnceLock<Watchdog> = OnceLock::new();
        let mut failed = None;
        let dog = WATCHDOG.get_or_init(|| {
            let dog = Watchdog {
                state: Mutex::new(State {
                    next_id: 0,
                    armed: HashMap::new(),
                    fired: Vec::new(),
                    wakes_at: Instant::now() + IDLE,
                    broken: false,
                }),
                wake: Condvar::new(),
            };
            let spawned = std::thread::Builder::new().name("simba-sql-watchdog".into()).spawn(|| Watchdog::get().run());
            if let Err(e) = spawned {
                dog.state.lock().broken = true;
                failed = Some(e);
            }
            dog
        });
        // Logged once the initialisation is over: never inside it (the application's logger may
        // call into simba, and a MySQL call would wait here for this very initialisation).
        if let Some(e) = failed {
            warn!("simba mysql: cannot start the watchdog thread ({e}): calls rely on the socket timeouts alone");
        }
        dog
    }

    /// Whether the thread runs (it could not be started: calls are not watched, and the backend
    /// must not promise a bound).
    pub(crate) fn running(&self) -> bool {
        !self.state.lock().broken
    }

    /// Shuts `socket` down at `deadline` unless the returned guard is disarmed before.
    pub(crate) fn arm(&self, socket: RawFd, deadline: Instant) -> Armed {
        let mut st = self.state.lock();
        if st.broken {
            return Armed { id: None };
        }
        st.next_id += 1;
        let id = st.next_id;
        st.armed.insert(id, (deadline, socket));
        if deadline < st.wakes_at {
            st.wakes_at = deadline;
            self.wake.notify_one();
        }
        Armed { id: Some(id) }
    }

    fn disarm(&self, id: u64) -> bool {
        let fired = {
            let mut st = self.state.lock();
            st.armed.remove(&id);
            st.fired.iter().position(|f| f.0 == id).map(|i| st.fired.swap_remove(i).1)
        };
        // Logged here, by the call's own thread once the lock is released: never under the lock
        // (the application's logger may call into simba, and any MySQL call arms this watchdog),
        // and never on the watchdog's thread, which bounds every MySQL call of the process and
        // must not wait for a logger (finding 6 of issue #36).
        match fired {
            None => false,
            Some(Ok(())) => {
                debug!("simba mysql: a call ran past its query timeout: its connection was closed");
                true
            }
            Some(Err(e)) => {
                debug!("simba mysql: a call ran past its query timeout; closing its connection failed: {e}");
                true
            }
        }
    }

    fn run(&self) {
        let mut st = self.state.lock();
        loop {
            let now = Instant::now();
            let mut next = now + IDLE;
            let mut due = Vec::new();
            for (id, (deadline, socket)) in &st.armed {
                if *deadline <= now {
                    due.push((*id, *socket));
                } else {
                    next = next.min(*deadline);
                }
            }
            for (id, socket) in due {
                st.armed.remove(&id);
                // Under the lock: the call has not disarmed, so its connection still owns `socket`.
                // Nothing is logged here: the call's thread does it when it disarms.
                let shut = nix::sys::socket::shutdown(socket, nix::sys::socket::Shutdown::Both);
                st.fired.push((id, shut));
            }
            st.wakes_at = next;
            self.wake.wait_until(&mut st, next);
        }
    }
}

impl Armed {
    /// Ends the watch; true when the watchdog shut the socket down (the connection is unusable
    /// and the call's failure, if any, is its deadline).
    pub(crate) fn disarm(mut self) -> bool {
        match self.id.take() {
            Some(id) => Watchdog::get().disarm(id),
            None => false,
        }
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            Watchdog::get().disarm(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read};
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;

    /// A read on a socket nobody writes to returns once the watchdog fires, not at its own
    /// (hour-long) read timeout; a call disarmed in time is left alone.
    #[test]
    fn shuts_down_a_blocked_socket_at_its_deadline_only() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (_server, _) = listener.accept().unwrap();
        client.set_read_timeout(Some(Duration::from_secs(3600))).unwrap();

        let early = Watchdog::get().arm(client.as_raw_fd(), Instant::now() + Duration::from_millis(50));
        assert!(!early.disarm(), "disarmed before its deadline: not fired");
        std::thread::sleep(Duration::from_millis(100));

        let start = Instant::now();
        let armed = Watchdog::get().arm(client.as_raw_fd(), start + Duration::from_millis(200));
        let mut buf = [0u8; 8];
        let r = client.read(&mut buf);
        let fired = armed.disarm();
        assert!(fired, "the watchdog fired");
        // A shut-down socket reads as closed (0 bytes) or fails; it never waits for the timeout.
        match r {
            Ok(n) => assert_eq!(n, 0),
            Err(e) => assert_ne!(e.kind(), ErrorKind::WouldBlock, "{e}"),
        }
        assert!(start.elapsed() >= Duration::from_millis(200), "not before its deadline");
    }
}
