//! The serve loop's bounds (`shop::server`): a half-sent request head is cut off
//! after the header timeout, SIGTERM stops the process within the shutdown grace
//! whatever the clients do, requests in flight at SIGTERM still get their answer,
//! and every request carries its peer's address.
//!
//! The process tests run the real `shop serve` with a 1 s header timeout and a
//! 2 s grace, and print what they measured (`--nocapture` shows it).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, ExitStatus};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::ConnectInfo;
use axum::routing::get;
use shop::server::{ServeOptions, Stopped};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::e2e::{Binary, seeded};
use crate::shop;
use shop_testapp::TestApp;

const HEADER_TIMEOUT: Duration = Duration::from_secs(1);
const GRACE: Duration = Duration::from_secs(2);
/// Scheduling, process start-up and teardown on a loaded two-core machine.
const MARGIN: Duration = Duration::from_secs(3);

fn serve_quick(shop: &TestApp) -> (crate::e2e::Served, String) {
    shop.serve(&[
        "--no-workers",
        "--header-timeout",
        &HEADER_TIMEOUT.as_secs().to_string(),
        "--shutdown-grace",
        &GRACE.as_secs().to_string(),
    ])
}

/// A connection that sent half a request head and nothing more.
fn half_sent_head(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    stream
}

/// A cart form POST whose head and first half of its body are sent; the handler
/// is running, waiting for the rest.
fn mid_request(addr: &str) -> (TcpStream, &'static [u8]) {
    let body: &'static [u8] = b"item=5&count=2";
    let mut stream = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /cart HTTP/1.1\r\nHost: {addr}\r\n\
         Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(&body[..6]).unwrap();
    (stream, &body[6..])
}

/// Reads until the server closes the connection (or `limit` passes); returns
/// what was read and when the read ended.
fn read_until_closed(stream: &mut TcpStream, limit: Duration) -> (String, Instant) {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut raw = Vec::new();
    let result = stream.read_to_end(&mut raw);
    let ended = Instant::now();
    match result {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!(
            "the connection was still open after {limit:?} ({e}); read so far: {:?}",
            String::from_utf8_lossy(&raw)
        ),
    }
    (String::from_utf8_lossy(&raw).into_owned(), ended)
}

/// Sends SIGTERM and waits for the process to exit; returns its status and how
/// long it took, or fails after `limit`.
fn terminate(mut child: crate::e2e::Served, limit: Duration) -> (ExitStatus, Duration) {
    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status, sent.elapsed());
        }
        if sent.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("shop serve was still running {limit:?} after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[tokio::test]
async fn a_half_sent_request_head_is_cut_off_after_the_header_timeout() {
    let shop = seeded(10).await;
    let (child, addr) = serve_quick(&shop);

    let started = Instant::now();
    let mut stream = half_sent_head(&addr);
    let (_, closed) = read_until_closed(&mut stream, HEADER_TIMEOUT + MARGIN);
    let lived = closed - started;
    eprintln!("a half-sent request head kept its connection open for {lived:?}");
    assert!(
        lived >= HEADER_TIMEOUT - Duration::from_millis(100),
        "closed too early: {lived:?}"
    );

    // An idle keep-alive connection is closed the same way, after its answer.
    let mut stream = TcpStream::connect(&addr).unwrap();
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let started = Instant::now();
    let (reply, closed) = read_until_closed(&mut stream, HEADER_TIMEOUT + MARGIN);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    eprintln!(
        "an idle keep-alive connection was closed after {:?}",
        closed - started
    );

    let (status, took) = terminate(child, GRACE + MARGIN);
    assert!(status.success(), "{status}");
    eprintln!("SIGTERM with no connection open: exited in {took:?}");
}

#[tokio::test]
async fn sigterm_stops_the_process_within_the_grace_whatever_clients_do() {
    let shop = seeded(10).await;
    let (child, addr) = serve_quick(&shop);
    let _half = half_sent_head(&addr);
    // Headers and half a body: the handler waits for a rest that never comes.
    let (mut stalled, _rest) = mid_request(&addr);
    std::thread::sleep(Duration::from_millis(200));

    let (status, took) = terminate(child, GRACE + MARGIN);
    eprintln!("SIGTERM with a stalled request and a half-sent head open: exited in {took:?}");
    assert!(status.success(), "{status}");
    assert!(
        took >= GRACE - Duration::from_millis(100),
        "the request in flight was not given its grace: {took:?}"
    );
    let (reply, _) = read_until_closed(&mut stalled, MARGIN);
    assert_eq!(reply, "", "the stalled request got no answer");
}

#[tokio::test]
async fn a_request_in_flight_at_sigterm_still_gets_its_answer() {
    let shop = seeded(10).await;
    let (child, addr) = serve_quick(&shop);
    let _half = half_sent_head(&addr);
    let (mut in_flight, rest) = mid_request(&addr);
    std::thread::sleep(Duration::from_millis(200));

    let sent = Instant::now();
    let ok = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        TcpStream::connect(&addr).is_err(),
        "the listener is closed at SIGTERM"
    );
    in_flight.write_all(rest).unwrap();
    let (reply, _) = read_until_closed(&mut in_flight, GRACE + MARGIN);
    assert!(reply.starts_with("HTTP/1.1 303"), "{reply}");
    assert!(
        reply.to_ascii_lowercase().contains("connection: close"),
        "{reply}"
    );

    let mut child = child;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < GRACE + MARGIN,
            "still running after SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    eprintln!(
        "SIGTERM with a request in flight (answered) and a half-sent head: exited in {:?}",
        sent.elapsed()
    );
    assert!(status.success(), "{status}");
}

