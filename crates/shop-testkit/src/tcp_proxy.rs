//! A TCP proxy in front of a server (PostgreSQL, say) that a test can cut, as
//! a server that went away is seen by its clients: every connection through it
//! closed, new ones refused (nothing listens on its port); and mend, listening
//! and forwarding again on the same address.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Forwards connections to its address to a target, until cut; stopped on drop.
pub struct TcpProxy {
    addr: String,
    shared: Arc<Shared>,
}

#[derive(Default)]
struct Shared {
    /// What listens on the address; none while cut.
    listener: Mutex<Option<TcpListener>>,
    /// Nothing is forwarded meanwhile (bytes wait, either way).
    stalled: AtomicBool,
    stopped: AtomicBool,
    /// Both ends of every connection forwarded, to close them when cut.
    open: Mutex<Vec<TcpStream>>,
}

impl TcpProxy {
    /// A proxy on a free port of 127.0.0.1 forwarding to `target` (`host:port`).
    pub fn to(target: &str) -> TcpProxy {
        let listener = listen("127.0.0.1:0");
        let addr = listener.local_addr().unwrap().to_string();
        let shared = Arc::new(Shared::default());
        *shared.listener.lock().unwrap() = Some(listener);
        let target = target.to_owned();
        let accepting = shared.clone();
        std::thread::spawn(move || {
            while !accepting.stopped.load(Ordering::Acquire) {
                let accepted = match &*accepting.listener.lock().unwrap() {
                    Some(listener) => listener.accept().ok(),
                    None => None,
                };
                let Some((client, _)) = accepted else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                let _ = client.set_nonblocking(false);
                let Ok(server) = TcpStream::connect(&target) else {
                    continue;
                };
                // Under the lock `cut` drains: one accepted as it cut is closed.
                let mut open = accepting.open.lock().unwrap();
                if accepting.listener.lock().unwrap().is_none() {
                    continue;
                }
                for (from, to) in [(&client, &server), (&server, &client)] {
                    let (Ok(mut from), Ok(mut to)) = (from.try_clone(), to.try_clone()) else {
                        continue;
                    };
                    let copying = accepting.clone();
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            while copying.stalled.load(Ordering::Acquire)
                                && !copying.stopped.load(Ordering::Acquire)
                            {
                                std::thread::sleep(Duration::from_millis(5));
                            }
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
                open.extend([client, server]);
            }
        });
        TcpProxy { addr, shared }
    }

    /// Its address, `127.0.0.1:port`.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Stops listening (a connection is refused) and closes every connection
    /// through it.
    pub fn cut(&self) {
        let mut open = self.shared.open.lock().unwrap();
        self.shared.listener.lock().unwrap().take();
        for stream in open.drain(..) {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }

    /// Stalls every connection through it, and each new one: nothing it is
    /// sent is passed on until [`TcpProxy::resume`].
    pub fn stall(&self) {
        self.shared.stalled.store(true, Ordering::Release);
    }

    /// Passes on again what it holds and what comes.
    pub fn resume(&self) {
        self.shared.stalled.store(false, Ordering::Release);
    }

    /// Listens and forwards again, on the same address (retried for 5 s while
    /// the port is taken, by a connection attempt to it, say).
    pub fn mend(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let listener = loop {
            match TcpListener::bind(&self.addr) {
                Ok(listener) => break listener,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(error) => panic!("cannot listen on {} again: {error}", self.addr),
            }
        };
        listener.set_nonblocking(true).unwrap();
        *self.shared.listener.lock().unwrap() = Some(listener);
    }
}

/// A listener on `addr` whose `accept` does not wait.
fn listen(addr: &str) -> TcpListener {
    let listener = TcpListener::bind(addr).unwrap();
    listener.set_nonblocking(true).unwrap();
    listener
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.shared.stopped.store(true, Ordering::Release);
        self.cut();
    }
}
