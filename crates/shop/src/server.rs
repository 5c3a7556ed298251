//! The HTTP serve loop: accepts connections, serves each with hyper, and stops
//! within a known time when asked to.
//!
//! It replaces `axum::serve`, which has no header-read timeout and no shutdown
//! deadline: a client that sends half a request head held its connection open
//! indefinitely, and kept the process alive long after SIGTERM. Here:
//! - a connection must deliver each request head within
//!   [`ServeOptions::header_timeout`] of starting to read it, which also closes
//!   idle keep-alive connections after that long;
//! - on the stop signal the listener is closed, idle connections are closed, those
//!   mid-request finish their request (the graceful part), and whatever is still
//!   open after [`ServeOptions::shutdown_grace`] is dropped, so [`serve`] returns;
//! - one client address (its blocks, as [`shop_web::client_shares`] counts them)
//!   holds at most [`ServeOptions::max_connections_per_address`] of the
//!   connections: one more is closed at once, not queued, so one client cannot
//!   take the whole connection cap from everyone else;
//! - a request head (its request line and headers) of less than
//!   [`MAX_HEAD_BYTES`] is read; one of twice that or more answers 431 and
//!   closes the connection;
//! - a request without the one valid `Host` RFC 9112 asks for (an HTTP/1.1
//!   request with none, any with two) answers 400 in the shop's error shape and
//!   closes its connection ([`shop_web::request::host_problem`]);
//! - each request carries its peer's address as
//!   [`ConnectInfo<SocketAddr>`](axum::extract::ConnectInfo), for handlers and
//!   layers that limit by client (the login rate limiter).

use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use futures::future::Either;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use shop_cache::domain::client::{ClientAddress, Networks};
use shop_cache::repeating::Repeating;
use shop_web::client_shares::Shares;
use shop_web::request::{BadRequest, host_problem};
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// How many connections the kernel holds for the server until it accepts them
/// (capped by `net.core.somaxconn`): a burst of new connections waits in that
/// queue, where past tokio's default of 128 the kernel dropped their SYNs and
/// each such client waited a second to send it again.
pub const LISTEN_BACKLOG: u32 = 4096;

/// A listener on `addr` with a queue of [`LISTEN_BACKLOG`] connections (what
/// `TcpListener::bind` does, with a longer queue).
pub fn listen(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4()?,
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6()?,
    };
    #[cfg(not(windows))]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How long a client has to send a request head. Real browsers send it in one
/// packet; ten seconds covers a slow mobile link many times over, and bounds what
/// a slow-loris client (a head sent a byte at a time, or never finished) costs.
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(10);

/// How long requests in flight may run after the stop signal. As long as the
/// request timeout of the web tier, so any request it would let finish can; well
/// inside the 30 s most service managers wait before SIGKILL.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// How long to wait after the listener fails with something other than a
/// connection's own error (typically out of file descriptors) before accepting
/// again, so the loop does not spin while the condition lasts.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);

/// Connections open at once unless configured.
pub const DEFAULT_MAX_CONNECTIONS: usize = 10_000;

/// How much of one request head a connection buffers before it reads no
/// more: 64 KiB, eight times a browser's largest head (its cookies at 4 KB
/// each included). hyper checks it between reads, so a head of less is always
/// read, and one of twice as much or more is always refused (431); between
/// the two it depends on how the bytes arrive. hyper's own default is about
/// 400 KB: at the connection cap, up to 8 GB that clients could make the
/// server hold with heads that never end within the header timeout; 1.3 GB
/// at this bound.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Connections one client address may hold unless configured: a tenth of the
/// cap, room for an office of browsers behind one NAT (a browser opens about six
/// to a host), while no single client can hold the whole cap.
pub const DEFAULT_MAX_CONNECTIONS_PER_ADDRESS: usize = 1_000;

/// File descriptors kept for everything but client connections (Redis and
/// database connections, files, the listener).
pub const RESERVED_FILES: u64 = 512;

/// Raises this process's open-files limit to the most the system allows (the soft
/// limit to the hard one) and returns it: each connection is a descriptor, and a
/// low default (1,024 on many systems) would end service long before the
/// connection cap does.
pub fn raise_open_files_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(error) => {
            tracing::warn!(%error, "could not raise the open-files limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1_024, |(soft, _)| soft)
        }
    }
}

/// The serve loop's bounds.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long a client may take to send a request head (also: the keep-alive
    /// idle timeout).
    pub header_timeout: Duration,
    /// How long connections may stay open after the stop signal.
    pub shutdown_grace: Duration,
    /// Connections open at once: at the cap, new ones wait in the listen queue
    /// until one closes, so a flood of idle connections cannot take every file
    /// descriptor (the health check and pages keep answering on the others).
    pub max_connections: usize,
    /// Connections one client address may hold at once (an IPv6 client's /56 and
    /// /48 4 and 16 times as many); past it, a new one is closed at once. `None`:
    /// no share (behind a reverse proxy every connection is the proxy's).
    pub max_connections_per_address: Option<usize>,
    /// Behind reverse proxies, whose `X-Forwarded-For` the shop believes: a
    /// connection from a peer outside these networks is closed at once (else a
    /// client reaching the server past its proxies would name any address it
    /// liked, and no per-address limit would hold it). `None`: any peer.
    pub proxies_only: Option<Networks>,
}

