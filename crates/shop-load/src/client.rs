//! One keep-alive HTTP/1.1 connection to the shop, and the back-off between attempts
//! to open one.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{ACCEPT_ENCODING, CONTENT_TYPE, COOKIE, HOST, SET_COOKIE, USER_AGENT};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;

/// What the load generator keeps of a response.
pub struct Reply {
    /// The HTTP status.
    pub status: u16,
    /// `shop_session=<token>` if the response set the session cookie.
    pub session_cookie: Option<String>,
    /// The body (read fully, so the connection can be reused), as sent.
    pub body: Bytes,
    /// The body was sent gzip-compressed (`Content-Encoding: gzip`).
    pub gzip: bool,
    /// An edge cache in front of the shop served it (it says so in
    /// `Server-Timing: edge`), from its cache or not: the page's script then
    /// names the item in its `/api/me` call, as the shop's own script does.
    pub from_edge: bool,
}

impl Reply {
    /// Whether the body, decompressed where it was sent compressed, holds `needle`.
    pub fn holds(&self, needle: &[u8]) -> bool {
        let find = |body: &[u8]| body.windows(needle.len()).any(|w| w == needle);
        if !self.gzip {
            return find(&self.body);
        }
        let mut plain = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::GzDecoder::new(&self.body[..]),
            &mut plain,
        )
        .is_ok()
            && find(&plain)
    }
}

/// The `User-Agent` of every request: a browser's, as the shoppers the load stands
/// for send (a crawler's would count its views in the ranking only), naming the
/// load generator at the end.
pub const BROWSER_AGENT: &str = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 \
     (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36 shop-load";

/// The shop's address as a connection needs it, `host:port`, from what a person
/// types: `host:port`, or a URL with nothing after the address
/// (`http://127.0.0.1:8080/`), as a browser's address bar shows it. `Err` says
/// what is wrong: the load generator speaks plain HTTP/1.1 to one address, so an
/// `https://` URL, a path or a query, a user or password, or an address with no
/// port is refused before anything is sent, not retried as connection failures
/// for the run. An IPv6 address is written in brackets (`[::1]:8080`).
pub fn target(given: &str) -> Result<String, String> {
    let trimmed = given.trim();
    let lower = trimmed.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Err(
            "the load generator speaks plain HTTP; give the shop's host:port \
             (behind TLS, its own listener's)"
                .to_owned(),
        );
    }
    let address = match lower.strip_prefix("http://") {
        Some(_) => &trimmed["http://".len()..],
        None if lower.contains("://") => {
            return Err("give host:port, or an http:// URL".to_owned());
        }
        None => trimmed,
    };
    let address = address.strip_suffix('/').unwrap_or(address);
    if address.contains(['/', '?', '#']) {
        return Err("give only the address, host:port (the load chooses its own paths)".to_owned());
    }
    if address.contains('@') {
        return Err("give only the address, host:port (no user or password)".to_owned());
    }
    if address.contains(char::is_whitespace) {
        return Err("give host:port, with no spaces".to_owned());
    }
    if address.starts_with('[') && address.ends_with(']') {
        return Err("give host:port (a port is required)".to_owned());
    }
    let (host, port) = match address.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() => (host, port),
        _ => return Err("give host:port (a port is required)".to_owned()),
    };
    let bracketed = host
        .strip_prefix('[')
        .and_then(|rest| rest.strip_suffix(']'))
        .is_some_and(|inside| inside.parse::<std::net::Ipv6Addr>().is_ok());
    if host.contains([':', '[', ']']) && !bracketed {
        return Err(
            "write an IPv6 address in brackets, [::1]:8080 (a port is required)".to_owned(),
        );
    }
    match port.parse::<u16>() {
        Ok(number) if number > 0 && port.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(format!("{host}:{number}"))
        }
        _ => Err(format!("{port:?} is not a port (1 to 65535)")),
    }
}

/// [`target`] for where the shop serves `/metrics`: also the URL `shop serve`
/// prints for it (`http://127.0.0.1:8081/metrics`).
pub fn metrics_target(given: &str) -> Result<String, String> {
    let trimmed = given.trim();
    let trimmed = trimmed.strip_suffix('/').unwrap_or(trimmed);
    match trimmed.len().checked_sub("/metrics".len()) {
        Some(at)
            if trimmed.is_char_boundary(at) && trimmed[at..].eq_ignore_ascii_case("/metrics") =>
        {
            target(&trimmed[..at])
        }
        _ => target(trimmed),
    }
}

/// How long opening a connection may take. A target that drops the handshake (a
/// firewall, a host gone from the network) would otherwise hold a virtual connection
/// for the kernel's SYN retries, about two minutes, and the run past its end.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection.
pub struct Conn {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

impl Conn {
    /// Connects to `host:port`.
    pub async fn open(target: &str) -> anyhow::Result<Self> {
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(target))
            .await
            .map_err(|_| anyhow::anyhow!("timed out after {CONNECT_TIMEOUT:?}"))
            .and_then(|connected| connected.map_err(anyhow::Error::from))
            .with_context(|| format!("cannot connect to {target}"))?;
        stream.set_nodelay(true)?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(Self {
            sender,
            host: target.to_owned(),
        })
    }

    /// The server closed the connection after an answer (`Connection: close`, an idle
    /// keep-alive timeout): open another, without counting a failure.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// Sends one request (a form body makes it a form POST) and reads the answer.
    pub async fn send(
        &mut self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        form: Option<&str>,
    ) -> anyhow::Result<Reply> {
        self.send_with(method, path, cookie, form, &[]).await
    }