#[test]
fn bad_timeouts_are_refused_with_the_flag_named() {
    for (args, env, setting) in [
        (
            vec!["serve", "--header-timeout", "0"],
            None,
            "--header-timeout",
        ),
        (
            vec!["serve", "--shutdown-grace=-1"],
            None,
            "--shutdown-grace",
        ),
        (
            vec!["serve"],
            Some(("SHOP_HEADER_TIMEOUT", "soon")),
            "--header-timeout",
        ),
        (
            vec!["serve"],
            Some(("SHOP_SHUTDOWN_GRACE", "99999")),
            "--shutdown-grace",
        ),
    ] {
        let mut cmd = shop();
        cmd.args(&args);
        if let Some((name, value)) = env {
            cmd.env(name, value);
        }
        let out = cmd.output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} {env:?}");
        assert!(stderr.contains(setting), "{args:?} {env:?}: {stderr}");
    }
}

/// The serve loop in-process, over a router that answers with the peer address
/// it was given.
async fn serve_echo(
    options: ServeOptions,
) -> (
    SocketAddr,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<Stopped>,
) {
    let app = Router::new().route(
        "/peer",
        get(|ConnectInfo(peer): ConnectInfo<SocketAddr>| async move { peer.to_string() }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(async move {
        shop::server::serve(listener, app, &options, async move {
            let _ = stopped.await;
        })
        .await
    });
    (addr, stop, server)
}

#[tokio::test]
async fn every_request_carries_its_peer_address() {
    let (addr, stop, server) = serve_echo(ServeOptions::default()).await;
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let me = stream.local_addr().unwrap();
    stream
        .write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    stream.read_to_string(&mut reply).await.unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with(&me.to_string()), "{me}: {reply}");

    stop.send(()).unwrap();
    assert_eq!(server.await.unwrap(), Stopped::Drained);
}

/// Behind proxies, only their connections are served: one from a peer outside
/// the trusted networks is closed before anything is read or answered, so no
/// client reaching the server past its proxies can name its own address.
#[tokio::test]
async fn behind_proxies_a_connection_from_any_other_peer_is_closed() {
    let ask = |addr: SocketAddr| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        // Written before the close is seen, or refused by it: either way, no answer.
        let _ = stream
            .write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await;
        let mut reply = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut reply))
            .await
            .expect("the server closes the connection")
            .map_or(String::new(), |_| {
                String::from_utf8_lossy(&reply).into_owned()
            })
    };
    for (proxies, served) in [
        ("10.0.0.0/8, fd00::/8", false),
        ("10.0.0.0/8, 127.0.0.0/8", true),
    ] {
        let options = ServeOptions {
            proxies_only: Some(proxies.parse().unwrap()),
            ..ServeOptions::default()
        };
        let (addr, stop, server) = serve_echo(options).await;
        let reply = ask(addr).await;
        assert_eq!(
            reply.starts_with("HTTP/1.1 200"),
            served,
            "{proxies}: {reply:?}"
        );
        stop.send(()).unwrap();
        assert_eq!(server.await.unwrap(), Stopped::Drained);
    }
}

