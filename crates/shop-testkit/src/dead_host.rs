//! A host that is gone (powered off, cut off the network), as a client sees
//! it: a connection attempt to its address neither succeeds nor is refused, it
//! waits for the client's own time-out. A process that dies on a live host is
//! another failure: its port refuses at once.

use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use socket2::{Domain, Socket, Type};

/// Holds an address so that connections to it wait: a listener that never
/// accepts, its queue full, so the kernel drops every further connection
/// attempt. Dropped, the address refuses again.
pub struct DeadHost {
    _listener: Socket,
    _queued: Vec<TcpStream>,
}

impl DeadHost {
    /// Takes `addr` (`host:port` of a process just killed; retried for a
    /// second while the kernel lets go of the port).
    pub fn at(addr: &str) -> DeadHost {
        let addr: SocketAddr = addr.parse().expect("an ip:port address");
        let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None).unwrap();
        socket.set_reuse_address(true).unwrap();
        let mut tries = 0;
        while let Err(error) = socket.bind(&addr.into()) {
            tries += 1;
            assert!(tries < 100, "cannot take {addr}: {error}");
            std::thread::sleep(Duration::from_millis(10));
        }
        // A queue of one: the first connection fills it, the rest wait.
        socket.listen(0).unwrap();
        let queued = (0..3)
            .filter_map(|_| TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok())
            .collect::<Vec<_>>();
        // It waits (not refused, as with `tcp_abort_on_overflow`: that would
        // be a process gone, not a host).
        let waits = TcpStream::connect_timeout(&addr, Duration::from_millis(100));
        assert!(
            waits
                .as_ref()
                .is_err_and(|e| e.kind() == std::io::ErrorKind::TimedOut),
            "a connection to {addr} did not wait: {waits:?}"
        );
        DeadHost {
            _listener: socket,
            _queued: queued,
        }
    }
}