impl Default for ServeOptions {
    fn default() -> Self {
        Self {
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            shutdown_grace: DEFAULT_SHUTDOWN_GRACE,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            max_connections_per_address: Some(DEFAULT_MAX_CONNECTIONS_PER_ADDRESS),
            proxies_only: None,
        }
    }
}

/// How the serve loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stopped {
    /// Every connection finished within the grace period.
    Drained,
    /// The grace period passed; this many connections were still open and were
    /// closed without an answer.
    DeadlinePassed {
        /// Connections dropped at the deadline.
        dropped: usize,
    },
}

/// Serves `app` on `listener` until `signal` resolves, then shuts down as the
/// module doc says. Returns once every connection is closed, at most
/// [`ServeOptions::shutdown_grace`] after the signal.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    options: &ServeOptions,
    signal: impl Future<Output = ()>,
) -> Stopped {
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true);
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    let shares = std::sync::Arc::new(Shares::default());
    // Connections closed for coming from no proxy: logged at most once a minute.
    let mut not_proxies = Repeating::default();
    tokio::pin!(signal);
    loop {
        tokio::select! {
            () = &mut signal => break,
            Some(ended) = connections.join_next() => {
                if let Err(error) = ended {
                    tracing::error!(%error, "a connection task failed");
                }
            }
            accepted = listener.accept(), if connections.len() < options.max_connections => match accepted {
                Ok((stream, peer)) => {
                    if let Some(proxies) = &options.proxies_only
                        && !proxies.contains(peer.ip())
                    {
                        if not_proxies.again(std::time::Instant::now()) {
                            tracing::warn!(
                                peer = %peer.ip(),
                                closed = not_proxies.count(),
                                trusted = %proxies,
                                "a connection from outside --trusted-proxies closed (behind \
                                 proxies the shop takes their connections alone)"
                            );
                        }
                        drop(stream);
                        continue;
                    }
                    let share = match options.max_connections_per_address {
                        Some(per_address) => {
                            let address = ClientAddress::of(peer.ip());
                            match shares.take(Some(address), per_address) {
                                Some(share) => Some(share),
                                None => {
                                    tracing::debug!(%address, "a client over its share of connections; closed");
                                    drop(stream);
                                    continue;
                                }
                            }
                        }
                        None => None,
                    };
                    let app = app.clone();
                    let service = service_fn(move |mut req: hyper::Request<Incoming>| {
                        req.extensions_mut().insert(ConnectInfo(peer));
                        match host_problem(&req) {
                            // A router is always ready, and its future owns what it needs.
                            None => Either::Left(tower::Service::call(&mut app.clone(), req)),
                            Some(refused) => Either::Right(std::future::ready(Ok(refused_host(refused)))),
                        }
                    });
                    let conn = http.serve_connection(TokioIo::new(stream), service);
                    let conn = graceful.watch(conn);
                    connections.spawn(async move {
                        if let Err(error) = conn.await {
                            tracing::debug!(%error, %peer, "connection closed with an error");
                        }
                        drop(share);
                    });
                }
                Err(error) if is_connection_error(&error) => {
                    tracing::debug!(%error, "a connection failed before it was accepted");
                }
                Err(error) => {
                    tracing::error!(%error, "cannot accept connections; retrying");
                    tokio::select! {
                        () = &mut signal => break,
                        () = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            }
        }
    }
    drop(listener);
    tracing::info!(
        open = graceful.count(),
        grace = ?options.shutdown_grace,
        "stopped accepting; finishing the requests in flight"
    );
    if tokio::time::timeout(options.shutdown_grace, graceful.shutdown())
        .await
        .is_ok()
    {
        tracing::info!("every connection closed");
        return Stopped::Drained;
    }
    connections.abort_all();
    let mut dropped = 0;
    while let Some(ended) = connections.join_next().await {
        if ended.is_err_and(|e| e.is_cancelled()) {
            dropped += 1;
        }
    }
    tracing::warn!(
        dropped,
        "shutdown grace passed; closed the connections still open"
    );
    Stopped::DeadlinePassed { dropped }
}

/// The answer to a request whose `Host` RFC 9112 refuses
/// ([`shop_web::request::host_problem`]): 400 in the shop's error shape, and the
/// connection closed (such a client is no browser).
fn refused_host(refused: BadRequest) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    tracing::debug!(message = %refused.0, "a request refused for its Host header");
    let mut resp = shop_web::error::WebError::from(refused).into_response();
    resp.headers_mut().insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("close"),
    );
    resp
}

/// Errors of one connection (reset before `accept` returned it), as opposed to
/// errors of the listener.
fn is_connection_error(error: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        error.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}