/// A request with no `Host` in HTTP/1.1, or with two, is answered 400 in the
/// shop's error shape and its connection closed; HTTP/1.0 needs none.
#[tokio::test]
async fn a_request_without_its_one_host_is_refused() {
    let (addr, stop, server) = serve_echo(ServeOptions::default()).await;
    let ask = |head: &'static str| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        let mut reply = String::new();
        // Read to the end: a refused request's connection is closed by the server.
        tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut reply))
            .await
            .expect("the server closes the connection")
            .unwrap();
        reply
    };
    for head in [
        "GET /peer HTTP/1.1\r\n\r\n",
        "GET /peer HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n",
        "GET /peer HTTP/1.1\r\nHost: user@a.example\r\n\r\n",
    ] {
        let reply = ask(head).await;
        assert!(reply.starts_with("HTTP/1.1 400"), "{head:?}: {reply}");
        assert!(
            reply.contains("\"error\":\"bad_request\""),
            "{head:?}: {reply}"
        );
        assert!(
            reply.to_ascii_lowercase().contains("connection: close"),
            "{reply}"
        );
    }
    let reply = ask("GET /peer HTTP/1.0\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.0 200"), "{reply}");
    let reply = ask("GET /peer HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");

    stop.send(()).unwrap();
    assert_eq!(server.await.unwrap(), Stopped::Drained);
}

/// A request head of twice [`shop::server::MAX_HEAD_BYTES`] is refused with
/// 431 (hyper's default let one of 400 KB through); one below it is served.
#[tokio::test]
async fn a_request_head_past_its_bound_is_refused_with_431() {
    let (addr, stop, server) = serve_echo(ServeOptions::default()).await;
    let ask = |cookie_bytes: usize| async move {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        let head = format!(
            "GET /peer HTTP/1.1\r\nHost: x\r\nCookie: a={}\r\nConnection: close\r\n\r\n",
            "c".repeat(cookie_bytes)
        );
        // The server may answer and close before it has read the whole head.
        let _ = stream.write_all(head.as_bytes()).await;
        let mut reply = Vec::new();
        let _ = stream.read_to_end(&mut reply).await;
        String::from_utf8_lossy(&reply).into_owned()
    };
    let most = shop::server::MAX_HEAD_BYTES;
    for (cookie_bytes, status) in [
        (16 * 1024, "200"),
        (most - 1024, "200"),
        (2 * most, "431"),
        (300 * 1024, "431"),
    ] {
        let reply = ask(cookie_bytes).await;
        let head = reply.lines().next().unwrap_or("");
        assert!(
            head.starts_with(&format!("HTTP/1.1 {status}")),
            "{cookie_bytes}: {head}"
        );
    }

    stop.send(()).unwrap();
    assert_eq!(server.await.unwrap(), Stopped::Drained);
}

#[tokio::test]
async fn connections_still_open_at_the_deadline_are_dropped() {
    let options = ServeOptions {
        header_timeout: Duration::from_secs(60),
        shutdown_grace: Duration::from_millis(300),
        ..ServeOptions::default()
    };
    let (addr, stop, server) = serve_echo(options).await;
    let mut half = tokio::net::TcpStream::connect(addr).await.unwrap();
    half.write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;

    let started = Instant::now();
    stop.send(()).unwrap();
    let stopped = tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("serve returns after the grace")
        .unwrap();
    let took = started.elapsed();
    assert_eq!(stopped, Stopped::DeadlinePassed { dropped: 1 });
    assert!(took >= Duration::from_millis(250), "{took:?}");
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(2), half.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the connection is closed"
    );
}