    /// [`Conn::send`] with extra request headers.
    pub async fn send_with(
        &mut self,
        method: &str,
        path: &str,
        cookie: Option<&str>,
        form: Option<&str>,
        headers: &[(&str, &str)],
    ) -> anyhow::Result<Reply> {
        self.sender.ready().await?;
        let mut req = Request::builder()
            .method(Method::from_bytes(method.as_bytes())?)
            .uri(path)
            .header(HOST, &self.host)
            .header(ACCEPT_ENCODING, "gzip")
            .header(USER_AGENT, BROWSER_AGENT);
        if let Some(cookie) = cookie {
            req = req.header(COOKIE, cookie);
        }
        if form.is_some() {
            req = req.header(CONTENT_TYPE, "application/x-www-form-urlencoded");
        }
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let body = Full::new(Bytes::from(form.unwrap_or("").to_owned()));
        let resp = self.sender.send_request(req.body(body)?).await?;
        let status = resp.status().as_u16();
        let session_cookie = resp
            .headers()
            .get_all(SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with("shop_session="))
            .and_then(|v| v.split(';').next())
            .map(str::to_owned);
        let gzip = resp
            .headers()
            .get(hyper::header::CONTENT_ENCODING)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
        let from_edge = resp
            .headers()
            .get_all("server-timing")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .any(|metric| metric.trim().split(';').next() == Some("edge"));
        let body = resp.into_body().collect().await?.to_bytes();
        Ok(Reply {
            status,
            session_cookie,
            body,
            gzip,
            from_edge,
        })
    }
}

/// Exponential back-off between a virtual connection's attempts to reach the target.
///
/// Without it a connection that fails (refused: the target is down) is retried at
/// once, and a few connections make a million failed attempts a minute: load on the
/// machine that helps nothing, and a report that drowns the requests that did happen.
/// The wait doubles from [`Backoff::FIRST`] to [`Backoff::MAX`] and starts over after
/// an answer; each wait is drawn from its upper half so the connections, all refused
/// at the same moment, do not come back in lockstep.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
}

impl Backoff {
    /// The wait after the first failure: short enough that a server restarting, or a
    /// keep-alive connection closed by the server, costs almost nothing.
    pub const FIRST: Duration = Duration::from_millis(10);
    /// The longest wait: a target that comes back is driven again within a second.
    pub const MAX: Duration = Duration::from_secs(1);

    /// A back-off that has seen no failure.
    pub fn new() -> Self {
        Self { next: Self::FIRST }
    }

    /// A failure: how long to wait before the next attempt (`unit` in `[0, 1)` picks
    /// it within the upper half of the current step), and the next step doubled.
    pub fn failed(&mut self, unit: f64) -> Duration {
        let wait = self.next.mul_f64(0.5 + 0.5 * unit.clamp(0.0, 1.0));
        self.next = (self.next * 2).min(Self::MAX);
        wait
    }

    /// An answer: the next failure waits the shortest step again.
    pub fn succeeded(&mut self) {
        self.next = Self::FIRST;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets_after_an_answer() {
        let mut backoff = Backoff::new();
        let ms: Vec<u128> = (0..10).map(|_| backoff.failed(1.0).as_millis()).collect();
        assert_eq!(ms, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        assert_eq!(backoff.failed(0.0), Backoff::MAX / 2);
        backoff.succeeded();
        assert_eq!(backoff.failed(0.0), Backoff::FIRST / 2);
        assert_eq!(backoff.failed(0.5), Backoff::FIRST * 2 * 3 / 4);
    }

    #[test]
    fn a_target_is_host_port_or_an_http_url_of_one() {
        for (given, address) in [
            ("127.0.0.1:8080", "127.0.0.1:8080"),
            ("localhost:80", "localhost:80"),
            ("http://127.0.0.1:8080", "127.0.0.1:8080"),
            ("HTTP://shop.internal:8080/", "shop.internal:8080"),
            (" [::1]:8080 ", "[::1]:8080"),
            ("http://[::1]:8080/", "[::1]:8080"),
            ("127.0.0.1:08080", "127.0.0.1:8080"),
        ] {
            assert_eq!(target(given).as_deref(), Ok(address), "{given}");
        }
        for (given, address) in [
            ("http://127.0.0.1:8081/metrics", "127.0.0.1:8081"),
            ("127.0.0.1:8081", "127.0.0.1:8081"),
            ("http://127.0.0.1:8081/", "127.0.0.1:8081"),
            ("http://127.0.0.1:8081/metrics/", "127.0.0.1:8081"),
        ] {
            assert_eq!(metrics_target(given).as_deref(), Ok(address), "{given}");
        }
        assert!(metrics_target("http://127.0.0.1:8081/ops").is_err());
        for (given, says) in [
            ("https://127.0.0.1:8443", "plain HTTP"),
            ("http://127.0.0.1:8080/items/42", "only the address"),
            ("127.0.0.1:8080?x=1", "only the address"),
            ("127.0.0.1", "a port is required"),
            ("http://127.0.0.1", "a port is required"),
            ("::1", "in brackets"),
            ("2001:db8:0:0:0:0:0:1", "in brackets"),
            ("http://u:p@127.0.0.1:8080", "no user or password"),
            ("http:// 127.0.0.1:8080", "no spaces"),
            ("127.0.0.1:+80", "is not a port"),
            ("[]:80", "in brackets"),
            ("[[::1]]:80", "in brackets"),
            ("[example.com]:80", "in brackets"),
            ("[::1]", "a port is required"),
            (":8080", "a port is required"),
            ("", "a port is required"),
            ("127.0.0.1:http", "is not a port"),
            ("127.0.0.1:0", "is not a port"),
            ("127.0.0.1:65536", "is not a port"),
            ("ftp://127.0.0.1:21", "an http:// URL"),
        ] {
            let error = target(given).unwrap_err();
            assert!(error.contains(says), "{given}: {error}");
        }
    }
}