/// At the connection cap, a new connection waits (unanswered) until one of the
/// open ones closes; then it is served.
#[tokio::test]
async fn at_the_connection_cap_a_new_connection_waits_for_one_to_close() {
    let options = ServeOptions {
        header_timeout: Duration::from_secs(60),
        max_connections: 3,
        ..ServeOptions::default()
    };
    let (addr, stop, server) = serve_echo(options).await;
    // Three idle connections hold every place (each sent half a head).
    let mut idle = Vec::new();
    for _ in 0..3 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        idle.push(s);
    }
    let mut fourth = tokio::net::TcpStream::connect(addr).await.unwrap();
    fourth
        .write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 12];
    let waited = tokio::time::timeout(Duration::from_millis(500), fourth.read(&mut first)).await;
    assert!(waited.is_err(), "answered past the cap: {waited:?}");
    // One closes: the waiting one is accepted and answered.
    drop(idle.pop());
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), fourth.read_to_string(&mut reply))
        .await
        .expect("served once a place was free")
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    drop(idle);
    stop.send(()).unwrap();
    server.await.unwrap();
}

/// One client address holds at most its share of the connections: one more is
/// closed at once (not queued), while another address is served; a place given
/// back is the client's again.
#[tokio::test]
async fn one_address_holds_only_its_share_of_the_connections() {
    let options = ServeOptions {
        header_timeout: Duration::from_secs(60),
        max_connections: 10,
        max_connections_per_address: Some(2),
        ..ServeOptions::default()
    };
    let (addr, stop, server) = serve_echo(options).await;
    let get = b"GET /peer HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    // Two idle connections from 127.0.0.1 hold its share (each sent half a head).
    let mut idle = Vec::new();
    for _ in 0..2 {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /peer HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        idle.push(s);
    }
    // A third from the same address is closed at once, unanswered.
    let mut third = tokio::net::TcpStream::connect(addr).await.unwrap();
    let _ = third.write_all(get).await;
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), third.read_to_end(&mut rest))
        .await
        .expect("closed at once, not left waiting");
    assert!(
        matches!(read, Ok(0) | Err(_)),
        "closed without an answer: {:?}",
        String::from_utf8_lossy(&rest)
    );
    // Another address (127.0.0.2, loopback too) is served.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
    let mut other = socket.connect(addr).await.unwrap();
    other.write_all(get).await.unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), other.read_to_string(&mut reply))
        .await
        .expect("another address is served")
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.ends_with("127.0.0.2") || reply.contains("127.0.0.2:"),
        "{reply}"
    );
    // A place given back is taken again (the server sees the close as it comes).
    drop(idle.pop());
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut again = tokio::net::TcpStream::connect(addr).await.unwrap();
        let _ = again.write_all(get).await;
        let mut reply = String::new();
        let _ =
            tokio::time::timeout(Duration::from_secs(5), again.read_to_string(&mut reply)).await;
        if reply.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed place was never given back"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    drop(idle);
    stop.send(()).unwrap();
    server.await.unwrap();
}

/// With `--drain-seconds`, SIGTERM leaves the server serving while both its
/// `/healthz` answer 503 `"draining"` (a balancer takes it out before it stops
/// taking requests; the operators' one still says how each part is); a second
/// signal ends the drain, and it stops within the grace.
#[tokio::test]
async fn a_draining_server_serves_while_its_health_says_draining() {
    use crate::e2e::{eventually, request};
    let shop = seeded(10).await;
    let (child, addr, metrics) = crate::e2e::serve_with_metrics(
        shop.shop(),
        &[
            "--no-workers",
            "--shutdown-grace",
            &GRACE.as_secs().to_string(),
            // Far longer than the test: only the second signal ends it.
            "--drain-seconds",
            "600",
        ],
    );
    assert_eq!(request(&addr, "GET", "/healthz", None, None).status, 200);
    let pid = child.id().to_string();
    let term = || {
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
    };
    term();
    for at in [&addr, &metrics] {
        eventually(
            &format!("{at}'s /healthz says draining"),
            || request(at, "GET", "/healthz", None, None),
            |reply| reply.status == 503 && reply.body.contains("\"draining\""),
        );
    }
    // The operators' answer still says how each part is.
    let parts = request(&metrics, "GET", "/healthz", None, None).body;
    assert!(
        parts.contains("\"redis\":true") && parts.contains("\"database\":\"ok\""),
        "{parts}"
    );
    // Still serving, new connections too.
    assert_eq!(request(&addr, "GET", "/items/3", None, None).status, 200);
    let mut child = child;
    assert!(child.try_wait().unwrap().is_none(), "still running");
    let sent = Instant::now();
    term();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            sent.elapsed() < GRACE + MARGIN,
            "still running after the second SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(status.success(), "{status}");
}

/// A burst of new connections waits in the listener's queue until the server
/// accepts them: 600 at once to a listener that accepts none all connect (with
/// tokio's default queue of 128 the kernel dropped the SYNs past it, and those
/// clients waited, here until their deadline).
#[tokio::test]
async fn a_burst_of_connections_waits_in_the_listen_queue() {
    const BURST: usize = 600;
    let most: usize = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    if most < BURST + 1 {
        let why = format!("net.core.somaxconn is {most}: the kernel queues fewer than {BURST}");
        assert!(std::env::var("CI").as_deref() != Ok("true"), "{why}");
        eprintln!("SKIPPED a_burst_of_connections_waits_in_the_listen_queue: {why}");
        return;
    }
    let listener = shop::server::listen("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut connects = tokio::task::JoinSet::new();
    for _ in 0..BURST {
        connects.spawn(async move {
            let connect = tokio::net::TcpStream::connect(addr);
            tokio::time::timeout(Duration::from_secs(5), connect).await
        });
    }
    let mut open = Vec::new();
    let mut waited = 0;
    while let Some(connected) = connects.join_next().await {
        match connected.unwrap() {
            Ok(stream) => open.push(stream.unwrap()),
            Err(_) => waited += 1,
        }
    }
    assert_eq!(
        (open.len(), waited),
        (BURST, 0),
        "connected, and left waiting"
    );
    drop(listener);
}

/// `shop serve` with `trust_forwarded_for` in its settings file and
/// `--trusted-proxies 10.0.0.0/8`: the public port closes a connection from
/// 127.0.0.1, no proxy of its; the operators' port still answers one;
/// `--trusted-proxies` alone, or a bad network, is refused at start with a
/// message naming it.
#[tokio::test]
async fn serve_behind_proxies_takes_connections_from_them_alone() {
    let shop = seeded(10).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.toml");
    std::fs::write(&file, "[web]\ntrust_forwarded_for = true\n").unwrap();
    let config = file.display().to_string();
    let (child, addr, metrics, log) = crate::e2e::serve_logged(
        shop.shop(),
        &[
            "--no-workers",
            "--config",
            &config,
            "--trusted-proxies",
            "10.0.0.0/8",
        ],
    );
    let ask = |addr: &str| {
        let mut stream = TcpStream::connect(addr).unwrap();
        let _ = stream.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        read_until_closed(&mut stream, MARGIN).0
    };
    assert_eq!(ask(&addr), "", "closed, unanswered");
    // Bound to loopback with no loopback proxy: said at start (its log read
    // as it comes).
    let deadline = Instant::now() + MARGIN;
    while !log
        .lock()
        .unwrap()
        .iter()
        .any(|line| line.contains("every connection to it will be closed"))
    {
        assert!(Instant::now() < deadline, "{:?}", log.lock().unwrap());
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        ask(&metrics).starts_with("HTTP/1.1 200"),
        "the operators' port answers"
    );
    let (status, _) = terminate(child, GRACE + MARGIN);
    assert!(status.success(), "{status}");

    for (flags, says) in [
        (
            &["--trusted-proxies", "10.0.0.0/8"][..],
            "--trust-forwarded-for",
        ),
        (
            &["--trust-forwarded-for", "--trusted-proxies", "10.0.0.0/33"][..],
            "10.0.0.0/33",
        ),
    ] {
        let out = shop.shop().arg("serve").args(flags).output().unwrap();
        assert!(!out.status.success(), "{flags:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(says), "{flags:?}: {stderr}");
    }
}
